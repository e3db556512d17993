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
    uint64_t counter;   /* tensors made so far: each gets its own stream */
    char *err;
    size_t errlen;
    int rc;
} maker;

/* n elements of dt uniform in [lo, hi), or NULL after the first failure. */
static void *make_seeded(maker *M, size_t n, kn_dtype dt, float lo, float hi, uint64_t seed)
{
    if (M->rc)
        return NULL;
    size_t bytes = n * kn_dtype_size(dt);
    void *p = kn_malloc(M->be, bytes);
    if (!p) {
        M->rc = KN_ERR_NOMEM;
        tm_errf(M->err, M->errlen, "out of backend memory making synthetic weights "
                "(%zu bytes; %zu already held)", bytes, M->w->bytes);
        return NULL;
    }
    int rc = kn_fill_uniform(M->be, p, dt, n, seed, lo, hi);
    if (rc) {
        kn_free(M->be, p);
        M->rc = rc;
        tm_errf(M->err, M->errlen, "kn_fill_uniform failed: %s", kn_status_str(rc));
        return NULL;
    }
    M->w->bytes += bytes;
    return p;
}

static uint64_t next_seed(maker *M)
{
    return kn_rng_seed(M->seed ^ (0xD1B54A32D192ED03ULL * ++M->counter));
}

static void *make(maker *M, size_t n, kn_dtype dt, float lo, float hi)
{
    return make_seeded(M, n, dt, lo, hi, next_seed(M));
}

/* Uniform with variance 1/fan_in: outputs keep the inputs' scale. */
static void *make_matrix(maker *M, size_t rows, size_t fan_in)
{
    float a = (float)sqrt(3.0 / (double)fan_in);
    return make(M, rows * fan_in, M->w->wdtype, -a, a);
}

static float *make_norm(maker *M, size_t n)
{
    return make(M, n, KN_F32, 0.9f, 1.1f);
}

static float *make_bias(maker *M, size_t n)
{
    return make(M, n, KN_F32, -0.05f, 0.05f);
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
    const size_t qd = (size_t)shard->n_heads * c->head_dim,
                 kvd = (size_t)shard->n_kv_heads * c->head_dim;

    uint64_t embed_seed = next_seed(&M);
    w->embed = make_seeded(&M, V * H, KN_F32, -1.0f, 1.0f, embed_seed);
    for (int l = 0; l < c->n_layers && !M.rc; l++) {
        tm_layer_weights *lw = &w->layers[l];
        lw->attn_norm = make_norm(&M, H);
        lw->mlp_norm = make_norm(&M, H);
        lw->q_w = make_matrix(&M, qd, H);
        lw->k_w = make_matrix(&M, kvd, H);
        lw->v_w = make_matrix(&M, kvd, H);
        lw->o_w = make_matrix(&M, H, qd);
        if (c->attention_bias) {
            lw->q_b = make_bias(&M, qd);
            lw->k_b = make_bias(&M, kvd);
            lw->v_b = make_bias(&M, kvd);
            if (shard->o_bias)   /* o_proj's partial sums are all-reduced */
                lw->o_b = make_bias(&M, H);
        }
        if (c->qk_norm) {
            lw->q_norm = make_norm(&M, (size_t)c->head_dim);
            lw->k_norm = make_norm(&M, (size_t)c->head_dim);
        }
        if (c->attn_sinks)
            lw->sinks = make(&M, (size_t)shard->n_heads, KN_F32, -1.0f, 1.0f);
        float a = (float)sqrt(3.0 / (double)H);
        lw->router_w = make(&M, E * H, KN_F32, -a, a);
        if (c->arch == TM_ARCH_GPT_OSS)
            lw->router_b = make_bias(&M, E);
        lw->gate_up = make_matrix(&M, El * 2 * I, H);
        lw->down = make_matrix(&M, El * H, I);
        if (c->expert_bias) {
            lw->gate_up_b = make_bias(&M, El * 2 * I);
            lw->down_b = make_bias(&M, El * H);
        }
    }
    w->final_norm = make_norm(&M, H);
    if (c->tie_word_embeddings && wdtype == KN_F32) {
        w->lm_head = w->embed;
    } else if (c->tie_word_embeddings) {
        /* the embedding's values again, rounded to the head's dtype */
        w->lm_head = make_seeded(&M, V * H, wdtype, -1.0f, 1.0f, embed_seed);
    } else {
        w->lm_head = make_matrix(&M, V, H);
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
