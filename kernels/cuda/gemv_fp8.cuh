/* Internal to the CUDA backend: FP8 weight GEMVs for one to a few rows
 * (decode), gemv_fp8.cu (dense projections) and moe_gemv_fp8.cu (the MoE
 * experts).
 *
 * The function: out[r][n] = sum_k x[r][k] * w_real[n][k] (+ bias[n]) with
 * w_real = e4m3(code) * scale[n/128][k/128] (kernels/fp8.h's weight), x
 * read as fp32 as it is: NO activation quantization, so this is more
 * accurate than the cuBLASLt path (which rounds x to e4m3 in 1x128
 * blocks, a relative error of up to 2^-4 per element). Each thread sums
 * the 16 products of a 16-code chunk in fp32, scales that partial sum by
 * the chunk's block weight scale into an fp32 total (ceil(K/2048) chunks
 * a thread), the warp's 32 totals are summed by a shuffle tree and the
 * block's 4 warp sums in warp order (+ bias); so every output is a sum of
 * K products accumulated along chains of at most
 * 16 + ceil(K/2048) + 5 + 3 + 2 fp32 roundings:
 *   |out - exact| <= (29 + K/2048) * 2^-24 * sum_k |x[k] w_real[k]|
 * (the float64 reference of tests/ops checks 2^-18 of that sum, which
 * covers K up to 64k with room).
 *
 * Memory-bound design, latency first: a decode GEMV reads a few MB, so a
 * warp that streams its rows in dependent steps (load, wait, use, load
 * again) pays the HBM round trip once per step, and weights held in
 * registers cap the bytes in flight at what the registers of the resident
 * warps hold (s7a/s7b, ncu: such kernels ran the experts' gate_up at 2.4
 * TB/s and down at 1.6, k/v in 4.8 us for 1.5 MB). Here a block of 4 warps
 * owns NC weight rows (8; 4 when 8 rows of K bytes pass 48 KB): thread 0
 * starts one bulk copy of them (the copy engine, cp.async.bulk, completing
 * on an mbarrier) into shared memory, and while it is in flight the
 * threads load their x values and scales; then they split K, thread t
 * taking the 16-code chunks at k = 16 t + 2048 i (conflict-free 16-byte
 * shared loads). No registers hold weights in flight, so 8 blocks fit on
 * an SM by registers and shared memory, ~190 KB in flight per SM. x is
 * read with plain loads (L1-cached, shared by the blocks of an SM working
 * on the same k range). The cross-warp sum goes through 4 x NC x R floats
 * of shared memory. */
#ifndef TANDEM_KERNELS_CUDA_GEMV_FP8_CUH
#define TANDEM_KERNELS_CUDA_GEMV_FP8_CUH
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/mma.cuh"
extern "C" {
#include "kernels/cuda/cuda_backend.h"
#include "kernels/fp8.h"
#include "kernels/matmul.h"
#include "kernels/moe.h"
}

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

constexpr int KN_GEMV_WARPS = 4;                       /* warps per block: they split K */
constexpr int KN_GEMV_THREADS = 32 * KN_GEMV_WARPS;
/* Blocks per SM the dense one-x-row GEMV is compiled for (<= 64 registers
 * a thread, which it meets without spilling): with 23.5 KB of rows each, 8
 * of them keep ~190 KB in flight. (The expert kernels are left at their own
 * 64-70: held to 64 the down kernel spills, and s7run5 measured batch 1
 * 2.6% slower that way.) */
constexpr int KN_GEMV_MIN_BLOCKS = 8;
/* Shared memory a block's weight rows may take (the static limit). */
constexpr int KN_GEMV_SMEM_MAX = 48 * 1024;

/* Thread 0 of the block: initialises mbarrier bar and starts the copies of
 * two runs of consecutive weight rows (rows0 rows from src0 to shared dst0,
 * rows1 from src1 to dst1; ld bytes apart, ld a multiple of 16; a run may
 * be empty) by the copy engine, completing on bar. Once per block, then a
 * __syncthreads before any thread waits on bar. */
static __device__ __forceinline__ void kn_gemv_rows_start2(uint32_t bar, uint32_t dst0, const uint8_t *src0,
                                                           int rows0, uint32_t dst1, const uint8_t *src1,
                                                           int rows1, int ld)
{
    kn_mbar_init(bar, 1);
    kn_mbar_init_fence();
    kn_mbar_arrive_expect_tx(bar, (uint32_t)(rows0 + rows1) * (uint32_t)ld);
    if (rows0 > 0)
        kn_bulk_load(dst0, src0, (uint32_t)rows0 * (uint32_t)ld, bar);
    if (rows1 > 0)
        kn_bulk_load(dst1, src1, (uint32_t)rows1 * (uint32_t)ld, bar);
}

