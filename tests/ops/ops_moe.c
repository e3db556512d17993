/* MoE routing and expert MLPs on every backend against float64
 * recomputations. Routing: indices exact (ties to the lower id), weights
 * within 1e-6 relative, descending, summing to 1 where they should; on CUDA
 * also the CPU's ids and weights. Experts: a dense float64 MLP per route
 * (biases included), normwise over the output, with f32 weights (the
 * backend's fp32 bound), bf16 weights (the float64 MoE of the rounded
 * weights and inputs with the activation rounded to bf16: 1e-3; CUDA 5e-3
 * and 3.9e-3 from the CPU) and FP8 weights (the activations through the
 * op's quantization: 5e-3; CUDA 2e-2, also from the CPU); expert-parallel
 * shares sum to the full result and a rank holding none of a batch's
 * experts writes zeros; the clamped SwiGLU is driven past its limits. The
 * CUDA expert paths (grouped, per-expert, streams, fused activation):
 * ops_moe_paths.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/status.h"
#include "kernels/dtype.h"
#include "kernels/fp8.h"
#include "kernels/moe.h"
#include "tests/ops/op_harness.h"
#ifdef TANDEM_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif
#include "tests/ops/ops_fp8.h"
#include "tests/ops/ops_moe.h"

/* GPU vs CPU bf16 experts: the fp32 gate_up sums reach the activation's
 * bf16 rounding in another order, so an activation can land one bf16 ulp
 * (2^-8 relative) away; measured 1.03e-3 with k=1 and 16 tokens. Bound:
 * 2^-8, one ulp on every term. */
#define BF16_MOE_VS_CPU_TOL 3.9e-3
/* FP8 experts: an activation near an e4m3 rounding boundary can land on
 * the neighbouring code (2^-3 relative at most) when h differs by the FP8
 * tensor cores' summation. */
#define FP8_MOE_TOL 2e-2

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

typedef enum { LOGITS_UNIFORM, LOGITS_FEW_VALUES, LOGITS_NORMAL_TIE } logits_kind;
typedef struct route_param {
    int n_tok, n_exp, k;
    kn_route_mode mode;
    int renorm;
    logits_kind logits;
} route_param;

static void route_case(op_env *e, const void *param)
{
    const route_param *p = param;
    int n_tok = p->n_tok, n_exp = p->n_exp, k = p->k;
    size_t nl = (size_t)n_tok * n_exp, no = (size_t)n_tok * k;
    float *logits = op_rand(e, nl, -4.f, 4.f);
    for (size_t i = 0; i < nl; i++) {
        if (p->logits == LOGITS_FEW_VALUES) /* few distinct values: lots of ties */
            logits[i] = floorf(logits[i]);
        else if (p->logits == LOGITS_NORMAL_TIE)
            logits[i] = (float)(2.0 * op_normal(e));
    }
    if (p->logits == LOGITS_NORMAL_TIE) /* a tie in every token: expert 1 copies expert 3 */
        for (int t = 0; t < n_tok; t++)
            logits[(size_t)t * n_exp + 1] = logits[(size_t)t * n_exp + 3];
    int32_t *d_idx = op_dev(e, no * 4);
    float *d_w = op_nan(e, no);
    op_poison(e, d_idx, no); /* 0xffffffff-ish pattern: no valid id */
    if (!op_ok(e, kn_moe_route(e->be, d_idx, d_w, op_up(e, logits, nl * 4), n_tok, n_exp, k, p->mode, p->renorm),
               "kn_moe_route"))
        return;
    int32_t *idx = op_host(e, no * 4), ref_idx[128];
    float *w = op_get(e, d_w, no);
    op_down(e, idx, d_idx, no * 4);
    double ref_w[128], worst = 0.0;
    for (int t = 0; t < n_tok; t++) {
        ref_route(logits + (size_t)t * n_exp, n_exp, k, p->mode, p->renorm, ref_idx, ref_w);
        double sum = 0.0;
        for (int i = 0; i < k; i++) {
            size_t at = (size_t)t * k + i;
            if (idx[at] != ref_idx[i]) {
                op_fail(e, "token %d route %d: expert %d, want %d", t, i, idx[at], ref_idx[i]);
                return;
            }
            double err = fabs(w[at] - ref_w[i]) / ref_w[i];
            if (!(err <= worst))
                worst = isnan(err) ? INFINITY : err;
            if (i > 0 && !(w[at] <= w[at - 1]))
                op_fail(e, "token %d: weights not descending at route %d", t, i);
            sum += w[at];
        }
        if (p->mode == KN_ROUTE_TOPK_SOFTMAX || p->renorm)
            op_check(e, fabs(sum - 1.0) < 1e-6, "token %d: weights sum to %.9g", t, sum);
    }
    op_check_err(e, worst, 1e-6, "route weights vs float64 (per weight)");
    if (e->cuda) {
        int32_t *ci = op_host(e, no * 4);
        float *cw = op_host(e, no * 4);
        if (op_ok(e, kn_moe_route(e->cpu, ci, cw, logits, n_tok, n_exp, k, p->mode, p->renorm), "cpu")) {
            op_check(e, memcmp(ci, idx, no * 4) == 0, "route ids differ from the CPU's");
            op_check_err(e, tu_max_rel_err_f32(w, cw, no), 1e-6, "route weights vs CPU");
        }
    }
}

