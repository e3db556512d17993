/* tandem-bench: measures the engine's prefill and decode speed, the way the
 * prefiller and decoder drive it (one prefill per request; decode steps
 * over a batch of sequences sharing a paged KV cache), on a model directory
 * or on random weights of a real config (--synthetic, no files needed).
 * Prints a table; every figure is the median of --repeat runs after one
 * untimed warm-up run. With --peak-tflops / --hbm-tbps it also prints each
 * figure's floor: the work's FLOPs over the matrix peak (prefill) or the
 * bytes a decode step must read over the memory bandwidth (decode).
 * With --tp/--ep/--dp it runs a parallel layout, one process per rank
 * (forked, engine/rank_group.h), each rank on its GPU (--rank-devices) with
 * the communicator the workers would choose (staged through host memory
 * when ranks share a GPU, NCCL on distinct GPUs); rank 0 prints its own
 * times (the ranks run in lockstep). A prefill is the TP group's latency;
 * a decode step runs `batch` sequences on every DP rank, so tokens/s is
 * per rank (per GPU when each rank has its own).
 * It measures, it does not check: correctness lives in the tests. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "engine/device.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/rank_group.h"
#include "kernels/backend.h"
#include "kernels/fill.h"
#include "common/options.h"
#include "common/status.h"
#include "kernels/stopwatch.h"

#define MAX_LIST 16
#define MAX_RUNS 64

typedef enum { FILL_AUTO, FILL_PREFILL, FILL_RANDOM } ctx_fill;

typedef struct bench_args {
    char model[4096], synthetic[4096], device[64];
    tm_weight_dtype weights;
    tm_kv_dtype kv_dtype;
    unsigned long long seed;
    int32_t prefill_lens[MAX_LIST];
    int n_prefill;
    int32_t batches[MAX_LIST];
    int n_batches;
    int context;      /* tokens in each sequence's cache before decode steps */
    int steps;        /* decode steps timed per run */
    int repeat;
    int page_size;
    int chunk_tokens; /* prefill in chunks of this many tokens (0: whole prompt) */
    ctx_fill fill;
    int profile;
    double peak_tflops, hbm_tbps;
    tm_cuda_graphs graphs;
    int window_pool;                 /* window layers keep only their window (default on) */
    int tp, ep, dp;                  /* the parallel layout (1, 1, 1: one rank) */
    char rank_devices[256];          /* CUDA ordinal of each rank, "" = N + rank */
    rank_comm_kind rank_comm;
} bench_args;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: tandem-bench (--model DIR | --synthetic CONFIG) [options]\n"
        "\n"
        "Times prefill (one sequence of N tokens) and decode (steps over a batch of\n"
        "sequences with --context cached tokens each) and prints a table; each figure\n"
        "is the median of the repeats, after one untimed warm-up run.\n"
        "\n"
        "  --model DIR          model directory (config.json + safetensors)\n"
        "  --synthetic CONFIG   random weights of this config.json (file or directory),\n"
        "                       made on the device: real shapes, no checkpoint\n"
        "  --seed S             seed of the synthetic weights (default 1)\n"
        "  --device D           cpu (default), cuda or cuda:N\n"
        "  --weights W          auto (default: f32 on cpu, bf16 on cuda), f32, bf16 or\n"
        "                       fp8 (attention and experts FP8 e4m3, 128x128 block scales)\n"
        "  --kv-dtype T         KV cache element type: auto (default: f32 on cpu, bf16\n"
        "                       on cuda), f32, bf16 or fp8 (e4m3, a scale per token row)\n"
        "  --prefill LIST       prompt lengths, comma-separated, or none (default 128,512)\n"
        "  --batch LIST         decode batch sizes, or none (default 1,8,32)\n"
        "  --context N          cached tokens per sequence before decoding (default 128)\n"
        "  --context-fill F     how the decode context gets into the cache: prefill (run\n"
        "                       the model over it) or random (fill the cache with random\n"
        "                       values; decode speed does not depend on them). Default:\n"
        "                       prefill with --model, random with --synthetic\n"
        "  --steps N            decode steps per run (default 32)\n"
        "  --repeat N           timed runs per figure, median reported (default 5)\n"
        "  --page-size N        KV page size in tokens (default 16)\n"
        "  --chunk-tokens N     prefill a prompt in chunks of N tokens, each attending to\n"
        "                       the cached ones, as tandem-prefiller's --chunk-tokens\n"
        "                       does (default 0: one forward over the whole prompt)\n"
        "  --cuda-graphs G      on (default) or off: decode steps recorded as CUDA graphs\n"
        "                       per batch bucket and replayed (cuda; not with --profile)\n"
        "  --window-pool P      on (default) or off: sliding-window layers hold only their\n"
        "                       window's pages in decode (engine/kv_cache.h), so the KV\n"
        "                       cache is full layers x context + window layers x window\n"
        "  --profile            one more run per shape with per-group device timing\n"
        "                       (attention, projections, experts, ...), printed after\n"
        "  --peak-tflops X      matrix peak for the prefill floor (FLOPs / peak)\n"
        "  --hbm-tbps X         memory bandwidth for the decode floor (bytes / bandwidth)\n"
        "  --tp N, --ep M       a TP=N (EP=M) layout: prefill as the prefiller's ranks run it\n"
        "  --dp N, --ep M       a DP=N x EP=M layout: decode as the decoder's ranks run it\n"
        "                       (every DP rank decodes --batch sequences of its own)\n"
        "  --rank-devices LIST  CUDA ordinal of each rank, e.g. 0,1,2,3 or 0,0 (ranks\n"
        "                       sharing a GPU); default: --device's N + rank\n"
        "  --rank-comm C        the ranks' communicator: auto (default: host on the CPU;\n"
        "                       on CUDA staged when ranks share a GPU, else NCCL), host,\n"
        "                       staged or nccl\n"
        "  --help               show this help\n"
        "\n"
        "Decode steps keep the logits on the device (a decoder samples there).\n");
}

