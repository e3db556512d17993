/* Model load and teardown: config, weights, RoPE tables. The forward pass is
 * in forward.c. */
#include "engine/model.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "engine/comm.h"
#include "engine/ep_dispatch.h"
#include "engine/model_internal.h"
#include "engine/safetensors.h"
#include "common/file.h"
#include "kernels/rope.h"
#include "common/status.h"

const tm_config *tm_model_config(const tm_model *m)
{
    return m ? &m->cfg : NULL;
}

const float *tm_model_last_logits(const tm_model *m)
{
    return m ? (const float *)m->s.logits.p : NULL;
}

const tm_shard *tm_model_shard(const tm_model *m)
{
    return m ? &m->shard : NULL;
}

int tm_model_kv_heads(const tm_model *m)
{
    return m ? m->shard.n_kv_heads : 0;
}

void tm_model_free(tm_model *m)
{
    if (!m)
        return;
    tm_ep_state_free(m->be, m->ep);
    tm_graphs_free(&m->graphs);
    tm_scratch_free(m->be, &m->s);
    tm_weights_free(&m->w);
    if (m->inv_freq)
        kn_free(m->be, m->inv_freq);
    free(m->moe);
    free(m);
}

static int load_rope(tm_model *m, char *err, size_t errlen)
{
    int half = m->cfg.head_dim / 2;
    float *host = malloc(sizeof(float) * (size_t)half);
    if (!host) {
        tn_errf(err, errlen, "out of memory");
        return TN_ERR_NOMEM;
    }
    int rc = kn_rope_inv_freq(&m->cfg.rope, host, &m->rope_scale);
    if (rc) {
        tn_errf(err, errlen, "RoPE parameters rejected: %s", tn_status_str(rc));
    } else {
        m->inv_freq = kn_malloc(m->be, sizeof(float) * (size_t)half);
        rc = m->inv_freq ? kn_copy_to_backend(m->be, m->inv_freq, host,
                                              sizeof(float) * (size_t)half)
                         : TN_ERR_NOMEM;
        if (rc)
            tn_errf(err, errlen, "cannot place RoPE tables on the backend: %s",
                    tn_status_str(rc));
    }
    free(host);
    return rc;
}

static int setup_moe(tm_model *m, char *err, size_t errlen)
{
    const tm_config *c = &m->cfg;
    m->moe = calloc((size_t)c->n_layers, sizeof(*m->moe));
    if (!m->moe) {
        tn_errf(err, errlen, "out of memory");
        return TN_ERR_NOMEM;
    }
    for (int l = 0; l < c->n_layers; l++) {
        const tm_layer_weights *lw = &m->w.layers[l];
        m->moe[l] = (kn_moe_weights){
            .n_experts = m->shard.n_experts, .expert_offset = m->shard.expert0,
            .dim = c->hidden_size, .inter = c->moe_inter,
            .wdtype = m->w.types.experts, .gate_up = lw->gate_up,
            .gate_up_bias = lw->gate_up_b, .down = lw->down, .down_bias = lw->down_b,
            .gate_up_scale = lw->gate_up_s, .down_scale = lw->down_s,
            .act = c->expert_act, .alpha = c->swiglu_alpha, .limit = c->swiglu_limit,
        };
    }
    return TN_OK;
}

/* Checks a layout against the backend and turns groups of one into "not
 * split", so a world of one is exactly the single-rank model (keep_single,
 * for tests, keeps them so their collectives still run). */
static int check_layout(const tm_parallel *par, const kn_backend *be, tm_parallel *out,
                        char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (!par)
        return TN_OK;
    *out = *par;
    if (out->tp && comm_size(out->tp) == 1 && !out->keep_single)
        out->tp = NULL;
    if (out->ep && comm_size(out->ep) == 1 && !out->keep_single)
        out->ep = NULL;
    if (!out->ep)
        out->ep_mode = TM_EP_NONE;
    if (out->ep && out->ep_mode != TM_EP_REPLICATED && out->ep_mode != TM_EP_DISPATCH) {
        tn_errf(err, errlen, "parallel layout: an EP group of %d ranks needs ep_mode "
                "TM_EP_REPLICATED or TM_EP_DISPATCH", comm_size(out->ep));
        return TN_ERR_ARG;
    }
    comm *groups[2] = {out->tp, out->ep};
    for (int i = 0; i < 2; i++) {
        if (groups[i] && comm_memory(groups[i]) != be->kind) {
            tn_errf(err, errlen, "parallel layout: the %s communicator takes %s memory but "
                    "the backend is %s", i ? "EP" : "TP",
                    comm_memory(groups[i]) == KN_BACKEND_CPU ? "host" : "device",
                    be->kind == KN_BACKEND_CPU ? "the CPU" : "CUDA");
            return TN_ERR_ARG;
        }
    }
    return TN_OK;
}

/* The storage dtypes for the option (model.h); q_attn/q_experts say which
 * of the checkpoint's matrices are quantized (0 for synthetic weights). */
