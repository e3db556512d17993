/* Sink attention for prefill on the tensor cores: bf16 operands, fp32
 * accumulation (mma.sync.aligned.m16n8k16 bf16), FlashAttention-2 style.
 * Used by kn_attention_cuda when the backend's attention precision is bf16
 * (kn_backend_set_attn_bf16) and the batch is prefill-like; the fp32 kernels
 * of attention.cu stay the default.
 *
 * Same function as attention.cu's attn_flash_kernel (read its header for
 * the sink rule and the GQA "query vectors" v = row_local*G + g), with
 * these differences:
 *  - Q (pre-scaled by scale*log2(e)), K and V are rounded to bf16 when
 *    they are staged into shared memory (K and V read from fp32, bf16 or
 *    FP8 pools, kernel type T; bf16 values pass through unchanged, FP8
 *    ones are code times row scale, rounded to bf16). P is
 *    rounded to bf16 before the P.V product. Scores, the
 *    running max m and sum l, and the output accumulate in fp32.
 *  - A block is 8 warps; warp w owns query vectors [16w, 16w+16) of the
 *    block's 128 and computes its 16x64 score tile and 16xD output tile in
 *    mma fragments (no shared memory for S or P: the score accumulators
 *    are re-packed in registers as the A operand of P.V).
 *  - The next K/V tile's fp32 loads are issued into registers before the
 *    current tile is computed (D = 64), so their latency hides behind the
 *    tensor-core work.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16 .bf16, g = lane/4, t = lane%4):
 *   A 16x16 row-major: a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
 *   B 16x8 "col":      b0 (k 2t..2t+1, n g), b1 (k 2t+8..2t+9, n g)
 *   C 16x8 fp32:       c0,c1 (g, 2t..2t+1), c2,c3 (g+8, 2t..2t+1)
 * For S = Q K^T, B[k][n] = K[n][k]: b0/b1 are two adjacent bf16 of one K
 * row (one 32-bit shared load). For O = P V, B[k][n] = V[k][n] with k the
 * key: ldmatrix .trans on the row-major V tile delivers it. Two adjacent
 * 8-key C tiles of S are exactly one 16-key A fragment of P. */
#include <cuda_bf16.h>
#include <math.h>
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/attention_setup.cuh"
#include "kernels/cuda/attention_tile_softmax.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/paged_kv.cuh"
extern "C" {
#include "kernels/attention.h"
}

namespace {

const int MB_M = 128, MB_N = 64, MB_WARPS = 8, MB_THREADS = MB_WARPS * 32;

struct MmaArgs {
    float *out;
    const float *q;
    const void *k_pool, *v_pool; /* elements of the kernel's KV type T */
    const int32_t *q_offset, *kv_len, *page_table;
    const float *sinks;
    int max_pages, n_pages, n_heads, n_kv_heads, group, page_size, window;
    float scale_log2;
};

template <int D> struct MmaSmem {
    static const int LD = D + 8; /* bf16 row stride: 16 bytes of pad, conflict-free fragments */
    static const size_t BYTES = (size_t)(MB_M + 2 * MB_N) * LD * sizeof(__nv_bfloat16);
};

/* c += A B, A given as its four registers (mma.cuh). */
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    kn_mma_bf16(c, a[0], a[1], a[2], a[3], b0, b1);
}

__device__ __forceinline__ void store_bf16x4(__nv_bfloat16 *dst, float4 v)
{
    uint2 u;
    u.x = kn_pack_bf16(v.x, v.y);
    u.y = kn_pack_bf16(v.z, v.w);
    *reinterpret_cast<uint2 *>(dst) = u;
}

/* D = 64: two blocks per SM (128 registers, ptxas spills 12 bytes); D = 128
 * keeps its 64 output registers per thread at one block per SM. */
