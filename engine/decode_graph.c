/* The decode-step graph cache (decode_graph.h). */
#include "engine/decode_graph.h"

#include <stdlib.h>

static uint64_t fnv_mix(uint64_t h, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        h ^= (v >> (8 * i)) & 0xffu;
        h *= 1099511628211ull;
    }
    return h;
}

uint64_t tm_graph_kv_sig(const tm_kv_cache *kv)
{
    uint64_t h = 1469598103934665603ull;
    h = fnv_mix(h, (uint64_t)kv->dtype);
    h = fnv_mix(h, (uint64_t)kv->n_layers);
    h = fnv_mix(h, (uint64_t)kv->page_size);
    h = fnv_mix(h, (uint64_t)kv->n_pages);
    h = fnv_mix(h, (uint64_t)kv->n_win_slots);
    for (int l = 0; l < kv->n_layers; l++) {
        h = fnv_mix(h, (uint64_t)(uintptr_t)kv->k[l]);
        h = fnv_mix(h, (uint64_t)(uintptr_t)kv->v[l]);
    }
    return h;
}

tm_decode_graph *tm_graphs_get(tm_decode_graphs *gs, int bucket, int pages_cap, int attn_bf16,
                               uint64_t kv_sig, int *added)
{
    *added = 0;
    /* a step over another cache: the one the recorded graphs read is most
     * likely gone (a benchmark's next shape), so they go too */
    if (gs->n > 0 && gs->e[0].kv_sig != kv_sig)
        tm_graphs_drop(gs);
    for (int i = 0; i < gs->n; i++) {
        tm_decode_graph *e = &gs->e[i];
        if (e->bucket == bucket && e->pages_cap == pages_cap && e->attn_bf16 == attn_bf16 &&
            e->kv_sig == kv_sig)
            return e;
    }
    if (gs->n == gs->cap) {
        int cap = gs->cap ? 2 * gs->cap : 16;
        tm_decode_graph *ne = realloc(gs->e, (size_t)cap * sizeof *ne);
        if (!ne)
            return NULL;
        gs->e = ne;
        gs->cap = cap;
    }
    tm_decode_graph *e = &gs->e[gs->n++];
    *e = (tm_decode_graph){.bucket = bucket, .pages_cap = pages_cap, .attn_bf16 = attn_bf16,
                           .kv_sig = kv_sig, .state = TM_GRAPH_SEEN, .g = NULL};
    *added = 1;
    return e;
}

void tm_graphs_drop(tm_decode_graphs *gs)
{
    for (int i = 0; i < gs->n; i++)
        kn_graph_free(gs->e[i].g);
    gs->n = 0;
}

void tm_graphs_free(tm_decode_graphs *gs)
{
    tm_graphs_drop(gs);
    free(gs->e);
    gs->e = NULL;
    gs->cap = 0;
}
