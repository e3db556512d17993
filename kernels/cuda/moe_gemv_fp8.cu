/* kn_moe_experts for FP8 weights at decode (one to KN_CUDA_MOE_GEMV_MAX_TOKENS
 * tokens): the expert MLPs as GEMVs over each (token, route) "slot", with
 * the routed expert ids and weights read on the device. Two launches:
 *   1. moe_gemv_gate_up_kernel  grid (column chunks, slots): a warp owns 2
 *        activation columns of one slot, i.e. 4 weight rows of the slot's
 *        expert (gate c, c+1 and up c, c+1), against the token's fp32 x
 *        row; + bias, the activation (kernels/moe.h's, as the CPU's), fp32
 *        a[slot][inter]. Slots whose expert is not held here exit.
 *   2. moe_gemv_down_kernel     grid (columns, tokens): a warp owns one
 *        output column d of one token and streams row d of all its routes'
 *        down matrices together (4 routes per pass, each against its own a
 *        row), then out[t][d] = sum_j w_j * (dot_j + down_bias_j) in route
 *        order: the combine is fused and deterministic.
 *
 * Against the grouped FP8 decode path (moe_experts.cu + moe_grouped_fp8.cu:
 * count, place, quantize x, gate_up, down, combine = 6 launches): at one
 * token both read each selected expert's weights once, which is the bound;
 * this one spreads them over n_slots*inter/2 warps of gate_up (5760 at
 * GPT-OSS's 4 routes x 2880, every SM) and dim warps of down, where the
 * grouped gate_up has one 16-warp block per 128 columns per expert (92
 * blocks for 4 routes: 92 of 132 SMs); it launches 2 kernels instead of
 * 6, needs no perm/offsets, and keeps x and the activation in fp32 (no
 * e4m3 rounding of either: gemv_fp8.cuh's bound on each product). At more
 * tokens a shared expert is streamed once per token (from L2 when they
 * run together), so the grouped path takes over past
 * KN_CUDA_MOE_GEMV_MAX_TOKENS (gemv_fp8.cuh). */
#include <math.h>
#include "kernels/cuda/gemv_fp8.cuh"
extern "C" {
#include "kernels/cuda/cuda_backend.h"
}

constexpr int MG_WARPS = 4;       /* warps per block, both kernels */
constexpr int MG_COLS = 2;        /* activation columns per gate_up warp */
constexpr int MG_ROUTES = 4;      /* routes streamed together by a down warp */

/* kernels/moe.h's activation (moe_experts.cu's expert_act, the CPU's). */
__device__ __forceinline__ float mg_act(float g, float u, int act, float alpha, float limit)
{
    if (act == KN_ACT_SWIGLU_OAI) {
        g = fminf(g, limit);
        u = fminf(fmaxf(u, -limit), limit);
        return g / (1.f + expf(-alpha * g)) * (u + 1.f);
    }
    return g / (1.f + expf(-g)) * u;
}

template <bool VEC>
__global__ void __launch_bounds__(MG_WARPS * 32)
moe_gemv_gate_up_kernel(float *a, const float *x, const int32_t *expert_idx, int k, int offset, int n_local,
                        const uint8_t *gate_up, const float *gate_up_scale, const float *gate_up_bias,
                        int dim, int inter, size_t e_bytes, size_t e_scales, int ld, int sld, int act,
                        float alpha, float limit)
{
    const int slot = blockIdx.y, lane = threadIdx.x & 31;
    const int e = expert_idx[slot] - offset;
    if (e < 0 || e >= n_local) /* held elsewhere (expert parallelism) */
        return;
    const int c0 = (blockIdx.x * MG_WARPS + (threadIdx.x >> 5)) * MG_COLS;
    if (c0 >= inter)
        return;
    const uint8_t *we = gate_up + (size_t)e * e_bytes;
    const float *se = gate_up_scale + (size_t)e * e_scales;
    const uint8_t *wr[2 * MG_COLS];
    const float *sr[2 * MG_COLS];
#pragma unroll
    for (int c = 0; c < MG_COLS; c++) {
        const int col = min(c0 + c, inter - 1), up = inter + col;
        wr[c] = we + (size_t)col * ld;
        sr[c] = se + (size_t)(col / KN_FP8_BLOCK) * sld;
        wr[MG_COLS + c] = we + (size_t)up * ld;
        sr[MG_COLS + c] = se + (size_t)(up / KN_FP8_BLOCK) * sld;
    }
    float acc[2 * MG_COLS][1];
#pragma unroll
    for (int c = 0; c < 2 * MG_COLS; c++)
        acc[c][0] = 0.f;
    kn_gemv_rows<2 * MG_COLS, 1, VEC>(acc, wr, sr, x + (size_t)(slot / k) * dim, (size_t)dim, 1, dim, lane);
    const float *b = gate_up_bias ? gate_up_bias + (size_t)e * 2 * inter : NULL;
#pragma unroll
    for (int c = 0; c < MG_COLS; c++) {
        float g = kn_gemv_warp_sum(acc[c][0]), u = kn_gemv_warp_sum(acc[MG_COLS + c][0]);
        const int col = c0 + c;
        if (lane == c && col < inter) {
            if (b) {
                g += b[col];
                u += b[inter + col];
            }
            a[(size_t)slot * inter + col] = mg_act(g, u, act, alpha, limit);
        }
    }
}

