/* Sampling with penalties, biases and logprobs (engine/sampler.h). */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "common/status.h"
#include "common/sys.h"

/* Index of token's entry, or -(insertion point) - 1. */
static int entry_find(const tm_penalties *p, int32_t token)
{
    int lo = 0, hi = p->n_entries;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (p->entries[mid].token < token)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->n_entries && p->entries[lo].token == token ? lo : -lo - 1;
}

/* The entry of token, inserted (zeroed) when missing; NULL on OOM. */
static kn_logit_entry *entry_get(tm_penalties *p, int32_t token)
{
    int at = entry_find(p, token);
    if (at >= 0)
        return &p->entries[at];
    at = -at - 1;
    if (p->n_entries == p->cap) {
        int cap = p->cap ? 2 * p->cap : 16;
        kn_logit_entry *e = realloc(p->entries, (size_t)cap * sizeof *e);
        if (!e)
            return NULL;
        p->entries = e;
        p->cap = cap;
    }
    memmove(&p->entries[at + 1], &p->entries[at], (size_t)(p->n_entries - at) * sizeof *p->entries);
    p->n_entries++;
    p->entries[at] = (kn_logit_entry){ .token = token };
    return &p->entries[at];
}

int tm_penalties_init(tm_penalties *p, float presence, float frequency, float repetition,
                      const int32_t *prompt, int n_prompt, int n_output_tail,
                      const int32_t *bias_tokens, const float *bias, int n_bias, int vocab)
{
    memset(p, 0, sizeof *p);
    if (!isfinite(presence) || !isfinite(frequency) || !isfinite(repetition) || repetition <= 0 ||
        n_prompt < 0 || n_output_tail < 0 || n_output_tail > n_prompt || n_bias < 0 ||
        (n_prompt > 0 && !prompt) || (n_bias > 0 && (!bias_tokens || !bias)))
        return TN_ERR_ARG;
    p->params = (kn_logit_adjust){ presence, frequency, repetition };
    const int counts_output = presence != 0.0f || frequency != 0.0f || repetition != 1.0f;
    p->active = counts_output || n_bias > 0;
    if (!p->active)
        return TN_OK;
    for (int i = 0; i < n_bias; i++) {
        kn_logit_entry *e;
        if (bias_tokens[i] < 0 || bias_tokens[i] >= vocab || !isfinite(bias[i]) ||
            entry_find(p, bias_tokens[i]) >= 0) {
            tm_penalties_free(p);
            return TN_ERR_ARG;
        }
        if (!(e = entry_get(p, bias_tokens[i]))) {
            tm_penalties_free(p);
            return TN_ERR_NOMEM;
        }
        e->bias = bias[i];
    }
    if (!counts_output)
        return TN_OK;
    for (int i = 0; i < n_prompt; i++) {
        const int output = i >= n_prompt - n_output_tail;
        if (prompt[i] < 0 || prompt[i] >= vocab) {
            tm_penalties_free(p);
            return TN_ERR_ARG;
        }
        if (!output && repetition == 1.0f)
            continue; /* only repetition looks at the prompt */
        kn_logit_entry *e = entry_get(p, prompt[i]);
        if (!e) {
            tm_penalties_free(p);
            return TN_ERR_NOMEM;
        }
        if (output)
            e->out_count++;
        else
            e->in_prompt = 1;
    }
    return TN_OK;
}

int tm_penalties_add_output(tm_penalties *p, int32_t token)
{
    if (!p->active || (p->params.presence == 0.0f && p->params.frequency == 0.0f &&
                       p->params.repetition == 1.0f))
        return TN_OK; /* biases only: output does not matter */
    kn_logit_entry *e = entry_get(p, token);
    if (!e)
        return TN_ERR_NOMEM;
    e->out_count++;
    return TN_OK;
}

void tm_penalties_free(tm_penalties *p)
{
    free(p->entries);
    memset(p, 0, sizeof *p);
}

void tm_sampler_init(tm_sampler *s, const kn_backend *be)
{
    memset(s, 0, sizeof *s);
    s->be = be;
}

void tm_sampler_free(tm_sampler *s)
{
    if (s->adjusted)
        kn_free(s->be, s->adjusted);
    free(s->params);
    free(s->row_start);
    free(s->entries);
    free(s->lp_tokens);
    free(s->lp_ids);
    free(s->lp_token);
    free(s->lp_top);
    free(s->mask);
    memset(s, 0, sizeof *s);
}

/* Grows *buf to hold n elements of size sz (cap in elements). */
static int grow(void **buf, int *cap, int n, size_t sz)
{
    if (n <= *cap)
        return TN_OK;
    void *b = realloc(*buf, (size_t)n * sz);
    if (!b)
        return TN_ERR_NOMEM;
    *buf = b;
    *cap = n;
    return TN_OK;
}

/* The constrained rows' masks (all ones for the others) on the copy. */
static int mask_rows(tm_sampler *s, int n, int vocab, tm_constraint *const *con)
{
    const size_t words = (size_t)kn_logit_mask_words(vocab), need = words * (size_t)n;
    if (need > s->mask_words) {
        uint32_t *m = realloc(s->mask, need * sizeof *m);
        if (!m)
            return TN_ERR_NOMEM;
        s->mask = m;
        s->mask_words = need;
    }
    double t0 = tn_now_s();
    int failed = TN_OK;
    /* each row's constraint has its own scratch: the rows' walks run on
     * the host's cores side by side */
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < n; i++) {
        uint32_t *m = s->mask + (size_t)i * words;
        int rc = TN_OK;
        if (!con[i])
            memset(m, 0xff, words * sizeof *m);
        else if (con[i]->trie->vocab != vocab)
            rc = TN_ERR_ARG;
        else
            rc = tm_constraint_mask(con[i], m);
        if (rc != TN_OK) {
#pragma omp critical
            failed = rc;
        }
    }
    s->mask_s += tn_now_s() - t0;
    if (failed != TN_OK)
        return failed;
    return kn_logit_mask_apply(s->be, s->adjusted, n, vocab, s->mask);
}

