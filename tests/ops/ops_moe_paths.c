/* The CUDA backend's MoE expert paths, against the CPU backend and each
 * other (CUDA only: they are switches of kernels/cuda/cuda_backend.h):
 *   - the bf16 per-expert path forced, with fresh random routes for many
 *     token counts in a row, on the backend's stream and over 4 side
 *     streams (each with its own workspace);
 *   - the grouped one-launch kernels and the per-expert GEMMs (forced
 *     through kn_cuda_set_moe_grouped) on the real models' shapes, bf16
 *     and FP8 weights; per-expert over 4 streams vs one; FP8's fused
 *     activation+quantization vs the unfused pair, bit for bit;
 *   - FP8: the grouped GEMMs (moe_gemm_fp8.cu, the prefill default) against
 *     the CPU and the per-expert GEMMs, and each of its two products paired
 *     with the decode kernel's other one (so a failure names the product),
 *     with the backend's temporaries poisoned (NaN) for those modes; on
 *     failure the first wrong (token, column)s are printed.
 * The bf16 shapes run in the default group and in `moe`; the FP8 shapes
 * run one batch of each kind in the default group and every batch in
 * `moe-fp8` (test_cuda_ops SEED moe | moe-fp8). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "common/status.h"
#include "kernels/dtype.h"
#include "kernels/fill.h"
#include "kernels/fp8.h"
#include "kernels/moe.h"
#include "tests/ops/op_harness.h"
#include "tests/ops/ops_moe.h"
#ifdef TANDEM_CUDA
#include "kernels/cuda/cuda_backend.h"

#define BF16_MOE_TOL 1e-3        /* grouped vs per-expert: activations rounding to neighbouring bf16s */
#define BF16_MOE_VS_CPU_TOL 3.9e-3 /* one bf16 ulp (2^-8) on every term: ops_moe.c */
#define FP8_MOE_TOL 2e-2         /* one e4m3 step of an activation: ops_moe.c */

/* ------------------------------------------------------------------ */
/* The two bf16 expert paths of the CUDA backend (the grouped one-launch */
/* kernel and the per-expert cuBLAS GEMMs, forced through                */
/* kn_cuda_set_moe_grouped) on the real models' shapes, both against the */
/* CPU backend and against each other.                                   */

typedef struct moe_shape {
    const char *name;
    int n_global, dim, inter;
    kn_act act;
    int biases;
    int fp8; /* KN_FP8_E4M3 weights (block scales gus/dns) instead of bf16 */
    /* all n_global experts: host (CPU backend) and device copies */
    void *gu, *dn, *d_gu, *d_dn;
    float *gub, *dnb, *d_gub, *d_dnb;
    float *gus, *dns, *d_gus, *d_dns;
} moe_shape;

/* Bytes of one expert's gate_up / down weights, floats of their scales. */
static size_t moe_gu_bytes(const moe_shape *s)
{
    return s->fp8 ? kn_fp8_data_bytes(2 * (size_t)s->inter, s->dim) : 2 * (size_t)s->inter * s->dim * 2;
}
static size_t moe_dn_bytes(const moe_shape *s)
{
    return s->fp8 ? kn_fp8_data_bytes(s->dim, s->inter) : (size_t)s->dim * s->inter * 2;
}

/* Synthetic FP8 weights: random finite codes everywhere (the row padding
 * too, which must meet zero activation codes) and a random scale per
 * 128x128 block in [0.5, 1.5] * a / 448, so values are within about +-1.5a
 * and a wrong block's scale shows; scale-row padding 1 (kernels/fp8.h). */
static float *fp8_block_scales(op_env *e, int n_experts, size_t n, size_t k, float a)
{
    size_t per = kn_fp8_scale_count(n, k), ld = kn_fp8_scale_ld(k), kb = kn_fp8_blocks(k);
    float *sc = op_rand(e, (size_t)n_experts * per, 0.5f * a / 448.f, 1.5f * a / 448.f);
    for (size_t i = 0; i < (size_t)n_experts * per; i++)
        if (i % ld >= kb)
            sc[i] = 1.f;
    return sc;
}

