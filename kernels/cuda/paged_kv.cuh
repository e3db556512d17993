/* Device helpers shared by kv_append.cu and the attention kernels: where a
 * token's K/V row lives in the paged HND pools (see kernels/attention.h),
 * and the pools' element types -- float, __nv_bfloat16, or __nv_fp8_e4m3
 * (rows of head_dim codes followed by the row's fp32 scale) -- read and
 * widened to fp32 in registers. Internal to kernels/cuda/. */
#ifndef TANDEM_KERNELS_CUDA_PAGED_KV_CUH
#define TANDEM_KERNELS_CUDA_PAGED_KV_CUH
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

/* Elements of the pool's type per (token, KV head) row for head_dim D:
 * the row stride paged_kv_row takes. FP8: D codes and 4 bytes of scale. */
static __host__ __device__ __forceinline__ int kv_row_len(const float *, int D)
{
    return D;
}
static __host__ __device__ __forceinline__ int kv_row_len(const __nv_bfloat16 *, int D)
{
    return D;
}
static __host__ __device__ __forceinline__ int kv_row_len(const __nv_fp8_e4m3 *, int D)
{
    return D + 4;
}

/* Elements d .. d+3 of the row that starts at element `row` (paged_kv_row's
 * offset), as floats. d is a multiple of 4 and the pool 16-byte aligned:
 * fp32 one 16-byte load, bf16 one 8-byte load, FP8 one 4-byte load of codes
 * and the row's scale (D = head_dim, a multiple of 4). */
static __device__ __forceinline__ float4 kv_load4(const float *pool, long long row, int d, int)
{
    return *(const float4 *)(pool + row + d);
}
static __device__ __forceinline__ float4 kv_load4(const __nv_bfloat16 *pool, long long row, int d,
                                                  int)
{
    uint2 u = *(const uint2 *)(pool + row + d);
    /* bf16 -> fp32 is the 16 bits moved to the top: exact */
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                       __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
}
/* Two e4m3 codes (low byte first) as floats: exact through f16. */
static __device__ __forceinline__ float2 kv_e4m3x2(uint32_t two)
{
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)two, __NV_E4M3);
    return __half22float2(__half2(h));
}
static __device__ __forceinline__ float4 kv_load4(const __nv_fp8_e4m3 *pool, long long row, int d,
                                                  int D)
{
    const unsigned char *r = (const unsigned char *)(pool + row);
    const uint32_t u = *(const uint32_t *)(r + d);
    const float s = *(const float *)(r + D);
    const float2 lo = kv_e4m3x2(u & 0xffffu), hi = kv_e4m3x2(u >> 16);
    return make_float4(lo.x * s, lo.y * s, hi.x * s, hi.y * s);
}
static __device__ __forceinline__ float kv_load1(const float *pool, long long row, int d, int)
{
    return pool[row + d];
}
static __device__ __forceinline__ float kv_load1(const __nv_bfloat16 *pool, long long row, int d,
                                                 int)
{
    return __bfloat162float(pool[row + d]);
}
static __device__ __forceinline__ float kv_load1(const __nv_fp8_e4m3 *pool, long long row, int d,
                                                 int D)
{
    const unsigned char *r = (const unsigned char *)(pool + row);
    const float2 v = kv_e4m3x2(r[d]);
    return v.x * *(const float *)(r + D);
}
/* Stores x rounded to the pool's type at element off (bf16: round to
 * nearest even, the CPU's kn_f32_to_bf16). FP8 rows are written whole by
 * kv_append.cu's own kernel. */
static __device__ __forceinline__ void kv_store1(float *pool, long long off, float x)
{
    pool[off] = x;
}
static __device__ __forceinline__ void kv_store1(__nv_bfloat16 *pool, long long off, float x)
{
    pool[off] = __float2bfloat16_rn(x);
}

/* Offset in elements of token j's row for KV head kvh in its sequence's
 * page (row_len elements per row: kv_row_len), or -1 when the page table
 * does not map it (negative position, a page id outside [0, n_pages), or
 * past max_pages): callers then skip the row instead of touching memory
 * outside the pool. */
__device__ __forceinline__ long long paged_kv_row(const int32_t *page_table, int max_pages,
                                                  int n_pages, int seq, int j, int kvh,
                                                  int n_kv_heads, int row_len, int page_size)
{
    if (j < 0)
        return -1;
    int pi = j / page_size;
    if (pi >= max_pages)
        return -1;
    int page = page_table[(size_t)seq * max_pages + pi];
    if (page < 0 || page >= n_pages)
        return -1;
    return (((long long)page * n_kv_heads + kvh) * page_size + (j - pi * page_size)) * row_len;
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
