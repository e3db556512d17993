/* kn_rmsnorm against a float64 recomputation (bound TU_FP32_REL_TOL, normwise
 * per row), in place and out of place, and its argument checks. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "kernels/backend.h"
#include "kernels/rmsnorm.h"
#include "common/status.h"
#include "testutil.h"

static void rmsnorm_ref(double *out, const float *x, const float *w, int rows, int dim, double eps)
{
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * dim;
        double ss = 0.0;
        for (int i = 0; i < dim; i++)
            ss += (double)xr[i] * xr[i];
        double inv = 1.0 / sqrt(ss / dim + eps);
        for (int i = 0; i < dim; i++)
            out[(size_t)r * dim + i] = xr[i] * inv * w[i];
    }
}

static void rmsnorm_matches_float64(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    tu_rng rng;
    tu_rng_init(&rng, 21);
    const int shapes[][2] = { { 1, 1 }, { 3, 7 }, { 5, 64 }, { 17, 129 }, { 300, 256 } };
    const float eps[] = { 1e-6f, 1e-5f };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (int e = 0; e < 2; e++) {
            int rows = shapes[s][0], dim = shapes[s][1];
            size_t n = (size_t)rows * dim;
            float *x = tu_xcalloc(n, sizeof *x), *out = tu_xcalloc(n, sizeof *out);
            float *w = tu_xcalloc((size_t)dim, sizeof *w);
            double *ref = tu_xcalloc(n, sizeof *ref);
            tu_rand_fill(&rng, x, n, -3.0f, 3.0f);
            tu_rand_fill(&rng, w, (size_t)dim, 0.5f, 1.5f);
            rmsnorm_ref(ref, x, w, rows, dim, eps[e]);
            assert_int_equal(kn_rmsnorm(&be, out, x, w, rows, dim, eps[e]), TN_OK);
            for (int r = 0; r < rows; r++)
                assert_true(tu_max_rel_err(out + (size_t)r * dim, ref + (size_t)r * dim,
                                           (size_t)dim) <= TU_FP32_REL_TOL);
            /* In place gives the same bits. */
            assert_int_equal(kn_rmsnorm(&be, x, x, w, rows, dim, eps[e]), TN_OK);
            assert_memory_equal(x, out, n * sizeof(float));
            free(x);
            free(out);
            free(w);
            free(ref);
        }
    }
    kn_backend_free(&be);
}

static void rmsnorm_rejects_bad_arguments(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    float x[8] = { 1 }, w[4] = { 1, 1, 1, 1 }, out[8];
    assert_int_equal(kn_rmsnorm(&be, NULL, x, w, 2, 4, 1e-5f), TN_ERR_ARG);
    assert_int_equal(kn_rmsnorm(&be, out, NULL, w, 2, 4, 1e-5f), TN_ERR_ARG);
    assert_int_equal(kn_rmsnorm(&be, out, x, NULL, 2, 4, 1e-5f), TN_ERR_ARG);
    assert_int_equal(kn_rmsnorm(&be, out, x, w, -1, 4, 1e-5f), TN_ERR_ARG);
    assert_int_equal(kn_rmsnorm(&be, out, x, w, 2, 0, 1e-5f), TN_ERR_ARG);
    assert_int_equal(kn_rmsnorm(&be, out, x, w, 2, 4, -1e-5f), TN_ERR_ARG);
    assert_int_equal(kn_rmsnorm(&be, out, x, w, 2, 4, NAN), TN_ERR_ARG);
    assert_int_equal(kn_rmsnorm(&be, out, x, w, 2, 4, INFINITY), TN_ERR_ARG);
    assert_int_equal(kn_rmsnorm(&be, out, x, w, 0, 4, 1e-5f), TN_OK);
    kn_backend_free(&be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rmsnorm_matches_float64),
        cmocka_unit_test(rmsnorm_rejects_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
