/* Mixture-of-experts: routing and the expert MLPs.
 *
 * Routing picks k experts per token from router logits [n_tokens][n_experts]:
 *   KN_ROUTE_TOPK_SOFTMAX (GPT-OSS): top-k of the logits, softmax over those k.
 *   KN_ROUTE_SOFTMAX_TOPK (Qwen3-MoE): softmax over all experts, top-k of the
 *     probabilities, renormalised to sum 1 when `renormalize` is set.
 * Ties pick the lower expert id (torch.topk order on distinct values).
 * Outputs are ordered by descending weight. */
#ifndef TANDEM_KERNELS_MOE_H
#define TANDEM_KERNELS_MOE_H
#include <stdint.h>
#include "kernels/backend.h"
#include "kernels/dtype.h"

typedef enum { KN_ROUTE_TOPK_SOFTMAX = 0, KN_ROUTE_SOFTMAX_TOPK = 1 } kn_route_mode;

int kn_moe_route(const kn_backend *be, int32_t *expert_idx, float *expert_w,
                 const float *logits, int n_tokens, int n_experts, int k,
                 kn_route_mode mode, int renormalize);

/* Expert activation on h = [gate | up] (each `inter` wide):
 *   KN_ACT_SWIGLU:      silu(gate) * up                                (Qwen3)
 *   KN_ACT_SWIGLU_OAI:  g = min(gate, limit); u = clamp(up, -limit, limit);
 *                       g * sigmoid(alpha * g) * (u + 1)               (GPT-OSS)
 */
typedef enum { KN_ACT_SWIGLU = 0, KN_ACT_SWIGLU_OAI = 1 } kn_act;

typedef struct kn_moe_weights {
    int n_experts;            /* experts held in these arrays */
    int expert_offset;        /* global id of the first one (expert parallelism) */
    int dim, inter;
    /* The two weight arrays hold elements of wdtype; the biases are fp32.
     * KN_BF16 computes like kn_matmul_w: the inputs of both products (x, and
     * the activation) are rounded to bf16, products accumulate in fp32.
     * KN_FP8_E4M3 computes both products like kn_matmul_w's FP8 (x and the
     * activation quantized in 1x128 blocks per row, 128x128 weight block
     * scales, fp32 accumulation); each expert's matrices are FP8 weights in
     * the layout of kernels/fp8.h, one after another. On CUDA with at most
     * 4 tokens and TANDEM_CUDA_MOE_GEMV on (the default) neither x nor the
     * activation is quantized (fp32 products with the dequantized weights,
     * kernels/cuda/moe_gemv_fp8.cu): more accurate than that function. */
    kn_dtype wdtype;           /* KN_F32 (0, the default), KN_BF16 or KN_FP8_E4M3 */
    const void *gate_up;       /* [n_experts][2*inter][dim]: gate rows, then up rows
                                  (fp8: [n_experts][2*inter][kn_fp8_ld(dim)]) */
    const float *gate_up_bias; /* [n_experts][2*inter] or NULL */
    const void *down;          /* [n_experts][dim][inter]
                                  (fp8: [n_experts][dim][kn_fp8_ld(inter)]) */
    const float *down_bias;    /* [n_experts][dim] or NULL */
    /* KN_FP8_E4M3 only (else NULL): block scales per expert,
     * [n_experts][kn_fp8_scale_count(2*inter, dim)] and
     * [n_experts][kn_fp8_scale_count(dim, inter)]. */
    const float *gate_up_scale;
    const float *down_scale;
    kn_act act;
    float alpha, limit;        /* KN_ACT_SWIGLU_OAI only */
} kn_moe_weights;

/* out[t] = sum over the token's k routes whose expert is held here of
 *   w * down_e(act(gate_up_e x[t] + b) ) + w * down_bias_e
 * Routes to experts not held here contribute nothing (EP ranks each compute
 * their share and the shares are summed by an all-reduce). out is
 * overwritten, and must not alias x. */
int kn_moe_experts(const kn_backend *be, float *out, const float *x,
                   const int32_t *expert_idx, const float *expert_w,
                   int n_tokens, int k, const kn_moe_weights *w);
#endif
