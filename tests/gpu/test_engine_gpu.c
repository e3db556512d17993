/* The engine on the CUDA backend, on the GPU machine (built with
 * `make CUDA=1 gpu-engine-progs`, run by tests/gpu/run.sh engine), for both
 * tiny HF fixtures:
 *   - f32 weights: every prompt row's logits against the HF golden
 *     (transformers in float64 from the same bf16 weights) within 1e-3,
 *     32 greedy tokens equal to HF's with their logits within 1e-3, and
 *     the CPU backend's logits on the same run within 1e-4;
 *   - decoding token by token through the paged cache (the split-KV decode
 *     kernel) gives the rows of one prefill over the whole sequence;
 *   - bf16 weights (the CUDA default): within the bf16 bound of HF, greedy
 *     tokens equal to HF's while HF's top-2 margin is >= 0.01, and the CPU
 *     backend's bf16 run (the same function) within 5e-3;
 *   - synthetic weights of each fixture's config: the GPU and the CPU make
 *     the same model from one seed (same logits);
 *   - FP8 weights (--weights fp8: attention and experts e4m3 with 128x128
 *     block scales, cuBLASLt's block-scaled GEMM): the GPU FP8 model against
 *     the GPU bf16 model within the FP8 bound (the CPU tests measured FP8 vs
 *     f32 at 0.056-0.078 for qwen3 and 0.23-0.26 for gpt-oss:
 *     tests/unit/test_engine_quantized.c; bf16 is 16x closer to f32), and
 *     against the CPU backend's FP8 model (the same function; they differ
 *     where the GPU's FP8 accumulation, ~3e-4 relative per product, moves
 *     an activation across an e4m3 rounding boundary); synthetic FP8
 *     weights of one seed on both backends;
 *   - a bf16 KV cache (the CUDA default; kn_kv_pools KN_BF16: the flash,
 *     split-KV decode and bf16 tensor-core kernels reading bf16 pools):
 *     f32 weights with a bf16 cache against the f32 cache and HF within
 *     BF16_KV_TOL (tests/unit/test_engine_kv_dtype.c measured 7.3e-3
 *     GPT-OSS and 1.7e-3 Qwen3 on the CPU) and against the CPU's bf16-cache
 *     run within BF16_KV_CPU_TOL; decode steps through a bf16 cache against
 *     one prefill through one; the default weights (bf16) with the bf16
 *     cache against the CPU's same configuration and HF within BF16_W_KV_TOL;
 *   - an FP8 KV cache (e4m3 rows with their scale), f32 weights: against
 *     the f32 cache and HF within FP8_KV_TOL, the CPU's FP8-cache run
 *     within FP8_KV_CPU_TOL, decode through it vs one prefill within
 *     FP8_KV_SAME_TOL (a K or V an fp32 ulp apart between the two GEMM
 *     shapes may land on the neighbouring e4m3 code, 2^-3 relative).
 *   - CUDA graphs of decode steps (tm_model_set_cuda_graphs): batches of
 *     1, 3, 8 and 13 sequences of different lengths decoding 16 steps
 *     through a bf16 cache with pages of 4 tokens (the page-table capacity
 *     doubles on the way, so shapes are recorded anew), teacher-forced with
 *     the same tokens in three models in lockstep: graph replays equal the
 *     same padded steps run eagerly bit for bit (logits), graphs were
 *     recorded and replayed, none failed; and the unpadded eager step
 *     (graphs off, and the separate kernels in place of the fused decode
 *     ops: kn_cuda_set_fused_decode) within GRAPH_OFF_TOL for f32 weights (other GEMM shapes
 *     and split counts: a different fp32 sum order) and BF16_W_KV_TOL for
 *     bf16 weights (a routing flip).
 *   - the window pool (engine/kv_cache.h; GPT-OSS: window 16) with the
 *     default weights over bf16 and FP8 caches, pages of 4: teacher-forced
 *     decode of ~80 tokens past the prompt through a window pool (slots
 *     given back every step, the window layers' page tables -1 before the
 *     window, CUDA graphs on) equals the same steps through a plain cache
 *     bit for bit (the window layers read the same rows from other
 *     slots). The fixtures' head_dim 16 takes the split-KV kernels; the
 *     tensor-core decode kernel over FP8 pages is checked by the op table
 *     and timed by tandem-bench --kv-dtype fp8.
 * Output is TAP; NaN never passes (a NaN error compares false).
 *
 * Usage: test_engine_gpu [device]   (run from the repository root) */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "common/status.h"
#include "tests/unit/engine_testutil.h"
#include "tests/unit/testutil.h"

#define HF_TOL 1e-3        /* f32 vs HF float64 */
#define CPU_F32_TOL 1e-4   /* two fp32 computations of one model, different sum orders */
#define SAME_TOL 1e-4      /* decode through the cache vs one prefill, on the GPU */
#define BF16_HF_TOL 8e-2   /* see tests/unit/test_engine_weights_dtype.c */
#define BF16_CPU_TOL 5e-3  /* bf16 roundings of activations that differ by an fp32 ulp */
#define BF16_MARGIN 0.01f
#define FP8_TOL_QWEN3 0.15     /* FP8 vs bf16 and vs the CPU's FP8, prefill logits */
#define FP8_TOL_GPT_OSS 0.5
#define BF16_KV_TOL 2e-2      /* bf16 cache vs f32 cache (f32 weights) */
#define BF16_KV_CPU_TOL 5e-3  /* one bf16-cache run on cuda and cpu: K, V an fp32 ulp apart may
                                 round to neighbouring bf16 values */
