/* tandem-parallel-generate: greedy generation with a parallel layout, the
 * smallest program that runs the engine's TP+EP (prefill) and DP+EP (decode)
 * paths across real processes. It shows both ways of starting ranks
 * (engine/comm_launch.h): one process forking the group (`--tp 2`), or an
 * orchestrator starting every rank with --rank/--world/--comm-name. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "engine/comm.h"
#include "engine/comm_launch.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/parallel.h"
#include "kernels/backend.h"
#include "common/options.h"
#include "common/status.h"

#define EXIT_RUNTIME 1
#define EXIT_USAGE 2
#define MAX_PROMPTS 64
#define MAX_TOKENS_LIMIT (1 << 20)
#define PROG "tandem-parallel-generate"

typedef struct pgen_args {
    char model[4096];
    int32_t *ids[MAX_PROMPTS];
    int n_ids[MAX_PROMPTS];
    int n_prompts;
    int max_tokens;
    int tp, ep, dp;
    int have_tp, have_dp;  /* given on the command line */
    int page_size;
    int ignore_eos;
    int timeout_ms;
    comm_launch L;
    int orchestrated;      /* ranks given by --rank/--world/--comm-name */
} pgen_args;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: " PROG " --model DIR --prompt-ids IDS[;IDS...] --max-tokens N\n"
        "                  (--tp T [--ep E] | --dp D [--ep E]) [options]\n"
        "\n"
        "Greedy generation on the CPU with the model split across T (or D) ranks.\n"
        "\n"
        "  --tp T              prefill layout: attention heads split over T ranks (all\n"
        "                      ranks run the one prompt), experts over E of them\n"
        "  --dp D              decode layout: D ranks each with their own prompts\n"
        "                      (prompt i runs on rank i mod D), experts over E ranks\n"
        "                      exchanged by all-to-all; ranks without work still join\n"
        "  --ep E              expert-parallel group size (default 1; divides T or D)\n"
        "  --model DIR         model directory (gpt_oss or qwen3_moe)\n"
        "  --prompt-ids IDS    prompts as comma-separated ids, several separated by ';'\n"
        "  --max-tokens N      tokens to generate per prompt (1..%d)\n"
        "  --page-size N       KV cache page size in tokens (default 16)\n"
        "  --ignore-eos        do not stop at end-of-sequence tokens\n"
        "  --timeout-ms MS     longest wait for a peer rank (default %d)\n"
        "  --rank R --world W --comm-name NAME\n"
        "                      this process is rank R of W started by an orchestrator,\n"
        "                      meeting the others on NAME; without them the process\n"
        "                      forks the other ranks itself\n"
        "  --help              show this help\n"
        "\n"
        "Output (rank 0): one line of generated ids per prompt. Exit status: 0\n"
        "success, 1 runtime error (a rank that dies fails the whole group: every\n"
        "rank exits 1 naming it), 2 bad arguments.\n",
        MAX_TOKENS_LIMIT, COMM_DEFAULT_TIMEOUT_MS);
}

/* "1,2;3,4,5" -> prompts. */
static int parse_prompts(const char *s, pgen_args *a)
{
    const char *p = s;
    while (*p) {
        if (a->n_prompts == MAX_PROMPTS)
            return 0;
        size_t len = strcspn(p, ";");
        int cap = opts_list_len(p, len);
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
        if (!ids)
            return 0;
        if (opts_int_list(p, len, 0, INT32_MAX, ids, cap, &a->n_ids[a->n_prompts]) != 0) {
            free(ids);
            return 0;
        }
        a->ids[a->n_prompts++] = ids;
        p += len;
        if (*p == ';' && *++p == '\0')
            return 0;
    }
    return a->n_prompts > 0;
}

static void free_args(pgen_args *a)
{
    for (int i = 0; i < a->n_prompts; i++)
        free(a->ids[i]);
}

