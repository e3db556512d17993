#include "tokenizer/tokenizer_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/status.h"

bpe_tokenizer *tok_alloc(bpe_kind kind, const char *name, int32_t n_ids)
{
    bpe_tokenizer *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->kind = kind;
    snprintf(t->name, sizeof(t->name), "%s", name);
    for (int i = 0; i < 256; i++)
        t->byte_ids[i] = -1;
    if (n_ids > 0) {
        t->tok_off = calloc((size_t)n_ids, sizeof(*t->tok_off));
        t->tok_len = calloc((size_t)n_ids, sizeof(*t->tok_len));
        t->tok_flags = calloc((size_t)n_ids, sizeof(*t->tok_flags));
        if (!t->tok_off || !t->tok_len || !t->tok_flags) {
            bpe_tokenizer_free(t);
            return NULL;
        }
        t->n_ids = n_ids;
    }
    return t;
}

void bpe_tokenizer_free(bpe_tokenizer *t)
{
    if (!t)
        return;
    free(t->arena);
    free(t->tok_off);
    free(t->tok_len);
    free(t->tok_flags);
    bytes_map_free(&t->vocab);
    u64_map_free(&t->merges);
    bytes_map_free(&t->added);
    free(t);
}

int64_t tok_arena_add(bpe_tokenizer *t, const void *p, size_t n)
{
    if (n > UINT32_MAX - t->arena_len)
        return -1;
    if (t->arena_len + n > t->arena_cap) {
        size_t cap = t->arena_cap ? t->arena_cap : 1 << 20;
        while (cap < t->arena_len + n)
            cap *= 2;
        unsigned char *a = realloc(t->arena, cap);
        if (!a)
            return -1;
        t->arena = a;
        t->arena_cap = cap;
    }
    int64_t off = (int64_t)t->arena_len;
    if (n)
        memcpy(t->arena + t->arena_len, p, n);
    t->arena_len += n;
    return off;
}

int tok_set_token(bpe_tokenizer *t, int32_t id, uint32_t off, uint32_t len, uint8_t flags)
{
    if (id < 0)
        return TN_ERR_ARG;
    if (id >= t->n_ids) {
        size_t n = (size_t)id + 1;
        if (n < (size_t)t->n_ids * 2)
            n = (size_t)t->n_ids * 2;
        uint32_t *o = realloc(t->tok_off, n * sizeof(*o));
        if (!o)
            return TN_ERR_NOMEM;
        t->tok_off = o;
        uint32_t *l = realloc(t->tok_len, n * sizeof(*l));
        if (!l)
            return TN_ERR_NOMEM;
        t->tok_len = l;
        uint8_t *f = realloc(t->tok_flags, n);
        if (!f)
            return TN_ERR_NOMEM;
        t->tok_flags = f;
        memset(t->tok_flags + t->n_ids, 0, n - (size_t)t->n_ids);
        t->n_ids = (int32_t)n;
    }
    t->tok_off[id] = off;
    t->tok_len[id] = len;
    t->tok_flags[id] = (uint8_t)(flags | TOK_FLAG_PRESENT);
    return TN_OK;
}

int tok_add_added(bpe_tokenizer *t, int32_t id, const char *text, size_t len, int special)
{
    if (len == 0)
        return TN_ERR_ARG;
    int64_t off = tok_arena_add(t, text, len);
    if (off < 0)
        return TN_ERR_NOMEM;
    int rc = tok_set_token(t, id, (uint32_t)off, (uint32_t)len,
                           (uint8_t)(TOK_FLAG_ADDED | (special ? TOK_FLAG_SPECIAL : 0)));
    if (rc != TN_OK)
        return rc;
    if (!t->added.cap && bytes_map_init(&t->added, 64) != TN_OK)
        return TN_ERR_NOMEM;
    rc = bytes_map_put(&t->added, t->arena, (uint32_t)off, (uint32_t)len, (uint32_t)id);
    if (rc < 0)
        return rc;
    t->added_first_byte[(unsigned char)text[0]] = 1;
    size_t k = 0;
    while (k < t->n_added_lens && t->added_lens[k] > len)
        k++;
    if (k < t->n_added_lens && t->added_lens[k] == len)
        return TN_OK;
    if (t->n_added_lens == TOK_MAX_ADDED_LENS)
        return TN_ERR_ARG;
    memmove(&t->added_lens[k + 1], &t->added_lens[k], (t->n_added_lens - k) * sizeof(size_t));
    t->added_lens[k] = len;
    t->n_added_lens++;
    return TN_OK;
}

int tok_resolve_byte_ids(bpe_tokenizer *t, char *err, size_t errlen)
{
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        uint32_t id;
        if (!bytes_map_get(&t->vocab, t->arena, &c, 1, &id)) {
            tn_errf(err, errlen, "%s: vocabulary has no token for byte 0x%02X", t->name, b);
            return TN_ERR_ARG;
        }
        t->byte_ids[b] = (int32_t)id;
    }
    return TN_OK;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

int bpe_tokenizer_load(const char *path, bpe_tokenizer **out, char *err, size_t errlen)
{
    if (!path || !out) {
        tn_errf(err, errlen, "bpe_tokenizer_load: null argument");
        return TN_ERR_ARG;
    }
    *out = NULL;
    if (ends_with(path, ".json"))
        return tok_load_hf_json(path, out, err, errlen);
    if (ends_with(path, ".tiktoken"))
        return tok_load_tiktoken(path, out, err, errlen);
    tn_errf(err, errlen,
             "%s: unknown vocabulary format (expected a HuggingFace tokenizer.json "
             "or a .tiktoken rank file)",
             path);
    return TN_ERR_ARG;
}

bpe_kind bpe_tokenizer_kind(const bpe_tokenizer *t)
{
    return t->kind;
}

const char *bpe_tokenizer_name(const bpe_tokenizer *t)
{
    return t->name;
}

int32_t bpe_vocab_size(const bpe_tokenizer *t)
{
    int32_t n = t->n_ids;
    while (n > 0 && !(t->tok_flags[n - 1] & TOK_FLAG_PRESENT))
        n--;
    return n;
}

int32_t bpe_token_id(const bpe_tokenizer *t, const char *text)
{
    uint32_t id;
    size_t n = strlen(text);
    if (bytes_map_get(&t->added, t->arena, text, n, &id))
        return (int32_t)id;
    if (bytes_map_get(&t->vocab, t->arena, text, n, &id))
        return (int32_t)id;
    return -1;
}

const char *bpe_token_bytes(const bpe_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_ids || !(t->tok_flags[id] & TOK_FLAG_PRESENT))
        return NULL;
    if (len)
        *len = t->tok_len[id];
    return (const char *)t->arena + t->tok_off[id];
}

int bpe_token_is_special(const bpe_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_ids && (t->tok_flags[id] & TOK_FLAG_SPECIAL);
}

int bpe_token_is_added(const bpe_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_ids && (t->tok_flags[id] & TOK_FLAG_ADDED);
}
