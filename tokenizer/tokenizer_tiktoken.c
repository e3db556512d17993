/* Loads tiktoken ranks ("<base64 token> <rank>" per line) as the
 * o200k_harmony encoding of GPT-OSS: o200k_base ranks, the o200k split
 * regex and the Harmony special tokens. */
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer/tokenizer_internal.h"
#include "common/file.h"
#include "common/status.h"

/* o200k_base has ranks 0..199997. */
#define O200K_BASE_RANKS 199998

/* The o200k_harmony special tokens as the npm package gpt-tokenizer
 * defines them (src/encodingParams/o200k_harmony.ts; the same ids as
 * tiktoken and openai-harmony): ids 199998..200012 below, then
 * <|reserved_N|> for every other id up to 201087, and <|endofprompt|> as a
 * second name for 200018. tests/unit/test_tokenizer_o200k.c checks this
 * table against the package's own map (tests/fixtures/tokenizer_ref.json). */
static const struct {
    int32_t id;
    const char *text;
} HARMONY_SPECIALS[] = {
    {199998, "<|startoftext|>"}, {199999, "<|endoftext|>"}, {200002, "<|return|>"},
    {200003, "<|constrain|>"},   {200005, "<|channel|>"},   {200006, "<|start|>"},
    {200007, "<|end|>"},         {200008, "<|message|>"},   {200012, "<|call|>"},
};
#define HARMONY_FIRST_SPECIAL 199998
#define HARMONY_END_SPECIAL 201088 /* exclusive */
#define HARMONY_ENDOFPROMPT 200018

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Decodes standard padded base64; returns the byte count or -1. */
static long b64_decode(const char *s, size_t n, unsigned char *out, size_t cap)
{
    if (n == 0 || n % 4 != 0)
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        int pad = 0;
        for (int j = 0; j < 4; j++) {
            if (s[i + j] == '=' && i + 4 == n && j >= 2) {
                v[j] = 0;
                pad++;
            } else {
                if (pad)
                    return -1;
                v[j] = b64_value((unsigned char)s[i + j]);
                if (v[j] < 0)
                    return -1;
            }
        }
        uint32_t w = ((uint32_t)v[0] << 18) | ((uint32_t)v[1] << 12) | ((uint32_t)v[2] << 6) |
                     (uint32_t)v[3];
        unsigned char bytes[3] = {(unsigned char)(w >> 16), (unsigned char)(w >> 8),
                                  (unsigned char)w};
        for (int j = 0; j < 3 - pad; j++) {
            if (k == cap)
                return -1;
            out[k++] = bytes[j];
        }
    }
    return (long)k;
}

static int add_harmony_specials(bpe_tokenizer *t)
{
    for (int32_t id = HARMONY_FIRST_SPECIAL; id < HARMONY_END_SPECIAL; id++) {
        const char *name = NULL;
        for (size_t i = 0; i < sizeof(HARMONY_SPECIALS) / sizeof(HARMONY_SPECIALS[0]); i++)
            if (HARMONY_SPECIALS[i].id == id)
                name = HARMONY_SPECIALS[i].text;
        char buf[40];
        if (!name) {
            snprintf(buf, sizeof(buf), "<|reserved_%d|>", (int)id);
            name = buf;
        }
        int rc = tok_add_added(t, id, name, strlen(name), 1);
        if (rc != TN_OK)
            return rc;
    }
    /* Registered last so that decoding 200018 prints this name, as
     * gpt-tokenizer does. */
    return tok_add_added(t, HARMONY_ENDOFPROMPT, "<|endofprompt|>", 15, 1);
}

int tok_load_tiktoken(const char *path, bpe_tokenizer **out, char *err, size_t errlen)
{
    char *data;
    size_t len;
    int rc = tn_read_file(path, SIZE_MAX - 1, &data, &len, err, errlen);
    if (rc != TN_OK)
        return rc;
    bpe_tokenizer *t = tok_alloc(BPE_KIND_O200K_HARMONY, "o200k_harmony", HARMONY_END_SPECIAL);
    if (!t || bytes_map_init(&t->vocab, O200K_BASE_RANKS) != TN_OK) {
        free(data);
        bpe_tokenizer_free(t);
        tn_errf(err, errlen, "%s: out of memory", path);
        return TN_ERR_NOMEM;
    }
    t->pretok = PRETOK_O200K;
    t->whole_piece_lookup = 1;
    size_t line = 0, count = 0;
    const char *p = data, *end = data + len;
    rc = TN_OK;
    while (p < end && rc == TN_OK) {
        line++;
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl ? nl : end;
        const char *sp = memchr(p, ' ', (size_t)(eol - p));
        if (eol == p) { /* blank line */
            p = eol + 1;
            continue;
        }
        unsigned char bytes[256];
        long nb = sp ? b64_decode(p, (size_t)(sp - p), bytes, sizeof(bytes)) : -1;
        char *rank_end = NULL;
        long rank = sp ? strtol(sp + 1, &rank_end, 10) : -1;
        if (nb <= 0 || rank < 0 || rank >= HARMONY_FIRST_SPECIAL || rank_end != eol) {
            tn_errf(err, errlen, "%s:%zu: not a tiktoken rank line", path, line);
            rc = TN_ERR_ARG;
            break;
        }
        if (t->tok_flags[rank] & TOK_FLAG_PRESENT) {
            tn_errf(err, errlen, "%s:%zu: rank %ld appears twice", path, line, rank);
            rc = TN_ERR_ARG;
            break;
        }
        int64_t off = tok_arena_add(t, bytes, (size_t)nb);
        rc = off < 0 ? TN_ERR_NOMEM : tok_set_token(t, (int32_t)rank, (uint32_t)off, (uint32_t)nb, 0);
        if (rc == TN_OK) {
            int put = bytes_map_put(&t->vocab, t->arena, (uint32_t)off, (uint32_t)nb,
                                    (uint32_t)rank);
            if (put == 1) {
                tn_errf(err, errlen, "%s:%zu: token bytes appear twice", path, line);
                rc = TN_ERR_ARG;
            } else {
                rc = put;
            }
        }
        count++;
        p = eol + 1;
    }
    free(data);
    if (rc == TN_OK && count != O200K_BASE_RANKS) {
        tn_errf(err, errlen,
                 "%s: %zu ranks, but o200k_harmony needs the %d o200k_base ranks "
                 "(no other tiktoken encoding is supported)",
                 path, count, O200K_BASE_RANKS);
        rc = TN_ERR_ARG;
    }
    char why[160] = "";
    if (rc == TN_OK)
        rc = tok_resolve_byte_ids(t, why, sizeof(why));
    if (rc == TN_OK)
        rc = add_harmony_specials(t);
    if (rc != TN_OK) {
        if (why[0])
            tn_errf(err, errlen, "%s: %s", path, why);
        else if (rc == TN_ERR_NOMEM)
            tn_errf(err, errlen, "%s: out of memory", path);
        bpe_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return TN_OK;
}
