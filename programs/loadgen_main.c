/* tandem-loadgen: many concurrent streaming clients against the router's
 * OpenAI API (POST /v1/completions, "stream": true), for the load test.
 *
 * Every request gets a prompt of random token ids and a max_tokens drawn
 * from the configured ranges (ignore_eos, so the exact token count is
 * known), and ends in exactly one outcome:
 *   ok               200, well-formed SSE, exactly max_tokens tokens, one
 *                    finish_reason "length", then [DONE]
 *   http_error       a non-200 answer with an OpenAI error body (explicit)
 *   stream_error     an error event inside the stream, then [DONE] (explicit)
 *   malformed        anything else the server sent: bad framing, an event
 *                    that is not JSON, a wrong token count, no [DONE]
 *   lost             the connection failed or timed out with no explicit end
 * 429 answers are retried after their Retry-After when --retry-429 is set
 * (counted separately). Prints the outcomes, time to first token and
 * inter-token latency percentiles, and a final line
 *   RESULT requests=N ok=N http_error=N stream_error=N malformed=N lost=N retried_429=N
 * Exit status: 0 when nothing was lost or malformed (and, with --require-ok,
 * everything ok), 1 otherwise, 2 for bad arguments.
 *
 * For fault tests: --prompts-file takes the prompts from a file (request i
 * uses line i mod the line count) instead of random ones, and --tokens-out
 * writes every request's outcome and streamed token ids, so a test can
 * compare each stream with tandem-generate's output for its prompt.
 *
 * One thread drives every connection through libcurl's multi interface. */
#include <curl/curl.h>
#include <cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/types.h>
#include "common/options.h"
#include "common/sys.h"
#include "programs/sse_stream.h"

static const char *const INTRO =
    "Runs N concurrent streaming completion clients against a Tandem router and\n"
    "reports every request's outcome (ok, http_error, stream_error, malformed,\n"
    "lost) with time-to-first-token and inter-token latency percentiles.";

typedef enum { OUT_OK, OUT_HTTP_ERROR, OUT_STREAM_ERROR, OUT_MALFORMED, OUT_LOST, OUT_N } outcome;
static const char *const outcome_names[OUT_N] = {"ok", "http_error", "stream_error", "malformed",
                                                 "lost"};

typedef struct lg_config {
    char url[512];
    char model[128];
    char api_key_file[OPT_PATH_MAX];
    int clients, requests;
    int prompt_min, prompt_max, out_min, out_max, vocab;
    int seed;
    int timeout_s;
    int retry_429, max_retries;
    int require_ok;
    int verbose;
    char prompts_file[OPT_PATH_MAX];
    char tokens_out[OPT_PATH_MAX];
} lg_config;

/* Prompts read from --prompts-file: each a comma-separated list of ids. */
typedef struct prompt_list {
    char **lines;
    int n;
} prompt_list;

typedef struct doubles {
    double *v;
    size_t n, cap;
} doubles;

struct lg_ctx;

typedef struct lg_req {
    struct lg_ctx *ctx;
    int idx;
    sse_stream s;           /* the stream of the current attempt */
    char *body;
    double t_start, t_first, t_last;
    int want_tokens, n_tokens;
    int prompt_line;        /* --prompts-file line, -1 for a random prompt */
    int32_t *toks;          /* streamed token ids, for --tokens-out */
    int n_toks, cap_toks;
    int outcome;            /* final outcome_names index, -1 while running */
    int n_finish;           /* chunks with a finish_reason */
    int retries;
    double retry_at;        /* 0: not waiting to retry */
    int active;
} lg_req;

typedef struct lg_ctx {
    lg_config cfg;
    CURLM *multi;
    struct curl_slist *headers;
    lg_req *reqs;
    int next, running, finished;
    int counts[OUT_N];
    int retried_429;
    doubles ttft, itl;
    long tokens;
    uint64_t rng;
    prompt_list prompts;
} lg_ctx;

static uint64_t rng_next(uint64_t *s)
{
    /* SplitMix64: reproducible request mixes from --seed. */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int rand_in(uint64_t *s, int lo, int hi)
{
    return lo + (int)(rng_next(s) % (uint64_t)(hi - lo + 1));
}

static int push(doubles *d, double x)
{
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 1024;
        double *v = realloc(d->v, cap * sizeof *v);
        if (!v)
            return -1;
        d->v = v;
        d->cap = cap;
    }
    d->v[d->n++] = x;
    return 0;
}

