/* The cache of CUDA graphs of decode steps (forward.c's bucketed decode
 * path): one graph per (batch bucket, page-table capacity, KV cache,
 * attention precision), recorded on the second step that needs it (the
 * first runs eagerly, so every op's one-time set-up -- cuBLASLt plans,
 * side streams -- has happened outside the capture) and replayed after.
 * Internal to engine/. */
#ifndef TANDEM_ENGINE_DECODE_GRAPH_H
#define TANDEM_ENGINE_DECODE_GRAPH_H
#include <stdint.h>
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "kernels/backend.h"

typedef enum {
    TM_GRAPH_SEEN = 0,  /* ran eagerly once; the next step records it */
    TM_GRAPH_READY,     /* recorded: replayed from now on */
    TM_GRAPH_FAILED,    /* recording failed: this key runs eagerly */
} tm_graph_state;

typedef struct tm_decode_graph {
    int bucket, pages_cap, attn_bf16;
    uint64_t kv_sig;    /* tm_graph_kv_sig of the cache the graph reads */
    tm_graph_state state;
    kn_graph *g;
} tm_decode_graph;

typedef struct tm_decode_graphs {
    tm_cuda_graphs mode;
    tm_decode_graph *e;
    int n, cap;
    tm_graph_stats stats;
} tm_decode_graphs;

/* A signature of everything about a cache that a recorded step bakes in:
 * every layer's pool addresses, the dtype and the page geometry. */
uint64_t tm_graph_kv_sig(const tm_kv_cache *kv);
/* The entry for a key, added (state TM_GRAPH_SEEN, *added = 1) when new;
 * NULL when out of memory. Entries of another cache are dropped first: all
 * entries read one cache. No recorded graph may be in flight. */
tm_decode_graph *tm_graphs_get(tm_decode_graphs *gs, int bucket, int pages_cap, int attn_bf16,
                               uint64_t kv_sig, int *added);
/* Forgets every entry (their graphs point at buffers about to change). */
void tm_graphs_drop(tm_decode_graphs *gs);
/* tm_graphs_drop and the entry array itself. */
void tm_graphs_free(tm_decode_graphs *gs);
#endif