/* acc[c][r] += the chunk at k0 of the NC shared-memory weight rows (row c
 * at wbuf + c * ld, scaled by sc[c]; rows whose bit is clear in valid
 * skipped) against x rows r < nr: each x row's 16 values loaded once, the
 * weight chunks re-read from shared memory for it. */
template <int NC, int R, bool VEC>
static __device__ __forceinline__ void kn_gemv_chunk_rows(float (&acc)[NC][R], const uint8_t *wbuf, int ld,
                                                          unsigned valid, const float (&sc)[NC], const float *x,
                                                          size_t ldx, int nr, int K, int k0)
{
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (r >= nr)
            break;
        float xr[16];
        kn_gemv_load_x16<VEC>(xr, x + (size_t)r * ldx, k0, K);
#pragma unroll
        for (int c = 0; c < NC; c++)
            if (valid >> c & 1u)
                acc[c][r] = fmaf(kn_gemv_dot16(*reinterpret_cast<const uint4 *>(wbuf + (size_t)c * ld + k0), xr),
                                 sc[c], acc[c][r]);
    }
}

/* Chunks of 16 a thread of kn_gemv_smem_rows loads before the wait on
 * the weight rows (x values, R == 1, held in registers), and the K they
 * cover. */
constexpr int KN_GEMV_PRE = 2;
constexpr int KN_GEMV_PRE_K = 16 * KN_GEMV_THREADS * KN_GEMV_PRE; /* 4096 */

/* acc[c][r] += thread tid's share of sum_k w_real[c][k] * x[r][k] for the
 * NC weight rows in shared memory (row c at wbuf + c * ld: codes; rows
 * whose bit is clear in valid are skipped) with block scale rows s[c]
 * (s[c][b] scales k block b), and the rows x + r * ldx for r < nr (nr <= R,
 * block-uniform). Thread tid takes the 16-code chunks at k = 16 tid + 2048 i.
 * The first two chunks' scales and (R == 1) x values are loaded before
 * the wait on bar (phase 0), so they arrive while the rows do. */
