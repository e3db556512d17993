/* Model weights in the layout the kernels read, as f32 on a backend.
 *
 * Linear weights are [out][in] (HF nn.Linear). Expert weights follow
 * kernels/moe.h: gate_up [E][2*inter][dim] (all gate rows, then all up rows)
 * and down [E][dim][inter], whatever layout the checkpoint used:
 *   GPT-OSS  experts.gate_up_proj [E][dim][2*inter], gate/up interleaved along
 *            the last dim; experts.down_proj [E][inter][dim] (x @ W form)
 *   Qwen3    experts.N.{gate,up,down}_proj.weight (released checkpoints), or
 *            transformers-5 fused experts.gate_up_proj [E][2*inter][dim] and
 *            experts.down_proj [E][dim][inter] */
#ifndef TANDEM_ENGINE_WEIGHTS_H
#define TANDEM_ENGINE_WEIGHTS_H
#include <stddef.h>
#include "engine/config.h"
#include "engine/parallel.h"
#include "engine/safetensors.h"
#include "kernels/backend.h"

typedef struct tm_layer_weights {
    float *attn_norm, *mlp_norm;          /* [dim] */
    float *q_w, *k_w, *v_w, *o_w;         /* [out][in] */
    float *q_b, *k_b, *v_b, *o_b;         /* NULL without attention_bias */
    float *q_norm, *k_norm;               /* [head_dim], Qwen3 only */
    float *sinks;                         /* [n_heads], GPT-OSS only */
    float *router_w;                      /* [n_experts][dim] */
    float *router_b;                      /* [n_experts] or NULL */
    float *gate_up, *gate_up_b;           /* see above; bias NULL for Qwen3 */
    float *down, *down_b;
} tm_layer_weights;

typedef struct tm_weights {
    const kn_backend *be;
    int n_layers;
    float *embed;        /* [vocab][dim] */
    float *final_norm;   /* [dim] */
    float *lm_head;      /* [vocab][dim]; == embed when tied */
    tm_layer_weights *layers;
    size_t bytes;        /* backend bytes held */
} tm_weights;

/* Loads every tensor the config calls for. Fails (negative status, reason in
 * err naming the tensor) on a missing tensor, a wrong shape, a dtype other
 * than BF16/F16/F32 (FP8 and MXFP4 get their own message), or a tensor the
 * model does not use. Nothing is left allocated on failure. */
int tm_weights_load(tm_weights *w, const tm_config *cfg, const tm_safetensors *st,
                    const kn_backend *be, char *err, size_t errlen);
/* The same for one rank's shard (engine/parallel.h): q/k/v rows and sinks of
 * its heads, o_proj columns of its heads (the bias only where shard->o_bias),
 * its experts; everything else whole. Other ranks' slices are still checked
 * for presence, shape and dtype, but not read. Tensor shapes are then the
 * local ones: q_w [n_heads_local * head_dim][dim], experts [n_experts_local]. */
int tm_weights_load_shard(tm_weights *w, const tm_config *cfg, const tm_safetensors *st,
                          const kn_backend *be, const tm_shard *shard, char *err,
                          size_t errlen);
void tm_weights_free(tm_weights *w);

#endif
