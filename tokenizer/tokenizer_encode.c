/* Encoding: added tokens first (optional), then per ordinary segment NFC
 * (when the vocabulary asks for it), the pre-tokenizer split, and BPE
 * merging of each piece's bytes.
 *
 * Merging uses a min-heap of candidate pairs ordered by (rank, position)
 * with lazy invalidation, so a piece of n bytes costs O(n log n); this
 * yields the same merges as HF tokenizers' BPE word merge and tiktoken's
 * lowest-rank-first loop (ties go to the leftmost pair). */
#include <stdlib.h>
#include <string.h>
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode.h"
#include "common/utf8.h"
#include "common/status.h"

typedef struct merge_cand {
    uint32_t rank;
    uint32_t pos;    /* start byte of the left symbol */
    uint32_t len_l;  /* lengths when the candidate was made; stale if changed */
    uint32_t len_r;
    int32_t merged;
} merge_cand;

typedef struct enc_scratch {
    uint32_t *sym_len; /* per start byte: symbol length, 0 inside a symbol */
    int32_t *sym_id;
    int32_t *sym_prev;
    size_t sym_cap;
    merge_cand *heap;
    size_t heap_len, heap_cap;
    sbuf norm;
} enc_scratch;

typedef struct enc_ctx {
    const bpe_tokenizer *t;
    const unsigned char *text; /* the segment being split (normalized) */
    tok_ids *out;
    enc_scratch *sc;
} enc_ctx;

static int cand_less(const merge_cand *a, const merge_cand *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static int heap_push(enc_scratch *sc, merge_cand c)
{
    if (sc->heap_len == sc->heap_cap) {
        size_t cap = sc->heap_cap ? sc->heap_cap * 2 : 64;
        merge_cand *h = realloc(sc->heap, cap * sizeof(*h));
        if (!h)
            return TN_ERR_NOMEM;
        sc->heap = h;
        sc->heap_cap = cap;
    }
    size_t i = sc->heap_len++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_less(&c, &sc->heap[parent]))
            break;
        sc->heap[i] = sc->heap[parent];
        i = parent;
    }
    sc->heap[i] = c;
    return TN_OK;
}

static merge_cand heap_pop(enc_scratch *sc)
{
    merge_cand top = sc->heap[0];
    merge_cand last = sc->heap[--sc->heap_len];
    size_t i = 0, n = sc->heap_len;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const merge_cand *best = &last;
        if (l < n && cand_less(&sc->heap[l], best)) {
            m = l;
            best = &sc->heap[l];
        }
        if (r < n && cand_less(&sc->heap[r], best))
            m = r;
        if (m == i)
            break;
        sc->heap[i] = sc->heap[m];
        i = m;
    }
    if (n > 0)
        sc->heap[i] = last;
    return top;
}

/* Rank and resulting id of merging the adjacent symbols at pos and
 * pos + len_l; 0 when the pair does not merge. */
static int pair_rank(const bpe_tokenizer *t, const unsigned char *s, const enc_scratch *sc,
                     uint32_t pos, uint32_t *rank, int32_t *merged)
{
    uint32_t len_l = sc->sym_len[pos], right = pos + len_l;
    if (t->kind == BPE_KIND_HF_QWEN) {
        uint64_t key = ((uint64_t)(uint32_t)sc->sym_id[pos] << 32) | (uint32_t)sc->sym_id[right];
        uint64_t v;
        if (!u64_map_get(&t->merges, key, &v))
            return 0;
        *rank = (uint32_t)(v >> 32);
        *merged = (int32_t)(uint32_t)v;
        return 1;
    }
    uint32_t id;
    if (!bytes_map_get(&t->vocab, t->arena, s + pos, len_l + sc->sym_len[right], &id))
        return 0;
    *rank = id;
    *merged = (int32_t)id;
    return 1;
}

static int consider_pair(const bpe_tokenizer *t, const unsigned char *s, size_t n,
                         enc_scratch *sc, int32_t pos)
{
    if (pos < 0 || (size_t)pos + sc->sym_len[pos] >= n)
        return TN_OK;
    uint32_t rank;
    int32_t merged;
    if (!pair_rank(t, s, sc, (uint32_t)pos, &rank, &merged))
        return TN_OK;
    merge_cand c = {rank, (uint32_t)pos, sc->sym_len[pos], sc->sym_len[pos + sc->sym_len[pos]],
                    merged};
    return heap_push(sc, c);
}

