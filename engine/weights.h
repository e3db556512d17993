/* Model weights in the layout the kernels read, on a backend.
 *
 * The matrices of the large products (q/k/v/o projections, expert gate_up
 * and down, the LM head) are stored in tm_weights.wdtype (f32 or bf16,
 * chosen at load); everything else (embedding table, norms, biases, sinks,
 * router) stays f32.
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
#include <stdint.h>
#include "engine/config.h"
#include "engine/parallel.h"
#include "engine/safetensors.h"
#include "kernels/backend.h"
#include "kernels/dtype.h"

typedef struct tm_layer_weights {
    float *attn_norm, *mlp_norm;          /* [dim] */
    void *q_w, *k_w, *v_w, *o_w;          /* [out][in], wdtype */
    float *q_b, *k_b, *v_b, *o_b;         /* NULL without attention_bias */
    float *q_norm, *k_norm;               /* [head_dim], Qwen3 only */
    float *sinks;                         /* [n_heads], GPT-OSS only */
    float *router_w;                      /* [n_experts][dim] */
    float *router_b;                      /* [n_experts] or NULL */
    void *gate_up;                        /* see above, wdtype */
    float *gate_up_b;                     /* NULL for Qwen3 */
    void *down;                           /* wdtype */
    float *down_b;
} tm_layer_weights;

typedef struct tm_weights {
    const kn_backend *be;
    int n_layers;
    float *embed;        /* [vocab][dim] */
    float *final_norm;   /* [dim] */
    void *lm_head;       /* [vocab][dim], wdtype; == embed when tied and f32 */
    kn_dtype wdtype;     /* of the large products' matrices */
    tm_layer_weights *layers;
    size_t bytes;        /* backend bytes held */
} tm_weights;

/* Loads every tensor the config calls for, the large products' matrices
 * as wdtype (KN_F32 or KN_BF16; a bf16 checkpoint loads into bf16
 * unchanged, f32 values are rounded to nearest even). Fails (negative
 * status, reason in err naming the tensor) on a missing tensor, a wrong
 * shape, a dtype other than BF16/F16/F32 (FP8 and MXFP4 get their own
 * message), or a tensor the model does not use. Nothing is left allocated
 * on failure. */
int tm_weights_load(tm_weights *w, const tm_config *cfg, const tm_safetensors *st,
                    const kn_backend *be, kn_dtype wdtype, char *err, size_t errlen);
/* The same for one rank's shard (engine/parallel.h): q/k/v rows and sinks of
 * its heads, o_proj columns of its heads (the bias only where shard->o_bias),
 * its experts; everything else whole. Other ranks' slices are still checked
 * for presence, shape and dtype, but not read. Tensor shapes are then the
 * local ones: q_w [n_heads_local * head_dim][dim], experts [n_experts_local]. */
int tm_weights_load_shard(tm_weights *w, const tm_config *cfg, const tm_safetensors *st,
                          const kn_backend *be, const tm_shard *shard, kn_dtype wdtype,
                          char *err, size_t errlen);

/* Random weights of the config's shapes (of the shard's slice, or the whole
 * model when shard is NULL), made on the backend itself with
 * kn_fill_uniform (no files, no host copies): for benchmarks, whose speed
 * does not depend on the values. Scales keep activations in a sane range
 * (uniform weights with variance 1/fan_in, norms near 1, small biases), so
 * a forward pass stays finite. Same seed and shard, same weights, on either
 * backend. Nothing is left allocated on failure. */
int tm_weights_synthetic(tm_weights *w, const tm_config *cfg, const kn_backend *be,
                         const tm_shard *shard, kn_dtype wdtype, uint64_t seed, char *err,
                         size_t errlen);
void tm_weights_free(tm_weights *w);

#endif
