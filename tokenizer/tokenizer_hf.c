/* Loads a HuggingFace tokenizer.json with a byte-level BPE model (Qwen2 /
 * Qwen3 family). Only the exact pipeline implemented by the encoder is
 * accepted; every other normalizer, pre-tokenizer or model option is
 * rejected by name rather than approximated. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cJSON.h>
#include "tokenizer/tokenizer_internal.h"
#include "common/file.h"
#include "common/utf8.h"
#include "common/status.h"

/* The Split regex of Qwen2/Qwen3 tokenizer.json, which PRETOK_QWEN2
 * implements. */
static const char QWEN2_SPLIT_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* GPT-2 byte-level alphabet: bytes that are printable map to themselves,
 * the other 68 to U+0100.. in byte order. Returns the byte for a code
 * point of that alphabet, or -1. */
static int byte_of_unicode(uint32_t cp)
{
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
        return (int)cp;
    if (cp < 256 || cp >= 256 + 68)
        return -1;
    uint32_t k = cp - 256;
    if (k < 33)
        return (int)k;           /* 0x00..0x20 */
    if (k < 67)
        return (int)(127 + k - 33); /* 0x7F..0xA0 */
    return 173;                  /* 0xAD */
}

/* Converts a byte-level token string into raw bytes (at most strlen). */
static int byte_level_to_bytes(const char *s, unsigned char *out, size_t *out_len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s), i = 0, k = 0;
    while (i < n) {
        uint32_t cp;
        int len = utf8_decode(u + i, n - i, &cp);
        int b = len ? byte_of_unicode(cp) : -1;
        if (b < 0)
            return TN_ERR_ARG;
        out[k++] = (unsigned char)b;
        i += (size_t)len;
    }
    *out_len = k;
    return TN_OK;
}

static const char *json_type_str(const cJSON *o)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

static int check_pipeline(const cJSON *root, bpe_tokenizer *t, char *err, size_t errlen)
{
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (norm && !cJSON_IsNull(norm)) {
        const char *ty = json_type_str(norm);
        if (!ty || strcmp(ty, "NFC") != 0) {
            tn_errf(err, errlen, "unsupported normalizer '%s' (only NFC or none)",
                     ty ? ty : "?");
            return TN_ERR_ARG;
        }
        t->nfc = 1;
    }
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    const char *pty = pre ? json_type_str(pre) : NULL;
    const cJSON *seq = pre ? cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers") : NULL;
    if (!pty || strcmp(pty, "Sequence") != 0 || cJSON_GetArraySize(seq) != 2) {
        tn_errf(err, errlen, "unsupported pre_tokenizer '%s' (expected Sequence[Split, ByteLevel])",
                 pty ? pty : "?");
        return TN_ERR_ARG;
    }
    const cJSON *split = cJSON_GetArrayItem(seq, 0), *bl = cJSON_GetArrayItem(seq, 1);
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(split, "pattern");
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
    const cJSON *beh = cJSON_GetObjectItemCaseSensitive(split, "behavior");
    const cJSON *inv = cJSON_GetObjectItemCaseSensitive(split, "invert");
    if (!json_type_str(split) || strcmp(json_type_str(split), "Split") != 0 ||
        !cJSON_IsString(re) || !cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") != 0 ||
        cJSON_IsTrue(inv)) {
        tn_errf(err, errlen, "unsupported pre_tokenizer: first step must be an Isolated Split regex");
        return TN_ERR_ARG;
    }
    if (strcmp(re->valuestring, QWEN2_SPLIT_REGEX) != 0) {
        tn_errf(err, errlen, "unsupported pre_tokenizer regex '%.80s' (only the Qwen2/Qwen3 one)",
                 re->valuestring);
        return TN_ERR_ARG;
    }
    const cJSON *use_re = cJSON_GetObjectItemCaseSensitive(bl, "use_regex");
    const cJSON *aps = cJSON_GetObjectItemCaseSensitive(bl, "add_prefix_space");
    if (!json_type_str(bl) || strcmp(json_type_str(bl), "ByteLevel") != 0 || cJSON_IsTrue(use_re) ||
        cJSON_IsTrue(aps)) {
        tn_errf(err, errlen, "unsupported pre_tokenizer: second step must be ByteLevel "
                              "without regex or prefix space");
        return TN_ERR_ARG;
    }
    t->pretok = PRETOK_QWEN2;

    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    if (!dec || !json_type_str(dec) || strcmp(json_type_str(dec), "ByteLevel") != 0) {
        tn_errf(err, errlen, "unsupported decoder (only ByteLevel)");
        return TN_ERR_ARG;
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const char *mty = model ? json_type_str(model) : NULL;
    if (!mty || strcmp(mty, "BPE") != 0) {
        tn_errf(err, errlen, "unsupported model type '%s' (only BPE)", mty ? mty : "?");
        return TN_ERR_ARG;
    }
    static const char *const must_be_off[] = {"byte_fallback", "ignore_merges"};
    for (size_t i = 0; i < 2; i++)
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, must_be_off[i]))) {
            tn_errf(err, errlen, "unsupported BPE option %s=true", must_be_off[i]);
            return TN_ERR_ARG;
        }
    static const char *const must_be_empty[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, must_be_empty[i]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && v->valuestring[0] == '\0')) {
            tn_errf(err, errlen, "unsupported BPE option %s", must_be_empty[i]);
            return TN_ERR_ARG;
        }
    }
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (dropout && !cJSON_IsNull(dropout)) {
        tn_errf(err, errlen, "unsupported BPE dropout");
        return TN_ERR_ARG;
    }
    return TN_OK;
}