/* "a,b,c" of positive ints, or "none" for an empty list. */
static int parse_list(const char *s, int32_t *out, int *n)
{
    *n = 0;
    if (strcmp(s, "none") == 0)
        return 0;
    return opts_int_list(s, strlen(s), 1, 1 << 20, out, MAX_LIST, n);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Every timed run in order (ms, scaled per step for decode), as a comment
 * line before the median's row: the spread and any drift stay visible. */
static void print_runs(const char *phase, const double *v, int n, double scale)
{
    printf("# %s runs (ms, in order):", phase);
    for (int i = 0; i < n; i++)
        printf(" %.3f", 1e3 * v[i] * scale);
    printf("\n");
}

/* Deterministic token ids in [3, vocab): benchmarks need no real text. */
static void fill_tokens(int32_t *t, int n, int vocab, uint32_t seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        t[i] = 3 + (int32_t)((seed >> 8) % (uint32_t)(vocab - 3));
    }
}

typedef struct bench_ctx {
    tm_model *model;
    const tm_config *cfg;
    kn_backend be;
    kn_stopwatch *sw;
    kn_dtype kv_dtype;
    double prof[TM_PROF_N_GROUPS];
    comm *ctl;          /* the ranks' control communicator (host memory); NULL for one */
} bench_ctx;

/* ---- floors ---------------------------------------------------------- */

/* Keys a query row sees summed over a prefill of n rows (causal, window). */
static double visible_keys(int n, int window)
{
    if (window <= 0 || window >= n)
        return (double)n * (n + 1) / 2;
    return (double)window * (window + 1) / 2 + (double)(n - window) * window;
}

/* Useful FLOPs of one prefill of n tokens (multiply-add = 2): projections,
 * router, experts (k routes per token), attention (QK^T and PV over the
 * visible keys), and the head for the last row. */
static double prefill_flops(const tm_config *c, int n)
{
    double H = c->hidden_size, qd = (double)c->n_heads * c->head_dim;
    double kvd = (double)c->n_kv_heads * c->head_dim, I = c->moe_inter;
    double per_tok = 2 * H * (qd + 2 * kvd) + 2 * qd * H + 2 * H * c->n_experts +
                     2.0 * c->n_experts_per_tok * (2 * I * H + H * I);
    double f = per_tok * n * c->n_layers;
    for (int l = 0; l < c->n_layers; l++)
        f += 4.0 * c->head_dim * c->n_heads * visible_keys(n, c->layer_window[l]);
    return f + 2 * H * c->vocab_size;
}

/* Bytes one decode step over `batch` sequences with `ctx` cached tokens
 * must read at least once: every attention weight, the router, the
 * experts some token of the batch routes to (expected count under uniform
 * routing, E (1 - (1 - k/E)^batch)), the head, and each sequence's visible
 * K/V (rows of the cache's dtype kvdt: FP8 rows with their scale). */
static double decode_bytes(const tm_config *c, kn_dtype wd, kn_dtype ed, kn_dtype kvdt,
                           int batch, int ctx)
{
    /* wd: the LM head's dtype; ed: the experts' (and attention's) */
    double wb = kn_dtype_size(ed), hb = kn_dtype_size(wd), H = c->hidden_size;
    double qd = (double)c->n_heads * c->head_dim, kvd = (double)c->n_kv_heads * c->head_dim;
    double E = c->n_experts, k = c->n_experts_per_tok, I = c->moe_inter;
    double experts = E * (1 - pow(1 - k / E, batch));
    double per_layer = wb * (H * (qd + 2 * kvd) + qd * H) + 4 * E * H +
                       experts * wb * 3 * I * H;
    double bytes = per_layer * c->n_layers + hb * H * c->vocab_size;
    for (int l = 0; l < c->n_layers; l++) {
        int w = c->layer_window[l];
        double vis = w > 0 && w < ctx ? w : ctx;
        bytes += (double)batch * vis * c->n_kv_heads * 2 *
                 (double)kn_kv_row_bytes(kvdt, c->head_dim);
    }
    return bytes;
}

/* ---- profiling -------------------------------------------------------- */

