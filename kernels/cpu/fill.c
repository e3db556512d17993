/* Seeded uniform fill on the CPU (kernels/fill.h). */
#include <math.h>
#include "kernels/cpu/cpu_ops.h"
#include "kernels/fill.h"
#include "kernels/kn_check.h"
#include "common/status.h"

/* SplitMix64's output function on seed + (i + 1) * gamma: a counter-based
 * generator, so element i needs no state from element i - 1. The CUDA
 * kernel in kernels/cuda/fill.cu computes the same expression. */
static uint64_t mix(uint64_t seed, uint64_t i)
{
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

float kn_fill_value(uint64_t seed, size_t i, float lo, float hi)
{
    /* 24 bits fit a float's mantissa: u is exact, and the two separately
     * rounded operations below are what the CUDA kernel does too
     * (volatile keeps the compiler from contracting them into an FMA). */
    float u = (float)(mix(seed, i) >> 40) * 0x1.0p-24f;
    volatile float scaled = (hi - lo) * u;
    return lo + scaled;
}

int kn_fill_uniform_cpu(void *x, kn_dtype dt, size_t n, uint64_t seed, size_t first,
                        float lo, float hi)
{
    if (dt == KN_F32) {
        float *f = x;
        #pragma omp parallel for schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++)
            f[i] = kn_fill_value(seed, first + i, lo, hi);
    } else if (dt == KN_BF16) {
        uint16_t *b = x;
        #pragma omp parallel for schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++)
            b[i] = kn_f32_to_bf16(kn_fill_value(seed, first + i, lo, hi));
    } else { /* KN_FP8_E4M3 (kn_fill_uniform_at took no other dtype) */
        uint8_t *b = x;
        #pragma omp parallel for schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++)
            b[i] = kn_f32_to_e4m3(kn_fill_value(seed, first + i, lo, hi));
    }
    return TN_OK;
}
