#include "programs/servebench_workload.h"
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/file.h"
#include "common/sbuf.h"
#include "common/status.h"

/* SplitMix64: the same request mix for the same --seed on any machine. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int rng_in(uint64_t *s, int lo, int hi)
{
    return lo + (int)(rng_next(s) % (uint64_t)(hi - lo + 1));
}

/* Uniform in [0, 1). */
static double rng_unit(uint64_t *s)
{
    return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

static int parse_pos(const char *s, const char **end, int *out)
{
    if (!isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    char *e;
    long v = strtol(s, &e, 10);
    if (errno || v < 1 || v > INT_MAX)
        return -1;
    *out = (int)v;
    *end = e;
    return 0;
}

int svb_range_parse(const char *s, svb_range *out)
{
    const char *e;
    svb_range r;
    if (parse_pos(s, &e, &r.lo) != 0)
        return -1;
    r.hi = r.lo;
    if (*e == '-' && parse_pos(e + 1, &e, &r.hi) != 0)
        return -1;
    if (*e || r.hi < r.lo)
        return -1;
    *out = r;
    return 0;
}

void svb_lengths_free(svb_lengths *l)
{
    free(l->input);
    free(l->output);
    l->input = l->output = NULL;
    l->n = 0;
}

int svb_lengths_load(const char *path, svb_lengths *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    char *text = NULL;
    size_t len = 0;
    int rc = tn_read_file(path, (size_t)1 << 30, &text, &len, err, errlen);
    if (rc)
        return rc;
    int cap = 0, line = 0;
    for (char *p = text, *next; p && *p; p = next) {
        line++;
        next = strchr(p, '\n');
        if (next)
            *next++ = '\0';
        char *hash = strchr(p, '#');
        if (hash)
            *hash = '\0';
        while (isspace((unsigned char)*p))
            p++;
        if (!*p)
            continue;
        int a, b;
        const char *e;
        if (parse_pos(p, &e, &a) != 0)
            goto bad;
        while (*e == ' ' || *e == '\t' || *e == ',')
            e++;
        if (parse_pos(e, &e, &b) != 0)
            goto bad;
        while (isspace((unsigned char)*e))
            e++;
        if (*e)
            goto bad;
        if (out->n == cap) {
            cap = cap ? 2 * cap : 256;
            int *i2 = realloc(out->input, (size_t)cap * sizeof *i2);
            if (i2)
                out->input = i2;
            int *o2 = realloc(out->output, (size_t)cap * sizeof *o2);
            if (o2)
                out->output = o2;
            if (!i2 || !o2) {
                free(text);
                svb_lengths_free(out);
                return tn_fail(err, errlen, TN_ERR_NOMEM, "%s: out of memory", path);
            }
        }
        out->input[out->n] = a;
        out->output[out->n] = b;
        out->n++;
        continue;
    bad:
        free(text);
        svb_lengths_free(out);
        return tn_fail(err, errlen, TN_ERR_ARG,
                       "%s line %d: expected two positive integers \"INPUT OUTPUT\"", path, line);
    }
    free(text);
    if (out->n == 0)
        return tn_fail(err, errlen, TN_ERR_ARG, "%s: no length pairs", path);
    return TN_OK;
}

/* Common short English words: text prompts whose length the server's
 * tokenizer decides (the report uses usage.prompt_tokens). */
static const char *const WORDS[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be",
    "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but",
    "have", "an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her",
    "has", "there", "been", "if", "more", "when", "will", "would", "who", "so", "no",
};
#define N_WORDS ((int)(sizeof WORDS / sizeof *WORDS))

static void put_prompt(sbuf *b, const svb_workload_cfg *c, uint64_t *rng, int n)
{
    if (c->prompt == SVB_PROMPT_IDS) {
        sb_putc(b, '[');
        for (int i = 0; i < n; i++)
            sb_printf(b, i ? ",%d" : "%d", rng_in(rng, 0, c->vocab - 1));
        sb_putc(b, ']');
        return;
    }
    sb_putc(b, '"');
    for (int i = 0; i < n; i++)
        sb_printf(b, i ? " %s" : "%s", WORDS[rng_in(rng, 0, N_WORDS - 1)]);
    sb_putc(b, '"');
}

static char *make_body(const svb_workload_cfg *c, uint64_t *rng, const svb_request *r)
{
    sbuf b;
    sb_init(&b);
    sb_reserve(&b, 256 + (size_t)r->input_len * (c->prompt == SVB_PROMPT_IDS ? 7 : 6));
    sb_puts(&b, "{\"model\":");
    sb_json_str(&b, c->model, strlen(c->model));
    if (c->api == SVB_API_CHAT) {
        sb_puts(&b, ",\"messages\":[{\"role\":\"user\",\"content\":");
        put_prompt(&b, c, rng, r->input_len);
        sb_puts(&b, "}]");
    } else {
        sb_puts(&b, ",\"prompt\":");
        put_prompt(&b, c, rng, r->input_len);
    }
    sb_printf(&b,
              ",\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,"
              "\"stream_options\":{\"include_usage\":true},\"return_token_ids\":true}",
              r->output_len);
    return sb_take(&b);
}

void svb_workload_free(svb_request *r, int n)
{
    if (!r)
        return;
    for (int i = 0; i < n; i++)
        free(r[i].body);
    free(r);
}

int svb_workload_make(const svb_workload_cfg *c, svb_request **out, char *err, size_t errlen)
{
    *out = NULL;
    if (c->n < 1 || !c->model || (c->prompt == SVB_PROMPT_IDS && c->vocab < 1) ||
        (c->api == SVB_API_CHAT && c->prompt == SVB_PROMPT_IDS) || !(c->rate >= 0) ||
        (!c->lengths && (c->input.lo < 1 || c->input.hi < c->input.lo || c->output.lo < 1 ||
                         c->output.hi < c->output.lo)))
        return tn_fail(err, errlen, TN_ERR_ARG,
                       "bad workload: requests, lengths and vocab must be positive, the rate "
                       "not negative, and chat prompts are text");
    svb_request *r = calloc((size_t)c->n, sizeof *r);
    if (!r)
        return tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory for %d requests", c->n);
    /* Separate streams, so the arrival times do not change when a length
     * range does, and the lengths not when the rate does. */
    uint64_t len_rng = c->seed * 3 + 1, arr_rng = c->seed * 3 + 2, tok_rng = c->seed * 3 + 3;
    double t = 0;
    for (int i = 0; i < c->n; i++) {
        if (c->lengths) {
            int k = rng_in(&len_rng, 0, c->lengths->n - 1);
            r[i].input_len = c->lengths->input[k];
            r[i].output_len = c->lengths->output[k];
        } else {
            r[i].input_len = rng_in(&len_rng, c->input.lo, c->input.hi);
            r[i].output_len = rng_in(&len_rng, c->output.lo, c->output.hi);
        }
        if (c->rate > 0 && i > 0)
            t += -log(1.0 - rng_unit(&arr_rng)) / c->rate;
        r[i].arrival_s = t;
        if (!(r[i].body = make_body(c, &tok_rng, &r[i]))) {
            svb_workload_free(r, c->n);
            return tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory for request bodies");
        }
    }
    *out = r;
    return TN_OK;
}
