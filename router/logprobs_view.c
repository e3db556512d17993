/* Stored logprobs -> the API writer's shape (router/logprobs_view.h). */
#include "router/logprobs_view.h"

#include <stdlib.h>
#include <string.h>

void lp_view_init(lp_view *v)
{
    memset(v, 0, sizeof *v);
    sb_init(&v->bytes);
}

void lp_view_free(lp_view *v)
{
    free(v->tokens);
    free(v->entries);
    sb_free(&v->bytes);
    memset(v, 0, sizeof *v);
}

/* Text length before token i, and whether i is listed. */
static size_t text_before(const router_request *r, int i)
{
    size_t end = i > 0 ? r->out_text_end[i - 1] : 0;
    return end < r->text.len ? end : r->text.len;
}

static int listed(const router_request *r, int i)
{
    if (!r->parser)
        return 1;
    return r->out_text_end[i] > (i > 0 ? r->out_text_end[i - 1] : 0);
}

/* Characters (code points) in text[0..len): OpenAI's text_offset unit. */
static long chars_in(const char *text, size_t len)
{
    long n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)text[i] & 0xC0) != 0x80;
    return n;
}

/* Records token id's bytes in v->bytes; *off is their offset, or -1 when
 * the codec has no text. */
static void add_bytes(lp_view *v, const text_codec *codec, int32_t id, long *off, size_t *len)
{
    size_t before = v->bytes.len;
    *off = codec_token_bytes(codec, id, &v->bytes) == 0 ? (long)before : -1;
    *len = v->bytes.len - before;
}

/* Points every token's and alternative's bytes into the arena once it has
 * stopped growing: offs holds, per token, its own offset then its per
 * alternatives' (-1: no bytes). */
static void point_at_bytes(lp_view *v, const long *offs, int per)
{
    const char *base = v->bytes.p ? v->bytes.p : "";
    for (int j = 0; j < v->n; j++) {
        api_lp_token *t = &v->tokens[j];
        long o = offs[(size_t)j * (per + 1)];
        t->tok.bytes = o < 0 ? NULL : base + o;
        for (int k = 0; k < t->n_top; k++) {
            long ok = offs[(size_t)j * (per + 1) + 1 + k];
            v->entries[(size_t)j * per + k].bytes = ok < 0 ? NULL : base + ok;
        }
    }
}

int lp_view_build_prompt(lp_view *v, const text_codec *codec, const router_request *r,
                         long *chars)
{
    free(v->tokens);
    free(v->entries);
    v->tokens = NULL;
    v->entries = NULL;
    v->n = 0;
    sb_reset(&v->bytes);
    *chars = 0;
    const int n = r->n_prompt, per = r->logprobs > 0 ? r->logprobs : 0;
    if (n <= 0 || (n > 1 && r->n_prompt_lp != n - 1))
        return 0;
    v->tokens = calloc((size_t)n, sizeof *v->tokens);
    v->entries = calloc((size_t)n * (size_t)(per > 0 ? per : 1), sizeof *v->entries);
    long *offs = calloc((size_t)n * (size_t)(per + 1), sizeof *offs);
    sbuf text;
    sb_init(&text);
    if (!v->tokens || !v->entries || !offs) {
        free(offs);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        api_lp_token *t = &v->tokens[i];
        t->text_offset = *chars;
        sb_reset(&text);
        codec_decode_token(codec, r->prompt[i], &text);
        *chars += chars_in(text.p ? text.p : "", text.len);
        t->tok.id = r->prompt[i];
        add_bytes(v, codec, t->tok.id, &offs[(size_t)i * (per + 1)], &t->tok.len);
        t->top = &v->entries[(size_t)i * (size_t)per];
        if (i == 0) {
            t->no_logprob = 1;
            continue;
        }
        const tm_token_logprobs *lp = &r->prompt_lp[i - 1];
        t->tok.logprob = lp->logprob;
        t->n_top = lp->n_top < per ? lp->n_top : per;
        for (int k = 0; k < t->n_top; k++) {
            api_lp_entry *en = &v->entries[(size_t)i * (size_t)per + k];
            en->id = lp->top_ids[k];
            en->logprob = lp->top_logprobs[k];
            add_bytes(v, codec, en->id, &offs[(size_t)i * (per + 1) + 1 + k], &en->len);
        }
    }
    v->n = n;
    const int oom = v->bytes.oom || text.oom;
    sb_free(&text);
    if (oom) {
        free(offs);
        return -1;
    }
    point_at_bytes(v, offs, per);
    free(offs);
    return 0;
}

int lp_view_build(lp_view *v, const text_codec *codec, const router_request *r, int from, int to)
{
    free(v->tokens);
    free(v->entries);
    v->tokens = NULL;
    v->entries = NULL;
    v->n = 0;
    sb_reset(&v->bytes);
    if (to > r->n_out)
        to = r->n_out;
    if (r->logprobs < 0 || !r->out_lp || from >= to)
        return 0;
    int n = to - from, per = r->logprobs;
    v->tokens = calloc((size_t)n, sizeof *v->tokens);
    v->entries = calloc((size_t)n * (size_t)(per > 0 ? per : 1), sizeof *v->entries);
    if (!v->tokens || !v->entries)
        return -1;
    /* Offsets first: the arena moves while it grows. */
    long *offs = calloc((size_t)n * (size_t)(per + 1), sizeof *offs);
    if (!offs)
        return -1;
    const long chars0 = chars_in(r->text.p ? r->text.p : "", text_before(r, from));
    long chars = chars0;
    size_t counted = text_before(r, from);
    for (int i = from; i < to; i++) {
        if (!listed(r, i))
            continue;
        const tm_token_logprobs *lp = &r->out_lp[i];
        api_lp_token *t = &v->tokens[v->n];
        size_t upto = text_before(r, i);
        if (upto > counted) {
            chars += chars_in(r->text.p + counted, upto - counted);
            counted = upto;
        }
        t->text_offset = chars;
        t->tok.id = r->out[i];
        t->tok.logprob = lp->logprob;
        add_bytes(v, codec, t->tok.id, &offs[(size_t)v->n * (per + 1)], &t->tok.len);
        t->n_top = lp->n_top < per ? lp->n_top : per;
        t->top = &v->entries[(size_t)v->n * (size_t)per];
        for (int k = 0; k < t->n_top; k++) {
            api_lp_entry *en = &v->entries[(size_t)v->n * (size_t)per + k];
            en->id = lp->top_ids[k];
            en->logprob = lp->top_logprobs[k];
            add_bytes(v, codec, en->id, &offs[(size_t)v->n * (per + 1) + 1 + k], &en->len);
        }
        v->n++;
    }
    if (v->bytes.oom) {
        free(offs);
        return -1;
    }
    point_at_bytes(v, offs, per);
    free(offs);
    return 0;
}
