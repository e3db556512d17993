/* kn_rope_kv_append on the GPU (kernels/rope_kv.h). Decode-sized calls
 * (at most RKV_FUSED_MAX_ROWS rows, head_dim <= 256, the backend's
 * fused_decode switch on) run one kernel: a warp per (row, head) of q and of
 * k holds the head's vector in registers, norms it (Qwen3), rotates it and
 * writes it back, and a k warp also writes its rotated row and the matching
 * v row into the paged pools. That replaces up to five launches (two norms,
 * two ropes, the append) whose own latency dominated a decode step.
 *
 * The arithmetic is the separate kernels': the norm's double sum of
 * squares, mean rounded to float, 1/sqrt in double, (x * inv) * w in float;
 * the angle as the float product pos * inv_freq, its cos and sin in double
 * times the attention scale; the rotation with explicit round-to-nearest
 * products (no fused multiply-add); bf16 rounding to nearest even and FP8
 * rows quantized with kv_append.cu's scale and rounding. Only the order of
 * the norm's double sum differs (rmsnorm.cu sums in another order), which
 * almost never changes the float mean.
 *
 * Larger calls, and every call with the switch off, run the separate
 * kernels. Rows whose page the table does not map are rotated but not
 * stored, as in kv_append.cu (the padded rows of a fixed-shape decode). */
#include <math.h>
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/fp8_cuda.cuh"
#include "kernels/cuda/paged_kv.cuh"
extern "C" {
#include "kernels/fp8.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/rope_kv.h"
#include "kernels/cuda/cuda_ops.h"
}

static const int RKV_WARPS = 4;        /* warps (heads) per block */
static const int RKV_PAIRS = 4;        /* rotation pairs per lane: head_dim <= 256 */
static const int RKV_FUSED_MAX_ROWS = 256;

/* Stores one rotated head row (pairs y0[j], y1[j] at i and i + half for
 * i = lane + 32 j) at element `row` of an fp32 or bf16 pool. */
template <class T>
__device__ __forceinline__ void rkv_store_row(T *pool, long long row, const float *y0,
                                              const float *y1, int half, int lane)
{
#pragma unroll
    for (int j = 0; j < RKV_PAIRS; j++) {
        const int i = lane + 32 * j;
        if (i < half) {
            kv_store1(pool, row + i, y0[j]);
            kv_store1(pool, row + i + half, y1[j]);
        }
    }
}

/* The FP8 row: kv_append.cu's scale (amax / 448, or 1) and codes, the
 * scale after the head_dim codes. */
__device__ __forceinline__ void rkv_store_row(unsigned char *pool, long long row, const float *y0,
                                              const float *y1, int half, int lane)
{
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < RKV_PAIRS; j++)
        if (lane + 32 * j < half)
            amax = fmaxf(amax, fmaxf(fabsf(y0[j]), fabsf(y1[j])));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float sc = amax > 0.f && isfinite(amax) ? amax / KN_E4M3_MAX : 1.f;
    unsigned char *dst = pool + row;
#pragma unroll
    for (int j = 0; j < RKV_PAIRS; j++) {
        const int i = lane + 32 * j;
        if (i < half) {
            dst[i] = kn_cuda_fp8_to_e4m3(y0[j] / sc);
            dst[i + half] = kn_cuda_fp8_to_e4m3(y1[j] / sc);
        }
    }
    if (lane == 0)
        *(float *)(dst + 2 * half) = sc;
}

/* Pool elements per (token, KV head) row: the stride paged_kv_row takes. */
__device__ __forceinline__ int rkv_row_len(const float *, int hd) { return hd; }
__device__ __forceinline__ int rkv_row_len(const __nv_bfloat16 *, int hd) { return hd; }
__device__ __forceinline__ int rkv_row_len(const unsigned char *, int hd) { return hd + 4; }

