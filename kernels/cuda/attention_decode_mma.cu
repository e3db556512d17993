/* Decode attention on the tensor cores over bf16 or FP8 pools: the call
 * kn_attention_cuda sends here when the backend's attention precision is
 * bf16, the pools are bf16 or FP8 e4m3 (rows of codes + fp32 scale; see
 * DecTile's F8 fields for how those rows, only 4-byte aligned, still move
 * as 16-byte copies), head_dim is 64 or 128 and every sequence has
 * at most 16 query vectors (rows x GQA group: one decode row of GPT-OSS's
 * or Qwen3's 8-head groups, or two speculative rows). Same function as
 * attention.cu's split-KV decode kernel (read its header for the sink rule
 * and the query vectors), with attention_mma.cu's precision: Q and P
 * rounded to bf16, the bf16 K and V used as they are, fp32 softmax state
 * and accumulation.
 *
 * Why a kernel of its own. Decode reads every cached K/V byte once and does
 * G (8) multiply-adds per element for Q K^T and G for P V: at 4.25 TB/s of
 * bf16 that is ~34 TFLOP/s, half of the H200's fp32 FFMA peak, so the fp32
 * split-KV kernel (one key per lane, fp32 shared tiles, a block barrier per
 * 32 keys, 8-byte loads of bf16) is bound by its arithmetic and barriers,
 * not by memory. Here the products run on mma.sync m16n8k16 (a GQA group
 * is one 16-row A operand, half of it padding for G = 8: the tensor cores
 * have ample room), and the bytes move as 16-byte cp.async copies straight
 * from the pages into shared memory.
 *
 * Work split. A block is one (sequence, KV head, split) and 4 warps; each
 * warp walks its own tiles of NK keys (32 for D = 64, 16 for D = 128: 4 KB
 * of K and 4 KB of V each) with its own online-softmax state and a
 * two-stage cp.async ring in its own shared memory, so the main loop has no
 * block barrier. The 4 warp states merge through shared memory at the end,
 * into the output (one split) or into the split's partial state for
 * kn_cuda_attn_split_combine. The split count comes from the host (sized to
 * fill the GPU for the batch's longest sequence); each block finds its key
 * range on the device from its own sequence's kv_len: splits cut the
 * sequence's visible keys into equal runs of whole tiles, so short and long
 * sequences are both spread over all splits, and a launch sized for a
 * larger length than the sequences have is still correct (empty splits
 * store an empty state).
 *
 * Operand layouts (mma.cuh; g = lane / 4, t = lane % 4).
 *   S = Q K^T: A = Q (16 vectors x 16 dims per k-step), B = K^T (16 dims x
 *   8 keys): lane (g, t) supplies key g of each 8-key n-tile. The k (dim)
 *   order inside the products is free as long as Q and K agree, so each
 *   lane reads whole 16-byte chunks t, t + 4, ... of its key's row (chunk
 *   = 8 dims), and k-step kk uses words 2kk and 2kk + 1 of the lane's
 *   chunks as b0 and b1; the Q registers are built with the same map
 *   (dm_dim). K rows sit D + 32 elements apart in shared memory, so the 8
 *   lanes of a quarter-warp (two keys x 4 chunks) hit all 32 banks once.
 *   O = P V: two adjacent 8-key C tiles of S are one 16-key A fragment of
 *   P (as in attention_mma.cu); V's B fragments come from ldmatrix .trans
 *   on rows D + 8 elements apart (conflict-free).
 * Keys past the range or on unmapped pages are zero-filled (cp.async
 * src-size 0) and masked, so an unwritten pool slot never reaches P V. */
#include <cuda_bf16.h>
#include <math.h>
#include "kernels/cuda/attention_decode_mma.cuh"
#include "kernels/cuda/attention_decode_tile.cuh"
#include "kernels/cuda/attention_setup.cuh"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/paged_kv.cuh"
extern "C" {
#include "kernels/attention.h"
}

