/* Grammar programs: loading and checking, the stack-set matcher, and the
 * builder the router compiles schemas with (engine/grammar.h). */
#include "engine/grammar.h"

#include <stdlib.h>
#include <string.h>
#include "common/status.h"

/* Bound on the expansions of one advance: a rule that calls itself in
 * tail position through empty alternatives would loop without deepening. */
#define EXPAND_BUDGET 4096

static int width(int32_t op)
{
    return op == TM_G_BYTES ? 9 : (op == TM_G_RULE || op == TM_G_TOKEN) ? 2 : 1;
}

void tm_grammar_free(tm_grammar *g)
{
    free(g->code);
    free(g->alt_first);
    free(g->alts);
    memset(g, 0, sizeof *g);
}

/* Left recursion: rule r reaches itself without consuming anything. Walks
 * the "may start with" edges through nullable prefixes (colour 1: on the
 * path, 2: done). */
static int left_recursive(const tm_grammar *g, const uint8_t *nullable, uint8_t *colour, int r)
{
    colour[r] = 1;
    for (int a = g->alt_first[r]; a < g->alt_first[r + 1]; a++)
        for (int p = g->alts[a]; g->code[p] != TM_G_ALT_END; p += width(g->code[p])) {
            if (g->code[p] != TM_G_RULE)
                break;
            int s = g->code[p + 1];
            if (colour[s] == 1 || (colour[s] == 0 && left_recursive(g, nullable, colour, s)))
                return 1;
            if (!nullable[s])
                break;
        }
    colour[r] = 2;
    return 0;
}

int tm_grammar_load(tm_grammar *g, const int32_t *code, int n_code, int vocab, char *err,
                    size_t errlen)
{
    memset(g, 0, sizeof *g);
    if (!code || n_code < 2 || n_code > TM_G_MAX_CODE)
        return tn_fail(err, errlen, TN_ERR_ARG, "grammar: %d words (1..%d)", n_code, TM_G_MAX_CODE);
    /* pass 1: structure, counts */
    int n_rules = 0, n_alts = 0, in_alt = 0;
    for (int p = 0; p < n_code;) {
        int32_t op = code[p];
        if (op < TM_G_BYTES || op > TM_G_RULE_END || p + width(op) > n_code)
            return tn_fail(err, errlen, TN_ERR_ARG, "grammar: bad element %d at word %d", (int)op, p);
        if (op == TM_G_RULE_END) {
            if (in_alt)
                return tn_fail(err, errlen, TN_ERR_ARG, "grammar: rule %d ends inside an alternative",
                               n_rules);
            n_rules++;
        } else if (op == TM_G_ALT_END) {
            n_alts++;
            in_alt = 0;
        } else {
            in_alt = 1;
        }
        p += width(op);
    }
    if (code[n_code - 1] != TM_G_RULE_END || n_rules == 0)
        return tn_fail(err, errlen, TN_ERR_ARG, "grammar: the program does not end a rule");
    g->code = malloc((size_t)n_code * sizeof *g->code);
    g->alt_first = malloc(((size_t)n_rules + 1) * sizeof *g->alt_first);
    g->alts = malloc(((size_t)n_alts + 1) * sizeof *g->alts);
    uint8_t *nullable = calloc((size_t)n_rules, 1), *colour = calloc((size_t)n_rules, 1);
    if (!g->code || !g->alt_first || !g->alts || !nullable || !colour) {
        free(nullable);
        free(colour);
        tm_grammar_free(g);
        return tn_fail(err, errlen, TN_ERR_NOMEM, "grammar: out of memory");
    }
    memcpy(g->code, code, (size_t)n_code * sizeof *code);
    g->n_code = n_code;
    g->n_rules = n_rules;
    int r = 0, a = 0, start = 0;
    g->alt_first[0] = 0;
    for (int p = 0; p < n_code; p += width(code[p])) {
        if (code[p] == TM_G_ALT_END) {
            g->alts[a++] = start;
            start = p + 1;
        } else if (code[p] == TM_G_RULE_END) {
            g->alt_first[++r] = a;
            start = p + 1;
        } else if (code[p] == TM_G_RULE && (code[p + 1] < 0 || code[p + 1] >= n_rules)) {
            r = -1;
            break;
        } else if (code[p] == TM_G_TOKEN && (code[p + 1] < 0 || code[p + 1] >= vocab)) {
            r = -2;
            break;
        }
    }
    int rc = TN_OK;
    if (r < 0) {
        rc = tn_fail(err, errlen, TN_ERR_ARG, "grammar: %s out of range",
                     r == -1 ? "a rule reference" : "a token id");
    } else {
        for (int q = 0; q < n_rules; q++)
            if (g->alt_first[q] == g->alt_first[q + 1])
                rc = tn_fail(err, errlen, TN_ERR_ARG, "grammar: rule %d has no alternative", q);
    }
    /* nullable rules, to a fixed point */
    for (int changed = 1; rc == TN_OK && changed;) {
        changed = 0;
        for (int q = 0; q < n_rules; q++) {
            if (nullable[q])
                continue;
            for (int k = g->alt_first[q]; k < g->alt_first[q + 1] && !nullable[q]; k++) {
                int p = g->alts[k], all = 1;
                for (; code[p] != TM_G_ALT_END; p += width(code[p]))
                    if (code[p] != TM_G_RULE || !nullable[code[p + 1]]) {
                        all = 0;
                        break;
                    }
                if (all)
                    nullable[q] = changed = 1;
            }
        }
    }
    for (int q = 0; rc == TN_OK && q < n_rules; q++)
        if (colour[q] == 0 && left_recursive(g, nullable, colour, q))
            rc = tn_fail(err, errlen, TN_ERR_ARG, "grammar: rule %d is left recursive", q);
    free(nullable);
    free(colour);
    if (rc == TN_OK) {
        tm_gstate s = {0};
        rc = tm_grammar_start(g, &s);
        if (rc == TN_OK && s.n == 0)
            rc = tn_fail(err, errlen, TN_ERR_ARG, "grammar: matches nothing");
        else if (rc != TN_OK)
            tn_errf(err, errlen, "grammar: out of memory");
        tm_gstate_free(&s);
    }
    if (rc != TN_OK)
        tm_grammar_free(g);
    return rc;
}

