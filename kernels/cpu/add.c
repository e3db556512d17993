/* Element-wise add on the CPU (the residual connection). */
#include "kernels/cpu/cpu_ops.h"
#include "kernels/elementwise.h"
#include "kernels/kn_check.h"
#include "common/status.h"

int kn_add_cpu(float *out, const float *a, const float *b, size_t n)
{
    #pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
    return TN_OK;
}