#define BF16_KV_SAME_TOL 1e-3 /* decode vs one prefill, both through a bf16 cache */
#define BF16_W_KV_TOL 1e-1    /* bf16 weights and cache: routing flips (test_engine_kv_dtype) */
#define FP8_KV_TOL 0.25       /* FP8 cache vs f32 cache (f32 weights): test_engine_kv_dtype
                                 measured 0.122 GPT-OSS, 0.037 Qwen3 on the CPU */
#define FP8_KV_CPU_TOL 0.15   /* one FP8-cache run on cuda and cpu */
#define FP8_KV_SAME_TOL 0.15  /* decode vs one prefill, both through an FP8 cache */
#define GRAPH_OFF_TOL 5e-3   /* padded vs unpadded decode step, f32 weights and a bf16 cache: other
                                GEMM shapes and split counts sum in another order, and a K or V
                                an fp32 ulp apart may round to the neighbouring bf16 value */
#define MAX_SEQ 128
#define PAGE 16

typedef struct ctx {
    kn_backend cpu, gpu;
    tu_tap tap;
} ctx;

/* every check is one TAP line through tests/unit/testutil.h */
#define tap(t, ...) tu_tap_line(&(t)->tap, __VA_ARGS__)

static void check_err(ctx *t, double err, double tol, const char *fx, const char *what)
{
    tap(t, err <= tol, "%s: %s: rel err %.3g (bound %.0e)", fx, what, err, tol);
}

/* Everything one run of a model gives: prefill logits of every prompt row,
 * then n greedy steps (ids and logits). */
typedef struct run {
    float *prompt_logits;   /* [T][V] */
    float *gen_logits;      /* [n][V] */
    int32_t ids[MAX_SEQ];
    int rc;
} run;

static void run_free(run *r)
{
    free(r->prompt_logits);
    free(r->gen_logits);
    memset(r, 0, sizeof *r);
}

static int greedy_kv(tm_model *m, const kn_backend *be, kn_dtype kv_dtype, const int32_t *prompt,
                     int T, int n, run *r)
{
    const tm_config *c = tm_model_config(m);
    const int V = c->vocab_size, n_pages = MAX_SEQ / PAGE;
    memset(r, 0, sizeof *r);
    r->prompt_logits = calloc((size_t)T * V, sizeof(float));
    r->gen_logits = calloc((size_t)n * V, sizeof(float));
    if (!r->prompt_logits || !r->gen_logits)
        return r->rc = TN_ERR_NOMEM;
    tm_kv_cache kv;
    int rc = tm_kv_cache_init(&kv, be, kv_dtype, c->n_layers, c->n_kv_heads, c->head_dim, PAGE,
                              n_pages);
    if (rc)
        return r->rc = rc;
    int32_t pages[MAX_SEQ / PAGE], toks[MAX_SEQ];
    rc = tm_kv_alloc_pages(&kv, n_pages, pages);
    memcpy(toks, prompt, sizeof(int32_t) * (size_t)T);
    int len = T;
    for (int i = 0; rc == TN_OK && i < n; i++) {
        tm_seq_step st = i == 0 ? (tm_seq_step){toks, T, 0, pages, n_pages}
                                : (tm_seq_step){toks + len - 1, 1, len - 1, pages, n_pages};
        float *lg = r->gen_logits + (size_t)i * V;
        rc = tm_forward(m, &kv, &st, 1, lg, i == 0 ? r->prompt_logits : NULL);
        r->ids[i] = et_argmax(lg, V);
        toks[len++] = r->ids[i];
    }
    tm_kv_cache_free(&kv);
    return r->rc = rc;
}

static int greedy(tm_model *m, const kn_backend *be, const int32_t *prompt, int T, int n, run *r)
{
    return greedy_kv(m, be, KN_F32, prompt, T, n, r);
}

static tm_model *load(ctx *t, const kn_backend *be, const char *dir, tm_weight_dtype wd,
                      const char *what)
{
    char err[512] = "";
    tm_model *m = NULL;
    tm_load_opts o = {.weights = wd};
    int rc = tm_model_load_opts(dir, be, &o, &m, err, sizeof err);
    if (rc != TN_OK)
        tap(t, 0, "%s: load (%s): %s", dir, what, err);
    return m;
}

static int count_agree(const int32_t *a, const int32_t *b, int n)
{
    int k = 0;
    while (k < n && a[k] == b[k])
        k++;
    return k;
}