static void route_ties_pick_lower_id(op_env *e, const void *param)
{
    (void)param;
    const float logits[6] = { 1.0f, 3.0f, 2.0f, 3.0f, 2.0f, 3.0f };
    int32_t idx[4], *d_idx = op_dev(e, sizeof idx);
    float w[4], *d_w = op_nan(e, 4);
    OP_INT_EQ(e, kn_moe_route(e->be, d_idx, d_w, op_up(e, logits, sizeof logits), 1, 6, 4,
                              KN_ROUTE_TOPK_SOFTMAX, 0), TN_OK);
    op_down(e, idx, d_idx, sizeof idx);
    op_down(e, w, d_w, sizeof w);
    OP_INT_EQ(e, idx[0], 1);
    OP_INT_EQ(e, idx[1], 3);
    OP_INT_EQ(e, idx[2], 5);
    OP_INT_EQ(e, idx[3], 2);
    OP_TRUE(e, w[0] == w[1] && w[1] == w[2] && w[3] < w[2]);
}

static void route_rejects_bad_arguments(op_env *e, const void *param)
{
    (void)param;
    const kn_backend *be = e->be;
    float logits[8] = { 0 }, w[8];
    int32_t idx[8];
    OP_INT_EQ(e, kn_moe_route(be, idx, w, logits, 2, 4, 5, KN_ROUTE_TOPK_SOFTMAX, 0), TN_ERR_ARG);
    OP_INT_EQ(e, kn_moe_route(be, idx, w, logits, 2, 4, 0, KN_ROUTE_TOPK_SOFTMAX, 0), TN_ERR_ARG);
    OP_INT_EQ(e, kn_moe_route(be, idx, w, logits, -1, 4, 2, KN_ROUTE_TOPK_SOFTMAX, 0), TN_ERR_ARG);
    OP_INT_EQ(e, kn_moe_route(be, idx, w, logits, 2, 0, 2, KN_ROUTE_TOPK_SOFTMAX, 0), TN_ERR_ARG);
    OP_INT_EQ(e, kn_moe_route(be, idx, w, logits, 2, 4, 2, (kn_route_mode)9, 0), TN_ERR_ARG);
    OP_INT_EQ(e, kn_moe_route(be, NULL, w, logits, 2, 4, 2, KN_ROUTE_TOPK_SOFTMAX, 0), TN_ERR_ARG);
    OP_INT_EQ(e, kn_moe_route(be, idx, NULL, logits, 2, 4, 2, KN_ROUTE_TOPK_SOFTMAX, 0), TN_ERR_ARG);
    OP_INT_EQ(e, kn_moe_route(be, idx, w, NULL, 2, 4, 2, KN_ROUTE_TOPK_SOFTMAX, 0), TN_ERR_ARG);
    logits[5] = NAN;
    OP_INT_EQ(e, kn_moe_route(be, idx, w, logits, 2, 4, 2, KN_ROUTE_SOFTMAX_TOPK, 1), TN_ERR_ARG);
    logits[5] = INFINITY;
    OP_INT_EQ(e, kn_moe_route(be, idx, w, logits, 2, 4, 2, KN_ROUTE_SOFTMAX_TOPK, 1), TN_ERR_ARG);
}

/* ------------------------------------------------------------------ */
/* Experts.                                                           */

void ops_moe_routes(op_env *e, int32_t *idx, float *rw, int n_tok, int k, int n_global, int skew, int first)
{
    for (int t = 0; t < n_tok; t++)
        for (int j = 0; j < k; j++) {
            int ex, dup;
            do {
                ex = skew && j == 0 ? first : tu_rand_int(&e->rng, n_global);
                dup = 0;
                for (int i = 0; i < j; i++)
                    dup |= idx[(size_t)t * k + i] == ex;
            } while (dup);
            idx[(size_t)t * k + j] = ex;
            rw[(size_t)t * k + j] = (float)(0.05 + tu_rand_uniform(&e->rng));
        }
}

kn_moe_weights ops_moe_upload(op_env *e, const kn_moe_weights *hw, size_t gu_bytes, size_t dn_bytes)
{
    kn_moe_weights dw = *hw;
    size_t ne = (size_t)hw->n_experts;
    dw.gate_up = op_up(e, hw->gate_up, ne * gu_bytes);
    dw.down = op_up(e, hw->down, ne * dn_bytes);
    if (hw->gate_up_bias)
        dw.gate_up_bias = op_up(e, hw->gate_up_bias, ne * 2 * hw->inter * sizeof(float));
    if (hw->down_bias)
        dw.down_bias = op_up(e, hw->down_bias, ne * hw->dim * sizeof(float));
    if (hw->gate_up_scale)
        dw.gate_up_scale = op_up(e, hw->gate_up_scale, ne * kn_fp8_scale_count(2 * (size_t)hw->inter, hw->dim) * 4);
    if (hw->down_scale)
        dw.down_scale = op_up(e, hw->down_scale, ne * kn_fp8_scale_count(hw->dim, hw->inter) * 4);
    return dw;
}

/* A full set of f32 expert weights; parts of it are handed out as EP shares. */
typedef struct moe_model {
    int n_experts, dim, inter;
    float *gate_up, *gate_up_bias, *down, *down_bias;
} moe_model;

static void model_init(op_env *e, moe_model *m, int n_experts, int dim, int inter, float gu_range,
                       float dn_range, float bias_range)
{
    m->n_experts = n_experts;
    m->dim = dim;
    m->inter = inter;
    m->gate_up = op_rand(e, (size_t)n_experts * 2 * inter * dim, -gu_range, gu_range);
    m->down = op_rand(e, (size_t)n_experts * dim * inter, -dn_range, dn_range);
    m->gate_up_bias = op_rand(e, (size_t)n_experts * 2 * inter, -bias_range, bias_range);
    m->down_bias = op_rand(e, (size_t)n_experts * dim, -bias_range, bias_range);
}

