/* HF config.json -> tm_config for the two supported families.
 *
 * Field names and defaults follow transformers' GptOssConfig and
 * Qwen3MoeConfig; the fields that decide a model's shapes are required, so a
 * damaged config fails here with the field's name instead of loading a
 * model that silently differs from the reference. */
#include "engine/config.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/file.h"
#include "common/status.h"

#define CONFIG_MAX_BYTES (16u << 20)

/* Field reader: the first failure writes err and makes every later read a
 * no-op, so parsing code reads straight through and checks once at the end. */
typedef struct reader {
    const char *path;
    char *err;
    size_t errlen;
    int failed;
} reader;

static void rfail(reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rfail(reader *r, const char *fmt, ...)
{
    if (r->failed)
        return;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    tn_errf(r->err, r->errlen, "%s: %s", r->path, msg);
    r->failed = 1;
}

static const cJSON *field(const cJSON *obj, const char *key)
{
    const cJSON *j = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    return cJSON_IsNull(j) ? NULL : j;
}

/* An integer field >= min_value; `required` decides whether absence fails. */
static int get_int(reader *r, const cJSON *obj, const char *key, int required,
                   int def, int min_value)
{
    const cJSON *j = field(obj, key);
    if (!j) {
        if (required)
            rfail(r, "missing required field '%s'", key);
        return def;
    }
    double d = cJSON_IsNumber(j) ? j->valuedouble : NAN;
    if (!(d == floor(d)) || d < min_value || d > 2147483647.0) {
        rfail(r, "field '%s' must be an integer >= %d", key, min_value);
        return def;
    }
    return (int)d;
}

static double get_num(reader *r, const cJSON *obj, const char *key, int required,
                      double def)
{
    const cJSON *j = field(obj, key);
    if (!j) {
        if (required)
            rfail(r, "missing required field '%s'", key);
        return def;
    }
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble)) {
        rfail(r, "field '%s' must be a number", key);
        return def;
    }
    return j->valuedouble;
}

static int get_bool(reader *r, const cJSON *obj, const char *key, int def)
{
    const cJSON *j = field(obj, key);
    if (!j)
        return def;
    if (!cJSON_IsBool(j)) {
        rfail(r, "field '%s' must be true or false", key);
        return def;
    }
    return cJSON_IsTrue(j);
}