static void f32_vs_hf_and_cpu(ctx *t, const char *dir, const et_golden *g)
{
    tm_model *mg = load(t, &t->gpu, dir, TM_WEIGHTS_F32, "cuda f32");
    tm_model *mc = load(t, &t->cpu, dir, TM_WEIGHTS_F32, "cpu f32");
    if (!mg || !mc)
        goto done;
    run rg, rc;
    greedy(mg, &t->gpu, g->prompt, g->T, g->G, &rg);
    greedy(mc, &t->cpu, g->prompt, g->T, g->G, &rc);
    tap(t, rg.rc == TN_OK && rc.rc == TN_OK, "%s: f32 runs on cuda (%s) and cpu (%s)", dir,
        tn_status_str(rg.rc), tn_status_str(rc.rc));
    if (rg.rc == TN_OK && rc.rc == TN_OK) {
        size_t np = (size_t)g->T * g->V, ng = (size_t)g->G * g->V;
        double worst = 0;
        for (int r = 0; r < g->T; r++) {
            double e = et_rel_err(rg.prompt_logits + (size_t)r * g->V,
                                  g->prompt_logits + (size_t)r * g->V, g->V);
            worst = e > worst || isnan(e) ? e : worst;
        }
        check_err(t, worst, HF_TOL, dir, "cuda f32 prefill logits vs HF, worst prompt row");
        int agree = count_agree(rg.ids, g->gen_ids, g->G);
        tap(t, agree == g->G, "%s: cuda f32 greedy tokens equal HF's (%d of %d)", dir, agree, g->G);
        check_err(t, et_rel_err(rg.gen_logits, g->gen_logits, ng), HF_TOL, dir,
                  "cuda f32 greedy step logits vs HF");
        check_err(t, et_rel_err(rg.prompt_logits, rc.prompt_logits, np), CPU_F32_TOL, dir,
                  "cuda vs cpu f32 prefill logits");
        check_err(t, et_rel_err(rg.gen_logits, rc.gen_logits, ng), CPU_F32_TOL, dir,
                  "cuda vs cpu f32 greedy step logits");
    }
    run_free(&rg);
    run_free(&rc);
done:
    tm_model_free(mg);
    tm_model_free(mc);
}

/* Decode through the paged cache (one token a step: the split-KV kernel)
 * against one prefill over the same tokens, on the GPU. */
static void decode_matches_prefill(ctx *t, const char *dir, const et_golden *g, kn_dtype kv_dtype,
                                   double tol)
{
    tm_model *m = load(t, &t->gpu, dir, TM_WEIGHTS_F32, "cuda f32");
    if (!m)
        return;
    const tm_config *c = tm_model_config(m);
    const int T = g->T, D = 24, N = T + D, V = g->V, n_pages = MAX_SEQ / 8;
    int32_t full[MAX_SEQ], pages[MAX_SEQ / 8];
    memcpy(full, g->prompt, sizeof(int32_t) * (size_t)T);
    memcpy(full + T, g->gen_ids, sizeof(int32_t) * (size_t)D);
    float *ref = calloc((size_t)N * V, sizeof(float)), *got = calloc((size_t)V, sizeof(float));
    tm_kv_cache kv;
    int rc = ref && got ? tm_kv_cache_init(&kv, &t->gpu, kv_dtype, c->n_layers, c->n_kv_heads,
                                           c->head_dim, 8, n_pages)
                        : TN_ERR_NOMEM;
    if (rc == TN_OK) {
        rc = tm_kv_alloc_pages(&kv, n_pages, pages);
        tm_seq_step st = {full, N, 0, pages, n_pages};
        if (rc == TN_OK)
            rc = tm_forward(m, &kv, &st, 1, NULL, ref);
        tm_kv_release_pages(&kv, pages, n_pages);
        if (rc == TN_OK)
            rc = tm_kv_alloc_pages(&kv, n_pages, pages);
        st = (tm_seq_step){full, T, 0, pages, n_pages};
        if (rc == TN_OK)
            rc = tm_forward(m, &kv, &st, 1, got, NULL);
        double worst = rc == TN_OK ? et_rel_err(got, ref + (size_t)(T - 1) * V, V) : INFINITY;
        for (int i = 0; rc == TN_OK && i < D; i++) {
            st = (tm_seq_step){full + T + i, 1, T + i, pages, n_pages};
            rc = tm_forward(m, &kv, &st, 1, got, NULL);
            double e = et_rel_err(got, ref + (size_t)(T + i) * V, V);
            worst = e > worst || isnan(e) ? e : worst;
        }
        tm_kv_cache_free(&kv);
        tap(t, rc == TN_OK, "%s: cuda prefill + %d decode steps run, %s KV (%s)", dir, D,
            kn_dtype_name(kv_dtype), tn_status_str(rc));
        check_err(t, worst, tol, dir, kv_dtype == KN_BF16 ? "cuda decode steps vs one prefill's rows, bf16 KV, worst step"
                  : kv_dtype == KN_FP8_E4M3 ? "cuda decode steps vs one prefill's rows, fp8 KV, worst step"
                                            : "cuda decode steps vs one prefill's rows, worst step");
    } else {
        tap(t, 0, "%s: cache for decode check: %s", dir, tn_status_str(rc));
    }
    free(ref);
    free(got);
    tm_model_free(m);
}