static int profile_start(bench_ctx *c)
{
    if (!c->sw)
        return TN_OK;
    memset(c->prof, 0, sizeof c->prof);
    tm_model_set_stopwatch(c->model, c->sw);
    return TN_OK;
}

/* Adds the laps of the forward just run into c->prof. */
static int profile_collect(bench_ctx *c)
{
    return c->sw ? kn_stopwatch_collect(c->sw, c->prof) : TN_OK;
}

static void profile_print(bench_ctx *c, const char *what, int forwards)
{
    tm_model_set_stopwatch(c->model, NULL);
    double total = 0;
    for (int g = 0; g < TM_PROF_N_GROUPS; g++)
        total += c->prof[g];
    printf("# profile, %s: ms per forward by group (device time between events)\n", what);
    for (int g = 0; g < TM_PROF_N_GROUPS; g++)
        printf("#   %-28s %10.3f ms %6.1f%%\n", tm_prof_group_name(g), c->prof[g] / forwards,
               total > 0 ? 100.0 * c->prof[g] / total : 0.0);
    printf("#   %-28s %10.3f ms\n", "total", total / forwards);
}

/* ---- runs ------------------------------------------------------------- */

static void print_row(const char *phase, const char *shape, double ms, double tps,
                      double floor_ms)
{
    if (floor_ms > 0)
        printf("%-8s %-30s %12.3f %14.0f %10.3f %8.2f\n", phase, shape, ms, tps, floor_ms,
               ms / floor_ms);
    else
        printf("%-8s %-30s %12.3f %14.0f %10s %8s\n", phase, shape, ms, tps, "-", "-");
    fflush(stdout);
}

/* One prefill of len tokens in kv, in chunks of `chunk` tokens (0: one
 * forward); returns its wall time (ends synced). */
static int run_prefill(bench_ctx *c, tm_kv_cache *kv, int32_t *tokens, int32_t *pages,
                       int len, int chunk, float *logits, uint32_t seed, double *sec)
{
    int n_pages = tm_kv_pages_for(kv, len);
    fill_tokens(tokens, len, c->cfg->vocab_size, seed);
    int rc = tm_kv_alloc_pages(kv, n_pages, pages);
    if (rc != TN_OK)
        return rc;
    if (chunk <= 0 || chunk > len)
        chunk = len;
    double t0 = now_s();
    for (int off = 0; rc == TN_OK && off < len; off += chunk) {
        int n = len - off < chunk ? len - off : chunk;
        tm_seq_step s = {tokens + off, n, off, pages, n_pages};
        rc = tm_forward(c->model, kv, &s, 1, logits, NULL);
    }
    *sec = now_s() - t0;
    tm_kv_release_pages(kv, pages, n_pages);
    return rc;
}

static int bench_prefill(bench_ctx *c, const bench_args *a, int len)
{
    tm_kv_cache kv;
    int rc = tm_kv_cache_init(&kv, &c->be, c->kv_dtype, c->cfg->n_layers,
                              tm_model_kv_heads(c->model), c->cfg->head_dim, a->page_size,
                              (len + a->page_size - 1) / a->page_size);
    if (rc != TN_OK)
        return rc;
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)len);
    int32_t *pages = malloc(sizeof(int32_t) * (size_t)kv.n_pages);
    float *logits = malloc(sizeof(float) * (size_t)c->cfg->vocab_size);
    double runs[MAX_RUNS], sec = 0;
    rc = (!tokens || !pages || !logits) ? TN_ERR_NOMEM : TN_OK;
    for (int r = -1; rc == TN_OK && r < a->repeat; r++) {   /* r = -1: warm-up */
        rc = run_prefill(c, &kv, tokens, pages, len, a->chunk_tokens, logits,
                         7u + (uint32_t)(r + 1), &sec);
        if (r >= 0)
            runs[r] = sec;
    }
    if (rc == TN_OK) {
        print_runs("prefill", runs, a->repeat, 1.0);
        double ms = 1e3 * median(runs, a->repeat);
        double floor_ms = a->peak_tflops > 0
                              ? prefill_flops(c->cfg, len) / (a->peak_tflops * 1e12) * 1e3 : 0;
        char shape[64];
        if (a->chunk_tokens > 0 && a->chunk_tokens < len)
            snprintf(shape, sizeof shape, "prompt %d (chunks of %d)", len, a->chunk_tokens);
        else
            snprintf(shape, sizeof shape, "prompt %d", len);
        print_row("prefill", shape, ms, len / (ms * 1e-3), floor_ms);
    }
    if (rc == TN_OK && c->sw) {
        profile_start(c);
        rc = run_prefill(c, &kv, tokens, pages, len, a->chunk_tokens, logits, 99u, &sec);
        if (rc == TN_OK)
            rc = profile_collect(c);
        if (rc == TN_OK) {
            char what[64];
            snprintf(what, sizeof what, "prefill %d", len);
            profile_print(c, what, 1);
            printf("# profiled run's wall time (tm_forward, host clock): %.3f ms\n", 1e3 * sec);
        }
        tm_model_set_stopwatch(c->model, NULL);
    }
    free(tokens);
    free(pages);
    free(logits);
    tm_kv_cache_free(&kv);
    tm_model_trim(c->model);
    return rc;
}

