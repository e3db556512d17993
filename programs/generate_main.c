/* tandem-generate: single-process generation from a model directory.
 * Prefills the prompt into a paged KV cache, then decodes one token per
 * step through the same cache, exactly as a decoder does for one request. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "engine/device.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/logit_adjust.h"
#include "kernels/sampling.h"
#include "common/options.h"
#include "common/status.h"

#define EXIT_RUNTIME 1
#define EXIT_USAGE 2
#define MAX_TOKENS_LIMIT (1 << 24)
#define PROG "tandem-generate"

typedef struct gen_args {
    char model[OPT_PATH_MAX];
    int32_t *prompt;
    int n_prompt;
    int max_tokens;
    kn_sampling sampling;
    uint64_t seed;
    int page_size;
    int ignore_eos;
    char device[64];
    tm_weight_dtype weights;
    /* Penalties and biases, as a decoder applies them (engine/sampler.h). */
    double presence, frequency, repetition;
    int32_t *bias_tokens;
    float *bias;
    int n_bias;
    int output_in_prompt;   /* the prompt's last N tokens count as output */
    tm_kv_dtype kv_dtype;
    tm_cuda_graphs graphs;
    char logits_out[OPT_PATH_MAX];
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
        "  --presence-penalty P, --frequency-penalty F\n"
        "                      OpenAI's penalties on tokens already in the output (default 0)\n"
        "  --repetition-penalty R\n"
        "                      vLLM's penalty on tokens in the prompt or output, > 0 (default 1)\n"
        "  --logit-bias ID:B,...  add B to token ID's logit (OpenAI's logit_bias)\n"
        "  --output-in-prompt N the prompt's last N tokens are earlier output (what a\n"
        "                      re-placed request's attempt prefills): penalties count them\n"
        "  --device D          cpu (default), cuda or cuda:N (needs a `make CUDA=1` build)\n"
        "  --weights W         storage of the large weight matrices: auto (default:\n"
        "                      f32 on cpu, bf16 on cuda; a checkpoint's MXFP4/FP8\n"
        "                      matrices stay FP8 on cuda), f32, bf16, or fp8 (attention\n"
        "                      and experts FP8 e4m3 with 128x128 block scales)\n"
        "  --kv-dtype T        KV cache element type: auto (default: f32 on cpu,\n"
        "                      bf16 on cuda), f32, bf16 or fp8 (e4m3 with a scale\n"
        "                      per token and KV head)\n"
        "  --cuda-graphs G     on (default) or off: decode steps recorded as CUDA graphs\n"
        "                      and replayed (cuda)\n"
        "  --logits-out PATH   also write the logits that chose each generated token\n"
        "                      (float32 little-endian, one row of vocab_size per token)\n"
        "  --help              show this help\n"
        "\n"
        "Output: the generated ids on stdout as one comma-separated line; timings\n"
        "and tokens/s on stderr. Exit status: 0 success, 1 runtime error (e.g. a\n"
        "model that cannot be loaded), 2 bad arguments.\n",
        MAX_TOKENS_LIMIT);
}

/* --logit-bias ID:BIAS,... (bias in [-100, 100], each id once). */
static int parse_bias(gen_args *a, const char *v, char *err, size_t errlen)
{
    int cap = 1;
    for (const char *p = v; *p; p++)
        cap += *p == ',';
    int32_t *tok = malloc((size_t)cap * sizeof *tok);
    float *bias = malloc((size_t)cap * sizeof *bias);
    int n = 0;
    const char *p = v;
    while (tok && bias && *p) {
        char *end = NULL;
        long id = strtol(p, &end, 10);
        if (end == p || *end != ':' || id < 0 || id > INT32_MAX)
            break;
        p = end + 1;
        double b = strtod(p, &end);
        if (end == p || (*end && *end != ',') || !(b >= -100 && b <= 100))
            break;
        int dup = 0;
        for (int i = 0; i < n; i++)
            dup |= tok[i] == (int32_t)id;
        if (dup)
            break;
        tok[n] = (int32_t)id;
        bias[n++] = (float)b;
        p = *end ? end + 1 : end;
        if (!*p) {
            free(a->bias_tokens);
            free(a->bias);
            a->bias_tokens = tok;
            a->bias = bias;
            a->n_bias = n;
            return 0;
        }
    }
    free(tok);
    free(bias);
    snprintf(err, errlen, "--logit-bias must be ID:BIAS pairs, comma-separated (bias in "
             "[-100, 100], each id once), got '%s'", v);
    return -1;
}