namespace {

template <int D> struct DecTile {
    static const int NK = D == 64 ? 32 : 16; /* keys per warp tile */
    static const int LDK = D + 32;           /* K row stride (bf16): conflict-free 16-byte reads */
    static const int LDV = D + 8;            /* V row stride (bf16): conflict-free ldmatrix */
    static const int STAGE = NK * (LDK + LDV);
    static const int CHUNKS = NK * D / 8 / 32; /* 16-byte copies per lane per tensor per tile */
    static const size_t RING_BYTES = (size_t)DEC_WARPS * 2 * STAGE * sizeof(__nv_bfloat16);
    /* the warp states merged at the end reuse the ring */
    static const size_t MERGE_BYTES = (size_t)DEC_WARPS * DEC_ROWS * (D + 2) * sizeof(float);
    static const size_t BYTES = RING_BYTES > MERGE_BYTES ? RING_BYTES : MERGE_BYTES;
    /* FP8 pools: a row is D codes + 4 bytes of scale, so rows start 4-byte
     * aligned only. Each key's row comes in as the RAWC 16-byte chunks
     * that cover it (D % 16 == 0: D + 4 bytes from a shift of 0, 4, 8 or
     * 12 always end in chunk D / 16), neighbouring keys' shared chunks
     * served by L2; the warp then widens the codes to bf16 tiles laid out
     * as above (codes exact in bf16, the row scales applied in fp32 to the
     * scores and to P). Per warp: two raw stages (K, V), the bf16 K and V
     * tile, per stage each key's shift (-1: not mapped), the K and V
     * scales. */
    static const int RAWC = D / 16 + 1;
    static const int RAWB = RAWC * 16;
    static const int RAW_STAGE = 2 * NK * RAWB;
    static const int F8_TILE = NK * (LDK + LDV) * 2;
    static const int F8_WARP = 2 * RAW_STAGE + F8_TILE + 2 * NK * 4 + 2 * NK * 4;
    static const size_t F8_RING_BYTES = (size_t)DEC_WARPS * F8_WARP;
    static const size_t F8_BYTES = F8_RING_BYTES > MERGE_BYTES ? F8_RING_BYTES : MERGE_BYTES;
};

/* The physical dim of the first element of word `wi` (a bf16 pair) of lane
 * quad position t's chunks: chunk t + 4 * (wi / 4), word wi % 4. */
__device__ __forceinline__ int dm_dim(int t, int wi)
{
    return 8 * (t + 4 * (wi / 4)) + 2 * (wi % 4);
}

/* Copies tile keys [j0, j0 + NK) of the warp's range (keys >= kend and
 * unmapped ones as zeros) into one ring stage. */
template <int D>
__device__ __forceinline__ void dm_load_tile(const DecArgs &a, const __nv_bfloat16 *kp,
                                             const __nv_bfloat16 *vp, __nv_bfloat16 *Ks,
                                             __nv_bfloat16 *Vs, int s, int kvh, int j0, int kend,
                                             int lane)
{
    typedef DecTile<D> T;
    const int CPR = D / 8; /* 16-byte chunks per row */
#pragma unroll
    for (int it = 0; it < T::CHUNKS; it++) {
        const int idx = lane + 32 * it, key = idx / CPR, c = idx - key * CPR;
        const int j = j0 + key;
        long long off = j < kend ? paged_kv_row(a.page_table, a.max_pages, a.n_pages, s, j, kvh,
                                                a.n_kv_heads, D, a.page_size)
                                 : -1;
        const int bytes = off >= 0 ? 16 : 0;
        if (off < 0)
            off = 0;
        kn_cp_async16((uint32_t)__cvta_generic_to_shared(Ks + key * T::LDK + c * 8), kp + off + c * 8,
                      bytes);
        kn_cp_async16((uint32_t)__cvta_generic_to_shared(Vs + key * T::LDV + c * 8), vp + off + c * 8,
                      bytes);
    }
}

/* FP8: copies the chunks covering tile keys [j0, j0 + NK)'s rows (keys >=
 * kend and unmapped ones: nothing, shift -1) into one raw stage. The last
 * chunk of the pool's last row is cut at the pool's end (cp.async
 * src-size), so no byte past the pool is read. */
template <int D>
__device__ __forceinline__ void dm_load_tile_f8(const DecArgs &a, unsigned char *raw, int *shift, int s,
                                                int kvh, int j0, int kend, int lane)
{
    typedef DecTile<D> T;
    const unsigned char *kp = (const unsigned char *)a.k_pool, *vp = (const unsigned char *)a.v_pool;
    const int N = T::NK * T::RAWC;
#pragma unroll
    for (int it = 0; it < (N + 31) / 32; it++) {
        const int idx = lane + 32 * it;
        if (idx < N) {
            const int key = idx / T::RAWC, c = idx - key * T::RAWC, j = j0 + key;
            const long long off = j < kend ? paged_kv_row(a.page_table, a.max_pages, a.n_pages, s, j, kvh,
                                                          a.n_kv_heads, D + 4, a.page_size)
                                           : -1;
            long long src = off >= 0 ? (off & ~15LL) + 16 * c : 0;
            const long long left = a.pool_bytes - src;
            const int bytes = off >= 0 ? (left < 16 ? (int)left : 16) : 0;
            if (bytes <= 0)
                src = 0;
            unsigned char *dk = raw + key * T::RAWB + 16 * c;
            kn_cp_async16((uint32_t)__cvta_generic_to_shared(dk), kp + src, bytes > 0 ? bytes : 0);
            kn_cp_async16((uint32_t)__cvta_generic_to_shared(dk + T::NK * T::RAWB), vp + src,
                          bytes > 0 ? bytes : 0);
        }
    }
    if (lane < T::NK) {
        const int j = j0 + lane;
        const long long off = j < kend ? paged_kv_row(a.page_table, a.max_pages, a.n_pages, s, j, kvh,
                                                      a.n_kv_heads, D + 4, a.page_size)
                                       : -1;
        shift[lane] = off >= 0 ? (int)(off & 15) : -1;
    }
}

/* FP8: widens one raw stage's codes into the bf16 K and V tiles (unmapped
 * keys as zeros) and its row scales into ksc / vsc (0 when unmapped). */
template <int D>
__device__ __forceinline__ void dm_widen_f8(const unsigned char *raw, const int *shift, __nv_bfloat16 *Ks,
                                            __nv_bfloat16 *Vs, float *ksc, float *vsc, int lane)
{
    typedef DecTile<D> T;
    const int U = D / 4; /* 4-code words per row */
#pragma unroll
    for (int it = 0; it < T::NK * U / 32; it++) {
        const int idx = lane + 32 * it, key = idx / U, u = idx - key * U;
        const int sh = shift[key];
        uint32_t kc = 0, vc = 0;
        if (sh >= 0) {
            const unsigned char *r = raw + key * T::RAWB + sh + 4 * u;
            kc = *(const uint32_t *)r;
            vc = *(const uint32_t *)(r + T::NK * T::RAWB);
        }
        const float2 k0 = kv_e4m3x2(kc & 0xffffu), k1 = kv_e4m3x2(kc >> 16);
        const float2 v0 = kv_e4m3x2(vc & 0xffffu), v1 = kv_e4m3x2(vc >> 16);
        *(uint2 *)(Ks + key * T::LDK + 4 * u) = make_uint2(kn_pack_bf16(k0.x, k0.y), kn_pack_bf16(k1.x, k1.y));
        *(uint2 *)(Vs + key * T::LDV + 4 * u) = make_uint2(kn_pack_bf16(v0.x, v0.y), kn_pack_bf16(v1.x, v1.y));
    }
    if (lane < T::NK) {
        const int sh = shift[lane];
        const unsigned char *r = raw + lane * T::RAWB + sh + D;
        ksc[lane] = sh >= 0 ? *(const float *)r : 0.f;
        vsc[lane] = sh >= 0 ? *(const float *)(r + T::NK * T::RAWB) : 0.f;
    }
}

template <int D, bool F8>
__global__ void __launch_bounds__(DEC_THREADS)
attn_decode_mma_kernel(DecArgs a)
{
    typedef DecTile<D> T;
    const int NK = T::NK, NT = NK / 8, KS = D / 16, DN = D / 8;
    extern __shared__ __align__(16) __nv_bfloat16 dm_smem[];
    const __nv_bfloat16 *kp = (const __nv_bfloat16 *)a.k_pool, *vp = (const __nv_bfloat16 *)a.v_pool;

    const int s = blockIdx.z, kvh = blockIdx.y, split = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int q0 = a.q_offset[s], nq = a.q_offset[s + 1] - q0;
    const int G = a.group, nvec = min(nq * G, DEC_ROWS);
    const int first_pos = a.kv_len[s] - nq;

    /* This split's keys: the visible range cut into n_splits runs of
     * whole tiles. */
    int kbeg, kend, tile0;
    dec_split_range<T::NK, 1>(a, first_pos, nvec, split, &kbeg, &kend, &tile0);

    /* Q (times scale*log2 e) as bf16 A fragments, rows g and g + 8, in
     * the K fragments' dim order (dm_dim). */
    uint32_t qa[KS][4];
    dec_load_q<D>(a, qa, q0, kvh, nvec, g, t, [](int tq, int wi) { return dm_dim(tq, wi); });

    int pos[2];
    float m[2], l[2];
#pragma unroll
    for (int i = 0; i < 2; i++)
        kn_attn_row_init(a, kvh, g + 8 * i, nvec, first_pos, split == 0 && w == 0, t == 0, pos[i], m[i],
                         l[i]);
    float o[DN][4];
#pragma unroll
    for (int n = 0; n < DN; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;

    __nv_bfloat16 *ring = dm_smem + (size_t)w * 2 * T::STAGE;
    /* FP8: this warp's raw stages, bf16 tile, shifts and scales */
    unsigned char *f8 = (unsigned char *)dm_smem + (size_t)w * T::F8_WARP;
    __nv_bfloat16 *f8K = (__nv_bfloat16 *)(f8 + 2 * T::RAW_STAGE), *f8V = f8K + NK * T::LDK;
    int *f8shift = (int *)(f8 + 2 * T::RAW_STAGE + T::F8_TILE);
    float *ksc = (float *)(f8shift + 2 * NK), *vsc = ksc + NK;
    const int n_tiles = kend > kbeg ? (kend - kbeg + NK - 1) / NK : 0;
    const int mine = n_tiles > w ? (n_tiles - w + DEC_WARPS - 1) / DEC_WARPS : 0;
    if (mine > 0) {
        if constexpr (F8)
            dm_load_tile_f8<D>(a, f8, f8shift, s, kvh, kbeg + w * NK, kend, lane);
        else
            dm_load_tile<D>(a, kp, vp, ring, ring + NK * T::LDK, s, kvh, kbeg + w * NK, kend, lane);
    }
    kn_cp_async_commit();
    for (int i = 0; i < mine; i++) {
        const int j0 = kbeg + (w + DEC_WARPS * i) * NK;
        if (i + 1 < mine) {
            const int nx = (i + 1) & 1;
            if constexpr (F8) {
                dm_load_tile_f8<D>(a, f8 + nx * T::RAW_STAGE, f8shift + nx * NK, s, kvh, j0 + DEC_WARPS * NK,
                                   kend, lane);
            } else {
                __nv_bfloat16 *nb = ring + nx * T::STAGE;
                dm_load_tile<D>(a, kp, vp, nb, nb + NK * T::LDK, s, kvh, j0 + DEC_WARPS * NK, kend, lane);
            }
        }
        kn_cp_async_commit();
        kn_cp_async_wait<1>();
        __syncwarp();
        const __nv_bfloat16 *Ks = ring + (i & 1) * T::STAGE, *Vs = Ks + NK * T::LDK;
        if constexpr (F8) {
            dm_widen_f8<D>(f8 + (i & 1) * T::RAW_STAGE, f8shift + (i & 1) * NK, f8K, f8V, ksc, vsc, lane);
            __syncwarp();
            Ks = f8K;
            Vs = f8V;
        }

        float sc[NT][4];
#pragma unroll
        for (int n = 0; n < NT; n++) {
            sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
            uint32_t kb[D / 8];
            const __nv_bfloat16 *kr = Ks + (n * 8 + g) * T::LDK;
#pragma unroll
            for (int c = 0; c < D / 32; c++) {
                uint4 u = *(const uint4 *)(kr + 8 * (t + 4 * c));
                kb[4 * c] = u.x, kb[4 * c + 1] = u.y, kb[4 * c + 2] = u.z, kb[4 * c + 3] = u.w;
            }
#pragma unroll
            for (int kk = 0; kk < KS; kk++)
                kn_mma_bf16(sc[n], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], kb[2 * kk], kb[2 * kk + 1]);
        }
        if constexpr (F8) /* q . code times the key's row scale (0 unmapped: masked) */
            dec_scale_by_key<NT>(sc, ksc, t);
        dec_softmax_tile<NT, DN>(a, sc, pos, m, l, o, j0, kend, t);
        if constexpr (F8) /* P times each key's V row scale: P V over the codes */
            dec_scale_by_key<NT>(sc, vsc, t);
#pragma unroll
        for (int kk = 0; kk < NK / 16; kk++) {
            const uint32_t p0 = kn_pack_bf16(sc[2 * kk][0], sc[2 * kk][1]);
            const uint32_t p1 = kn_pack_bf16(sc[2 * kk][2], sc[2 * kk][3]);
            const uint32_t p2 = kn_pack_bf16(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
            const uint32_t p3 = kn_pack_bf16(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
            const int mi = lane >> 3, r8 = lane & 7;
#pragma unroll
            for (int n0 = 0; n0 < D; n0 += 16) {
                uint32_t vb[4];
                kn_ldmatrix_x4_trans(vb, Vs + (kk * 16 + (mi & 1) * 8 + r8) * T::LDV + n0 + (mi >> 1) * 8);
                kn_mma_bf16(o[n0 / 8], p0, p1, p2, p3, vb[0], vb[1]);
                kn_mma_bf16(o[n0 / 8 + 1], p0, p1, p2, p3, vb[2], vb[3]);
            }
        }
        __syncwarp(); /* this stage is refilled two tiles on */
    }
    kn_cp_async_wait<0>();

    dec_merge_store<D>(a, (float *)dm_smem, o, m, l, q0, kvh, nvec, split);
}

template <int D, bool F8>
int launch_decode_mma(const kn_backend *be, const char *op, const DecArgs &a, const kn_seq_batch *b)
{
    const size_t bytes = F8 ? DecTile<D>::F8_BYTES : DecTile<D>::BYTES;
    KN_CUDA_TRY(op, cudaFuncSetAttribute(attn_decode_mma_kernel<D, F8>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    dim3 grid(a.n_splits, a.n_kv_heads, b->n_seqs);
    attn_decode_mma_kernel<D, F8><<<grid, DEC_THREADS, bytes, kn_cuda_stream(be)>>>(a);
    KN_CUDA_LAUNCH_CHECK(op, "attn_decode_mma_kernel");
    return TN_OK;
}

/* Merges the splits of one (row, head) of the batch (this file's decode
 * kernel and attention.cu's split kernel leave the same partial states):
 * each split's (m, l, o) rescaled to the common max (the sink is inside
 * split 0's state). All loads of a phase are independent and spread over
 * the block: the splits' (m, l) one per thread (max, then the rescaled l summed, through shared
 * memory), then COMB_THREADS / D groups of threads each summing every
 * G-th split's o for all D outputs, and the groups' sums added in group
 * order. (A thread looping over the splits serially paid an L2 round trip
 * per few splits: 11 us for 32 splits in s7b's profile.) Shared memory:
 * n_splits + COMB_THREADS floats; D <= COMB_THREADS. */
const int COMB_THREADS = 256;

__device__ __forceinline__ float comb_block_reduce(float v, bool is_max, float *sh)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float o = __shfl_xor_sync(0xffffffffu, v, off);
        v = is_max ? fmaxf(v, o) : v + o;
    }
    __syncthreads(); /* sh free from any earlier use */
    if (lane == 0)
        sh[warp] = v;
    __syncthreads();
    v = sh[0];
    for (int w = 1; w < COMB_THREADS / 32; w++)
        v = is_max ? fmaxf(v, sh[w]) : v + sh[w];
    return v;
}

__global__ void __launch_bounds__(COMB_THREADS)
attn_split_combine_kernel(float *out, const float *part_o, const float *part_ml, int n_splits, int D)
{
    extern __shared__ float comb_sh[]; /* [n_splits] split scales, then [COMB_THREADS] */
    float *sc = comb_sh, *sh = comb_sh + n_splits;
    const size_t oh = blockIdx.x;
    const float *ml = part_ml + oh * n_splits * 2;
    const int tid = threadIdx.x;
    float m = -INFINITY;
    for (int i = tid; i < n_splits; i += COMB_THREADS)
        m = fmaxf(m, ml[2 * i]);
    const float mmax = comb_block_reduce(m, true, sh);
    float l = 0.f;
    for (int i = tid; i < n_splits; i += COMB_THREADS) {
        const float mi = ml[2 * i];
        const float w = mmax != -INFINITY && mi != -INFINITY ? exp2f(mi - mmax) : 0.f;
        sc[i] = w;
        l += ml[2 * i + 1] * w;
    }
    const float lsum = comb_block_reduce(l, false, sh); /* its barriers publish sc */
    const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
    const int groups = COMB_THREADS / D, g = tid / D, d = tid % D;
    float acc = 0.f;
    if (g < groups) {
        const float *po = part_o + oh * n_splits * D + d;
#pragma unroll 8
        for (int i = g; i < n_splits; i += groups)
            acc += po[(size_t)i * D] * sc[i];
    }
    __syncthreads(); /* sh's last reads done */
    sh[tid] = acc;
    __syncthreads();
    if (tid < D) {
        float t = sh[tid];
        for (int h = 1; h < groups; h++)
            t += sh[h * D + tid];
        out[oh * D + tid] = t * inv;
    }
}

} // namespace

int kn_cuda_attn_split_combine(const kn_backend *be, const char *op, float *out, const float *part_o,
                               const float *part_ml, size_t n_row_heads, int n_splits, int head_dim)
{
    if (head_dim > COMB_THREADS)
        return kn_arg_error(op, "split combine takes head_dim <= %d, got %d", COMB_THREADS, head_dim);
    attn_split_combine_kernel<<<(unsigned)n_row_heads, COMB_THREADS, (size_t)(n_splits + COMB_THREADS) * sizeof(float),
                                kn_cuda_stream(be)>>>(out, part_o, part_ml, n_splits, head_dim);
    KN_CUDA_LAUNCH_CHECK(op, "attn_split_combine_kernel");
    return TN_OK;
}

int kn_cuda_attn_split_parts(const kn_backend *be, const char *op, size_t n_row_heads, int n_splits, int head_dim,
                             float **part_o, float **part_ml)
{
    *part_o = *part_ml = NULL;
    if (n_splits <= 1)
        return TN_OK;
    const size_t parts = n_row_heads * (size_t)n_splits;
    *part_o = (float *)kn_cuda_tmp_alloc(be, op, parts * head_dim * sizeof(float));
    *part_ml = (float *)kn_cuda_tmp_alloc(be, op, parts * 2 * sizeof(float));
    if (!*part_o || !*part_ml) {
        kn_cuda_tmp_free(be, *part_o);
        kn_cuda_tmp_free(be, *part_ml);
        *part_o = *part_ml = NULL;
        return TN_ERR_NOMEM;
    }
    return TN_OK;
}

int kn_cuda_attn_split_finish(const kn_backend *be, const char *op, int rc, float *out, float *part_o,
                              float *part_ml, size_t n_row_heads, int n_splits, int head_dim)
{
    if (rc == TN_OK && n_splits > 1)
        rc = kn_cuda_attn_split_combine(be, op, out, part_o, part_ml, n_row_heads, n_splits, head_dim);
    kn_cuda_tmp_free(be, part_o);
    kn_cuda_tmp_free(be, part_ml);
    return rc;
}

bool kn_cuda_attention_decode_mma_fits(const kn_seq_batch *b, int n_heads, int n_kv_heads, int head_dim,
                                       const float *out, const float *q, const kn_kv_pools *pools)
{
    long long nvec_max = (long long)b->max_q_len * (n_heads / n_kv_heads);
    return (pools->dtype == KN_BF16 || pools->dtype == KN_FP8_E4M3) && (head_dim == 64 || head_dim == 128) && nvec_max >= 1 &&
           nvec_max <= DEC_ROWS && kn_cuda_aligned16(out) && kn_cuda_aligned16(q) &&
           kn_cuda_aligned16(pools->k) && kn_cuda_aligned16(pools->v);
}

int kn_cuda_decode_mma_splits(const kn_backend *be, int n_seqs, int n_kv_heads, int max_kv_len)
{
    /* Enough blocks for two per multiprocessor twice over (the ring lets
     * two blocks share one), each split keeping DEC_MIN_SPLIT_KEYS keys. */
    const long long base = (long long)n_seqs * n_kv_heads;
    const long long want = 4LL * kn_cuda_ctx_of(be)->sm_count;
    if (base >= want || max_kv_len <= 2 * DEC_MIN_SPLIT_KEYS)
        return 1;
    long long by_blocks = (want + base - 1) / base;
    long long by_len = max_kv_len / DEC_MIN_SPLIT_KEYS;
    long long n = by_blocks < by_len ? by_blocks : by_len;
    return n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
}

int kn_cuda_attention_decode_mma(const kn_backend *be, const char *op, float *out, const float *q,
                                 const kn_kv_pools *pools, const kn_seq_batch *b, int n_heads,
                                 int n_kv_heads, int head_dim, int page_size, float scale,
                                 const float *sinks, int window)
{
    const bool f8 = pools->dtype == KN_FP8_E4M3;
    int rc = dec_run(be, op, out, q, pools, b, n_heads, n_kv_heads, head_dim, page_size, scale, sinks, window,
                     [&](const DecArgs &a) {
                         return head_dim == 64 ? (f8 ? launch_decode_mma<64, true>(be, op, a, b)
                                                     : launch_decode_mma<64, false>(be, op, a, b))
                                               : (f8 ? launch_decode_mma<128, true>(be, op, a, b)
                                                     : launch_decode_mma<128, false>(be, op, a, b));
                     });
    if (rc == TN_OK)
        kn_cuda_ctx_of(be)->attn_decode_mma_launches++;
    return rc;
}