static void bf16_vs_hf_and_cpu(ctx *t, const char *dir, const et_golden *g)
{
    tm_model *mg = load(t, &t->gpu, dir, TM_WEIGHTS_AUTO, "cuda default");
    tm_model *mc = load(t, &t->cpu, dir, TM_WEIGHTS_BF16, "cpu bf16");
    if (!mg || !mc)
        goto done;
    tap(t, tm_model_weight_dtype(mg) == KN_BF16, "%s: cuda default weights are %s", dir,
        kn_dtype_name(tm_model_weight_dtype(mg)));
    run rg, rc;
    greedy(mg, &t->gpu, g->prompt, g->T, g->G, &rg);
    greedy(mc, &t->cpu, g->prompt, g->T, g->G, &rc);
    tap(t, rg.rc == TN_OK && rc.rc == TN_OK, "%s: bf16 runs on cuda (%s) and cpu (%s)", dir,
        tn_status_str(rg.rc), tn_status_str(rc.rc));
    if (rg.rc == TN_OK && rc.rc == TN_OK) {
        size_t np = (size_t)g->T * g->V;
        check_err(t, et_rel_err(rg.prompt_logits, g->prompt_logits, np), BF16_HF_TOL, dir,
                  "cuda bf16 prefill logits vs HF");
        int safe = 0;
        while (safe < g->G && g->gen_margin[safe] >= BF16_MARGIN)
            safe++;
        int agree = count_agree(rg.ids, g->gen_ids, g->G);
        tap(t, agree >= safe, "%s: cuda bf16 greedy tokens equal HF's for %d steps (HF margins "
            ">= %.2f for the first %d)", dir, agree, (double)BF16_MARGIN, safe);
        check_err(t, et_rel_err(rg.prompt_logits, rc.prompt_logits, np), BF16_CPU_TOL, dir,
                  "cuda vs cpu bf16 prefill logits");
        int same = count_agree(rg.ids, rc.ids, g->G);
        tap(t, same >= safe, "%s: cuda and cpu bf16 greedy tokens agree for %d steps", dir, same);
    }
    run_free(&rg);
    run_free(&rc);
done:
    tm_model_free(mg);
    tm_model_free(mc);
}

/* A bf16 KV cache on the GPU: f32 weights (the cache's rounding alone)
 * against the f32 cache, HF and the CPU's bf16-cache run; then the CUDA
 * default (bf16 weights, bf16 cache) against the CPU's same configuration
 * and HF. Prompt logits: every row came through the cache. */
static void bf16_kv_vs_f32_kv_and_cpu(ctx *t, const char *dir, const et_golden *g)
{
    tm_model *mg = load(t, &t->gpu, dir, TM_WEIGHTS_F32, "cuda f32");
    tm_model *mc = load(t, &t->cpu, dir, TM_WEIGHTS_F32, "cpu f32");
    tm_model *mgd = load(t, &t->gpu, dir, TM_WEIGHTS_AUTO, "cuda default");
    tm_model *mcd = load(t, &t->cpu, dir, TM_WEIGHTS_BF16, "cpu bf16");
    if (!mg || !mc || !mgd || !mcd)
        goto done;
    run rf, rb, rcb, rd, rcd;
    greedy_kv(mg, &t->gpu, KN_F32, g->prompt, g->T, 1, &rf);
    greedy_kv(mg, &t->gpu, KN_BF16, g->prompt, g->T, 1, &rb);
    greedy_kv(mc, &t->cpu, KN_BF16, g->prompt, g->T, 1, &rcb);
    greedy_kv(mgd, &t->gpu, KN_BF16, g->prompt, g->T, 1, &rd);
    greedy_kv(mcd, &t->cpu, KN_BF16, g->prompt, g->T, 1, &rcd);
    int ok = rf.rc == TN_OK && rb.rc == TN_OK && rcb.rc == TN_OK && rd.rc == TN_OK &&
             rcd.rc == TN_OK;
    tap(t, ok, "%s: bf16 KV runs on cuda (%s, default weights %s) and cpu (%s, %s)", dir,
        tn_status_str(rb.rc), tn_status_str(rd.rc), tn_status_str(rcb.rc), tn_status_str(rcd.rc));
    if (ok) {
        size_t np = (size_t)g->T * g->V;
        check_err(t, et_rel_err(rb.prompt_logits, rf.prompt_logits, np), BF16_KV_TOL, dir,
                  "cuda f32 weights: bf16 KV vs f32 KV prefill logits");
        check_err(t, et_rel_err(rb.prompt_logits, g->prompt_logits, np), BF16_KV_TOL, dir,
                  "cuda f32 weights, bf16 KV: prefill logits vs HF");
        check_err(t, et_rel_err(rb.prompt_logits, rcb.prompt_logits, np), BF16_KV_CPU_TOL, dir,
                  "f32 weights, bf16 KV: cuda vs cpu prefill logits");
        tap(t, et_rel_err(rb.prompt_logits, rf.prompt_logits, np) > 0, "%s: the bf16 cache "
            "changed the logits (the pools hold bf16)", dir);
        check_err(t, et_rel_err(rd.prompt_logits, rcd.prompt_logits, np), BF16_W_KV_TOL, dir,
                  "bf16 weights and KV (the cuda default): cuda vs cpu prefill logits");
        check_err(t, et_rel_err(rd.prompt_logits, g->prompt_logits, np), BF16_W_KV_TOL, dir,
                  "bf16 weights and KV (the cuda default): prefill logits vs HF");
    }
    run_free(&rf);
    run_free(&rb);
    run_free(&rcb);
    run_free(&rd);
    run_free(&rcd);
done:
    tm_model_free(mg);
    tm_model_free(mc);
    tm_model_free(mgd);
    tm_model_free(mcd);
}

