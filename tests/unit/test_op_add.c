/* kn_add: exact (one float rounding of the double sum), in place on either
 * operand, and its argument checks. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "kernels/backend.h"
#include "kernels/elementwise.h"
#include "common/status.h"
#include "testutil.h"

static void add_is_exact_and_in_place(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    tu_rng rng;
    tu_rng_init(&rng, 41);
    const size_t sizes[] = { 0, 1, 7, 1000, 100003 };
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        float *a = tu_xcalloc(n, sizeof *a), *b = tu_xcalloc(n, sizeof *b);
        float *out = tu_xcalloc(n, sizeof *out), *want = tu_xcalloc(n, sizeof *want);
        tu_rand_fill(&rng, a, n, -10.0f, 10.0f);
        tu_rand_fill(&rng, b, n, -10.0f, 10.0f);
        for (size_t i = 0; i < n; i++)
            want[i] = (float)((double)a[i] + (double)b[i]); /* IEEE add is correctly rounded */
        assert_int_equal(kn_add(&be, out, a, b, n), TN_OK);
        if (n > 0)
            assert_memory_equal(out, want, n * sizeof(float));
        float *a2 = tu_xcalloc(n, sizeof *a2);
        memcpy(a2, a, n * sizeof(float));
        assert_int_equal(kn_add(&be, a2, a2, b, n), TN_OK);   /* residual += b */
        assert_int_equal(kn_add(&be, b, a, b, n), TN_OK);     /* b = a + b */
        if (n > 0) {
            assert_memory_equal(a2, want, n * sizeof(float));
            assert_memory_equal(b, want, n * sizeof(float));
        }
        free(a);
        free(b);
        free(a2);
        free(out);
        free(want);
    }
    kn_backend_free(&be);
}

static void add_rejects_bad_arguments(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    float a[8] = { 0 }, b[8] = { 0 }, out[8];
    assert_int_equal(kn_add(&be, NULL, a, b, 4), TN_ERR_ARG);
    assert_int_equal(kn_add(&be, out, NULL, b, 4), TN_ERR_ARG);
    assert_int_equal(kn_add(&be, out, a, NULL, 4), TN_ERR_ARG);
    assert_int_equal(kn_add(&be, a + 1, a, b, 4), TN_ERR_ARG); /* shifted overlap */
    kn_backend_free(&be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(add_is_exact_and_in_place),
        cmocka_unit_test(add_rejects_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