/* The flags with a range, in this program's words. */
static int set_flag(void *ctx, const char *name, const char *v, char *err, size_t errlen)
{
    pgen_args *a = ctx;
    if (!strcmp(name, "max-tokens")) {
        if (opts_int(v, 1, MAX_TOKENS_LIMIT, &a->max_tokens) == 0)
            return 0;
        snprintf(err, errlen, "--max-tokens must be 1..%d, got '%s'", MAX_TOKENS_LIMIT, v);
    } else if (!strcmp(name, "tp") || !strcmp(name, "ep") || !strcmp(name, "dp")) {
        int *dst = name[0] == 't' ? &a->tp : name[0] == 'e' ? &a->ep : &a->dp;
        if (opts_int(v, 1, COMM_MAX_WORLD, dst) == 0) {
            a->have_tp |= name[0] == 't';
            a->have_dp |= name[0] == 'd';
            return 0;
        }
        snprintf(err, errlen, "--%s must be 1..%d, got '%s'", name, COMM_MAX_WORLD, v);
    } else if (!strcmp(name, "prompt-ids")) {
        free_args(a);
        a->n_prompts = 0;
        if (parse_prompts(v, a))
            return 0;
        snprintf(err, errlen, "--prompt-ids must be up to %d ';'-separated lists of "
                 "comma-separated non-negative integers, got '%s'", MAX_PROMPTS, v);
    } else if (!strcmp(name, "page-size")) {
        if (opts_int(v, 1, 1 << 20, &a->page_size) == 0)
            return 0;
        snprintf(err, errlen, "--page-size must be a positive integer, got '%s'", v);
    } else if (!strcmp(name, "timeout-ms")) {
        if (opts_int(v, 1, 24 * 3600 * 1000, &a->timeout_ms) == 0)
            return 0;
        snprintf(err, errlen, "--timeout-ms must be a positive integer, got '%s'", v);
    } else if (!strcmp(name, "rank") || !strcmp(name, "world") || !strcmp(name, "comm-name")) {
        return 0;   /* read by comm_launch_parse_args */
    } else {
        snprintf(err, errlen, "--%s has no setter", name);
    }
    return -1;
}

/* Returns 0 to run, -1 after --help, or an exit status. */
static int parse_args(int argc, char **argv, pgen_args *a)
{
    memset(a, 0, sizeof(*a));
    a->tp = a->dp = a->ep = 1;
    a->page_size = 16;
    a->max_tokens = -1;
    a->timeout_ms = COMM_DEFAULT_TIMEOUT_MS;
    opt_call call = {set_flag, a};
    const opt_spec specs[] = {
        {"model", OPT_STR, a->model, sizeof a->model, "model directory"},
        {"prompt-ids", OPT_CALL, &call, 0, "prompts, ';'-separated id lists"},
        {"max-tokens", OPT_CALL, &call, 0, "tokens to generate per prompt"},
        {"tp", OPT_CALL, &call, 0, "prefill layout: ranks splitting the heads"},
        {"ep", OPT_CALL, &call, 0, "expert-parallel group size"},
        {"dp", OPT_CALL, &call, 0, "decode layout: ranks with their own prompts"},
        {"page-size", OPT_CALL, &call, 0, "KV cache page size in tokens"},
        {"ignore-eos", OPT_BOOL, &a->ignore_eos, 0, "do not stop at end-of-sequence tokens"},
        {"timeout-ms", OPT_CALL, &call, 0, "longest wait for a peer rank"},
        {"rank", OPT_CALL, &call, 0, "this process's rank (with --world, --comm-name)"},
        {"world", OPT_CALL, &call, 0, "ranks started by the orchestrator"},
        {"comm-name", OPT_CALL, &call, 0, "where the ranks meet"},
    };
    const opts_cli cli = {specs, (int)(sizeof specs / sizeof *specs), NULL, NULL, "option"};
    char err[512];
    switch (opts_parse_cli(&cli, argc, argv, err, sizeof err)) {
    case OPTS_HELP: usage(stdout); return -1;
    case OPTS_ERROR: return opts_usage_error(PROG, "%s", err);
    }
    if (!a->model[0] || !a->n_prompts || a->max_tokens < 0)
        return opts_usage_error(PROG, "--model, --prompt-ids and --max-tokens are required");
    if (a->have_tp && a->have_dp && a->tp > 1 && a->dp > 1)
        return opts_usage_error(PROG, "--tp and --dp cannot both exceed 1 (prefill is TP+EP, "
                                "decode DP+EP)");
    if (a->tp > 1 && a->n_prompts != 1)
        return opts_usage_error(PROG, "the TP layout runs one prompt (all ranks share it); "
                                "got %d", a->n_prompts);
    int got = comm_launch_parse_args(&a->L, argc, argv, err, sizeof(err));
    if (got < 0)
        return opts_usage_error(PROG, "%s", err);
    a->orchestrated = got == 1;
    if (a->orchestrated && a->L.world != a->tp * a->dp)
        return opts_usage_error(PROG, "--world %d does not match the layout (tp %d x dp %d = "
                                "%d ranks)", a->L.world, a->tp, a->dp, a->tp * a->dp);
    return 0;
}