/* One chunk of the stream (sse_stream.c checked its framing). */
static void on_chunk(sse_stream *s, const cJSON *j, double now)
{
    lg_req *r = s->user;
    const cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(choice, "token_ids");
    const cJSON *fin = cJSON_GetObjectItemCaseSensitive(choice, "finish_reason");
    if (!cJSON_IsObject(choice) || (ids && !cJSON_IsArray(ids))) {
        sse_stream_bad(s, "a chunk without choices[0] / token_ids");
        return;
    }
    int k = ids ? cJSON_GetArraySize(ids) : 0;
    if (k > 0 && r->ctx->cfg.tokens_out[0]) {
        if (r->n_toks + k > r->cap_toks) {
            int cap = r->cap_toks ? 2 * r->cap_toks : 64;
            while (cap < r->n_toks + k)
                cap *= 2;
            int32_t *t = realloc(r->toks, (size_t)cap * sizeof *t);
            if (!t) {
                sse_stream_bad(s, "out of memory recording token ids");
                return;
            }
            r->toks = t;
            r->cap_toks = cap;
        }
        for (int i = 0; i < k; i++) {
            const cJSON *id = cJSON_GetArrayItem(ids, i);
            r->toks[r->n_toks++] = cJSON_IsNumber(id) ? (int32_t)id->valuedouble : -1;
        }
    }
    if (k > 0) {
        if (r->n_tokens == 0) {
            r->t_first = now;
            push(&r->ctx->ttft, now - r->t_start);
        } else {
            push(&r->ctx->itl, now - r->t_last);
        }
        r->t_last = now;
        r->n_tokens += k;
    }
    if (cJSON_IsString(fin)) {
        r->n_finish++;
        if (strcmp(fin->valuestring, "length") != 0)
            sse_stream_bad(s, "finish_reason is not \"length\" (ignore_eos was set)");
    } else if (fin && !cJSON_IsNull(fin)) {
        sse_stream_bad(s, "finish_reason is neither a string nor null");
    }
}

static int start_request(lg_ctx *ctx, lg_req *r)
{
    r->n_tokens = r->n_finish = 0;
    r->n_toks = 0;
    r->t_start = tn_now_s();
    r->retry_at = 0;
    char url[600];
    snprintf(url, sizeof url, "%s/v1/completions", ctx->cfg.url);
    if (sse_stream_start(&r->s, ctx->multi, url, r->body, ctx->headers,
                         (long)ctx->cfg.timeout_s, on_chunk, r) != 0)
        return -1;
    r->active = 1;
    ctx->running++;
    return 0;
}

/* Retry-After of a 429 answer in seconds (1 when absent or odd). */
static double retry_after(CURL *h)
{
    struct curl_header *hd = NULL;
    if (curl_easy_header(h, "Retry-After", 0, CURLH_HEADER, -1, &hd) == CURLHE_OK && hd) {
        double s = atof(hd->value);
        if (s > 0 && s < 60)
            return s;
    }
    return 1;
}

static void finish_request(lg_ctx *ctx, lg_req *r, CURLcode res)
{
    sse_stream *s = &r->s;
    int failed = sse_stream_failed(s, res);
    if (!failed && s->http_code == 429 && ctx->cfg.retry_429 &&
        r->retries < ctx->cfg.max_retries) {
        r->retries++;
        ctx->retried_429++;
        r->retry_at = tn_now_s() + retry_after(s->h);
        sse_stream_close(s, ctx->multi);
        r->active = 0;
        ctx->running--;
        return;
    }
    outcome o;
    if (failed) {
        o = s->error_seen ? OUT_STREAM_ERROR : OUT_LOST;
    } else if (s->http_code != 200) {
        o = sse_stream_http_error(s) ? OUT_HTTP_ERROR : OUT_MALFORMED;
    } else if (sse_stream_check_end(s)) {
        o = OUT_MALFORMED;
    } else if (s->error_seen) {
        o = OUT_STREAM_ERROR;
    } else if (r->n_finish != 1 || r->n_tokens != r->want_tokens) {
        snprintf(s->why, sizeof s->why, "%d tokens (wanted %d), %d finish_reasons", r->n_tokens,
                 r->want_tokens, r->n_finish);
        o = OUT_MALFORMED;
    } else {
        o = OUT_OK;
    }
    ctx->counts[o]++;
    r->outcome = (int)o;
    ctx->tokens += r->n_tokens;
    if (o != OUT_OK && (ctx->cfg.verbose || o == OUT_LOST || o == OUT_MALFORMED))
        fprintf(stderr, "request %d: %s: %s\n", r->idx, outcome_names[o], s->why);
    sse_stream_close(s, ctx->multi);
    r->active = 0;
    ctx->running--;
    ctx->finished++;
    free(r->body);
    r->body = NULL;
}

