/* Linear layer on the CPU with OpenBLAS. The bias is written into out first
 * and sgemm accumulates onto it (beta = 1), so the bias costs one pass. Call
 * this outside OpenMP parallel regions: OpenBLAS runs its own threads. */
#include <cblas.h>
#include <string.h>
#include "kernels/kn_check.h"
#include "kernels/matmul.h"
#include "kernels/status.h"

int kn_matmul_cpu(float *out, const float *x, const float *w, const float *bias,
                  int m, int n, int k)
{
    static const char op[] = "kn_matmul";
    if (!out || !x || !w)
        return kn_arg_error(op, "NULL %s", !out ? "out" : !x ? "x" : "w");
    if (m < 0 || n <= 0 || k <= 0)
        return kn_arg_error(op, "bad sizes m=%d n=%d k=%d", m, n, k);
    if (m == 0)
        return KN_OK;
    size_t out_bytes = (size_t)m * n * sizeof(float);
    if (kn_ranges_overlap(out, out_bytes, x, (size_t)m * k * sizeof(float)) ||
        kn_ranges_overlap(out, out_bytes, w, (size_t)n * k * sizeof(float)))
        return kn_arg_error(op, "out overlaps an input");
    float beta = 0.0f;
    if (bias) {
        for (int i = 0; i < m; i++)
            memcpy(out + (size_t)i * n, bias, (size_t)n * sizeof(float));
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x, k, w, k,
                beta, out, n);
    return KN_OK;
}