static int load_vocab(const cJSON *vocab, bpe_tokenizer *t, char *err, size_t errlen)
{
    int n = cJSON_GetArraySize(vocab);
    if (!cJSON_IsObject(vocab) || n <= 0) {
        tn_errf(err, errlen, "model.vocab is missing or empty");
        return TN_ERR_ARG;
    }
    if (bytes_map_init(&t->vocab, (size_t)n) != TN_OK)
        return TN_ERR_NOMEM;
    unsigned char buf[1024];
    for (const cJSON *e = vocab->child; e; e = e->next) {
        size_t len;
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > INT32_MAX ||
            strlen(e->string) > sizeof(buf) ||
            byte_level_to_bytes(e->string, buf, &len) != TN_OK) {
            tn_errf(err, errlen, "model.vocab: bad entry '%.60s'", e->string);
            return TN_ERR_ARG;
        }
        int32_t id = (int32_t)e->valuedouble;
        int64_t off = tok_arena_add(t, buf, len);
        if (off < 0)
            return TN_ERR_NOMEM;
        if (id < t->n_ids && (t->tok_flags[id] & TOK_FLAG_PRESENT)) {
            tn_errf(err, errlen, "model.vocab: id %d appears twice", id);
            return TN_ERR_ARG;
        }
        int rc = tok_set_token(t, id, (uint32_t)off, (uint32_t)len, 0);
        if (rc != TN_OK)
            return rc;
        rc = bytes_map_put(&t->vocab, t->arena, (uint32_t)off, (uint32_t)len, (uint32_t)id);
        if (rc < 0)
            return rc;
        if (rc == 1) {
            tn_errf(err, errlen, "model.vocab: token '%.60s' appears twice", e->string);
            return TN_ERR_ARG;
        }
    }
    return TN_OK;
}

static int lookup_byte_level(const bpe_tokenizer *t, const char *s, size_t n, int32_t *id)
{
    unsigned char buf[1024];
    size_t len;
    char tmp[1025];
    if (n >= sizeof(tmp))
        return 0;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    uint32_t v;
    if (byte_level_to_bytes(tmp, buf, &len) != TN_OK ||
        !bytes_map_get(&t->vocab, t->arena, buf, len, &v))
        return 0;
    *id = (int32_t)v;
    return 1;
}