static int bpe_piece(const bpe_tokenizer *t, const unsigned char *s, size_t n, enc_scratch *sc,
                     tok_ids *out)
{
    uint32_t id;
    if (n == 0)
        return TN_OK;
    if (t->whole_piece_lookup && bytes_map_get(&t->vocab, t->arena, s, n, &id))
        return tok_ids_push(out, (int32_t)id);
    if (n == 1)
        return tok_ids_push(out, t->byte_ids[s[0]]);
    if (n > UINT32_MAX / 2)
        return TN_ERR_ARG;
    if (n > sc->sym_cap) {
        size_t cap = n < 256 ? 256 : n;
        uint32_t *l = realloc(sc->sym_len, cap * sizeof(*l));
        if (!l)
            return TN_ERR_NOMEM;
        sc->sym_len = l;
        int32_t *d = realloc(sc->sym_id, cap * sizeof(*d));
        if (!d)
            return TN_ERR_NOMEM;
        sc->sym_id = d;
        int32_t *p = realloc(sc->sym_prev, cap * sizeof(*p));
        if (!p)
            return TN_ERR_NOMEM;
        sc->sym_prev = p;
        sc->sym_cap = cap;
    }
    for (size_t i = 0; i < n; i++) {
        sc->sym_len[i] = 1;
        sc->sym_id[i] = t->byte_ids[s[i]];
        sc->sym_prev[i] = (int32_t)i - 1;
    }
    sc->heap_len = 0;
    int rc = TN_OK;
    for (size_t i = 0; i + 1 < n && rc == TN_OK; i++)
        rc = consider_pair(t, s, n, sc, (int32_t)i);
    while (rc == TN_OK && sc->heap_len > 0) {
        merge_cand c = heap_pop(sc);
        uint32_t right = c.pos + c.len_l;
        if (sc->sym_len[c.pos] != c.len_l || right >= n || sc->sym_len[right] != c.len_r)
            continue; /* one side changed since this candidate was made */
        uint32_t after = right + c.len_r;
        sc->sym_len[c.pos] = c.len_l + c.len_r;
        sc->sym_id[c.pos] = c.merged;
        sc->sym_len[right] = 0;
        if (after < n)
            sc->sym_prev[after] = (int32_t)c.pos;
        rc = consider_pair(t, s, n, sc, sc->sym_prev[c.pos]);
        if (rc == TN_OK)
            rc = consider_pair(t, s, n, sc, (int32_t)c.pos);
    }
    for (size_t i = 0; i < n && rc == TN_OK; i += sc->sym_len[i])
        rc = tok_ids_push(out, sc->sym_id[i]);
    return rc;
}

static int on_piece(void *arg, size_t start, size_t end)
{
    enc_ctx *c = arg;
    return bpe_piece(c->t, c->text + start, end - start, c->sc, c->out);
}

static int encode_ordinary(const bpe_tokenizer *t, const char *text, size_t n, enc_scratch *sc,
                           tok_ids *out)
{
    if (n == 0)
        return TN_OK;
    if (t->nfc) {
        sb_reset(&sc->norm);
        int rc = uc_nfc_append(&sc->norm, text, n);
        if (rc != TN_OK)
            return rc;
        text = sc->norm.p;
        n = sc->norm.len;
    }
    enc_ctx c = {t, (const unsigned char *)text, out, sc};
    return pretokenize(t->pretok, text, n, on_piece, &c);
}

/* Encodes text; with special set, added tokens are recognised except where
 * they would overlap one of the guarded byte ranges (pairs [start, end),
 * sorted, not overlapping). */
static int encode_impl(const bpe_tokenizer *t, const char *text, size_t n, int special,
                       const size_t *guards, size_t n_guards, tok_ids *out, char *err,
                       size_t errlen)
{
    if (!t || (!text && n) || !out || (n_guards && !guards)) {
        tn_errf(err, errlen, "bpe_encode: null argument");
        return TN_ERR_ARG;
    }
    size_t bad;
    if (!utf8_valid(text, n, &bad)) {
        tn_errf(err, errlen, "text is not valid UTF-8 (byte offset %zu)", bad);
        return TN_ERR_ARG;
    }
    enc_scratch sc;
    memset(&sc, 0, sizeof(sc));
    sb_init(&sc.norm);
    size_t start_len = out->len;
    const unsigned char *u = (const unsigned char *)text;
    size_t seg = 0, p = 0, g = 0;
    int rc = TN_OK;
    while (p < n && rc == TN_OK) {
        uint32_t id;
        size_t match = 0;
        if (special && t->added_first_byte[u[p]]) {
            while (g < n_guards && guards[2 * g + 1] <= p)
                g++;
            size_t limit = n - p; /* bytes available before the next guard */
            if (g < n_guards)
                limit = guards[2 * g] <= p ? 0 : guards[2 * g] - p;
            for (size_t k = 0; k < t->n_added_lens && !match; k++) {
                size_t len = t->added_lens[k];
                if (len <= limit && bytes_map_get(&t->added, t->arena, u + p, len, &id))
                    match = len;
            }
        }
        if (!match) {
            p++;
            continue;
        }
        rc = encode_ordinary(t, text + seg, p - seg, &sc, out);
        if (rc == TN_OK)
            rc = tok_ids_push(out, (int32_t)id);
        p += match;
        seg = p;
    }
    if (rc == TN_OK)
        rc = encode_ordinary(t, text + seg, n - seg, &sc, out);
    free(sc.sym_len);
    free(sc.sym_id);
    free(sc.sym_prev);
    free(sc.heap);
    sb_free(&sc.norm);
    if (rc != TN_OK) {
        out->len = start_len;
        tn_errf(err, errlen, "encode failed: %s",
                 rc == TN_ERR_NOMEM ? "out of memory" : "bad input");
    }
    return rc;
}

int bpe_encode(const bpe_tokenizer *t, const char *text, size_t n, int flags, tok_ids *out,
               char *err, size_t errlen)
{
    return encode_impl(t, text, n, flags & BPE_ENCODE_SPECIAL, NULL, 0, out, err, errlen);
}

int bpe_encode_guarded(const bpe_tokenizer *t, const char *text, size_t n, const size_t *guards,
                       size_t n_guards, tok_ids *out, char *err, size_t errlen)
{
    for (size_t i = 0; i < n_guards; i++)
        if (guards[2 * i] > guards[2 * i + 1] || guards[2 * i + 1] > n ||
            (i > 0 && guards[2 * i] < guards[2 * i - 1])) {
            tn_errf(err, errlen, "bpe_encode_guarded: guard ranges must be sorted and in range");
            return TN_ERR_ARG;
        }
    return encode_impl(t, text, n, 1, guards, n_guards, out, err, errlen);
}