template <int D, class T>
__global__ void __launch_bounds__(MB_THREADS, D <= 64 ? 2 : 1)
attn_mma_kernel(MmaArgs a)
{
    const T *k_pool = (const T *)a.k_pool, *v_pool = (const T *)a.v_pool;
    typedef MmaSmem<D> S;
    const int LD = S::LD, D4 = D / 4;
    const int LOADS = MB_N * D4 / MB_THREADS; /* float4 of K (and of V) per thread per tile */
    const bool PREFETCH = D <= 64;            /* D = 128 would need 64 more registers */
    extern __shared__ __align__(16) __nv_bfloat16 mma_smem[];
    __nv_bfloat16 *Qs = mma_smem;
    __nv_bfloat16 *Ks = Qs + MB_M * LD;
    __nv_bfloat16 *Vs = Ks + MB_N * LD;

    const int s = blockIdx.z, kvh = blockIdx.y;
    /* Later tiles see more keys under the causal mask: start them first. */
    const int tile = gridDim.x - 1 - blockIdx.x;
    const int q0 = a.q_offset[s], nq = a.q_offset[s + 1] - q0;
    const int G = a.group, nvec = nq * G, v0 = tile * MB_M;
    if (v0 >= nvec)
        return;
    const int first_pos = a.kv_len[s] - nq;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int g = lane >> 2, t = lane & 3;

    for (int idx = tid; idx < MB_M * D4; idx += MB_THREADS) {
        int r = idx / D4, c4 = idx - r * D4;
        store_bf16x4(Qs + r * LD + c4 * 4, kn_attn_q4<D>(a, q0, kvh, v0 + r, nvec, c4));
    }

    /* This thread's two rows: warp row base + g and + g + 8. The sink's 1
     * goes into the l share of t == 0 only (the 4 threads of a row add their
     * shares at the end). */
    const int wr = w * 16;
    int pos[2];
    float m[2], l[2];
#pragma unroll
    for (int i = 0; i < 2; i++)
        kn_attn_row_init(a, kvh, v0 + wr + g + 8 * i, nvec, first_pos, true, t == 0, pos[i], m[i],
                         l[i]);
    float o[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;

    const int pos_lo = first_pos + v0 / G;
    int kbeg, kend;
    kn_attn_key_range(a, first_pos, v0, MB_M, nvec, &kbeg, &kend);
    const int pos_hi = kend - 1; /* the block's last position */

    float4 kreg[LOADS], vreg[LOADS];
    auto load_tile = [&](int j0) {
#pragma unroll
        for (int it = 0; it < LOADS; it++) {
            int idx = tid + it * MB_THREADS, key = idx / D4, d = (idx - key * D4) * 4;
            int j = j0 + key;
            long long off = j < kend ? paged_kv_row(a.page_table, a.max_pages, a.n_pages, s, j, kvh,
                                                    a.n_kv_heads, kv_row_len(k_pool, D), a.page_size)
                                     : -1;
            kreg[it] = vreg[it] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (off >= 0) {
                kreg[it] = kv_load4(k_pool, off, d, D);
                vreg[it] = kv_load4(v_pool, off, d, D);
            }
        }
    };
    auto store_tile = [&]() {
#pragma unroll
        for (int it = 0; it < LOADS; it++) {
            int idx = tid + it * MB_THREADS, key = idx / D4, d = (idx - key * D4) * 4;
            store_bf16x4(Ks + key * LD + d, kreg[it]);
            store_bf16x4(Vs + key * LD + d, vreg[it]);
        }
    };

    if (PREFETCH && kbeg < kend)
        load_tile(kbeg);
    for (int j0 = kbeg; j0 < kend; j0 += MB_N) {
        __syncthreads(); /* the previous tile is no longer read (first pass: Q is written) */
        if (!PREFETCH)
            load_tile(j0);
        store_tile();
        __syncthreads();
        if (PREFETCH && j0 + MB_N < kend)
            load_tile(j0 + MB_N);

        /* S = Q K^T for this warp's 16 rows x 64 keys. */
        float sc[MB_N / 8][4];
#pragma unroll
        for (int n = 0; n < MB_N / 8; n++)
            sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
#pragma unroll
        for (int k0 = 0; k0 < D; k0 += 16) {
            uint32_t qa[4];
            const __nv_bfloat16 *qp = Qs + (wr + g) * LD + k0 + 2 * t;
            qa[0] = *(const uint32_t *)(qp);
            qa[1] = *(const uint32_t *)(qp + 8 * LD);
            qa[2] = *(const uint32_t *)(qp + 8);
            qa[3] = *(const uint32_t *)(qp + 8 * LD + 8);
#pragma unroll
            for (int n = 0; n < MB_N / 8; n++) {
                const __nv_bfloat16 *kp = Ks + (n * 8 + g) * LD + k0 + 2 * t;
                mma_bf16(sc[n], qa, *(const uint32_t *)kp, *(const uint32_t *)(kp + 8));
            }
        }

        /* Masks only where the tile crosses a row's causal bound or window
         * edge, or runs past kend (block-uniform test). */
        const bool need_mask = j0 + MB_N > pos_lo || j0 + MB_N > kend ||
                               (a.window > 0 && j0 <= pos_hi - a.window);
        if (need_mask)
            kn_attn_tile_mask<MB_N / 8>(sc, pos, j0, kend, a.window, t);

        /* Online softmax, rows g and g + 8. */
        kn_attn_tile_softmax<MB_N / 8, D / 8>(sc, m, l, o);

        /* O += P V: 16 keys per step, P from the score registers. */
#pragma unroll
        for (int kk = 0; kk < MB_N / 16; kk++) {
            uint32_t pa[4];
            pa[0] = kn_pack_bf16(sc[2 * kk][0], sc[2 * kk][1]);
            pa[1] = kn_pack_bf16(sc[2 * kk][2], sc[2 * kk][3]);
            pa[2] = kn_pack_bf16(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
            pa[3] = kn_pack_bf16(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
            /* ldmatrix x4 .trans: matrices (keys +0..7, dims n0..), (keys
             * +8..15, dims n0..), (keys +0..7, dims n0+8..), (keys +8..15,
             * dims n0+8..) = b0, b1 of dim tile n0 and b0, b1 of n0 + 8. */
            const int mi = lane >> 3, r = lane & 7;
#pragma unroll
            for (int n0 = 0; n0 < D; n0 += 16) {
                uint32_t vb[4];
                kn_ldmatrix_x4_trans(vb, Vs + (kk * 16 + (mi & 1) * 8 + r) * LD + n0 + (mi >> 1) * 8);
                mma_bf16(o[n0 / 8], pa, vb[0], vb[1]);
                mma_bf16(o[n0 / 8 + 1], pa, vb[2], vb[3]);
            }
        }
    }

#pragma unroll
    for (int i = 0; i < 2; i++) {
        float lsum = l[i];
        lsum += __shfl_xor_sync(0xffffffffu, lsum, 1);
        lsum += __shfl_xor_sync(0xffffffffu, lsum, 2);
        int v = v0 + wr + g + 8 * i;
        if (v >= nvec)
            continue;
        int rl = v / G, gg = v - rl * G;
        float inv = lsum > 0.f ? 1.f / lsum : 0.f;
        float *dst = a.out + ((size_t)(q0 + rl) * a.n_heads + kvh * G + gg) * D + 2 * t;
#pragma unroll
        for (int n = 0; n < D / 8; n++)
            *(float2 *)(dst + n * 8) = make_float2(o[n][2 * i] * inv, o[n][2 * i + 1] * inv);
    }
}

template <int D, class T>
int launch_mma(const kn_backend *be, const char *op, const MmaArgs &a, const kn_seq_batch *b)
{
    size_t bytes = MmaSmem<D>::BYTES;
    KN_CUDA_TRY(op, cudaFuncSetAttribute(attn_mma_kernel<D, T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)bytes));
    dim3 grid(kn_cuda_div_up((long long)b->max_q_len * a.group, MB_M), a.n_kv_heads, b->n_seqs);
    attn_mma_kernel<D, T><<<grid, MB_THREADS, bytes, kn_cuda_stream(be)>>>(a);
    KN_CUDA_LAUNCH_CHECK(op, "attn_mma_kernel");
    return TN_OK;
}

} // namespace

bool kn_cuda_attention_mma_fits(const kn_seq_batch *b, int n_heads, int n_kv_heads, int head_dim,
                                const float *out, const float *q, const kn_kv_pools *pools)
{
    const void *k_pool = pools->k, *v_pool = pools->v;
    long long nvec_max = (long long)b->max_q_len * (n_heads / n_kv_heads);
    return (head_dim == 64 || head_dim == 128) && nvec_max > 16 && kn_cuda_aligned16(out) &&
           kn_cuda_aligned16(q) && kn_cuda_aligned16(k_pool) && kn_cuda_aligned16(v_pool);
}

int kn_cuda_attention_mma(const kn_backend *be, const char *op, float *out, const float *q,
                          const kn_kv_pools *pools, const kn_seq_batch *b, int n_heads,
                          int n_kv_heads, int head_dim, int page_size, float scale, const float *sinks,
                          int window)
{
    MmaArgs a;
    kn_attn_args_fill(a, out, q, pools->k, pools->v, b, n_heads, n_kv_heads, page_size, scale,
                      sinks, window);
    const kn_dtype kvt = pools->dtype;
    if (head_dim == 64)
        return kvt == KN_BF16       ? launch_mma<64, __nv_bfloat16>(be, op, a, b)
             : kvt == KN_FP8_E4M3 ? launch_mma<64, __nv_fp8_e4m3>(be, op, a, b)
                                  : launch_mma<64, float>(be, op, a, b);
    if (head_dim == 128)
        return kvt == KN_BF16       ? launch_mma<128, __nv_bfloat16>(be, op, a, b)
             : kvt == KN_FP8_E4M3 ? launch_mma<128, __nv_fp8_e4m3>(be, op, a, b)
                                  : launch_mma<128, float>(be, op, a, b);
    return kn_arg_error(op, "the bf16 attention kernel takes head_dim 64 or 128, not %d", head_dim);
}
