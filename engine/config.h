/* Model configuration, parsed from a HuggingFace config.json.
 * Both released spellings of RoPE settings are accepted: `rope_theta` +
 * `rope_scaling` (transformers 4.x, the released checkpoints) and
 * `rope_parameters` (transformers 5.x). */
#ifndef TANDEM_ENGINE_CONFIG_H
#define TANDEM_ENGINE_CONFIG_H
#include <stddef.h>
#include "kernels/rope.h"
#include "kernels/moe.h"

#define TM_MAX_LAYERS 256
#define TM_MAX_EOS 8

typedef enum { TM_ARCH_GPT_OSS = 1, TM_ARCH_QWEN3_MOE = 2 } tm_arch;

typedef struct tm_config {
    tm_arch arch;
    char model_type[32];          /* "gpt_oss" or "qwen3_moe" */
    int vocab_size;
    int hidden_size;
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int n_experts;
    int n_experts_per_tok;
    int moe_inter;                /* expert intermediate size */
    int norm_topk_prob;           /* Qwen3: renormalise the top-k weights */
    float rms_eps;
    kn_rope_config rope;
    int max_position;             /* max_position_embeddings */
    int sliding_window;           /* 0 when no layer slides */
    int layer_window[TM_MAX_LAYERS]; /* per layer: window, 0 = full attention */
    int attention_bias;           /* q/k/v/o biases (GPT-OSS) */
    int qk_norm;                  /* per-head RMSNorm on q and k (Qwen3) */
    int attn_sinks;               /* learned per-head sink logits (GPT-OSS) */
    kn_route_mode route_mode;
    kn_act expert_act;
    float swiglu_alpha, swiglu_limit;
    int expert_bias;              /* experts carry biases (GPT-OSS) */
    int tie_word_embeddings;
    int n_eos;
    int eos_ids[TM_MAX_EOS];
} tm_config;

/* Parses dir/config.json. On failure returns a negative status and writes a
 * one-line reason into err (e.g. "config.json: unknown model_type 'llama'"). */
int tm_config_load(const char *dir, tm_config *cfg, char *err, size_t errlen);
/* The same for a config file at path (any name). */
int tm_config_load_file(const char *path, tm_config *cfg, char *err, size_t errlen);

#endif
