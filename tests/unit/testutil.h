/* Helpers shared by the unit tests: a seeded random source independent of
 * the kernels' own generator, float64 comparisons, checked allocation.
 * Linked into every test binary, so it depends on nothing but libc/libm. */
#ifndef TANDEM_TESTS_TESTUTIL_H
#define TANDEM_TESTS_TESTUTIL_H
#include <stddef.h>
#include <stdint.h>

/* The fp32 ops' bound: normwise relative error against a float64 reference,
 * max_i |got_i - ref_i| / max_i |ref_i| (see tu_max_rel_err). */
#define TU_FP32_REL_TOL 1e-5

/* xorshift64* (Vigna): deliberately not the kernels' SplitMix64. */
typedef struct tu_rng {
    uint64_t state;
} tu_rng;

void tu_rng_init(tu_rng *r, uint64_t seed);
uint64_t tu_rand_u64(tu_rng *r);
/* Uniform in [0, 1). */
double tu_rand_uniform(tu_rng *r);
/* Uniform integer in [0, n), n > 0. */
int tu_rand_int(tu_rng *r, int n);
/* x[i] uniform in [lo, hi). */
void tu_rand_fill(tu_rng *r, float *x, size_t n, float lo, float hi);
/* Fisher-Yates shuffle. */
void tu_rand_shuffle_i32(tu_rng *r, int32_t *a, int n);

/* max_i |got_i - ref_i| / max_i |ref_i| (absolute error when ref is all 0).
 * Normwise, so an element that cancels to near zero does not dominate. */
double tu_max_rel_err(const float *got, const double *ref, size_t n);
/* The same between two float arrays (ref promoted to double). */
double tu_max_rel_err_f32(const float *got, const float *ref, size_t n);

/* Plain TAP for the programs that are not cmocka tests (the GPU checks):
 * one numbered "ok N - ..." / "not ok N - ..." line per check, and the plan
 * with a summary at the end. */
typedef struct tu_tap {
    int n_checks, n_failed;
} tu_tap;

void tu_tap_line(tu_tap *t, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Prints "1..N" and "# N checks, F failed"; returns the exit status (0 when
 * nothing failed, else 1). */
int tu_tap_finish(const tu_tap *t);

/* calloc that aborts the test program with a message when memory runs out. */
void *tu_xcalloc(size_t n, size_t size);

#endif
