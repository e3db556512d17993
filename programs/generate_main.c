/* tandem-generate: single-process generation from a model directory.
 * Prefills the prompt into a paged KV cache, then decodes one token per
 * step through the same cache, exactly as a decoder does for one request. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "engine/device.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/sampling.h"
#include "common/status.h"

#define EXIT_RUNTIME 1
#define EXIT_USAGE 2
#define MAX_TOKENS_LIMIT (1 << 24)

typedef struct gen_args {
    const char *model;
    int32_t *prompt;
    int n_prompt;
    int max_tokens;
    kn_sampling sampling;
    uint64_t seed;
    int page_size;
    int ignore_eos;
    const char *device;
    tm_weight_dtype weights;
} gen_args;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: tandem-generate --model DIR --prompt-ids IDS --max-tokens N [options]\n"
        "\n"
        "Generates tokens from a HuggingFace model directory (config.json and\n"
        "bf16/f32 safetensors; gpt_oss or qwen3_moe) and prints their ids.\n"
        "\n"
        "  --model DIR         model directory\n"
        "  --prompt-ids IDS    prompt token ids, comma-separated, e.g. \"1,2,3\"\n"
        "  --max-tokens N      number of tokens to generate (1..%d)\n"
        "  --temperature T     sampling temperature, 0 = greedy (default 0)\n"
        "  --top-p P           nucleus probability mass in (0, 1] (default 1)\n"
        "  --top-k K           keep the K most likely tokens, 0 = all (default 0)\n"
        "  --seed S            sampling seed (default 0)\n"
        "  --page-size N       KV cache page size in tokens (default 16)\n"
        "  --ignore-eos        do not stop at the model's end-of-sequence tokens\n"
        "  --device D          cpu (default), cuda or cuda:N (needs a `make CUDA=1` build)\n"
        "  --weights W         storage of the large weight matrices: auto (default:\n"
        "                      f32 on cpu, bf16 on cuda; a checkpoint's MXFP4/FP8\n"
        "                      matrices stay FP8 on cuda), f32, bf16, or fp8 (attention\n"
        "                      and experts FP8 e4m3 with 128x128 block scales)\n"
        "  --help              show this help\n"
        "\n"
        "Output: the generated ids on stdout as one comma-separated line; timings\n"
        "and tokens/s on stderr. Exit status: 0 success, 1 runtime error (e.g. a\n"
        "model that cannot be loaded), 2 bad arguments.\n",
        MAX_TOKENS_LIMIT);
}

static int bad_arg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad_arg(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tandem-generate: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n(see tandem-generate --help)\n");
    va_end(ap);
    return EXIT_USAGE;
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

static int parse_float(const char *s, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || v != v)
        return 0;
    *out = (float)v;
    return 1;
}

/* "1,2,3" -> ids; no empty items, no signs, each a non-negative int. */
static int parse_ids(const char *s, int32_t **out, int *n)
{
    int cap = 1;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    int32_t *ids = malloc(sizeof(*ids) * (size_t)cap);
    if (!ids)
        return 0;
    int k = 0;
    const char *p = s;
    for (;;) {
        char *end;
        if (*p < '0' || *p > '9')
            break;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || v > INT32_MAX)
            break;
        ids[k++] = (int32_t)v;
        if (*end == '\0') {
            *out = ids;
            *n = k;
            return 1;
        }
        if (*end != ',')
            break;
        p = end + 1;
    }
    free(ids);
    return 0;
}

