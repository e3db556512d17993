/* MoE routing and expert MLPs against float64 recomputations.
 * Routing: indices exact (ties to the lower id), weights within 1e-6
 * relative. Experts: a dense float64 MLP per route (biases included), bound
 * TU_FP32_REL_TOL normwise over the output; expert-parallel shares must sum
 * to the full result; the clamped SwiGLU is driven past its limits. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "kernels/backend.h"
#include "kernels/dtype.h"
#include "kernels/moe.h"
#include "common/status.h"
#include "testutil.h"

typedef struct ranked {
    float v;
    int id;
} ranked;

static int ranked_cmp(const void *pa, const void *pb)
{
    const ranked *a = pa, *b = pb;
    if (a->v != b->v)
        return a->v > b->v ? -1 : 1;
    return a->id - b->id;
}

/* float64 routing of one token: ids and weights of its k routes. */
static void ref_route(const float *l, int n_experts, int k, kn_route_mode mode, int renorm,
                      int32_t *ids, double *w)
{
    ranked *r = tu_xcalloc((size_t)n_experts, sizeof *r);
    for (int e = 0; e < n_experts; e++)
        r[e] = (ranked){ l[e], e };
    qsort(r, (size_t)n_experts, sizeof *r, ranked_cmp);
    double mx = r[0].v, sum_all = 0.0, sum_k = 0.0;
    for (int e = 0; e < n_experts; e++)
        sum_all += exp(l[e] - mx);
    for (int i = 0; i < k; i++)
        sum_k += exp(r[i].v - mx);
    for (int i = 0; i < k; i++) {
        ids[i] = r[i].id;
        double p = exp(r[i].v - mx);
        if (mode == KN_ROUTE_TOPK_SOFTMAX)
            w[i] = p / sum_k; /* softmax over the k top logits */
        else {
            w[i] = p / sum_all; /* softmax over all, then top-k */
            if (renorm)
                w[i] /= sum_k / sum_all;
        }
    }
    free(r);
}

