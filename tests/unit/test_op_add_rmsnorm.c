/* kn_add_rmsnorm (residual add fused with RMSNorm) against a float64
 * recomputation (bound TU_FP32_REL_TOL, normwise per row), bit-identity with
 * the unfused kn_add + kn_rmsnorm it replaces in the engine, the xn == x
 * alias, and its argument checks. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "kernels/backend.h"
#include "kernels/elementwise.h"
#include "kernels/rmsnorm.h"
#include "common/status.h"
#include "testutil.h"

/* sum[i] = x[i] + delta[i] in double; out = rmsnorm(sum) * w, all in double. */
static void add_rmsnorm_ref(double *sum, double *out, const float *x, const float *delta,
                            const float *w, int rows, int dim, double eps)
{
    for (int r = 0; r < rows; r++) {
        size_t o = (size_t)r * dim;
        double ss = 0.0;
        for (int i = 0; i < dim; i++) {
            sum[o + i] = (double)x[o + i] + (double)delta[o + i];
            ss += sum[o + i] * sum[o + i];
        }
        double inv = 1.0 / sqrt(ss / dim + eps);
        for (int i = 0; i < dim; i++)
            out[o + i] = sum[o + i] * inv * w[i];
    }
}

static void add_rmsnorm_matches_float64_and_unfused(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    tu_rng rng;
    tu_rng_init(&rng, 33);
    /* 64 x 2880 is above the OpenMP threshold, 1 x 1 the smallest row */
    const int shapes[][2] = { { 1, 1 }, { 3, 7 }, { 5, 64 }, { 17, 129 }, { 64, 2880 } };
    const float eps[] = { 1e-6f, 1e-5f };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (int e = 0; e < 2; e++) {
            int rows = shapes[s][0], dim = shapes[s][1];
            size_t n = (size_t)rows * dim;
            float *x0 = tu_xcalloc(n, sizeof *x0), *delta = tu_xcalloc(n, sizeof *delta);
            float *x = tu_xcalloc(n, sizeof *x), *xn = tu_xcalloc(n, sizeof *xn);
            float *ux = tu_xcalloc(n, sizeof *ux), *uxn = tu_xcalloc(n, sizeof *uxn);
            float *w = tu_xcalloc((size_t)dim, sizeof *w);
            double *sum = tu_xcalloc(n, sizeof *sum), *ref = tu_xcalloc(n, sizeof *ref);
            tu_rand_fill(&rng, x0, n, -3.0f, 3.0f);
            tu_rand_fill(&rng, delta, n, -2.0f, 2.0f);
            tu_rand_fill(&rng, w, (size_t)dim, 0.5f, 1.5f);
            add_rmsnorm_ref(sum, ref, x0, delta, w, rows, dim, eps[e]);

            memcpy(x, x0, n * sizeof(float));
            assert_int_equal(kn_add_rmsnorm(&be, x, xn, delta, w, rows, dim, eps[e]), TN_OK);
            for (int r = 0; r < rows; r++) {
                size_t o = (size_t)r * dim;
                assert_true(tu_max_rel_err(x + o, sum + o, (size_t)dim) <= TU_FP32_REL_TOL);
                assert_true(tu_max_rel_err(xn + o, ref + o, (size_t)dim) <= TU_FP32_REL_TOL);
            }
            /* The unfused pair the engine used before gives the same bits. */
            memcpy(ux, x0, n * sizeof(float));
            assert_int_equal(kn_add(&be, ux, ux, delta, n), TN_OK);
            assert_int_equal(kn_rmsnorm(&be, uxn, ux, w, rows, dim, eps[e]), TN_OK);
            assert_memory_equal(x, ux, n * sizeof(float));
            assert_memory_equal(xn, uxn, n * sizeof(float));
            /* xn == x leaves the normed rows, same bits. */
            memcpy(x, x0, n * sizeof(float));
            assert_int_equal(kn_add_rmsnorm(&be, x, x, delta, w, rows, dim, eps[e]), TN_OK);
            assert_memory_equal(x, uxn, n * sizeof(float));
            free(x0);
            free(delta);
            free(x);
            free(xn);
            free(ux);
            free(uxn);
            free(w);
            free(sum);
            free(ref);
        }
    }
    kn_backend_free(&be);
}

static void add_rmsnorm_rejects_bad_arguments(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    float x[16] = { 1 }, d[8] = { 1 }, w[4] = { 1, 1, 1, 1 }, xn[8];
    assert_int_equal(kn_add_rmsnorm(NULL, x, xn, d, w, 2, 4, 1e-5f), TN_ERR_ARG);
    assert_int_equal(kn_add_rmsnorm(&be, NULL, xn, d, w, 2, 4, 1e-5f), TN_ERR_ARG);
    assert_int_equal(kn_add_rmsnorm(&be, x, NULL, d, w, 2, 4, 1e-5f), TN_ERR_ARG);
    assert_int_equal(kn_add_rmsnorm(&be, x, xn, NULL, w, 2, 4, 1e-5f), TN_ERR_ARG);
    assert_int_equal(kn_add_rmsnorm(&be, x, xn, d, NULL, 2, 4, 1e-5f), TN_ERR_ARG);
    assert_int_equal(kn_add_rmsnorm(&be, x, xn, d, w, -1, 4, 1e-5f), TN_ERR_ARG);
    assert_int_equal(kn_add_rmsnorm(&be, x, xn, d, w, 2, 0, 1e-5f), TN_ERR_ARG);
    assert_int_equal(kn_add_rmsnorm(&be, x, xn, d, w, 2, 4, -1e-5f), TN_ERR_ARG);
    assert_int_equal(kn_add_rmsnorm(&be, x, xn, d, w, 2, 4, NAN), TN_ERR_ARG);
    assert_int_equal(kn_add_rmsnorm(&be, x, xn, d, w, 2, 4, INFINITY), TN_ERR_ARG);
    /* xn shifted into x, delta overlapping x or xn */
    assert_int_equal(kn_add_rmsnorm(&be, x, x + 1, d, w, 2, 4, 1e-5f), TN_ERR_ARG);
    assert_int_equal(kn_add_rmsnorm(&be, x, xn, x + 2, w, 1, 4, 1e-5f), TN_ERR_ARG);
    assert_int_equal(kn_add_rmsnorm(&be, x, xn, xn, w, 2, 4, 1e-5f), TN_ERR_ARG);
    assert_int_equal(kn_add_rmsnorm(&be, x, xn, d, w, 0, 4, 1e-5f), TN_OK);
    kn_backend_free(&be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(add_rmsnorm_matches_float64_and_unfused),
        cmocka_unit_test(add_rmsnorm_rejects_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