template <class T>
__global__ void __launch_bounds__(RKV_WARPS * 32)
rope_kv_kernel(float *q, float *k, const float *v, T *k_pool, T *v_pool, const int32_t *q_offset,
               const int32_t *kv_len, const int32_t *page_table, int n_seqs, int max_pages,
               int n_pages, int n_heads, int n_kv_heads, int head_dim, int page_size,
               const float *q_norm, const float *k_norm, float eps, const int32_t *pos,
               const float *inv_freq, float attn_scale)
{
    const int r = blockIdx.x, lane = threadIdx.x & 31;
    const int slot = blockIdx.y * RKV_WARPS + (threadIdx.x >> 5);
    if (slot >= n_heads + n_kv_heads)
        return; /* the whole warp */
    const bool is_k = slot >= n_heads;
    const int h = is_k ? slot - n_heads : slot, half = head_dim / 2;
    float *x = is_k ? k + ((size_t)r * n_kv_heads + h) * head_dim
                    : q + ((size_t)r * n_heads + h) * head_dim;
    float x0[RKV_PAIRS], x1[RKV_PAIRS];
#pragma unroll
    for (int j = 0; j < RKV_PAIRS; j++) {
        const int i = lane + 32 * j;
        x0[j] = i < half ? x[i] : 0.f;
        x1[j] = i < half ? x[i + half] : 0.f;
    }
    const float *nw = is_k ? k_norm : q_norm;
    if (nw) {
        double sum = 0.0;
#pragma unroll
        for (int j = 0; j < RKV_PAIRS; j++) {
            sum = __dadd_rn(sum, __dmul_rn((double)x0[j], (double)x0[j]));
            sum = __dadd_rn(sum, __dmul_rn((double)x1[j], (double)x1[j]));
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            sum += __shfl_xor_sync(0xffffffffu, sum, off);
        const float mean_sq = (float)(sum / head_dim);
        const float inv_rms = (float)(1.0 / sqrt((double)mean_sq + (double)eps));
#pragma unroll
        for (int j = 0; j < RKV_PAIRS; j++) {
            const int i = lane + 32 * j;
            if (i < half) {
                x0[j] = __fmul_rn(__fmul_rn(x0[j], inv_rms), nw[i]);
                x1[j] = __fmul_rn(__fmul_rn(x1[j], inv_rms), nw[i + half]);
            }
        }
    }
    const float p = (float)pos[r];
#pragma unroll
    for (int j = 0; j < RKV_PAIRS; j++) {
        const int i = lane + 32 * j;
        if (i < half) {
            const float angle = __fmul_rn(p, inv_freq[i]);
            double sd, cd;
            sincos((double)angle, &sd, &cd);
            const float c = (float)(cd * attn_scale), s = (float)(sd * attn_scale);
            const float a = x0[j], b = x1[j];
            x0[j] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
            x1[j] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
            x[i] = x0[j];
            x[i + half] = x1[j];
        }
    }
    if (!is_k)
        return;
    const int s = paged_kv_seq_of_row(q_offset, n_seqs, r);
    const int n_q = q_offset[s + 1] - q_offset[s];
    const int kpos = kv_len[s] - n_q + (r - q_offset[s]);
    const long long row = paged_kv_row(page_table, max_pages, n_pages, s, kpos, h, n_kv_heads,
                                       rkv_row_len(k_pool, head_dim), page_size);
    if (row < 0)
        return; /* the whole warp: row depends on (r, h) only */
    rkv_store_row(k_pool, row, x0, x1, half, lane);
    const float *vr = v + ((size_t)r * n_kv_heads + h) * head_dim;
#pragma unroll
    for (int j = 0; j < RKV_PAIRS; j++) {
        const int i = lane + 32 * j;
        x0[j] = i < half ? vr[i] : 0.f;
        x1[j] = i < half ? vr[i + half] : 0.f;
    }
    rkv_store_row(v_pool, row, x0, x1, half, lane);
}

/* The separate kernels, in the order the header states. */
static int rope_kv_unfused(const kn_backend *be, float *q, float *k, const float *v,
                           const kn_kv_pools *pools, const kn_seq_batch *b, int n_heads,
                           int n_kv_heads, int head_dim, int page_size, const kn_qk_rope *r)
{
    const int rows = b->n_rows;
    int rc = TN_OK;
    if (r->q_norm) {
        rc = kn_rmsnorm_cuda(be, q, q, r->q_norm, rows * n_heads, head_dim, r->eps);
        if (rc == TN_OK)
            rc = kn_rmsnorm_cuda(be, k, k, r->k_norm, rows * n_kv_heads, head_dim, r->eps);
    }
    if (rc == TN_OK)
        rc = kn_rope_cuda(be, q, r->pos, rows, n_heads, head_dim, r->inv_freq, r->attn_scale);
    if (rc == TN_OK)
        rc = kn_rope_cuda(be, k, r->pos, rows, n_kv_heads, head_dim, r->inv_freq, r->attn_scale);
    if (rc == TN_OK)
        rc = kn_kv_append_cuda(be, pools, k, v, b, n_kv_heads, head_dim, page_size);
    return rc;
}

extern "C" int kn_rope_kv_append_cuda(const kn_backend *be, float *q, float *k, const float *v,
                                      const kn_kv_pools *pools, const kn_seq_batch *b,
                                      int n_heads, int n_kv_heads, int head_dim, int page_size,
                                      const kn_qk_rope *r)
{
    static const char op[] = "kn_rope_kv_append";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK)
        return rc;
    if (b->n_rows == 0)
        return TN_OK;
    if (!kn_cuda_ctx_of(be)->fused_decode || b->n_rows > RKV_FUSED_MAX_ROWS ||
        head_dim > 64 * RKV_PAIRS)
        return rope_kv_unfused(be, q, k, v, pools, b, n_heads, n_kv_heads, head_dim, page_size, r);
    const dim3 grid(b->n_rows, kn_cuda_div_up(n_heads + n_kv_heads, RKV_WARPS));
    cudaStream_t st = kn_cuda_stream(be);
#define RKV_ARGS(T)                                                                             \
    q, k, v, (T *)pools->k, (T *)pools->v, b->q_offset, b->kv_len, b->page_table, b->n_seqs,    \
        b->max_pages, b->n_pages, n_heads, n_kv_heads, head_dim, page_size, r->q_norm,          \
        r->k_norm, r->eps, r->pos, r->inv_freq, r->attn_scale
    if (pools->dtype == KN_FP8_E4M3)
        rope_kv_kernel<unsigned char><<<grid, RKV_WARPS * 32, 0, st>>>(RKV_ARGS(unsigned char));
    else if (pools->dtype == KN_BF16)
        rope_kv_kernel<__nv_bfloat16><<<grid, RKV_WARPS * 32, 0, st>>>(RKV_ARGS(__nv_bfloat16));
    else
        rope_kv_kernel<float><<<grid, RKV_WARPS * 32, 0, st>>>(RKV_ARGS(float));
#undef RKV_ARGS
    KN_CUDA_LAUNCH_CHECK(op, "rope_kv_kernel");
    return TN_OK;
}
