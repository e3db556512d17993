/* kn_moe_experts for FP8 weights at decode (one to KN_CUDA_MOE_GEMV_MAX_TOKENS
 * tokens): the expert MLPs as GEMVs over each (token, route) "slot", with
 * the routed expert ids and weights read on the device. Two launches, each
 * block one gemv_fp8.cuh block (its weight rows copied into shared memory
 * by one bulk copy, then 128 threads splitting K):
 *   1. moe_gemv_gate_up_kernel  grid (column groups, slots): a block owns
 *        MG_COLS activation columns of one slot, i.e. 2 MG_COLS weight rows
 *        of the slot's expert (gate c.. and up c..), against the token's
 *        fp32 x row; + bias, the activation (kernels/moe.h's, as the
 *        CPU's), fp32 a[slot][inter]. Slots whose expert is not held here
 *        exit.
 *   2. moe_gemv_down_kernel     grid (row groups, routes, tokens): a block
 *        computes MG_DROWS output columns of its route's down projection
 *        (+ bias, times the route weight) into a parts buffer and counts
 *        itself on the (row group, token)'s arrival counter; the last of the
 *        k route blocks to arrive adds the k routes' parts in route order
 *        and resets the counter: the combine is fused and deterministic,
 *        with one block per (rows, route) in flight instead of a route loop.
 *        (Until s14 the k route blocks were a thread-block cluster summing
 *        through distributed shared memory: each block held its SM slot
 *        until the cluster's slowest block ended, two cluster barriers;
 *        s7run3's ncu had that kernel at 1.92 TB/s against gate_up's 3.05.
 *        s14run2, session 12's build of the counter form against the
 *        cluster one, H200, ms a decode step: GPT-OSS-20B 1 / 2 / 4 tokens
 *        2.223 / 3.025 / 4.360 vs 2.216 / 3.045 / 4.467, Qwen3-30B-A3B 1
 *        token 3.305 vs 3.422.)
 *
 * Against the grouped FP8 decode path (moe_experts.cu + moe_grouped_fp8.cu:
 * count, place, quantize x, gate_up, down, combine = 6 launches): at one
 * token both read each selected expert's weights once, which is the bound;
 * this one spreads them over n_slots*inter/MG_COLS blocks of gate_up (2880
 * at GPT-OSS's 4 routes x 2880) and k*dim/MG_DROWS blocks of down (1440),
 * where the grouped gate_up has one 16-warp block per 128 columns per
 * expert (92 blocks for 4 routes); it launches 2 kernels instead of 6,
 * needs no perm/offsets, and keeps x and the activation in fp32 (no e4m3
 * rounding of either: gemv_fp8.cuh's bound on each product). At more
 * tokens a shared expert is streamed once per token (from L2 when they
 * run together), so the grouped path takes over past
 * KN_CUDA_MOE_GEMV_MAX_TOKENS (gemv_fp8.cuh). s7a (ncu, one GPT-OSS-20B
 * decode step at batch 1) measured the previous one-warp-per-rows kernels
 * at 25 us (gate_up, 66.5 MB) and 43 us (down, 33.3 MB: 16% of the DRAM
 * bandwidth) a layer. */
#include <math.h>
#include "kernels/cuda/gemv_fp8.cuh"
extern "C" {
#include "kernels/cuda/cuda_backend.h"
}
#include "kernels/cuda/expert_act.cuh"

constexpr int MG_COLS = 4;  /* activation columns per gate_up block: 8 weight rows */
constexpr int MG_DROWS = 8; /* down rows (output columns) per block */