/* The share of experts [first, first + count) of m, as kn_moe_weights. */
static kn_moe_weights model_share(const moe_model *m, int first, int count, int biases, kn_act act)
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

/* How the reference rounds what the op rounds: nothing (f32 weights), x
 * and the activation to bf16 (bf16 weights), or x and the activation
 * through the FP8 1x128 quantization with the activation computed in fp32
 * from h rounded to fp32 (FP8 weights). */
typedef enum { RQ_NONE, RQ_BF16, RQ_FP8 } rq_mode;

/* Dense float64 MoE over the experts w holds; w's weights are f32 (the
 * rounded or dequantized values for bf16 and FP8). */
static void ref_experts(double *out, const float *x, const int32_t *idx, const float *rw, int n_tok, int k,
                        const kn_moe_weights *w, clamp_hits *hits, rq_mode rq)
{
    int dim = w->dim, inter = w->inter;
    double *h = tu_xcalloc((size_t)2 * inter, sizeof *h);
    float *a = tu_xcalloc((size_t)inter, sizeof *a), *xr = tu_xcalloc((size_t)dim, sizeof *xr);
    memset(out, 0, (size_t)n_tok * dim * sizeof *out);
    for (int t = 0; t < n_tok; t++) {
        const float *xt = x + (size_t)t * dim;
        for (int d = 0; d < dim; d++)
            xr[d] = rq == RQ_BF16 ? kn_round_bf16(xt[d]) : xt[d];
        if (rq == RQ_FP8)
            kn_fp8_round_act_row(xr, xt, (size_t)dim);
        for (int r = 0; r < k; r++) {
            int ex = idx[(size_t)t * k + r] - w->expert_offset;
            if (ex < 0 || ex >= w->n_experts)
                continue;
            for (int j = 0; j < 2 * inter; j++) {
                const float *row = (const float *)w->gate_up + ((size_t)ex * 2 * inter + j) * dim;
                double acc = w->gate_up_bias ? w->gate_up_bias[(size_t)ex * 2 * inter + j] : 0.0;
                for (int d = 0; d < dim; d++)
                    acc += (double)row[d] * xr[d];
                h[j] = acc;
            }
            double *ad = tu_xcalloc((size_t)inter, sizeof *ad);
            for (int j = 0; j < inter; j++) {
                double g = h[j], u = h[inter + j], lim = w->limit;
                if (w->act == KN_ACT_SWIGLU_OAI) {
                    hits->gate_high += g > lim;
                    hits->up_high += u > lim;
                    hits->up_low += u < -lim;
                }
                if (rq == RQ_FP8) { /* fp32, as the op */
                    float gf = (float)g, uf = (float)u;
                    if (w->act == KN_ACT_SWIGLU_OAI) {
                        gf = fminf(gf, w->limit);
                        uf = fminf(fmaxf(uf, -w->limit), w->limit);
                        a[j] = gf / (1.0f + expf(-w->alpha * gf)) * (uf + 1.0f);
                    } else {
                        a[j] = gf / (1.0f + expf(-gf)) * uf;
                    }
                    continue;
                }
                if (w->act == KN_ACT_SWIGLU) {
                    ad[j] = g / (1.0 + exp(-g)) * u;
                } else {
                    g = g > lim ? lim : g;
                    u = u > lim ? lim : u < -lim ? -lim : u;
                    ad[j] = g / (1.0 + exp(-(double)w->alpha * g)) * (u + 1.0);
                }
                if (rq == RQ_BF16)
                    ad[j] = kn_round_bf16((float)ad[j]);
            }
            if (rq == RQ_FP8) {
                kn_fp8_round_act_row(a, a, (size_t)inter);
                for (int j = 0; j < inter; j++)
                    ad[j] = a[j];
            }
            for (int d = 0; d < dim; d++) {
                const float *row = (const float *)w->down + ((size_t)ex * dim + d) * inter;
                double acc = w->down_bias ? w->down_bias[(size_t)ex * dim + d] : 0.0;
                for (int j = 0; j < inter; j++)
                    acc += (double)row[j] * ad[j];
                out[(size_t)t * dim + d] += rw[(size_t)t * k + r] * acc;
            }
            free(ad);
        }
    }
    free(h);
    free(a);
    free(xr);
}

/* Runs kn_moe_experts on the backend (output NaN first): the host result. */
static float *run_experts(op_env *e, const float *x, const int32_t *idx, const float *rw, int n_tok, int k,
                          const kn_moe_weights *dw, const char *what)
{
    size_t no = (size_t)n_tok * dw->dim;
    float *d_out = op_nan(e, no);
    int rc = kn_moe_experts(e->be, d_out, op_up(e, x, no * 4), op_up(e, idx, (size_t)n_tok * k * 4),
                            op_up(e, rw, (size_t)n_tok * k * 4), n_tok, k, dw);
    return op_ok(e, rc, what) ? op_get(e, d_out, no) : NULL;
}

/* On CUDA: the CPU backend's result on the host weights, against got. */
static void vs_cpu(op_env *e, const float *got, const float *x, const int32_t *idx, const float *rw, int n_tok,
                   int k, const kn_moe_weights *hw, double tol, const char *what)
{
    if (!e->cuda || !got)
        return;
    size_t no = (size_t)n_tok * hw->dim;
    float *cpu = op_host(e, no * 4);
    if (op_ok(e, kn_moe_experts(e->cpu, cpu, x, idx, rw, n_tok, k, hw), "kn_moe_experts cpu"))
        op_check_err(e, tu_max_rel_err_f32(got, cpu, no), tol, "%s vs CPU", what);
}