/* ---------------------------------------------------------------- states */

void tm_gstate_free(tm_gstate *s)
{
    free(s->v);
    memset(s, 0, sizeof *s);
}

static int reserve(tm_gstate *s, int len)
{
    if (len <= s->cap)
        return TN_OK;
    int cap = s->cap ? s->cap : 64;
    while (cap < len)
        cap *= 2;
    int32_t *v = realloc(s->v, (size_t)cap * sizeof *v);
    if (!v)
        return TN_ERR_NOMEM;
    s->v = v;
    s->cap = cap;
    return TN_OK;
}

int tm_gstate_copy(tm_gstate *dst, const tm_gstate *src)
{
    if (reserve(dst, src->len) != TN_OK)
        return TN_ERR_NOMEM;
    if (src->len)
        memcpy(dst->v, src->v, (size_t)src->len * sizeof *src->v);
    dst->len = src->len;
    dst->n = src->n;
    return TN_OK;
}

int tm_gstate_equal(const tm_gstate *a, const tm_gstate *b)
{
    return a->n == b->n && a->len == b->len &&
           (a->len == 0 || memcmp(a->v, b->v, (size_t)a->len * sizeof *a->v) == 0);
}

int tm_gstate_accepting(const tm_gstate *s)
{
    for (int i = 0; i < s->len; i += 1 + s->v[i])
        if (s->v[i] == 0)
            return 1;
    return 0;
}

/* Adds stack st[0..d) unless it is there already (or the set is full). */
static int push_stack(tm_gstate *out, const int32_t *st, int d)
{
    for (int i = 0; i < out->len; i += 1 + out->v[i])
        if (out->v[i] == d && memcmp(&out->v[i + 1], st, (size_t)d * sizeof *st) == 0)
            return TN_OK;
    if (out->n >= TM_G_MAX_STACKS)
        return TN_OK;
    if (reserve(out, out->len + 1 + d) != TN_OK)
        return TN_ERR_NOMEM;
    out->v[out->len] = d;
    memcpy(&out->v[out->len + 1], st, (size_t)d * sizeof *st);
    out->len += 1 + d;
    out->n++;
    return TN_OK;
}