template <bool VEC>
__global__ void __launch_bounds__(KN_GEMV_THREADS)
moe_gemv_gate_up_kernel(float *a, const float *x, const int32_t *expert_idx, int k, int offset, int n_local,
                        const uint8_t *gate_up, const float *gate_up_scale, const float *gate_up_bias,
                        int dim, int inter, size_t e_bytes, size_t e_scales, int ld, int sld, int act,
                        float alpha, float limit)
{
    extern __shared__ __align__(128) uint8_t wbuf[]; /* [2 MG_COLS][ld]: gate rows, then up rows */
    __shared__ __align__(8) uint64_t bar;
    __shared__ float red[KN_GEMV_WARPS][2 * MG_COLS];
    const int slot = blockIdx.y, tid = threadIdx.x;
    const int e = expert_idx[slot] - offset;
    if (e < 0 || e >= n_local) /* held elsewhere (expert parallelism); block-uniform */
        return;
    const int c0 = blockIdx.x * MG_COLS, nv = min(MG_COLS, inter - c0);
    const uint8_t *we = gate_up + (size_t)e * e_bytes;
    if (tid == 0)
        kn_gemv_rows_start2(kn_smem_addr(&bar), kn_smem_addr(wbuf), we + (size_t)c0 * ld, nv,
                            kn_smem_addr(wbuf + (size_t)MG_COLS * ld), we + (size_t)(inter + c0) * ld, nv, ld);
    const float *se = gate_up_scale + (size_t)e * e_scales;
    const float *sr[2 * MG_COLS];
#pragma unroll
    for (int c = 0; c < MG_COLS; c++) {
        const int col = min(c0 + c, inter - 1);
        sr[c] = se + (size_t)(col / KN_FP8_BLOCK) * sld;
        sr[MG_COLS + c] = se + (size_t)((inter + col) / KN_FP8_BLOCK) * sld;
    }
    float acc[2 * MG_COLS][1];
#pragma unroll
    for (int c = 0; c < 2 * MG_COLS; c++)
        acc[c][0] = 0.f;
    const unsigned valid = ((1u << nv) - 1u) * (1u | 1u << MG_COLS);
    __syncthreads(); /* bar initialised */
    kn_gemv_smem_rows<2 * MG_COLS, 1, VEC>(acc, wbuf, ld, valid, sr, x + (size_t)(slot / k) * dim, (size_t)dim, 1,
                                           dim, tid, kn_smem_addr(&bar));
    kn_gemv_block_sum<2 * MG_COLS>(&acc[0][0], red, tid);
    if (tid < nv) {
        const int col = c0 + tid;
        float g = kn_gemv_block_total(red, tid), u = kn_gemv_block_total(red, MG_COLS + tid);
        if (gate_up_bias) {
            const float *b = gate_up_bias + (size_t)e * 2 * inter;
            g += b[col];
            u += b[inter + col];
        }
        a[(size_t)slot * inter + col] = kn_cuda_expert_act(g, u, act, alpha, limit);
    }
}

/* One block per (row group, route j, token t); done holds one arrival
 * counter per (row group, token), zero between launches. */