/* rope_theta + rope_scaling (transformers 4.x) or rope_parameters (5.x). */
static void parse_rope(reader *r, const cJSON *root, tm_config *c)
{
    const cJSON *params = field(root, "rope_parameters");
    if (!params)
        params = field(root, "rope_scaling");
    if (params && !cJSON_IsObject(params)) {
        rfail(r, "'rope_parameters'/'rope_scaling' must be an object");
        return;
    }
    kn_rope_config *rc = &c->rope;
    memset(rc, 0, sizeof(*rc));
    rc->head_dim = c->head_dim;
    rc->theta = get_num(r, params, "rope_theta", 0, NAN);
    if (isnan(rc->theta))
        rc->theta = get_num(r, root, "rope_theta", 1, 10000.0);
    if (!(rc->theta > 0))
        rfail(r, "'rope_theta' must be positive");

    const cJSON *type = field(params, "rope_type");
    if (!type)
        type = field(params, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "default";
    if (type && !cJSON_IsString(type)) {
        rfail(r, "'rope_type' must be a string");
        return;
    }
    if (get_num(r, params, "partial_rotary_factor", 0, 1.0) != 1.0 ||
        get_num(r, root, "partial_rotary_factor", 0, 1.0) != 1.0)
        rfail(r, "partial_rotary_factor other than 1 is not supported");
    if (strcmp(t, "default") == 0)
        return;
    if (strcmp(t, "yarn") != 0) {
        rfail(r, "rope_type '%s' is not supported (default and yarn are)", t);
        return;
    }
    rc->yarn = 1;
    /* As HF: a top-level original_max_position_embeddings wins, and a missing
     * factor is the context extension ratio. */
    rc->original_max_position = get_int(r, params, "original_max_position_embeddings",
                                        0, c->max_position, 1);
    rc->original_max_position = get_int(r, root, "original_max_position_embeddings",
                                        0, rc->original_max_position, 1);
    rc->factor = get_num(r, params, "factor", 0,
                         (double)c->max_position / (rc->original_max_position > 0
                                                    ? rc->original_max_position : 1));
    if (!r->failed && !(rc->factor >= 1.0))
        rfail(r, "yarn 'factor' must be >= 1");
    /* HF: `get("beta_fast") or 32`, so 0 also means the default */
    rc->beta_fast = get_num(r, params, "beta_fast", 0, 32.0);
    rc->beta_slow = get_num(r, params, "beta_slow", 0, 1.0);
    if (rc->beta_fast == 0)
        rc->beta_fast = 32.0;
    if (rc->beta_slow == 0)
        rc->beta_slow = 1.0;
    rc->truncate = get_bool(r, params, "truncate", 1);
    rc->attention_factor = get_num(r, params, "attention_factor", 0, 0.0);
    /* DeepSeek-style mscale/mscale_all_dim: HF derives attention_factor from
     * them when no explicit value is given. */
    double ms = get_num(r, params, "mscale", 0, 0.0);
    double ms_all = get_num(r, params, "mscale_all_dim", 0, 0.0);
    if (rc->attention_factor <= 0 && ms > 0 && ms_all > 0 && rc->factor > 1.0) {
        double a = 0.1 * ms * log(rc->factor) + 1.0;
        double b = 0.1 * ms_all * log(rc->factor) + 1.0;
        rc->attention_factor = a / b;
    }
}

/* GPT-OSS layer_types -> per-layer window; GptOssConfig's alternating
 * default when absent. */
static void parse_layer_types(reader *r, const cJSON *root, tm_config *c)
{
    const cJSON *lt = field(root, "layer_types");
    int window = get_int(r, root, "sliding_window", 0, 0, 0);
    int any = 0;
    if (lt && (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->n_layers)) {
        rfail(r, "'layer_types' must be a list with one entry per layer");
        return;
    }
    for (int i = 0; i < c->n_layers && !r->failed; i++) {
        int sliding;
        if (lt) {
            const cJSON *e = cJSON_GetArrayItem(lt, i);
            const char *s = cJSON_IsString(e) ? e->valuestring : "";
            if (strcmp(s, "sliding_attention") == 0) {
                sliding = 1;
            } else if (strcmp(s, "full_attention") == 0) {
                sliding = 0;
            } else {
                rfail(r, "layer_types entry '%s' is not supported (sliding_attention "
                      "or full_attention)", s);
                return;
            }
        } else {
            /* GptOssConfig's default: even layers slide, odd layers are full */
            sliding = (i + 1) % 2;
        }
        if (sliding && window <= 0) {
            rfail(r, "a sliding_attention layer needs 'sliding_window' > 0");
            return;
        }
        c->layer_window[i] = sliding ? window : 0;
        any |= sliding;
    }
    c->sliding_window = any ? window : 0;
}

static void parse_eos(reader *r, const cJSON *root, tm_config *c)
{
    const cJSON *e = field(root, "eos_token_id");
    c->n_eos = 0;
    if (!e)
        return;
    if (cJSON_IsArray(e)) {
        if (cJSON_GetArraySize(e) > TM_MAX_EOS) {
            rfail(r, "'eos_token_id' lists more than %d ids", TM_MAX_EOS);
            return;
        }
        const cJSON *x;
        cJSON_ArrayForEach(x, e) {
            double d = cJSON_IsNumber(x) ? x->valuedouble : -1;
            if (!(d == floor(d)) || d < 0 || d >= c->vocab_size) {
                rfail(r, "'eos_token_id' entries must be token ids below vocab_size");
                return;
            }
            c->eos_ids[c->n_eos++] = (int)d;
        }
        return;
    }
    int id = get_int(r, root, "eos_token_id", 0, 0, 0);
    if (!r->failed && id >= c->vocab_size) {
        rfail(r, "'eos_token_id' must be below vocab_size");
        return;
    }
    c->eos_ids[c->n_eos++] = id;
}

static void parse_common(reader *r, const cJSON *root, tm_config *c)
{
    c->vocab_size = get_int(r, root, "vocab_size", 1, 0, 1);
    c->hidden_size = get_int(r, root, "hidden_size", 1, 0, 1);
    c->n_layers = get_int(r, root, "num_hidden_layers", 1, 0, 1);
    c->n_heads = get_int(r, root, "num_attention_heads", 1, 0, 1);
    c->n_kv_heads = get_int(r, root, "num_key_value_heads", 1, 0, 1);
    c->head_dim = get_int(r, root, "head_dim", 0,
                          c->n_heads > 0 ? c->hidden_size / c->n_heads : 0, 2);
    c->max_position = get_int(r, root, "max_position_embeddings", 1, 0, 1);
    c->rms_eps = (float)get_num(r, root, "rms_norm_eps", 1, 1e-6);
    c->tie_word_embeddings = get_bool(r, root, "tie_word_embeddings", 0);
    if (r->failed)
        return;
    if (c->n_layers > TM_MAX_LAYERS)
        rfail(r, "num_hidden_layers is above the supported %d", TM_MAX_LAYERS);
    else if (c->n_heads % c->n_kv_heads != 0)
        rfail(r, "num_attention_heads must be a multiple of num_key_value_heads");
    else if (c->head_dim < 2 || c->head_dim % 2 != 0)
        rfail(r, "head_dim must be even and at least 2 for RoPE");
    else if (!(c->rms_eps > 0) || !isfinite(c->rms_eps))   /* 1e300 is inf as a float */
        rfail(r, "rms_norm_eps must be positive and within float range");
}

static void parse_gpt_oss(reader *r, const cJSON *root, tm_config *c)
{
    c->arch = TM_ARCH_GPT_OSS;
    c->n_experts = field(root, "num_experts") ? get_int(r, root, "num_experts", 1, 0, 1)
                                              : get_int(r, root, "num_local_experts", 1, 0, 1);
    c->n_experts_per_tok = get_int(r, root, "num_experts_per_tok", 0, -1, 1);
    if (c->n_experts_per_tok < 0)   /* the original OpenAI spelling */
        c->n_experts_per_tok = get_int(r, root, "experts_per_token", 1, 0, 1);
    c->moe_inter = get_int(r, root, "intermediate_size", 1, 0, 1);
    c->attention_bias = get_bool(r, root, "attention_bias", 1);
    c->attn_sinks = 1;
    c->qk_norm = 0;
    c->route_mode = KN_ROUTE_TOPK_SOFTMAX;
    c->norm_topk_prob = 0;
    c->expert_act = KN_ACT_SWIGLU_OAI;
    c->swiglu_alpha = 1.702f;   /* fixed in the reference implementation */
    c->swiglu_limit = (float)get_num(r, root, "swiglu_limit", 0, 7.0);
    c->expert_bias = 1;
    if (!r->failed && (!(c->swiglu_limit > 0) || !isfinite(c->swiglu_limit)))
        rfail(r, "swiglu_limit must be positive and within float range");
    parse_layer_types(r, root, c);
}

static void parse_qwen3_moe(reader *r, const cJSON *root, tm_config *c)
{
    c->arch = TM_ARCH_QWEN3_MOE;
    /* transformers 5 saves num_experts under its attribute_map name */
    c->n_experts = field(root, "num_local_experts")
                       ? get_int(r, root, "num_local_experts", 1, 0, 1)
                       : get_int(r, root, "num_experts", 1, 0, 1);
    c->n_experts_per_tok = get_int(r, root, "num_experts_per_tok", 1, 0, 1);
    c->moe_inter = get_int(r, root, "moe_intermediate_size", 1, 0, 1);
    c->norm_topk_prob = get_bool(r, root, "norm_topk_prob", 0);
    c->attention_bias = get_bool(r, root, "attention_bias", 0);
    c->attn_sinks = 0;
    c->qk_norm = 1;
    c->route_mode = KN_ROUTE_SOFTMAX_TOPK;
    c->expert_act = KN_ACT_SWIGLU;
    c->expert_bias = 0;
    const cJSON *act = field(root, "hidden_act");
    if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu") != 0))
        rfail(r, "hidden_act '%s' is not supported (silu is)",
              cJSON_IsString(act) ? act->valuestring : "?");
    /* Dense-MLP layers (decoder_sparse_step > 1 or mlp_only_layers) exist in
     * the config schema but in no released Qwen3-MoE checkpoint. */
    int step = get_int(r, root, "decoder_sparse_step", 0, 1, 1);
    const cJSON *only = field(root, "mlp_only_layers");
    if (!r->failed && (step != 1 || (only && (!cJSON_IsArray(only) ||
                                              cJSON_GetArraySize(only) > 0))))
        rfail(r, "dense MLP layers (decoder_sparse_step != 1 or mlp_only_layers) are "
              "not supported");
    /* Qwen3MoeConfig keeps sliding_window only with use_sliding_window, and
     * then every layer slides (its model builds one mask for all layers). */
    int window = 0;
    if (get_bool(r, root, "use_sliding_window", 0))
        window = get_int(r, root, "sliding_window", 0, 4096, 1);
    for (int i = 0; i < c->n_layers; i++)
        c->layer_window[i] = window;
    c->sliding_window = window;
}

int tm_config_load(const char *dir, tm_config *cfg, char *err, size_t errlen)
{
    memset(cfg, 0, sizeof(*cfg));
    char *path = tn_path_join(dir, "config.json");
    if (!path) {
        tn_errf(err, errlen, "out of memory");
        return TN_ERR_NOMEM;
    }
    int rc = tm_config_load_file(path, cfg, err, errlen);
    free(path);
    return rc;
}

int tm_config_load_file(const char *path, tm_config *cfg, char *err, size_t errlen)
{
    memset(cfg, 0, sizeof(*cfg));
    char *text = NULL;
    int rc = tn_read_file(path, CONFIG_MAX_BYTES, &text, NULL, err, errlen);
    if (rc)
        return rc;
    cJSON *root = cJSON_Parse(text);
    free(text);
    reader r = {path, err, errlen, 0};
    const cJSON *mt = field(root, "model_type");
    if (!cJSON_IsObject(root)) {
        rfail(&r, "not a valid JSON object");
    } else if (!cJSON_IsString(mt)) {
        rfail(&r, "missing required field 'model_type'");
    } else if (strcmp(mt->valuestring, "gpt_oss") != 0 &&
               strcmp(mt->valuestring, "qwen3_moe") != 0) {
        rfail(&r, "unknown model_type '%s' (supported: gpt_oss, qwen3_moe)",
              mt->valuestring);
    } else {
        snprintf(cfg->model_type, sizeof(cfg->model_type), "%s", mt->valuestring);
        parse_common(&r, root, cfg);
        if (!r.failed && strcmp(mt->valuestring, "gpt_oss") == 0)
            parse_gpt_oss(&r, root, cfg);
        else if (!r.failed)
            parse_qwen3_moe(&r, root, cfg);
        if (!r.failed)
            parse_rope(&r, root, cfg);
        if (!r.failed)
            parse_eos(&r, root, cfg);
        if (!r.failed && cfg->n_experts_per_tok > cfg->n_experts)
            rfail(&r, "num_experts_per_tok is larger than the number of experts");
    }
    cJSON_Delete(root);
    if (r.failed) {
        memset(cfg, 0, sizeof(*cfg));
        return TN_ERR_ARG;
    }
    return TN_OK;
}