static tm_weight_types resolve_types(const kn_backend *be, const tm_load_opts *opts,
                                     int q_attn, int q_experts)
{
    tm_weight_dtype want = opts ? opts->weights : TM_WEIGHTS_AUTO;
    const kn_dtype base = be->kind == KN_BACKEND_CUDA ? KN_BF16 : KN_F32;
    tm_weight_types t = {base, base, base};
    if (want == TM_WEIGHTS_F32)
        t = (tm_weight_types){KN_F32, KN_F32, KN_F32};
    else if (want == TM_WEIGHTS_BF16)
        t = (tm_weight_types){KN_BF16, KN_BF16, KN_BF16};
    else if (want == TM_WEIGHTS_FP8)
        t.attn = t.experts = KN_FP8_E4M3;
    else if (be->kind == KN_BACKEND_CUDA) {
        if (q_attn)
            t.attn = KN_FP8_E4M3;
        if (q_experts)
            t.experts = KN_FP8_E4M3;
    }
    return t;
}

/* A model with its layout, config and shard plan, before its weights; the
 * config from config_path (a directory holding config.json, or a file). */
static int model_begin(const char *config_path, int is_dir, const kn_backend *be,
                       const tm_load_opts *opts, tm_model **out, char *err, size_t errlen)
{
    if (opts && opts->weights != TM_WEIGHTS_AUTO && opts->weights != TM_WEIGHTS_F32 &&
        opts->weights != TM_WEIGHTS_BF16 && opts->weights != TM_WEIGHTS_FP8) {
        tn_errf(err, errlen, "unknown weight dtype option %d", (int)opts->weights);
        return TN_ERR_ARG;
    }
    tm_model *m = calloc(1, sizeof(*m));
    if (!m) {
        tn_errf(err, errlen, "out of memory");
        return TN_ERR_NOMEM;
    }
    m->be = be;
    int rc = check_layout(opts ? opts->par : NULL, be, &m->par, err, errlen);
    if (!rc)
        rc = is_dir ? tm_config_load(config_path, &m->cfg, err, errlen)
                    : tm_config_load_file(config_path, &m->cfg, err, errlen);
    if (!rc)
        rc = tm_shard_plan(&m->cfg, m->par.tp ? comm_rank(m->par.tp) : 0,
                           m->par.tp ? comm_size(m->par.tp) : 1,
                           m->par.ep ? comm_rank(m->par.ep) : 0,
                           m->par.ep ? comm_size(m->par.ep) : 1, &m->shard, err, errlen);
    if (rc) {
        free(m);
        return rc;
    }
    *out = m;
    return TN_OK;
}

/* RoPE tables, MoE descriptors and dispatch state once the weights are in
 * place; frees the model on failure. */
static int model_finish(tm_model *m, tm_model **out, char *err, size_t errlen)
{
    /* bf16 weights already feed bf16 operands to every product, so attention
     * on the tensor cores in bf16 costs no precision the model still has;
     * TANDEM_CUDA_ATTN_BF16=0 keeps it fp32 (kernels/backend.h). */
    const char *attn_env = getenv("TANDEM_CUDA_ATTN_BF16");
    if (m->be->kind == KN_BACKEND_CUDA && m->w.wdtype == KN_BF16 &&
        !(attn_env && strcmp(attn_env, "0") == 0)) {
        int src = kn_backend_set_attn_bf16(m->be, 1);
        if (src) {
            tn_errf(err, errlen, "cannot turn on bf16 attention: %s", tn_status_str(src));
            tm_model_free(m);
            return src;
        }
    }
    /* decode steps as CUDA graphs unless the caller turns them off */
    m->graphs.mode = m->be->kind == KN_BACKEND_CUDA ? TM_CUDA_GRAPHS_ON : TM_CUDA_GRAPHS_OFF;
    int rc = load_rope(m, err, errlen);
    if (!rc)
        rc = setup_moe(m, err, errlen);
    if (!rc && m->par.ep_mode == TM_EP_DISPATCH && !(m->ep = tm_ep_state_new())) {
        tn_errf(err, errlen, "out of memory");
        rc = TN_ERR_NOMEM;
    }
    if (rc) {
        tm_model_free(m);
        return rc;
    }
    *out = m;
    return TN_OK;
}

int tm_model_load(const char *dir, const kn_backend *be, tm_model **out,
                  char *err, size_t errlen)
{
    return tm_model_load_opts(dir, be, NULL, out, err, errlen);
}

int tm_model_load_parallel(const char *dir, const kn_backend *be, const tm_parallel *par,
                           tm_model **out, char *err, size_t errlen)
{
    tm_load_opts opts = {.par = par};
    return tm_model_load_opts(dir, be, &opts, out, err, errlen);
}