typedef struct experts_param {
    int n_tok, k, n_global, n_local, offset, dim, inter;
    kn_act act;
    int biases;
    float gu_range, dn_range, bias_range;
} experts_param;

static void experts_f32(op_env *e, const void *param)
{
    const experts_param *p = param;
    moe_model m;
    model_init(e, &m, p->n_local, p->dim, p->inter, p->gu_range, p->dn_range, p->bias_range);
    kn_moe_weights hw = model_share(&m, 0, p->n_local, p->biases, p->act);
    hw.expert_offset = p->offset;
    size_t no = (size_t)p->n_tok * p->dim, ns = (size_t)p->n_tok * p->k;
    float *x = op_rand(e, no, p->dim > 200 ? -2.f : -1.f, p->dim > 200 ? 2.f : 1.f), *rw = op_host(e, ns * 4);
    int32_t *idx = op_host(e, ns * 4);
    ops_moe_routes(e, idx, rw, p->n_tok, p->k, p->n_global, 0, 0);
    double *ref = op_host(e, no * sizeof(double));
    clamp_hits hits = { 0 };
    ref_experts(ref, x, idx, rw, p->n_tok, p->k, &hw, &hits, RQ_NONE);
    kn_moe_weights dw = ops_moe_upload(e, &hw, (size_t)2 * p->inter * p->dim * 4, (size_t)p->dim * p->inter * 4);
    float *got = run_experts(e, x, idx, rw, p->n_tok, p->k, &dw, "kn_moe_experts");
    double tol = op_tol_fp32(e, 1);
    if (got)
        op_check_err(e, tu_max_rel_err(got, ref, no), tol, "experts vs float64");
    vs_cpu(e, got, x, idx, rw, p->n_tok, p->k, &hw, tol, "experts");
}

/* bf16 expert weights: the float64 MoE of the bf16-rounded weights and
 * inputs, with the activation rounded to bf16 before the down product; and
 * about bf16's rounding away from the f32-weight MoE. */
static void experts_bf16(op_env *e, const void *param)
{
    const experts_param *p = param;
    int n_exp = p->n_global, dim = p->dim, inter = p->inter;
    size_t ngu = (size_t)n_exp * 2 * inter * dim, nd = (size_t)n_exp * dim * inter;
    moe_model m;
    model_init(e, &m, n_exp, dim, inter, p->gu_range, p->dn_range, p->bias_range);
    uint16_t *gu = op_host(e, ngu * 2), *dn = op_host(e, nd * 2);
    kn_f32_to_bf16_n(gu, m.gate_up, ngu);
    kn_f32_to_bf16_n(dn, m.down, nd);
    kn_moe_weights wf = model_share(&m, 0, n_exp, 1, p->act), wb = wf, wr = wf;
    wb.wdtype = KN_BF16;
    wb.gate_up = gu;
    wb.down = dn;
    /* the reference reads the rounded weights as f32 */
    float *gur = op_host(e, ngu * 4), *dnr = op_host(e, nd * 4);
    kn_bf16_to_f32_n(gur, gu, ngu);
    kn_bf16_to_f32_n(dnr, dn, nd);
    wr.gate_up = gur;
    wr.down = dnr;
    size_t nx = (size_t)p->n_tok * dim, ns = (size_t)p->n_tok * p->k;
    float *x = op_rand(e, nx, -1.f, 1.f), *rw = op_host(e, ns * 4);
    int32_t *idx = op_host(e, ns * 4);
    ops_moe_routes(e, idx, rw, p->n_tok, p->k, n_exp, 0, 0);
    double *ref = op_host(e, nx * 8), *ref32 = op_host(e, nx * 8);
    clamp_hits hits = { 0 };
    ref_experts(ref, x, idx, rw, p->n_tok, p->k, &wr, &hits, RQ_BF16);
    ref_experts(ref32, x, idx, rw, p->n_tok, p->k, &wf, &hits, RQ_NONE);
    kn_moe_weights dw = ops_moe_upload(e, &wb, (size_t)2 * inter * dim * 2, (size_t)dim * inter * 2);
    float *got = run_experts(e, x, idx, rw, p->n_tok, p->k, &dw, "kn_moe_experts bf16");
    if (got) {
        /* an activation whose float and double values round to different
         * bf16 neighbours moves its term by 2^-8: well under 1e-3 (CUDA:
         * plus the GPU's own summation order, BF16_MOE_VS_CPU_TOL) */
        op_check_err(e, tu_max_rel_err(got, ref, nx), e->cuda ? 1e-3 + BF16_MOE_VS_CPU_TOL : 1e-3,
                     "bf16 experts vs the rounded float64 MoE");
        double vs_f32 = tu_max_rel_err(got, ref32, nx);
        op_check(e, vs_f32 > 1e-4 && vs_f32 < 5e-2, "bf16 experts: %g from the f32-weight MoE", vs_f32);
    }
    vs_cpu(e, got, x, idx, rw, p->n_tok, p->k, &wb, BF16_MOE_VS_CPU_TOL, "bf16 experts");
    dw.wdtype = (kn_dtype)5;
    OP_INT_EQ(e, kn_moe_experts(e->be, op_nan(e, nx), op_up(e, x, nx * 4), op_up(e, idx, ns * 4),
                                op_up(e, rw, ns * 4), p->n_tok, p->k, &dw), TN_ERR_ARG);
}

/* FP8 expert weights against the float64 MoE whose activations go through
 * the op's quantization. */
