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
            .gate_up = lw->gate_up, .gate_up_bias = lw->gate_up_b,
            .down = lw->down, .down_bias = lw->down_b,
            .act = c->expert_act, .alpha = c->swiglu_alpha, .limit = c->swiglu_limit,
        };
    }
    return KN_OK;
}

int tm_model_load(const char *dir, const kn_backend *be, tm_model **out,
                  char *err, size_t errlen)
{
    if (out)
        *out = NULL;
    if (!dir || !be || !out) {
        tm_errf(err, errlen, "tm_model_load: missing argument");
        return KN_ERR_ARG;
    }
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
    rc = tm_weights_load(&m->w, &m->cfg, &st, be, why, sizeof(why));
    tm_st_close(&st);
    if (rc) {
        tm_errf(err, errlen, "%s: %s", dir, why);
        free(m);
        return rc;
    }
    rc = load_rope(m, err, errlen);
    if (!rc)
        rc = setup_moe(m, err, errlen);
    if (rc) {
        tm_model_free(m);
        return rc;
    }
    *out = m;
    return KN_OK;
}