static int load_merges(const cJSON *merges, bpe_tokenizer *t, char *err, size_t errlen)
{
    int n = cJSON_GetArraySize(merges);
    if (!cJSON_IsArray(merges)) {
        tn_errf(err, errlen, "model.merges is missing");
        return TN_ERR_ARG;
    }
    if (u64_map_init(&t->merges, (size_t)n) != TN_OK)
        return TN_ERR_NOMEM;
    uint32_t rank = 0;
    for (const cJSON *m = merges->child; m; m = m->next, rank++) {
        const char *a, *b;
        size_t alen, blen;
        if (cJSON_IsString(m)) { /* "left right" (older tokenizer.json) */
            const char *sp = strchr(m->valuestring, ' ');
            if (!sp || strchr(sp + 1, ' '))
                goto bad;
            a = m->valuestring;
            alen = (size_t)(sp - a);
            b = sp + 1;
            blen = strlen(b);
        } else if (cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
                   cJSON_IsString(m->child->next)) { /* ["left", "right"] */
            a = m->child->valuestring;
            alen = strlen(a);
            b = m->child->next->valuestring;
            blen = strlen(b);
        } else {
            goto bad;
        }
        int32_t left, right, merged;
        char joined[2050];
        if (alen + blen >= sizeof(joined))
            goto bad;
        memcpy(joined, a, alen);
        memcpy(joined + alen, b, blen);
        if (!lookup_byte_level(t, a, alen, &left) || !lookup_byte_level(t, b, blen, &right) ||
            !lookup_byte_level(t, joined, alen + blen, &merged)) {
            tn_errf(err, errlen, "model.merges[%u] refers to a token not in the vocabulary",
                     rank);
            return TN_ERR_ARG;
        }
        uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
        int rc = u64_map_put(&t->merges, key, ((uint64_t)rank << 32) | (uint32_t)merged);
        if (rc < 0)
            return rc;
        /* rc == 1: a duplicate pair keeps its first (lowest) rank, as HF does. */
        continue;
    bad:
        tn_errf(err, errlen, "model.merges[%u] is malformed", rank);
        return TN_ERR_ARG;
    }
    return TN_OK;
}

static int load_added(const cJSON *added, bpe_tokenizer *t, char *err, size_t errlen)
{
    if (!added || cJSON_IsNull(added))
        return TN_OK;
    int i = 0;
    for (const cJSON *a = added->child; a; a = a->next, i++) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(a, "content");
        const cJSON *special = cJSON_GetObjectItemCaseSensitive(a, "special");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || !cJSON_IsString(content) ||
            content->valuestring[0] == '\0') {
            tn_errf(err, errlen, "added_tokens[%d] is malformed", i);
            return TN_ERR_ARG;
        }
        static const char *const flags[] = {"lstrip", "rstrip", "single_word"};
        for (size_t k = 0; k < 3; k++)
            if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, flags[k]))) {
                tn_errf(err, errlen, "added_tokens[%d] '%s': option %s is not supported", i,
                         content->valuestring, flags[k]);
                return TN_ERR_ARG;
            }
        int rc = tok_add_added(t, (int32_t)id->valuedouble, content->valuestring,
                               strlen(content->valuestring), cJSON_IsTrue(special));
        if (rc != TN_OK) {
            tn_errf(err, errlen, "added_tokens[%d] '%s' could not be registered", i,
                     content->valuestring);
            return rc;
        }
    }
    return TN_OK;
}

int tok_load_hf_json(const char *path, bpe_tokenizer **out, char *err, size_t errlen)
{
    char *data;
    size_t len;
    int rc = tn_read_file(path, SIZE_MAX - 1, &data, &len, err, errlen);
    if (rc != TN_OK)
        return rc;
    cJSON *root = cJSON_ParseWithLength(data, len);
    free(data);
    if (!root) {
        tn_errf(err, errlen, "%s: not valid JSON", path);
        return TN_ERR_ARG;
    }
    bpe_tokenizer *t = tok_alloc(BPE_KIND_HF_QWEN, "qwen3", 0);
    if (!t) {
        cJSON_Delete(root);
        tn_errf(err, errlen, "%s: out of memory", path);
        return TN_ERR_NOMEM;
    }
    char why[200] = "";
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    rc = check_pipeline(root, t, why, sizeof(why));
    if (rc == TN_OK)
        rc = load_vocab(cJSON_GetObjectItemCaseSensitive(model, "vocab"), t, why, sizeof(why));
    if (rc == TN_OK)
        rc = load_merges(cJSON_GetObjectItemCaseSensitive(model, "merges"), t, why, sizeof(why));
    if (rc == TN_OK)
        rc = load_added(cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), t, why,
                        sizeof(why));
    if (rc == TN_OK)
        rc = tok_resolve_byte_ids(t, why, sizeof(why));
    cJSON_Delete(root);
    if (rc != TN_OK) {
        tn_errf(err, errlen, "%s: %s", path, why[0] ? why : "out of memory");
        bpe_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return TN_OK;
}
