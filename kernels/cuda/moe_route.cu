/* MoE routing on the GPU: one warp per token, up to 256 experts (8 per
 * lane, in registers). The top k are found by k rounds of a warp argmax over
 * the logits, larger logit first and the lower expert id on ties (selecting
 * on logits equals selecting on softmax probabilities, which are monotonic
 * in them), so the outputs come out in the header's order. The weights are
 * computed in double and rounded to float once, as on the CPU:
 *   over the k picks (GPT-OSS, or Qwen3 renormalised): exp(l_i - top) / sum_picks
 *   over all experts (Qwen3 without renormalising):   exp(l_i - top) / sum_all
 * The logits live in device memory and are not checked for NaN/inf here
 * (the CPU backend rejects them). */
#include <math.h>
#include "kernels/cuda/cuda_common.cuh"
extern "C" {
#include "kernels/moe.h"
#include "kernels/cuda/cuda_ops.h"
}

static const int ROUTE_PER_LANE = 8, ROUTE_MAX_EXPERTS = 32 * ROUTE_PER_LANE;
static const int ROUTE_MAX_K = 32;

/* Warp argmax of (value, id): larger value wins, then lower id. */
__device__ __forceinline__ void warp_argmax(float &val, int &id)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, val, off);
        int oi = __shfl_xor_sync(0xffffffffu, id, off);
        if (ov > val || (ov == val && oi < id)) {
            val = ov;
            id = oi;
        }
    }
}

__device__ __forceinline__ double warp_sum(double v)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__global__ void moe_route_kernel(int32_t *expert_idx, float *expert_w, const float *logits,
                                 int n_tokens, int n_experts, int k, int over_picks)
{
    int warps_per_block = blockDim.x >> 5;
    int t = blockIdx.x * warps_per_block + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (t >= n_tokens)
        return;
    const float *lr = logits + (size_t)t * n_experts;
    float val[ROUTE_PER_LANE];
#pragma unroll
    for (int i = 0; i < ROUTE_PER_LANE; i++) {
        int e = lane + 32 * i;
        val[i] = e < n_experts ? lr[e] : -INFINITY;
    }

    /* k rounds of argmax; a pick is flagged so it is not taken again (its
     * value may tie others, so a flag rather than a sentinel value). */
    unsigned taken = 0;
    float top = 0.f, my_val = 0.f;
    int my_id = 0;
    for (int r = 0; r < k; r++) {
        float best = -INFINITY;
        int best_id = 0x7fffffff;
#pragma unroll
        for (int i = 0; i < ROUTE_PER_LANE; i++) {
            int e = lane + 32 * i;
            if (e < n_experts && !(taken >> i & 1u) && (best_id == 0x7fffffff || val[i] > best)) {
                best = val[i];
                best_id = e;
            }
        }
        warp_argmax(best, best_id);
        if ((best_id & 31) == lane)
            taken |= 1u << (best_id >> 5);
        if (r == 0)
            top = best;
        if (lane == r) { /* lane r keeps round r's pick (k <= 32) */
            my_val = best;
            my_id = best_id;
        }
    }

    double denom = 0.0;
    if (over_picks) {
        denom = warp_sum(lane < k ? exp((double)my_val - (double)top) : 0.0);
    } else {
        double part = 0.0;
#pragma unroll
        for (int i = 0; i < ROUTE_PER_LANE; i++)
            if (lane + 32 * i < n_experts)
                part += exp((double)val[i] - (double)top);
        denom = warp_sum(part);
    }
    if (lane < k) {
        expert_idx[(size_t)t * k + lane] = my_id;
        expert_w[(size_t)t * k + lane] = (float)(exp((double)my_val - (double)top) / denom);
    }
}

extern "C" int kn_moe_route_cuda(const kn_backend *be, int32_t *expert_idx, float *expert_w,
                                 const float *logits, int n_tokens, int n_experts, int k,
                                 kn_route_mode mode, int renormalize)
{
    static const char op[] = "kn_moe_route";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK)
        return rc;
    if (n_experts > ROUTE_MAX_EXPERTS || k > ROUTE_MAX_K)
        return kn_arg_error(op, "n_experts=%d k=%d is over the CUDA kernel's limits (%d, %d)",
                                 n_experts, k, ROUTE_MAX_EXPERTS, ROUTE_MAX_K);
    if (n_tokens == 0)
        return TN_OK;
    const int warps = 4;
    /* Qwen3's renormalised softmax over all experts is a softmax over the k picks. */
    int over_picks = mode == KN_ROUTE_TOPK_SOFTMAX || renormalize;
    moe_route_kernel<<<kn_cuda_div_up(n_tokens, warps), warps * 32, 0, kn_cuda_stream(be)>>>(
        expert_idx, expert_w, logits, n_tokens, n_experts, k, over_picks);
    KN_CUDA_LAUNCH_CHECK(op, "moe_route_kernel");
    return TN_OK;
}