/* The flags that need more than the table's types: ranges in this
 * program's words, floats, the seed, --device and --weights. */
static int set_flag(void *ctx, const char *name, const char *v, char *err, size_t errlen)
{
    gen_args *a = ctx;
    double d;
    unsigned long long u;
    kn_backend_kind kind;
    int ordinal;
    if (!strcmp(name, "max-tokens")) {
        if (opts_int(v, 1, MAX_TOKENS_LIMIT, &a->max_tokens) == 0)
            return 0;
        snprintf(err, errlen, "--max-tokens must be an integer from 1 to %d, got '%s'",
                 MAX_TOKENS_LIMIT, v);
    } else if (!strcmp(name, "temperature")) {
        if (opts_double(v, &d) == 0 && d >= 0) {
            a->sampling.temperature = (float)d;
            return 0;
        }
        snprintf(err, errlen, "--temperature must be a number >= 0, got '%s'", v);
    } else if (!strcmp(name, "top-p")) {
        if (opts_double(v, &d) == 0 && d > 0 && d <= 1) {
            a->sampling.top_p = (float)d;
            return 0;
        }
        snprintf(err, errlen, "--top-p must be in (0, 1], got '%s'", v);
    } else if (!strcmp(name, "top-k")) {
        if (opts_int(v, 0, INT32_MAX, &a->sampling.top_k) == 0)
            return 0;
        snprintf(err, errlen, "--top-k must be an integer >= 0, got '%s'", v);
    } else if (!strcmp(name, "seed")) {
        if (opts_u64(v, &u) == 0) {
            a->seed = u;
            return 0;
        }
        snprintf(err, errlen, "--seed must be a non-negative integer, got '%s'", v);
    } else if (!strcmp(name, "page-size")) {
        if (opts_int(v, 1, 1 << 20, &a->page_size) == 0)
            return 0;
        snprintf(err, errlen, "--page-size must be a positive integer, got '%s'", v);
    } else if (!strcmp(name, "device")) {
        if (tm_device_parse(v, &kind, &ordinal) == 0 && strlen(v) < sizeof a->device) {
            memcpy(a->device, v, strlen(v) + 1);
            return 0;
        }
        snprintf(err, errlen, "--device must be cpu, cuda or cuda:N, got '%s'", v);
    } else if (!strcmp(name, "prompt-ids")) {
        size_t len = strlen(v);
        int cap = opts_list_len(v, len);
        int32_t *prompt = malloc(sizeof(*prompt) * (size_t)cap);
        int n = 0;
        if (prompt && opts_int_list(v, len, 0, INT32_MAX, prompt, cap, &n) == 0) {
            free(a->prompt);
            a->prompt = prompt;
            a->n_prompt = n;
            return 0;
        }
        free(prompt);
        snprintf(err, errlen, "--prompt-ids must be comma-separated non-negative integers, "
                 "got '%s'", v);
    } else if (!strcmp(name, "presence-penalty") || !strcmp(name, "frequency-penalty") ||
               !strcmp(name, "repetition-penalty")) {
        int rep = name[0] == 'r';
        if (opts_double(v, &d) == 0 && (rep ? d > 0 : d >= -2 && d <= 2)) {
            *(name[0] == 'p' ? &a->presence : name[0] == 'f' ? &a->frequency : &a->repetition) = d;
            return 0;
        }
        snprintf(err, errlen, "--%s must be %s, got '%s'", name, rep ? "a number > 0" :
                 "a number in [-2, 2]", v);
    } else if (!strcmp(name, "output-in-prompt")) {
        if (opts_int(v, 0, INT32_MAX, &a->output_in_prompt) == 0)
            return 0;
        snprintf(err, errlen, "--output-in-prompt must be an integer >= 0, got '%s'", v);
    } else if (!strcmp(name, "logit-bias")) {
        return parse_bias(a, v, err, errlen);
    } else if (!strcmp(name, "weights")) {
        if (tm_weights_parse(v, &a->weights) == 0)
            return 0;
        snprintf(err, errlen, "--weights must be auto, f32, bf16 or fp8, got '%s'", v);
    } else if (!strcmp(name, "kv-dtype")) {
        if (tm_kv_dtype_parse(v, &a->kv_dtype, err, errlen) == 0)
            return 0;
    } else if (!strcmp(name, "cuda-graphs")) {
        if (tm_cuda_graphs_parse(v, &a->graphs) == 0)
            return 0;
        snprintf(err, errlen, "--cuda-graphs must be on or off, got '%s'", v);
    } else {
        snprintf(err, errlen, "--%s has no setter", name);
    }
    return -1;
}

