#include "tokenizer/pretokenize.h"
#include <stdint.h>
#include <stdlib.h>
#include "tokenizer/unicode.h"
#include "common/utf8.h"
#include "common/status.h"

/* Character classes, one bit each, computed once per code point. */
enum {
    CL_L = 1,     /* \p{L} */
    CL_N = 2,     /* \p{N} */
    CL_WS = 4,    /* \s */
    CL_NL = 8,    /* \r or \n */
    CL_UP = 16,   /* [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] */
    CL_LOW = 32,  /* [\p{Ll}\p{Lm}\p{Lo}\p{M}] */
};

static uint8_t classify(uint32_t cp)
{
    if (cp < 0x80) {
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z')
            return CL_L | (cp >= 'a' ? CL_LOW : CL_UP);
        if (cp >= '0' && cp <= '9')
            return CL_N;
        if (cp == '\r' || cp == '\n')
            return CL_WS | CL_NL;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D))
            return CL_WS;
        return 0;
    }
    uint8_t c = uc_is_white_space(cp) ? CL_WS : 0;
    switch (uc_category(cp)) {
    case UC_LU: case UC_LT: return c | CL_L | CL_UP;
    case UC_LL: return c | CL_L | CL_LOW;
    case UC_LM: case UC_LO: return c | CL_L | CL_UP | CL_LOW;
    case UC_MN: case UC_MC: case UC_ME: return c | CL_UP | CL_LOW;
    case UC_ND: case UC_NL: case UC_NO: return c | CL_N;
    default: return c;
    }
}

typedef struct text_view {
    const uint32_t *cp;
    const uint8_t *cl;
    size_t n;
} text_view;

static size_t run_of(const text_view *t, size_t i, uint8_t bits)
{
    while (i < t->n && (t->cl[i] & bits))
        i++;
    return i;
}

static int lower_is(uint32_t c, char want)
{
    return c < 0x80 && (char)(c | 0x20) == want;
}

/* Length of 's|'t|'re|'ve|'m|'ll|'d (ASCII case-insensitive) at i, else 0. */
static size_t contraction_at(const text_view *t, size_t i)
{
    if (i + 1 >= t->n || t->cp[i] != '\'')
        return 0;
    uint32_t a = t->cp[i + 1];
    if (lower_is(a, 's') || lower_is(a, 't') || lower_is(a, 'm') || lower_is(a, 'd'))
        return 2;
    if (i + 2 < t->n) {
        uint32_t b = t->cp[i + 2];
        if ((lower_is(a, 'r') && lower_is(b, 'e')) || (lower_is(a, 'v') && lower_is(b, 'e')) ||
            (lower_is(a, 'l') && lower_is(b, 'l')))
            return 3;
    }
    return 0;
}

/* [^\r\n\p{L}\p{N}] */
static int is_prefix_char(uint8_t cl)
{
    return !(cl & (CL_NL | CL_L | CL_N));
}

/* [^\s\p{L}\p{N}] */
static int is_symbol(uint8_t cl)
{
    return !(cl & (CL_WS | CL_L | CL_N));
}

/* \s*[\r\n]+ | \s+(?!\S) | \s+ at a whitespace code point i. */
static size_t match_whitespace(const text_view *t, size_t i)
{
    size_t j = run_of(t, i, CL_WS);
    /* \s* backtracks from the end of the run to its last newline; [\r\n]+
     * then takes that newline and nothing after it (no newline follows). */
    for (size_t k = j; k > i; k--)
        if (t->cl[k - 1] & CL_NL)
            return k;
    if (j == t->n || j - i == 1)
        return j;
    return j - 1; /* leave the last space to prefix the next word */
}

/* ` ?[^\s\p{L}\p{N}]+` followed by a run of `tail` class characters. */
static size_t match_symbols(const text_view *t, size_t i, int o200k)
{
    size_t s = i;
    if (t->cp[i] == ' ' && i + 1 < t->n && is_symbol(t->cl[i + 1]))
        s = i + 1;
    else if (!is_symbol(t->cl[i]))
        return 0;
    size_t e = s;
    while (e < t->n && is_symbol(t->cl[e]))
        e++;
    while (e < t->n && ((t->cl[e] & CL_NL) || (o200k && t->cp[e] == '/')))
        e++;
    return e;
}