static void moe_shape_make(op_env *e, moe_shape *s, uint64_t seed)
{
    size_t gub = (size_t)s->n_global * moe_gu_bytes(s), dnb = (size_t)s->n_global * moe_dn_bytes(s);
    s->gu = op_host(e, gub);
    s->dn = op_host(e, dnb);
    /* Scaled so h and y stay O(1) (the clamp does not swallow everything). */
    float a_gu = sqrtf(3.f / (float)s->dim), a_dn = sqrtf(3.f / (float)s->inter);
    int rc;
    s->gus = s->dns = s->d_gus = s->d_dns = NULL;
    if (s->fp8) {
        rc = kn_fill_uniform(e->cpu, s->gu, KN_FP8_E4M3, gub, seed, -448.f, 448.f);
        if (rc == TN_OK)
            rc = kn_fill_uniform(e->cpu, s->dn, KN_FP8_E4M3, dnb, seed + 1, -448.f, 448.f);
        s->gus = fp8_block_scales(e, s->n_global, 2 * (size_t)s->inter, s->dim, a_gu);
        s->dns = fp8_block_scales(e, s->n_global, s->dim, s->inter, a_dn);
        s->d_gus = op_up(e, s->gus, (size_t)s->n_global * kn_fp8_scale_count(2 * (size_t)s->inter, s->dim) *
                                             sizeof(float));
        s->d_dns = op_up(e, s->dns, (size_t)s->n_global * kn_fp8_scale_count(s->dim, s->inter) * sizeof(float));
    } else {
        rc = kn_fill_uniform(e->cpu, s->gu, KN_BF16, gub / 2, seed, -a_gu, a_gu);
        if (rc == TN_OK)
            rc = kn_fill_uniform(e->cpu, s->dn, KN_BF16, dnb / 2, seed + 1, -a_dn, a_dn);
    }
    if (rc != TN_OK)
        op_fail(e, "kn_fill_uniform cpu returned %d", rc);
    s->d_gu = op_up(e, s->gu, gub);
    s->d_dn = op_up(e, s->dn, dnb);
    s->gub = s->dnb = s->d_gub = s->d_dnb = NULL;
    if (s->biases) {
        s->gub = op_rand(e, (size_t)s->n_global * 2 * s->inter, -0.5f, 0.5f);
        s->dnb = op_rand(e, (size_t)s->n_global * s->dim, -0.5f, 0.5f);
        s->d_gub = op_up(e, s->gub, (size_t)s->n_global * 2 * s->inter * sizeof(float));
        s->d_dnb = op_up(e, s->dnb, (size_t)s->n_global * s->dim * sizeof(float));
    }
}


/* The weights of experts [offset, offset + n_local) as an EP rank holds them. */
static kn_moe_weights moe_shape_view(const moe_shape *s, int on_device, int offset, int n_local)
{
    size_t gu_off = (size_t)offset * moe_gu_bytes(s), dn_off = (size_t)offset * moe_dn_bytes(s);
    const char *gu = on_device ? s->d_gu : s->gu, *dn = on_device ? s->d_dn : s->dn;
    const float *gub = on_device ? s->d_gub : s->gub, *dnb = on_device ? s->d_dnb : s->dnb;
    const float *gus = on_device ? s->d_gus : s->gus, *dns = on_device ? s->d_dns : s->dns;
    kn_moe_weights w = { .n_experts = n_local, .expert_offset = offset, .dim = s->dim, .inter = s->inter,
                         .wdtype = s->fp8 ? KN_FP8_E4M3 : KN_BF16, .gate_up = gu + gu_off, .gate_up_bias = gub ? gub + (size_t)offset * 2 * s->inter : NULL,
                         .down = dn + dn_off, .down_bias = dnb ? dnb + (size_t)offset * s->dim : NULL,
                         .act = s->act, .alpha = 1.702f, .limit = 7.0f };
    if (s->fp8) {
        w.gate_up_scale = gus + (size_t)offset * kn_fp8_scale_count(2 * (size_t)s->inter, s->dim);
        w.down_scale = dns + (size_t)offset * kn_fp8_scale_count(s->dim, s->inter);
    }
    return w;
}