/* Expands st[0..d) (st is the caller's scratch, changed here) until every
 * stack's top is a terminal, adding those stacks to out. */
static int expand(const tm_grammar *g, int32_t *st, int d, tm_gstate *out, int *budget)
{
    if (--*budget < 0)
        return TN_OK;
    while (d > 0 && g->code[st[d - 1]] == TM_G_ALT_END)
        d--;
    if (d == 0 || g->code[st[d - 1]] != TM_G_RULE)
        return push_stack(out, st, d);
    const int top = st[d - 1], r = g->code[top + 1];
    /* a call in tail position returns nowhere: drop its frame */
    int base = d;
    if (g->code[top + 2] == TM_G_ALT_END)
        base = d - 1;
    else
        st[d - 1] = top + 2;
    if (base + 1 > TM_G_MAX_DEPTH)
        return TN_OK;
    int32_t buf[TM_G_MAX_DEPTH];
    for (int a = g->alt_first[r]; a < g->alt_first[r + 1]; a++) {
        memcpy(buf, st, (size_t)base * sizeof *st);
        buf[base] = g->alts[a];
        int rc = expand(g, buf, base + 1, out, budget);
        if (rc != TN_OK)
            return rc;
    }
    return TN_OK;
}

int tm_grammar_start(const tm_grammar *g, tm_gstate *out)
{
    out->len = out->n = 0;
    int budget = EXPAND_BUDGET;
    int32_t st[TM_G_MAX_DEPTH];
    for (int a = g->alt_first[0]; a < g->alt_first[1]; a++) {
        st[0] = g->alts[a];
        int rc = expand(g, st, 1, out, &budget);
        if (rc != TN_OK)
            return rc;
    }
    return TN_OK;
}

static int bytes_has(const int32_t *set, uint8_t c)
{
    return ((uint32_t)set[c >> 5] >> (c & 31)) & 1u;
}

/* Advances every stack whose top matches (a byte when token < 0, else the
 * token). */
static int advance(const tm_grammar *g, const tm_gstate *in, int c, int32_t token, tm_gstate *out)
{
    out->len = out->n = 0;
    int budget = EXPAND_BUDGET;
    int32_t st[TM_G_MAX_DEPTH];
    for (int i = 0; i < in->len; i += 1 + in->v[i]) {
        const int d = in->v[i];
        if (d == 0)
            continue;
        const int top = in->v[i + d];
        const int32_t op = g->code[top];
        int match = token < 0 ? op == TM_G_BYTES && bytes_has(&g->code[top + 1], (uint8_t)c)
                              : op == TM_G_TOKEN && g->code[top + 1] == token;
        if (!match)
            continue;
        memcpy(st, &in->v[i + 1], (size_t)d * sizeof *st);
        st[d - 1] = top + width(op);
        int rc = expand(g, st, d, out, &budget);
        if (rc != TN_OK)
            return rc;
    }
    return TN_OK;
}

int tm_grammar_advance_byte(const tm_grammar *g, const tm_gstate *in, uint8_t c, tm_gstate *out)
{
    return advance(g, in, c, -1, out);
}

int tm_grammar_advance_token(const tm_grammar *g, const tm_gstate *in, int32_t token,
                             tm_gstate *out)
{
    return advance(g, in, 0, token, out);
}

int tm_grammar_matches(const tm_grammar *g, const char *s, size_t n)
{
    tm_gstate a = {0}, b = {0};
    int ok = tm_grammar_start(g, &a) == TN_OK;
    for (size_t i = 0; ok && i < n; i++) {
        ok = tm_grammar_advance_byte(g, &a, (uint8_t)s[i], &b) == TN_OK && b.n > 0;
        tm_gstate t = a;
        a = b;
        b = t;
    }
    ok = ok && tm_gstate_accepting(&a);
    tm_gstate_free(&a);
    tm_gstate_free(&b);
    return ok;
}