static void experts_fp8(op_env *e, const void *param)
{
    const experts_param *p = param;
    int n_exp = p->n_global, dim = p->dim, inter = p->inter;
    size_t gsz = (size_t)2 * inter * dim, dsz = (size_t)dim * inter;
    size_t gdb = kn_fp8_data_bytes(2 * inter, dim), gsc = kn_fp8_scale_count(2 * inter, dim);
    size_t ddb = kn_fp8_data_bytes(dim, inter), dsc = kn_fp8_scale_count(dim, inter);
    uint8_t *guq = op_host(e, n_exp * gdb), *dnq = op_host(e, n_exp * ddb);
    float *gus = op_host(e, n_exp * gsc * 4), *dns = op_host(e, n_exp * dsc * 4);
    float *gud = op_host(e, n_exp * gsz * 4), *dnd = op_host(e, n_exp * dsz * 4);
    int blocky = p->gu_range == 0.f; /* weights of block magnitudes 2^-3..2^3 */
    for (int ex = 0; ex < n_exp; ex++) {
        uint8_t *q;
        float *s;
        if (blocky) {
            ops_fp8_weight(e, 2 * inter, dim, 1, &q, &s);
            memcpy(guq + ex * gdb, q, gdb);
            for (size_t i = 0; i < gsc; i++) /* keep h near 1 */
                gus[ex * gsc + i] = s[i] / (float)dim;
            ops_fp8_weight(e, dim, inter, 1, &q, &s);
            memcpy(dnq + ex * ddb, q, ddb);
            for (size_t i = 0; i < dsc; i++)
                dns[ex * dsc + i] = s[i] / (float)inter;
        } else {
            float *gu = op_rand(e, gsz, -p->gu_range, p->gu_range), *dn = op_rand(e, dsz, -p->dn_range, p->dn_range);
            kn_fp8_quantize_weight(guq + ex * gdb, gus + ex * gsc, gu, 2 * inter, dim);
            kn_fp8_quantize_weight(dnq + ex * ddb, dns + ex * dsc, dn, dim, inter);
        }
    }
    float *gub = op_rand(e, (size_t)n_exp * 2 * inter, -0.5f, 0.5f), *dnb = op_rand(e, (size_t)n_exp * dim, -0.5f, 0.5f);
    kn_moe_weights hw = {
        .n_experts = n_exp, .expert_offset = 0, .dim = dim, .inter = inter, .wdtype = KN_FP8_E4M3,
        .gate_up = guq, .gate_up_bias = gub, .down = dnq, .down_bias = dnb, .gate_up_scale = gus,
        .down_scale = dns, .act = p->act, .alpha = 1.702f, .limit = 7.0f,
    };
    kn_moe_weights wr = hw;
    wr.wdtype = KN_F32, wr.gate_up = gud, wr.down = dnd, wr.gate_up_scale = wr.down_scale = NULL;
    size_t no = (size_t)p->n_tok * dim, ns = (size_t)p->n_tok * p->k;
    float *x = op_rand(e, no, -2.f, 2.f), *rw = op_host(e, ns * 4);
    int32_t *idx = op_host(e, ns * 4);
    ops_moe_routes(e, idx, rw, p->n_tok, p->k, n_exp, 0, 0);
    /* the reference's weights: only the experts routed to, dequantized */
    char *used = op_host(e, (size_t)n_exp);
    for (size_t i = 0; i < ns; i++)
        used[idx[i]] = 1;
    for (int ex = 0; ex < n_exp; ex++)
        if (used[ex]) {
            kn_fp8_dequantize_weight(gud + ex * gsz, guq + ex * gdb, gus + ex * gsc, 2 * inter, dim);
            kn_fp8_dequantize_weight(dnd + ex * dsz, dnq + ex * ddb, dns + ex * dsc, dim, inter);
        }
    double *ref = op_host(e, no * 8);
    clamp_hits hits = { 0 };
    ref_experts(ref, x, idx, rw, p->n_tok, p->k, &wr, &hits, RQ_FP8);
    kn_moe_weights dw = ops_moe_upload(e, &hw, gdb, ddb);
#ifdef TANDEM_CUDA
    /* the quantizing paths; the expert GEMV (fp32 activations) that takes
     * up to 4 tokens by default is checked in ops_gemv_fp8.c */
    const int gemv_was = e->cuda ? kn_cuda_moe_gemv_on(e->be) : 0;
    if (e->cuda)
        kn_cuda_set_moe_gemv(e->be, 0);
#endif
    float *got = run_experts(e, x, idx, rw, p->n_tok, p->k, &dw, "kn_moe_experts fp8");
    /* Same quantization on both sides; where the op's sums and the float64
     * sum put an activation on different sides of an e4m3 rounding
     * boundary, that activation moves by one e4m3 step, which moves the
     * output by well under 5e-3 of its norm on the CPU (fp32 sgemm). */
    if (got) {
        double err = tu_max_rel_err(got, ref, no);
        op_check_err(e, err, e->cuda ? FP8_MOE_TOL : 5e-3, "fp8 experts vs float64");
        printf("# fp8 experts vs float64: normwise rel err %.3g\n", err);
    }
    vs_cpu(e, got, x, idx, rw, p->n_tok, p->k, &hw, FP8_MOE_TOL, "fp8 experts");
#ifdef TANDEM_CUDA
    if (e->cuda)
        kn_cuda_set_moe_gemv(e->be, gemv_was);
#endif
    dw.down_scale = NULL;
    OP_INT_EQ(e, kn_moe_experts(e->be, op_nan(e, no), op_up(e, x, no * 4), op_up(e, idx, ns * 4),
                                op_up(e, rw, ns * 4), p->n_tok, p->k, &dw), TN_ERR_ARG);
}