/* The CUDA paths moe_paths_run compares: per-expert GEMMs on the
 * backend's stream; the grouped (decode) kernels; FP8: per-expert with the
 * activation and its quantization as two kernels
 * (kn_cuda_set_moe_fp8_fused_act 0; the per-expert mode fuses them);
 * per-expert GEMMs over 4 side streams (the GPT-OSS shape only); FP8: the
 * grouped GEMMs (kn_cuda_set_moe_fp8_gemm 1 on mma.sync, 4 on wgmma, 7 on
 * the warp-specialised TMA + wgmma kernel; 0, the per-expert GEMMs, is the
 * default prefill path), and their diagnostic halves (2 / 5 / 8: gate_up
 * GEMM + the decode down kernel, 3 / 6 / 9: the decode gate_up kernel +
 * down GEMM),
 * which name the product a mismatch on the GPU comes from; FP8: the grouped
 * kernels without their staged token rows (kn_cuda_set_moe_staged 0).
 * The diagnostic halves and the grouped GEMMs run the decode kernels as
 * staged by default. */
enum { M_PER_EXPERT, M_GROUPED, M_UNFUSED, M_STREAMS, M_UNSTAGED, M_GEMM, M_GEMM_GU, M_GEMM_DN, M_WG, M_WG_GU, M_WG_DN,
       M_WS, M_WS_GU, M_WS_DN, N_MODES };
static const char *const mode_name[N_MODES] = { "per-expert", "grouped", "per-expert unfused act",
                                                "per-expert on 4 streams", "grouped unstaged",
                                                "grouped GEMM mma.sync",
                                                "grouped GEMM mma.sync gate_up + decode down",
                                                "decode gate_up + grouped GEMM mma.sync down",
                                                "grouped GEMM wgmma",
                                                "grouped GEMM wgmma gate_up + decode down",
                                                "decode gate_up + grouped GEMM wgmma down",
                                                "grouped GEMM warp-specialised",
                                                "grouped GEMM warp-specialised gate_up + decode down",
                                                "decode gate_up + grouped GEMM warp-specialised down" };

/* After a failed comparison: the first output element off by more than
 * tol times the reference's largest magnitude (or NaN), as (token, column),
 * so one GPU log locates the tile that is wrong. */
static void first_mismatch(const float *got, const float *ref, int n_tokens, int dim, double tol, const char *mode)
{
    double max_ref = 0.0;
    for (size_t i = 0; i < (size_t)n_tokens * dim; i++)
        max_ref = fabs(ref[i]) > max_ref ? fabs(ref[i]) : max_ref;
    int shown = 0;
    for (size_t i = 0; i < (size_t)n_tokens * dim && shown < 4; i++) {
        const double d = fabs((double)got[i] - ref[i]);
        if (!(d <= tol * max_ref)) {
            printf("#   %s: token %zu column %zu: got %.6g, CPU %.6g (max |CPU| %.4g)\n", mode, i / dim, i % dim,
                   got[i], ref[i], max_ref);
            shown++;
        }
    }
}

/* One batch through both CUDA paths and the CPU: experts [offset, offset +
 * n_local) of the shape held here, k distinct routes per token over all
 * n_global experts (so routes to experts held elsewhere occur whenever
 * n_local < n_global); skew sends every token's first route to the first
 * held expert (an expert with many more rows than the others, which takes
 * several passes of the grouped kernel). */
