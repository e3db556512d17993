/* The tm_model struct, shared by model.c (load/free) and forward.c. */
#ifndef TANDEM_ENGINE_MODEL_INTERNAL_H
#define TANDEM_ENGINE_MODEL_INTERNAL_H
#include <stddef.h>
#include <stdint.h>
#include "engine/decode_graph.h"
#include "engine/model.h"
#include "engine/parallel.h"
#include "engine/weights.h"
#include "kernels/moe.h"

/* A buffer grown on demand; `host` ones live in host memory whatever the
 * backend (the batch descriptors are built there before upload). */
typedef struct tm_buf {
    void *p;
    size_t cap;
} tm_buf;

/* Per-forward working memory, kept between calls so steady-state decode
 * allocates nothing. Backend buffers unless marked host. */
typedef struct tm_scratch {
    tm_buf x, xn, q, k, v, att, tmp;      /* [rows][...] activations */
    tm_buf router, eidx, ew;              /* [rows][n_experts], [rows][k] */
    tm_buf ids, pos;                      /* [rows] */
    tm_buf last_rows, last_h;             /* [seqs], [seqs][dim] */
    tm_buf logits;                        /* [rows or seqs][vocab] */
    tm_buf q_offset, kv_len, page_table;  /* kn_seq_batch arrays */
    tm_buf h_ids, h_pos, h_last, h_q_offset, h_kv_len, h_page_table; /* host */
    /* the window layers' page table when the cache has a window pool
     * (engine/kv_cache.h): the same pages through win_slot */
    tm_buf win_page_table, h_win_page_table;
} tm_scratch;

struct tm_model {
    tm_config cfg;
    const kn_backend *be;
    tm_weights w;
    kn_moe_weights *moe;   /* [n_layers] descriptors over w.layers */
    float *inv_freq;       /* backend [head_dim / 2] */
    float rope_scale;      /* YaRN attention scaling (1 for plain RoPE) */
    tm_scratch s;
    tm_shard shard;        /* this rank's slice; the whole model on one rank */
    tm_parallel par;       /* borrowed communicators; all NULL on one rank */
    struct tm_ep_state *ep; /* DP-EP dispatch buffers (ep_dispatch.c) or NULL */
    struct kn_stopwatch *sw;  /* per-group timing, or NULL */
    tm_decode_graphs graphs;  /* decode-step CUDA graphs (decode_graph.h) */
};

/* Frees every scratch buffer (forward.c); the decode graphs, which point
 * into them, go too. */
void tm_scratch_free(const kn_backend *be, tm_scratch *s);

#endif
