/* Token embedding lookup and row gathers on the CPU. */
#include <string.h>
#include "kernels/cpu/cpu_ops.h"
#include "kernels/embedding.h"
#include "kernels/kn_check.h"
#include "common/status.h"

int kn_embedding_cpu(float *out, const float *table, const int32_t *ids,
                     int n_tokens, int vocab, int dim)
{
    static const char op[] = "kn_embedding";
    /* Check every id before writing, so a bad batch leaves out untouched. */
    for (int t = 0; t < n_tokens; t++)
        if (ids[t] < 0 || ids[t] >= vocab)
            return kn_arg_error(op, "token %d has id %d outside [0, %d)", t, (int)ids[t], vocab);
    size_t row_bytes = (size_t)dim * sizeof(float);
    #pragma omp parallel for schedule(static) if ((size_t)n_tokens * dim > 65536)
    for (int t = 0; t < n_tokens; t++)
        memcpy(out + (size_t)t * dim, table + (size_t)ids[t] * dim, row_bytes);
    return TN_OK;
}

int kn_gather_rows_cpu(float *out, const float *table, const int32_t *rows, int n,
                       int n_table_rows, int dim)
{
    size_t row_bytes = (size_t)dim * sizeof(float);
    #pragma omp parallel for schedule(static) if ((size_t)n * dim > 65536)
    for (int t = 0; t < n; t++) {
        if (rows[t] >= 0 && rows[t] < n_table_rows)
            memcpy(out + (size_t)t * dim, table + (size_t)rows[t] * dim, row_bytes);
        else
            memset(out + (size_t)t * dim, 0, row_bytes);
    }
    return TN_OK;
}