/* GPT-OSS's clamped SwiGLU with pre-activations well past +-limit. */
static void clamped_swiglu_hits_the_clamp(op_env *e, const void *param)
{
    (void)param;
    int n_tok = 40, n_exp = 4, k = 2, dim = 32, inter = 16;
    moe_model m;
    model_init(e, &m, n_exp, dim, inter, 2.0f, 0.5f, 1.0f); /* pre-activations of std ~6.5 */
    kn_moe_weights w = model_share(&m, 0, n_exp, 1, KN_ACT_SWIGLU_OAI);
    size_t no = (size_t)n_tok * dim;
    float *x = op_rand(e, no, -1.f, 1.f), *rw = op_host(e, (size_t)n_tok * k * 4);
    int32_t *idx = op_host(e, (size_t)n_tok * k * 4);
    ops_moe_routes(e, idx, rw, n_tok, k, n_exp, 0, 0);
    double *ref = op_host(e, no * 8), *unclamped = op_host(e, no * 8);
    clamp_hits hits = { 0 }, none = { 0 };
    ref_experts(ref, x, idx, rw, n_tok, k, &w, &hits, RQ_NONE);
    OP_TRUE(e, hits.gate_high > 20 && hits.up_high > 20 && hits.up_low > 20);
    kn_moe_weights dw = ops_moe_upload(e, &w, (size_t)2 * inter * dim * 4, (size_t)dim * inter * 4);
    float *got = run_experts(e, x, idx, rw, n_tok, k, &dw, "kn_moe_experts");
    if (!got)
        return;
    op_check_err(e, tu_max_rel_err(got, ref, no), op_tol_fp32(e, 1), "clamped experts vs float64");
    /* without the clamp the result would differ by far more than the bound */
    kn_moe_weights loose = w;
    loose.limit = 1e30f;
    ref_experts(unclamped, x, idx, rw, n_tok, k, &loose, &none, RQ_NONE);
    OP_TRUE(e, tu_max_rel_err(got, unclamped, no) > 1e-2);
}

/* Expert parallelism: ranks holding experts {0-2}, {3-5}, {6-7} each
 * compute their share; the shares sum to the single-rank result. */
static void expert_shares_sum_to_full(op_env *e, const void *param)
{
    const experts_param *p = param;
    int n_tok = 25, n_exp = 8, k = 3, dim = 24, inter = 12;
    const int first[3] = { 0, 3, 6 }, count[3] = { 3, 3, 2 };
    moe_model m;
    model_init(e, &m, n_exp, dim, inter, 1.0f, 0.5f, 1.0f);
    size_t n = (size_t)n_tok * dim;
    float *x = op_rand(e, n, -1.f, 1.f), *sum = op_host(e, n * 4), *rw = op_host(e, (size_t)n_tok * k * 4);
    double *ref = op_host(e, n * 8);
    int32_t *idx = op_host(e, (size_t)n_tok * k * 4);
    ops_moe_routes(e, idx, rw, n_tok, k, n_exp, 0, 0);
    size_t gu_b = (size_t)2 * inter * dim * 4, dn_b = (size_t)dim * inter * 4;
    kn_moe_weights all = model_share(&m, 0, n_exp, 1, p->act), d_all = ops_moe_upload(e, &all, gu_b, dn_b);
    float *full = run_experts(e, x, idx, rw, n_tok, k, &d_all, "kn_moe_experts all");
    for (int r = 0; r < 3; r++) {
        kn_moe_weights share = model_share(&m, first[r], count[r], 1, p->act);
        kn_moe_weights d_share = ops_moe_upload(e, &share, gu_b, dn_b);
        float *part = run_experts(e, x, idx, rw, n_tok, k, &d_share, "kn_moe_experts share");
        if (!part)
            return;
        clamp_hits hits = { 0 };
        ref_experts(ref, x, idx, rw, n_tok, k, &share, &hits, RQ_NONE);
        op_check_err(e, tu_max_rel_err(part, ref, n), op_tol_fp32(e, 1), "share %d vs float64", r);
        for (size_t i = 0; i < n; i++)
            sum[i] += part[i];
    }
    if (full)
        op_check_err(e, tu_max_rel_err_f32(sum, full, n), 1e-6, "shares summed vs the full result");
    /* a rank holding none of a batch's experts outputs zeros */
    int32_t *low = op_host(e, (size_t)n_tok * k * 4);
    for (size_t i = 0; i < (size_t)n_tok * k; i++)
        low[i] = (int32_t)(i % 3);
    kn_moe_weights last = model_share(&m, 6, 2, 1, p->act), d_last = ops_moe_upload(e, &last, gu_b, dn_b);
    float *zero = run_experts(e, x, low, rw, n_tok, k, &d_last, "kn_moe_experts last");
    for (size_t i = 0; zero && i < n; i++)
        if (!(zero[i] == 0.0f)) {
            op_fail(e, "a rank holding none of the experts wrote %g at %zu", zero[i], i);
            break;
        }
}

