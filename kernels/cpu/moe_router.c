/* kn_moe_router on the CPU: kn_matmul then kn_moe_route (kernels/moe_router.h). */
#include "kernels/cpu/cpu_ops.h"
#include "kernels/moe_router.h"
#include "common/status.h"

int kn_moe_router_cpu(int32_t *expert_idx, float *expert_w, float *logits, const float *x,
                      const float *router_w, const float *router_b, int n_tokens, int dim,
                      int n_experts, int k, kn_route_mode mode, int renormalize)
{
    if (n_tokens == 0)
        return TN_OK;
    int rc = kn_matmul_cpu(logits, x, router_w, router_b, n_tokens, n_experts, dim);
    if (rc == TN_OK)
        rc = kn_moe_route_cpu(expert_idx, expert_w, logits, n_tokens, n_experts, k, mode,
                              renormalize);
    return rc;
}