/* Returns 0 to run, or the exit status (EXIT_SUCCESS after --help). */
static int parse_args(int argc, char **argv, gen_args *a)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},
        {"prompt-ids", required_argument, NULL, 'p'},
        {"max-tokens", required_argument, NULL, 'n'},
        {"temperature", required_argument, NULL, 't'},
        {"top-p", required_argument, NULL, 'P'},
        {"top-k", required_argument, NULL, 'k'},
        {"seed", required_argument, NULL, 's'},
        {"page-size", required_argument, NULL, 'g'},
        {"ignore-eos", no_argument, NULL, 'e'},
        {"device", required_argument, NULL, 'd'},
        {"weights", required_argument, NULL, 'w'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    memset(a, 0, sizeof(*a));
    a->sampling = (kn_sampling){.temperature = 0.0f, .top_p = 1.0f, .top_k = 0};
    a->page_size = 16;
    a->max_tokens = -1;
    a->device = "cpu";
    const char *prompt = NULL;
    opterr = 0;
    int c;
    long v;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case 'm': a->model = optarg; break;
        case 'p': prompt = optarg; break;
        case 'n':
            if (!parse_long(optarg, 1, MAX_TOKENS_LIMIT, &v))
                return bad_arg("--max-tokens must be an integer from 1 to %d, got '%s'",
                               MAX_TOKENS_LIMIT, optarg);
            a->max_tokens = (int)v;
            break;
        case 't':
            if (!parse_float(optarg, &a->sampling.temperature) ||
                a->sampling.temperature < 0)
                return bad_arg("--temperature must be a number >= 0, got '%s'", optarg);
            break;
        case 'P':
            if (!parse_float(optarg, &a->sampling.top_p) || !(a->sampling.top_p > 0) ||
                a->sampling.top_p > 1)
                return bad_arg("--top-p must be in (0, 1], got '%s'", optarg);
            break;
        case 'k':
            if (!parse_long(optarg, 0, INT32_MAX, &v))
                return bad_arg("--top-k must be an integer >= 0, got '%s'", optarg);
            a->sampling.top_k = (int)v;
            break;
        case 's': {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(optarg, &end, 10);
            if (errno || end == optarg || *end != '\0' || optarg[0] == '-')
                return bad_arg("--seed must be a non-negative integer, got '%s'", optarg);
            a->seed = s;
            break;
        }
        case 'g':
            if (!parse_long(optarg, 1, 1 << 20, &v))
                return bad_arg("--page-size must be a positive integer, got '%s'", optarg);
            a->page_size = (int)v;
            break;
        case 'e': a->ignore_eos = 1; break;
        case 'd': {
            kn_backend_kind kind;
            int ordinal;
            if (tm_device_parse(optarg, &kind, &ordinal) != 0)
                return bad_arg("--device must be cpu, cuda or cuda:N, got '%s'", optarg);
            a->device = optarg;
            break;
        }
        case 'w':
            if (tm_weights_parse(optarg, &a->weights) != 0)
                return bad_arg("--weights must be auto, f32, bf16 or fp8, got '%s'", optarg);
            break;
        case 'h': usage(stdout); return -1;
        case ':':
            return bad_arg("option %s needs a value", argv[optind - 1]);
        default:
            return bad_arg("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return bad_arg("unexpected argument '%s'", argv[optind]);
    if (!a->model)
        return bad_arg("--model DIR is required");
    if (!prompt)
        return bad_arg("--prompt-ids is required");
    if (a->max_tokens < 0)
        return bad_arg("--max-tokens is required");
    if (!parse_ids(prompt, &a->prompt, &a->n_prompt))
        return bad_arg("--prompt-ids must be comma-separated non-negative integers, got '%s'",
                       prompt);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int is_eos(const tm_config *c, int32_t tok)
{
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == tok)
            return 1;
    return 0;
}

/* Runs the generation; returns an exit status. */
static int generate(const gen_args *a, const kn_backend *be)
{
    char err[512] = "";
    tm_model *m = NULL;
    tm_load_opts opts = {.weights = a->weights};
    int rc = tm_model_load_opts(a->model, be, &opts, &m, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "tandem-generate: cannot load model: %s\n", err);
        return EXIT_RUNTIME;
    }
    const tm_config *c = tm_model_config(m);
    for (int i = 0; i < a->n_prompt; i++) {
        if (a->prompt[i] >= c->vocab_size) {
            fprintf(stderr, "tandem-generate: prompt id %d is outside the vocabulary "
                    "(size %d)\n", (int)a->prompt[i], c->vocab_size);
            tm_model_free(m);
            return EXIT_USAGE;
        }
    }
    int total = a->n_prompt + a->max_tokens;
    int n_pages = (total + a->page_size - 1) / a->page_size;
    tm_kv_cache kv;
    int32_t *pages = malloc(sizeof(*pages) * (size_t)n_pages);
    int32_t *out = malloc(sizeof(*out) * (size_t)a->max_tokens);
    float *logits = malloc(sizeof(float) * (size_t)c->vocab_size);
    int status = EXIT_RUNTIME;
    rc = tm_kv_cache_init(&kv, be, c->n_layers, c->n_kv_heads, c->head_dim,
                          a->page_size, n_pages);
    if (rc || !pages || !out || !logits) {
        fprintf(stderr, "tandem-generate: cannot allocate the KV cache and buffers "
                "(%d pages of %d tokens): %s\n", n_pages, a->page_size,
                tn_status_str(rc ? rc : TN_ERR_NOMEM));
        goto done;
    }
    if ((rc = tm_kv_alloc_pages(&kv, n_pages, pages)) != TN_OK) {
        fprintf(stderr, "tandem-generate: %s\n", tn_status_str(rc));
        goto done;
    }
    uint64_t rng = kn_rng_seed(a->seed);
    int n_out = 0;
    double t0 = now_s(), t1 = t0;
    tm_seq_step step = {.tokens = a->prompt, .n_tokens = a->n_prompt, .n_cached = 0,
                        .pages = pages, .n_pages = n_pages};
    while (n_out < a->max_tokens) {
        rc = tm_forward(m, &kv, &step, 1, logits, NULL);
        if (!rc)
            rc = kn_sample_cpu(&out[n_out], logits, 1, c->vocab_size, &a->sampling, &rng);
        if (rc) {
            fprintf(stderr, "tandem-generate: forward step %d failed: %s\n", n_out,
                    tn_status_str(rc));
            goto done;
        }
        if (n_out == 0)
            t1 = now_s();
        step.n_cached += step.n_tokens;
        step.tokens = &out[n_out];
        step.n_tokens = 1;
        n_out++;
        if (!a->ignore_eos && is_eos(c, out[n_out - 1]))
            break;
    }
    double t2 = now_s();
    for (int i = 0; i < n_out; i++)
        printf("%s%d", i ? "," : "", (int)out[i]);
    printf("\n");
    fflush(stdout);
    double pre = t1 - t0, dec = t2 - t1;
    fprintf(stderr, "tandem-generate: %s on %s (%s weights), prefill %d tokens in %.3f s "
            "(%.1f tokens/s), decode %d tokens in %.3f s (%.1f tokens/s)\n", c->model_type,
            a->device, kn_dtype_name(tm_model_weight_dtype(m)), a->n_prompt,
            pre, pre > 0 ? a->n_prompt / pre : 0.0, n_out - 1, dec,
            dec > 0 ? (n_out - 1) / dec : 0.0);
    status = EXIT_SUCCESS;
done:
    tm_kv_cache_free(&kv);
    free(pages);
    free(out);
    free(logits);
    tm_model_free(m);
    return status;
}

int main(int argc, char **argv)
{
    gen_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) {
        free(a.prompt);
        return rc < 0 ? EXIT_SUCCESS : rc;
    }
    kn_backend be;
    char err[512] = "";
    if (tm_device_open(a.device, &be, err, sizeof(err)) != TN_OK) {
        fprintf(stderr, "tandem-generate: %s\n", err);
        kn_backend_free(&be);
        free(a.prompt);
        return EXIT_RUNTIME;
    }
    int status = generate(&a, &be);
    kn_backend_free(&be);
    free(a.prompt);
    return status;
}