static void moe_paths_run(op_env *e, const moe_shape *s, int offset, int n_local, int n_tokens, int k,
                          int skew)
{
    size_t ns = (size_t)n_tokens * k, no = (size_t)n_tokens * s->dim;
    float *x = op_rand(e, no ? no : 1, -2.f, 2.f), *wts = op_rand(e, ns ? ns : 1, 0.05f, 1.f);
    int32_t *idx = op_host(e, (ns ? ns : 1) * sizeof(int32_t));
    ops_moe_routes(e, idx, wts, n_tokens, k, s->n_global, skew, offset);
    kn_moe_weights hw = moe_shape_view(s, 0, offset, n_local), dw = moe_shape_view(s, 1, offset, n_local);
    size_t nb = (no ? no : 1) * sizeof(float);
    float *cpu = op_host(e, nb), *got[N_MODES];
    for (int m = 0; m < N_MODES; m++)
        got[m] = op_host(e, nb);
    float *d_x = op_up(e, x, (no ? no : 1) * sizeof(float));
    int32_t *d_idx = op_up(e, idx, (ns ? ns : 1) * sizeof(int32_t));
    float *d_wts = op_up(e, wts, (ns ? ns : 1) * sizeof(float));
    float *d_out = op_dev(e, (no ? no : 1) * sizeof(float));
    char what[224];
    snprintf(what, sizeof what, "moe_experts %s %s experts %d..%d of %d, tokens=%d k=%d%s", s->fp8 ? "fp8" : "bf16",
             s->name, offset, offset + n_local - 1, s->n_global, n_tokens, k, skew ? " skewed" : "");
    int cpu_ok = op_ok(e, kn_moe_experts(e->cpu, cpu, x, idx, wts, n_tokens, k, &hw), "kn_moe_experts cpu");
    int ran[N_MODES] = { 0 };
    for (int mode = 0; mode < N_MODES; mode++) {
        /* bf16 has no unfused-act or grouped-GEMM modes; the 4-stream
         * modes run on the GPT-OSS shape only */
        if ((!s->fp8 && (mode == M_UNFUSED || mode >= M_UNSTAGED)) ||
            ((mode == M_STREAMS) && s->dim != 2880))
            continue;
        float *dst = got[mode];
        op_poison(e, d_out, no ? no : 1);
        kn_cuda_set_moe_grouped(e->be, mode == M_GROUPED || mode == M_UNSTAGED);
        kn_cuda_set_moe_staged(e->be, mode != M_UNSTAGED);
        kn_cuda_set_moe_streams(e->be, mode == M_STREAMS ? 4 : 1);
        kn_cuda_set_moe_fp8_fused_act(e->be, mode != M_UNFUSED);
        const int fp8_gemm_was = kn_cuda_moe_fp8_gemm(e->be);
        kn_cuda_set_moe_fp8_gemm(e->be, mode >= M_GEMM ? 1 + mode - M_GEMM : 0);
        /* The GEMM modes' temporaries start NaN: the grouped kernels, run
         * just before, leave correct activations of the same size in the
         * pool, which would hide a tile the GEMMs forget to write. */
        kn_cuda_set_poison_tmp(e->be, mode >= M_GEMM);
        /* the expert GEMV (up to 4 tokens) has its cases in ops_gemv_fp8.c */
        const int gemv_was = kn_cuda_moe_gemv_on(e->be);
        kn_cuda_set_moe_gemv(e->be, 0);
        int rc = kn_moe_experts(e->be, d_out, d_x, d_idx, d_wts, n_tokens, k, &dw);
        kn_cuda_set_moe_gemv(e->be, gemv_was);
        kn_cuda_set_moe_grouped(e->be, -1);
        kn_cuda_set_moe_streams(e->be, 1);
        kn_cuda_set_moe_fp8_fused_act(e->be, 1);
        kn_cuda_set_moe_fp8_gemm(e->be, fp8_gemm_was);
        kn_cuda_set_moe_staged(e->be, 1);
        kn_cuda_set_poison_tmp(e->be, 0);
        char w2[256];
        snprintf(w2, sizeof w2, "kn_moe_experts cuda %s", mode_name[mode]);
        if (!op_ok(e, rc, w2))
            continue;
        op_down(e, dst, d_out, (no ? no : 1) * sizeof(float));
        if (n_tokens == 0) { /* nothing to write: out stays as it was */
            op_check(e, isnan(dst[0]), "%s, %s path: returns without writing", what, mode_name[mode]);
            continue;
        }
        ran[mode] = 1;
        if (cpu_ok) {
            const double tol = s->fp8 ? FP8_MOE_TOL : BF16_MOE_VS_CPU_TOL;
            snprintf(w2, sizeof w2, "%s, %s path vs CPU", what, mode_name[mode]);
            if (!op_check_err(e, tu_max_rel_err_f32(dst, cpu, no), tol, "%s", w2))
                first_mismatch(dst, cpu, n_tokens, s->dim, tol, mode_name[mode]);
        }
    }
    if (s->fp8 && ran[M_PER_EXPERT] && ran[M_GEMM]) {
        char w2[288];
        snprintf(w2, sizeof w2, "%s, grouped GEMM mma.sync vs per-expert", what);
        op_check_err(e, tu_max_rel_err_f32(got[M_GEMM], got[M_PER_EXPERT], no), FP8_MOE_TOL, "%s", w2);
    }
    if (s->fp8 && ran[M_PER_EXPERT] && ran[M_WG]) {
        char w2[288];
        snprintf(w2, sizeof w2, "%s, grouped GEMM wgmma vs per-expert", what);
        op_check_err(e, tu_max_rel_err_f32(got[M_WG], got[M_PER_EXPERT], no), FP8_MOE_TOL, "%s", w2);
    }
    if (s->fp8 && ran[M_PER_EXPERT] && ran[M_WS]) {
        char w2[288];
        snprintf(w2, sizeof w2, "%s, grouped GEMM warp-specialised vs per-expert", what);
        op_check_err(e, tu_max_rel_err_f32(got[M_WS], got[M_PER_EXPERT], no), FP8_MOE_TOL, "%s", w2);
    }
    if (ran[0] && ran[1]) {
        char w2[256];
        snprintf(w2, sizeof w2, "%s, grouped vs per-expert", what);
        op_check_err(e, tu_max_rel_err_f32(got[1], got[0], no), s->fp8 ? FP8_MOE_TOL : BF16_MOE_TOL, "%s", w2);
    }
    if (s->fp8 && ran[0] && ran[2]) {
        /* The fused kernel computes the unfused pair's codes and scales
         * bit for bit, so the outputs are equal (NaN anywhere fails). */
        const size_t diff = op_count_unequal(got[0], got[2], no);
        op_check(e, diff == 0, "%s, per-expert fused act+quant vs unfused: identical (%zu of %zu differ)", what,
            diff, no);
    }
    if (s->fp8 && ran[M_GROUPED] && ran[M_UNSTAGED]) {
        /* Staging moves where the token rows are read from, not the
         * arithmetic: the same products in the same order. */
        const size_t diff = op_count_unequal(got[M_GROUPED], got[M_UNSTAGED], no);
        op_check(e, diff == 0, "%s, grouped staged vs unstaged: identical (%zu of %zu differ)", what, diff, no);
    }
    if (s->fp8 && ran[0] && ran[3]) {
        char w2[288];
        snprintf(w2, sizeof w2, "%s, per-expert on 4 streams vs on one", what);
        op_check_err(e, tu_max_rel_err_f32(got[3], got[0], no), FP8_MOE_TOL, "%s", w2);
    }
}