/* An FP8 KV cache on the GPU, f32 weights: against the f32 cache, HF and
 * the CPU's FP8-cache run (prompt logits: every row came through the
 * cache). */
static void fp8_kv_vs_f32_kv_and_cpu(ctx *t, const char *dir, const et_golden *g)
{
    tm_model *mg = load(t, &t->gpu, dir, TM_WEIGHTS_F32, "cuda f32");
    tm_model *mc = load(t, &t->cpu, dir, TM_WEIGHTS_F32, "cpu f32");
    if (!mg || !mc)
        goto done;
    run rf, r8, rc8;
    greedy_kv(mg, &t->gpu, KN_F32, g->prompt, g->T, 1, &rf);
    greedy_kv(mg, &t->gpu, KN_FP8_E4M3, g->prompt, g->T, 1, &r8);
    greedy_kv(mc, &t->cpu, KN_FP8_E4M3, g->prompt, g->T, 1, &rc8);
    int ok = rf.rc == TN_OK && r8.rc == TN_OK && rc8.rc == TN_OK;
    tap(t, ok, "%s: fp8 KV runs on cuda (%s) and cpu (%s)", dir, tn_status_str(r8.rc),
        tn_status_str(rc8.rc));
    if (ok) {
        size_t np = (size_t)g->T * g->V;
        check_err(t, et_rel_err(r8.prompt_logits, rf.prompt_logits, np), FP8_KV_TOL, dir,
                  "cuda f32 weights: fp8 KV vs f32 KV prefill logits");
        check_err(t, et_rel_err(r8.prompt_logits, g->prompt_logits, np), FP8_KV_TOL, dir,
                  "cuda f32 weights, fp8 KV: prefill logits vs HF");
        check_err(t, et_rel_err(r8.prompt_logits, rc8.prompt_logits, np), FP8_KV_CPU_TOL, dir,
                  "f32 weights, fp8 KV: cuda vs cpu prefill logits");
        tap(t, et_rel_err(r8.prompt_logits, rf.prompt_logits, np) > 0, "%s: the fp8 cache "
            "changed the logits (the pools hold e4m3)", dir);
    }
    run_free(&rf);
    run_free(&r8);
    run_free(&rc8);
done:
    tm_model_free(mg);
    tm_model_free(mc);
}

/* The same seed makes the same synthetic model on both backends. */
static void synthetic_same_on_both(ctx *t, const char *dir, const et_golden *g, tm_weight_dtype wd,
                                   double tol)
{
    char err[512] = "";
    tm_model *mg = NULL, *mc = NULL;
    tm_load_opts o = {.weights = wd, .seed = 2026};
    int rg = tm_model_synthetic(dir, &t->gpu, &o, &mg, err, sizeof err);
    int rcpu = rg == TN_OK ? tm_model_synthetic(dir, &t->cpu, &o, &mc, err, sizeof err) : rg;
    const char *name = wd == TM_WEIGHTS_BF16 ? "bf16" : wd == TM_WEIGHTS_FP8 ? "fp8" : "f32";
    if (rg != TN_OK || rcpu != TN_OK) {
        tap(t, 0, "%s: synthetic %s models: %s", dir, name, err);
    } else {
        run a, b;
        greedy(mg, &t->gpu, g->prompt, g->T, 8, &a);
        greedy(mc, &t->cpu, g->prompt, g->T, 8, &b);
        double e = a.rc == TN_OK && b.rc == TN_OK
                       ? et_rel_err(a.prompt_logits, b.prompt_logits, (size_t)g->T * g->V)
                       : INFINITY;
        char what[96];
        snprintf(what, sizeof what, "synthetic %s weights (seed 2026), cuda vs cpu prefill logits", name);
        check_err(t, e, tol, dir, what);
        run_free(&a);
        run_free(&b);
    }
    tm_model_free(mg);
    tm_model_free(mc);
}

