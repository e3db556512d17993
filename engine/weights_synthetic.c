/* Random weights of a config's shapes, made on the backend (weights.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "engine/util.h"
#include "engine/weights.h"
#include "kernels/fill.h"
#include "kernels/sampling.h"
#include "kernels/status.h"

typedef struct maker {
    const kn_backend *be;
    tm_weights *w;
    uint64_t seed;
    uint64_t counter;   /* tensors of the full model so far: each its own stream */
    char *err;
    size_t errlen;
    int rc;
} maker;

/* The stream of the next tensor of the full model. Every rank draws the
 * same sequence of seeds (also for tensors it does not hold), so a shard's
 * tensors are slices of the single-rank model's. */
static uint64_t next_seed(maker *M)
{
    return kn_rng_seed(M->seed ^ (0xD1B54A32D192ED03ULL * ++M->counter));
}

static void *alloc_w(maker *M, size_t bytes)
{
    if (M->rc)
        return NULL;
    void *p = kn_malloc(M->be, bytes);
    if (!p) {
        M->rc = KN_ERR_NOMEM;
        tm_errf(M->err, M->errlen, "out of backend memory making synthetic weights "
                "(%zu bytes; %zu already held)", bytes, M->w->bytes);
        return NULL;
    }
    M->w->bytes += bytes;
    return p;
}

static void fill_at(maker *M, void *p, kn_dtype dt, size_t n, uint64_t seed, size_t first,
                    float lo, float hi)
{
    if (M->rc)
        return;
    int rc = kn_fill_uniform_at(M->be, p, dt, n, seed, first, lo, hi);
    if (rc) {
        M->rc = rc;
        tm_errf(M->err, M->errlen, "kn_fill_uniform failed: %s", kn_status_str(rc));
    }
}

/* Rows [row0, row0 + n_rows) of a full tensor of rows of row_len elements
 * drawn from stream `seed`, uniform in [lo, hi), as dt. */
static void *make_rows(maker *M, uint64_t seed, size_t row_len, size_t row0, size_t n_rows,
                       kn_dtype dt, float lo, float hi)
{
    size_t n = n_rows * row_len;
    void *p = alloc_w(M, n * kn_dtype_size(dt));
    fill_at(M, p, dt, n, seed, row0 * row_len, lo, hi);
    return p;
}

/* Columns [col0, col0 + n_cols) of a full [rows][cols] tensor (o_proj's
 * inputs from this rank's heads). */
static void *make_cols(maker *M, uint64_t seed, size_t rows, size_t cols, size_t col0,
                       size_t n_cols, kn_dtype dt, float lo, float hi)
{
    if (col0 == 0 && n_cols == cols)   /* the whole matrix: one fill */
        return make_rows(M, seed, cols, 0, rows, dt, lo, hi);
    size_t es = kn_dtype_size(dt);
    char *p = alloc_w(M, rows * n_cols * es);
    for (size_t r = 0; p && r < rows && !M->rc; r++)
        fill_at(M, p + r * n_cols * es, dt, n_cols, seed, r * cols + col0, lo, hi);
    return p;
}

/* A whole f32 tensor of n elements with its own stream. */
static float *make(maker *M, size_t n, float lo, float hi)
{
    return make_rows(M, next_seed(M), n, 0, 1, KN_F32, lo, hi);
}

static float *make_norm(maker *M, size_t n)
{
    return make(M, n, 0.9f, 1.1f);
}

/* Biases: rows [row0, row0 + n) of a full vector. */
static float *make_bias_rows(maker *M, size_t row0, size_t n)
{
    return make_rows(M, next_seed(M), 1, row0, n, KN_F32, -0.05f, 0.05f);
}

/* Uniform with variance 1/fan_in (the full fan-in): outputs keep the
 * inputs' scale. Rows [row0, row0 + n_rows) of a [*][fan_in] matrix. */
static void *make_matrix_rows(maker *M, size_t fan_in, size_t row0, size_t n_rows)
{
    float a = (float)sqrt(3.0 / (double)fan_in);
    return make_rows(M, next_seed(M), fan_in, row0, n_rows, M->w->wdtype, -a, a);
}

/* Bytes tm_weights_synthetic will allocate for shard sh. */
static double synthetic_bytes(const tm_config *c, const tm_shard *sh, kn_dtype wdtype)
{
    double wb = (double)kn_dtype_size(wdtype), H = c->hidden_size, V = c->vocab_size;
    double E = c->n_experts, El = sh->n_experts, I = c->moe_inter;
    double qd = (double)sh->n_heads * c->head_dim, kvd = (double)sh->n_kv_heads * c->head_dim;
    double layer = 4 * 2 * H + wb * (2 * qd * H + 2 * kvd * H) + 4 * E * H + wb * 3 * El * I * H;
    if (c->attention_bias)
        layer += 4 * (qd + 2 * kvd + (sh->o_bias ? H : 0));
    if (c->qk_norm)
        layer += 4 * 2.0 * c->head_dim;
    if (c->attn_sinks)
        layer += 4.0 * sh->n_heads;
    if (c->arch == TM_ARCH_GPT_OSS)
        layer += 4 * E;
    if (c->expert_bias)
        layer += 4 * El * (2 * I + H);
    double head = c->tie_word_embeddings && wdtype == KN_F32 ? 0 : wb * V * H;
    return 4 * V * H + layer * c->n_layers + 4 * H + head;
}