/* Puts `context` tokens into each sequence's pages, by prefilling them or
 * by filling the whole cache with random values once (mode FILL_RANDOM). */
static int fill_context(bench_ctx *c, const bench_args *a, tm_kv_cache *kv, int32_t *pages,
                        int per_seq, int batch, ctx_fill mode)
{
    if (mode == FILL_RANDOM)
        return TN_OK;   /* the pools were filled when the cache was made */
    int32_t *ctx_tokens = malloc(sizeof(int32_t) * (size_t)a->context);
    int rc = ctx_tokens ? TN_OK : TN_ERR_NOMEM;
    for (int b = 0; rc == TN_OK && b < batch; b++) {
        fill_tokens(ctx_tokens, a->context, c->cfg->vocab_size, 100u + (uint32_t)b);
        tm_seq_step s = {ctx_tokens, a->context, 0, pages + (size_t)b * per_seq, per_seq};
        rc = tm_forward(c->model, kv, &s, 1, NULL, NULL);
    }
    free(ctx_tokens);
    return rc;
}

/* Random values in every element (FP8: every byte as a code, the row
 * scales too, which then read as tiny finite floats: decode speed does not
 * depend on the values). */
static int cache_fill_random(bench_ctx *c, tm_kv_cache *kv)
{
    int rc = TN_OK;
    for (int l = 0; rc == TN_OK && l < kv->n_layers; l++) {
        size_t n = tm_kv_page_bytes(kv) / kn_dtype_size(kv->dtype) *
                   (size_t)(tm_kv_layer_windowed(kv, l) ? kv->n_win_slots : kv->n_pages);
        rc = kn_fill_uniform(&c->be, kv->k[l], kv->dtype, n, 1000u + (uint64_t)l, -1.0f, 1.0f);
        if (rc == TN_OK)
            rc = kn_fill_uniform(&c->be, kv->v[l], kv->dtype, n, 5000u + (uint64_t)l, -1.0f,
                                 1.0f);
    }
    return rc == TN_OK ? kn_backend_sync(&c->be) : rc;
}

/* Takes each sequence's pages and fills its context, one sequence at a
 * time, giving back the window slots of the pages out of the window after
 * each (a window pool then holds one sequence's whole context at most). */
static int alloc_and_fill(bench_ctx *c, const bench_args *a, tm_kv_cache *kv, int32_t *pages,
                          int per_seq, int batch, ctx_fill mode)
{
    int rc = TN_OK, b = 0;
    for (; rc == TN_OK && b < batch; b++) {
        int32_t *p = pages + (size_t)b * per_seq;
        rc = tm_kv_alloc_pages(kv, per_seq, p);
        if (rc != TN_OK)
            break;
        rc = fill_context(c, a, kv, p, per_seq, 1, mode);
        tm_kv_window_trim(kv, p, per_seq, a->context);
        if (rc != TN_OK)
            b++;
    }
    if (rc != TN_OK)
        tm_kv_release_pages(kv, pages, per_seq * b);
    return rc;
}

/* `steps` decode steps over `batch` sequences; returns the wall time. */
static int run_decode(bench_ctx *c, const bench_args *a, tm_kv_cache *kv, int32_t *pages,
                      int per_seq, int batch, ctx_fill mode, int32_t *step_tokens,
                      tm_seq_step *seqs, double *sec)
{
    int rc = alloc_and_fill(c, a, kv, pages, per_seq, batch, mode);
    if (rc != TN_OK)
        return rc;
    double t0 = now_s();
    for (int step = 0; rc == TN_OK && step < a->steps; step++) {
        fill_tokens(step_tokens, batch, c->cfg->vocab_size, 1000u + (uint32_t)step);
        for (int b = 0; b < batch; b++)
            seqs[b] = (tm_seq_step){step_tokens + b, 1, a->context + step,
                                    pages + (size_t)b * per_seq, per_seq};
        rc = tm_forward(c->model, kv, seqs, batch, NULL, NULL);
    }
    *sec = now_s() - t0;
    tm_kv_release_pages(kv, pages, per_seq * batch);
    return rc;
}

