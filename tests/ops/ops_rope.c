/* RoPE: kn_rope_inv_freq against HF's formulas (golden values computed by a
 * line-for-line float64 transcription of modeling_rope_utils.py's default
 * and YaRN functions), and kn_rope on every backend against a float64
 * rotation. The rotation angle is taken as the float32 product
 * pos * inv_freq, as HF computes it (rope.h); everything after it is
 * float64 here. Bound: the backend's fp32 bound, normwise per token; CUDA
 * also within 1e-6 of the CPU. */
#include <math.h>
#include <string.h>
#include "common/status.h"
#include "kernels/rope.h"
#include "tests/ops/op_harness.h"

static void assert_close_rel(op_env *e, double got, double want, double tol)
{
    if (!(fabs(got - want) <= tol * fabs(want)))
        op_fail(e, "got %.9g want %.9g", got, want);
}

static void inv_freq_plain_matches_hf(op_env *e, const void *param)
{
    (void)param;
    const int dims[] = { 2, 16, 64, 128 };
    const double thetas[] = { 10000.0, 1000000.0 };
    float inv[64], scale = 0.0f;
    for (int d = 0; d < 4; d++)
        for (int t = 0; t < 2; t++) {
            kn_rope_config cfg = { .head_dim = dims[d], .theta = thetas[t] };
            OP_INT_EQ(e, kn_rope_inv_freq(&cfg, inv, &scale), TN_OK);
            OP_TRUE(e, scale == 1.0f);
            /* HF: 1 / base^(arange(0, dim, 2) / dim) */
            for (int i = 0; i < dims[d] / 2; i++)
                assert_close_rel(e, inv[i], exp(-log(thetas[t]) * (2.0 * i) / dims[d]), 1e-6);
        }
}

/* GPT-OSS's rope_parameters (the tiny fixture's head_dim 16; truncate false). */
static void inv_freq_yarn_gpt_oss_matches_hf(op_env *e, const void *param)
{
    (void)param;
    static const double golden[8] = {
        1, 0.22541800020287081, 0.050813274815461475, 0.0067949594897322189,
        0.00045648391922324086, 1.818833668168956e-05, 4.0999784818029795e-06,
        9.242089502428301e-07,
    };
    kn_rope_config cfg = { .head_dim = 16, .theta = 150000.0, .yarn = 1, .factor = 32.0,
                           .beta_fast = 32.0, .beta_slow = 1.0,
                           .original_max_position = 4096, .truncate = 0 };
    float inv[8], scale;
    OP_INT_EQ(e, kn_rope_inv_freq(&cfg, inv, &scale), TN_OK);
    for (int i = 0; i < 8; i++)
        assert_close_rel(e, inv[i], golden[i], 1e-6);
    assert_close_rel(e, scale, 1.3465735902799727, 1e-7); /* 0.1 ln 32 + 1 */

    cfg.attention_factor = 1.25; /* an explicit attention_factor wins */
    OP_INT_EQ(e, kn_rope_inv_freq(&cfg, inv, &scale), TN_OK);
    OP_TRUE(e, scale == 1.25f);
}

/* Truncated correction range (HF's default), two head sizes. */
static void inv_freq_yarn_truncated_matches_hf(op_env *e, const void *param)
{
    (void)param;
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
    OP_INT_EQ(e, kn_rope_inv_freq(&cfg, inv, &scale), TN_OK);
    for (int i = 0; i < 32; i++)
        assert_close_rel(e, inv[i], golden64[i], 1e-6);

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
    OP_INT_EQ(e, kn_rope_inv_freq(&c2, inv, &scale), TN_OK);
    for (size_t j = 0; j < sizeof golden128 / sizeof golden128[0]; j++)
        assert_close_rel(e, inv[golden128[j].i], golden128[j].v, 1e-6);
    assert_close_rel(e, scale, 1.138629436111989, 1e-7);

    /* factor <= 1 means no attention scaling. */
    c2.factor = 1.0;
    OP_INT_EQ(e, kn_rope_inv_freq(&c2, inv, &scale), TN_OK);
    OP_TRUE(e, scale == 1.0f);
}