/* One shape's batches: experts [offset, offset + n_local) held, n_tokens
 * with k routes, skewed or not; all_only: only in the full FP8 run. */
typedef struct paths_batch {
    int offset, n_local, n_tokens, k, skew, all_only;
} paths_batch;

typedef struct paths_param {
    moe_shape shape;
    uint64_t seed;
    int all; /* FP8: every batch (the moe-fp8 run), else those not all_only */
    int n_batches;
    paths_batch b[24];
} paths_param;

static void paths_case(op_env *e, const void *param)
{
    const paths_param *p = param;
    moe_shape s = p->shape;
    moe_shape_make(e, &s, p->seed);
    for (int i = 0; i < p->n_batches; i++) {
        const paths_batch *b = &p->b[i];
        if (!b->all_only || p->all)
            moe_paths_run(e, &s, b->offset, b->n_local, b->n_tokens, b->k, b->skew);
    }
}

typedef struct rows_param {
    int streams, n_tok;
} rows_param;

/* The per-expert path (forced) with fresh random routes: every call splits
 * the rows over the experts anew, so the expert GEMMs see many different m
 * through the plan cache, on the backend's stream or spread over side
 * streams. Each call is a full check against the CPU. */
static void per_expert_rows(op_env *e, const void *param)
{
    const rows_param *p = param;
    moe_shape s = { .name = "rows", .n_global = 32, .dim = 288, .inter = 192, .act = KN_ACT_SWIGLU_OAI,
                    .biases = 1 };
    moe_shape_make(e, &s, tu_rand_u64(&e->rng));
    size_t ns = (size_t)p->n_tok * 4, no = (size_t)p->n_tok * s.dim;
    float *x = op_rand(e, no, -2.f, 2.f), *wts = op_host(e, ns * 4), *cpu = op_host(e, no * 4);
    int32_t *idx = op_host(e, ns * 4);
    ops_moe_routes(e, idx, wts, p->n_tok, 4, s.n_global, 0, 0);
    kn_moe_weights hw = moe_shape_view(&s, 0, 0, 32), dw = moe_shape_view(&s, 1, 0, 32);
    float *d_out = op_nan(e, no);
    kn_cuda_set_moe_grouped(e->be, 0);
    kn_cuda_set_moe_streams(e->be, p->streams);
    int rc = kn_moe_experts(e->be, d_out, op_up(e, x, no * 4), op_up(e, idx, ns * 4), op_up(e, wts, ns * 4),
                            p->n_tok, 4, &dw);
    kn_cuda_set_moe_streams(e->be, 1);
    kn_cuda_set_moe_grouped(e->be, -1);
    if (op_ok(e, rc, "kn_moe_experts bf16 per-expert") &&
        op_ok(e, kn_moe_experts(e->cpu, cpu, x, idx, wts, p->n_tok, 4, &hw), "kn_moe_experts cpu"))
        op_check_err(e, tu_max_rel_err_f32(op_get(e, d_out, no), cpu, no), BF16_MOE_VS_CPU_TOL,
                     "bf16 per-expert on %d streams vs CPU", p->streams);
}

