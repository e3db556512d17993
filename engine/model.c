/* Model load and teardown: config, weights, RoPE tables. The forward pass is
 * in forward.c. */
#include "engine/model.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "engine/model_internal.h"
#include "engine/safetensors.h"
#include "engine/util.h"
#include "kernels/rope.h"
#include "kernels/status.h"

const tm_config *tm_model_config(const tm_model *m)
{
    return m ? &m->cfg : NULL;
}

void tm_model_free(tm_model *m)
{
    if (!m)
        return;
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
        tm_errf(err, errlen, "out of memory");
        return KN_ERR_NOMEM;
    }
    int rc = kn_rope_inv_freq(&m->cfg.rope, host, &m->rope_scale);
    if (rc) {
        tm_errf(err, errlen, "RoPE parameters rejected: %s", kn_status_str(rc));
    } else {
        m->inv_freq = kn_malloc(m->be, sizeof(float) * (size_t)half);
        rc = m->inv_freq ? kn_copy_to_backend(m->be, m->inv_freq, host,
                                              sizeof(float) * (size_t)half)
                         : KN_ERR_NOMEM;
        if (rc)
            tm_errf(err, errlen, "cannot place RoPE tables on the backend: %s",
                    kn_status_str(rc));
    }
    free(host);
    return rc;
}

static int setup_moe(tm_model *m, char *err, size_t errlen)
{
    const tm_config *c = &m->cfg;
    m->moe = calloc((size_t)c->n_layers, sizeof(*m->moe));
    if (!m->moe) {
        tm_errf(err, errlen, "out of memory");
        return KN_ERR_NOMEM;
    }
    for (int l = 0; l < c->n_layers; l++) {
        const tm_layer_weights *lw = &m->w.layers[l];
        m->moe[l] = (kn_moe_weights){
            .n_experts = c->n_experts, .expert_offset = 0,
            .dim = c->hidden_size, .inter = c->moe_inter,
            .wdtype = m->w.wdtype, .gate_up = lw->gate_up, .gate_up_bias = lw->gate_up_b,
            .down = lw->down, .down_bias = lw->down_b,
            .act = c->expert_act, .alpha = c->swiglu_alpha, .limit = c->swiglu_limit,
        };
    }
    return KN_OK;
}

static kn_dtype resolve_dtype(const kn_backend *be, const tm_load_opts *opts)
{
    tm_weight_dtype want = opts ? opts->weights : TM_WEIGHTS_AUTO;
    if (want == TM_WEIGHTS_F32)
        return KN_F32;
    if (want == TM_WEIGHTS_BF16)
        return KN_BF16;
    return be->kind == KN_BACKEND_CUDA ? KN_BF16 : KN_F32;
}

static int check_opts(const tm_load_opts *opts, char *err, size_t errlen)
{
    if (opts && opts->weights != TM_WEIGHTS_AUTO && opts->weights != TM_WEIGHTS_F32 &&
        opts->weights != TM_WEIGHTS_BF16) {
        tm_errf(err, errlen, "unknown weight dtype option %d", (int)opts->weights);
        return KN_ERR_ARG;
    }
    return KN_OK;
}

/* RoPE tables and MoE descriptors, once config and weights are in place;
 * frees the model on failure. */
static int finish_model(tm_model *m, tm_model **out, char *err, size_t errlen)
{
    int rc = load_rope(m, err, errlen);
    if (!rc)
        rc = setup_moe(m, err, errlen);
    if (rc) {
        tm_model_free(m);
        return rc;
    }
    *out = m;
    return KN_OK;
}

int tm_model_load(const char *dir, const kn_backend *be, tm_model **out,
                  char *err, size_t errlen)
{
    return tm_model_load_opts(dir, be, NULL, out, err, errlen);
}

int tm_model_load_opts(const char *dir, const kn_backend *be, const tm_load_opts *opts,
                       tm_model **out, char *err, size_t errlen)
{
    if (out)
        *out = NULL;
    if (!dir || !be || !out) {
        tm_errf(err, errlen, "tm_model_load: missing argument");
        return KN_ERR_ARG;
    }
    if (check_opts(opts, err, errlen))
        return KN_ERR_ARG;
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        tm_errf(err, errlen, "model directory %s: %s", dir, strerror(errno));
        return KN_ERR_ARG;
    }
    if (!S_ISDIR(sb.st_mode)) {
        tm_errf(err, errlen, "model directory %s is not a directory", dir);
        return KN_ERR_ARG;
    }
    tm_model *m = calloc(1, sizeof(*m));
    if (!m) {
        tm_errf(err, errlen, "out of memory");
        return KN_ERR_NOMEM;
    }
    m->be = be;
    int rc = tm_config_load(dir, &m->cfg, err, errlen);
    if (rc) {
        free(m);
        return rc;
    }
    tm_safetensors st;
    rc = tm_st_open_dir(&st, dir, err, errlen);
    if (rc) {
        free(m);
        return rc;
    }
    char why[512] = "";
    rc = tm_weights_load(&m->w, &m->cfg, &st, be, resolve_dtype(be, opts), why, sizeof(why));
    tm_st_close(&st);
    if (rc) {
        tm_errf(err, errlen, "%s: %s", dir, why);
        free(m);
        return rc;
    }
    return finish_model(m, out, err, errlen);
}

int tm_model_synthetic(const char *config_path, const kn_backend *be,
                       const tm_load_opts *opts, tm_model **out, char *err, size_t errlen)
{
    if (out)
        *out = NULL;
    if (!config_path || !be || !out) {
        tm_errf(err, errlen, "tm_model_synthetic: missing argument");
        return KN_ERR_ARG;
    }
    if (check_opts(opts, err, errlen))
        return KN_ERR_ARG;
    struct stat sb;
    if (stat(config_path, &sb) != 0) {
        tm_errf(err, errlen, "config %s: %s", config_path, strerror(errno));
        return KN_ERR_ARG;
    }
    tm_model *m = calloc(1, sizeof(*m));
    if (!m) {
        tm_errf(err, errlen, "out of memory");
        return KN_ERR_NOMEM;
    }
    m->be = be;
    int rc = S_ISDIR(sb.st_mode) ? tm_config_load(config_path, &m->cfg, err, errlen)
                                 : tm_config_load_file(config_path, &m->cfg, err, errlen);
    if (rc) {
        free(m);
        return rc;
    }
    char why[512] = "";
    rc = tm_weights_synthetic(&m->w, &m->cfg, be, resolve_dtype(be, opts),
                              opts ? opts->seed : 0, why, sizeof(why));
    if (rc) {
        tm_errf(err, errlen, "%s: %s", config_path, why);
        free(m);
        return rc;
    }
    return finish_model(m, out, err, errlen);
}

kn_dtype tm_model_weight_dtype(const tm_model *m)
{
    return m ? m->w.wdtype : KN_F32;
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
    tm_scratch_free(m->be, &m->s);
    kn_backend_trim(m->be);
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
        [TM_PROF_NORM_ADD] = "norms, adds, embedding",
        [TM_PROF_HEAD] = "final norm + LM head",
    };
    return group >= 0 && group < TM_PROF_N_GROUPS ? names[group] : "?";
}