static void fp8_vs_bf16_and_cpu(ctx *t, const char *dir, const et_golden *g, double tol)
{
    tm_model *m8 = load(t, &t->gpu, dir, TM_WEIGHTS_FP8, "cuda fp8");
    tm_model *mb = load(t, &t->gpu, dir, TM_WEIGHTS_BF16, "cuda bf16");
    tm_model *mc = load(t, &t->cpu, dir, TM_WEIGHTS_FP8, "cpu fp8");
    if (!m8 || !mb || !mc)
        goto done;
    tap(t, tm_model_expert_dtype(m8) == KN_FP8_E4M3, "%s: --weights fp8 experts are %s", dir,
        kn_dtype_name(tm_model_expert_dtype(m8)));
    /* Not a check: the fixtures' matrices are 64 wide, and FP8 pads every
     * matrix to 128x128 blocks, so FP8 saves nothing at this size (measured
     * 1.12 MB vs 1.12 MB). The saving is seen where it matters: the
     * synthetic gpt-oss-120b model fits one H200 (tests/gpu/run.sh bench-engine). */
    printf("# %s: fp8 model holds %zu bytes, bf16 %zu (128x128 padding of 64-wide matrices)\n",
           dir, tm_model_weight_bytes(m8), tm_model_weight_bytes(mb));
    run r8, rb, rc;
    greedy(m8, &t->gpu, g->prompt, g->T, g->G, &r8);
    greedy(mb, &t->gpu, g->prompt, g->T, g->G, &rb);
    greedy(mc, &t->cpu, g->prompt, g->T, g->G, &rc);
    tap(t, r8.rc == TN_OK && rb.rc == TN_OK && rc.rc == TN_OK,
        "%s: fp8 runs on cuda (%s) and cpu (%s), bf16 on cuda (%s)", dir, tn_status_str(r8.rc),
        tn_status_str(rc.rc), tn_status_str(rb.rc));
    if (r8.rc == TN_OK && rb.rc == TN_OK && rc.rc == TN_OK) {
        size_t np = (size_t)g->T * g->V;
        check_err(t, et_rel_err(r8.prompt_logits, rb.prompt_logits, np), tol, dir,
                  "cuda fp8 vs cuda bf16 prefill logits");
        check_err(t, et_rel_err(r8.prompt_logits, rc.prompt_logits, np), tol, dir,
                  "cuda fp8 vs cpu fp8 prefill logits");
        printf("# %s: fp8 greedy tokens: %d of %d equal HF's, %d equal the cpu fp8 run's\n", dir,
               count_agree(r8.ids, g->gen_ids, g->G), g->G, count_agree(r8.ids, rc.ids, g->G));
    }
    run_free(&r8);
    run_free(&rb);
    run_free(&rc);
done:
    tm_model_free(m8);
    tm_model_free(mb);
    tm_model_free(mc);
}

/* CUDA graphs of decode steps: see the header. */
enum { GRAPH_STEPS = 16, GRAPH_PAGE = 4, GRAPH_MAX_SEQS = 13 };

typedef struct graph_run {
    tm_model *m;
    tm_kv_cache kv;
    int32_t pages[GRAPH_MAX_SEQS][MAX_SEQ / GRAPH_PAGE];
    float *logits; /* [n][V] of the last step */
} graph_run;

static int graph_run_prefill(graph_run *r, const kn_backend *be, const et_golden *g, int n,
                             const int *len)
{
    const tm_config *c = tm_model_config(r->m);
    const int per = MAX_SEQ / GRAPH_PAGE;
    r->logits = calloc((size_t)n * g->V, sizeof(float));
    if (!r->logits)
        return TN_ERR_NOMEM;
    int rc = tm_kv_cache_init(&r->kv, be, KN_BF16, c->n_layers, c->n_kv_heads, c->head_dim,
                              GRAPH_PAGE, n * per);
    for (int i = 0; rc == TN_OK && i < n; i++) {
        rc = tm_kv_alloc_pages(&r->kv, per, r->pages[i]);
        tm_seq_step st = {g->prompt, len[i], 0, r->pages[i], per};
        if (rc == TN_OK)
            rc = tm_forward(r->m, &r->kv, &st, 1, NULL, NULL);
    }
    return rc;
}

