/* Seeded pseudo-random fill of a backend buffer: what synthetic model
 * weights (benchmarks of real shapes without checkpoint files) and filled
 * KV caches are made of.
 *
 * Element i gets lo + (hi - lo) * u_i with u_i = (top 24 bits of
 * SplitMix64(seed, i)) * 2^-24 in [0, 1), computed in fp32 with separate
 * rounding of the product and the sum; KN_BF16 stores that value rounded to
 * the nearest bf16, KN_FP8_E4M3 as the nearest e4m3fn code (saturating at
 * +-448, so a finite range never gives NaN codes). So every element is a pure function of (seed, i): both
 * backends write the same bits, and any slice can be regenerated alone. */
#ifndef TANDEM_KERNELS_FILL_H
#define TANDEM_KERNELS_FILL_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/backend.h"
#include "kernels/dtype.h"

/* x: n elements of dt on the backend. lo <= hi, both finite. */
int kn_fill_uniform(const kn_backend *be, void *x, kn_dtype dt, size_t n, uint64_t seed,
                    float lo, float hi);
/* The same for elements [first, first + n) of the stream: x[i] gets what
 * kn_fill_uniform would write at index first + i, so a slice of a large
 * tensor (a rank's rows) can be made without the rest. */
int kn_fill_uniform_at(const kn_backend *be, void *x, kn_dtype dt, size_t n, uint64_t seed,
                       size_t first, float lo, float hi);

/* The value kn_fill_uniform writes at index i as fp32 (before any bf16
 * rounding): the definition both backends implement. */
float kn_fill_value(uint64_t seed, size_t i, float lo, float hi);

#endif
