/* Random weights of a config's shapes, made on the backend (weights.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/file.h"
#include "engine/weights.h"
#include "kernels/fp8.h"
#include "kernels/fill.h"
#include "kernels/sampling.h"
#include "common/status.h"

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
        M->rc = TN_ERR_NOMEM;
        tn_errf(M->err, M->errlen, "out of backend memory making synthetic weights "
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
        tn_errf(M->err, M->errlen, "kn_fill_uniform failed: %s", tn_status_str(rc));
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

/* FP8 rows of a stack of [rows][cols] matrices, uniform in [-a, a): codes
 * uniform over e4m3's range (the padding columns too: finite codes), one
 * block scale a / 448 everywhere. Rows [row0, row0 + n_rows) of the
 * stack's stream, whose rows are kn_fp8_ld(cols) codes long. */
static void *make_fp8_rows(maker *M, uint64_t seed, size_t rows, size_t cols, size_t row0,
                           size_t n_rows, float a, float **scale)
{
    const size_t ld = kn_fp8_ld(cols);
    *scale = NULL;
    void *p = make_rows(M, seed, ld, row0, n_rows, KN_FP8_E4M3, -KN_E4M3_MAX, KN_E4M3_MAX);
    size_t n_mats = (n_rows + rows - 1) / rows;   /* n_rows is whole matrices or < one */
    size_t ns = n_mats * kn_fp8_scale_count(n_rows < rows ? n_rows : rows, cols);
    float *s = alloc_w(M, ns * sizeof(float));
    fill_at(M, s, KN_F32, ns, 0, 0, a / KN_E4M3_MAX, a / KN_E4M3_MAX);
    *scale = s;
    return p;
}

/* Uniform with variance 1/fan_in (the full fan-in): outputs keep the
 * inputs' scale. Rows [row0, row0 + n_rows) of a [*][fan_in] matrix,
 * stored as dt; `rows` is one matrix's rows (a stack of experts is many). */
static void *make_matrix_rows(maker *M, kn_dtype dt, size_t fan_in, size_t rows, size_t row0,
                              size_t n_rows, float **scale)
{
    float a = (float)sqrt(3.0 / (double)fan_in);
    *scale = NULL;
    if (dt == KN_FP8_E4M3)
        return make_fp8_rows(M, next_seed(M), rows, fan_in, row0, n_rows, a, scale);
    return make_rows(M, next_seed(M), fan_in, row0, n_rows, dt, -a, a);
}

/* Bytes tm_weights_synthetic will allocate for shard sh. */
/* Bytes of one stored [rows][cols] matrix of dt (FP8: padded codes and
 * block scales). */
static double matrix_bytes(kn_dtype dt, double rows, double cols)
{
    if (dt == KN_FP8_E4M3)
        return (double)kn_fp8_data_bytes((size_t)rows, (size_t)cols) +
               4.0 * (double)kn_fp8_scale_count((size_t)rows, (size_t)cols);
    return (double)kn_dtype_size(dt) * rows * cols;
}

static double synthetic_bytes(const tm_config *c, const tm_shard *sh, const tm_weight_types *t)
{
    const kn_dtype wdtype = t->head;
    double H = c->hidden_size, V = c->vocab_size;
    double E = c->n_experts, El = sh->n_experts, I = c->moe_inter;
    double qd = (double)sh->n_heads * c->head_dim, kvd = (double)sh->n_kv_heads * c->head_dim;
    double layer = 4 * 2 * H + matrix_bytes(t->attn, qd, H) + matrix_bytes(t->attn, H, qd) +
                   2 * matrix_bytes(t->attn, kvd, H) + 4 * E * H +
                   El * (matrix_bytes(t->experts, 2 * I, H) + matrix_bytes(t->experts, H, I));
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
    double head = c->tie_word_embeddings && wdtype == KN_F32 ? 0 : matrix_bytes(wdtype, V, H);
    return 4 * V * H + layer * c->n_layers + 4 * H + head;
}

int tm_weights_synthetic(tm_weights *w, const tm_config *c, const kn_backend *be,
                         const tm_shard *shard, const tm_weight_types *types, uint64_t seed,
                         char *err, size_t errlen)
{
    memset(w, 0, sizeof(*w));
    if (!types || (types->head != KN_F32 && types->head != KN_BF16) ||
        (types->attn != KN_F32 && types->attn != KN_BF16 && types->attn != KN_FP8_E4M3) ||
        (types->experts != KN_F32 && types->experts != KN_BF16 &&
         types->experts != KN_FP8_E4M3)) {
        tn_errf(err, errlen, "bad weight dtypes for synthetic weights");
        return TN_ERR_ARG;
    }
    const kn_dtype wdtype = types->head;
    tm_shard full;
    if (!shard) {
        tm_shard_full(c, &full);
        shard = &full;
    }
    /* Host memory is overcommitted: a model larger than the machine would
     * not fail at malloc but get the process killed while filling it. */
    double need = synthetic_bytes(c, shard, types);
    if (be->kind == KN_BACKEND_CPU) {
        double avail = (double)sysconf(_SC_AVPHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
        if (avail > 0 && need > 0.9 * avail) {
            tn_errf(err, errlen, "%s weights of this config need %.1f GB; only %.1f GB of "
                    "memory is free", kn_dtype_name(wdtype), need / 1e9, avail / 1e9);
            return TN_ERR_NOMEM;
        }
    }
    w->be = be;
    w->n_layers = c->n_layers;
    w->wdtype = wdtype;
    w->types = *types;
    w->layers = calloc((size_t)c->n_layers, sizeof(*w->layers));
    if (!w->layers) {
        tn_errf(err, errlen, "out of memory");
        memset(w, 0, sizeof(*w));
        return TN_ERR_NOMEM;
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
        const kn_dtype at = types->attn, et = types->experts;
        lw->q_w = make_matrix_rows(&M, at, H, nq, q0, nq, &lw->q_s);
        lw->k_w = make_matrix_rows(&M, at, H, nk, k0, nk, &lw->k_s);
        lw->v_w = make_matrix_rows(&M, at, H, nk, k0, nk, &lw->v_s);
        float ao = (float)sqrt(3.0 / (double)qd_full);
        if (at == KN_FP8_E4M3) {
            /* a rank's columns of o_proj are its own FP8 matrix [H][nq]: the
             * codes of the full matrix's stream are not sliced (speed does
             * not depend on which values a rank holds) */
            lw->o_w = make_fp8_rows(&M, next_seed(&M), H, nq, 0, H, ao, &lw->o_s);
        } else {
            lw->o_w = make_cols(&M, next_seed(&M), H, qd_full, q0, nq, at, -ao, ao);
        }
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
        lw->gate_up = make_matrix_rows(&M, et, H, 2 * I, e0 * 2 * I, El * 2 * I,
                                       &lw->gate_up_s);
        lw->down = make_matrix_rows(&M, et, I, H, e0 * H, El * H, &lw->down_s);
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
        float *unused;
        w->lm_head = make_matrix_rows(&M, wdtype, H, V, 0, V, &unused);
    }
    if (!M.rc)
        M.rc = kn_backend_sync(be);
    if (M.rc) {
        if (!err || !err[0])
            tn_errf(err, errlen, "synthetic weights: %s", tn_status_str(M.rc));
        tm_weights_free(w);
        return M.rc;
    }
    return TN_OK;
}
