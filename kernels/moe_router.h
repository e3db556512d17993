/* The MoE router as one op: the router product and the routing after it,
 *   logits = x router_w^T + router_b       (kn_matmul: [n_tokens][n_experts])
 *   expert_idx, expert_w = route(logits)   (kn_moe_route, kernels/moe.h)
 * At decode the product is a few rows and both steps are latency, not work;
 * the CUDA backend runs decode-sized calls as one kernel
 * (kn_cuda_set_fused_decode) and leaves the logits in `logits` either way.
 * On the CPU it is exactly kn_matmul then kn_moe_route. */
#ifndef TANDEM_KERNELS_MOE_ROUTER_H
#define TANDEM_KERNELS_MOE_ROUTER_H
#include <stdint.h>
#include "kernels/backend.h"
#include "kernels/moe.h"
#include "kernels/rmsnorm.h"

/* x [n_tokens][dim], router_w [n_experts][dim], router_b [n_experts] or
 * NULL; logits [n_tokens][n_experts] is written (must not overlap x or
 * router_w); expert_idx, expert_w [n_tokens][k]. */
int kn_moe_router(const kn_backend *be, int32_t *expert_idx, float *expert_w, float *logits,
                  const float *x, const float *router_w, const float *router_b, int n_tokens,
                  int dim, int n_experts, int k, kn_route_mode mode, int renormalize);

/* kn_moe_router over normalized rows: norm's add and RMSNorm
 * (kernels/rmsnorm.h), then kn_moe_router(..., norm->xn, ...); xn is left
 * for the experts. Every backend runs the pair (on CUDA a router that
 * normalized its tokens itself measured slower than the norm kernel
 * before it: docs/gpu-runs/s9run1-4); the op keeps the engine's layer one
 * op per norm and consumer, as kn_matmul_w_multi_normed. */
int kn_moe_router_normed(const kn_backend *be, int32_t *expert_idx, float *expert_w, float *logits,
                         const kn_norm_in *norm, const float *router_w, const float *router_b,
                         int n_tokens, int dim, int n_experts, int k, kn_route_mode mode,
                         int renormalize);
#endif