template <bool VEC>
__global__ void __launch_bounds__(KN_GEMV_THREADS)
moe_gemv_down_kernel(float *out, float *parts, unsigned *done, const float *a, const int32_t *expert_idx,
                     const float *expert_w, int k, int offset, int n_local, const uint8_t *down,
                     const float *down_scale, const float *down_bias, int dim, int inter, size_t e_bytes,
                     size_t e_scales, int ld, int sld)
{
    extern __shared__ __align__(128) uint8_t wbuf[]; /* [MG_DROWS][ld] */
    __shared__ __align__(8) uint64_t bar;
    __shared__ float red[KN_GEMV_WARPS][MG_DROWS];
    __shared__ int last;
    const int j = blockIdx.y, t = blockIdx.z, tid = threadIdx.x;
    const int d0 = blockIdx.x * MG_DROWS, nv = min(MG_DROWS, dim - d0);
    const size_t slot = (size_t)t * k + j;
    const int e = expert_idx[slot] - offset;
    const bool local = e >= 0 && e < n_local; /* block-uniform */
    const uint8_t *we = down + (size_t)e * e_bytes;
    if (local && tid == 0)
        kn_gemv_rows_start2(kn_smem_addr(&bar), kn_smem_addr(wbuf), we + (size_t)d0 * ld, nv, 0, NULL, 0, ld);
    float acc[MG_DROWS][1];
#pragma unroll
    for (int c = 0; c < MG_DROWS; c++)
        acc[c][0] = 0.f;
    __syncthreads(); /* bar initialised */
    if (local) {
        const float *sr[MG_DROWS];
#pragma unroll
        for (int c = 0; c < MG_DROWS; c++)
            sr[c] = down_scale + (size_t)e * e_scales + (size_t)(min(d0 + c, dim - 1) / KN_FP8_BLOCK) * sld;
        kn_gemv_smem_rows<MG_DROWS, 1, VEC>(acc, wbuf, ld, (1u << nv) - 1u, sr, a + slot * inter, (size_t)inter,
                                            1, inter, tid, kn_smem_addr(&bar));
    }
    kn_gemv_block_sum<MG_DROWS>(&acc[0][0], red, tid);
    if (tid < nv) {
        float v = 0.f;
        if (local)
            v = expert_w[slot] * (kn_gemv_block_total(red, tid) +
                                  (down_bias ? down_bias[(size_t)e * dim + d0 + tid] : 0.f));
        parts[slot * dim + d0 + tid] = v;
    }
    /* The threadfence-reduction pattern: each block's parts are visible
     * device-wide before it counts itself, and the last block to count
     * reads them all. */
    __syncthreads();
    if (tid == 0) {
        __threadfence();
        unsigned *c = done + (size_t)t * gridDim.x + blockIdx.x;
        last = atomicAdd(c, 1u) == (unsigned)k - 1u;
        if (last)
            *c = 0u; /* every route counted: zero for the next launch */
    }
    __syncthreads();
    if (last && tid < nv) {
        __threadfence();
        float total = 0.f;
        for (int r = 0; r < k; r++)
            total += __ldcg(&parts[((size_t)t * k + r) * dim + d0 + tid]);
        out[(size_t)t * dim + d0 + tid] = total;
    }
}

int kn_cuda_moe_gemv_fp8_takes(const kn_backend *be, const kn_moe_weights *w, int n_tokens, int k)
{
    return w->wdtype == KN_FP8_E4M3 && kn_cuda_ctx_of(be)->moe_gemv && n_tokens >= 1 &&
           n_tokens <= KN_CUDA_MOE_GEMV_MAX_TOKENS && k >= 1 &&
           (size_t)(w->dim + MG_DROWS - 1) / MG_DROWS * n_tokens <= KN_CUDA_MOE_DOWN_COUNTERS &&
           (size_t)2 * MG_COLS * kn_fp8_ld((size_t)w->dim) <= (size_t)KN_GEMV_SMEM_MAX &&
           (size_t)MG_DROWS * kn_fp8_ld((size_t)w->inter) <= (size_t)KN_GEMV_SMEM_MAX && w->gate_up_scale && w->down_scale &&
           !((uintptr_t)w->gate_up & 15) && !((uintptr_t)w->down & 15) &&
           !((uintptr_t)w->gate_up_scale & 3) && !((uintptr_t)w->down_scale & 3);
}

