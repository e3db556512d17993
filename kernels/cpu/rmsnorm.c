/* RMSNorm on the CPU. The sum of squares is accumulated in double: HF sums
 * in float32 with pairwise reduction, and a double running sum is at least as
 * accurate for any row length, which keeps us within float rounding of it. */
#include <math.h>
#include "kernels/kn_check.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/rmsnorm.h"
#include "common/status.h"

int kn_rmsnorm_cpu(float *out, const float *x, const float *weight, int rows,
                   int dim, float eps)
{
    #pragma omp parallel for schedule(static) if ((size_t)rows * dim > 16384)
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * dim;
        float *outr = out + (size_t)r * dim;
        double sum_sq = 0.0;
        for (int i = 0; i < dim; i++)
            sum_sq += (double)xr[i] * xr[i];
        /* HF rounds the mean to float32 before adding eps and taking rsqrt. */
        float mean_sq = (float)(sum_sq / dim);
        float inv_rms = (float)(1.0 / sqrt((double)mean_sq + (double)eps));
        /* Reads xr[i] before writing outr[i], so out may alias x. */
        for (int i = 0; i < dim; i++)
            outr[i] = (xr[i] * inv_rms) * weight[i];
    }
    return TN_OK;
}
