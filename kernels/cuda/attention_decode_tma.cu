/* Decode attention over bf16 pools with TMA copies: the call
 * kn_attention_cuda sends here, ahead of attention_decode_mma.cu, when the
 * backend's attention precision is bf16, the pools are bf16, head_dim is 64
 * or 128, the page size a multiple of 16 and every sequence has at most 16
 * query vectors. Same function and precision as attention_decode_mma.cu
 * (read its header: the sink rule, Q and P rounded to bf16, fp32 softmax
 * state and sums, the block / warp / split design); only the way K and V
 * reach shared memory differs.
 *
 * Why. At batch 128, context 8192 the cp.async kernel read GPT-OSS-20B's
 * full layers at 2.75 TB/s on an H100 (82% of its peak, s11run1) but at
 * about 2.8 TB/s on the H200 too (9.3 ms a step for 25.8 GB: 66% of the
 * H200's 4.23 TB/s copy ceiling, s10run1): the same rate on a GPU with 40%
 * more bandwidth, so it is bound by the bytes it keeps in flight, not by
 * HBM. Each lane there issues 16 cp.async copies of 16 bytes per 32-key
 * tile, each after its own page-table lookup, and a warp has one tile in
 * flight while it computes the previous (two stages of 10.5 KB, two
 * blocks an SM). Here one lane of each warp issues a tile's copies as four
 * TMA boxes (K and V, per 64 dims), a tile is 16 keys (one page's rows, so
 * one lookup), and each warp keeps DT_STAGES tiles in flight in unpadded
 * 128-byte swizzled stages (4 KB a stage at head_dim 64), three blocks an
 * SM: about 3x the bytes in flight per SM for a tenth of the issue work.
 *
 * Layout. The TMA's 128-byte swizzle puts 16-byte chunk c of a box row r at
 * chunk c ^ (r % 8), so the fragments come from ldmatrix with conflict-free
 * addresses: K (B operand of S = Q K^T, non-transposed: 8 keys x 8 dims per
 * matrix) and V (B of O = P V, transposed), dims in natural order (the Q
 * fragments too). head_dim 128 rows are two boxes of 64 dims.
 *
 * Edges. Tiles start at a multiple of 16 keys (the split's range rounded
 * down), so a tile is always inside one page and a box never crosses into
 * another page's rows. Keys outside the split's [kbeg, kend) in its first
 * and last tile are real pool rows that may hold anything (an unwritten
 * slot's bits can be NaN, and 0 x NaN would reach P V): the warp zeroes
 * their V rows after the copy lands; their scores are masked. A tile on an
 * unmapped page is not copied: its K and V are zeroed (attention_decode_
 * mma.cu's zero-fill, same scores).
 *
 * FP8 pools (F8). A row is D e4m3 codes and a 4-byte scale (68 / 132
 * bytes), too narrow a stride for tensor-map boxes, but a tile's 16 rows of
 * one KV head are one contiguous run of 16 (D + 4) bytes inside their page,
 * 16-byte aligned (16 rows of a multiple of 4 bytes), so lane 0 loads each
 * tile's K and V runs with two 1-D bulk copies into a raw stage (one page
 * lookup, no per-row copies as the cp.async kernel issues). The warp then
 * widens the raw codes into the same swizzled bf16 K / V tile the bf16
 * path reads (e4m3 -> bf16 is exact; keys outside the split or unmapped:
 * V codes and scales zero), frees the raw stage for the next copy, and
 * runs the bf16 path's products with attention_decode_mma.cu's FP8 rule:
 * scores times the key's row scale, P times the value's before its bf16
 * rounding. */
#include <cuda.h>
#include <cuda_bf16.h>
#include "kernels/cuda/attention_decode_mma.cuh"
#include "kernels/cuda/attention_decode_tile.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/paged_kv.cuh"
#include "kernels/cuda/tensor_map.cuh"
extern "C" {
#include "kernels/attention.h"
}