static int bench_decode(bench_ctx *c, const bench_args *a, int batch, ctx_fill mode)
{
    tm_kv_cache kv;
    int per_seq = (a->context + a->steps + a->page_size - 1) / a->page_size;
    /* window pool: each sequence keeps the pages from the one holding
     * position context - window on (the steps' too); one sequence at a time
     * holds its whole context while it is filled (alloc_and_fill) */
    int window = 0, n_win = 0;
    for (int l = 0; a->window_pool && l < c->cfg->n_layers; l++)
        if (c->cfg->layer_window[l] > window)
            window = c->cfg->layer_window[l];
    if (window > 0) {
        const int first = a->context - window > 0 ? (a->context - window) / a->page_size : 0;
        n_win = (per_seq - first) * (batch - 1) + per_seq;
        if (n_win >= per_seq * batch)
            n_win = 0;   /* no saving: one pool as before */
    }
    int rc = tm_kv_cache_init_windowed(&kv, &c->be, c->kv_dtype, c->cfg->n_layers,
                                       tm_model_kv_heads(c->model), c->cfg->head_dim,
                                       a->page_size, per_seq * batch, c->cfg->layer_window, n_win);
    const double kv_gb = rc == TN_OK ? tm_kv_cache_bytes(&kv) / 1e9
                         : 2.0 * c->cfg->n_layers * (double)per_seq * batch * a->page_size *
                               tm_model_kv_heads(c->model) *
                               (double)kn_kv_row_bytes(c->kv_dtype, c->cfg->head_dim) / 1e9;
    char shape[64];
    snprintf(shape, sizeof shape, "batch %d, context %d", batch, a->context);
    if (c->ctl) {
        /* every rank skips the shape when one cannot hold its cache (ranks
         * sharing a GPU may differ), or the others would wait in its
         * collectives */
        float failed = rc != TN_OK;
        int crc = comm_all_reduce_sum(c->ctl, &failed, 1);
        if (crc != TN_OK) {
            if (rc == TN_OK)
                tm_kv_cache_free(&kv);
            return crc;
        }
        if (failed > 0 && rc == TN_OK) {
            tm_kv_cache_free(&kv);
            rc = TN_ERR_NOMEM;
        }
    }
    if (rc != TN_OK) {
        printf("%-8s %-30s  cache of %.1f GB per rank did not fit on some rank: %s\n",
               "decode", shape, kv_gb, tn_status_str(rc));
        return TN_OK;   /* report and go on with the other shapes */
    }
    printf("# decode %s: KV cache %.4g GB (%s, %d pages%s)\n", shape, kv_gb,
           kn_dtype_name(kv.dtype), kv.n_pages,
           kv.window > 0 ? ", window layers a pool of their own" : "");
    if (kv.window > 0)
        printf("#   window layers (window %d): %d pages each instead of %d\n", kv.window,
               kv.n_win_slots, kv.n_pages);
    if (mode == FILL_RANDOM)
        rc = cache_fill_random(c, &kv);
    int32_t *pages = malloc(sizeof(int32_t) * (size_t)per_seq * batch);
    int32_t *step_tokens = malloc(sizeof(int32_t) * (size_t)batch);
    tm_seq_step *seqs = calloc((size_t)batch, sizeof *seqs);
    double runs[MAX_RUNS], sec = 0;
    if (rc == TN_OK && (!pages || !step_tokens || !seqs))
        rc = TN_ERR_NOMEM;
    for (int r = -1; rc == TN_OK && r < a->repeat; r++) {   /* r = -1: warm-up */
        rc = run_decode(c, a, &kv, pages, per_seq, batch, mode, step_tokens, seqs, &sec);
        if (r >= 0)
            runs[r] = sec;
    }
    if (rc == TN_OK) {
        print_runs("decode", runs, a->repeat, 1.0 / a->steps);
        double step_ms = 1e3 * median(runs, a->repeat) / a->steps;
        double floor_ms = a->hbm_tbps > 0
                              ? decode_bytes(c->cfg, tm_model_weight_dtype(c->model),
                                             tm_model_expert_dtype(c->model), c->kv_dtype, batch,
                                             a->context + a->steps / 2) /
                                    (a->hbm_tbps * 1e12) * 1e3
                              : 0;
        print_row("decode", shape, step_ms, batch / (step_ms * 1e-3), floor_ms);
        if (c->be.kind == KN_BACKEND_CUDA) {
            tm_graph_stats gs = tm_model_graph_stats(c->model);
            printf("# decode steps so far: %lld recorded as CUDA graphs, %lld replayed, %lld "
                   "failed to record, %lld padded steps eager\n", gs.captures, gs.replays,
                   gs.capture_failures, gs.eager_steps);
        }
    }
    if (rc == TN_OK && c->sw) {
        /* one more run, every step timed by group */
        rc = alloc_and_fill(c, a, &kv, pages, per_seq, batch, mode);
        profile_start(c);
        for (int step = 0; rc == TN_OK && step < a->steps; step++) {
            fill_tokens(step_tokens, batch, c->cfg->vocab_size, 1000u + (uint32_t)step);
            for (int b = 0; b < batch; b++)
                seqs[b] = (tm_seq_step){step_tokens + b, 1, a->context + step,
                                        pages + (size_t)b * per_seq, per_seq};
            tm_model_set_stopwatch(c->model, c->sw);
            rc = tm_forward(c->model, &kv, seqs, batch, NULL, NULL);
            if (rc == TN_OK)
                rc = profile_collect(c);
        }
        tm_kv_release_pages(&kv, pages, per_seq * batch);
        if (rc == TN_OK) {
            char what[96];
            snprintf(what, sizeof what, "decode %s (per step)", shape);
            profile_print(c, what, a->steps);
        }
        tm_model_set_stopwatch(c->model, NULL);
    }
    free(pages);
    free(step_tokens);
    free(seqs);
    tm_kv_cache_free(&kv);
    tm_model_trim(c->model);
    return rc;
}

