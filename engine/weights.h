/* Model weights in the layout the kernels read, on a backend.
 *
 * The matrices of the large products are stored narrower when asked
 * (tm_weight_types, chosen at load): the LM head as f32 or bf16, the
 * attention projections q/k/v/o and the experts' gate_up and down as f32,
 * bf16 or FP8 e4m3 with 128x128 block scales (kernels/fp8.h; each FP8
 * matrix has its scale array next to it). Everything else (embedding
 * table, norms, biases, sinks, router) stays f32.
 *
 * Checkpoints may hold the large matrices as
 *   BF16/F16/F32                 converted (rounded) to the wanted dtype;
 *   F8_E4M3 + `<name>_scale_inv` HF block-FP8 (Qwen3-*-FP8): value = code *
 *                                scale_inv[row/128][col/128]; 2-D tensors;
 *   MXFP4 `*_blocks` + `*_scales` GPT-OSS experts as released
 *                                (engine/mxfp4.h).
 * Quantized values are decoded exactly to f32 and then stored as wanted:
 * FP8 is requantized per 128x128 block (for a block-FP8 checkpoint whose
 * blocks hold a 448 code this gives back the same codes, scales within an
 * fp32 rounding).
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

/* The storage dtype of each group of large matrices. */
typedef struct tm_weight_types {
    kn_dtype head;      /* LM head: KN_F32 or KN_BF16 */
    kn_dtype attn;      /* q/k/v/o: KN_F32, KN_BF16 or KN_FP8_E4M3 */
    kn_dtype experts;   /* gate_up, down: KN_F32, KN_BF16 or KN_FP8_E4M3 */
} tm_weight_types;

typedef struct tm_layer_weights {
    float *attn_norm, *mlp_norm;          /* [dim] */
    void *q_w, *k_w, *v_w, *o_w;          /* [out][in], attn dtype */
    float *q_s, *k_s, *v_s, *o_s;         /* FP8 block scales, else NULL */
    float *q_b, *k_b, *v_b, *o_b;         /* NULL without attention_bias */
    float *q_norm, *k_norm;               /* [head_dim], Qwen3 only */
    float *sinks;                         /* [n_heads], GPT-OSS only */
    float *router_w;                      /* [n_experts][dim] */
    float *router_b;                      /* [n_experts] or NULL */
    void *gate_up;                        /* see above, experts dtype */
    float *gate_up_b;                     /* NULL for Qwen3 */
    void *down;                           /* experts dtype */
    float *down_b;
    float *gate_up_s, *down_s;            /* FP8: per-expert block scales
                                             (kernels/moe.h), else NULL */
} tm_layer_weights;

typedef struct tm_weights {
    const kn_backend *be;
    int n_layers;
    float *embed;        /* [vocab][dim] */
    float *final_norm;   /* [dim] */
    void *lm_head;       /* [vocab][dim], wdtype; == embed when tied and f32 */
    kn_dtype wdtype;     /* the LM head's (types.head); the model's "weight dtype" */
    tm_weight_types types;
    tm_layer_weights *layers;
    size_t bytes;        /* backend bytes held */
} tm_weights;

/* Loads every tensor the config calls for, the large products' matrices
 * as `types` says (a bf16 checkpoint loads into bf16 unchanged, f32 values
 * are rounded to nearest even, quantized checkpoints are decoded exactly
 * first). Fails (negative status, reason in err naming the tensor) on a
 * missing tensor, a wrong shape, a dtype the loader does not read, or a
 * tensor the model does not use. Nothing is left allocated on failure. */
int tm_weights_load(tm_weights *w, const tm_config *cfg, const tm_safetensors *st,
                    const kn_backend *be, const tm_weight_types *types, char *err,
                    size_t errlen);
/* The same for one rank's shard (engine/parallel.h): q/k/v rows and sinks of
 * its heads, o_proj columns of its heads (the bias only where shard->o_bias),
 * its experts; everything else whole. Other ranks' slices are still checked
 * for presence, shape and dtype, but not read. Tensor shapes are then the
 * local ones: q_w [n_heads_local * head_dim][dim], experts [n_experts_local]. */
int tm_weights_load_shard(tm_weights *w, const tm_config *cfg, const tm_safetensors *st,
                          const kn_backend *be, const tm_shard *shard,
                          const tm_weight_types *types, char *err, size_t errlen);
/* Which of the checkpoint's large matrices are stored quantized (FP8 or
 * MXFP4): sets *attn and *experts to 1 where they are. */
void tm_weights_quantized(const tm_safetensors *st, int *attn, int *experts);

/* Random weights of the config's shapes (of the shard's slice, or the whole
 * model when shard is NULL), made on the backend itself with
 * kn_fill_uniform (no files, no host copies): for benchmarks, whose speed
 * does not depend on the values. Scales keep activations in a sane range
 * (uniform weights with variance 1/fan_in, norms near 1, small biases), so
 * a forward pass stays finite. Same seed and shard, same weights, on either
 * backend. FP8 matrices are random e4m3 codes (never NaN) with block scales
 * that give the same variance 1/fan_in, made on the backend too. Nothing is
 * left allocated on failure. */
int tm_weights_synthetic(tm_weights *w, const tm_config *cfg, const kn_backend *be,
                         const tm_shard *shard, const tm_weight_types *types, uint64_t seed,
                         char *err, size_t errlen);
void tm_weights_free(tm_weights *w);

#endif