static void graphs_match_eager(ctx *t, const char *dir, const et_golden *g, tm_weight_dtype wd)
{
    const char *wname = wd == TM_WEIGHTS_F32 ? "f32" : "default (bf16)";
    static const int batches[] = {1, 3, 8, 13};
    for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
        const int n = batches[bi], per = MAX_SEQ / GRAPH_PAGE;
        /* 0: graphs on, 1: the same padded steps eagerly, 2: graphs off */
        graph_run r[3];
        memset(r, 0, sizeof r);
        static const tm_cuda_graphs modes[3] = {TM_CUDA_GRAPHS_ON, TM_CUDA_GRAPHS_EAGER,
                                                TM_CUDA_GRAPHS_OFF};
        int len[GRAPH_MAX_SEQS];
        for (int i = 0; i < n; i++)
            len[i] = g->T - (i * 3) % (g->T > 4 ? g->T - 1 : 1);
        int rc = TN_OK;
        for (int k = 0; k < 3 && rc == TN_OK; k++) {
            r[k].m = load(t, &t->gpu, dir, wd, wname);
            if (!r[k].m) {
                rc = TN_ERR_ARG;
                break;
            }
            tm_model_set_cuda_graphs(r[k].m, modes[k]);
            rc = graph_run_prefill(&r[k], &t->gpu, g, n, len);
        }
        int bitwise = 1, worst_step = -1;
        double off_err = 0;
        for (int step = 0; rc == TN_OK && step < GRAPH_STEPS; step++) {
            tm_seq_step st[GRAPH_MAX_SEQS];
            int32_t tok[GRAPH_MAX_SEQS];
            for (int i = 0; i < n; i++) {
                tok[i] = g->gen_ids[(step + i) % g->G];
                st[i] = (tm_seq_step){&tok[i], 1, len[i] + step, NULL, per};
            }
            for (int k = 0; k < 3 && rc == TN_OK; k++) {
                for (int i = 0; i < n; i++)
                    st[i].pages = r[k].pages[i];
                /* graphs off also runs the separate decode kernels that the
                 * fused ones replace (kn_rope_kv_append, kn_moe_router) */
                kn_cuda_set_fused_decode(&t->gpu, k != 2);
                rc = tm_forward(r[k].m, &r[k].kv, st, n, r[k].logits, NULL);
                kn_cuda_set_fused_decode(&t->gpu, 1);
            }
            if (rc != TN_OK)
                break;
            if (bitwise && memcmp(r[0].logits, r[1].logits, (size_t)n * g->V * sizeof(float)) != 0) {
                bitwise = 0;
                worst_step = step;
            }
            double e = et_rel_err(r[0].logits, r[2].logits, (size_t)n * g->V);
            off_err = e > off_err || isnan(e) ? e : off_err;
        }
        tap(t, rc == TN_OK, "%s: %s weights, %d sequences: %d decode steps with graphs on, padded "
            "eager and off (%s)", dir, wname, n, GRAPH_STEPS, tn_status_str(rc));
        if (rc == TN_OK) {
            tm_graph_stats on = tm_model_graph_stats(r[0].m), eager = tm_model_graph_stats(r[1].m);
            tap(t, bitwise, "%s: %s weights, %d sequences: graph replays equal the padded eager "
                "steps bit for bit%s", dir, wname, n,
                bitwise ? "" : " (first differing step below)");
            if (!bitwise)
                printf("# first differing step %d\n", worst_step);
            /* f32 experts size their GEMMs on the host: those steps stay
             * eager by design (forward.c fixed_decode_step) */
            const int recordable = wd != TM_WEIGHTS_F32;
            tap(t, (recordable ? on.captures > 0 && on.replays > 0
                               : on.captures == 0 && on.replays == 0) &&
                       on.capture_failures == 0 && eager.captures == 0 && eager.replays == 0,
                "%s: %s weights, %d sequences: graphs recorded %lld, replayed %lld, failed %lld, "
                "eager steps %lld (the eager model: %lld recorded)", dir, wname, n, on.captures,
                on.replays, on.capture_failures, on.eager_steps, eager.captures);
            check_err(t, off_err, wd == TM_WEIGHTS_F32 ? GRAPH_OFF_TOL : BF16_W_KV_TOL, dir,
                      wd == TM_WEIGHTS_F32 ? "f32 weights: graphs on vs off (unpadded step), worst step logits"
                                           : "bf16 weights: graphs on vs off (unpadded step), worst step logits");
        }
        for (int k = 0; k < 3; k++) {
            if (r[k].m)
                tm_kv_cache_free(&r[k].kv);
            free(r[k].logits);
            tm_model_free(r[k].m);
        }
    }
}

/* Teacher-forced decode of toks[0..n) (a prefill of T, then one token a
 * step) through kv on pages of 4, taken as the sequence grows; with trim
 * the window slots are given back after every step. Logits [n - T][V] of
 * the decode steps. */
static int window_run(tm_model *m, tm_kv_cache *kv, const int32_t *toks, int T, int n, int trim,
                      float *out)
{
    const int V = tm_model_config(m)->vocab_size;
    int32_t pages[MAX_SEQ];
    int np = 0;
    int rc = TN_OK;
    for (int p = T - 1; rc == TN_OK && p < n; p++) {
        const int len = p + 1, need = tm_kv_pages_for(kv, len);
        if (trim)
            tm_kv_window_trim(kv, pages, np, p);
        if (need > np) {
            rc = tm_kv_alloc_pages(kv, need - np, pages + np);
            np = need;
        }
        tm_seq_step st = p == T - 1 ? (tm_seq_step){toks, T, 0, pages, np}
                                    : (tm_seq_step){toks + p, 1, p, pages, np};
        if (rc == TN_OK)
            rc = tm_forward(m, kv, &st, 1, out + (size_t)(p - (T - 1)) * V, NULL);
    }
    tm_kv_release_pages(kv, pages, np);
    return rc;
}

