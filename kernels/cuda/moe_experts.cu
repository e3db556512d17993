/* MoE expert MLPs on the GPU: fp32 activations, fp32 or bf16 weights.
 *
 * The (token, route) pairs ("slots", slot = t*k + j) whose expert is held
 * here are grouped by expert, so each expert's rows are one contiguous
 * block and its two linear layers are two plain GEMMs:
 *   1. moe_count_kernel      rows per local expert -> offsets[e]
 *   2. moe_place_kernel      a stable (slot order) placement: perm[pos] = slot,
 *                            slot_pos[slot] = pos (or -1 when not held here)
 *   3. moe_gather_kernel     xp[pos] = x[perm[pos] / k]
 *   4. per expert: h = xp_e gate_up_e^T + b      (cuBLAS, kn_cuda_linear)
 *   5. moe_act_kernel        a = act(gate, up)  (SwiGLU or GPT-OSS's clamped one)
 *   6. per expert: y = a_e down_e^T + b         (cuBLAS)
 *   7. moe_combine_kernel    out[t] = sum_j w[t][j] * y[slot_pos[t*k+j]] in
 *                            route order j, so the sum is deterministic.
 * The per-expert GEMM sizes must be known on the host, so the offsets are
 * copied back once (one stream sync per call).
 *
 * bf16 weights (kernels/moe.h): the gather writes xp and the activation
 * writes a as bf16, so both products read bf16 operands on the tensor
 * cores (fp32 accumulation, fp32 h and y). */
#include <math.h>
#include <stdlib.h>
#include <cuda_bf16.h>
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/fp8_cuda.cuh"
extern "C" {
#include "kernels/moe.h"
}

__device__ __forceinline__ int local_expert(const int32_t *expert_idx, int slot, int offset, int n_local)
{
    int e = expert_idx[slot] - offset;
    return e >= 0 && e < n_local ? e : -1;
}

/* One block: counts per local expert in shared memory, then the exclusive
 * scan (n_local is small) into offsets[0..n_local]. */
__global__ void moe_count_kernel(const int32_t *expert_idx, int n_slots, int offset, int n_local,
                                 int *offsets)
{
    extern __shared__ int counts[];
    for (int e = threadIdx.x; e < n_local; e += blockDim.x)
        counts[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n_slots; i += blockDim.x) {
        int e = local_expert(expert_idx, i, offset, n_local);
        if (e >= 0)
            atomicAdd(&counts[e], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int run = 0;
        for (int e = 0; e < n_local; e++) {
            offsets[e] = run;
            run += counts[e];
        }
        offsets[n_local] = run;
    }
}

/* Block e walks all slots in order and places its expert's ones at
 * offsets[e] + (number of earlier slots of e): a block-wide ballot scan,
 * so the order inside an expert's rows is the slot order (deterministic).
 * Block n_local marks the slots held elsewhere with slot_pos = -1. */
__global__ void moe_place_kernel(const int32_t *expert_idx, int n_slots, int offset, int n_local,
                                 const int *offsets, int *perm, int *slot_pos)
{
    __shared__ int warp_counts[32];
    const int e = blockIdx.x, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int n_warps = blockDim.x >> 5;
    if (e == n_local) {
        for (int i = threadIdx.x; i < n_slots; i += blockDim.x)
            if (local_expert(expert_idx, i, offset, n_local) < 0)
                slot_pos[i] = -1;
        return;
    }
    int base = offsets[e];
    for (int start = 0; start < n_slots; start += blockDim.x) {
        int i = start + threadIdx.x;
        bool mine = i < n_slots && local_expert(expert_idx, i, offset, n_local) == e;
        unsigned ballot = __ballot_sync(0xffffffffu, mine);
        if (lane == 0)
            warp_counts[w] = __popc(ballot);
        __syncthreads();
        int before = 0, total = 0;
        for (int ww = 0; ww < n_warps; ww++) {
            if (ww < w)
                before += warp_counts[ww];
            total += warp_counts[ww];
        }
        if (mine) {
            int pos = base + before + __popc(ballot & ((1u << lane) - 1u));
            perm[pos] = i;
            slot_pos[i] = pos;
        }
        base += total;
        __syncthreads(); /* warp_counts is rewritten next round */
    }
}

__device__ __forceinline__ void store_as(float *p, float v) { *p = v; }
__device__ __forceinline__ void store_as(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

template <typename T>
__global__ void moe_gather_kernel(T *xp, const float *x, const int *perm, int k, int dim)
{
    const float *src = x + (size_t)(perm[blockIdx.x] / k) * dim;
    T *dst = xp + (size_t)blockIdx.x * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        store_as(&dst[i], src[i]);
}

/* h is [rows][2*inter] (gate | up), a is [rows][inter]. */
template <typename T>
__global__ void moe_act_kernel(T *a, const float *h, size_t rows, int inter, int act,
                               float alpha, float limit)
{
    size_t total = rows * inter;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        size_t r = idx / inter;
        int i = (int)(idx - r * inter);
        float g = h[r * 2 * inter + i], u = h[r * 2 * inter + inter + i];
        float y;
        if (act == KN_ACT_SWIGLU_OAI) {
            g = fminf(g, limit);
            u = fminf(fmaxf(u, -limit), limit);
            y = g / (1.f + expf(-alpha * g)) * (u + 1.f);
        } else {
            y = g / (1.f + expf(-g)) * u;
        }
        store_as(&a[idx], y);
    }
}

__global__ void moe_combine_kernel(float *out, const float *y, const int *slot_pos,
                                   const float *expert_w, int k, int dim)
{
    const int t = blockIdx.x;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
        float acc = 0.f;
        for (int j = 0; j < k; j++) {
            int pos = slot_pos[t * k + j];
            if (pos >= 0)
                acc += expert_w[t * k + j] * y[(size_t)pos * dim + d];
        }
        out[(size_t)t * dim + d] = acc;
    }
}

