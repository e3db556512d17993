/* Internal to the CUDA backend: FP8 weight GEMVs for one to a few rows
 * (decode), gemv_fp8.cu (dense projections) and moe_gemv_fp8.cu (the MoE
 * experts).
 *
 * The function: out[r][n] = sum_k x[r][k] * w_real[n][k] (+ bias[n]) with
 * w_real = e4m3(code) * scale[n/128][k/128] (kernels/fp8.h's weight), x
 * read as fp32 as it is: NO activation quantization, so this is more
 * accurate than the cuBLASLt path (which rounds x to e4m3 in 1x128
 * blocks, a relative error of up to 2^-4 per element). Each lane sums its
 * 16 products of a 128-block's slice in fp32, scales that partial sum by
 * the block's weight scale into an fp32 total, and the warp's 32 totals
 * are summed by a shuffle tree; so every output is a sum of K products
 * accumulated along chains of at most 16 + K/512 + 5 + 2 fp32 roundings:
 *   |out - exact| <= (23 + K/512) * 2^-24 * sum_k |x[k] w_real[k]|
 * (the float64 reference of tests/ops checks 2^-18 of that sum, which
 * covers K up to 8192 with room).
 *
 * Memory-bound design: a warp owns a few weight rows (output columns);
 * lane l reads 16 codes (one 16-byte load) at k = 16 l + 512 i of each
 * row, two steps' loads issued before they are used, so a row is one
 * coalesced 512-byte stream per step; the fp32 x values of those 16 k's
 * (small, L1/L2-resident) are reused for all the warp's rows. */
#ifndef TANDEM_KERNELS_CUDA_GEMV_FP8_CUH
#define TANDEM_KERNELS_CUDA_GEMV_FP8_CUH
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/mma.cuh"
extern "C" {
#include "kernels/cuda/cuda_backend.h"
#include "kernels/fp8.h"
#include "kernels/moe.h"
}

/* Rows up to which kn_matmul_w with FP8 weights takes the GEMV (with the
 * switch on). Chosen without a measurement: per 16-byte weight load a
 * lane spends ~24 instructions decoding codes and 16 FMAs per row of x,
 * so at H200 rates (4.8 TB/s against 132 SMs x 128 lanes x 1.98 GHz) the
 * kernel stays bandwidth-bound to about 4 rows and is ~1.5x the floor at
 * 8, which still beats the cuBLASLt path's quantization + memsets + 16-row
 * padded GEMM + copy at 8; past 8 the tensor cores win. bench_ops prints
 * both at 1, 2, 4, 8 rows. */
#define KN_CUDA_FP8_GEMV_MAX_ROWS 8
/* Tokens up to which kn_moe_experts with FP8 weights takes the expert
 * GEMV (moe_gemv_fp8.cu), which streams each (token, route)'s expert on
 * its own: at one token that is each selected expert once, as the grouped
 * path reads; at more tokens two tokens sharing an expert read it twice
 * (from L2 when they run together), so past a few tokens the grouped path
 * (one read per expert) is better. */
#define KN_CUDA_MOE_GEMV_MAX_TOKENS KN_CUDA_MOE_GEMV_TOKENS /* cuda_backend.h */

/* 2 e4m3 codes (low byte first) -> 2 floats, exact (e4m3 is a subset of f16). */
static __device__ __forceinline__ float2 kn_gemv_e4m3x2(uint32_t two)
{
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)two, __NV_E4M3);
    __half2 hh;
    hh = *reinterpret_cast<const __half2 *>(&h);
    return __half22float2(hh);
}

/* sum over i < 16 of code[i] * xv[i]: the 16 codes of v against 16 floats. */
static __device__ __forceinline__ float kn_gemv_dot16(uint4 v, const float (&xv)[16])
{
    const uint32_t u[4] = { v.x, v.y, v.z, v.w };
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 a = kn_gemv_e4m3x2(u[i] & 0xffffu), b = kn_gemv_e4m3x2(u[i] >> 16);
        s = fmaf(a.x, xv[4 * i], s);
        s = fmaf(a.y, xv[4 * i + 1], s);
        s = fmaf(b.x, xv[4 * i + 2], s);
        s = fmaf(b.y, xv[4 * i + 3], s);
    }
    return s;
}