/* Every flag with a value: checked here, refused as "bad value for --NAME". */
static int set_flag(void *ctx, const char *name, const char *v, char *err, size_t errlen)
{
    bench_args *a = ctx;
    kn_backend_kind kind;
    int ordinal, bad = 0;
    size_t len = strlen(v);
    if (!strcmp(name, "model") || !strcmp(name, "synthetic") || !strcmp(name, "device")) {
        char *dst = name[0] == 'm' ? a->model : name[0] == 's' ? a->synthetic : a->device;
        size_t cap = name[0] == 'd' ? sizeof a->device : sizeof a->model;
        bad = len >= cap || (name[0] == 'd' && tm_device_parse(v, &kind, &ordinal));
        if (!bad)
            memcpy(dst, v, len + 1);
    } else if (!strcmp(name, "seed")) {
        bad = opts_u64(v, &a->seed);
    } else if (!strcmp(name, "weights")) {
        bad = tm_weights_parse(v, &a->weights);
    } else if (!strcmp(name, "kv-dtype")) {
        if (tm_kv_dtype_parse(v, &a->kv_dtype, err, errlen) != 0)
            return -1;
    } else if (!strcmp(name, "prefill")) {
        bad = parse_list(v, a->prefill_lens, &a->n_prefill);
    } else if (!strcmp(name, "batch")) {
        bad = parse_list(v, a->batches, &a->n_batches);
    } else if (!strcmp(name, "context")) {
        bad = opts_int(v, 1, 1 << 20, &a->context);
    } else if (!strcmp(name, "context-fill")) {
        if (!strcmp(v, "prefill"))
            a->fill = FILL_PREFILL;
        else if (!strcmp(v, "random"))
            a->fill = FILL_RANDOM;
        else
            bad = 1;
    } else if (!strcmp(name, "steps")) {
        bad = opts_int(v, 1, 1 << 16, &a->steps);
    } else if (!strcmp(name, "repeat")) {
        bad = opts_int(v, 1, MAX_RUNS, &a->repeat);
    } else if (!strcmp(name, "cuda-graphs")) {
        bad = tm_cuda_graphs_parse(v, &a->graphs);
    } else if (!strcmp(name, "chunk-tokens")) {
        bad = opts_int(v, 0, 1 << 30, &a->chunk_tokens);
    } else if (!strcmp(name, "window-pool")) {
        if (!strcmp(v, "on") || !strcmp(v, "off"))
            a->window_pool = !strcmp(v, "on");
        else
            bad = 1;
    } else if (!strcmp(name, "page-size")) {
        bad = opts_int(v, 1, 4096, &a->page_size);
    } else if (!strcmp(name, "tp") || !strcmp(name, "ep") || !strcmp(name, "dp")) {
        int *dst = name[0] == 't' ? &a->tp : name[0] == 'e' ? &a->ep : &a->dp;
        bad = opts_int(v, 1, COMM_MAX_WORLD, dst);
    } else if (!strcmp(name, "rank-devices")) {
        int32_t ords[COMM_MAX_WORLD];
        int n = 0;
        bad = len >= sizeof a->rank_devices ||
              opts_int_list(v, len, 0, 1023, ords, COMM_MAX_WORLD, &n) != 0;
        if (!bad)
            memcpy(a->rank_devices, v, len + 1);
    } else if (!strcmp(name, "rank-comm")) {
        bad = rank_comm_parse(v, &a->rank_comm) != 0;
    } else if (!strcmp(name, "peak-tflops") || !strcmp(name, "hbm-tbps")) {
        double *dst = name[0] == 'p' ? &a->peak_tflops : &a->hbm_tbps, d;
        bad = opts_double(v, &d) || !(d > 0);
        if (!bad)
            *dst = d;
    } else {
        bad = 1;
    }
    if (bad)
        snprintf(err, errlen, "bad value for --%s: '%s' (see --help)", name, v);
    return bad ? -1 : 0;
}

