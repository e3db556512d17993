/* Linear layer on the CPU with OpenBLAS. The bias is written into out first
 * and sgemm accumulates onto it (beta = 1), so the bias costs one pass. Call
 * this outside OpenMP parallel regions: OpenBLAS runs its own threads. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/fp8.h"
#include "kernels/kn_check.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/matmul.h"
#include "common/status.h"

static void sgemm_bias(float *out, const float *x, const float *w, const float *bias,
                       int m, int n, int k)
{
    float beta = 0.0f;
    if (bias) {
        for (int i = 0; i < m; i++)
            memcpy(out + (size_t)i * n, bias, (size_t)n * sizeof(float));
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x, k, w, k,
                beta, out, n);
}

int kn_matmul_cpu(float *out, const float *x, const float *w, const float *bias,
                  int m, int n, int k)
{
    if (m == 0)
        return TN_OK;
    sgemm_bias(out, x, w, bias, m, n, k);
    return TN_OK;
}

/* Both operands as the fp32 values of their FP8 quantizations (fp8.h). */
static int matmul_fp8(float *out, const float *x, const kn_weight *w, const float *bias,
                      int m, int n, int k)
{
    float *xf = malloc((size_t)m * k * sizeof(float));
    float *wf = malloc((size_t)n * k * sizeof(float));
    if (!xf || !wf) {
        free(xf);
        free(wf);
        return TN_ERR_NOMEM;
    }
    for (int i = 0; i < m; i++)
        kn_fp8_round_act_row(xf + (size_t)i * k, x + (size_t)i * k, (size_t)k);
    kn_fp8_dequantize_weight(wf, w->data, w->scale, (size_t)n, (size_t)k);
    sgemm_bias(out, xf, wf, bias, m, n, k);
    free(xf);
    free(wf);
    return TN_OK;
}

int kn_matmul_w_cpu(float *out, const float *x, const kn_weight *w, const float *bias,
                    int m, int n, int k)
{
    if (m == 0)
        return TN_OK;
    if (w->dtype == KN_FP8_E4M3)
        return matmul_fp8(out, x, w, bias, m, n, k);
    if (w->dtype == KN_F32) {
        sgemm_bias(out, x, w->data, bias, m, n, k);
        return TN_OK;
    }
    /* bf16: both operands as the fp32 values of their bf16 roundings. */
    float *xf = malloc((size_t)m * k * sizeof(float));
    float *wf = malloc((size_t)n * k * sizeof(float));
    if (!xf || !wf) {
        free(xf);
        free(wf);
        return TN_ERR_NOMEM;
    }
    for (size_t i = 0; i < (size_t)m * k; i++)
        xf[i] = kn_round_bf16(x[i]);
    kn_bf16_to_f32_n(wf, w->data, (size_t)n * k);
    sgemm_bias(out, xf, wf, bias, m, n, k);
    free(xf);
    free(wf);
    return TN_OK;
}