namespace {

const int DT_NK = 16; /* keys per tile: one box of rows */

template <int D, bool F8 = false> struct DtTile {
    static const int HALVES = D / 64;               /* 64-dim boxes per row */
    static const int BOX_BYTES = DT_NK * 128;        /* 16 rows x 64 bf16 */
    static const int TENSOR_BYTES = HALVES * BOX_BYTES;
    /* FP8: a stage is the tile's raw K run, then its V run */
    static const int RUN_BYTES = DT_NK * (D + 4);
    static const int STAGE_BYTES = F8 ? 2 * RUN_BYTES : 2 * TENSOR_BYTES; /* K, then V */
    static const int STAGES = D == 64 ? 4 : 3;       /* 64 KB / 96 KB a block: 3 / 2 blocks an SM */
    /* FP8: each warp's widened bf16 K and V tile, then 2 x 16 row scales */
    static const int WIDE_BYTES = F8 ? 2 * TENSOR_BYTES + 2 * DT_NK * 4 : 0;
    static const int WARP_BYTES = STAGES * STAGE_BYTES + WIDE_BYTES;
    static const size_t RING_BYTES = (size_t)DEC_WARPS * WARP_BYTES;
    static const size_t MERGE_BYTES = (size_t)DEC_WARPS * DEC_ROWS * (D + 2) * sizeof(float);
    /* 1024 bytes of slack: swizzled boxes start 1024-byte aligned */
    static const size_t BYTES = (RING_BYTES > MERGE_BYTES ? RING_BYTES : MERGE_BYTES) + 1024;
};

/* Byte offset of 16-byte chunk c (dims 8c..8c+7) of row r in a tile's K or
 * V, as the 128-byte swizzled boxes hold it. */
__device__ __forceinline__ uint32_t dt_chunk(int r, int c)
{
    return (uint32_t)((c >> 3) * (DT_NK * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

/* FP8: widens raw stage raw (the tile's K run, then its V run: 16 rows of
 * D codes + a 4-byte scale) into the swizzled bf16 tiles kt / vt and the
 * row scales ksc / vsc. Rows of keys outside [kbeg, kend) and every row of
 * an unmapped tile: V codes and both scales zero (an unwritten row's bits
 * may be NaN codes, and 0 x NaN would reach P V; their scores are masked). */
template <int D>
__device__ __forceinline__ void dt_widen_f8(const unsigned char *raw, unsigned char *kt, unsigned char *vt,
                                            float *ksc, float *vsc, bool mapped, int j0, int kbeg, int kend,
                                            int lane)
{
    const int RB = D + 4, U = D / 4; /* row bytes, 4-code words a row */
#pragma unroll
    for (int it = 0; it < DT_NK * U / 32; it++) {
        const int idx = lane + 32 * it, r = idx / U, u = idx - r * U, j = j0 + r;
        const bool live = mapped && j >= kbeg && j < kend;
        const uint32_t kc = mapped ? *(const uint32_t *)(raw + r * RB + 4 * u) : 0u;
        const uint32_t vc = live ? *(const uint32_t *)(raw + DT_NK * RB + r * RB + 4 * u) : 0u;
        const float2 k0 = kv_e4m3x2(kc & 0xffffu), k1 = kv_e4m3x2(kc >> 16);
        const float2 v0 = kv_e4m3x2(vc & 0xffffu), v1 = kv_e4m3x2(vc >> 16);
        /* codes 4u..4u+3: half (u & 1) of 16-byte chunk u / 2 */
        const uint32_t off = dt_chunk(r, u >> 1) + 8 * (u & 1);
        *(uint2 *)(kt + off) = make_uint2(kn_pack_bf16(k0.x, k0.y), kn_pack_bf16(k1.x, k1.y));
        *(uint2 *)(vt + off) = make_uint2(kn_pack_bf16(v0.x, v0.y), kn_pack_bf16(v1.x, v1.y));
    }
    if (lane < DT_NK) {
        const int j = j0 + lane;
        const bool live = mapped && j >= kbeg && j < kend;
        ksc[lane] = mapped ? *(const float *)(raw + lane * RB + D) : 0.f;
        vsc[lane] = live ? *(const float *)(raw + DT_NK * RB + lane * RB + D) : 0.f;
    }
}

/* The pool row of key j0 (a multiple of 16) of sequence s, KV head kvh,
 * in the [n_pages * n_kv_heads * page_size] row space the tensor maps
 * index; -1 when its page is not mapped. */
__device__ __forceinline__ int dt_tile_row(const DecArgs &a, int s, int kvh, int j0)
{
    const int pi = j0 / a.page_size;
    if (pi >= a.max_pages)
        return -1;
    const int page = a.page_table[(size_t)s * a.max_pages + pi];
    if (page < 0 || page >= a.n_pages)
        return -1;
    return (page * a.n_kv_heads + kvh) * a.page_size + (j0 - pi * a.page_size);
}

template <int D, bool F8>
__global__ void __launch_bounds__(DEC_THREADS)
attn_decode_tma_kernel(const DecArgs a, const __grid_constant__ CUtensorMap kmap,
                       const __grid_constant__ CUtensorMap vmap)
{
    typedef DtTile<D, F8> T;
    const int NT = DT_NK / 8, KS = D / 16, DN = D / 8, CH = D / 8;
    extern __shared__ __align__(1024) unsigned char dt_smem_raw[];
    __shared__ __align__(8) uint64_t bars[DEC_WARPS][T::STAGES];
    unsigned char *smem = dt_smem_raw + ((1024 - (kn_smem_addr(dt_smem_raw) & 1023)) & 1023);

    const int s = blockIdx.z, kvh = blockIdx.y, split = blockIdx.x;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int q0 = a.q_offset[s], nq = a.q_offset[s + 1] - q0;
    const int nvec = min(nq * a.group, DEC_ROWS);
    const int first_pos = a.kv_len[s] - nq;

    int kbeg, kend, tile0;
    dec_split_range<DT_NK, DT_NK>(a, first_pos, nvec, split, &kbeg, &kend, &tile0);
    const int n_tiles = kend > tile0 ? (kend - tile0 + DT_NK - 1) / DT_NK : 0;
    const int mine = n_tiles > w ? (n_tiles - w + DEC_WARPS - 1) / DEC_WARPS : 0;

    unsigned char *ring = smem + (size_t)w * T::WARP_BYTES;
    /* FP8: the widened tile after the raw stages (128-byte aligned, as
     * dt_chunk's conflict-free pattern wants) */
    unsigned char *wide = ring + T::STAGES * T::STAGE_BYTES;
    float *ksc = (float *)(wide + 2 * T::TENSOR_BYTES), *vsc = ksc + DT_NK;
    const uint32_t ring_s = kn_smem_addr(ring), bar_s = kn_smem_addr(&bars[w][0]);
    if (lane == 0) {
        for (int st = 0; st < T::STAGES; st++)
            kn_mbar_init(bar_s + 8 * st, 1);
        kn_mbar_init_fence();
    }
    __syncwarp();
    const CUtensorMap *km = &kmap, *vm = &vmap;
    /* Lane 0: tile i of this warp's into stage i % STAGES (an unmapped
     * page: no copy, a plain arrive; the consumers zero the stage). */
    auto issue = [&](int i) {
        const int st = i % T::STAGES, j0 = tile0 + (w + DEC_WARPS * i) * DT_NK;
        const uint32_t bar = bar_s + 8 * st, dst = ring_s + st * T::STAGE_BYTES;
        const int row = dt_tile_row(a, s, kvh, j0);
        if (row < 0) {
            kn_mbar_arrive(bar);
            return;
        }
        kn_mbar_arrive_expect_tx(bar, T::STAGE_BYTES);
        if constexpr (F8) {
            const size_t off = (size_t)row * (D + 4);
            kn_bulk_load(dst, (const unsigned char *)a.k_pool + off, T::RUN_BYTES, bar);
            kn_bulk_load(dst + T::RUN_BYTES, (const unsigned char *)a.v_pool + off, T::RUN_BYTES, bar);
        } else {
#pragma unroll
            for (int h = 0; h < T::HALVES; h++) {
                kn_tma_load_2d(dst + h * T::BOX_BYTES, km, 64 * h, row, bar);
                kn_tma_load_2d(dst + T::TENSOR_BYTES + h * T::BOX_BYTES, vm, 64 * h, row, bar);
            }
        }
    };
    if (lane == 0)
        for (int i = 0; i < T::STAGES && i < mine; i++)
            issue(i);

    /* Q (times scale * log2 e) as bf16 A fragments, dims in natural order */
    uint32_t qa[KS][4];
    dec_load_q<D>(a, qa, q0, kvh, nvec, g, t, [](int tq, int wi) { return 8 * wi + 2 * tq; });
    int pos[2];
    float m[2], l[2];
#pragma unroll
    for (int i = 0; i < 2; i++)
        kn_attn_row_init(a, kvh, g + 8 * i, nvec, first_pos, split == 0 && w == 0, t == 0, pos[i], m[i], l[i]);
    float o[DN][4];
#pragma unroll
    for (int n = 0; n < DN; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;

    for (int i = 0; i < mine; i++) {
        const int st = i % T::STAGES, j0 = tile0 + (w + DEC_WARPS * i) * DT_NK;
        unsigned char *kt = ring + st * T::STAGE_BYTES, *vt = kt + T::TENSOR_BYTES;
        kn_mbar_wait(bar_s + 8 * st, (i / T::STAGES) & 1);
        const bool mapped = dt_tile_row(a, s, kvh, j0) >= 0;
        if constexpr (F8) {
            kt = wide;
            vt = wide + T::TENSOR_BYTES;
            __syncwarp(); /* every lane is done reading the previous tile's wide tile */
            dt_widen_f8<D>(ring + st * T::STAGE_BYTES, kt, vt, ksc, vsc, mapped, j0, kbeg, kend, lane);
            __syncwarp(); /* the raw stage is read: refill it now, ahead of the products */
            if (lane == 0 && i + T::STAGES < mine) {
                /* the generic-proxy reads above before the copy engine's writes */
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                issue(i + T::STAGES);
            }
        } else if (!mapped || j0 < kbeg || j0 + DT_NK > kend) { /* warp-uniform */
            for (int idx = lane; idx < DT_NK * CH; idx += 32) {
                const int r = idx / CH, c = idx - r * CH, j = j0 + r;
                if (!mapped || j < kbeg || j >= kend) {
                    *(uint4 *)(vt + dt_chunk(r, c)) = make_uint4(0u, 0u, 0u, 0u);
                    if (!mapped)
                        *(uint4 *)(kt + dt_chunk(r, c)) = make_uint4(0u, 0u, 0u, 0u);
                }
            }
            __syncwarp();
        }

        /* S = Q K^T: per 8-key n-tile, ldmatrix x4 of dims 32h..32h+31
         * gives b0, b1 of k-steps 2h and 2h + 1 */
        float sc[NT][4];
#pragma unroll
        for (int n = 0; n < NT; n++) {
            sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
#pragma unroll
            for (int h = 0; h < D / 32; h++) {
                uint32_t kb[4];
                kn_ldmatrix_x4(kb, kt + dt_chunk(n * 8 + (lane & 7), 4 * h + (lane >> 3)));
                kn_mma_bf16(sc[n], qa[2 * h][0], qa[2 * h][1], qa[2 * h][2], qa[2 * h][3], kb[0], kb[1]);
                kn_mma_bf16(sc[n], qa[2 * h + 1][0], qa[2 * h + 1][1], qa[2 * h + 1][2], qa[2 * h + 1][3], kb[2],
                            kb[3]);
            }
        }
        if constexpr (F8) /* q . code times the key's row scale (0 unmapped: masked) */
            dec_scale_by_key<NT>(sc, ksc, t);
        dec_softmax_tile<NT, DN>(a, sc, pos, m, l, o, j0, kend, t);
        if constexpr (F8) /* P times each key's V row scale: P V over the codes */
            dec_scale_by_key<NT>(sc, vsc, t);

        /* O += P V: P's A fragment from the two 8-key C tiles; V's B
         * fragments by ldmatrix .trans (matrix mi: keys 8 (mi & 1).., dims
         * n0 + 8 (mi >> 1)..) */
        const uint32_t p0 = kn_pack_bf16(sc[0][0], sc[0][1]), p1 = kn_pack_bf16(sc[0][2], sc[0][3]);
        const uint32_t p2 = kn_pack_bf16(sc[1][0], sc[1][1]), p3 = kn_pack_bf16(sc[1][2], sc[1][3]);
        const int mi = lane >> 3, vr = (mi & 1) * 8 + (lane & 7);
#pragma unroll
        for (int n0 = 0; n0 < D; n0 += 16) {
            uint32_t vb[4];
            kn_ldmatrix_x4_trans(vb, vt + dt_chunk(vr, n0 / 8 + (mi >> 1)));
            kn_mma_bf16(o[n0 / 8], p0, p1, p2, p3, vb[0], vb[1]);
            kn_mma_bf16(o[n0 / 8 + 1], p0, p1, p2, p3, vb[2], vb[3]);
        }
        __syncwarp(); /* every lane is done with this stage */
        if (!F8 && lane == 0 && i + T::STAGES < mine) {
            /* the stage's zero stores (generic proxy) before the copy
             * engine's writes */
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            issue(i + T::STAGES);
        }
    }
    dec_merge_store<D>(a, (float *)smem, o, m, l, q0, kvh, nvec, split);
}

template <int D, bool F8>
int launch_decode_tma(const kn_backend *be, const char *op, const DecArgs &a, const kn_seq_batch *b,
                      const CUtensorMap &kmap, const CUtensorMap &vmap)
{
    const size_t bytes = DtTile<D, F8>::BYTES;
    KN_CUDA_TRY(op, cudaFuncSetAttribute(attn_decode_tma_kernel<D, F8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)bytes));
    dim3 grid(a.n_splits, a.n_kv_heads, b->n_seqs);
    attn_decode_tma_kernel<D, F8><<<grid, DEC_THREADS, bytes, kn_cuda_stream(be)>>>(a, kmap, vmap);
    KN_CUDA_LAUNCH_CHECK(op, "attn_decode_tma_kernel");
    return TN_OK;
}

} // namespace

bool kn_cuda_attention_decode_tma_fits(const kn_seq_batch *b, int n_heads, int n_kv_heads, int head_dim,
                                       int page_size, const float *out, const float *q, const kn_kv_pools *pools)
{
    /* FP8: 1-D bulk copies of a tile's rows need a 16-byte aligned pool */
    return (pools->dtype == KN_BF16 ||
            (pools->dtype == KN_FP8_E4M3 && kn_cuda_aligned16(pools->k) && kn_cuda_aligned16(pools->v))) &&
           page_size % DT_NK == 0 &&
           kn_cuda_attention_decode_mma_fits(b, n_heads, n_kv_heads, head_dim, out, q, pools);
}

int kn_cuda_attention_decode_tma(const kn_backend *be, const char *op, float *out, const float *q,
                                 const kn_kv_pools *pools, const kn_seq_batch *b, int n_heads, int n_kv_heads,
                                 int head_dim, int page_size, float scale, const float *sinks, int window)
{
    CUtensorMap kmap, vmap;
    const bool f8 = pools->dtype == KN_FP8_E4M3;
    int rc = TN_OK;
    if (f8) /* bulk copies: no tensor maps (the kernel's stay unused) */
        memset(&kmap, 0, sizeof kmap), memset(&vmap, 0, sizeof vmap);
    else
        rc = kn_cuda_kv_pool_maps(be, op, pools, (long long)b->n_pages * n_kv_heads * page_size, head_dim, DT_NK,
                                  &kmap, &vmap);
    if (rc == TN_OK)
        rc = dec_run(be, op, out, q, pools, b, n_heads, n_kv_heads, head_dim, page_size, scale, sinks, window,
                     [&](const DecArgs &a) {
                         if (f8)
                             return head_dim == 64 ? launch_decode_tma<64, true>(be, op, a, b, kmap, vmap)
                                                   : launch_decode_tma<128, true>(be, op, a, b, kmap, vmap);
                         return head_dim == 64 ? launch_decode_tma<64, false>(be, op, a, b, kmap, vmap)
                                               : launch_decode_tma<128, false>(be, op, a, b, kmap, vmap);
                     });
    if (rc == TN_OK)
        kn_cuda_ctx_of(be)->attn_decode_tma_launches++;
    return rc;
}
