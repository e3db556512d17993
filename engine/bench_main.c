/* tandem-bench: measures the engine's prefill and decode throughput on a
 * model directory, the way the prefiller and decoder drive it (one prefill
 * per request; decode steps over a batch of sequences sharing a paged KV
 * cache). Prints a table; every figure is the median of --repeat runs.
 * It measures, it does not check: correctness lives in `make test`. */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "kernels/backend.h"
#include "kernels/status.h"

#define MAX_LIST 16

typedef struct bench_args {
    const char *model;
    int prefill_lens[MAX_LIST], n_prefill;
    int batches[MAX_LIST], n_batches;
    int context;      /* tokens in each sequence's cache before decode steps */
    int steps;        /* decode steps timed per run */
    int repeat;
    int page_size;
} bench_args;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: tandem-bench --model DIR [options]\n"
        "\n"
        "Times prefill (tokens/s) and decode (tokens/s over a batch) on the CPU\n"
        "backend and prints a table; each figure is the median of the repeats.\n"
        "\n"
        "  --model DIR        model directory (config.json + safetensors)\n"
        "  --prefill LIST     prompt lengths, comma-separated (default 128,512)\n"
        "  --batch LIST       decode batch sizes (default 1,8,32)\n"
        "  --context N        cached tokens per sequence before decoding (default 128)\n"
        "  --steps N          decode steps per run (default 32)\n"
        "  --repeat N         runs per figure, median reported (default 5)\n"
        "  --page-size N      KV page size in tokens (default 16)\n"
        "  --help             show this help\n");
}

static int parse_list(const char *s, int *out, int *n)
{
    *n = 0;
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || v < 1 || v > (1 << 20) || *n == MAX_LIST)
            return 0;
        out[(*n)++] = (int)v;
        if (*end == '\0')
            return 1;
        if (*end != ',')
            return 0;
        s = end + 1;
    }
    return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return 0;
    *out = (int)v;
    return 1;
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
    tm_kv_cache kv;
    int kv_ready;
} bench_ctx;

static int time_prefill(bench_ctx *c, const bench_args *a, int len, double *tps)
{
    int n_pages = tm_kv_pages_for(&c->kv, len);
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)len);
    int32_t *pages = malloc(sizeof(int32_t) * (size_t)n_pages);
    float *logits = malloc(sizeof(float) * (size_t)c->cfg->vocab_size);
    double runs[64];
    int rc = (!tokens || !pages || !logits) ? KN_ERR_NOMEM : KN_OK;
    for (int r = 0; rc == KN_OK && r < a->repeat; r++) {
        fill_tokens(tokens, len, c->cfg->vocab_size, 7u + (uint32_t)r);
        rc = tm_kv_alloc_pages(&c->kv, n_pages, pages);
        if (rc != KN_OK)
            break;
        tm_seq_step s = { tokens, len, 0, pages, n_pages };
        double t0 = now_s();
        rc = tm_forward(c->model, &c->kv, &s, 1, logits, NULL);
        runs[r] = now_s() - t0;
        tm_kv_release_pages(&c->kv, pages, n_pages);
    }
    if (rc == KN_OK)
        *tps = len / median(runs, a->repeat);
    free(tokens);
    free(pages);
    free(logits);
    return rc;
}

static int time_decode(bench_ctx *c, const bench_args *a, int batch, double *tps)
{
    int total = a->context + a->steps;
    int per_seq = tm_kv_pages_for(&c->kv, total);
    int32_t *pages = malloc(sizeof(int32_t) * (size_t)per_seq * batch);
    int32_t *ctx_tokens = malloc(sizeof(int32_t) * (size_t)a->context);
    int32_t *step_tokens = malloc(sizeof(int32_t) * (size_t)batch);
    tm_seq_step *seqs = calloc((size_t)batch, sizeof *seqs);
    float *logits = malloc(sizeof(float) * (size_t)batch * c->cfg->vocab_size);
    double runs[64];
    int rc = (!pages || !ctx_tokens || !step_tokens || !seqs || !logits) ? KN_ERR_NOMEM : KN_OK;
    for (int r = 0; rc == KN_OK && r < a->repeat; r++) {
        rc = tm_kv_alloc_pages(&c->kv, per_seq * batch, pages);
        if (rc != KN_OK)
            break;
        /* Fill every sequence's context first (untimed). */
        for (int b = 0; rc == KN_OK && b < batch; b++) {
            fill_tokens(ctx_tokens, a->context, c->cfg->vocab_size, 100u + (uint32_t)b);
            tm_seq_step s = { ctx_tokens, a->context, 0, pages + (size_t)b * per_seq, per_seq };
            rc = tm_forward(c->model, &c->kv, &s, 1, NULL, NULL);
        }
        double t0 = now_s();
        for (int step = 0; rc == KN_OK && step < a->steps; step++) {
            fill_tokens(step_tokens, batch, c->cfg->vocab_size, 1000u + (uint32_t)step);
            for (int b = 0; b < batch; b++)
                seqs[b] = (tm_seq_step){ step_tokens + b, 1, a->context + step,
                                         pages + (size_t)b * per_seq, per_seq };
            rc = tm_forward(c->model, &c->kv, seqs, batch, logits, NULL);
        }
        runs[r] = now_s() - t0;
        tm_kv_release_pages(&c->kv, pages, per_seq * batch);
    }
    if (rc == KN_OK)
        *tps = (double)batch * a->steps / median(runs, a->repeat);
    free(pages);
    free(ctx_tokens);
    free(step_tokens);
    free(seqs);
    free(logits);
    return rc;
}

