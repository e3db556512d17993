/* Writes this step's K and V rows into the paged HND pools on the GPU,
 * rounded to the pools' dtype (fp32 or bf16: one block per batch row, its
 * threads copy all KV heads of the row; FP8: one warp per (batch row, KV
 * head), which quantizes the row with its own scale). The
 * descriptor arrays live in device memory, so rows whose position or page
 * the table does not map are skipped (never written out of bounds) rather
 * than reported; the host-side fields are checked as on the CPU. */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/fp8_cuda.cuh"
#include "kernels/cuda/paged_kv.cuh"
extern "C" {
#include "kernels/attention.h"
#include "kernels/cuda/cuda_ops.h"
}

template <class T>
__global__ void kv_append_kernel(T *k_pool, T *v_pool, const float *k, const float *v,
                                 const int32_t *q_offset, const int32_t *kv_len,
                                 const int32_t *page_table, int n_seqs, int max_pages, int n_pages,
                                 int n_kv_heads, int head_dim, int page_size)
{
    int r = blockIdx.x;
    int s = paged_kv_seq_of_row(q_offset, n_seqs, r);
    int n_q = q_offset[s + 1] - q_offset[s];
    int pos = kv_len[s] - n_q + (r - q_offset[s]);
    int row_floats = n_kv_heads * head_dim;
    const float *kr = k + (size_t)r * row_floats;
    const float *vr = v + (size_t)r * row_floats;
    /* Head kvh's row is page_size*head_dim elements after head kvh-1's. */
    long long base = paged_kv_row(page_table, max_pages, n_pages, s, pos, 0, n_kv_heads, head_dim, page_size);
    if (base < 0)
        return;
    long long head_stride = (long long)page_size * head_dim;
    for (int i = threadIdx.x; i < row_floats; i += blockDim.x) {
        int kvh = i / head_dim, d = i - kvh * head_dim;
        long long off = base + kvh * head_stride + d;
        kv_store1(k_pool, off, kr[i]);
        kv_store1(v_pool, off, vr[i]);
    }
}

/* FP8 rows (kernels/attention.h): s = amax / 448 (1 for an all-zero or
 * non-finite amax), codes e4m3(x / s) with an IEEE division and a
 * saturating round to nearest even, then s after the codes: bit-identical
 * to the CPU's kv_append. The early return is the whole warp's. */
__global__ void kv_append_fp8_kernel(unsigned char *k_pool, unsigned char *v_pool, const float *k,
                                     const float *v, const int32_t *q_offset,
                                     const int32_t *kv_len, const int32_t *page_table, int n_seqs,
                                     int max_pages, int n_pages, int n_kv_heads, int head_dim,
                                     int page_size)
{
    const int r = blockIdx.x, kvh = blockIdx.y, lane = threadIdx.x;
    const int s = paged_kv_seq_of_row(q_offset, n_seqs, r);
    const int n_q = q_offset[s + 1] - q_offset[s];
    const int pos = kv_len[s] - n_q + (r - q_offset[s]);
    const long long row = paged_kv_row(page_table, max_pages, n_pages, s, pos, kvh, n_kv_heads,
                                       head_dim + 4, page_size);
    if (row < 0)
        return;
    for (int which = 0; which < 2; which++) {
        const float *x = (which ? v : k) + ((size_t)r * n_kv_heads + kvh) * head_dim;
        unsigned char *dst = (which ? v_pool : k_pool) + row;
        float amax = 0.f;
        for (int d = lane; d < head_dim; d += 32)
            amax = fmaxf(amax, fabsf(x[d]));
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
        const float sc = amax > 0.f && isfinite(amax) ? amax / KN_E4M3_MAX : 1.f;
        for (int d = lane; d < head_dim; d += 32)
            dst[d] = kn_cuda_fp8_to_e4m3(x[d] / sc);
        if (lane == 0)
            *(float *)(dst + head_dim) = sc;
    }
}

extern "C" int kn_kv_append_cuda(const kn_backend *be, const kn_kv_pools *pools,
                                 const float *k, const float *v, const kn_seq_batch *b,
                                 int n_kv_heads, int head_dim, int page_size)
{
    static const char op[] = "kn_kv_append";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK)
        return rc;
    if (b->n_rows == 0)
        return TN_OK;
    int row_floats = n_kv_heads * head_dim;
    int threads = row_floats >= 256 ? 256 : 64;
    if (pools->dtype == KN_FP8_E4M3)
        kv_append_fp8_kernel<<<dim3(b->n_rows, n_kv_heads), 32, 0, kn_cuda_stream(be)>>>(
            (unsigned char *)pools->k, (unsigned char *)pools->v, k, v, b->q_offset, b->kv_len,
            b->page_table, b->n_seqs, b->max_pages, b->n_pages, n_kv_heads, head_dim, page_size);
    else if (pools->dtype == KN_BF16)
        kv_append_kernel<__nv_bfloat16><<<b->n_rows, threads, 0, kn_cuda_stream(be)>>>(
            (__nv_bfloat16 *)pools->k, (__nv_bfloat16 *)pools->v, k, v, b->q_offset, b->kv_len,
            b->page_table, b->n_seqs, b->max_pages, b->n_pages, n_kv_heads, head_dim, page_size);
    else
        kv_append_kernel<float><<<b->n_rows, threads, 0, kn_cuda_stream(be)>>>(
            (float *)pools->k, (float *)pools->v, k, v, b->q_offset, b->kv_len, b->page_table,
            b->n_seqs, b->max_pages, b->n_pages, n_kv_heads, head_dim, page_size);
    KN_CUDA_LAUNCH_CHECK(op, "kv_append_kernel");
    return TN_OK;
}
