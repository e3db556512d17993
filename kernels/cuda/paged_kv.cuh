/* Device helpers shared by kv_append.cu and the attention kernels: where a
 * token's K/V row lives in the paged HND pools (see kernels/attention.h),
 * and the pools' element types (fp32 or bf16), read and widened to fp32 in
 * registers. Internal to kernels/cuda/. */
#ifndef TANDEM_KERNELS_CUDA_PAGED_KV_CUH
#define TANDEM_KERNELS_CUDA_PAGED_KV_CUH
#include <cuda_bf16.h>
#include <stdint.h>

/* Elements off .. off+3 of a pool as floats. off is a multiple of 4 and the
 * pool 16-byte aligned (fp32: one 16-byte load; bf16: one 8-byte load). */
static __device__ __forceinline__ float4 kv_load4(const float *pool, long long off)
{
    return *(const float4 *)(pool + off);
}
static __device__ __forceinline__ float4 kv_load4(const __nv_bfloat16 *pool, long long off)
{
    uint2 u = *(const uint2 *)(pool + off);
    /* bf16 -> fp32 is the 16 bits moved to the top: exact */
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                       __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
}
static __device__ __forceinline__ float kv_load1(const float *pool, long long off)
{
    return pool[off];
}
static __device__ __forceinline__ float kv_load1(const __nv_bfloat16 *pool, long long off)
{
    return __bfloat162float(pool[off]);
}
/* Stores x rounded to the pool's type (bf16: round to nearest even, the
 * CPU's kn_f32_to_bf16). */
static __device__ __forceinline__ void kv_store1(float *pool, long long off, float x)
{
    pool[off] = x;
}
static __device__ __forceinline__ void kv_store1(__nv_bfloat16 *pool, long long off, float x)
{
    pool[off] = __float2bfloat16_rn(x);
}

/* Offset in floats of token j's row for KV head kvh in its sequence's page,
 * or -1 when the page table does not map it (negative position, a page id
 * outside [0, n_pages), or past max_pages): callers then skip the row instead of touching memory
 * outside the pool. */
__device__ __forceinline__ long long paged_kv_row(const int32_t *page_table, int max_pages,
                                                  int n_pages, int seq, int j, int kvh,
                                                  int n_kv_heads, int head_dim, int page_size)
{
    if (j < 0)
        return -1;
    int pi = j / page_size;
    if (pi >= max_pages)
        return -1;
    int page = page_table[(size_t)seq * max_pages + pi];
    if (page < 0 || page >= n_pages)
        return -1;
    return (((long long)page * n_kv_heads + kvh) * page_size + (j - pi * page_size)) * head_dim;
}

/* The sequence that batch row r belongs to: the last s with
 * q_offset[s] <= r (empty sequences are skipped over that way). */
__device__ __forceinline__ int paged_kv_seq_of_row(const int32_t *q_offset, int n_seqs, int r)
{
    int lo = 0, hi = n_seqs - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (q_offset[mid] <= r)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}
#endif
