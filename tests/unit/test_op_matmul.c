/* kn_matmul (x w^T + bias) against a float64 recomputation, bound
 * TU_FP32_REL_TOL normwise over the whole output, and its argument checks;
 * kn_matmul_w with f32 weights (exactly kn_matmul) and bf16 weights (the
 * float64 product of the bf16-rounded operands). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "kernels/backend.h"
#include "kernels/dtype.h"
#include "kernels/matmul.h"
#include "common/status.h"
#include "testutil.h"

static void matmul_matches_float64(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
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
            assert_int_equal(kn_matmul(&be, out, x, w, with_bias ? bias : NULL, m, n, k), TN_OK);
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
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    float x[12] = { 0 }, w[12] = { 0 }, out[12] = { 0 };
    assert_int_equal(kn_matmul(&be, NULL, x, w, NULL, 2, 3, 2), TN_ERR_ARG);
    assert_int_equal(kn_matmul(&be, out, NULL, w, NULL, 2, 3, 2), TN_ERR_ARG);
    assert_int_equal(kn_matmul(&be, out, x, NULL, NULL, 2, 3, 2), TN_ERR_ARG);
    assert_int_equal(kn_matmul(&be, out, x, w, NULL, -1, 3, 2), TN_ERR_ARG);
    assert_int_equal(kn_matmul(&be, out, x, w, NULL, 2, 0, 2), TN_ERR_ARG);
    assert_int_equal(kn_matmul(&be, out, x, w, NULL, 2, 3, 0), TN_ERR_ARG);
    assert_int_equal(kn_matmul(&be, x, x, w, NULL, 2, 3, 2), TN_ERR_ARG);      /* out is x */
    assert_int_equal(kn_matmul(&be, x + 2, x, w, NULL, 2, 3, 2), TN_ERR_ARG);  /* overlaps */
    assert_int_equal(kn_matmul(&be, out, x, w, NULL, 0, 3, 2), TN_OK);
    kn_backend_free(&be);
}

static void matmul_w_f32_and_bf16(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    tu_rng rng;
    tu_rng_init(&rng, 77);
    const int shapes[][3] = { { 1, 1, 1 }, { 5, 7, 9 }, { 33, 65, 130 }, { 64, 40, 256 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        float *x = tu_xcalloc((size_t)m * k, sizeof *x), *w = tu_xcalloc((size_t)n * k, sizeof *w);
        float *bias = tu_xcalloc((size_t)n, sizeof *bias);
        float *plain = tu_xcalloc((size_t)m * n, sizeof *plain), *out = tu_xcalloc((size_t)m * n, sizeof *out);
        uint16_t *wb = tu_xcalloc((size_t)n * k, sizeof *wb);
        double *ref = tu_xcalloc((size_t)m * n, sizeof *ref);
        tu_rand_fill(&rng, x, (size_t)m * k, -2.0f, 2.0f);
        tu_rand_fill(&rng, w, (size_t)n * k, -1.0f, 1.0f);
        tu_rand_fill(&rng, bias, (size_t)n, -1.0f, 1.0f);
        /* f32: the very same numbers as kn_matmul */
        kn_weight wf = { KN_F32, w, NULL };
        assert_int_equal(kn_matmul(&be, plain, x, w, bias, m, n, k), TN_OK);
        assert_int_equal(kn_matmul_w(&be, out, x, &wf, bias, m, n, k), TN_OK);
        assert_memory_equal(out, plain, sizeof(float) * (size_t)m * n);
        /* bf16: float64 over the rounded operands */
        kn_f32_to_bf16_n(wb, w, (size_t)n * k);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double acc = bias[j];
                for (int l = 0; l < k; l++)
                    acc += (double)kn_round_bf16(x[(size_t)i * k + l]) *
                           kn_bf16_to_f32(wb[(size_t)j * k + l]);
                ref[(size_t)i * n + j] = acc;
            }
        kn_weight wh = { KN_BF16, wb, NULL };
        assert_int_equal(kn_matmul_w(&be, out, x, &wh, bias, m, n, k), TN_OK);
        double err = tu_max_rel_err(out, ref, (size_t)m * n);
        if (err > TU_FP32_REL_TOL)
            fail_msg("bf16 m=%d n=%d k=%d: rel err %g vs the rounded-operand product", m, n, k, err);
        /* and it differs from the f32 product by about bf16's rounding */
        double vs_f32 = tu_max_rel_err_f32(out, plain, (size_t)m * n);
        if (k >= 9 && !(vs_f32 > 1e-5 && vs_f32 < 3e-2))
            fail_msg("bf16 m=%d n=%d k=%d: %g from the f32 product", m, n, k, vs_f32);
        free(x), free(w), free(bias), free(plain), free(out), free(wb), free(ref);
    }
    float x[4] = { 0 }, out[4] = { 0 };
    uint16_t w[4] = { 0 };
    kn_weight bad = { (kn_dtype)9, w, NULL };
    assert_int_equal(kn_matmul_w(&be, out, x, &bad, NULL, 2, 2, 1), TN_ERR_ARG);
    assert_int_equal(kn_matmul_w(&be, out, x, NULL, NULL, 2, 2, 1), TN_ERR_ARG);
    kn_weight nul = { KN_BF16, NULL, NULL };
    assert_int_equal(kn_matmul_w(&be, out, x, &nul, NULL, 2, 2, 1), TN_ERR_ARG);
    kn_weight ok = { KN_BF16, w, NULL };
    assert_int_equal(kn_matmul_w(&be, x, x, &ok, NULL, 2, 2, 1), TN_ERR_ARG);   /* out is x */
    assert_int_equal(kn_matmul_w(&be, out, x, &ok, NULL, 2, 2, 0), TN_ERR_ARG);
    kn_backend_free(&be);
}

/* Rounding to bf16: to nearest, ties to even, NaN stays NaN, overflow to inf. */
static void bf16_rounding(void **state)
{
    (void)state;
    assert_int_equal(kn_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(kn_f32_to_bf16(-2.0f), 0xc000);
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: even (1) wins; 1 + 3*2^-8
     * is halfway between 1 + 2^-7 and 1 + 2^-6: even (1 + 2^-6) wins. */
    assert_int_equal(kn_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    assert_int_equal(kn_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    assert_int_equal(kn_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    assert_true(kn_bf16_to_f32(kn_f32_to_bf16(FLT_MAX)) == INFINITY);   /* past bf16 max 3.39e38 */
    assert_true(kn_bf16_to_f32(kn_f32_to_bf16(-INFINITY)) == -INFINITY);
    assert_true(isnan(kn_bf16_to_f32(kn_f32_to_bf16(NAN))));
    float tiny = 0x1p-130f;   /* subnormal: kept to bf16's precision */
    assert_true(kn_round_bf16(tiny) == tiny);
    assert_int_equal((int)kn_dtype_size(KN_BF16), 2);
    assert_int_equal((int)kn_dtype_size(KN_F32), 4);
    assert_string_equal(kn_dtype_name(KN_BF16), "bf16");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matmul_matches_float64),
        cmocka_unit_test(matmul_rejects_bad_arguments),
        cmocka_unit_test(matmul_w_f32_and_bf16),
        cmocka_unit_test(bf16_rounding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