static void add_paths(unsigned groups, const paths_param *p)
{
    op_case_add("moe_paths", OP_CUDA, groups, paths_case, p, sizeof *p, "%s %s%s", p->shape.fp8 ? "fp8" : "bf16",
                p->shape.name, p->shape.fp8 && p->all ? " (every batch)" : "");
}

#define BATCHES(...) .n_batches = (int)(sizeof((paths_batch[]){ __VA_ARGS__ }) / sizeof(paths_batch)), \
                     .b = { __VA_ARGS__ }

void ops_register_moe_paths(void)
{
    static const int tokens[] = { 1, 3, 7, 16, 17, 31, 33, 50, 64, 97, 128, 200, 257 };
    for (int streams = 1; streams <= 4; streams += 3)
        for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++) {
            rows_param p = { streams, tokens[i] };
            OP_CASE("moe_paths", OP_CUDA, per_expert_rows, p, "bf16 per-expert on %d streams tokens=%d k=4 "
                    "experts=32 dim=288 inter=192", streams, tokens[i]);
        }
    const unsigned bf16_groups = OP_G_DEFAULT | OP_G_MOE;
    /* GPT-OSS-20B: 32 experts of 2880 x 2880, top-4, clamped SwiGLU, biases */
    paths_param oss = { { .name = "gpt-oss-20b", .n_global = 32, .dim = 2880, .inter = 2880,
                          .act = KN_ACT_SWIGLU_OAI, .biases = 1 }, 11, 0,
                        BATCHES({ 0, 32, 1, 4, 0, 0 }, { 0, 32, 8, 4, 0, 0 }, { 0, 32, 32, 4, 0, 0 },
                                { 0, 32, 128, 4, 0, 0 }, { 0, 32, 200, 4, 0, 0 }, { 0, 32, 300, 4, 0, 0 },
                                { 0, 32, 40, 4, 1, 0 }, { 0, 32, 7, 1, 0, 0 },
                                { 8, 8, 32, 4, 0, 0 } /* an EP rank's 8 of 32 */, { 24, 8, 3, 4, 0, 0 }) };
    add_paths(bf16_groups, &oss);
    /* Qwen3-30B-A3B: 128 experts of 2048 -> 768, top-8, SwiGLU, no biases */
    paths_param qwen = { { .name = "qwen3-30b-a3b", .n_global = 128, .dim = 2048, .inter = 768,
                           .act = KN_ACT_SWIGLU, .biases = 0 }, 12, 0,
                         BATCHES({ 0, 128, 1, 8, 0, 0 }, { 0, 128, 8, 8, 0, 0 }, { 0, 128, 32, 8, 0, 0 },
                                 { 0, 128, 128, 8, 0, 0 }, { 0, 128, 32, 8, 1, 0 }, { 0, 128, 16, 1, 0, 0 },
                                 { 0, 128, 16, 2, 0, 0 }, { 0, 128, 16, 3, 0, 0 }, { 0, 128, 16, 4, 0, 0 },
                                 { 0, 128, 16, 5, 0, 0 }, { 0, 128, 16, 6, 0, 0 }, { 0, 128, 16, 7, 0, 0 },
                                 { 96, 32, 24, 8, 0, 0 }, { 0, 128, 0, 8, 0, 0 } /* no tokens */) };
    add_paths(bf16_groups, &qwen);
    /* Sizes the tensor-core grouped kernels do not take (K % 32 != 0): the
     * CUDA-core kernels, 16-byte (K % 8 == 0) and scalar, next to the
     * tensor-core one for the other product; experts with many rows
     * (several passes). */
    paths_param odd = { { .name = "dim 33 inter 17", .n_global = 16, .dim = 33, .inter = 17,
                          .act = KN_ACT_SWIGLU_OAI, .biases = 1 }, 13, 0,
                        BATCHES({ 12, 4, 3, 2, 0, 0 }, { 0, 16, 50, 8, 1, 0 }) };
    add_paths(bf16_groups, &odd);
    paths_param mid = { { .name = "dim 96 inter 40", .n_global = 16, .dim = 96, .inter = 40,
                          .act = KN_ACT_SWIGLU, .biases = 1 }, 14, 0,
                        BATCHES({ 0, 16, 200, 4, 0, 0 }, { 4, 8, 61, 8, 1, 0 }) };
    add_paths(bf16_groups, &mid);
    paths_param mid2 = { { .name = "dim 40 inter 96", .n_global = 8, .dim = 40, .inter = 96,
                           .act = KN_ACT_SWIGLU_OAI, .biases = 0 }, 15, 0,
                         BATCHES({ 0, 8, 9, 3, 0, 0 }, { 0, 8, 100, 2, 1, 0 }) };
    add_paths(bf16_groups, &mid2);

    /* The FP8 expert paths: the grouped kernels (e4m3 codes and block
     * scales read directly, activations quantized on the way) and the
     * per-expert cuBLASLt GEMMs, on the same real shapes (2880 is not a
     * multiple of 128: padded rows and scale rows) plus a small odd one.
     * Both compute kernels/fp8.h's function; they differ in fp32 summation
     * order (and Hopper's FP8 tensor-core sums), which can move a gate_up
     * sum across an e4m3 rounding boundary: bound FP8_MOE_TOL. The default
     * run keeps one batch of each kind, so the CPU references (every
     * expert dequantized per call) stay short. */
    paths_param oss8 = { { .name = "gpt-oss-20b", .n_global = 32, .dim = 2880, .inter = 2880,
                           .act = KN_ACT_SWIGLU_OAI, .biases = 1, .fp8 = 1 }, 21, 0,
                         BATCHES({ 0, 32, 1, 4, 0, 0 }, { 0, 32, 32, 4, 0, 0 }, { 0, 32, 300, 4, 0, 0 },
                                 { 0, 32, 8, 4, 0, 1 }, { 0, 32, 128, 4, 0, 1 },
                                 { 0, 32, 40, 4, 1, 0 } /* one expert with every token: several passes */,
                                 { 0, 32, 7, 1, 0, 0 }, { 8, 8, 32, 4, 0, 0 } /* an EP rank's 8 of 32 */,
                                 { 24, 8, 3, 4, 1, 1 }, { 0, 32, 0, 4, 0, 0 } /* no tokens */,
                                 { 0, 32, 300, 4, 1, 1 } /* one expert of 300 rows: 5 GEMM m-tiles */) };
    paths_param qwen8 = { { .name = "qwen3-30b-a3b", .n_global = 128, .dim = 2048, .inter = 768,
                            .act = KN_ACT_SWIGLU, .biases = 0, .fp8 = 1 }, 22, 0,
                          BATCHES({ 0, 128, 1, 8, 0, 0 }, { 0, 128, 32, 8, 0, 0 }, { 0, 128, 8, 8, 0, 1 },
                                  { 0, 128, 128, 8, 0, 1 }, { 0, 128, 64, 8, 1, 0 }, { 0, 128, 16, 1, 0, 0 },
                                  { 0, 128, 16, 2, 0, 1 }, { 0, 128, 16, 3, 0, 1 }, { 0, 128, 16, 4, 0, 0 },
                                  { 0, 128, 16, 5, 0, 1 }, { 0, 128, 16, 6, 0, 1 }, { 0, 128, 16, 7, 0, 0 },
                                  { 96, 32, 24, 8, 0, 0 }, { 32, 32, 5, 8, 1, 1 },
                                  /* many GEMM tiles per block of the persistent grid; one expert of 200
                                   * rows next to experts of a few */
                                  { 0, 128, 600, 8, 0, 1 }, { 0, 128, 200, 8, 1, 1 }) };
    /* neither dim a multiple of 128 (nor of 32): one partial 128-block of
     * activation columns, padded rows on both products */
    paths_param odd8 = { { .name = "dim 200 inter 130", .n_global = 16, .dim = 200, .inter = 130,
                           .act = KN_ACT_SWIGLU_OAI, .biases = 1, .fp8 = 1 }, 23, 0,
                         BATCHES({ 0, 16, 1, 8, 0, 0 }, { 0, 16, 300, 2, 1, 0 }, { 4, 8, 61, 8, 0, 0 }) };
    paths_param *fp8[] = { &oss8, &qwen8, &odd8 };
    for (int i = 0; i < 3; i++) {
        add_paths(OP_G_DEFAULT, fp8[i]);
        fp8[i]->all = 1;
        add_paths(OP_G_MOE_FP8, fp8[i]);
    }
}
#else
void ops_register_moe_paths(void)
{
}
#endif