extern "C" int kn_moe_experts_cuda(const kn_backend *be, float *out, const float *x,
                                   const int32_t *expert_idx, const float *expert_w,
                                   int n_tokens, int k, const kn_moe_weights *w)
{
    static const char op[] = "kn_moe_experts";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != KN_OK)
        return rc;
    if (!out || !x || !expert_idx || !expert_w || !w)
        return kn_arg_error(op, "NULL %s", !out ? "out" : !x ? "x" : !expert_idx ? "expert_idx"
                                                              : !expert_w ? "expert_w" : "weights");
    if (!w->gate_up || !w->down)
        return kn_arg_error(op, "NULL %s weights", !w->gate_up ? "gate_up" : "down");
    if (n_tokens < 0 || k <= 0 || w->n_experts <= 0 || w->dim <= 0 || w->inter <= 0 || w->expert_offset < 0)
        return kn_arg_error(op, "bad sizes n_tokens=%d k=%d n_experts=%d dim=%d inter=%d expert_offset=%d",
                                 n_tokens, k, w->n_experts, w->dim, w->inter, w->expert_offset);
    if (w->act != KN_ACT_SWIGLU && w->act != KN_ACT_SWIGLU_OAI)
        return kn_arg_error(op, "unknown activation %d", (int)w->act);
    if (w->wdtype != KN_F32 && w->wdtype != KN_BF16 && w->wdtype != KN_FP8_E4M3)
        return kn_arg_error(op, "unknown weight dtype %d", (int)w->wdtype);
    if (w->wdtype == KN_FP8_E4M3 && (!w->gate_up_scale || !w->down_scale))
        return kn_arg_error(op, "fp8 expert weights without block scales");
    if (w->act == KN_ACT_SWIGLU_OAI && (!isfinite(w->alpha) || !(w->limit > 0.f) || isinf(w->limit)))
        return kn_arg_error(op, "bad clamped-SwiGLU parameters alpha=%g limit=%g",
                                 (double)w->alpha, (double)w->limit);
    size_t x_bytes = (size_t)n_tokens * w->dim * sizeof(float);
    if (kn_ranges_overlap(out, x_bytes, x, x_bytes))
        return kn_arg_error(op, "out overlaps x");
    if (n_tokens == 0)
        return KN_OK;
    if ((size_t)n_tokens * k > (size_t)0x7fffffff)
        return kn_arg_error(op, "%d tokens x %d routes is too many", n_tokens, k);

    cudaStream_t s = kn_cuda_stream(be);
    const int n_local = w->n_experts, dim = w->dim, inter = w->inter, n_slots = n_tokens * k;
    const bool bf16 = w->wdtype == KN_BF16;
    /* fp8: fp32 gather and activation; the FP8 products quantize their own
     * inputs (fp8_cuda.cuh) */
    const bool fp8 = w->wdtype == KN_FP8_E4M3;
    const size_t welem = kn_dtype_size(w->wdtype);
    const char *gate_up = (const char *)w->gate_up, *down = (const char *)w->down;
    int *offsets = NULL, *perm = NULL, *slot_pos = NULL, *host_off = NULL;
    float *xp = NULL, *h = NULL, *act = NULL;
    int n_routed = 0;
    cudaError_t err = cudaSuccess;

    host_off = (int *)malloc((size_t)(n_local + 1) * sizeof(int));
    offsets = (int *)kn_cuda_tmp_alloc(be, op, (size_t)(n_local + 1) * sizeof(int));
    perm = (int *)kn_cuda_tmp_alloc(be, op, (size_t)n_slots * sizeof(int));
    slot_pos = (int *)kn_cuda_tmp_alloc(be, op, (size_t)n_slots * sizeof(int));
    if (!host_off || !offsets || !perm || !slot_pos) {
        rc = KN_ERR_NOMEM;
        goto done;
    }
    moe_count_kernel<<<1, 1024, (size_t)n_local * sizeof(int), s>>>(expert_idx, n_slots,
                                                                    w->expert_offset, n_local, offsets);
    if ((err = cudaGetLastError()) != cudaSuccess)
        goto done;
    moe_place_kernel<<<n_local + 1, 256, 0, s>>>(expert_idx, n_slots, w->expert_offset, n_local,
                                                 offsets, perm, slot_pos);
    if ((err = cudaGetLastError()) != cudaSuccess)
        goto done;
    if ((err = cudaMemcpyAsync(host_off, offsets, (size_t)(n_local + 1) * sizeof(int),
                               cudaMemcpyDeviceToHost, s)) != cudaSuccess ||
        (err = cudaStreamSynchronize(s)) != cudaSuccess)
        goto done;
    n_routed = host_off[n_local];

    if (n_routed > 0) {
        xp = (float *)kn_cuda_tmp_alloc(be, op, (size_t)n_routed * dim * sizeof(float));
        h = (float *)kn_cuda_tmp_alloc(be, op, (size_t)n_routed * 2 * inter * sizeof(float));
        act = (float *)kn_cuda_tmp_alloc(be, op, (size_t)n_routed * inter * sizeof(float));
        if (!xp || !h || !act) {
            rc = KN_ERR_NOMEM;
            goto done;
        }
        /* xp holds the gathered inputs (fp32 or bf16), later y (fp32). */
        if (bf16)
            moe_gather_kernel<<<n_routed, dim >= 512 ? 256 : 64, 0, s>>>((__nv_bfloat16 *)xp, x, perm,
                                                                         k, dim);
        else
            moe_gather_kernel<<<n_routed, dim >= 512 ? 256 : 64, 0, s>>>(xp, x, perm, k, dim);
        if ((err = cudaGetLastError()) != cudaSuccess)
            goto done;
        if (fp8)
            rc = kn_cuda_fp8_expert_gemms(be, op, h, xp, host_off, offsets, n_local,
                                          (const uint8_t *)gate_up, w->gate_up_scale,
                                          w->gate_up_bias, 2 * inter, dim);
        for (int e = 0; !fp8 && e < n_local && rc == KN_OK; e++) {
            int rows = host_off[e + 1] - host_off[e];
            if (rows == 0)
                continue;
            rc = kn_cuda_gemm(be, op, h + (size_t)host_off[e] * 2 * inter,
                              (const char *)xp + (size_t)host_off[e] * dim * welem,
                              gate_up + (size_t)e * 2 * inter * dim * welem, w->wdtype,
                              w->gate_up_bias ? w->gate_up_bias + (size_t)e * 2 * inter : NULL,
                              rows, 2 * inter, dim);
        }
        if (rc != KN_OK)
            goto done;
        {
            size_t total = (size_t)n_routed * inter;
            size_t blocks = (total + 255) / 256, cap = (size_t)kn_cuda_ctx_of(be)->sm_count * 16;
            unsigned grid = (unsigned)(blocks < cap ? blocks : cap);
            if (bf16)
                moe_act_kernel<<<grid, 256, 0, s>>>((__nv_bfloat16 *)act, h, (size_t)n_routed, inter,
                                                    (int)w->act, w->alpha, w->limit);
            else
                moe_act_kernel<<<grid, 256, 0, s>>>(act, h, (size_t)n_routed, inter, (int)w->act,
                                                    w->alpha, w->limit);
            if ((err = cudaGetLastError()) != cudaSuccess)
                goto done;
        }
        /* y reuses xp: the gathered inputs are no longer needed. */
        if (fp8)
            rc = kn_cuda_fp8_expert_gemms(be, op, xp, act, host_off, offsets, n_local,
                                          (const uint8_t *)down, w->down_scale, w->down_bias,
                                          dim, inter);
        for (int e = 0; !fp8 && e < n_local && rc == KN_OK; e++) {
            int rows = host_off[e + 1] - host_off[e];
            if (rows == 0)
                continue;
            rc = kn_cuda_gemm(be, op, xp + (size_t)host_off[e] * dim,
                              (const char *)act + (size_t)host_off[e] * inter * welem,
                              down + (size_t)e * dim * inter * welem, w->wdtype,
                              w->down_bias ? w->down_bias + (size_t)e * dim : NULL,
                              rows, dim, inter);
        }
        if (rc != KN_OK)
            goto done;
    }
    moe_combine_kernel<<<n_tokens, dim >= 512 ? 256 : 64, 0, s>>>(out, xp, slot_pos, expert_w, k, dim);
    err = cudaGetLastError();

done:
    kn_cuda_tmp_free(be, offsets);
    kn_cuda_tmp_free(be, perm);
    kn_cuda_tmp_free(be, slot_pos);
    kn_cuda_tmp_free(be, xp);
    kn_cuda_tmp_free(be, h);
    kn_cuda_tmp_free(be, act);
    free(host_off);
    if (err != cudaSuccess)
        return kn_cuda_device_error(op, "expert MLP", err);
    return rc;
}