static char *make_body(lg_ctx *ctx, lg_req *r)
{
    const lg_config *c = &ctx->cfg;
    int n = rand_in(&ctx->rng, c->prompt_min, c->prompt_max);
    r->want_tokens = rand_in(&ctx->rng, c->out_min, c->out_max);
    r->prompt_line = ctx->prompts.n ? r->idx % ctx->prompts.n : -1;
    const char *given = r->prompt_line >= 0 ? ctx->prompts.lines[r->prompt_line] : NULL;
    size_t cap = 256 + (given ? strlen(given) : (size_t)n * 12);
    char *b = malloc(cap);
    if (!b)
        return NULL;
    size_t off = (size_t)snprintf(b, cap, "{\"model\":\"%s\",\"prompt\":[", c->model);
    if (given)
        off += (size_t)snprintf(b + off, cap - off, "%s", given);
    for (int i = 0; !given && i < n; i++)
        off += (size_t)snprintf(b + off, cap - off, i ? ",%d" : "%d",
                                rand_in(&ctx->rng, 0, c->vocab - 1));
    snprintf(b + off, cap - off,
             "],\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,"
             "\"return_token_ids\":true}",
             r->want_tokens);
    return b;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void print_percentiles(const char *name, doubles *d)
{
    if (d->n == 0) {
        printf("%-5s no samples\n", name);
        return;
    }
    qsort(d->v, d->n, sizeof *d->v, cmp_double);
    static const double ps[] = {0.5, 0.9, 0.99};
    printf("%-5s", name);
    for (int i = 0; i < 3; i++) {
        size_t k = (size_t)ceil(ps[i] * (double)d->n) - 1;
        printf("  p%g %.1f ms", ps[i] * 100, d->v[k] * 1000);
    }
    printf("  max %.1f ms  (%zu samples)\n", d->v[d->n - 1] * 1000, d->n);
}

/* Reads --prompts-file: non-empty lines of comma-separated token ids
 * (digits and commas only, so they go into the JSON body as they are).
 * Returns 0, or -1 with a reason in err. */
static int read_prompts(const char *path, prompt_list *pl, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot open %.300s", path);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = 0, lineno = 0;
    while (!rc && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0)
            continue;
        int ok = line[0] != ',' && line[len - 1] != ',';
        for (ssize_t i = 0; ok && i < len; i++)
            ok = (line[i] >= '0' && line[i] <= '9') || (line[i] == ',' && line[i + 1] != ',');
        char **nl = ok ? realloc(pl->lines, (size_t)(pl->n + 1) * sizeof *nl) : NULL;
        if (!ok) {
            snprintf(err, errlen, "%.300s line %d: not a comma-separated list of token ids", path,
                     lineno);
            rc = -1;
        } else if (!nl || !(nl[pl->n] = strdup(line))) {
            if (nl)
                pl->lines = nl;
            snprintf(err, errlen, "out of memory reading %.300s", path);
            rc = -1;
        } else {
            pl->lines = nl;
            pl->n++;
        }
    }
    free(line);
    fclose(f);
    if (!rc && pl->n == 0) {
        snprintf(err, errlen, "%.300s holds no prompt", path);
        rc = -1;
    }
    return rc;
}

/* --tokens-out: one line per request, "INDEX PROMPT_LINE OUTCOME IDS"
 * (PROMPT_LINE -1 for a random prompt, IDS comma-separated or "-"). */
static int write_tokens(const lg_ctx *ctx, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    for (int i = 0; i < ctx->cfg.requests; i++) {
        const lg_req *r = &ctx->reqs[i];
        fprintf(f, "%d %d %s ", i, r->prompt_line,
                r->outcome >= 0 ? outcome_names[r->outcome] : "unfinished");
        for (int k = 0; k < r->n_toks; k++)
            fprintf(f, k ? ",%d" : "%d", (int)r->toks[k]);
        fprintf(f, "%s\n", r->n_toks ? "" : "-");
    }
    return fclose(f) == 0 ? 0 : -1;
}

