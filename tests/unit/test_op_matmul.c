/* kn_matmul (x w^T + bias) against a float64 recomputation, bound
 * TU_FP32_REL_TOL normwise over the whole output, and its argument checks. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>
#include "kernels/backend.h"
#include "kernels/matmul.h"
#include "kernels/status.h"
#include "testutil.h"

static void matmul_matches_float64(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), KN_OK);
    tu_rng rng;
    tu_rng_init(&rng, 31);
    const int shapes[][3] = { { 1, 1, 1 }, { 3, 5, 7 }, { 1, 33, 65 }, { 17, 33, 65 },
                              { 64, 96, 128 }, { 130, 70, 257 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            float *x = tu_xcalloc((size_t)m * k, sizeof *x);
            float *w = tu_xcalloc((size_t)n * k, sizeof *w);
            float *bias = tu_xcalloc((size_t)n, sizeof *bias);
            float *out = tu_xcalloc((size_t)m * n, sizeof *out);
            double *ref = tu_xcalloc((size_t)m * n, sizeof *ref);
            tu_rand_fill(&rng, x, (size_t)m * k, -1.0f, 1.0f);
            tu_rand_fill(&rng, w, (size_t)n * k, -1.0f, 1.0f);
            tu_rand_fill(&rng, bias, (size_t)n, -2.0f, 2.0f);
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    double acc = with_bias ? bias[j] : 0.0;
                    for (int l = 0; l < k; l++)
                        acc += (double)x[(size_t)i * k + l] * w[(size_t)j * k + l];
                    ref[(size_t)i * n + j] = acc;
                }
            assert_int_equal(kn_matmul(&be, out, x, w, with_bias ? bias : NULL, m, n, k), KN_OK);
            double err = tu_max_rel_err(out, ref, (size_t)m * n);
            if (err > TU_FP32_REL_TOL)
                fail_msg("m=%d n=%d k=%d bias=%d: rel err %g", m, n, k, with_bias, err);
            free(x);
            free(w);
            free(bias);
            free(out);
            free(ref);
        }
    }
    kn_backend_free(&be);
}

static void matmul_rejects_bad_arguments(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), KN_OK);
    float x[12] = { 0 }, w[12] = { 0 }, out[12] = { 0 };
    assert_int_equal(kn_matmul(&be, NULL, x, w, NULL, 2, 3, 2), KN_ERR_ARG);
    assert_int_equal(kn_matmul(&be, out, NULL, w, NULL, 2, 3, 2), KN_ERR_ARG);
    assert_int_equal(kn_matmul(&be, out, x, NULL, NULL, 2, 3, 2), KN_ERR_ARG);
    assert_int_equal(kn_matmul(&be, out, x, w, NULL, -1, 3, 2), KN_ERR_ARG);
    assert_int_equal(kn_matmul(&be, out, x, w, NULL, 2, 0, 2), KN_ERR_ARG);
    assert_int_equal(kn_matmul(&be, out, x, w, NULL, 2, 3, 0), KN_ERR_ARG);
    assert_int_equal(kn_matmul(&be, x, x, w, NULL, 2, 3, 2), KN_ERR_ARG);      /* out is x */
    assert_int_equal(kn_matmul(&be, x + 2, x, w, NULL, 2, 3, 2), KN_ERR_ARG);  /* overlaps */
    assert_int_equal(kn_matmul(&be, out, x, w, NULL, 0, 3, 2), KN_OK);
    kn_backend_free(&be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matmul_matches_float64),
        cmocka_unit_test(matmul_rejects_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
