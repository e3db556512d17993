/* kn_fill_uniform on the CPU: values in [lo, hi), a pure function of
 * (seed, index) (a slice regenerates alone with kn_fill_uniform_at; the
 * same seed gives the same
 * bits), seeds decorrelate, the moments are those of a uniform, bf16 and fp8
 * are the roundings of the f32 value, and bad arguments are refused. Also the CPU
 * side of kn_stopwatch and kn_backend_trim. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>
#include "kernels/backend.h"
#include "kernels/dtype.h"
#include "kernels/fill.h"
#include "common/status.h"
#include "kernels/stopwatch.h"
#include "testutil.h"

static void fill_is_seeded_uniform(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    const size_t n = 200003;
    float *a = tu_xcalloc(n, sizeof *a), *b = tu_xcalloc(n, sizeof *b);
    float *c = tu_xcalloc(n, sizeof *c);
    assert_int_equal(kn_fill_uniform(&be, a, KN_F32, n, 42, -0.5f, 1.5f), TN_OK);
    assert_int_equal(kn_fill_uniform(&be, b, KN_F32, n, 42, -0.5f, 1.5f), TN_OK);
    assert_memory_equal(a, b, n * sizeof *a);
    double sum = 0, sq = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(a[i] >= -0.5f && a[i] < 1.5f);
        assert_true(a[i] == kn_fill_value(42, i, -0.5f, 1.5f));
        sum += a[i];
        sq += (double)a[i] * a[i];
    }
    double mean = sum / n, var = sq / n - mean * mean;
    assert_true(fabs(mean - 0.5) < 0.01);             /* uniform [-0.5, 1.5): mean 0.5 */
    assert_true(fabs(var - 4.0 / 12.0) < 0.01);       /* variance (hi - lo)^2 / 12 */
    /* a slice starting at element 1000 is not the start of the stream, but
     * the value of its index: element i never depends on element i - 1 */
    assert_true(a[1000] == kn_fill_value(42, 1000, -0.5f, 1.5f));
    /* another seed: uncorrelated */
    assert_int_equal(kn_fill_uniform(&be, c, KN_F32, n, 43, -0.5f, 1.5f), TN_OK);
    double cov = 0;
    for (size_t i = 0; i < n; i++)
        cov += (a[i] - 0.5) * (c[i] - 0.5);
    assert_true(fabs(cov / n) < 0.01);
    /* bf16: the rounding of the f32 value */
    uint16_t *h = tu_xcalloc(n, sizeof *h);
    assert_int_equal(kn_fill_uniform(&be, h, KN_BF16, n, 42, -0.5f, 1.5f), TN_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(h[i], kn_f32_to_bf16(a[i]));
    /* fp8: the e4m3 code of the f32 value (synthetic FP8 weights) */
    uint8_t *q = tu_xcalloc(n, 1);
    assert_int_equal(kn_fill_uniform(&be, q, KN_FP8_E4M3, n, 42, -0.5f, 1.5f), TN_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(q[i], kn_f32_to_e4m3(a[i]));
    free(q);
    /* kn_fill_uniform_at: a slice made alone equals the same elements of
     * the whole, f32 and bf16 */
    float *part = tu_xcalloc(5000, sizeof *part);
    assert_int_equal(kn_fill_uniform_at(&be, part, KN_F32, 5000, 42, 123457, -0.5f, 1.5f), TN_OK);
    assert_memory_equal(part, a + 123457, 5000 * sizeof *part);
    uint16_t *hpart = tu_xcalloc(777, sizeof *hpart);
    assert_int_equal(kn_fill_uniform_at(&be, hpart, KN_BF16, 777, 42, 99, -0.5f, 1.5f), TN_OK);
    for (size_t i = 0; i < 777; i++)
        assert_int_equal(hpart[i], kn_f32_to_bf16(a[99 + i]));
    free(part);
    free(hpart);
    /* lo == hi gives a constant; bad arguments are refused */
    assert_int_equal(kn_fill_uniform(&be, a, KN_F32, 10, 1, 2.0f, 2.0f), TN_OK);
    assert_true(a[0] == 2.0f && a[9] == 2.0f);
    assert_int_equal(kn_fill_uniform(&be, a, KN_F32, 10, 1, 1.0f, 0.0f), TN_ERR_ARG);
    assert_int_equal(kn_fill_uniform(&be, a, KN_F32, 10, 1, NAN, 1.0f), TN_ERR_ARG);
    assert_int_equal(kn_fill_uniform(&be, a, KN_F32, 10, 1, 0.0f, INFINITY), TN_ERR_ARG);
    assert_int_equal(kn_fill_uniform(&be, a, (kn_dtype)3, 10, 1, 0.0f, 1.0f), TN_ERR_ARG);
    assert_int_equal(kn_fill_uniform(&be, NULL, KN_F32, 10, 1, 0.0f, 1.0f), TN_ERR_ARG);
    assert_int_equal(kn_fill_uniform(&be, NULL, KN_F32, 0, 1, 0.0f, 1.0f), TN_OK);
    assert_int_equal(kn_fill_uniform(NULL, a, KN_F32, 10, 1, 0.0f, 1.0f), TN_ERR_ARG);
    free(a), free(b), free(c), free(h);
    kn_backend_free(&be);
}

static void spin(double ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do
        clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1e3 + (t.tv_nsec - t0.tv_nsec) * 1e-6 < ms);
}