/* Returns 0 to run, or the exit status (EXIT_SUCCESS after --help). */
static int parse_args(int argc, char **argv, gen_args *a)
{
    memset(a, 0, sizeof(*a));
    a->sampling = (kn_sampling){.temperature = 0.0f, .top_p = 1.0f, .top_k = 0};
    a->page_size = 16;
    a->max_tokens = -1;
    snprintf(a->device, sizeof a->device, "cpu");
    a->repetition = 1;
    a->graphs = TM_CUDA_GRAPHS_ON;
    opt_call call = {set_flag, a};
    const opt_spec specs[] = {
        {"model", OPT_STR, a->model, sizeof a->model, "model directory"},
        {"prompt-ids", OPT_CALL, &call, 0, "prompt token ids, comma-separated"},
        {"max-tokens", OPT_CALL, &call, 0, "number of tokens to generate"},
        {"temperature", OPT_CALL, &call, 0, "sampling temperature, 0 = greedy"},
        {"top-p", OPT_CALL, &call, 0, "nucleus probability mass in (0, 1]"},
        {"top-k", OPT_CALL, &call, 0, "keep the K most likely tokens, 0 = all"},
        {"seed", OPT_CALL, &call, 0, "sampling seed"},
        {"page-size", OPT_CALL, &call, 0, "KV cache page size in tokens"},
        {"ignore-eos", OPT_BOOL, &a->ignore_eos, 0, "do not stop at end-of-sequence tokens"},
        {"device", OPT_CALL, &call, 0, "cpu, cuda or cuda:N"},
        {"weights", OPT_CALL, &call, 0, "auto, f32, bf16 or fp8"},
        {"presence-penalty", OPT_CALL, &call, 0, "OpenAI presence penalty in [-2, 2]"},
        {"frequency-penalty", OPT_CALL, &call, 0, "OpenAI frequency penalty in [-2, 2]"},
        {"repetition-penalty", OPT_CALL, &call, 0, "vLLM repetition penalty, > 0"},
        {"logit-bias", OPT_CALL, &call, 0, "ID:BIAS,... added to the logits"},
        {"output-in-prompt", OPT_CALL, &call, 0, "the prompt's last N tokens are earlier output"},
        {"kv-dtype", OPT_CALL, &call, 0, "auto, f32, bf16 or fp8"},
        {"cuda-graphs", OPT_CALL, &call, 0, "on or off"},
        {"logits-out", OPT_STR, a->logits_out, sizeof a->logits_out, "write the logits here"},
    };
    const opts_cli cli = {specs, (int)(sizeof specs / sizeof *specs), NULL, NULL, "option"};
    char err[512];
    switch (opts_parse_cli(&cli, argc, argv, err, sizeof err)) {
    case OPTS_HELP: usage(stdout); return -1;
    case OPTS_ERROR: return opts_usage_error(PROG, "%s", err);
    }
    if (!a->model[0])
        return opts_usage_error(PROG, "--model DIR is required");
    if (!a->prompt)
        return opts_usage_error(PROG, "--prompt-ids is required");
    if (a->max_tokens < 0)
        return opts_usage_error(PROG, "--max-tokens is required");
    if (a->output_in_prompt > a->n_prompt)
        return opts_usage_error(PROG, "--output-in-prompt %d is longer than the prompt (%d)",
                                a->output_in_prompt, a->n_prompt);
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
    FILE *logits_file = NULL;
    tm_load_opts opts = {.weights = a->weights};
    int rc = tm_model_load_opts(a->model, be, &opts, &m, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "tandem-generate: cannot load model: %s\n", err);
        return EXIT_RUNTIME;
    }
    tm_model_set_cuda_graphs(m, a->graphs);
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
    kn_backend cpu;
    int have_cpu = 0;
    tm_penalties pen;
    memset(&pen, 0, sizeof pen);
    rc = tm_kv_cache_init(&kv, be, tm_kv_dtype_resolve(a->kv_dtype, be->kind), c->n_layers,
                          c->n_kv_heads, c->head_dim, a->page_size, n_pages);
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
    if (a->logits_out[0] && !(logits_file = fopen(a->logits_out, "wb"))) {
        fprintf(stderr, "tandem-generate: cannot create %s\n", a->logits_out);
        goto done;
    }
    /* Penalties are applied to the host logits on a CPU backend: the same
     * kernel the workers run. */
    have_cpu = kn_backend_init_cpu(&cpu) == TN_OK;
    rc = have_cpu ? tm_penalties_init(&pen, (float)a->presence, (float)a->frequency,
                                      (float)a->repetition, a->prompt, a->n_prompt,
                                      a->output_in_prompt, a->bias_tokens, a->bias, a->n_bias,
                                      c->vocab_size)
                  : TN_ERR_NOMEM;
    if (rc != TN_OK) {
        fprintf(stderr, "tandem-generate: bad penalties or --logit-bias (ids inside the "
                "vocabulary of %d): %s\n", c->vocab_size, tn_status_str(rc));
        status = EXIT_USAGE;
        goto done;
    }
    uint64_t rng = kn_rng_seed(a->seed);
    int n_out = 0;
    double t0 = now_s(), t1 = t0;
    tm_seq_step step = {.tokens = a->prompt, .n_tokens = a->n_prompt, .n_cached = 0,
                        .pages = pages, .n_pages = n_pages};
    while (n_out < a->max_tokens) {
        rc = tm_forward(m, &kv, &step, 1, logits, NULL);
        if (!rc && logits_file &&
            fwrite(logits, sizeof(float), (size_t)c->vocab_size, logits_file) !=
                (size_t)c->vocab_size) {
            fprintf(stderr, "tandem-generate: writing %s failed\n", a->logits_out);
            goto done;
        }
        if (!rc && pen.active) {
            const int32_t row_start[2] = {0, pen.n_entries};
            rc = kn_logit_adjust_apply(&cpu, logits, 1, c->vocab_size, &pen.params, row_start,
                                       pen.entries);
        }
        if (!rc)
            rc = kn_sample_cpu(&out[n_out], logits, 1, c->vocab_size, &a->sampling, &rng);
        if (!rc)
            rc = tm_penalties_add_output(&pen, out[n_out]);
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
    fprintf(stderr, "tandem-generate: %s on %s (%s weights), %s KV cache, prefill %d tokens in "
            "%.3f s (%.1f tokens/s), decode %d tokens in %.3f s (%.1f tokens/s)\n", c->model_type,
            a->device, kn_dtype_name(tm_model_weight_dtype(m)), kn_dtype_name(kv.dtype), a->n_prompt,
            pre, pre > 0 ? a->n_prompt / pre : 0.0, n_out - 1, dec,
            dec > 0 ? (n_out - 1) / dec : 0.0);
    status = EXIT_SUCCESS;
    if (logits_file) {
        int bad = fclose(logits_file) != 0;
        logits_file = NULL;
        if (bad) {
            fprintf(stderr, "tandem-generate: writing %s failed\n", a->logits_out);
            status = EXIT_RUNTIME;
        }
    }
done:
    if (logits_file)
        fclose(logits_file);
    tm_penalties_free(&pen);
    if (have_cpu)
        kn_backend_free(&cpu);
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
        free(a.bias_tokens);
        free(a.bias);
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
    free(a.bias_tokens);
    free(a.bias);
    return status;
}