static void experts_reject_bad_arguments(op_env *e, const void *param)
{
    (void)param;
    const kn_backend *be = e->be;
    moe_model m;
    model_init(e, &m, 4, 4, 2, 1.0f, 0.5f, 1.0f);
    float x[2 * 4] = { 0 }, out[2 * 4], rw[2 * 2] = { 0.5f, 0.5f, 0.5f, 0.5f };
    int32_t idx[2 * 2] = { 0, 1, 2, 3 };
    kn_moe_weights ok = model_share(&m, 0, 4, 1, KN_ACT_SWIGLU_OAI);
    OP_INT_EQ(e, kn_moe_experts(be, out, x, idx, rw, 2, 2, &ok), TN_OK);
    OP_INT_EQ(e, kn_moe_experts(be, NULL, x, idx, rw, 2, 2, &ok), TN_ERR_ARG);
    OP_INT_EQ(e, kn_moe_experts(be, out, NULL, idx, rw, 2, 2, &ok), TN_ERR_ARG);
    OP_INT_EQ(e, kn_moe_experts(be, out, x, NULL, rw, 2, 2, &ok), TN_ERR_ARG);
    OP_INT_EQ(e, kn_moe_experts(be, out, x, idx, NULL, 2, 2, &ok), TN_ERR_ARG);
    OP_INT_EQ(e, kn_moe_experts(be, out, x, idx, rw, 2, 2, NULL), TN_ERR_ARG);
    OP_INT_EQ(e, kn_moe_experts(be, out, x, idx, rw, -1, 2, &ok), TN_ERR_ARG);
    OP_INT_EQ(e, kn_moe_experts(be, out, x, idx, rw, 2, 0, &ok), TN_ERR_ARG);
    OP_INT_EQ(e, kn_moe_experts(be, x, x, idx, rw, 2, 2, &ok), TN_ERR_ARG); /* aliasing */
    kn_moe_weights bad = ok;
    bad.gate_up = NULL;
    OP_INT_EQ(e, kn_moe_experts(be, out, x, idx, rw, 2, 2, &bad), TN_ERR_ARG);
    bad = ok;
    bad.act = (kn_act)5;
    OP_INT_EQ(e, kn_moe_experts(be, out, x, idx, rw, 2, 2, &bad), TN_ERR_ARG);
    bad = ok;
    bad.limit = 0.0f;
    OP_INT_EQ(e, kn_moe_experts(be, out, x, idx, rw, 2, 2, &bad), TN_ERR_ARG);
    bad = ok;
    bad.alpha = NAN;
    OP_INT_EQ(e, kn_moe_experts(be, out, x, idx, rw, 2, 2, &bad), TN_ERR_ARG);
    bad = ok;
    bad.expert_offset = -1;
    OP_INT_EQ(e, kn_moe_experts(be, out, x, idx, rw, 2, 2, &bad), TN_ERR_ARG);
    bad = ok;
    bad.inter = 0;
    OP_INT_EQ(e, kn_moe_experts(be, out, x, idx, rw, 2, 2, &bad), TN_ERR_ARG);
    int32_t neg[4] = { 0, -3, 2, 3 };
    OP_INT_EQ(e, kn_moe_experts(be, out, x, neg, rw, 2, 2, &ok), TN_ERR_ARG);
    float nan_w[4] = { 0.5f, NAN, 0.5f, 0.5f };
    OP_INT_EQ(e, kn_moe_experts(be, out, x, idx, nan_w, 2, 2, &ok), TN_ERR_ARG);
}

static const char *act_name(kn_act act)
{
    return act == KN_ACT_SWIGLU_OAI ? "clamped-swiglu" : "swiglu";
}

