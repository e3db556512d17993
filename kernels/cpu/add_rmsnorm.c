/* The residual add fused with the following RMSNorm on the CPU. Each row is
 * added and then normed while it is still in cache, with the arithmetic of
 * kn_add_cpu followed by kn_rmsnorm_cpu (float add; double sum of squares,
 * mean rounded to float, 1/sqrt in double, (x * inv_rms) * weight in float),
 * so the results are bit-identical to that unfused pair. */
#include <math.h>
#include "kernels/kn_check.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/rmsnorm.h"
#include "common/status.h"

int kn_add_rmsnorm_cpu(float *x, float *xn, const float *delta, const float *weight,
                       int rows, int dim, float eps)
{
    #pragma omp parallel for schedule(static) if ((size_t)rows * dim > 16384)
    for (int r = 0; r < rows; r++) {
        float *xr = x + (size_t)r * dim, *xnr = xn + (size_t)r * dim;
        const float *dr = delta + (size_t)r * dim;
        double sum_sq = 0.0;
        for (int i = 0; i < dim; i++) {
            float v = xr[i] + dr[i];
            xr[i] = v;
            sum_sq += (double)v * v;
        }
        float mean_sq = (float)(sum_sq / dim);
        float inv_rms = (float)(1.0 / sqrt((double)mean_sq + (double)eps));
        for (int i = 0; i < dim; i++)
            xnr[i] = (xr[i] * inv_rms) * weight[i];
    }
    return TN_OK;
}