static int read_key(const char *path, char *key, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(key, 1, cap - 1, f);
    fclose(f);
    key[n] = '\0';
    while (n > 0 && (key[n - 1] == '\n' || key[n - 1] == '\r' || key[n - 1] == ' '))
        key[--n] = '\0';
    return n > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    lg_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        fprintf(stderr, "tandem-loadgen: out of memory\n");
        return 1;
    }
    lg_config *c = &ctx->cfg;
    snprintf(c->url, sizeof c->url, "http://127.0.0.1:8000");
    c->clients = 256;
    c->prompt_min = 4;
    c->prompt_max = 200;
    c->out_min = 1;
    c->out_max = 64;
    c->vocab = 512;
    c->seed = 1;
    c->timeout_s = 300;
    c->max_retries = 100;
    const opt_spec specs[] = {
        {"url", OPT_STR, c->url, sizeof c->url, "the router's HTTP base URL"},
        {"model", OPT_STR, c->model, sizeof c->model, "model name; required"},
        {"clients", OPT_INT, &c->clients, 0, "concurrent streaming clients"},
        {"requests", OPT_INT, &c->requests, 0, "requests in all (0: one per client)"},
        {"prompt-min", OPT_INT, &c->prompt_min, 0, "shortest prompt in tokens"},
        {"prompt-max", OPT_INT, &c->prompt_max, 0, "longest prompt in tokens"},
        {"out-min", OPT_INT, &c->out_min, 0, "fewest tokens to generate"},
        {"out-max", OPT_INT, &c->out_max, 0, "most tokens to generate"},
        {"vocab", OPT_INT, &c->vocab, 0, "prompt token ids are drawn below this"},
        {"seed", OPT_INT, &c->seed, 0, "seed of the request mix"},
        {"timeout-s", OPT_INT, &c->timeout_s, 0, "longest one request may take"},
        {"retry-429", OPT_BOOL, &c->retry_429, 0, "retry 429 answers after Retry-After"},
        {"max-retries", OPT_INT, &c->max_retries, 0, "429 retries per request"},
        {"require-ok", OPT_BOOL, &c->require_ok, 0, "fail unless every request is ok"},
        {"api-key-file", OPT_STR, c->api_key_file, sizeof c->api_key_file,
         "send 'Authorization: Bearer' with the key in this file"},
        {"verbose", OPT_BOOL, &c->verbose, 0, "print every request that is not ok"},
        {"prompts-file", OPT_STR, c->prompts_file, sizeof c->prompts_file,
         "prompts from this file, one per line (comma-separated token ids); request i "
         "uses line i mod the line count"},
        {"tokens-out", OPT_STR, c->tokens_out, sizeof c->tokens_out,
         "write 'INDEX PROMPT_LINE OUTCOME IDS' for every request to this file"},
    };
    const int n_specs = (int)(sizeof specs / sizeof *specs);
    char err[512];
    int prc = opts_parse(specs, n_specs, argc, argv, err, sizeof err);
    if (prc == OPTS_HELP) {
        opts_print_help(stdout, "tandem-loadgen", INTRO, specs, n_specs);
        free(ctx);
        return 0;
    }
    if (prc == OPTS_OK && c->requests == 0)
        c->requests = c->clients;
    if (prc != OPTS_OK || !c->model[0] || c->clients <= 0 || c->requests <= 0 ||
        c->prompt_min <= 0 || c->prompt_max < c->prompt_min || c->out_min <= 0 ||
        c->out_max < c->out_min || c->vocab <= 0 || c->timeout_s <= 0 || c->max_retries < 0) {
        fprintf(stderr, "tandem-loadgen: %s\n",
                prc != OPTS_OK ? err : "--model is required; counts and ranges must be positive");
        free(ctx);
        return 2;
    }
    char key[512], auth[600];
    if (c->api_key_file[0] && read_key(c->api_key_file, key, sizeof key) != 0) {
        fprintf(stderr, "tandem-loadgen: cannot read a key from %s\n", c->api_key_file);
        free(ctx);
        return 2;
    }
    if (c->prompts_file[0] && read_prompts(c->prompts_file, &ctx->prompts, err, sizeof err)) {
        fprintf(stderr, "tandem-loadgen: %s\n", err);
        for (int i = 0; i < ctx->prompts.n; i++)
            free(ctx->prompts.lines[i]);
        free(ctx->prompts.lines);
        free(ctx);
        return 2;
    }
    ctx->rng = (uint64_t)c->seed;
    int rc = 1;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "tandem-loadgen: cannot initialise libcurl\n");
        free(ctx);
        return 1;
    }
    ctx->multi = curl_multi_init();
    ctx->reqs = calloc((size_t)c->requests, sizeof *ctx->reqs);
    if (c->api_key_file[0])
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
    ctx->headers = sse_json_headers(c->api_key_file[0] ? auth : NULL);
    if (!ctx->multi || !ctx->reqs || !ctx->headers) {
        fprintf(stderr, "tandem-loadgen: out of memory\n");
        goto out;
    }
    /* libcurl opens at most this many connections at once; more would
     * only queue inside it. */
    curl_multi_setopt(ctx->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)c->clients);
    for (int i = 0; i < c->requests; i++) {
        ctx->reqs[i].ctx = ctx;
        ctx->reqs[i].idx = i;
        ctx->reqs[i].outcome = -1;
        if (!(ctx->reqs[i].body = make_body(ctx, &ctx->reqs[i]))) {
            fprintf(stderr, "tandem-loadgen: out of memory\n");
            goto out;
        }
    }
    double t0 = tn_now_s();
    while (ctx->finished < c->requests) {
        double t = tn_now_s();
        /* New requests up to --clients at once, and due 429 retries. */
        for (int i = 0; i < c->requests && ctx->running < c->clients; i++) {
            lg_req *r = &ctx->reqs[i];
            if (r->active || !r->body)
                continue;
            if (i >= ctx->next || (r->retry_at > 0 && t >= r->retry_at)) {
                if (i >= ctx->next)
                    ctx->next = i + 1;
                if (start_request(ctx, r) != 0) {
                    fprintf(stderr, "tandem-loadgen: cannot start a transfer\n");
                    goto out;
                }
            }
        }
        int still = 0;
        curl_multi_perform(ctx->multi, &still);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(ctx->multi, &left))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            sse_stream *s = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&s);
            finish_request(ctx, s->user, m->data.result);
        }
        curl_multi_poll(ctx->multi, NULL, 0, 20, NULL);
    }
    double wall = tn_now_s() - t0;
    printf("tandem-loadgen: %d requests, %d concurrent clients, prompts %d..%d tokens, "
           "outputs %d..%d tokens\n",
           c->requests, c->clients, c->prompt_min, c->prompt_max, c->out_min, c->out_max);
    for (int o = 0; o < OUT_N; o++)
        printf("  %-13s %d\n", outcome_names[o], ctx->counts[o]);
    printf("  429 retries   %d\n", ctx->retried_429);
    printf("wall %.2f s, %ld tokens streamed, %.0f tokens/s\n", wall, ctx->tokens,
           wall > 0 ? (double)ctx->tokens / wall : 0);
    print_percentiles("TTFT", &ctx->ttft);
    print_percentiles("ITL", &ctx->itl);
    printf("RESULT requests=%d ok=%d http_error=%d stream_error=%d malformed=%d lost=%d "
           "retried_429=%d\n",
           c->requests, ctx->counts[OUT_OK], ctx->counts[OUT_HTTP_ERROR],
           ctx->counts[OUT_STREAM_ERROR], ctx->counts[OUT_MALFORMED], ctx->counts[OUT_LOST],
           ctx->retried_429);
    rc = ctx->counts[OUT_LOST] || ctx->counts[OUT_MALFORMED] ||
         (c->require_ok && ctx->counts[OUT_OK] != c->requests);
    if (c->tokens_out[0] && write_tokens(ctx, c->tokens_out) != 0) {
        fprintf(stderr, "tandem-loadgen: cannot write %s\n", c->tokens_out);
        rc = 1;
    }
out:
    if (ctx->reqs) {
        for (int i = 0; i < c->requests; i++) {
            lg_req *r = &ctx->reqs[i];
            sse_stream_close(&r->s, ctx->multi);
            free(r->body);
            free(r->toks);
        }
    }
    free(ctx->reqs);
    for (int i = 0; i < ctx->prompts.n; i++)
        free(ctx->prompts.lines[i]);
    free(ctx->prompts.lines);
    curl_slist_free_all(ctx->headers);
    if (ctx->multi)
        curl_multi_cleanup(ctx->multi);
    curl_global_cleanup();
    free(ctx->ttft.v);
    free(ctx->itl.v);
    free(ctx);
    return rc;
}