typedef struct rope_param {
    int n_tok, n_heads, head_dim, yarn;
    double theta;
    int max_pos; /* positions drawn in [0, max_pos); the first is 0 */
} rope_param;

static void rope_case(op_env *e, const void *param)
{
    const rope_param *p = param;
    int hd = p->head_dim, half = hd / 2;
    kn_rope_config cfg = { .head_dim = hd, .theta = p->theta, .yarn = p->yarn, .factor = 32.0,
                           .beta_fast = 32.0, .beta_slow = 1.0, .original_max_position = 4096,
                           .truncate = 0 };
    float *inv = op_host(e, (size_t)half * sizeof(float)), scale = 0.f;
    if (!op_ok(e, kn_rope_inv_freq(&cfg, inv, &scale), "kn_rope_inv_freq"))
        return;
    size_t n = (size_t)p->n_tok * p->n_heads * hd, row = (size_t)p->n_heads * hd;
    float *x = op_rand(e, n, -2.f, 2.f);
    double *ref = op_host(e, n * sizeof(double));
    int32_t *pos = op_host(e, (size_t)p->n_tok * sizeof(int32_t));
    for (int t = 1; t < p->n_tok; t++)
        pos[t] = tu_rand_int(&e->rng, p->max_pos);
    for (int t = 0; t < p->n_tok; t++)
        for (int h = 0; h < p->n_heads; h++)
            for (int i = 0; i < half; i++) {
                size_t o = ((size_t)t * p->n_heads + h) * hd;
                double a = (double)((float)pos[t] * inv[i]);
                double c = cos(a) * scale, sn = sin(a) * scale;
                ref[o + i] = x[o + i] * c - x[o + i + half] * sn;
                ref[o + i + half] = x[o + i + half] * c + x[o + i] * sn;
            }
    float *d_x = op_up(e, x, n * 4), *d_inv = op_up(e, inv, (size_t)half * 4);
    int32_t *d_pos = op_up(e, pos, (size_t)p->n_tok * 4);
    if (!op_ok(e, kn_rope(e->be, d_x, d_pos, p->n_tok, p->n_heads, hd, d_inv, scale), "kn_rope"))
        return;
    float *got = op_get(e, d_x, n);
    double worst = 0.0;
    int worst_t = 0;
    for (int t = 0; t < p->n_tok; t++) {
        double err = tu_max_rel_err(got + t * row, ref + t * row, row);
        if (!(err <= worst))
            worst = isnan(err) ? INFINITY : err, worst_t = t;
    }
    op_check_err(e, worst, op_tol_fp32(e, 0), "rope vs float64, worst token %d", worst_t);
    if (e->cuda) {
        float *cpu = op_host(e, n * 4);
        memcpy(cpu, x, n * 4);
        if (op_ok(e, kn_rope(e->cpu, cpu, pos, p->n_tok, p->n_heads, hd, inv, scale), "kn_rope cpu"))
            op_check_err(e, tu_max_rel_err_f32(got, cpu, n), 1e-6, "rope vs CPU");
    }
}

