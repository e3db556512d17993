/* Device helpers shared by kv_append.cu and attention.cu: where a token's
 * K/V row lives in the paged HND pools (see kernels/attention.h). Internal
 * to kernels/cuda/. */
#ifndef TANDEM_KERNELS_CUDA_PAGED_KV_CUH
#define TANDEM_KERNELS_CUDA_PAGED_KV_CUH
#include <stdint.h>

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