/* Per rank: the prompts it runs and their state. */
typedef struct run_seq {
    int prompt;              /* index into the arguments */
    int32_t *tokens;         /* prompt then generated */
    int n_prompt, len, n_cached, n_out, done;
    int32_t *pages;
    int n_pages;
} run_seq;

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static int is_eos(const tm_config *c, int32_t tok)
{
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == tok)
            return 1;
    return 0;
}

/* The generation of one rank. Returns an exit status; on success rank 0 has
 * printed every prompt's tokens. */
static int run_rank(const pgen_args *a, comm *world, const kn_backend *be)
{
    const int rank = comm_rank(world);
    char err[512] = "";
    tm_groups groups;
    tm_model *m = NULL;
    tm_kv_cache kv;
    memset(&kv, 0, sizeof(kv));
    run_seq seqs[MAX_PROMPTS];
    int n_seqs = 0, status = EXIT_RUNTIME;
    float *logits = NULL, *table = NULL;
    tm_seq_step steps[MAX_PROMPTS];
    int rc = tm_groups_init(&groups, world, a->tp, a->ep, a->dp, err, sizeof(err));
    if (rc) {
        fprintf(stderr, PROG ": rank %d: %s\n", rank, err);
        return EXIT_RUNTIME;
    }
    rc = tm_model_load_parallel(a->model, be, &groups.par, &m, err, sizeof(err));
    if (rc) {
        fprintf(stderr, PROG ": rank %d: cannot load model: %s\n", rank, err);
        goto done;
    }
    const tm_config *c = tm_model_config(m);
    const int V = c->vocab_size, dp_rank = a->dp > 1 ? rank : 0;
    int pages_total = 0;
    for (int i = 0; i < a->n_prompts; i++) {
        for (int t = 0; t < a->n_ids[i]; t++)
            if (a->ids[i][t] >= V) {
                fprintf(stderr, PROG ": prompt id %d is outside the vocabulary (size %d)\n",
                        (int)a->ids[i][t], V);
                goto done;
            }
        if (a->dp > 1 && i % a->dp != dp_rank)
            continue;
        run_seq *s = &seqs[n_seqs++];
        memset(s, 0, sizeof(*s));
        s->prompt = i;
        s->n_prompt = s->len = a->n_ids[i];
        s->n_pages = (a->n_ids[i] + a->max_tokens + a->page_size - 1) / a->page_size;
        pages_total += s->n_pages;
        s->tokens = malloc(sizeof(int32_t) * (size_t)(s->n_prompt + a->max_tokens));
        s->pages = malloc(sizeof(int32_t) * (size_t)s->n_pages);
        if (!s->tokens || !s->pages)
            goto nomem;
        memcpy(s->tokens, a->ids[i], sizeof(int32_t) * (size_t)s->n_prompt);
    }
    rc = tm_kv_cache_init(&kv, be, KN_F32, c->n_layers, tm_model_kv_heads(m), c->head_dim,
                          a->page_size, pages_total > 0 ? pages_total : 1);
    for (int i = 0; !rc && i < n_seqs; i++)
        rc = tm_kv_alloc_pages(&kv, seqs[i].n_pages, seqs[i].pages);
    /* [prompt][1 + max_tokens]: count then ids, summed over the ranks */
    const size_t row = 1 + (size_t)a->max_tokens;
    logits = malloc(sizeof(float) * (size_t)V * (n_seqs > 0 ? (size_t)n_seqs : 1));
    table = calloc((size_t)a->n_prompts * row, sizeof(float));
    if (rc || !logits || !table)
        goto nomem;
    fprintf(stderr, PROG ": rank %d of %d (pid %ld): generating, %d prompt(s) here\n", rank,
            comm_size(world), (long)getpid(), n_seqs);

    for (int step = 0;; step++) {
        int n = 0;
        for (int i = 0; i < n_seqs; i++) {
            run_seq *s = &seqs[i];
            if (s->done)
                continue;
            steps[n++] = (tm_seq_step){.tokens = s->tokens + s->n_cached,
                                       .n_tokens = s->len - s->n_cached,
                                       .n_cached = s->n_cached, .pages = s->pages,
                                       .n_pages = s->n_pages};
        }
        /* every rank steps until no rank has work */
        float active = (float)n;
        if ((rc = comm_all_reduce_sum(world, &active, 1)) != TN_OK)
            goto peer;
        if (active == 0)
            break;
        rc = n ? tm_forward(m, &kv, steps, n, logits, NULL)
               : tm_forward(m, NULL, NULL, 0, NULL, NULL);
        if (rc == TN_ERR_PEER)
            goto peer;
        if (rc) {
            fprintf(stderr, PROG ": rank %d: step %d failed: %s\n", rank, step,
                    tn_status_str(rc));
            goto done;
        }
        int j = 0;
        for (int i = 0; i < n_seqs; i++) {
            run_seq *s = &seqs[i];
            if (s->done)
                continue;
            int32_t tok = argmax(logits + (size_t)(j++) * V, V);
            s->n_cached = s->len;
            s->tokens[s->len++] = tok;
            s->n_out++;
            if (s->n_out == a->max_tokens || (!a->ignore_eos && is_eos(c, tok)))
                s->done = 1;
        }
    }
    /* results to rank 0: each prompt from exactly one rank (TP: rank 0) */
    for (int i = 0; i < n_seqs; i++) {
        const run_seq *s = &seqs[i];
        if (a->tp > 1 && rank != 0)
            break;
        float *r = table + (size_t)s->prompt * row;
        r[0] = (float)s->n_out;
        for (int t = 0; t < s->n_out; t++)
            r[1 + t] = (float)s->tokens[s->n_prompt + t];
    }
    if ((rc = comm_all_reduce_sum(world, table, (size_t)a->n_prompts * row)) != TN_OK)
        goto peer;
    if (rank == 0) {
        for (int i = 0; i < a->n_prompts; i++) {
            const float *r = table + (size_t)i * row;
            for (int t = 0; t < (int)r[0]; t++)
                printf("%s%d", t ? "," : "", (int)r[1 + t]);
            printf("\n");
        }
        fflush(stdout);
    }
    status = EXIT_SUCCESS;
    goto done;
peer:
    fprintf(stderr, PROG ": rank %d: the group failed: %s\n", rank, comm_error(world));
    goto done;
nomem:
    fprintf(stderr, PROG ": rank %d: cannot allocate the KV cache and buffers: %s\n", rank,
            tn_status_str(rc ? rc : TN_ERR_NOMEM));
done:
    for (int i = 0; i < n_seqs; i++) {
        free(seqs[i].tokens);
        free(seqs[i].pages);
    }
    free(logits);
    free(table);
    tm_kv_cache_free(&kv);
    tm_model_free(m);
    tm_groups_free(&groups);
    return status;
}