static void rope_rejects_bad_arguments(op_env *e, const void *param)
{
    (void)param;
    float x[8] = { 0 }, inv[4] = { 1, 1, 1, 1 }, scale;
    int32_t pos[2] = { 0, 1 }, neg[2] = { 0, -1 };
    OP_INT_EQ(e, kn_rope(e->be, NULL, pos, 2, 1, 4, inv, 1.0f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_rope(e->be, x, NULL, 2, 1, 4, inv, 1.0f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_rope(e->be, x, pos, 2, 1, 4, NULL, 1.0f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_rope(e->be, x, pos, 2, 1, 3, inv, 1.0f), TN_ERR_ARG); /* odd */
    OP_INT_EQ(e, kn_rope(e->be, x, pos, 2, 0, 4, inv, 1.0f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_rope(e->be, x, pos, -1, 1, 4, inv, 1.0f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_rope(e->be, x, neg, 2, 1, 4, inv, 1.0f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_rope(e->be, x, pos, 2, 1, 4, inv, NAN), TN_ERR_ARG);

    kn_rope_config ok = { .head_dim = 8, .theta = 10000.0, .yarn = 1, .factor = 4.0,
                          .beta_fast = 32.0, .beta_slow = 1.0, .original_max_position = 4096 };
    OP_INT_EQ(e, kn_rope_inv_freq(&ok, inv, &scale), TN_OK);
    OP_INT_EQ(e, kn_rope_inv_freq(NULL, inv, &scale), TN_ERR_ARG);
    OP_INT_EQ(e, kn_rope_inv_freq(&ok, NULL, &scale), TN_ERR_ARG);
    OP_INT_EQ(e, kn_rope_inv_freq(&ok, inv, NULL), TN_ERR_ARG);
    kn_rope_config bad = ok;
    bad.head_dim = 7;
    OP_INT_EQ(e, kn_rope_inv_freq(&bad, inv, &scale), TN_ERR_ARG);
    bad = ok;
    bad.theta = 1.0;
    OP_INT_EQ(e, kn_rope_inv_freq(&bad, inv, &scale), TN_ERR_ARG);
    bad = ok;
    bad.factor = 0.0;
    OP_INT_EQ(e, kn_rope_inv_freq(&bad, inv, &scale), TN_ERR_ARG);
    bad = ok;
    bad.beta_slow = NAN;
    OP_INT_EQ(e, kn_rope_inv_freq(&bad, inv, &scale), TN_ERR_ARG);
    bad = ok;
    bad.original_max_position = 0;
    OP_INT_EQ(e, kn_rope_inv_freq(&bad, inv, &scale), TN_ERR_ARG);
}

void ops_register_rope(void)
{
    rope_param none = { 0 };
    OP_CASE("rope_inv_freq", OP_CPU, inv_freq_plain_matches_hf, none, "plain matches HF");
    OP_CASE("rope_inv_freq", OP_CPU, inv_freq_yarn_gpt_oss_matches_hf, none, "YaRN GPT-OSS matches HF");
    OP_CASE("rope_inv_freq", OP_CPU, inv_freq_yarn_truncated_matches_hf, none, "YaRN truncated matches HF");
    static const int shapes[][3] = { { 1, 1, 2 }, { 5, 3, 16 }, { 33, 4, 64 }, { 7, 2, 128 } };
    for (size_t s = 0; s < 4; s++)
        for (int yarn = 0; yarn < 2; yarn++) {
            rope_param p = { shapes[s][0], shapes[s][1], shapes[s][2], yarn, yarn ? 150000.0 : 10000.0, 70000 };
            OP_CASE("rope", OP_ALL, rope_case, p, "tokens=%d heads=%d head_dim=%d%s", p.n_tok, p.n_heads,
                    p.head_dim, yarn ? " YaRN" : "");
        }
    static const rope_param big[] = { { 37, 8, 64, 1, 150000.0, 131072 }, { 100, 4, 128, 0, 1000000.0, 131072 },
                                      { 5, 3, 6, 0, 1000000.0, 131072 } };
    for (size_t s = 0; s < 3; s++)
        OP_CASE("rope", OP_ALL, rope_case, big[s], "tokens=%d heads=%d head_dim=%d theta=%g%s positions < %d",
                big[s].n_tok, big[s].n_heads, big[s].head_dim, big[s].theta, big[s].yarn ? " YaRN" : "",
                big[s].max_pos);
    OP_CASE("rope", OP_CPU, rope_rejects_bad_arguments, none, "rejects bad arguments");
}