/* Copies the logits and applies every row's adjustments to the copy; sets
 * *out to the logits to sample from. */
static int adjust_rows(tm_sampler *s, const float *logits, int n, int vocab,
                       const tm_penalties *const *pen, tm_constraint *const *con,
                       const float **out)
{
    int n_entries = 0, any = 0, any_con = 0;
    for (int i = 0; pen && i < n; i++)
        if (pen[i] && pen[i]->active) {
            any = 1;
            n_entries += pen[i]->n_entries;
        }
    for (int i = 0; con && i < n; i++)
        any_con |= con[i] != NULL;
    *out = logits;
    if (!any && !any_con)
        return TN_OK;
    int rc;
    if ((rc = grow((void **)&s->params, &s->params_cap, n, sizeof *s->params)) != TN_OK ||
        (rc = grow((void **)&s->row_start, &s->row_start_cap, n + 1, sizeof *s->row_start)) != TN_OK)
        return rc;
    if ((rc = grow((void **)&s->entries, &s->entries_cap, n_entries > 0 ? n_entries : 1,
                   sizeof *s->entries)) != TN_OK)
        return rc;
    const size_t floats = (size_t)n * vocab;
    if (floats > s->adjusted_floats) {
        if (s->adjusted)
            kn_free(s->be, s->adjusted);
        s->adjusted = kn_malloc(s->be, floats * sizeof(float));
        s->adjusted_floats = s->adjusted ? floats : 0;
        if (!s->adjusted)
            return TN_ERR_NOMEM;
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        s->row_start[i] = k;
        if (pen && pen[i] && pen[i]->active) {
            s->params[i] = pen[i]->params;
            if (pen[i]->n_entries > 0) /* active with no entries yet: a first token */
                memcpy(&s->entries[k], pen[i]->entries,
                       (size_t)pen[i]->n_entries * sizeof *s->entries);
            k += pen[i]->n_entries;
        } else {
            s->params[i] = (kn_logit_adjust){ 0.0f, 0.0f, 1.0f };
        }
    }
    s->row_start[n] = k;
    if ((rc = kn_copy_on_backend(s->be, s->adjusted, logits, floats * sizeof(float))) != TN_OK ||
        (any && (rc = kn_logit_adjust_apply(s->be, s->adjusted, n, vocab, s->params, s->row_start,
                                            s->entries)) != TN_OK) ||
        (any_con && (rc = mask_rows(s, n, vocab, con)) != TN_OK))
        return rc;
    *out = s->adjusted;
    return TN_OK;
}

/* The logprobs of the rows that ask, from the raw logits. */
static int row_logprobs(tm_sampler *s, const float *logits, int n, int vocab,
                        const int *top_logprobs, const int32_t *tokens, tm_token_logprobs *lp)
{
    int top = -1;
    for (int i = 0; i < n; i++)
        if (top_logprobs[i] > top)
            top = top_logprobs[i];
    if (top < 0)
        return TN_OK;
    if (!lp || top > KN_LOGPROBS_MAX_TOP)
        return TN_ERR_ARG;
    int rc;
    if ((rc = grow((void **)&s->lp_tokens, &s->lp_tokens_cap, n, sizeof *s->lp_tokens)) != TN_OK ||
        (rc = grow((void **)&s->lp_token, &s->lp_token_cap, n, sizeof *s->lp_token)) != TN_OK ||
        (rc = grow((void **)&s->lp_ids, &s->lp_ids_cap, n * KN_LOGPROBS_MAX_TOP,
                   sizeof *s->lp_ids)) != TN_OK ||
        (rc = grow((void **)&s->lp_top, &s->lp_top_cap, n * KN_LOGPROBS_MAX_TOP,
                   sizeof *s->lp_top)) != TN_OK)
        return rc;
    for (int i = 0; i < n; i++)
        s->lp_tokens[i] = top_logprobs[i] >= 0 ? tokens[i] : -1;
    if ((rc = kn_logprobs(s->be, logits, n, vocab, s->lp_tokens, s->lp_token, top,
                          top ? s->lp_ids : NULL, top ? s->lp_top : NULL)) != TN_OK)
        return rc;
    for (int i = 0; i < n; i++) {
        if (top_logprobs[i] < 0)
            continue;
        lp[i].logprob = s->lp_token[i];
        lp[i].n_top = top_logprobs[i];
        for (int j = 0; j < top_logprobs[i]; j++) {
            lp[i].top_ids[j] = s->lp_ids[(size_t)i * top + j];
            lp[i].top_logprobs[j] = s->lp_top[(size_t)i * top + j];
        }
    }
    return TN_OK;
}

int tm_sample_rows(tm_sampler *s, const float *logits, int n, int vocab,
                   const kn_sampling *params, uint64_t *rngs, const tm_penalties *const *pen,
                   tm_constraint *const *con, const int *top_logprobs, int32_t *tokens,
                   tm_token_logprobs *lp)
{
    const float *draw_from = logits;
    int rc = pen || con ? adjust_rows(s, logits, n, vocab, pen, con, &draw_from) : TN_OK;
    if (rc == TN_OK)
        rc = kn_sample(s->be, tokens, draw_from, n, vocab, params, rngs);
    if (rc == TN_OK && top_logprobs)
        rc = row_logprobs(s, logits, n, vocab, top_logprobs, tokens, lp);
    return rc;
}