/* Laps charge the time since the previous lap to their group; collects add
 * up. Only what the clock guarantees is asserted (a stretch that spun 2 ms
 * lasted at least that), never durations against a threshold. */
static void stopwatch_groups_laps(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    kn_stopwatch *sw = NULL;
    assert_int_equal(kn_stopwatch_create(&be, 3, 4, &sw), TN_OK);
    double ms[3] = { 0 };
    assert_int_equal(kn_stopwatch_lap(sw, 0), TN_ERR_ARG);          /* before start */
    assert_int_equal(kn_stopwatch_start(sw), TN_OK);
    spin(2);
    assert_int_equal(kn_stopwatch_lap(sw, 2), TN_OK);
    assert_int_equal(kn_stopwatch_lap(sw, 0), TN_OK);               /* ~nothing */
    spin(2);
    assert_int_equal(kn_stopwatch_lap(sw, 2), TN_OK);
    assert_int_equal(kn_stopwatch_lap(sw, 3), TN_ERR_ARG);          /* no group 3 */
    assert_int_equal(kn_stopwatch_lap(sw, -1), TN_ERR_ARG);
    assert_int_equal(kn_stopwatch_lap(sw, 1), TN_OK);               /* 4th lap */
    assert_int_equal(kn_stopwatch_lap(sw, 1), TN_ERR_ARG);          /* past max_laps */
    assert_int_equal(kn_stopwatch_collect(sw, ms), TN_OK);
    assert_true(ms[2] >= 4.0);                                      /* two 2 ms spins */
    assert_true(ms[0] >= 0 && ms[1] >= 0);
    double before = ms[2];
    assert_int_equal(kn_stopwatch_collect(sw, ms), TN_OK);          /* nothing new */
    assert_true(ms[2] == before);
    assert_int_equal(kn_stopwatch_lap(sw, 0), TN_ERR_ARG);          /* needs a new start */
    assert_int_equal(kn_stopwatch_collect(NULL, ms), TN_ERR_ARG);
    kn_stopwatch_free(sw);
    kn_stopwatch_free(NULL);
    assert_int_equal(kn_stopwatch_create(&be, 0, 4, &sw), TN_ERR_ARG);
    assert_null(sw);
    assert_int_equal(kn_backend_trim(&be), TN_OK);
    assert_int_equal(kn_backend_trim(NULL), TN_ERR_ARG);
    kn_backend_free(&be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fill_is_seeded_uniform),
        cmocka_unit_test(stopwatch_groups_laps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
