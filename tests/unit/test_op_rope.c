/* RoPE: kn_rope_inv_freq against HF's formulas (golden values computed by a
 * line-for-line float64 transcription of modeling_rope_utils.py's default
 * and YaRN functions), and kn_rope against a float64 rotation. The rotation
 * angle is taken as the float32 product pos * inv_freq, as HF computes it
 * (rope.h); everything after it is float64 here. Bound: TU_FP32_REL_TOL,
 * normwise per token. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <cmocka.h>
#include "kernels/backend.h"
#include "kernels/rope.h"
#include "common/status.h"
#include "testutil.h"

static void assert_close_rel(double got, double want, double tol)
{
    if (fabs(got - want) > tol * fabs(want))
        fail_msg("got %.9g want %.9g", got, want);
}

static void inv_freq_plain_matches_hf(void **state)
{
    (void)state;
    const int dims[] = { 2, 16, 64, 128 };
    const double thetas[] = { 10000.0, 1000000.0 };
    float inv[64], scale = 0.0f;
    for (int d = 0; d < 4; d++)
        for (int t = 0; t < 2; t++) {
            kn_rope_config cfg = { .head_dim = dims[d], .theta = thetas[t] };
            assert_int_equal(kn_rope_inv_freq(&cfg, inv, &scale), TN_OK);
            assert_true(scale == 1.0f);
            /* HF: 1 / base^(arange(0, dim, 2) / dim) */
            for (int i = 0; i < dims[d] / 2; i++)
                assert_close_rel(inv[i], exp(-log(thetas[t]) * (2.0 * i) / dims[d]), 1e-6);
        }
}

/* GPT-OSS's rope_parameters (the tiny fixture's head_dim 16; truncate false). */
static void inv_freq_yarn_gpt_oss_matches_hf(void **state)
{
    (void)state;
    static const double golden[8] = {
        1, 0.22541800020287081, 0.050813274815461475, 0.0067949594897322189,
        0.00045648391922324086, 1.818833668168956e-05, 4.0999784818029795e-06,
        9.242089502428301e-07,
    };
    kn_rope_config cfg = { .head_dim = 16, .theta = 150000.0, .yarn = 1, .factor = 32.0,
                           .beta_fast = 32.0, .beta_slow = 1.0,
                           .original_max_position = 4096, .truncate = 0 };
    float inv[8], scale;
    assert_int_equal(kn_rope_inv_freq(&cfg, inv, &scale), TN_OK);
    for (int i = 0; i < 8; i++)
        assert_close_rel(inv[i], golden[i], 1e-6);
    assert_close_rel(scale, 1.3465735902799727, 1e-7); /* 0.1 ln 32 + 1 */

    cfg.attention_factor = 1.25; /* an explicit attention_factor wins */
    assert_int_equal(kn_rope_inv_freq(&cfg, inv, &scale), TN_OK);
    assert_true(scale == 1.25f);
}

/* Truncated correction range (HF's default), two head sizes. */
static void inv_freq_yarn_truncated_matches_hf(void **state)
{
    (void)state;
    static const double golden64[32] = {
        1, 0.68904430588816334, 0.47478205547690072, 0.32714587186423649,
        0.22541800020287081, 0.15532298948448497, 0.10702442147781144,
        0.073744568210260819, 0.050813274815461475, 0.031620752275346484,
        0.019450967544057934, 0.011792191099482284, 0.0070157139105043878,
        0.0040695547147582426, 0.002277271936341833, 0.0012061309690418729,
        0.0005809475019311124, 0.00022794779579512521, 3.8308812373753384e-05,
        2.6396469031472782e-05, 1.818833668168956e-05, 1.2532569824095001e-05,
        8.6354958754384803e-06, 5.9502392614916046e-06, 4.0999784818029795e-06,
        2.8250668271503398e-06, 1.9465962110014815e-06, 1.3412910350540445e-06,
        9.242089502428301e-07, 6.3682091461569897e-07, 4.3879782508643959e-07,
        3.0235114281192144e-07,
    };
    kn_rope_config cfg = { .head_dim = 64, .theta = 150000.0, .yarn = 1, .factor = 32.0,
                           .beta_fast = 32.0, .beta_slow = 1.0,
                           .original_max_position = 4096, .truncate = 1 };
    float inv[64], scale;
    assert_int_equal(kn_rope_inv_freq(&cfg, inv, &scale), TN_OK);
    for (int i = 0; i < 32; i++)
        assert_close_rel(inv[i], golden64[i], 1e-6);

    /* head_dim 128, theta 1e6, factor 4, original 32768: ramp over [23, 40]. */
    static const struct { int i; double v; } golden128[] = {
        { 0, 1 }, { 22, 0.0086596432336006526 }, { 23, 0.0069783058485986633 },
        { 24, 0.0053753214907901019 }, { 31, 0.00080295972754523023 },
        { 40, 4.4456985250973067e-05 }, { 41, 3.5825314255924068e-05 },
        { 63, 3.1023444018792988e-07 },
    };
    kn_rope_config c2 = { .head_dim = 128, .theta = 1e6, .yarn = 1, .factor = 4.0,
                          .beta_fast = 32.0, .beta_slow = 1.0,
                          .original_max_position = 32768, .truncate = 1 };
    assert_int_equal(kn_rope_inv_freq(&c2, inv, &scale), TN_OK);
    for (size_t j = 0; j < sizeof golden128 / sizeof golden128[0]; j++)
        assert_close_rel(inv[golden128[j].i], golden128[j].v, 1e-6);
    assert_close_rel(scale, 1.138629436111989, 1e-7);

    /* factor <= 1 means no attention scaling. */
    c2.factor = 1.0;
    assert_int_equal(kn_rope_inv_freq(&c2, inv, &scale), TN_OK);
    assert_true(scale == 1.0f);
}