static int parse_args(int argc, char **argv, bench_args *a)
{
    opt_call call = {set_flag, a};
    const opt_spec specs[] = {
        {"model", OPT_CALL, &call, 0, "model directory"},
        {"synthetic", OPT_CALL, &call, 0, "random weights of this config.json"},
        {"seed", OPT_CALL, &call, 0, "seed of the synthetic weights"},
        {"device", OPT_CALL, &call, 0, "cpu, cuda or cuda:N"},
        {"weights", OPT_CALL, &call, 0, "auto, f32, bf16 or fp8"},
        {"kv-dtype", OPT_CALL, &call, 0, "auto, f32, bf16 or fp8"},
        {"prefill", OPT_CALL, &call, 0, "prompt lengths, comma-separated, or none"},
        {"batch", OPT_CALL, &call, 0, "decode batch sizes, or none"},
        {"context", OPT_CALL, &call, 0, "cached tokens per sequence before decoding"},
        {"context-fill", OPT_CALL, &call, 0, "prefill or random"},
        {"steps", OPT_CALL, &call, 0, "decode steps per run"},
        {"repeat", OPT_CALL, &call, 0, "timed runs per figure"},
        {"page-size", OPT_CALL, &call, 0, "KV page size in tokens"},
        {"chunk-tokens", OPT_CALL, &call, 0, "prefill chunk in tokens (0: whole prompt)"},
        {"cuda-graphs", OPT_CALL, &call, 0, "on or off"},
        {"window-pool", OPT_CALL, &call, 0, "on or off"},
        {"profile", OPT_BOOL, &a->profile, 0, "one more run per shape with device timing"},
        {"peak-tflops", OPT_CALL, &call, 0, "matrix peak for the prefill floor"},
        {"hbm-tbps", OPT_CALL, &call, 0, "memory bandwidth for the decode floor"},
        {"tp", OPT_CALL, &call, 0, "tensor-parallel ranks"},
        {"ep", OPT_CALL, &call, 0, "expert-parallel ranks"},
        {"dp", OPT_CALL, &call, 0, "data-parallel ranks"},
        {"rank-devices", OPT_CALL, &call, 0, "CUDA ordinal of each rank"},
        {"rank-comm", OPT_CALL, &call, 0, "auto, host, staged or nccl"},
    };
    const opts_cli cli = {specs, (int)(sizeof specs / sizeof *specs), NULL, NULL, "option"};
    char err[512];
    switch (opts_parse_cli(&cli, argc, argv, err, sizeof err)) {
    case OPTS_HELP: usage(stdout); return -1;
    case OPTS_ERROR: fprintf(stderr, "tandem-bench: %s\n", err); return 2;
    }
    if (!a->model[0] == !a->synthetic[0]) {
        fprintf(stderr, "tandem-bench: give exactly one of --model DIR and --synthetic CONFIG "
                "(see --help)\n");
        return 2;
    }
    if (a->fill == FILL_AUTO)
        a->fill = a->synthetic[0] ? FILL_RANDOM : FILL_PREFILL;
    if (a->tp > 1 && a->dp > 1) {
        fprintf(stderr, "tandem-bench: --tp and --dp together are not a layout the workers run "
                "(prefill TP+EP, decode DP+EP)\n");
        return 2;
    }
    const int span = a->tp > 1 ? a->tp : a->dp;
    if (span % a->ep != 0) {
        fprintf(stderr, "tandem-bench: --ep %d must divide the %d %s ranks (an EP group is "
                "carved from them)\n", a->ep, span, a->tp > 1 ? "TP" : "DP");
        return 2;
    }
    return 0;
}

/* This rank's device: --device, or with several ranks on CUDA the rank's
 * entry of --rank-devices (default --device's N + rank). */
static int rank_device(const bench_args *a, int rank, int size, char *out, size_t len)
{
    kn_backend_kind kind;
    int base;
    if (tm_device_parse(a->device, &kind, &base) != 0)
        return -1;
    if (kind != KN_BACKEND_CUDA || size <= 1) {
        snprintf(out, len, "%s", a->device);
        return 0;
    }
    int ordinal = base + rank;
    if (a->rank_devices[0]) {
        int32_t ords[COMM_MAX_WORLD];
        int n = 0;
        if (opts_int_list(a->rank_devices, strlen(a->rank_devices), 0, 1023, ords,
                          COMM_MAX_WORLD, &n) != 0 || n < 1)
            return -1;
        ordinal = ords[rank < n ? rank : n - 1];
    }
    snprintf(out, len, "cuda:%d", ordinal);
    return 0;
}