int kn_cuda_moe_gemv_fp8(const kn_backend *be, const char *op, float *out, const float *x,
                         const int32_t *expert_idx, const float *expert_w, int n_tokens, int k,
                         const kn_moe_weights *w)
{
    if (n_tokens < 1 || n_tokens > KN_CUDA_MOE_GEMV_MAX_TOKENS || k < 1)
        return kn_arg_error(op, "expert gemv takes 1..%d tokens, got %d tokens x %d routes",
                            KN_CUDA_MOE_GEMV_MAX_TOKENS, n_tokens, k);
    const int dim = w->dim, inter = w->inter, n_slots = n_tokens * k;
    if (n_slots > 65535)
        return kn_arg_error(op, "%d slots is more than one grid dimension holds", n_slots);
    float *a = (float *)kn_cuda_tmp_alloc(be, op, (size_t)n_slots * inter * sizeof(float));
    float *parts = (float *)kn_cuda_tmp_alloc(be, op, (size_t)n_slots * dim * sizeof(float));
    const unsigned groups = (unsigned)((dim + MG_DROWS - 1) / MG_DROWS);
    if (!a || !parts || (size_t)groups * n_tokens > KN_CUDA_MOE_DOWN_COUNTERS) {
        kn_cuda_tmp_free(be, a);
        kn_cuda_tmp_free(be, parts);
        return a && parts ? kn_arg_error(op, "%u row groups x %d tokens is more than the expert gemv's %d counters",
                                         groups, n_tokens, KN_CUDA_MOE_DOWN_COUNTERS)
                          : TN_ERR_NOMEM;
    }
    cudaStream_t s = kn_cuda_stream(be);
    const size_t gu_bytes = kn_fp8_data_bytes(2 * (size_t)inter, (size_t)dim);
    const size_t gu_scales = kn_fp8_scale_count(2 * (size_t)inter, (size_t)dim);
    const size_t dn_bytes = kn_fp8_data_bytes((size_t)dim, (size_t)inter);
    const size_t dn_scales = kn_fp8_scale_count((size_t)dim, (size_t)inter);
    const int ldx = (int)kn_fp8_ld((size_t)dim), sldx = (int)kn_fp8_scale_ld((size_t)dim);
    const int ldi = (int)kn_fp8_ld((size_t)inter), sldi = (int)kn_fp8_scale_ld((size_t)inter);
    const dim3 g1((unsigned)((inter + MG_COLS - 1) / MG_COLS), (unsigned)n_slots);
    /* the vector loads of x (VEC) where its rows are 16-byte aligned */
    auto gate_up_kernel = dim % 16 == 0 && ((uintptr_t)x & 15) == 0 ? moe_gemv_gate_up_kernel<true>
                                                                      : moe_gemv_gate_up_kernel<false>;
    gate_up_kernel<<<g1, KN_GEMV_THREADS, (size_t)2 * MG_COLS * ldx, s>>>(
        a, x, expert_idx, k, w->expert_offset, w->n_experts, (const uint8_t *)w->gate_up, w->gate_up_scale,
        w->gate_up_bias, dim, inter, gu_bytes, gu_scales, ldx, sldx, (int)w->act, w->alpha, w->limit);
    cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess) {
        const dim3 g2(groups, (unsigned)k, (unsigned)n_tokens);
        /* a's rows are 64-byte aligned when inter % 16 == 0 (pool blocks are 256-aligned) */
        auto down_kernel = inter % 16 == 0 ? moe_gemv_down_kernel<true> : moe_gemv_down_kernel<false>;
        down_kernel<<<g2, KN_GEMV_THREADS, (size_t)MG_DROWS * ldi, s>>>(
            out, parts, kn_cuda_ctx_of(be)->moe_down_done, a, expert_idx, expert_w, k, w->expert_offset,
            w->n_experts, (const uint8_t *)w->down, w->down_scale, w->down_bias, dim, inter, dn_bytes, dn_scales,
            ldi, sldi);
        err = cudaGetLastError();
    }
    kn_cuda_tmp_free(be, a);
    kn_cuda_tmp_free(be, parts);
    return err == cudaSuccess ? TN_OK : kn_cuda_device_error(op, "moe gemv kernels", err);
}

extern "C" void kn_cuda_set_moe_gemv(const kn_backend *be, int on)
{
    kn_cuda_ctx_of(be)->moe_gemv = on != 0;
}

extern "C" int kn_cuda_moe_gemv_on(const kn_backend *be)
{
    return kn_cuda_ctx_of(be)->moe_gemv;
}
