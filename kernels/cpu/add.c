/* Element-wise add on the CPU (the residual connection). */
#include "kernels/cpu/cpu_ops.h"
#include "kernels/elementwise.h"
#include "kernels/kn_check.h"
#include "common/status.h"

int kn_add_cpu(float *out, const float *a, const float *b, size_t n)
{
    if (!out || !a || !b)
        return kn_arg_error("kn_add", "NULL %s", !out ? "out" : !a ? "a" : "b");
    /* In place is fine; a shifted overlap would read already-written sums. */
    size_t bytes = n * sizeof(float);
    if ((out != a && kn_ranges_overlap(out, bytes, a, bytes)) ||
        (out != b && kn_ranges_overlap(out, bytes, b, bytes)))
        return kn_arg_error("kn_add", "out partially overlaps an input");
    #pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
    return TN_OK;
}