static void window_pool_on_gpu(ctx *t, const char *dir, const et_golden *g, kn_dtype kv_dtype)
{
    tm_model *m = load(t, &t->gpu, dir, TM_WEIGHTS_AUTO, "window pool");
    if (!m)
        return;
    const tm_config *c = tm_model_config(m);
    const int T = g->T, n = MAX_SEQ - 1, V = c->vocab_size, page = 4, n_pages = MAX_SEQ / page;
    int W = 0;
    for (int l = 0; l < c->n_layers; l++)
        W = c->layer_window[l] > W ? c->layer_window[l] : W;
    if (W == 0) { /* no window layers (Qwen3) */
        tm_model_free(m);
        return;
    }
    int32_t toks[MAX_SEQ];
    run r;
    memset(&r, 0, sizeof r);
    /* the tokens: this model's own greedy continuation */
    int rc = greedy_kv(m, &t->gpu, kv_dtype, g->prompt, T, n - T + 1, &r);
    memcpy(toks, g->prompt, sizeof(int32_t) * (size_t)T);
    memcpy(toks + T, r.ids, sizeof(int32_t) * (size_t)(n - T));
    float *a = calloc((size_t)(n - T + 1) * V, sizeof(float));
    float *b = calloc((size_t)(n - T + 1) * V, sizeof(float));
    tm_kv_cache plain, win;
    memset(&plain, 0, sizeof plain);
    memset(&win, 0, sizeof win);
    if (rc == TN_OK && (!a || !b))
        rc = TN_ERR_NOMEM;
    if (rc == TN_OK)
        rc = tm_kv_cache_init(&plain, &t->gpu, kv_dtype, c->n_layers, c->n_kv_heads, c->head_dim, page,
                              n_pages);
    /* slots: the prompt's pages, then the window's */
    const int slots = (T + page - 1) / page + 2;
    if (rc == TN_OK)
        rc = tm_kv_cache_init_windowed(&win, &t->gpu, kv_dtype, c->n_layers, c->n_kv_heads, c->head_dim,
                                       page, n_pages, c->layer_window, slots);
    if (rc == TN_OK)
        rc = window_run(m, &plain, toks, T, n, 0, a);
    if (rc == TN_OK)
        rc = window_run(m, &win, toks, T, n, 1, b);
    if (rc != TN_OK) {
        tap(t, 0, "%s: window pool, %s KV: %s", dir, kn_dtype_name(kv_dtype), tn_status_str(rc));
    } else {
        const size_t bytes = sizeof(float) * (size_t)(n - T + 1) * V;
        tap(t, memcmp(a, b, bytes) == 0,
            "%s: %s KV, window %d: %d decode steps through a window pool of %d slots (plain: %d "
            "pages) equal the plain cache's bit for bit (rel err %.3g)",
            dir, kn_dtype_name(kv_dtype), W, n - T, win.n_win_slots, n_pages,
            et_rel_err(b, a, (size_t)(n - T + 1) * V));
    }
    tm_kv_cache_free(&plain);
    tm_kv_cache_free(&win);
    free(a);
    free(b);
    run_free(&r);
    tm_model_free(m);
}

int main(int argc, char **argv)
{
    ctx t;
    memset(&t, 0, sizeof t);
    int device = argc > 1 ? atoi(argv[1]) : 0;
    printf("# test_engine_gpu device %d\n", device);
    if (kn_backend_init_cpu(&t.cpu) != TN_OK || kn_backend_init_cuda(&t.gpu, device) != TN_OK) {
        printf("Bail out! cannot initialise the backends\n");
        return 1;
    }
    const char *fixtures[] = {ET_GPT_OSS, ET_QWEN3};
    for (int i = 0; i < 2; i++) {
        et_golden g;
        char err[512] = "";
        if (et_golden_load(fixtures[i], &g, err, sizeof err) != 0) {
            tap(&t, 0, "%s: golden: %s", fixtures[i], err);
            continue;
        }
        f32_vs_hf_and_cpu(&t, fixtures[i], &g);
        decode_matches_prefill(&t, fixtures[i], &g, KN_F32, SAME_TOL);
        decode_matches_prefill(&t, fixtures[i], &g, KN_BF16, BF16_KV_SAME_TOL);
        bf16_kv_vs_f32_kv_and_cpu(&t, fixtures[i], &g);
        decode_matches_prefill(&t, fixtures[i], &g, KN_FP8_E4M3, FP8_KV_SAME_TOL);
        fp8_kv_vs_f32_kv_and_cpu(&t, fixtures[i], &g);
        bf16_vs_hf_and_cpu(&t, fixtures[i], &g);
        synthetic_same_on_both(&t, fixtures[i], &g, TM_WEIGHTS_F32, CPU_F32_TOL);
        synthetic_same_on_both(&t, fixtures[i], &g, TM_WEIGHTS_BF16, BF16_CPU_TOL);
        fp8_vs_bf16_and_cpu(&t, fixtures[i], &g, i == 0 ? FP8_TOL_GPT_OSS : FP8_TOL_QWEN3);
        graphs_match_eager(&t, fixtures[i], &g, TM_WEIGHTS_F32);
        graphs_match_eager(&t, fixtures[i], &g, TM_WEIGHTS_AUTO);
        synthetic_same_on_both(&t, fixtures[i], &g, TM_WEIGHTS_FP8,
                               i == 0 ? FP8_TOL_GPT_OSS : FP8_TOL_QWEN3);
        window_pool_on_gpu(&t, fixtures[i], &g, KN_BF16);
        window_pool_on_gpu(&t, fixtures[i], &g, KN_FP8_E4M3);
        et_golden_free(&g);
    }
    kn_backend_free(&t.gpu);
    kn_backend_free(&t.cpu);
    return tu_tap_finish(&t.tap);
}