template <int NC, int R, bool VEC>
static __device__ __forceinline__ void kn_gemv_smem_rows(float (&acc)[NC][R], const uint8_t *wbuf, int ld,
                                                         unsigned valid, const float *const (&s)[NC],
                                                         const float *x, size_t ldx, int nr, int K, int tid,
                                                         uint32_t bar)
{
    constexpr int PRE = KN_GEMV_PRE; /* K <= 4096 prefetched */
    float sc[PRE][NC];
    float xv[PRE][R == 1 ? 16 : 1];
#pragma unroll
    for (int i = 0; i < PRE; i++) {
        const int k0 = 16 * (tid + i * KN_GEMV_THREADS);
        if (k0 < K) {
#pragma unroll
            for (int c = 0; c < NC; c++)
                sc[i][c] = s[c][k0 / KN_FP8_BLOCK];
            if constexpr (R == 1)
                kn_gemv_load_x16<VEC>(xv[i], x, k0, K);
        }
    }
    kn_mbar_wait(bar, 0);
#pragma unroll
    for (int i = 0; i < PRE; i++) {
        const int k0 = 16 * (tid + i * KN_GEMV_THREADS);
        if (k0 >= K)
            break;
        if constexpr (R == 1) {
#pragma unroll
            for (int c = 0; c < NC; c++)
                if (valid >> c & 1u)
                    acc[c][0] = fmaf(kn_gemv_dot16(*reinterpret_cast<const uint4 *>(wbuf + (size_t)c * ld + k0), xv[i]),
                                     sc[i][c], acc[c][0]);
        } else {
            kn_gemv_chunk_rows<NC, R, VEC>(acc, wbuf, ld, valid, sc[i], x, ldx, nr, K, k0);
        }
    }
    /* K > 4096: the rest, scales and x loaded as used */
    for (int k0 = 16 * (tid + PRE * KN_GEMV_THREADS); k0 < K; k0 += 16 * KN_GEMV_THREADS) {
        float sk[NC];
#pragma unroll
        for (int c = 0; c < NC; c++)
            sk[c] = s[c][k0 / KN_FP8_BLOCK];
        kn_gemv_chunk_rows<NC, R, VEC>(acc, wbuf, ld, valid, sk, x, ldx, nr, K, k0);
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

/* Every thread of the block calls this with its N partial sums; after it
 * red[w][i] holds warp w's sum of value i, and a thread's total of value i
 * is kn_gemv_block_total(red, i) (the warps' sums in warp order). One
 * __syncthreads: call it from all threads, once per red. */
template <int N>
static __device__ __forceinline__ void kn_gemv_block_sum(const float *v, float (&red)[KN_GEMV_WARPS][N], int tid)
{
    const int lane = tid & 31, warp = tid >> 5;
#pragma unroll
    for (int i = 0; i < N; i++) {
        const float t = kn_gemv_warp_sum(v[i]);
        if (lane == (i & 31)) /* spread the stores over lanes */
            red[warp][i] = t;
    }
    __syncthreads();
}

template <int N>
static __device__ __forceinline__ float kn_gemv_block_total(const float (&red)[KN_GEMV_WARPS][N], int i)
{
    float t = red[0][i];
#pragma unroll
    for (int w = 1; w < KN_GEMV_WARPS; w++)
        t += red[w][i];
    return t;
}

/* The dense GEMV: out[m][n] = x[m][k] w^T + bias (fp32 x, out, bias; w an
 * FP8 weight [n][kn_fp8_ld(k)] with scales [ceil(n/128)][kn_fp8_scale_ld(k)]),
 * 1 <= m <= KN_CUDA_FP8_GEMV_ROWS, one launch on be's stream, nothing
 * allocated, no host sync (capturable). TN_ERR_UNSUPPORTED (nothing
 * queued, no message) when w or ws is not aligned for the vector loads
 * or n or k is 0: the caller then takes the cuBLASLt path. */
int kn_cuda_fp8_gemv(const kn_backend *be, const char *op, float *out, const float *x,
                     const uint8_t *w, const float *ws, const float *bias, int m, int n, int k);

/* Several FP8 weights over the same x (q, k, v of a layer) in one launch:
 * mats[i].out = x mats[i].w^T + mats[i].bias, each as kn_cuda_fp8_gemv
 * (same K; n_mats <= KN_CUDA_GEMV_MATS), TN_ERR_UNSUPPORTED (nothing
 * queued) as it. */
#define KN_CUDA_GEMV_MATS KN_LINEAR_MAX
typedef struct kn_cuda_gemv_mat {
    float *out;
    const uint8_t *w;
    const float *ws, *bias;
    int n;
} kn_cuda_gemv_mat;
int kn_cuda_fp8_gemv_multi(const kn_backend *be, const char *op, const kn_cuda_gemv_mat *mats, int n_mats,
                           const float *x, int m, int k);

/* kn_matmul_w_multi_normed's one-row form: kn_cuda_fp8_gemv_multi at m = 1
 * over rmsnorm(x (+ delta)) * weight (norm: kernels/rmsnorm.h), each block
 * normalizing the row itself, block 0 writing xn and the last block to
 * finish x += delta (done: an arrival counter at zero, left at zero).
 * TN_ERR_UNSUPPORTED (nothing queued) where kn_cuda_fp8_gemv_multi would
 * decline, or K > 4096 or any row pointer is not 16-byte aligned or K %
 * 16 != 0: the caller then runs the norm and the op apart. */
int kn_cuda_fp8_gemv_multi_normed(const kn_backend *be, const char *op, const kn_cuda_gemv_mat *mats,
                                  int n_mats, const kn_norm_in *norm, int k, unsigned *done);

/* 1 when kn_moe_experts_cuda should take kn_cuda_moe_gemv_fp8 for this
 * call (n_tokens tokens of k routes; the down kernel's arrival counters
 * cover ceil(dim / 8) * n_tokens <= KN_CUDA_MOE_DOWN_COUNTERS). */
int kn_cuda_moe_gemv_fp8_takes(const kn_backend *be, const kn_moe_weights *w, int n_tokens, int k);
/* kn_moe_experts for FP8 weights at decode (moe_gemv_fp8.cu): two
 * launches, the expert ids and weights read on the device (no host sync),
 * fp32 temporaries of n_tokens*k*inter and n_tokens*k*dim floats from the
 * pool. */
int kn_cuda_moe_gemv_fp8(const kn_backend *be, const char *op, float *out, const float *x,
                         const int32_t *expert_idx, const float *expert_w, int n_tokens, int k,
                         const kn_moe_weights *w);
#endif
