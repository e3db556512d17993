#include "transfer/transfer_pattern.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Hash of the element's coordinates: the element is identified by its
 * logical position, never by where a sharding puts it. */
static uint64_t element_hash(uint64_t seed, int layer, int kv, int head, int token, int dim)
{
    uint64_t h = mix(seed ^ 0x9e3779b97f4a7c15ull);
    h = mix(h ^ ((uint64_t)(uint32_t)layer << 32 | (uint64_t)(uint32_t)(kv << 16 | head)));
    return mix(h ^ ((uint64_t)(uint32_t)token << 32 | (uint32_t)dim));
}

static void element_bytes(uint8_t *out, int elem_bytes, uint64_t seed, int layer, int kv,
                          int head, int token, int dim)
{
    uint64_t h = element_hash(seed, layer, kv, head, token, dim);
    for (int b = 0; b < elem_bytes; b++) {
        if (b && b % 8 == 0)
            h = mix(h);
        out[b] = (uint8_t)(h >> (8 * (b % 8)));
    }
}

void te_pattern_fill(const te_kv_layout *l, void *pool, int layer, int kv,
                     const int32_t *pages, int n_tokens, uint64_t seed)
{
    int first, heads;
    if (te_kv_rank_heads(l->n_kv_heads, l->tp, l->rank, &first, &heads))
        return;
    uint8_t *base = pool;
    size_t eb = (size_t)l->elem_bytes;
    for (int h = 0; h < heads; h++)
        for (int t = 0; t < n_tokens; t++) {
            size_t page = (size_t)pages[t / l->page_size];
            size_t slot = (size_t)(t % l->page_size);
            uint8_t *row = base + ((page * (size_t)heads + (size_t)h) * (size_t)l->page_size + slot) *
                                      (size_t)l->head_dim * eb;
            for (int d = 0; d < l->head_dim; d++)
                element_bytes(row + (size_t)d * eb, l->elem_bytes, seed, layer, kv, first + h, t, d);
        }
}

size_t te_pattern_verify(const te_kv_layout *l, const void *pool, int layer, int kv,
                         const int32_t *pages, int n_tokens, uint64_t seed, uint8_t sentinel,
                         char *why, size_t why_len)
{
    int first, heads;
    if (te_kv_rank_heads(l->n_kv_heads, l->tp, l->rank, &first, &heads)) {
        snprintf(why, why_len, "invalid layout");
        return 1;
    }
    /* Which request page index each pool page holds (-1: none). */
    int *index = malloc((size_t)l->n_pages * sizeof *index);
    if (!index) {
        snprintf(why, why_len, "out of memory");
        return 1;
    }
    for (int p = 0; p < l->n_pages; p++)
        index[p] = -1;
    int used = (n_tokens + l->page_size - 1) / l->page_size;
    for (int i = 0; i < used; i++)
        if (pages[i] >= 0 && pages[i] < l->n_pages)
            index[pages[i]] = i;

    const uint8_t *base = pool;
    size_t eb = (size_t)l->elem_bytes, bad = 0;
    uint8_t expect[64];
    for (int p = 0; p < l->n_pages; p++)
        for (int h = 0; h < heads; h++)
            for (int s = 0; s < l->page_size; s++) {
                int token = index[p] >= 0 ? index[p] * l->page_size + s : -1;
                const uint8_t *row = base + (((size_t)p * (size_t)heads + (size_t)h) *
                                                 (size_t)l->page_size + (size_t)s) *
                                                (size_t)l->head_dim * eb;
                for (int d = 0; d < l->head_dim; d++) {
                    const uint8_t *got = row + (size_t)d * eb;
                    int in_request = token >= 0 && token < n_tokens;
                    if (in_request)
                        element_bytes(expect, l->elem_bytes > 64 ? 64 : l->elem_bytes, seed,
                                      layer, kv, first + h, token, d);
                    for (size_t b = 0; b < eb; b++) {
                        uint8_t want = in_request ? expect[b % 64] : sentinel;
                        if (got[b] != want) {
                            if (!bad)
                                snprintf(why, why_len,
                                         "layer %d %s page %d head %d slot %d dim %d byte %zu: "
                                         "got 0x%02x want 0x%02x (%s)", layer, kv ? "V" : "K",
                                         p, first + h, s, d, b, got[b], want,
                                         in_request ? "request token" : "must be untouched");
                            bad++;
                        }
                    }
                }
            }
    free(index);
    return bad;
}