int tm_weights_synthetic(tm_weights *w, const tm_config *c, const kn_backend *be,
                         const tm_shard *shard, kn_dtype wdtype, uint64_t seed, char *err,
                         size_t errlen)
{
    memset(w, 0, sizeof(*w));
    if (wdtype != KN_F32 && wdtype != KN_BF16) {
        tm_errf(err, errlen, "weight dtype %d is not f32 or bf16", (int)wdtype);
        return KN_ERR_ARG;
    }
    tm_shard full;
    if (!shard) {
        tm_shard_full(c, &full);
        shard = &full;
    }
    /* Host memory is overcommitted: a model larger than the machine would
     * not fail at malloc but get the process killed while filling it. */
    double need = synthetic_bytes(c, shard, wdtype);
    if (be->kind == KN_BACKEND_CPU) {
        double avail = (double)sysconf(_SC_AVPHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
        if (avail > 0 && need > 0.9 * avail) {
            tm_errf(err, errlen, "%s weights of this config need %.1f GB; only %.1f GB of "
                    "memory is free", kn_dtype_name(wdtype), need / 1e9, avail / 1e9);
            return KN_ERR_NOMEM;
        }
    }
    w->be = be;
    w->n_layers = c->n_layers;
    w->wdtype = wdtype;
    w->layers = calloc((size_t)c->n_layers, sizeof(*w->layers));
    if (!w->layers) {
        tm_errf(err, errlen, "out of memory");
        memset(w, 0, sizeof(*w));
        return KN_ERR_NOMEM;
    }
    maker M = {be, w, seed, 0, err, errlen, 0};
    const size_t H = (size_t)c->hidden_size, V = (size_t)c->vocab_size;
    /* this rank's heads and experts (all of them on one rank); the router
     * scores every expert */
    const size_t E = (size_t)c->n_experts, El = (size_t)shard->n_experts,
                 I = (size_t)c->moe_inter;
    const size_t hd = (size_t)c->head_dim, nh = (size_t)c->n_heads;
    const size_t q0 = (size_t)shard->head0 * hd, nq = (size_t)shard->n_heads * hd;
    const size_t k0 = (size_t)shard->kv_head0 * hd, nk = (size_t)shard->n_kv_heads * hd;
    const size_t qd_full = nh * hd, e0 = (size_t)shard->expert0;

    uint64_t embed_seed = next_seed(&M);
    w->embed = make_rows(&M, embed_seed, H, 0, V, KN_F32, -1.0f, 1.0f);
    for (int l = 0; l < c->n_layers && !M.rc; l++) {
        tm_layer_weights *lw = &w->layers[l];
        lw->attn_norm = make_norm(&M, H);
        lw->mlp_norm = make_norm(&M, H);
        lw->q_w = make_matrix_rows(&M, H, q0, nq);
        lw->k_w = make_matrix_rows(&M, H, k0, nk);
        lw->v_w = make_matrix_rows(&M, H, k0, nk);
        float ao = (float)sqrt(3.0 / (double)qd_full);
        lw->o_w = make_cols(&M, next_seed(&M), H, qd_full, q0, nq, wdtype, -ao, ao);
        if (c->attention_bias) {
            lw->q_b = make_bias_rows(&M, q0, nq);
            lw->k_b = make_bias_rows(&M, k0, nk);
            lw->v_b = make_bias_rows(&M, k0, nk);
            uint64_t ob = next_seed(&M);   /* drawn by every rank, held by one */
            if (shard->o_bias)   /* o_proj's partial sums are all-reduced */
                lw->o_b = make_rows(&M, ob, 1, 0, H, KN_F32, -0.05f, 0.05f);
        }
        if (c->qk_norm) {
            lw->q_norm = make_norm(&M, hd);
            lw->k_norm = make_norm(&M, hd);
        }
        if (c->attn_sinks)
            lw->sinks = make_rows(&M, next_seed(&M), 1, (size_t)shard->head0,
                                  (size_t)shard->n_heads, KN_F32, -1.0f, 1.0f);
        float a = (float)sqrt(3.0 / (double)H);
        lw->router_w = make(&M, E * H, -a, a);
        if (c->arch == TM_ARCH_GPT_OSS)
            lw->router_b = make_bias_rows(&M, 0, E);
        lw->gate_up = make_matrix_rows(&M, H, e0 * 2 * I, El * 2 * I);
        lw->down = make_matrix_rows(&M, I, e0 * H, El * H);
        if (c->expert_bias) {
            lw->gate_up_b = make_bias_rows(&M, e0 * 2 * I, El * 2 * I);
            lw->down_b = make_bias_rows(&M, e0 * H, El * H);
        }
    }
    w->final_norm = make_norm(&M, H);
    if (c->tie_word_embeddings && wdtype == KN_F32) {
        w->lm_head = w->embed;
    } else if (c->tie_word_embeddings) {
        /* the embedding's values again, rounded to the head's dtype */
        w->lm_head = make_rows(&M, embed_seed, H, 0, V, wdtype, -1.0f, 1.0f);
    } else {
        w->lm_head = make_matrix_rows(&M, H, 0, V);
    }
    if (!M.rc)
        M.rc = kn_backend_sync(be);
    if (M.rc) {
        if (!err || !err[0])
            tm_errf(err, errlen, "synthetic weights: %s", kn_status_str(M.rc));
        tm_weights_free(w);
        return M.rc;
    }
    return KN_OK;
}