static size_t match_qwen2(const text_view *t, size_t i)
{
    size_t c = contraction_at(t, i);
    if (c)
        return i + c;
    if (is_prefix_char(t->cl[i]) && i + 1 < t->n && (t->cl[i + 1] & CL_L))
        return run_of(t, i + 1, CL_L);
    if (t->cl[i] & CL_L)
        return run_of(t, i, CL_L);
    if (t->cl[i] & CL_N)
        return i + 1;
    size_t e = match_symbols(t, i, 0);
    if (e)
        return e;
    if (t->cl[i] & CL_WS)
        return match_whitespace(t, i);
    return i + 1; /* unreachable: the alternatives cover every code point */
}

/* [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+ from s; the
 * star backtracks until the plus can match. Returns the end or 0. */
static size_t o200k_word_lower(const text_view *t, size_t s)
{
    size_t a = run_of(t, s, CL_UP);
    for (size_t k = a + 1; k-- > s;)
        if (k < t->n && (t->cl[k] & CL_LOW))
            return run_of(t, k, CL_LOW);
    return 0;
}

/* [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]* from s. */
static size_t o200k_word_upper(const text_view *t, size_t s)
{
    size_t a = run_of(t, s, CL_UP);
    if (a == s)
        return 0;
    return run_of(t, a, CL_LOW);
}

static size_t match_o200k(const text_view *t, size_t i)
{
    int has_prefix = is_prefix_char(t->cl[i]) && i + 1 < t->n;
    size_t (*word[2])(const text_view *, size_t) = {o200k_word_lower, o200k_word_upper};
    for (int alt = 0; alt < 2; alt++) {
        size_t e = 0;
        if (has_prefix)
            e = word[alt](t, i + 1);
        if (!e)
            e = word[alt](t, i);
        if (e)
            return e + contraction_at(t, e);
    }
    if (t->cl[i] & CL_N) {
        size_t e = i + 1;
        while (e < t->n && e < i + 3 && (t->cl[e] & CL_N))
            e++;
        return e;
    }
    size_t e = match_symbols(t, i, 1);
    if (e)
        return e;
    if (t->cl[i] & CL_WS)
        return match_whitespace(t, i);
    return i + 1; /* unreachable: the alternatives cover every code point */
}

int pretokenize(pretok_kind kind, const char *text, size_t n, pretok_piece_fn fn, void *ctx)
{
    if (kind != PRETOK_QWEN2 && kind != PRETOK_O200K)
        return TN_ERR_ARG;
    if (n == 0)
        return TN_OK;
    uint32_t *cp = malloc(n * sizeof(*cp));
    uint8_t *cl = malloc(n);
    size_t *off = malloc((n + 1) * sizeof(*off));
    if (!cp || !cl || !off) {
        free(cp);
        free(cl);
        free(off);
        return TN_ERR_NOMEM;
    }
    const unsigned char *s = (const unsigned char *)text;
    size_t count = 0, i = 0;
    int rc = TN_OK;
    while (i < n) {
        uint32_t c;
        int len = s[i] < 0x80 ? (c = s[i], 1) : utf8_decode(s + i, n - i, &c);
        if (len == 0) {
            rc = TN_ERR_ARG;
            break;
        }
        cp[count] = c;
        cl[count] = classify(c);
        off[count] = i;
        count++;
        i += (size_t)len;
    }
    off[count] = n;
    text_view t = {cp, cl, count};
    for (size_t p = 0; p < count && rc == TN_OK;) {
        size_t e = kind == PRETOK_QWEN2 ? match_qwen2(&t, p) : match_o200k(&t, p);
        rc = fn(ctx, off[p], off[e]);
        p = e;
    }
    free(cp);
    free(cl);
    free(off);
    return rc;
}