int main(int argc, char **argv)
{
    bench_args a = {.device = "cpu", .seed = 1,
                    .prefill_lens = {128, 512}, .n_prefill = 2,
                    .batches = {1, 8, 32}, .n_batches = 3,
                    .context = 128, .steps = 32, .repeat = 5, .page_size = 16,
                    .graphs = TM_CUDA_GRAPHS_ON, .window_pool = 1, .tp = 1, .ep = 1, .dp = 1};
    int prc = parse_args(argc, argv, &a);
    if (prc)
        return prc < 0 ? 0 : prc;

    /* the ranks first, before any thread exists (rank_group.h) */
    rank_group group;
    char err[512] = "";
    rank_group_spec spec = {.tp = a.tp, .ep = a.ep, .dp = a.dp, .prefix = "bench",
                            .timeout_ms = 600000, .comm = a.rank_comm};
    if (rank_group_start(&group, &spec, err, sizeof err) != TN_OK) {
        fprintf(stderr, "tandem-bench: %s\n", err);
        return 1;
    }
    if (group.rank != 0 && !freopen("/dev/null", "w", stdout)) {
        fprintf(stderr, "tandem-bench: rank %d: cannot silence stdout\n", group.rank);
        return rank_group_finish(&group, 1, 1000, err, sizeof err);
    }
    bench_ctx c = {0};
    char device[sizeof a.device];
    int rc = TN_OK;
    if (rank_device(&a, group.local_rank, group.size, device, sizeof device) != 0)
        rc = tn_fail(err, sizeof err, TN_ERR_ARG, "bad --rank-devices '%s'", a.rank_devices);
    if (rc == TN_OK)
        rc = tm_device_open(device, &c.be, err, sizeof err);
    if (rc == TN_OK && rank_group_layout(&group, &c.be, err, sizeof err) != TN_OK)
        rc = TN_ERR_ARG;
    if (rc == TN_OK) {
        tm_load_opts opts = {.weights = a.weights, .seed = a.seed, .par = &group.groups.par};
        double t0 = now_s();
        rc = a.synthetic[0] ? tm_model_synthetic(a.synthetic, &c.be, &opts, &c.model, err, sizeof err)
                         : tm_model_load_opts(a.model, &c.be, &opts, &c.model, err, sizeof err);
        if (rc == TN_OK)
            fprintf(stderr, "tandem-bench: %s weights ready in %.2f s (%.2f GB)\n",
                    a.synthetic[0] ? "synthetic" : "checkpoint", now_s() - t0,
                    tm_model_weight_bytes(c.model) / 1e9);
    }
    if (rc != TN_OK) {
        fprintf(stderr, "tandem-bench: rank %d: %s\n", group.rank, err);
        tm_model_free(c.model);
        rank_group_finish(&group, 1, 30000, err, sizeof err);
        kn_backend_free(&c.be);
        return 1;
    }
    c.cfg = tm_model_config(c.model);
    c.ctl = group.world;
    c.kv_dtype = tm_kv_dtype_resolve(a.kv_dtype, c.be.kind);
    tm_model_set_cuda_graphs(c.model, a.graphs);
    if (a.profile)
        rc = kn_stopwatch_create(&c.be, TM_PROF_N_GROUPS, 8 * c.cfg->n_layers + 8, &c.sw);

    printf("# tandem-bench %s%s (%s), device %s, weights: attention q/k/v/o %s, experts %s, "
           "LM head %s; KV cache %s; %s attention kernel, CUDA graphs %s, median of %d after 1 "
           "warm-up\n",
           a.synthetic[0] ? "synthetic " : "", a.synthetic[0] ? a.synthetic : a.model,
           c.cfg->model_type, a.device, kn_dtype_name(tm_model_attn_dtype(c.model)),
           kn_dtype_name(tm_model_expert_dtype(c.model)),
           kn_dtype_name(tm_model_weight_dtype(c.model)), kn_dtype_name(c.kv_dtype),
           kn_backend_attn_bf16(&c.be) ? "bf16" : "f32",
           a.graphs == TM_CUDA_GRAPHS_ON && c.be.kind == KN_BACKEND_CUDA ? "on" : "off", a.repeat);
    if (a.synthetic[0])
        printf("# random weights (seed %llu): real shapes, throughput does not depend on "
               "values; routing is near uniform\n", a.seed);
    if (group.size > 1)
        printf("# layout TP=%d EP=%d DP=%d: %d ranks (devices %s), rank communicator %s; "
               "rank 0's times%s\n", a.tp, a.ep, a.dp, group.size,
               c.be.kind != KN_BACKEND_CUDA ? "cpu"
               : a.rank_devices[0] ? a.rank_devices : "--device's N + rank",
               rank_comm_name(group.comm_kind),
               a.dp > 1 ? ", decode tokens/s per rank" : "");
    if (a.n_batches)
        printf("# decode context: %s\n", a.fill == FILL_RANDOM
                   ? "cache filled with random values (no prefill)" : "prefilled by the model");
    if (a.peak_tflops > 0 || a.hbm_tbps > 0)
        printf("# floors: prefill FLOPs / %.1f TFLOP/s, decode bytes / %.2f TB/s\n",
               a.peak_tflops, a.hbm_tbps);
    printf("%-8s %-30s %12s %14s %10s %8s\n", "phase", "shape", "ms", "tokens/s", "floor ms",
           "x floor");
    for (int i = 0; rc == TN_OK && i < a.n_prefill; i++)
        rc = bench_prefill(&c, &a, a.prefill_lens[i]);
    for (int i = 0; rc == TN_OK && i < a.n_batches; i++)
        rc = bench_decode(&c, &a, a.batches[i], a.fill);
    if (rc != TN_OK)
        fprintf(stderr, "tandem-bench: rank %d: %s\n", group.rank, tn_status_str(rc));
    fflush(stdout);
    kn_stopwatch_free(c.sw);
    tm_model_free(c.model);
    /* the communicators before the backend: a staged communicator's buffers
     * are the backend's pinned memory (freeing them after the CUDA backend
     * is gone crashed every multi-rank run on the GPU at exit) */
    int st = rank_group_finish(&group, rc == TN_OK ? 0 : 1, 60000, err, sizeof err);
    kn_backend_free(&c.be);
    if (st != 0 && err[0])
        fprintf(stderr, "tandem-bench: %s\n", err);
    return st != 0 ? 1 : 0;
}
