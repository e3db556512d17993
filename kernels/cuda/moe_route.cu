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
#include "kernels/matmul.h"
#include "kernels/moe.h"
#include "kernels/moe_router.h"
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

/* Routes one token with one warp: lr is the token's logits row (read
 * through L2 only: in the fused router other blocks of the same launch
 * wrote it). */
__device__ __forceinline__ void route_token(int32_t *expert_idx, float *expert_w, const float *lr,
                                            int n_experts, int k, int over_picks, int lane)
{
    float val[ROUTE_PER_LANE];
#pragma unroll
    for (int i = 0; i < ROUTE_PER_LANE; i++) {
        int e = lane + 32 * i;
        val[i] = e < n_experts ? __ldcg(lr + e) : -INFINITY;
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
        expert_idx[lane] = my_id;
        expert_w[lane] = (float)(exp((double)my_val - (double)top) / denom);
    }
}

__global__ void moe_route_kernel(int32_t *expert_idx, float *expert_w, const float *logits,
                                 int n_tokens, int n_experts, int k, int over_picks)
{
    int warps_per_block = blockDim.x >> 5;
    int t = blockIdx.x * warps_per_block + (threadIdx.x >> 5);
    if (t >= n_tokens)
        return;
    route_token(expert_idx + (size_t)t * k, expert_w + (size_t)t * k,
                logits + (size_t)t * n_experts, n_experts, k, over_picks, threadIdx.x & 31);
}

/* The fused router (kn_moe_router at decode): block (e, tile) computes
 * expert e's logits for the tile's tokens (up to KN_CUDA_ROUTER_TILE_ROWS)
 * with its 128 threads splitting the hidden dimension: every weight float4
 * of the row (and, for the tile's first token, its x float4s) is requested
 * before any is used, so a block is one memory round trip (the earlier
 * warp-per-expert kernel streamed the row in three dependent steps: 12.8
 * us a layer for 0.4 MB in s7a). fp32 fused multiply-adds, the warps'
 * sums in warp order, then the bias. The last block of a tile to finish (an
 * arrival counter, the threadFenceReduction pattern) routes the tile's
 * tokens from the logits the others left in global memory and resets the
 * counter for the next launch. No host work: the step stays
 * graph-capturable. */
static const int ROUTER_THREADS = 128, ROUTER_UNROLL = 8; /* one pass covers dim <= 4096 */