static void rope_matches_float64(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    tu_rng rng;
    tu_rng_init(&rng, 51);
    const int shapes[][3] = { { 1, 1, 2 }, { 5, 3, 16 }, { 33, 4, 64 }, { 7, 2, 128 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (int yarn = 0; yarn < 2; yarn++) {
            int n_tok = shapes[s][0], n_heads = shapes[s][1], hd = shapes[s][2], half = hd / 2;
            kn_rope_config cfg = { .head_dim = hd, .theta = yarn ? 150000.0 : 10000.0,
                                   .yarn = yarn, .factor = 32.0, .beta_fast = 32.0,
                                   .beta_slow = 1.0, .original_max_position = 4096,
                                   .truncate = 0 };
            float *inv = tu_xcalloc((size_t)half, sizeof *inv), scale;
            assert_int_equal(kn_rope_inv_freq(&cfg, inv, &scale), TN_OK);
            size_t n = (size_t)n_tok * n_heads * hd;
            float *x = tu_xcalloc(n, sizeof *x);
            double *ref = tu_xcalloc(n, sizeof *ref);
            int32_t *pos = tu_xcalloc((size_t)n_tok, sizeof *pos);
            tu_rand_fill(&rng, x, n, -2.0f, 2.0f);
            for (int t = 0; t < n_tok; t++)
                pos[t] = t == 0 ? 0 : tu_rand_int(&rng, 70000);
            for (int t = 0; t < n_tok; t++)
                for (int h = 0; h < n_heads; h++)
                    for (int i = 0; i < half; i++) {
                        size_t o = ((size_t)t * n_heads + h) * hd;
                        double a = (double)((float)pos[t] * inv[i]);
                        double c = cos(a) * scale, sn = sin(a) * scale;
                        ref[o + i] = x[o + i] * c - x[o + i + half] * sn;
                        ref[o + i + half] = x[o + i + half] * c + x[o + i] * sn;
                    }
            assert_int_equal(kn_rope(&be, x, pos, n_tok, n_heads, hd, inv, scale), TN_OK);
            for (int t = 0; t < n_tok; t++) {
                size_t o = (size_t)t * n_heads * hd;
                double err = tu_max_rel_err(x + o, ref + o, (size_t)n_heads * hd);
                if (err > TU_FP32_REL_TOL)
                    fail_msg("shape %zu yarn %d token %d: rel err %g", s, yarn, t, err);
            }
            free(inv);
            free(x);
            free(ref);
            free(pos);
        }
    }
    kn_backend_free(&be);
}

static void rope_rejects_bad_arguments(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    float x[8] = { 0 }, inv[4] = { 1, 1, 1, 1 }, scale;
    int32_t pos[2] = { 0, 1 }, neg[2] = { 0, -1 };
    assert_int_equal(kn_rope(&be, NULL, pos, 2, 1, 4, inv, 1.0f), TN_ERR_ARG);
    assert_int_equal(kn_rope(&be, x, NULL, 2, 1, 4, inv, 1.0f), TN_ERR_ARG);
    assert_int_equal(kn_rope(&be, x, pos, 2, 1, 4, NULL, 1.0f), TN_ERR_ARG);
    assert_int_equal(kn_rope(&be, x, pos, 2, 1, 3, inv, 1.0f), TN_ERR_ARG); /* odd */
    assert_int_equal(kn_rope(&be, x, pos, 2, 0, 4, inv, 1.0f), TN_ERR_ARG);
    assert_int_equal(kn_rope(&be, x, pos, -1, 1, 4, inv, 1.0f), TN_ERR_ARG);
    assert_int_equal(kn_rope(&be, x, neg, 2, 1, 4, inv, 1.0f), TN_ERR_ARG);
    assert_int_equal(kn_rope(&be, x, pos, 2, 1, 4, inv, NAN), TN_ERR_ARG);

    kn_rope_config ok = { .head_dim = 8, .theta = 10000.0, .yarn = 1, .factor = 4.0,
                          .beta_fast = 32.0, .beta_slow = 1.0, .original_max_position = 4096 };
    assert_int_equal(kn_rope_inv_freq(&ok, inv, &scale), TN_OK);
    assert_int_equal(kn_rope_inv_freq(NULL, inv, &scale), TN_ERR_ARG);
    assert_int_equal(kn_rope_inv_freq(&ok, NULL, &scale), TN_ERR_ARG);
    assert_int_equal(kn_rope_inv_freq(&ok, inv, NULL), TN_ERR_ARG);
    kn_rope_config bad = ok;
    bad.head_dim = 7;
    assert_int_equal(kn_rope_inv_freq(&bad, inv, &scale), TN_ERR_ARG);
    bad = ok;
    bad.theta = 1.0;
    assert_int_equal(kn_rope_inv_freq(&bad, inv, &scale), TN_ERR_ARG);
    bad = ok;
    bad.factor = 0.0;
    assert_int_equal(kn_rope_inv_freq(&bad, inv, &scale), TN_ERR_ARG);
    bad = ok;
    bad.beta_slow = NAN;
    assert_int_equal(kn_rope_inv_freq(&bad, inv, &scale), TN_ERR_ARG);
    bad = ok;
    bad.original_max_position = 0;
    assert_int_equal(kn_rope_inv_freq(&bad, inv, &scale), TN_ERR_ARG);
    kn_backend_free(&be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(inv_freq_plain_matches_hf),
        cmocka_unit_test(inv_freq_yarn_gpt_oss_matches_hf),
        cmocka_unit_test(inv_freq_yarn_truncated_matches_hf),
        cmocka_unit_test(rope_matches_float64),
        cmocka_unit_test(rope_rejects_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