/* x[k0..k0+15] of one fp32 row (VEC: K % 16 == 0 and the row 16-byte
 * aligned, so the 16 are 4 float4 loads; else per element, those at or
 * past K read as 0, which meets the weight row's finite padding codes). */
template <bool VEC>
static __device__ __forceinline__ void kn_gemv_load_x16(float (&xv)[16], const float *xr, int k0, int K)
{
    if constexpr (VEC) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float4 f = *reinterpret_cast<const float4 *>(xr + k0 + 4 * i);
            xv[4 * i] = f.x;
            xv[4 * i + 1] = f.y;
            xv[4 * i + 2] = f.z;
            xv[4 * i + 3] = f.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < 16; i++)
            xv[i] = k0 + i < K ? xr[k0 + i] : 0.f;
    }
}

/* acc[c][r] += this lane's share of sum_k w_real[c][k] * x[r][k] for the
 * NC weight rows w[c] (codes, padded rows: kn_fp8_ld(K) bytes) with block
 * scale rows s[c] (s[c][b] scales k block b), and the rows x + r * ldx for
 * r < nr (nr <= R, warp-uniform). Sum it over the warp with
 * kn_gemv_warp_sum. */
template <int NC, int R, bool VEC>
static __device__ __forceinline__ void kn_gemv_rows(float (&acc)[NC][R], const uint8_t *const *w,
                                                    const float *const *s, const float *x,
                                                    size_t ldx, int nr, int K, int lane)
{
    constexpr int U = 2; /* steps whose weight loads are in flight together */
    for (int k00 = lane * 16; k00 < K; k00 += U * 512) {
        uint4 wv[U][NC];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int c = 0; c < NC; c++)
                wv[u][c] = k00 + u * 512 < K ? kn_ld_stream16(w[c] + k00 + u * 512)
                                             : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int k0 = k00 + u * 512;
            if (k0 >= K)
                break;
            const int b = k0 / KN_FP8_BLOCK;
            float sc[NC];
#pragma unroll
            for (int c = 0; c < NC; c++)
                sc[c] = s[c][b];
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (r >= nr)
                    break;
                float xv[16];
                kn_gemv_load_x16<VEC>(xv, x + (size_t)r * ldx, k0, K);
#pragma unroll
                for (int c = 0; c < NC; c++)
                    acc[c][r] = fmaf(kn_gemv_dot16(wv[u][c], xv), sc[c], acc[c][r]);
            }
        }
    }
}

/* The warp's sum of v (every lane gets it). */
static __device__ __forceinline__ float kn_gemv_warp_sum(float v)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/* The dense GEMV: out[m][n] = x[m][k] w^T + bias (fp32 x, out, bias; w an
 * FP8 weight [n][kn_fp8_ld(k)] with scales [ceil(n/128)][kn_fp8_scale_ld(k)]),
 * 1 <= m <= KN_CUDA_FP8_GEMV_MAX_ROWS, one launch on be's stream, nothing
 * allocated, no host sync (capturable). TN_ERR_UNSUPPORTED (nothing
 * queued, no message) when w or ws is not aligned for the vector loads
 * or n or k is 0: the caller then takes the cuBLASLt path. */
int kn_cuda_fp8_gemv(const kn_backend *be, const char *op, float *out, const float *x,
                     const uint8_t *w, const float *ws, const float *bias, int m, int n, int k);

/* 1 when kn_moe_experts_cuda should take kn_cuda_moe_gemv_fp8 for this call. */
int kn_cuda_moe_gemv_fp8_takes(const kn_backend *be, const kn_moe_weights *w, int n_tokens);
/* kn_moe_experts for FP8 weights at decode (moe_gemv_fp8.cu): two
 * launches, the expert ids and weights read on the device (no host sync),
 * one fp32 temporary of n_tokens*k*inter floats from the pool. */
int kn_cuda_moe_gemv_fp8(const kn_backend *be, const char *op, float *out, const float *x,
                         const int32_t *expert_idx, const float *expert_w, int n_tokens, int k,
                         const kn_moe_weights *w);
#endif
