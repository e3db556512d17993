/* Writes this step's K and V rows into the paged HND pools on the CPU,
 * rounded (FP8: quantized per row) to the pools' dtype. */
#include <string.h>
#include "kernels/cpu/cpu_ops.h"
#include "kernels/attention.h"
#include "kernels/cpu/seq_batch.h"
#include "kernels/dtype.h"
#include "kernels/fp8.h"
#include "kernels/kn_check.h"
#include "common/status.h"

/* Stores the n fp32 values as the row at byte offset off of a pool of
 * dtype dt. */
static void store_row(void *pool, kn_dtype dt, size_t off, const float *src, int n)
{
    char *row = (char *)pool + off;
    if (dt == KN_BF16)
        kn_f32_to_bf16_n((uint16_t *)row, src, (size_t)n);
    else if (dt == KN_FP8_E4M3)
        kn_fp8_kv_row_encode((uint8_t *)row, src, (size_t)n);
    else
        memcpy(row, src, (size_t)n * sizeof(float));
}

int kn_kv_append_cpu(const kn_kv_pools *pools, const float *k, const float *v,
                     const kn_seq_batch *b, int n_kv_heads, int head_dim, int page_size)
{
    static const char op[] = "kn_kv_append";
    int rc = kn_cpu_check_seq_batch(op, b, page_size, 0);
    if (rc != TN_OK)
        return rc;
    const size_t row_bytes = kn_kv_row_bytes(pools->dtype, head_dim);
    #pragma omp parallel for schedule(static) if ((size_t)b->n_rows * n_kv_heads * head_dim > 65536)
    for (int r = 0; r < b->n_rows; r++) {
        int s = kn_cpu_seq_of_row(b, r);
        int pos = kn_cpu_row_position(b, s, r);
        size_t page = (size_t)b->page_table[(size_t)s * b->max_pages + pos / page_size];
        for (int h = 0; h < n_kv_heads; h++) {
            size_t row = (page * n_kv_heads + h) * page_size + (size_t)(pos % page_size);
            size_t src = ((size_t)r * n_kv_heads + h) * head_dim;
            store_row(pools->k, pools->dtype, row * row_bytes, k + src, head_dim);
            store_row(pools->v, pools->dtype, row * row_bytes, v + src, head_dim);
        }
    }
    return TN_OK;
}