static void route_matches_float64(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    tu_rng rng;
    tu_rng_init(&rng, 71);
    const int shapes[][3] = { { 1, 1, 1 }, { 5, 8, 2 }, { 33, 32, 4 }, { 64, 128, 8 },
                              { 7, 9, 9 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int variant = 0; variant < 3; variant++)
            for (int ties = 0; ties < 2; ties++) {
                int n_tok = shapes[s][0], n_exp = shapes[s][1], k = shapes[s][2];
                kn_route_mode mode = variant == 0 ? KN_ROUTE_TOPK_SOFTMAX : KN_ROUTE_SOFTMAX_TOPK;
                int renorm = variant == 2;
                float *logits = tu_xcalloc((size_t)n_tok * n_exp, sizeof *logits);
                tu_rand_fill(&rng, logits, (size_t)n_tok * n_exp, -4.0f, 4.0f);
                if (ties) /* few distinct values: lots of ties */
                    for (size_t i = 0; i < (size_t)n_tok * n_exp; i++)
                        logits[i] = floorf(logits[i]);
                int32_t *idx = tu_xcalloc((size_t)n_tok * k, sizeof *idx), ref_idx[128];
                float *w = tu_xcalloc((size_t)n_tok * k, sizeof *w);
                double ref_w[128];
                assert_int_equal(kn_moe_route(&be, idx, w, logits, n_tok, n_exp, k, mode, renorm),
                                 TN_OK);
                for (int t = 0; t < n_tok; t++) {
                    ref_route(logits + (size_t)t * n_exp, n_exp, k, mode, renorm, ref_idx, ref_w);
                    double sum = 0.0;
                    for (int i = 0; i < k; i++) {
                        assert_int_equal(idx[(size_t)t * k + i], ref_idx[i]);
                        double got = w[(size_t)t * k + i];
                        if (fabs(got - ref_w[i]) > 1e-6 * ref_w[i])
                            fail_msg("shape %zu variant %d token %d route %d: %g vs %g", s,
                                     variant, t, i, got, ref_w[i]);
                        if (i > 0)
                            assert_true(w[(size_t)t * k + i] <= w[(size_t)t * k + i - 1]);
                        sum += got;
                    }
                    if (variant != 1)
                        assert_true(fabs(sum - 1.0) < 1e-6);
                }
                free(logits);
                free(idx);
                free(w);
            }
    kn_backend_free(&be);
}

static void route_ties_pick_lower_id(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    const float logits[6] = { 1.0f, 3.0f, 2.0f, 3.0f, 2.0f, 3.0f };
    int32_t idx[4];
    float w[4];
    assert_int_equal(kn_moe_route(&be, idx, w, logits, 1, 6, 4, KN_ROUTE_TOPK_SOFTMAX, 0), TN_OK);
    assert_int_equal(idx[0], 1);
    assert_int_equal(idx[1], 3);
    assert_int_equal(idx[2], 5);
    assert_int_equal(idx[3], 2);
    assert_true(w[0] == w[1] && w[1] == w[2] && w[3] < w[2]);
    kn_backend_free(&be);
}

static void route_rejects_bad_arguments(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    float logits[8] = { 0 }, w[8];
    int32_t idx[8];
    assert_int_equal(kn_moe_route(&be, idx, w, logits, 2, 4, 5, KN_ROUTE_TOPK_SOFTMAX, 0), TN_ERR_ARG);
    assert_int_equal(kn_moe_route(&be, idx, w, logits, 2, 4, 0, KN_ROUTE_TOPK_SOFTMAX, 0), TN_ERR_ARG);
    assert_int_equal(kn_moe_route(&be, idx, w, logits, -1, 4, 2, KN_ROUTE_TOPK_SOFTMAX, 0), TN_ERR_ARG);
    assert_int_equal(kn_moe_route(&be, idx, w, logits, 2, 0, 2, KN_ROUTE_TOPK_SOFTMAX, 0), TN_ERR_ARG);
    assert_int_equal(kn_moe_route(&be, idx, w, logits, 2, 4, 2, (kn_route_mode)9, 0), TN_ERR_ARG);
    assert_int_equal(kn_moe_route(&be, NULL, w, logits, 2, 4, 2, KN_ROUTE_TOPK_SOFTMAX, 0), TN_ERR_ARG);
    assert_int_equal(kn_moe_route(&be, idx, NULL, logits, 2, 4, 2, KN_ROUTE_TOPK_SOFTMAX, 0), TN_ERR_ARG);
    assert_int_equal(kn_moe_route(&be, idx, w, NULL, 2, 4, 2, KN_ROUTE_TOPK_SOFTMAX, 0), TN_ERR_ARG);
    logits[5] = NAN;
    assert_int_equal(kn_moe_route(&be, idx, w, logits, 2, 4, 2, KN_ROUTE_SOFTMAX_TOPK, 1), TN_ERR_ARG);
    logits[5] = INFINITY;
    assert_int_equal(kn_moe_route(&be, idx, w, logits, 2, 4, 2, KN_ROUTE_SOFTMAX_TOPK, 1), TN_ERR_ARG);
    kn_backend_free(&be);
}

/* A full set of expert weights; parts of it are handed out as EP shares. */
typedef struct moe_model {
    int n_experts, dim, inter;
    float *gate_up, *gate_up_bias, *down, *down_bias;
} moe_model;

static void model_init(moe_model *m, tu_rng *rng, int n_experts, int dim, int inter,
                       float w_range)
{
    m->n_experts = n_experts;
    m->dim = dim;
    m->inter = inter;
    size_t gu = (size_t)n_experts * 2 * inter * dim, dn = (size_t)n_experts * dim * inter;
    m->gate_up = tu_xcalloc(gu, sizeof(float));
    m->down = tu_xcalloc(dn, sizeof(float));
    m->gate_up_bias = tu_xcalloc((size_t)n_experts * 2 * inter, sizeof(float));
    m->down_bias = tu_xcalloc((size_t)n_experts * dim, sizeof(float));
    tu_rand_fill(rng, m->gate_up, gu, -w_range, w_range);
    tu_rand_fill(rng, m->down, dn, -0.5f, 0.5f);
    tu_rand_fill(rng, m->gate_up_bias, (size_t)n_experts * 2 * inter, -1.0f, 1.0f);
    tu_rand_fill(rng, m->down_bias, (size_t)n_experts * dim, -1.0f, 1.0f);
}

static void model_free(moe_model *m)
{
    free(m->gate_up);
    free(m->down);
    free(m->gate_up_bias);
    free(m->down_bias);
}

/* The share of experts [first, first + count) of m, as kn_moe_weights. */
static kn_moe_weights model_share(const moe_model *m, int first, int count, int biases,
                                  kn_act act)
{
    return (kn_moe_weights){
        .n_experts = count, .expert_offset = first, .dim = m->dim, .inter = m->inter,
        .gate_up = m->gate_up + (size_t)first * 2 * m->inter * m->dim,
        .gate_up_bias = biases ? m->gate_up_bias + (size_t)first * 2 * m->inter : NULL,
        .down = m->down + (size_t)first * m->dim * m->inter,
        .down_bias = biases ? m->down_bias + (size_t)first * m->dim : NULL,
        .act = act, .alpha = 1.702f, .limit = 7.0f,
    };
}

/* Counts of clamp hits seen by the reference: gate above, up above, up below. */
typedef struct clamp_hits {
    long gate_high, up_high, up_low;
} clamp_hits;

/* Dense float64 MoE over the experts w holds (f32 weights). round_act
 * rounds each activation to bf16 before the down product, as the bf16
 * weight path does. */
static void ref_experts_r(double *out, const float *x, const int32_t *idx, const float *rw,
                          int n_tok, int k, const kn_moe_weights *w, clamp_hits *hits,
                          int round_act)
{
    int dim = w->dim, inter = w->inter;
    double *h = tu_xcalloc((size_t)2 * inter, sizeof *h), *a = tu_xcalloc((size_t)inter, sizeof *a);
    memset(out, 0, (size_t)n_tok * dim * sizeof *out);
    for (int t = 0; t < n_tok; t++)
        for (int r = 0; r < k; r++) {
            int e = idx[(size_t)t * k + r] - w->expert_offset;
            if (e < 0 || e >= w->n_experts)
                continue;
            const float *xt = x + (size_t)t * dim;
            for (int j = 0; j < 2 * inter; j++) {
                const float *row = (const float *)w->gate_up + ((size_t)e * 2 * inter + j) * dim;
                double acc = w->gate_up_bias ? w->gate_up_bias[(size_t)e * 2 * inter + j] : 0.0;
                for (int d = 0; d < dim; d++)
                    acc += (double)row[d] * xt[d];
                h[j] = acc;
            }
            for (int j = 0; j < inter; j++) {
                double g = h[j], u = h[inter + j];
                if (w->act == KN_ACT_SWIGLU) {
                    a[j] = g / (1.0 + exp(-g)) * u;
                } else {
                    double lim = w->limit;
                    hits->gate_high += g > lim;
                    hits->up_high += u > lim;
                    hits->up_low += u < -lim;
                    g = g > lim ? lim : g;
                    u = u > lim ? lim : u < -lim ? -lim : u;
                    a[j] = g / (1.0 + exp(-(double)w->alpha * g)) * (u + 1.0);
                }
                if (round_act)
                    a[j] = kn_round_bf16((float)a[j]);
            }
            for (int d = 0; d < dim; d++) {
                const float *row = (const float *)w->down + ((size_t)e * dim + d) * inter;
                double acc = w->down_bias ? w->down_bias[(size_t)e * dim + d] : 0.0;
                for (int j = 0; j < inter; j++)
                    acc += (double)row[j] * a[j];
                out[(size_t)t * dim + d] += rw[(size_t)t * k + r] * acc;
            }
        }
    free(h);
    free(a);
}

static void ref_experts(double *out, const float *x, const int32_t *idx, const float *rw,
                        int n_tok, int k, const kn_moe_weights *w, clamp_hits *hits)
{
    ref_experts_r(out, x, idx, rw, n_tok, k, w, hits, 0);
}

/* k distinct random experts per token with random positive weights. */
static void random_routes(tu_rng *rng, int32_t *idx, float *rw, int n_tok, int k, int n_experts)
{
    int32_t *perm = tu_xcalloc((size_t)n_experts, sizeof *perm);
    for (int t = 0; t < n_tok; t++) {
        for (int e = 0; e < n_experts; e++)
            perm[e] = e;
        tu_rand_shuffle_i32(rng, perm, n_experts);
        for (int r = 0; r < k; r++) {
            idx[(size_t)t * k + r] = perm[r];
            rw[(size_t)t * k + r] = (float)(0.05 + tu_rand_uniform(rng));
        }
    }
    free(perm);
}

static void experts_match_float64(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    tu_rng rng;
    tu_rng_init(&rng, 72);
    /* n_tokens, n_experts, k, dim, inter */
    const int shapes[][5] = { { 1, 2, 1, 4, 3 }, { 7, 8, 2, 16, 8 }, { 50, 8, 4, 33, 24 },
                              { 130, 16, 4, 64, 32 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int act = 0; act < 2; act++)
            for (int biases = 0; biases < 2; biases++) {
                int n_tok = shapes[s][0], n_exp = shapes[s][1], k = shapes[s][2];
                int dim = shapes[s][3], inter = shapes[s][4];
                moe_model m;
                model_init(&m, &rng, n_exp, dim, inter, 0.5f);
                kn_moe_weights w = model_share(&m, 0, n_exp, biases, (kn_act)act);
                float *x = tu_xcalloc((size_t)n_tok * dim, sizeof *x);
                float *out = tu_xcalloc((size_t)n_tok * dim, sizeof *out);
                float *rw = tu_xcalloc((size_t)n_tok * k, sizeof *rw);
                int32_t *idx = tu_xcalloc((size_t)n_tok * k, sizeof *idx);
                double *ref = tu_xcalloc((size_t)n_tok * dim, sizeof *ref);
                tu_rand_fill(&rng, x, (size_t)n_tok * dim, -1.0f, 1.0f);
                for (size_t i = 0; i < (size_t)n_tok * dim; i++)
                    out[i] = NAN; /* out is overwritten, not accumulated into */
                random_routes(&rng, idx, rw, n_tok, k, n_exp);
                clamp_hits hits = { 0 };
                ref_experts(ref, x, idx, rw, n_tok, k, &w, &hits);
                assert_int_equal(kn_moe_experts(&be, out, x, idx, rw, n_tok, k, &w), TN_OK);
                double err = tu_max_rel_err(out, ref, (size_t)n_tok * dim);
                if (err > TU_FP32_REL_TOL)
                    fail_msg("shape %zu act %d biases %d: rel err %g", s, act, biases, err);
                free(x);
                free(out);
                free(rw);
                free(idx);
                free(ref);
                model_free(&m);
            }
    kn_backend_free(&be);
}

/* bf16 expert weights: the float64 MoE of the bf16-rounded weights and
 * inputs, with the activation rounded to bf16 before the down product. */
static void experts_bf16_weights(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    tu_rng rng;
    tu_rng_init(&rng, 74);
    const int shapes[][5] = { { 9, 8, 2, 16, 8 }, { 70, 16, 4, 64, 40 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int act = 0; act < 2; act++) {
            int n_tok = shapes[s][0], n_exp = shapes[s][1], k = shapes[s][2];
            int dim = shapes[s][3], inter = shapes[s][4];
            size_t ngu = (size_t)n_exp * 2 * inter * dim, nd = (size_t)n_exp * dim * inter;
            moe_model m;
            model_init(&m, &rng, n_exp, dim, inter, 0.5f);
            uint16_t *gu = tu_xcalloc(ngu, sizeof *gu), *dn = tu_xcalloc(nd, sizeof *dn);
            kn_f32_to_bf16_n(gu, m.gate_up, ngu);
            kn_f32_to_bf16_n(dn, m.down, nd);
            kn_moe_weights wf = model_share(&m, 0, n_exp, 1, (kn_act)act);
            kn_moe_weights wb = wf;
            wb.wdtype = KN_BF16;
            wb.gate_up = gu;
            wb.down = dn;
            /* the reference reads the rounded weights and inputs as f32 */
            kn_moe_weights wr = wf;
            float *gur = tu_xcalloc(ngu, sizeof *gur), *dnr = tu_xcalloc(nd, sizeof *dnr);
            kn_bf16_to_f32_n(gur, gu, ngu);
            kn_bf16_to_f32_n(dnr, dn, nd);
            wr.gate_up = gur;
            wr.down = dnr;
            size_t nx = (size_t)n_tok * dim;
            float *x = tu_xcalloc(nx, sizeof *x), *xr = tu_xcalloc(nx, sizeof *xr);
            float *out = tu_xcalloc(nx, sizeof *out), *out_f = tu_xcalloc(nx, sizeof *out_f);
            float *rw = tu_xcalloc((size_t)n_tok * k, sizeof *rw);
            int32_t *idx = tu_xcalloc((size_t)n_tok * k, sizeof *idx);
            double *ref = tu_xcalloc(nx, sizeof *ref);
            tu_rand_fill(&rng, x, nx, -1.0f, 1.0f);
            for (size_t i = 0; i < nx; i++)
                xr[i] = kn_round_bf16(x[i]);
            random_routes(&rng, idx, rw, n_tok, k, n_exp);
            clamp_hits hits = { 0 };
            ref_experts_r(ref, xr, idx, rw, n_tok, k, &wr, &hits, 1);
            assert_int_equal(kn_moe_experts(&be, out, x, idx, rw, n_tok, k, &wb), TN_OK);
            assert_int_equal(kn_moe_experts(&be, out_f, x, idx, rw, n_tok, k, &wf), TN_OK);
            /* an activation whose float and double values round to different
             * bf16 neighbours moves its term by 2^-8: well under 1e-3 */
            double err = tu_max_rel_err(out, ref, nx), vs_f32 = tu_max_rel_err_f32(out, out_f, nx);
            if (err > 1e-3)
                fail_msg("shape %zu act %d: rel err %g vs the rounded float64 MoE", s, act, err);
            if (!(vs_f32 > 1e-4 && vs_f32 < 5e-2))
                fail_msg("shape %zu act %d: %g from the f32-weight MoE", s, act, vs_f32);
            wb.wdtype = (kn_dtype)5;
            assert_int_equal(kn_moe_experts(&be, out, x, idx, rw, n_tok, k, &wb), TN_ERR_ARG);
            free(gu), free(dn), free(gur), free(dnr), free(x), free(xr), free(out), free(out_f);
            free(rw), free(idx), free(ref);
            model_free(&m);
        }
    kn_backend_free(&be);
}

/* GPT-OSS's clamped SwiGLU with pre-activations well past +-limit. */
static void clamped_swiglu_hits_the_clamp(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    tu_rng rng;
    tu_rng_init(&rng, 73);
    int n_tok = 40, n_exp = 4, k = 2, dim = 32, inter = 16;
    moe_model m;
    model_init(&m, &rng, n_exp, dim, inter, 2.0f); /* pre-activations of std ~6.5 */
    kn_moe_weights w = model_share(&m, 0, n_exp, 1, KN_ACT_SWIGLU_OAI);
    float *x = tu_xcalloc((size_t)n_tok * dim, sizeof *x);
    float *out = tu_xcalloc((size_t)n_tok * dim, sizeof *out);
    float *rw = tu_xcalloc((size_t)n_tok * k, sizeof *rw);
    int32_t *idx = tu_xcalloc((size_t)n_tok * k, sizeof *idx);
    double *ref = tu_xcalloc((size_t)n_tok * dim, sizeof *ref);
    tu_rand_fill(&rng, x, (size_t)n_tok * dim, -1.0f, 1.0f);
    random_routes(&rng, idx, rw, n_tok, k, n_exp);
    clamp_hits hits = { 0 };
    ref_experts(ref, x, idx, rw, n_tok, k, &w, &hits);
    assert_true(hits.gate_high > 20 && hits.up_high > 20 && hits.up_low > 20);
    assert_int_equal(kn_moe_experts(&be, out, x, idx, rw, n_tok, k, &w), TN_OK);
    double err = tu_max_rel_err(out, ref, (size_t)n_tok * dim);
    if (err > TU_FP32_REL_TOL)
        fail_msg("rel err %g", err);

    /* Without the clamp the result would differ by far more than the bound. */
    kn_moe_weights loose = w;
    loose.limit = 1e30f;
    clamp_hits none = { 0 };
    double *unclamped = tu_xcalloc((size_t)n_tok * dim, sizeof *unclamped);
    ref_experts(unclamped, x, idx, rw, n_tok, k, &loose, &none);
    assert_true(tu_max_rel_err(out, unclamped, (size_t)n_tok * dim) > 1e-2);
    free(unclamped);
    free(x);
    free(out);
    free(rw);
    free(idx);
    free(ref);
    model_free(&m);
    kn_backend_free(&be);
}

/* Expert parallelism: ranks holding experts {0-2}, {3-5}, {6-7} each compute
 * their share; the shares sum to the single-rank result. */
static void expert_shares_sum_to_full(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    tu_rng rng;
    tu_rng_init(&rng, 74);
    int n_tok = 25, n_exp = 8, k = 3, dim = 24, inter = 12;
    const int first[3] = { 0, 3, 6 }, count[3] = { 3, 3, 2 };
    for (int act = 0; act < 2; act++) {
        moe_model m;
        model_init(&m, &rng, n_exp, dim, inter, 1.0f);
        size_t n = (size_t)n_tok * dim;
        float *x = tu_xcalloc(n, sizeof *x), *full = tu_xcalloc(n, sizeof *full);
        float *part = tu_xcalloc(n, sizeof *part), *sum = tu_xcalloc(n, sizeof *sum);
        double *ref = tu_xcalloc(n, sizeof *ref);
        float *rw = tu_xcalloc((size_t)n_tok * k, sizeof *rw);
        int32_t *idx = tu_xcalloc((size_t)n_tok * k, sizeof *idx);
        tu_rand_fill(&rng, x, n, -1.0f, 1.0f);
        random_routes(&rng, idx, rw, n_tok, k, n_exp);
        kn_moe_weights all = model_share(&m, 0, n_exp, 1, (kn_act)act);
        assert_int_equal(kn_moe_experts(&be, full, x, idx, rw, n_tok, k, &all), TN_OK);
        for (int r = 0; r < 3; r++) {
            kn_moe_weights share = model_share(&m, first[r], count[r], 1, (kn_act)act);
            assert_int_equal(kn_moe_experts(&be, part, x, idx, rw, n_tok, k, &share), TN_OK);
            clamp_hits hits = { 0 };
            ref_experts(ref, x, idx, rw, n_tok, k, &share, &hits);
            assert_true(tu_max_rel_err(part, ref, n) <= TU_FP32_REL_TOL);
            for (size_t i = 0; i < n; i++)
                sum[i] += part[i];
        }
        assert_true(tu_max_rel_err_f32(sum, full, n) <= 1e-6);

        /* A rank holding none of a batch's experts outputs zeros. */
        int32_t *low = tu_xcalloc((size_t)n_tok * k, sizeof *low);
        for (size_t i = 0; i < (size_t)n_tok * k; i++)
            low[i] = (int32_t)(i % 3);
        kn_moe_weights last = model_share(&m, 6, 2, 1, (kn_act)act);
        assert_int_equal(kn_moe_experts(&be, part, x, low, rw, n_tok, k, &last), TN_OK);
        for (size_t i = 0; i < n; i++)
            assert_true(part[i] == 0.0f);
        free(low);
        free(x);
        free(full);
        free(part);
        free(sum);
        free(ref);
        free(rw);
        free(idx);
        model_free(&m);
    }
    kn_backend_free(&be);
}

static void experts_reject_bad_arguments(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    tu_rng rng;
    tu_rng_init(&rng, 75);
    moe_model m;
    model_init(&m, &rng, 4, 4, 2, 1.0f);
    float x[2 * 4] = { 0 }, out[2 * 4], rw[2 * 2] = { 0.5f, 0.5f, 0.5f, 0.5f };
    int32_t idx[2 * 2] = { 0, 1, 2, 3 };
    kn_moe_weights ok = model_share(&m, 0, 4, 1, KN_ACT_SWIGLU_OAI);
    assert_int_equal(kn_moe_experts(&be, out, x, idx, rw, 2, 2, &ok), TN_OK);
    assert_int_equal(kn_moe_experts(&be, NULL, x, idx, rw, 2, 2, &ok), TN_ERR_ARG);
    assert_int_equal(kn_moe_experts(&be, out, NULL, idx, rw, 2, 2, &ok), TN_ERR_ARG);
    assert_int_equal(kn_moe_experts(&be, out, x, NULL, rw, 2, 2, &ok), TN_ERR_ARG);
    assert_int_equal(kn_moe_experts(&be, out, x, idx, NULL, 2, 2, &ok), TN_ERR_ARG);
    assert_int_equal(kn_moe_experts(&be, out, x, idx, rw, 2, 2, NULL), TN_ERR_ARG);
    assert_int_equal(kn_moe_experts(&be, out, x, idx, rw, -1, 2, &ok), TN_ERR_ARG);
    assert_int_equal(kn_moe_experts(&be, out, x, idx, rw, 2, 0, &ok), TN_ERR_ARG);
    assert_int_equal(kn_moe_experts(&be, x, x, idx, rw, 2, 2, &ok), TN_ERR_ARG); /* aliasing */
    kn_moe_weights bad = ok;
    bad.gate_up = NULL;
    assert_int_equal(kn_moe_experts(&be, out, x, idx, rw, 2, 2, &bad), TN_ERR_ARG);
    bad = ok;
    bad.act = (kn_act)5;
    assert_int_equal(kn_moe_experts(&be, out, x, idx, rw, 2, 2, &bad), TN_ERR_ARG);
    bad = ok;
    bad.limit = 0.0f;
    assert_int_equal(kn_moe_experts(&be, out, x, idx, rw, 2, 2, &bad), TN_ERR_ARG);
    bad = ok;
    bad.alpha = NAN;
    assert_int_equal(kn_moe_experts(&be, out, x, idx, rw, 2, 2, &bad), TN_ERR_ARG);
    bad = ok;
    bad.expert_offset = -1;
    assert_int_equal(kn_moe_experts(&be, out, x, idx, rw, 2, 2, &bad), TN_ERR_ARG);
    bad = ok;
    bad.inter = 0;
    assert_int_equal(kn_moe_experts(&be, out, x, idx, rw, 2, 2, &bad), TN_ERR_ARG);
    int32_t neg[4] = { 0, -3, 2, 3 };
    assert_int_equal(kn_moe_experts(&be, out, x, neg, rw, 2, 2, &ok), TN_ERR_ARG);
    float nan_w[4] = { 0.5f, NAN, 0.5f, 0.5f };
    assert_int_equal(kn_moe_experts(&be, out, x, idx, nan_w, 2, 2, &ok), TN_ERR_ARG);
    model_free(&m);
    kn_backend_free(&be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(route_matches_float64),
        cmocka_unit_test(route_ties_pick_lower_id),
        cmocka_unit_test(route_rejects_bad_arguments),
        cmocka_unit_test(experts_match_float64),
        cmocka_unit_test(experts_bf16_weights),
        cmocka_unit_test(clamped_swiglu_hits_the_clamp),
        cmocka_unit_test(expert_shares_sum_to_full),
        cmocka_unit_test(experts_reject_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