int tm_model_load_opts(const char *dir, const kn_backend *be, const tm_load_opts *opts,
                       tm_model **out, char *err, size_t errlen)
{
    if (out)
        *out = NULL;
    if (!dir || !be || !out) {
        tn_errf(err, errlen, "tm_model_load: missing argument");
        return TN_ERR_ARG;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        tn_errf(err, errlen, "model directory %s: %s", dir, strerror(errno));
        return TN_ERR_ARG;
    }
    if (!S_ISDIR(sb.st_mode)) {
        tn_errf(err, errlen, "model directory %s is not a directory", dir);
        return TN_ERR_ARG;
    }
    tm_model *m = NULL;
    int rc = model_begin(dir, 1, be, opts, &m, err, errlen);
    if (rc)
        return rc;
    tm_safetensors st;
    rc = tm_st_open_dir(&st, dir, err, errlen);
    if (rc) {
        free(m);
        return rc;
    }
    char why[512] = "";
    int q_attn, q_experts;
    tm_weights_quantized(&st, &q_attn, &q_experts);
    tm_weight_types types = resolve_types(be, opts, q_attn, q_experts);
    rc = tm_weights_load_shard(&m->w, &m->cfg, &st, be, &m->shard, &types, why, sizeof(why));
    tm_st_close(&st);
    if (rc) {
        tn_errf(err, errlen, "%s: %s", dir, why);
        free(m);
        return rc;
    }
    return model_finish(m, out, err, errlen);
}

int tm_model_synthetic(const char *config_path, const kn_backend *be,
                       const tm_load_opts *opts, tm_model **out, char *err, size_t errlen)
{
    if (out)
        *out = NULL;
    if (!config_path || !be || !out) {
        tn_errf(err, errlen, "tm_model_synthetic: missing argument");
        return TN_ERR_ARG;
    }
    struct stat sb;
    if (stat(config_path, &sb) != 0) {
        tn_errf(err, errlen, "config %s: %s", config_path, strerror(errno));
        return TN_ERR_ARG;
    }
    tm_model *m = NULL;
    int rc = model_begin(config_path, S_ISDIR(sb.st_mode), be, opts, &m, err, errlen);
    if (rc)
        return rc;
    char why[512] = "";
    tm_weight_types types = resolve_types(be, opts, 0, 0);
    rc = tm_weights_synthetic(&m->w, &m->cfg, be, &m->shard, &types, opts ? opts->seed : 0,
                              why, sizeof(why));
    if (rc) {
        tn_errf(err, errlen, "%s: %s", config_path, why);
        free(m);
        return rc;
    }
    return model_finish(m, out, err, errlen);
}

kn_dtype tm_model_weight_dtype(const tm_model *m)
{
    return m ? m->w.wdtype : KN_F32;
}

kn_dtype tm_model_expert_dtype(const tm_model *m)
{
    return m ? m->w.types.experts : KN_F32;
}

kn_dtype tm_model_attn_dtype(const tm_model *m)
{
    return m ? m->w.types.attn : KN_F32;
}

size_t tm_model_weight_bytes(const tm_model *m)
{
    return m ? m->w.bytes : 0;
}

void tm_model_trim(tm_model *m)
{
    if (!m)
        return;
    kn_backend_sync(m->be);
    tm_graphs_drop(&m->graphs);
    tm_scratch_free(m->be, &m->s);
    kn_backend_trim(m->be);
}

void tm_model_set_cuda_graphs(tm_model *m, tm_cuda_graphs mode)
{
    if (!m)
        return;
    if (mode != m->graphs.mode) {
        kn_backend_sync(m->be);
        tm_graphs_drop(&m->graphs);
    }
    m->graphs.mode = mode;
}

int tm_cuda_graphs_parse(const char *s, tm_cuda_graphs *out)
{
    if (s && strcmp(s, "on") == 0)
        *out = TM_CUDA_GRAPHS_ON;
    else if (s && strcmp(s, "off") == 0)
        *out = TM_CUDA_GRAPHS_OFF;
    else
        return -1;
    return 0;
}

tm_graph_stats tm_model_graph_stats(const tm_model *m)
{
    tm_graph_stats none = {0, 0, 0, 0};
    return m ? m->graphs.stats : none;
}

void tm_model_set_stopwatch(tm_model *m, struct kn_stopwatch *sw)
{
    if (m)
        m->sw = sw;
}

const char *tm_prof_group_name(int group)
{
    static const char *const names[TM_PROF_N_GROUPS] = {
        [TM_PROF_ATTN_PROJ] = "q/k/v/o projections",
        [TM_PROF_ATTENTION] = "attention kernel",
        [TM_PROF_ROPE_KV] = "qk-norm, RoPE, KV append",
        [TM_PROF_ROUTER] = "router + top-k",
        [TM_PROF_EXPERTS] = "MoE experts",
        [TM_PROF_NORM_ADD] = "final norm, embedding",
        [TM_PROF_HEAD] = "final norm + LM head",
    };
    return group >= 0 && group < TM_PROF_N_GROUPS ? names[group] : "?";
}