/* acc[c] += this lane's share of w_real[c] . xr[c] for the rows c < n
 * (n warp-uniform): each weight row with its own x row, all streamed
 * together (kn_gemv_rows with one x row per weight row). */
template <bool VEC>
__device__ __forceinline__ void mg_rows_own_x(float (&acc)[MG_ROUTES], const uint8_t *const *w,
                                              const float *const *s, const float *const *xr, int n, int K,
                                              int lane)
{
    constexpr int U = 2;
    for (int k00 = lane * 16; k00 < K; k00 += U * 512) {
        uint4 wv[U][MG_ROUTES];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int c = 0; c < MG_ROUTES; c++)
                wv[u][c] = c < n && k00 + u * 512 < K ? kn_ld_stream16(w[c] + k00 + u * 512)
                                                      : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int k0 = k00 + u * 512;
            if (k0 >= K)
                break;
            const int b = k0 / KN_FP8_BLOCK;
#pragma unroll
            for (int c = 0; c < MG_ROUTES; c++) {
                if (c >= n)
                    break;
                float xv[16];
                kn_gemv_load_x16<VEC>(xv, xr[c], k0, K);
                acc[c] = fmaf(kn_gemv_dot16(wv[u][c], xv), s[c][b], acc[c]);
            }
        }
    }
}

template <bool VEC>
__global__ void __launch_bounds__(MG_WARPS * 32)
moe_gemv_down_kernel(float *out, const float *a, const int32_t *expert_idx, const float *expert_w, int k,
                     int offset, int n_local, const uint8_t *down, const float *down_scale,
                     const float *down_bias, int dim, int inter, size_t e_bytes, size_t e_scales, int ld,
                     int sld)
{
    const int t = blockIdx.y, lane = threadIdx.x & 31;
    const int d = blockIdx.x * MG_WARPS + (threadIdx.x >> 5);
    if (d >= dim)
        return;
    float total = 0.f;
    for (int j0 = 0; j0 < k; j0 += MG_ROUTES) {
        /* this pass's routes held here, in route order */
        const uint8_t *wr[MG_ROUTES];
        const float *sr[MG_ROUTES], *xr[MG_ROUTES];
        float wt[MG_ROUTES], bias[MG_ROUTES];
        int n = 0;
#pragma unroll
        for (int c = 0; c < MG_ROUTES; c++) { /* unused rows: never read */
            wr[c] = down;
            sr[c] = down_scale;
            xr[c] = a;
            wt[c] = bias[c] = 0.f;
        }
        for (int j = j0; j < k && j < j0 + MG_ROUTES; j++) {
            const size_t slot = (size_t)t * k + j;
            const int e = expert_idx[slot] - offset;
            if (e < 0 || e >= n_local)
                continue;
#pragma unroll
            for (int c = 0; c < MG_ROUTES; c++)
                if (c == n) { /* constant register indices */
                    wr[c] = down + (size_t)e * e_bytes + (size_t)d * ld;
                    sr[c] = down_scale + (size_t)e * e_scales + (size_t)(d / KN_FP8_BLOCK) * sld;
                    xr[c] = a + slot * inter;
                    wt[c] = expert_w[slot];
                    bias[c] = down_bias ? down_bias[(size_t)e * dim + d] : 0.f;
                }
            n++;
        }
        float acc[MG_ROUTES];
#pragma unroll
        for (int c = 0; c < MG_ROUTES; c++)
            acc[c] = 0.f;
        mg_rows_own_x<VEC>(acc, wr, sr, xr, n, inter, lane);
#pragma unroll
        for (int c = 0; c < MG_ROUTES; c++) {
            const float v = kn_gemv_warp_sum(acc[c]);
            if (c < n)
                total += wt[c] * (v + bias[c]);
        }
    }
    if (lane == 0)
        out[(size_t)t * dim + d] = total;
}

