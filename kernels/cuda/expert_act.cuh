/* Internal to the CUDA backend: the expert activation of kernels/moe.h on
 * one (gate, up) pair, shared by every MoE kernel that applies it
 * (moe_experts.cu, the grouped FP8 kernels, the grouped FP8 GEMMs, the
 * expert GEMVs). The CPU backend's expert_activation computes the same. */
#ifndef TANDEM_KERNELS_CUDA_EXPERT_ACT_CUH
#define TANDEM_KERNELS_CUDA_EXPERT_ACT_CUH
extern "C" {
#include "kernels/moe.h"
}

/* KN_ACT_SWIGLU_OAI: gate clamped above at limit, up to [-limit, limit],
 * g * sigmoid(alpha g) * (u + 1); KN_ACT_SWIGLU: silu(g) * u. */
static __device__ __forceinline__ float kn_cuda_expert_act(float g, float u, int act, float alpha, float limit)
{
    if (act == KN_ACT_SWIGLU_OAI) {
        g = fminf(g, limit);
        u = fminf(fmaxf(u, -limit), limit);
        return g / (1.f + expf(-alpha * g)) * (u + 1.f);
    }
    return g / (1.f + expf(-g)) * u;
}
#endif