/* --------------------------------------------------------------- builder */

void tm_gb_init(tm_grammar_builder *b)
{
    memset(b, 0, sizeof *b);
}

void tm_gb_free(tm_grammar_builder *b)
{
    for (int i = 0; i < b->n_rules; i++)
        free(b->rules[i].code);
    free(b->rules);
    memset(b, 0, sizeof *b);
}

int tm_gb_rule_new(tm_grammar_builder *b)
{
    if (b->n_rules == b->cap) {
        int cap = b->cap ? 2 * b->cap : 32;
        tm_gb_rule *r = realloc(b->rules, (size_t)cap * sizeof *r);
        if (!r) {
            b->failed = 1;
            return -1;
        }
        b->rules = r;
        b->cap = cap;
    }
    memset(&b->rules[b->n_rules], 0, sizeof b->rules[0]);
    return b->n_rules++;
}

static void emit(tm_grammar_builder *b, int r, const int32_t *w, int n)
{
    if (b->failed || r < 0 || r >= b->n_rules) {
        b->failed = 1;
        return;
    }
    tm_gb_rule *x = &b->rules[r];
    if (x->n + n > x->cap) {
        int cap = x->cap ? x->cap : 32;
        while (cap < x->n + n)
            cap *= 2;
        int32_t *c = realloc(x->code, (size_t)cap * sizeof *c);
        if (!c) {
            b->failed = 1;
            return;
        }
        x->code = c;
        x->cap = cap;
    }
    memcpy(x->code + x->n, w, (size_t)n * sizeof *w);
    x->n += n;
}

void tm_gb_set(tm_grammar_builder *b, int r, const uint32_t set[8])
{
    int32_t w[9] = { TM_G_BYTES };
    for (int i = 0; i < 8; i++)
        w[1 + i] = (int32_t)set[i];
    emit(b, r, w, 9);
}

void tm_gb_range(tm_grammar_builder *b, int r, unsigned lo, unsigned hi)
{
    uint32_t set[8] = {0};
    for (unsigned c = lo; c <= hi && c < 256; c++)
        set[c >> 5] |= 1u << (c & 31);
    tm_gb_set(b, r, set);
}

void tm_gb_lit(tm_grammar_builder *b, int r, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        tm_gb_range(b, r, (uint8_t)s[i], (uint8_t)s[i]);
}

void tm_gb_ref(tm_grammar_builder *b, int r, int sub)
{
    int32_t w[2] = { TM_G_RULE, sub };
    if (sub < 0)
        b->failed = 1;
    emit(b, r, w, 2);
}

void tm_gb_token(tm_grammar_builder *b, int r, int32_t id)
{
    int32_t w[2] = { TM_G_TOKEN, id };
    emit(b, r, w, 2);
}

void tm_gb_alt(tm_grammar_builder *b, int r)
{
    int32_t w = TM_G_ALT_END;
    emit(b, r, &w, 1);
}

int tm_gb_finish(tm_grammar_builder *b, int32_t **code, int *n_code)
{
    *code = NULL;
    *n_code = 0;
    size_t n = 0;
    for (int i = 0; i < b->n_rules; i++)
        n += (size_t)b->rules[i].n + 2;
    if (b->failed || b->n_rules == 0 || n > TM_G_MAX_CODE)
        return b->failed ? TN_ERR_NOMEM : TN_ERR_ARG;
    int32_t *c = malloc(n * sizeof *c);
    if (!c)
        return TN_ERR_NOMEM;
    size_t k = 0;
    for (int i = 0; i < b->n_rules; i++) {
        if (b->rules[i].n)
            memcpy(c + k, b->rules[i].code, (size_t)b->rules[i].n * sizeof *c);
        k += (size_t)b->rules[i].n;
        c[k++] = TM_G_ALT_END;
        c[k++] = TM_G_RULE_END;
    }
    *code = c;
    *n_code = (int)k;
    return TN_OK;
}