void ops_register_moe(void)
{
    static const int rshapes[][3] = { { 1, 1, 1 }, { 5, 8, 2 }, { 33, 32, 4 }, { 64, 128, 8 }, { 7, 9, 9 } };
    static const char *const mname[] = { "topk-softmax", "softmax-topk", "softmax-topk renorm" };
    for (size_t s = 0; s < 5; s++)
        for (int variant = 0; variant < 3; variant++)
            for (int ties = 0; ties < 2; ties++) {
                route_param p = { rshapes[s][0], rshapes[s][1], rshapes[s][2],
                                  variant == 0 ? KN_ROUTE_TOPK_SOFTMAX : KN_ROUTE_SOFTMAX_TOPK, variant == 2,
                                  ties ? LOGITS_FEW_VALUES : LOGITS_UNIFORM };
                OP_CASE("moe_route", OP_ALL, route_case, p, "%s tokens=%d experts=%d k=%d%s", mname[variant],
                        p.n_tok, p.n_exp, p.k, ties ? " ties" : "");
            }
    static const route_param rnorm[] = { { 50, 32, 4, KN_ROUTE_TOPK_SOFTMAX, 0, LOGITS_NORMAL_TIE },
                                         { 77, 128, 8, KN_ROUTE_SOFTMAX_TOPK, 1, LOGITS_NORMAL_TIE },
                                         { 33, 128, 8, KN_ROUTE_SOFTMAX_TOPK, 0, LOGITS_NORMAL_TIE },
                                         { 9, 60, 6, KN_ROUTE_TOPK_SOFTMAX, 0, LOGITS_NORMAL_TIE } };
    for (size_t i = 0; i < 4; i++)
        OP_CASE("moe_route", OP_ALL, route_case, rnorm[i], "%s tokens=%d experts=%d k=%d normal logits, tie 1=3",
                mname[rnorm[i].mode == KN_ROUTE_TOPK_SOFTMAX ? 0 : rnorm[i].renorm ? 2 : 1], rnorm[i].n_tok,
                rnorm[i].n_exp, rnorm[i].k);
    route_param none = { 0 };
    OP_CASE("moe_route", OP_ALL, route_ties_pick_lower_id, none, "ties pick the lower id");
    OP_CASE("moe_route", OP_CPU, route_rejects_bad_arguments, none, "rejects bad arguments");

    /* f32 experts: the CPU test's shapes (all experts held) with both
     * activations, with and without biases; then the CUDA test's, with EP
     * offsets (n_tokens, k, n_global, n_local, offset, dim, inter) */
    static const int eshapes[][5] = { { 1, 2, 1, 4, 3 }, { 7, 8, 2, 16, 8 }, { 50, 8, 4, 33, 24 },
                                      { 130, 16, 4, 64, 32 } };
    for (size_t s = 0; s < 4; s++)
        for (int act = 0; act < 2; act++)
            for (int b = 0; b < 2; b++) {
                experts_param p = { eshapes[s][0], eshapes[s][2], eshapes[s][1], eshapes[s][1], 0, eshapes[s][3],
                                    eshapes[s][4], (kn_act)act, b, 0.5f, 0.5f, 1.0f };
                OP_CASE("moe_experts", OP_ALL, experts_f32, p, "f32 %s tokens=%d k=%d experts=%d dim=%d inter=%d%s",
                        act_name(p.act), p.n_tok, p.k, p.n_global, p.dim, p.inter, b ? " +bias" : "");
            }
    static const experts_param ecuda[] = {
        { 40, 4, 8, 8, 0, 64, 96, KN_ACT_SWIGLU_OAI, 1, 0.3f, 0.3f, 0.5f },
        { 61, 8, 32, 8, 8, 96, 40, KN_ACT_SWIGLU, 0, 0.3f, 0.3f, 0.5f },
        { 200, 4, 32, 32, 0, 288, 192, KN_ACT_SWIGLU_OAI, 1, 0.3f, 0.3f, 0.5f },
        { 3, 2, 16, 4, 12, 33, 17, KN_ACT_SWIGLU_OAI, 1, 0.3f, 0.3f, 0.5f },
    };
    for (size_t i = 0; i < 4; i++)
        OP_CASE("moe_experts", OP_ALL, experts_f32, ecuda[i],
                "f32 %s tokens=%d k=%d experts %d..%d of %d dim=%d inter=%d%s", act_name(ecuda[i].act),
                ecuda[i].n_tok, ecuda[i].k, ecuda[i].offset, ecuda[i].offset + ecuda[i].n_local - 1,
                ecuda[i].n_global, ecuda[i].dim, ecuda[i].inter, ecuda[i].biases ? " +bias" : "");
    /* bf16 weights: the CPU test's shapes with both activations, then the
     * CUDA test's */
    static const experts_param bf16[] = {
        { 9, 2, 8, 8, 0, 16, 8, KN_ACT_SWIGLU, 1, 0.5f, 0.5f, 1.0f },
        { 9, 2, 8, 8, 0, 16, 8, KN_ACT_SWIGLU_OAI, 1, 0.5f, 0.5f, 1.0f },
        { 70, 4, 16, 16, 0, 64, 40, KN_ACT_SWIGLU, 1, 0.5f, 0.5f, 1.0f },
        { 70, 4, 16, 16, 0, 64, 40, KN_ACT_SWIGLU_OAI, 1, 0.5f, 0.5f, 1.0f },
        { 40, 4, 8, 8, 0, 64, 96, KN_ACT_SWIGLU_OAI, 1, 0.3f, 0.3f, 0.5f },
        { 200, 4, 32, 32, 0, 288, 192, KN_ACT_SWIGLU_OAI, 1, 0.3f, 0.3f, 0.5f },
        { 61, 8, 16, 16, 0, 128, 48, KN_ACT_SWIGLU, 1, 0.3f, 0.3f, 0.5f },
    };
    for (size_t i = 0; i < sizeof bf16 / sizeof bf16[0]; i++)
        OP_CASE("moe_experts", OP_ALL, experts_bf16, bf16[i], "bf16 %s tokens=%d k=%d experts=%d dim=%d inter=%d",
                act_name(bf16[i].act), bf16[i].n_tok, bf16[i].k, bf16[i].n_global, bf16[i].dim, bf16[i].inter);
    /* FP8 weights: the CPU test's small uniform weights, then the CUDA
     * test's block-magnitude weights (gu_range 0) on GPT-OSS's 2880 */
    static const experts_param fp8[] = {
        { 11, 2, 6, 6, 0, 160, 72, KN_ACT_SWIGLU_OAI, 1, 0.2f, 0.2f, 0.5f },
        { 1, 4, 32, 32, 0, 2880, 2880, KN_ACT_SWIGLU_OAI, 1, 0.f, 0.f, 0.5f },
        { 200, 4, 32, 32, 0, 288, 192, KN_ACT_SWIGLU_OAI, 1, 0.f, 0.f, 0.5f },
        { 61, 8, 16, 16, 0, 256, 768, KN_ACT_SWIGLU, 1, 0.f, 0.f, 0.5f },
    };
    for (size_t i = 0; i < sizeof fp8 / sizeof fp8[0]; i++) /* 32 experts of 2880 x 2880: CUDA only */
        OP_CASE("moe_experts", fp8[i].dim == 2880 ? OP_CUDA : OP_ALL, experts_fp8, fp8[i], "fp8%s %s tokens=%d k=%d experts=%d dim=%d inter=%d",
                fp8[i].gu_range == 0.f ? " blocky" : "", act_name(fp8[i].act), fp8[i].n_tok, fp8[i].k,
                fp8[i].n_global, fp8[i].dim, fp8[i].inter);
    OP_CASE("moe_experts", OP_ALL, clamped_swiglu_hits_the_clamp, none, "clamped swiglu hits the clamp");
    for (int act = 0; act < 2; act++) {
        experts_param p = { .act = (kn_act)act };
        OP_CASE("moe_experts", OP_ALL, expert_shares_sum_to_full, p, "%s EP shares sum to the full result",
                act_name(p.act));
    }
    OP_CASE("moe_experts", OP_CPU, experts_reject_bad_arguments, none, "rejects bad arguments");
}