int main(int argc, char **argv)
{
    pgen_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) {
        free_args(&a);
        return rc < 0 ? EXIT_SUCCESS : rc;
    }
    char err[512] = "";
    int world_size = a.tp * a.dp;
    if (!a.orchestrated) {
        /* fork before anything starts threads (OpenMP, BLAS) */
        if (comm_launch_fork(&a.L, world_size, "pgen", err, sizeof(err))) {
            fprintf(stderr, PROG ": %s\n", err);
            free_args(&a);
            return EXIT_RUNTIME;
        }
    }
    comm_options o = {.timeout_ms = a.timeout_ms};
    comm *world = NULL;
    kn_backend be;
    int status = EXIT_RUNTIME;
    if (kn_backend_init_cpu(&be) != TN_OK) {
        fprintf(stderr, PROG ": rank %d: cannot initialise the CPU backend\n", a.L.rank);
    } else {
        if (comm_host_init(&world, a.L.name, a.L.rank, a.L.world, &o, err, sizeof(err)))
            fprintf(stderr, PROG ": rank %d: %s\n", a.L.rank, err);
        else
            status = run_rank(&a, world, &be);
        comm_free(world);
        kn_backend_free(&be);
    }
    if (!a.orchestrated && a.L.rank == 0) {
        /* the children end on their own (they fail at once when we did) */
        if (comm_launch_wait(&a.L, a.timeout_ms + 10000, err, sizeof(err)) != 0) {
            fprintf(stderr, PROG ": %s\n", err);
            status = EXIT_RUNTIME;
        }
    }
    free_args(&a);
    return status;
}