int main(int argc, char **argv)
{
    bench_args a = { .prefill_lens = {128, 512}, .n_prefill = 2,
                     .batches = {1, 8, 32}, .n_batches = 3,
                     .context = 128, .steps = 32, .repeat = 5, .page_size = 16 };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"prefill", required_argument, 0, 'p'},
        {"batch", required_argument, 0, 'b'}, {"context", required_argument, 0, 'c'},
        {"steps", required_argument, 0, 's'}, {"repeat", required_argument, 0, 'r'},
        {"page-size", required_argument, 0, 'g'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int ok = 1;
        switch (o) {
        case 'm': a.model = optarg; break;
        case 'p': ok = parse_list(optarg, a.prefill_lens, &a.n_prefill); break;
        case 'b': ok = parse_list(optarg, a.batches, &a.n_batches); break;
        case 'c': ok = parse_int(optarg, 1, 1 << 20, &a.context); break;
        case 's': ok = parse_int(optarg, 1, 1 << 16, &a.steps); break;
        case 'r': ok = parse_int(optarg, 1, 64, &a.repeat); break;
        case 'g': ok = parse_int(optarg, 1, 4096, &a.page_size); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (!ok) {
            const char *name = "?";
            for (const struct option *op = opts; op->name; op++)
                if (op->val == o)
                    name = op->name;
            fprintf(stderr, "tandem-bench: bad value for --%s: '%s' (see --help)\n", name, optarg);
            return 2;
        }
    }
    if (!a.model || optind != argc) {
        fprintf(stderr, "tandem-bench: --model DIR is required (see --help)\n");
        return 2;
    }

    bench_ctx c = {0};
    char err[512];
    int rc = kn_backend_init_cpu(&c.be);
    if (rc == KN_OK)
        rc = tm_model_load(a.model, &c.be, &c.model, err, sizeof err);
    else
        snprintf(err, sizeof err, "%s", kn_status_str(rc));
    if (rc != KN_OK) {
        fprintf(stderr, "tandem-bench: %s\n", err);
        kn_backend_free(&c.be);
        return 1;
    }
    c.cfg = tm_model_config(c.model);
    int max_batch = 1, max_prefill = 1;
    for (int i = 0; i < a.n_batches; i++)
        max_batch = a.batches[i] > max_batch ? a.batches[i] : max_batch;
    for (int i = 0; i < a.n_prefill; i++)
        max_prefill = a.prefill_lens[i] > max_prefill ? a.prefill_lens[i] : max_prefill;
    int need = (a.context + a.steps + a.page_size - 1) / a.page_size * max_batch;
    int need_prefill = (max_prefill + a.page_size - 1) / a.page_size;
    if (need_prefill > need)
        need = need_prefill;
    rc = tm_kv_cache_init(&c.kv, &c.be, c.cfg->n_layers, c.cfg->n_kv_heads,
                          c.cfg->head_dim, a.page_size, need);
    if (rc == KN_OK)
        c.kv_ready = 1;

    printf("# tandem-bench %s (%s), CPU backend, median of %d\n", a.model,
           c.cfg->model_type, a.repeat);
    printf("%-10s %-28s %14s\n", "phase", "shape", "tokens/s");
    for (int i = 0; rc == KN_OK && i < a.n_prefill; i++) {
        double tps = 0;
        rc = time_prefill(&c, &a, a.prefill_lens[i], &tps);
        if (rc == KN_OK)
            printf("%-10s prompt %-21d %14.0f\n", "prefill", a.prefill_lens[i], tps);
    }
    for (int i = 0; rc == KN_OK && i < a.n_batches; i++) {
        double tps = 0;
        char shape[64];
        rc = time_decode(&c, &a, a.batches[i], &tps);
        snprintf(shape, sizeof shape, "batch %d, context %d", a.batches[i], a.context);
        if (rc == KN_OK)
            printf("%-10s %-28s %14.0f\n", "decode", shape, tps);
    }
    if (rc != KN_OK)
        fprintf(stderr, "tandem-bench: %s\n", kn_status_str(rc));
    if (c.kv_ready)
        tm_kv_cache_free(&c.kv);
    tm_model_free(c.model);
    kn_backend_free(&c.be);
    return rc == KN_OK ? 0 : 1;
}