int kn_cuda_moe_gemv_fp8_takes(const kn_backend *be, const kn_moe_weights *w, int n_tokens)
{
    return w->wdtype == KN_FP8_E4M3 && kn_cuda_ctx_of(be)->moe_gemv && n_tokens >= 1 &&
           n_tokens <= KN_CUDA_MOE_GEMV_MAX_TOKENS && w->gate_up_scale && w->down_scale &&
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
    if (!a)
        return TN_ERR_NOMEM;
    cudaStream_t s = kn_cuda_stream(be);
    const size_t gu_bytes = kn_fp8_data_bytes(2 * (size_t)inter, (size_t)dim);
    const size_t gu_scales = kn_fp8_scale_count(2 * (size_t)inter, (size_t)dim);
    const size_t dn_bytes = kn_fp8_data_bytes((size_t)dim, (size_t)inter);
    const size_t dn_scales = kn_fp8_scale_count((size_t)dim, (size_t)inter);
    const int ldx = (int)kn_fp8_ld((size_t)dim), sldx = (int)kn_fp8_scale_ld((size_t)dim);
    const int ldi = (int)kn_fp8_ld((size_t)inter), sldi = (int)kn_fp8_scale_ld((size_t)inter);
    const dim3 g1((unsigned)((inter + MG_COLS * MG_WARPS - 1) / (MG_COLS * MG_WARPS)), (unsigned)n_slots);
    if (dim % 16 == 0 && ((uintptr_t)x & 15) == 0)
        moe_gemv_gate_up_kernel<true><<<g1, MG_WARPS * 32, 0, s>>>(
            a, x, expert_idx, k, w->expert_offset, w->n_experts, (const uint8_t *)w->gate_up, w->gate_up_scale,
            w->gate_up_bias, dim, inter, gu_bytes, gu_scales, ldx, sldx, (int)w->act, w->alpha, w->limit);
    else
        moe_gemv_gate_up_kernel<false><<<g1, MG_WARPS * 32, 0, s>>>(
            a, x, expert_idx, k, w->expert_offset, w->n_experts, (const uint8_t *)w->gate_up, w->gate_up_scale,
            w->gate_up_bias, dim, inter, gu_bytes, gu_scales, ldx, sldx, (int)w->act, w->alpha, w->limit);
    cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess) {
        const dim3 g2((unsigned)((dim + MG_WARPS - 1) / MG_WARPS), (unsigned)n_tokens);
        if (inter % 16 == 0) /* a's rows then 64-byte aligned (pool blocks are 256-aligned) */
            moe_gemv_down_kernel<true><<<g2, MG_WARPS * 32, 0, s>>>(
                out, a, expert_idx, expert_w, k, w->expert_offset, w->n_experts, (const uint8_t *)w->down,
                w->down_scale, w->down_bias, dim, inter, dn_bytes, dn_scales, ldi, sldi);
        else
            moe_gemv_down_kernel<false><<<g2, MG_WARPS * 32, 0, s>>>(
                out, a, expert_idx, expert_w, k, w->expert_offset, w->n_experts, (const uint8_t *)w->down,
                w->down_scale, w->down_bias, dim, inter, dn_bytes, dn_scales, ldi, sldi);
        err = cudaGetLastError();
    }
    kn_cuda_tmp_free(be, a);
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