__global__ void __launch_bounds__(ROUTER_THREADS)
moe_router_kernel(int32_t *expert_idx, float *expert_w, float *logits, const float *x,
                  const float *router_w, const float *router_b, int n_tokens, int dim,
                  int n_experts, int k, int over_picks, unsigned *done)
{
    __shared__ float red[ROUTER_THREADS / 32][KN_CUDA_ROUTER_TILE_ROWS];
    __shared__ bool last;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int e = blockIdx.x;
    const int t0 = blockIdx.y * KN_CUDA_ROUTER_TILE_ROWS;
    const int nt = min(KN_CUDA_ROUTER_TILE_ROWS, n_tokens - t0);
    const float4 *wr = (const float4 *)(router_w + (size_t)e * dim);
    const float4 *xt = (const float4 *)(x + (size_t)t0 * dim);
    const int n4 = dim >> 2;
    float acc[KN_CUDA_ROUTER_TILE_ROWS];
#pragma unroll
    for (int j = 0; j < KN_CUDA_ROUTER_TILE_ROWS; j++)
        acc[j] = 0.f;
    for (int i0 = tid; i0 < n4; i0 += ROUTER_THREADS * ROUTER_UNROLL) {
        float4 w[ROUTER_UNROLL], x0[ROUTER_UNROLL];
#pragma unroll
        for (int u = 0; u < ROUTER_UNROLL; u++) {
            const int i = i0 + ROUTER_THREADS * u;
            w[u] = i < n4 ? __ldg(wr + i) : make_float4(0.f, 0.f, 0.f, 0.f);
            x0[u] = i < n4 ? __ldg(xt + i) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int u = 0; u < ROUTER_UNROLL; u++)
            acc[0] = fmaf(x0[u].x, w[u].x, fmaf(x0[u].y, w[u].y, fmaf(x0[u].z, w[u].z, fmaf(x0[u].w, w[u].w, acc[0]))));
#pragma unroll
        for (int j = 1; j < KN_CUDA_ROUTER_TILE_ROWS; j++)
            if (j < nt) {
#pragma unroll
                for (int u = 0; u < ROUTER_UNROLL; u++) {
                    const int i = i0 + ROUTER_THREADS * u;
                    if (i < n4) {
                        const float4 a = __ldg(xt + (size_t)j * n4 + i);
                        acc[j] = fmaf(a.x, w[u].x, fmaf(a.y, w[u].y, fmaf(a.z, w[u].z, fmaf(a.w, w[u].w, acc[j]))));
                    }
                }
            }
    }
#pragma unroll
    for (int j = 0; j < KN_CUDA_ROUTER_TILE_ROWS; j++) {
        float v = acc[j];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == j)
            red[warp][j] = v;
    }
    __syncthreads();
    if (tid < nt) {
        float v = red[0][tid];
#pragma unroll
        for (int w = 1; w < ROUTER_THREADS / 32; w++)
            v += red[w][tid];
        logits[(size_t)(t0 + tid) * n_experts + e] = v + (router_b ? router_b[e] : 0.f);
    }
    __threadfence(); /* this block's logits are visible before it arrives */
    __syncthreads();
    if (tid == 0)
        last = atomicAdd(done + blockIdx.y, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    for (int j = warp; j < nt; j += ROUTER_THREADS / 32) {
        const int t = t0 + j;
        route_token(expert_idx + (size_t)t * k, expert_w + (size_t)t * k,
                    logits + (size_t)t * n_experts, n_experts, k, over_picks, lane);
    }
    if (tid == 0)
        done[blockIdx.y] = 0;
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

extern "C" int kn_moe_router_cuda(const kn_backend *be, int32_t *expert_idx, float *expert_w,
                                  float *logits, const float *x, const float *router_w,
                                  const float *router_b, int n_tokens, int dim, int n_experts,
                                  int k, kn_route_mode mode, int renormalize)
{
    static const char op[] = "kn_moe_router";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK)
        return rc;
    if (n_experts > ROUTE_MAX_EXPERTS || k > ROUTE_MAX_K)
        return kn_arg_error(op, "n_experts=%d k=%d is over the CUDA kernel's limits (%d, %d)",
                            n_experts, k, ROUTE_MAX_EXPERTS, ROUTE_MAX_K);
    if (n_tokens == 0)
        return TN_OK;
    const kn_cuda_ctx *ctx = kn_cuda_ctx_of(be);
    const int tiles = kn_cuda_div_up(n_tokens, KN_CUDA_ROUTER_TILE_ROWS);
    if (!ctx->fused_decode || tiles > KN_CUDA_ROUTER_TILES || dim % 4 != 0 ||
        !kn_cuda_aligned16(x) || !kn_cuda_aligned16(router_w)) {
        rc = kn_matmul_cuda(be, logits, x, router_w, router_b, n_tokens, n_experts, dim);
        if (rc == TN_OK)
            rc = kn_moe_route_cuda(be, expert_idx, expert_w, logits, n_tokens, n_experts, k,
                                   mode, renormalize);
        return rc;
    }
    const int over_picks = mode == KN_ROUTE_TOPK_SOFTMAX || renormalize;
    moe_router_kernel<<<dim3((unsigned)n_experts, tiles), ROUTER_THREADS, 0,
                        kn_cuda_stream(be)>>>(expert_idx, expert_w, logits, x, router_w, router_b,
                                              n_tokens, dim, n_experts, k, over_picks,
                                              ctx->router_done);
    KN_CUDA_LAUNCH_CHECK(op, "moe_router_kernel");
    return TN_OK;
}
