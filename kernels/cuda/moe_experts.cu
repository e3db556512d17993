/* MoE expert MLPs on the GPU: fp32 activations, fp32 or bf16 weights.
 *
 * The (token, route) pairs ("slots", slot = t*k + j) whose expert is held
 * here are grouped by expert on the device, so each expert's rows are one
 * contiguous block:
 *   1. moe_count_kernel    rows per local expert -> offsets[0..n_local]
 *   2. moe_place_kernel    a stable (slot order) placement: perm[pos] = slot,
 *                          slot_pos[slot] = pos (or -1 when not held here)
 *   3. moe_gather_kernel   xp[pos] = x[perm[pos] / k], rounded to bf16 for
 *                          bf16 weights (the product's input, written once)
 * then one of two middles computes y[pos] = down_e(act(gate_up_e xp[pos] + b))
 * without the down bias:
 *   grouped (few rows per expert: decode): two launches for all experts,
 *     gate_up (product + bias + activation, bf16 out) and down. Each block
 *     reads its expert's rows from offsets[] on the device, so there is no
 *     host sync and no per-expert call: each selected expert's weights are
 *     streamed once per pass of up to 8-64 rows (memory-bound; tensor-core
 *     mma.sync when K % 32 == 0, else CUDA cores; fp32 sums), experts with
 *     no rows exit at once. bf16 weights here; FP8 in moe_grouped_fp8.cu.
 *   per expert (many rows per expert: prefill): the offsets are copied to
 *     the host (one stream sync per call), then per expert a cuBLAS GEMM
 *     h = xp_e gate_up_e^T (fp32 out, no bias pass), moe_act_kernel (bias +
 *     activation, reads h once, writes the down product's bf16 input), and a
 *     cuBLAS GEMM y = a_e down_e^T (no bias pass). expert_product is the one
 *     place a weight format plugs in. With moe_streams > 1
 *     (TANDEM_CUDA_MOE_STREAMS) the experts' GEMMs are spread over side
 *     streams, so one expert's tail wave overlaps the next expert's GEMM.
 *   4. moe_combine_kernel  out[t] = sum_j w[t][j] * (y[slot_pos[t*k+j]] +
 *                          down_bias_e) in route order j (deterministic).
 *
 * Both middles keep kernels/moe.h's contract for bf16 weights: the inputs of
 * both products (x and the activation) are rounded to bf16, the products
 * accumulate in fp32, h stays fp32 until the activation. FP8 weights take
 * the per-expert middle with fp32 activation rows, which the FP8 products
 * quantize themselves (kn_cuda_fp8_expert_gemms, fp8_cuda.cuh); the first
 * product quantizes straight from x through perm (no gathered xp pass),
 * and the second's input is quantized by moe_act_quant_fp8_kernel together
 * with the bias and activation (no fp32 activation pass; the same codes
 * and scales as moe_act_kernel then kn_cuda_quant_fp8, which
 * TANDEM_CUDA_FP8_FUSED_ACT=0 / kn_cuda_set_moe_fp8_fused_act still run;
 * moe_streams > 1 spreads the FP8 GEMMs over side streams too),
 * or their own grouped middle (moe_grouped_fp8.cu: e4m3 codes and block
 * scales read directly, the activations quantized like the CPU does), chosen
 * like the bf16 one. Off the grouped middle, FP8 weights take the grouped
 * GEMMs of moe_gemm_fp8.cu by default (one persistent launch per product
 * over every expert's tiles, offsets on the device, no host sync;
 * kn_cuda_ctx.moe_fp8_gemm, TANDEM_CUDA_MOE_FP8_GEMM=0 keeps the per-expert
 * cuBLASLt GEMMs above for comparison).
 *
 * Which middle: kn_cuda_ctx.moe_grouped (TANDEM_CUDA_MOE_GROUPED=0/1 at init,
 * kn_cuda_set_moe_grouped), by default the grouped one when the slots per
 * local expert (n_tokens*k / n_local, an upper bound on the mean rows per
 * expert) are at most moe_grouped_rows (TANDEM_CUDA_MOE_GROUPED_ROWS). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <cuda_bf16.h>
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/fp8_cuda.cuh"
#include "kernels/cuda/gemv_fp8.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/moe_gemm_fp8.cuh"
#include "kernels/cuda/moe_grouped_fp8.cuh"
extern "C" {
#include "kernels/cuda/cuda_backend.h"
#include "kernels/moe.h"
#include "kernels/cuda/cuda_ops.h"
}
#include "kernels/cuda/expert_act.cuh"

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

/* One block per slot; blocks past the routed rows (offsets[n_local], known
 * only on the device) exit, so the grid can be sized without a host sync. */
template <typename T>
__global__ void moe_gather_kernel(T *xp, const float *x, const int *perm, const int *offsets,
                                  int n_local, int k, int dim)
{
    if ((int)blockIdx.x >= offsets[n_local])
        return;
    const float *src = x + (size_t)(perm[blockIdx.x] / k) * dim;
    T *dst = xp + (size_t)blockIdx.x * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        store_as(&dst[i], src[i]);
}

/* Per-expert middle: h is [rows][2*inter] (gate | up) without the bias; a is
 * [rows][inter]. One block per row; the row's expert (for its bias) comes
 * from its slot. */
template <typename T>
__global__ void moe_act_kernel(T *a, const float *h, const int *perm, const int32_t *expert_idx,
                               int offset, const float *gate_up_bias, int inter, int act,
                               float alpha, float limit)
{
    const size_t r = blockIdx.x;
    const float *hr = h + r * 2 * inter;
    const float *b = gate_up_bias ? gate_up_bias + (size_t)(expert_idx[perm[r]] - offset) * 2 * inter
                                  : NULL;
    for (int i = threadIdx.x; i < inter; i += blockDim.x) {
        float g = hr[i], u = hr[inter + i];
        if (b) {
            g += b[i];
            u += b[inter + i];
        }
        store_as(&a[r * inter + i], kn_cuda_expert_act(g, u, act, alpha, limit));
    }
}

/* FP8 per-expert middle, fused: moe_act_kernel (fp32 a) followed by
 * quant_fp8_kernel (a -> the down product's e4m3 codes and 1x128 scales,
 * one segment per expert) in one pass, so the fp32 a is never written.
 * One warp per (row, 128-wide block of a's columns); each lane computes 4
 * activations with the same kn_cuda_expert_act as moe_act_kernel and quantizes
 * them with quant_fp8_kernel's quantizer (fp8_cuda.cuh's
 * kn_cuda_fp8_quant4: amax over the warp, s = amax / 448 or 1, IEEE
 * division, RNE saturating codes), so codes and scales are bit-identical
 * to the two-kernel path. q and s come zeroed
 * (kn_cuda_fp8_act_alloc) and laid out as fp8_cuda.cuh says. */
__global__ void moe_act_quant_fp8_kernel(uint8_t *q, float *sc, const float *h, const int *perm,
                                         const int32_t *expert_idx, int offset,
                                         const float *gate_up_bias, int m, int inter, int kb,
                                         int ld, const int *seg_offsets, int n_segs, int act,
                                         float alpha, float limit)
{
    const int lane = threadIdx.x & 31;
    const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
    const long long tasks = (long long)m * kb;
    for (long long t = blockIdx.x * (long long)(blockDim.x >> 5) + (threadIdx.x >> 5); t < tasks;
         t += warps) {
        const int r = (int)(t / kb), b = (int)(t - (long long)r * kb);
        const int c0 = b * KN_FP8_BLOCK + lane * 4;
        const float *hr = h + (size_t)r * 2 * inter;
        const float *bias = gate_up_bias
                                ? gate_up_bias + (size_t)(expert_idx[perm[r]] - offset) * 2 * inter
                                : NULL;
        float v[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            v[i] = 0.f;
            if (c0 + i < inter) {
                float g = hr[c0 + i], u = hr[inter + c0 + i];
                if (bias) {
                    g += bias[c0 + i];
                    u += bias[inter + c0 + i];
                }
                v[i] = kn_cuda_expert_act(g, u, act, alpha, limit);
            }
        }
        float s;
        const uint32_t packed = kn_cuda_fp8_quant4(v, inter - c0, &s);
        kn_cuda_fp8_store_block(q, sc, ld, inter, seg_offsets, n_segs, m, r, b, c0, packed, s);
    }
}

/* h -> the down product's quantized input through moe_act_quant_fp8_kernel
 * into xq/xs (kn_cuda_fp8_act_alloc for n_routed rows of inter, one
 * segment per local expert). */
static int act_quant_fp8(const kn_backend *be, const char *op, const kn_moe_weights *w, uint8_t *xq,
                         float *xs, const float *h, const int *perm, const int32_t *expert_idx,
                         const int *dev_off, int n_routed)
{
    const int inter = w->inter, kb = (int)kn_fp8_blocks((size_t)inter), ld = (int)kn_fp8_ld((size_t)inter);
    const long long warps_needed = (long long)n_routed * kb;
    const long long blocks = (warps_needed + 7) / 8, cap = (long long)kn_cuda_ctx_of(be)->sm_count * 32;
    moe_act_quant_fp8_kernel<<<(unsigned)(blocks < cap ? blocks : cap), 256, 0, kn_cuda_stream(be)>>>(
        xq, xs, h, perm, expert_idx, w->expert_offset, w->gate_up_bias, n_routed, inter, kb, ld, dev_off,
        w->n_experts, (int)w->act, w->alpha, w->limit);
    cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? TN_OK : kn_cuda_device_error(op, "moe_act_quant_fp8_kernel", err);
}

/* out[t] = sum over t's routes held here of w * (y[pos] + down_bias_e). */
__global__ void moe_combine_kernel(float *out, const float *y, const int *slot_pos,
                                   const int32_t *expert_idx, const float *expert_w,
                                   const float *down_bias, int offset, int k, int dim)
{
    const int t = blockIdx.x;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
        float acc = 0.f;
        for (int j = 0; j < k; j++) {
            const size_t slot = (size_t)t * k + j;
            int pos = slot_pos[slot];
            if (pos >= 0) {
                float v = y[(size_t)pos * dim + d];
                if (down_bias)
                    v += down_bias[(size_t)(expert_idx[slot] - offset) * dim + d];
                acc += expert_w[slot] * v;
            }
        }
        out[(size_t)t * dim + d] = acc;
    }
}

/* ------------------------------------------------------------------ */
/* Grouped middle: all experts in one launch per product.             */
/*                                                                    */
/* A warp owns NW weight rows of one expert and computes their dot     */
/* products with up to R of the expert's rows at a time: each lane     */
/* streams 8 bf16 weights (16 bytes) per row per step and reuses them   */
/* for all R rows (held in registers), so each weight is read from HBM  */
/* once per R rows; the x rows are small and stay in L1/L2. Lanes keep  */
/* partial sums over their k's, summed across the warp at the end. An   */
/* expert with more than R rows takes several passes.                   */

constexpr int GROUPED_WARPS = 8;  /* warps per block */
constexpr int ACT_COLS = 2;       /* activation columns per warp: 2 gate + 2 up rows */
constexpr int DOWN_COLS = 4;      /* output columns (down rows) per warp */

__device__ __forceinline__ void bf16x8_to_f32(uint4 v, float (&f)[8])
{
    const unsigned u[4] = { v.x, v.y, v.z, v.w };
#pragma unroll
    for (int i = 0; i < 4; i++) { /* little-endian: element 2i is the low half */
        f[2 * i] = __uint_as_float(u[i] << 16);
        f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
}

/* acc[c][r] += sum_k w[c][k] * x[r][k] over this lane's k, r < nr (nr is
 * warp-uniform). VEC: K % 8 == 0 and every row 16-byte aligned. */
template <int NW, int R, bool VEC>
__device__ __forceinline__ void rows_dot(float (&acc)[NW][R], const __nv_bfloat16 *const (&w)[NW],
                                         const __nv_bfloat16 *x, int K, int nr, int lane)
{
    if constexpr (VEC) {
#pragma unroll 2
        for (int k = lane * 8; k < K; k += 32 * 8) {
            float wf[NW][8];
#pragma unroll
            for (int c = 0; c < NW; c++)
                bf16x8_to_f32(kn_ld_stream16(w[c] + k), wf[c]);
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (r < nr) {
                    float xf[8];
                    bf16x8_to_f32(*(const uint4 *)(x + (size_t)r * K + k), xf);
#pragma unroll
                    for (int c = 0; c < NW; c++)
#pragma unroll
                        for (int i = 0; i < 8; i++)
                            acc[c][r] = fmaf(wf[c][i], xf[i], acc[c][r]);
                }
            }
        }
    } else {
        for (int k = lane; k < K; k += 32) {
            float wf[NW];
#pragma unroll
            for (int c = 0; c < NW; c++)
                wf[c] = __bfloat162float(w[c][k]);
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (r < nr) {
                    float xv = __bfloat162float(x[(size_t)r * K + k]);
#pragma unroll
                    for (int c = 0; c < NW; c++)
                        acc[c][r] = fmaf(wf[c], xv, acc[c][r]);
                }
            }
        }
    }
    /* Butterfly: every lane ends with the warp's sums. */
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (r < nr) {
#pragma unroll
            for (int c = 0; c < NW; c++)
#pragma unroll
                for (int o = 16; o > 0; o >>= 1)
                    acc[c][r] += __shfl_xor_sync(0xffffffffu, acc[c][r], o);
        }
    }
}

/* a[pos][col] = bf16(act(gate_up_e xp[pos] + b)) for the activation columns
 * of this warp. Grid: (column tiles, n_local). */
template <int R, bool VEC>
__global__ void __launch_bounds__(GROUPED_WARPS * 32)
moe_grouped_gate_up_kernel(__nv_bfloat16 *a, const __nv_bfloat16 *xp, const int *offsets,
                           const __nv_bfloat16 *gate_up, const float *gate_up_bias, int dim,
                           int inter, int act, float alpha, float limit)
{
    const int e = blockIdx.y, lane = threadIdx.x & 31;
    const int first = offsets[e], rows = offsets[e + 1] - first;
    const int col0 = (blockIdx.x * GROUPED_WARPS + (threadIdx.x >> 5)) * ACT_COLS;
    if (rows == 0 || col0 >= inter) /* whole warps leave; no block barrier below */
        return;
    const __nv_bfloat16 *we = gate_up + (size_t)e * 2 * inter * dim;
    const __nv_bfloat16 *wrow[2 * ACT_COLS];
    float bias[2 * ACT_COLS];
#pragma unroll
    for (int c = 0; c < ACT_COLS; c++) {
        const int col = min(col0 + c, inter - 1); /* past the end: computed, not stored */
        wrow[c] = we + (size_t)col * dim;
        wrow[ACT_COLS + c] = we + (size_t)(inter + col) * dim;
        bias[c] = gate_up_bias ? gate_up_bias[(size_t)e * 2 * inter + col] : 0.f;
        bias[ACT_COLS + c] = gate_up_bias ? gate_up_bias[(size_t)e * 2 * inter + inter + col] : 0.f;
    }
    for (int r0 = 0; r0 < rows; r0 += R) {
        const int nr = min(R, rows - r0);
        float acc[2 * ACT_COLS][R];
#pragma unroll
        for (int c = 0; c < 2 * ACT_COLS; c++)
#pragma unroll
            for (int r = 0; r < R; r++)
                acc[c][r] = 0.f;
        rows_dot<2 * ACT_COLS, R, VEC>(acc, wrow, xp + (size_t)(first + r0) * dim, dim, nr, lane);
        /* (column, row) pairs spread over the lanes for the stores */
#pragma unroll
        for (int c = 0; c < ACT_COLS; c++)
#pragma unroll
            for (int r = 0; r < R; r++)
                if (r < nr && lane == (c * R + r) % 32 && col0 + c < inter)
                    a[(size_t)(first + r0 + r) * inter + col0 + c] = __float2bfloat16_rn(
                        kn_cuda_expert_act(acc[c][r] + bias[c], acc[ACT_COLS + c][r] + bias[ACT_COLS + c], act,
                                   alpha, limit));
    }
}

/* y[pos][col] = down_e a[pos] (fp32, no bias) for this warp's output columns.
 * Grid: (column tiles, n_local). */
template <int R, bool VEC>
__global__ void __launch_bounds__(GROUPED_WARPS * 32)
moe_grouped_down_kernel(float *y, const __nv_bfloat16 *a, const int *offsets,
                        const __nv_bfloat16 *down, int dim, int inter)
{
    const int e = blockIdx.y, lane = threadIdx.x & 31;
    const int first = offsets[e], rows = offsets[e + 1] - first;
    const int col0 = (blockIdx.x * GROUPED_WARPS + (threadIdx.x >> 5)) * DOWN_COLS;
    if (rows == 0 || col0 >= dim)
        return;
    const __nv_bfloat16 *wrow[DOWN_COLS];
#pragma unroll
    for (int c = 0; c < DOWN_COLS; c++)
        wrow[c] = down + ((size_t)e * dim + min(col0 + c, dim - 1)) * inter;
    for (int r0 = 0; r0 < rows; r0 += R) {
        const int nr = min(R, rows - r0);
        float acc[DOWN_COLS][R];
#pragma unroll
        for (int c = 0; c < DOWN_COLS; c++)
#pragma unroll
            for (int r = 0; r < R; r++)
                acc[c][r] = 0.f;
        rows_dot<DOWN_COLS, R, VEC>(acc, wrow, a + (size_t)(first + r0) * inter, inter, nr, lane);
#pragma unroll
        for (int c = 0; c < DOWN_COLS; c++)
#pragma unroll
            for (int r = 0; r < R; r++)
                if (r < nr && lane == (c * R + r) % 32 && col0 + c < dim)
                    y[(size_t)(first + r0 + r) * dim + col0 + c] = acc[c][r];
    }
}

/* The same products on the tensor cores (mma.sync m16n8k16, bf16 in, fp32
 * sums) when K % 32 == 0: a warp owns 16 weight rows and multiplies them
 * with 8*NT of the expert's rows per pass. The order of k inside a dot
 * product is free, so each lane loads 16 contiguous bytes of its two weight
 * rows (g and g+8, g = lane/4) and of its token row at k = 8*(lane%4) of
 * each 32-wide chunk and feeds them to two mmas whose "virtual" k columns
 * (2t, 2t+1, 2t+8, 2t+9) map to the same real k's in A and in B: fully
 * used 64-byte row segments from global memory, no shared memory, and
 * U chunks of loads in flight per lane (8 for up to 16 rows per pass, when
 * the weight stream is all that matters, else 4). */
constexpr int MMA_WARPS = 4;

/* acc[j]: rows g and g+8 of the warp's 16 weight rows (wlo, whi: this lane's
 * two rows) times tokens 8j + 2t, 8j + 2t + 1 of x ([nr][K], nr <= 8*NT):
 * acc[j][0..1] row g, acc[j][2..3] row g+8 (the mma C layout). */
template <int NT, int MMA_UNROLL>
__device__ __forceinline__ void mma_rows_dot(float (&acc)[NT][4], const __nv_bfloat16 *wlo,
                                             const __nv_bfloat16 *whi, const __nv_bfloat16 *x, int K,
                                             int nr, int lane)
{
    const int g = lane >> 2, t = lane & 3;
    const __nv_bfloat16 *xr[NT];
    bool xok[NT];
#pragma unroll
    for (int j = 0; j < NT; j++) {
        xok[j] = 8 * j + g < nr;
        xr[j] = x + (size_t)(xok[j] ? 8 * j + g : 0) * K + 8 * t;
    }
    wlo += 8 * t;
    whi += 8 * t;
    for (int k0 = 0; k0 < K; k0 += 32 * MMA_UNROLL) {
        uint4 wa[MMA_UNROLL], wb[MMA_UNROLL];
#pragma unroll
        for (int u = 0; u < MMA_UNROLL; u++) {
            if (k0 + 32 * u < K) {
                wa[u] = kn_ld_stream16(wlo + k0 + 32 * u);
                wb[u] = kn_ld_stream16(whi + k0 + 32 * u);
            } else {
                wa[u] = wb[u] = make_uint4(0u, 0u, 0u, 0u);
            }
        }
#pragma unroll
        for (int u = 0; u < MMA_UNROLL; u++) {
            if (k0 + 32 * u >= K) /* warp-uniform */
                break;
#pragma unroll
            for (int j = 0; j < NT; j++) {
                if (8 * j >= nr) /* warp-uniform: no tokens in this tile */
                    break;
                const uint4 xv = xok[j] ? *(const uint4 *)(xr[j] + k0 + 32 * u) : make_uint4(0u, 0u, 0u, 0u);
                kn_mma_bf16(acc[j], wa[u].x, wb[u].x, wa[u].y, wb[u].y, xv.x, xv.y);
                kn_mma_bf16(acc[j], wa[u].z, wb[u].z, wa[u].w, wb[u].w, xv.z, xv.w);
            }
        }
    }
}

/* Tensor-core gate_up + bias + activation: a warp's 16 rows are the gate
 * and up rows of 8 activation columns (row g: gate of column c0+g, row g+8:
 * its up), so each lane holds both halves of its outputs. */
template <int NT>
__global__ void __launch_bounds__(MMA_WARPS * 32)
moe_grouped_gate_up_mma_kernel(__nv_bfloat16 *a, const __nv_bfloat16 *xp, const int *offsets,
                               const __nv_bfloat16 *gate_up, const float *gate_up_bias, int dim,
                               int inter, int act, float alpha, float limit)
{
    const int e = blockIdx.y, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int first = offsets[e], rows = offsets[e + 1] - first;
    const int c0 = (blockIdx.x * MMA_WARPS + (threadIdx.x >> 5)) * 8;
    if (rows == 0 || c0 >= inter) /* whole warps leave; no block barrier below */
        return;
    const int col = min(c0 + g, inter - 1); /* past the end: computed, not stored */
    const __nv_bfloat16 *wg = gate_up + ((size_t)e * 2 * inter + col) * dim;
    const __nv_bfloat16 *wu = gate_up + ((size_t)e * 2 * inter + inter + col) * dim;
    const float bg = gate_up_bias ? gate_up_bias[(size_t)e * 2 * inter + col] : 0.f;
    const float bu = gate_up_bias ? gate_up_bias[(size_t)e * 2 * inter + inter + col] : 0.f;
    for (int r0 = 0; r0 < rows; r0 += 8 * NT) {
        const int nr = min(8 * NT, rows - r0);
        float acc[NT][4];
#pragma unroll
        for (int j = 0; j < NT; j++)
            acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
        mma_rows_dot<NT, NT <= 2 ? 8 : 4>(acc, wg, wu, xp + (size_t)(first + r0) * dim, dim, nr, lane);
        if (c0 + g < inter) {
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int tok = 8 * j + 2 * t + h;
                    if (tok < nr)
                        a[(size_t)(first + r0 + tok) * inter + c0 + g] = __float2bfloat16_rn(
                            kn_cuda_expert_act(acc[j][h] + bg, acc[j][2 + h] + bu, act, alpha, limit));
                }
        }
    }
}

/* Tensor-core down product: a warp's 16 rows are output columns c0..c0+15. */
template <int NT>
__global__ void __launch_bounds__(MMA_WARPS * 32)
moe_grouped_down_mma_kernel(float *y, const __nv_bfloat16 *a, const int *offsets,
                            const __nv_bfloat16 *down, int dim, int inter)
{
    const int e = blockIdx.y, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int first = offsets[e], rows = offsets[e + 1] - first;
    const int c0 = (blockIdx.x * MMA_WARPS + (threadIdx.x >> 5)) * 16;
    if (rows == 0 || c0 >= dim)
        return;
    const __nv_bfloat16 *wlo = down + ((size_t)e * dim + min(c0 + g, dim - 1)) * inter;
    const __nv_bfloat16 *whi = down + ((size_t)e * dim + min(c0 + g + 8, dim - 1)) * inter;
    for (int r0 = 0; r0 < rows; r0 += 8 * NT) {
        const int nr = min(8 * NT, rows - r0);
        float acc[NT][4];
#pragma unroll
        for (int j = 0; j < NT; j++)
            acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
        mma_rows_dot<NT, NT <= 2 ? 8 : 4>(acc, wlo, whi, a + (size_t)(first + r0) * inter, inter, nr, lane);
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int tok = 8 * j + 2 * t + h;
                if (tok < nr) {
                    float *yr = y + (size_t)(first + r0 + tok) * dim;
                    if (c0 + g < dim)
                        yr[c0 + g] = acc[j][h];
                    if (c0 + g + 8 < dim)
                        yr[c0 + g + 8] = acc[j][2 + h];
                }
            }
    }
}

/* One grouped product: the tensor-core kernel when K % 32 == 0 and the
 * weights are 16-byte aligned, else the CUDA-core one (any sizes). Rows per
 * pass cover rows_hint (slots per local expert, rounded up) so most experts
 * take one pass over their weights. */
template <int R, int NT>
static cudaError_t launch_gate_up(cudaStream_t s, const kn_moe_weights *w, __nv_bfloat16 *a,
                                  const __nv_bfloat16 *xp, const int *offsets)
{
    const int n_local = w->n_experts, dim = w->dim, inter = w->inter;
    const __nv_bfloat16 *gu = (const __nv_bfloat16 *)w->gate_up;
    if (dim % 32 == 0 && kn_cuda_aligned16(gu)) {
        dim3 grid(kn_cuda_div_up(inter, MMA_WARPS * 8), n_local);
        moe_grouped_gate_up_mma_kernel<NT><<<grid, MMA_WARPS * 32, 0, s>>>(
            a, xp, offsets, gu, w->gate_up_bias, dim, inter, (int)w->act, w->alpha, w->limit);
    } else {
        dim3 grid(kn_cuda_div_up(inter, GROUPED_WARPS * ACT_COLS), n_local);
        if (dim % 8 == 0 && kn_cuda_aligned16(gu))
            moe_grouped_gate_up_kernel<R, true><<<grid, GROUPED_WARPS * 32, 0, s>>>(
                a, xp, offsets, gu, w->gate_up_bias, dim, inter, (int)w->act, w->alpha, w->limit);
        else
            moe_grouped_gate_up_kernel<R, false><<<grid, GROUPED_WARPS * 32, 0, s>>>(
                a, xp, offsets, gu, w->gate_up_bias, dim, inter, (int)w->act, w->alpha, w->limit);
    }
    return cudaGetLastError();
}

template <int R, int NT>
static cudaError_t launch_down(cudaStream_t s, const kn_moe_weights *w, float *y, const __nv_bfloat16 *a,
                               const int *offsets)
{
    const int n_local = w->n_experts, dim = w->dim, inter = w->inter;
    const __nv_bfloat16 *dn = (const __nv_bfloat16 *)w->down;
    if (inter % 32 == 0 && kn_cuda_aligned16(dn)) {
        dim3 grid(kn_cuda_div_up(dim, MMA_WARPS * 16), n_local);
        moe_grouped_down_mma_kernel<NT><<<grid, MMA_WARPS * 32, 0, s>>>(y, a, offsets, dn, dim, inter);
    } else {
        dim3 grid(kn_cuda_div_up(dim, GROUPED_WARPS * DOWN_COLS), n_local);
        if (inter % 8 == 0 && kn_cuda_aligned16(dn))
            moe_grouped_down_kernel<R, true><<<grid, GROUPED_WARPS * 32, 0, s>>>(y, a, offsets, dn, dim, inter);
        else
            moe_grouped_down_kernel<R, false><<<grid, GROUPED_WARPS * 32, 0, s>>>(y, a, offsets, dn, dim, inter);
    }
    return cudaGetLastError();
}

template <int R, int NT>
static cudaError_t launch_grouped_rn(cudaStream_t s, const kn_moe_weights *w, __nv_bfloat16 *a, float *y,
                                     const __nv_bfloat16 *xp, const int *offsets)
{
    cudaError_t err = launch_gate_up<R, NT>(s, w, a, xp, offsets);
    return err != cudaSuccess ? err : launch_down<R, NT>(s, w, y, a, offsets);
}

/* Rows per pass with headroom over the mean (random routing spreads the
 * rows per expert binomially): the tensor-core kernels skip empty 8-row
 * tiles, so spare tiles cost registers only, while a second pass re-reads
 * the expert's weights. */
static cudaError_t launch_grouped(cudaStream_t s, const kn_moe_weights *w, __nv_bfloat16 *a, float *y,
                                  const __nv_bfloat16 *xp, const int *offsets, long long rows_hint)
{
    if (rows_hint <= 2)
        return launch_grouped_rn<4, 1>(s, w, a, y, xp, offsets);
    if (rows_hint <= 6)
        return launch_grouped_rn<8, 2>(s, w, a, y, xp, offsets);
    if (rows_hint <= 12)
        return launch_grouped_rn<16, 4>(s, w, a, y, xp, offsets);
    return launch_grouped_rn<16, 8>(s, w, a, y, xp, offsets);
}

/* ------------------------------------------------------------------ */
/* Per-expert middle.                                                 */

enum { GATE_UP = 0, DOWN = 1 };

/* Bytes per element of the gathered rows xp and the activation a: the
 * products' input type (bf16 for bf16 weights; fp32 for fp32 weights, and
 * for FP8 weights, whose products quantize fp32 rows themselves). */
static size_t rows_elem(const kn_moe_weights *w)
{
    return w->wdtype == KN_BF16 ? sizeof(__nv_bfloat16) : sizeof(float);
}

/* One expert's product on the per-expert path, the place a weight format
 * plugs in: out[rows][n] = in[rows][kdim] w_e[n][kdim]^T in fp32, no bias,
 * where (n, kdim) = (2*inter, dim) for GATE_UP and (dim, inter) for DOWN
 * and `in` holds elements of the weights' dtype (bf16-rounded or fp32).
 * It runs on `blas`'s stream (the backend's or a side stream's handle).
 * fp32 and bf16 weights; FP8 goes to kn_cuda_fp8_expert_gemms instead. */
static int expert_product(const kn_backend *be, cublasHandle_t blas, const char *op,
                          const kn_moe_weights *w, int which, int e, float *out, const void *in, int rows)
{
    const size_t welem = kn_dtype_size(w->wdtype);
    const int n = which == GATE_UP ? 2 * w->inter : w->dim;
    const int kdim = which == GATE_UP ? w->dim : w->inter;
    const char *base = (const char *)(which == GATE_UP ? w->gate_up : w->down);
    return kn_cuda_gemm_on(be, blas, op, out, in, base + (size_t)e * n * kdim * welem, w->wdtype, NULL,
                           rows, n, kdim);
}

/* The side streams wait for the main stream's work so far (fork) or the
 * main stream waits for theirs (join). */
cudaError_t kn_cuda_side_fork(const kn_backend *be, int n_streams)
{
    kn_cuda_ctx *ctx = kn_cuda_ctx_of(be);
    cudaError_t err = cudaEventRecord(ctx->side_fork, kn_cuda_stream(be));
    for (int i = 0; i < n_streams && err == cudaSuccess; i++)
        err = cudaStreamWaitEvent(ctx->side[i], ctx->side_fork, 0);
    return err;
}

cudaError_t kn_cuda_side_join(const kn_backend *be, int n_streams)
{
    kn_cuda_ctx *ctx = kn_cuda_ctx_of(be);
    cudaError_t err = cudaSuccess;
    for (int i = 0; i < n_streams; i++) {
        cudaError_t e1 = cudaEventRecord(ctx->side_done[i], ctx->side[i]);
        cudaError_t e2 = e1 == cudaSuccess ? cudaStreamWaitEvent(kn_cuda_stream(be), ctx->side_done[i], 0) : e1;
        if (err == cudaSuccess)
            err = e2;
    }
    return err;
}

/* One product for every expert with rows: on the backend's stream, or
 * spread round-robin over n_streams side streams between a fork and a join
 * (the join runs even after an error, so no side stream still uses the
 * temporaries when they are freed). in_rows (FP8 only; NULL otherwise):
 * row r of the input is `in` row in_rows[r] / in_rows_div. */
static int products_all_experts(const kn_backend *be, const char *op, const kn_moe_weights *w, int which,
                                const int *host_off, const int *dev_off, float *out, const void *in,
                                const int *in_rows, int in_rows_div, int n_streams)
{
    kn_cuda_ctx *ctx = kn_cuda_ctx_of(be);
    const size_t in_elem = rows_elem(w);
    const int out_w = which == GATE_UP ? 2 * w->inter : w->dim, in_w = which == GATE_UP ? w->dim : w->inter;
    int rc = TN_OK, used = 0;
    if (w->wdtype == KN_FP8_E4M3) /* all experts in one call; biases are added outside */
        return kn_cuda_fp8_expert_gemms(be, op, out, (const float *)in, in_rows, in_rows_div,
                                        host_off, dev_off, w->n_experts,
                                        (const uint8_t *)(which == GATE_UP ? w->gate_up : w->down),
                                        which == GATE_UP ? w->gate_up_scale : w->down_scale, NULL,
                                        out_w, in_w, n_streams);
    if (n_streams > 1) {
        cudaError_t err = kn_cuda_side_fork(be, n_streams);
        if (err != cudaSuccess)
            return kn_cuda_device_error(op, "side stream fork", err);
    }
    for (int e = 0; e < w->n_experts && rc == TN_OK; e++) {
        const int rows = host_off[e + 1] - host_off[e];
        if (rows == 0)
            continue;
        cublasHandle_t blas = n_streams > 1 ? ctx->side_blas[used++ % n_streams] : ctx->blas;
        rc = expert_product(be, blas, op, w, which, e, out + (size_t)host_off[e] * out_w,
                            (const char *)in + (size_t)host_off[e] * in_w * in_elem, rows);
    }
    if (n_streams > 1) {
        cudaError_t err = kn_cuda_side_join(be, n_streams);
        if (err != cudaSuccess && rc == TN_OK)
            rc = kn_cuda_device_error(op, "side stream join", err);
    }
    return rc;
}

/* y (fp32, [n_routed][dim]) from xp through the per-expert products;
 * host_off is offsets[] copied to the host. FP8 weights: xp is x itself
 * (the tokens' rows), read through perm by the activations' quantization,
 * so no gathered copy is written. */
static int per_expert_middle(const kn_backend *be, const char *op, const kn_moe_weights *w,
                             const int *host_off, const int *dev_off, float *y, const void *xp,
                             const int *perm, const int32_t *expert_idx, int k)
{
    cudaStream_t s = kn_cuda_stream(be);
    const int n_local = w->n_experts, inter = w->inter, n_routed = host_off[n_local];
    const bool bf16 = w->wdtype == KN_BF16;
    int rc = TN_OK, n_streams = kn_cuda_ctx_of(be)->moe_streams, busy = 0;
    for (int e = 0; e < n_local; e++)
        busy += host_off[e + 1] > host_off[e];
    if (n_streams > busy)
        n_streams = busy;
    if (n_streams > 1 && kn_cuda_side_streams(be, op, n_streams) != TN_OK)
        n_streams = 1; /* (message printed) the main stream still works */
    /* FP8 with fused_act: the activation goes straight into the down
     * product's e4m3 codes and scales (no fp32 a). */
    const bool fused = w->wdtype == KN_FP8_E4M3 && kn_cuda_ctx_of(be)->moe_fp8_fused_act;
    float *h = (float *)kn_cuda_tmp_alloc(be, op, (size_t)n_routed * 2 * inter * sizeof(float));
    void *a = fused ? NULL : kn_cuda_tmp_alloc(be, op, (size_t)n_routed * inter * rows_elem(w));
    if (!h || (!fused && !a))
        rc = TN_ERR_NOMEM;
    if (rc == TN_OK)
        rc = products_all_experts(be, op, w, GATE_UP, host_off, dev_off, h, xp,
                                  w->wdtype == KN_FP8_E4M3 ? perm : NULL, k, n_streams);
    if (rc == TN_OK && fused) {
        uint8_t *xq = NULL;
        float *xs = NULL;
        rc = kn_cuda_fp8_act_alloc(be, op, n_routed, inter, n_local, &xq, &xs);
        if (rc == TN_OK)
            rc = act_quant_fp8(be, op, w, xq, xs, h, perm, expert_idx, dev_off, n_routed);
        if (rc == TN_OK)
            rc = kn_cuda_fp8_expert_gemms_q(be, op, y, xq, xs, host_off, n_local, (const uint8_t *)w->down,
                                            w->down_scale, NULL, w->dim, inter, n_streams);
        kn_cuda_tmp_free(be, xq);
        kn_cuda_tmp_free(be, xs);
        kn_cuda_tmp_free(be, h);
        return rc;
    }
    if (rc == TN_OK) {
        const int threads = inter >= 512 ? 256 : 64;
        if (bf16)
            moe_act_kernel<<<n_routed, threads, 0, s>>>((__nv_bfloat16 *)a, h, perm, expert_idx,
                                                        w->expert_offset, w->gate_up_bias, inter,
                                                        (int)w->act, w->alpha, w->limit);
        else
            moe_act_kernel<<<n_routed, threads, 0, s>>>((float *)a, h, perm, expert_idx, w->expert_offset,
                                                        w->gate_up_bias, inter, (int)w->act, w->alpha,
                                                        w->limit);
        cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess)
            rc = kn_cuda_device_error(op, "moe_act_kernel", err);
    }
    if (rc == TN_OK)
        rc = products_all_experts(be, op, w, DOWN, host_off, dev_off, y, a, NULL, 1, n_streams);
    kn_cuda_tmp_free(be, h);
    kn_cuda_tmp_free(be, a);
    return rc;
}

/* The middle for this call: grouped (1) or per expert (0). */
static bool use_grouped(const kn_backend *be, const kn_moe_weights *w, long long n_slots)
{
    if (w->wdtype == KN_F32 || /* exact fp32 cuBLAS products */
        (w->wdtype == KN_FP8_E4M3 && !kn_cuda_moe_grouped_fp8_ok(w)))
        return false;
    const kn_cuda_ctx *ctx = kn_cuda_ctx_of(be);
    if (ctx->moe_grouped >= 0)
        return ctx->moe_grouped == 1;
    return n_slots <= (long long)ctx->moe_grouped_rows * w->n_experts;
}

extern "C" int kn_moe_experts_cuda(const kn_backend *be, float *out, const float *x,
                                   const int32_t *expert_idx, const float *expert_w,
                                   int n_tokens, int k, const kn_moe_weights *w)
{
    static const char op[] = "kn_moe_experts";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK)
        return rc;
    if (w->n_experts > 65535)
        return kn_arg_error(op, "%d local experts is more than one grid dimension holds", w->n_experts);
    if (n_tokens == 0)
        return TN_OK;
    if ((size_t)n_tokens * k > (size_t)0x7fffffff)
        return kn_arg_error(op, "%d tokens x %d routes is too many", n_tokens, k);

    /* FP8 at a few tokens: the expert GEMVs (moe_gemv_fp8.cu says why) */
    if (kn_cuda_moe_gemv_fp8_takes(be, w, n_tokens, k))
        return kn_cuda_moe_gemv_fp8(be, op, out, x, expert_idx, expert_w, n_tokens, k, w);

    cudaStream_t s = kn_cuda_stream(be);
    const int n_local = w->n_experts, dim = w->dim, inter = w->inter, n_slots = n_tokens * k;
    const bool bf16 = w->wdtype == KN_BF16;
    const bool grouped = use_grouped(be, w, n_slots);
    int *offsets = NULL, *perm = NULL, *slot_pos = NULL, *host_off = NULL;
    void *xp = NULL, *a = NULL;
    float *y = NULL;
    cudaError_t err = cudaSuccess;
    const char *what = "expert MLP";

    offsets = (int *)kn_cuda_tmp_alloc(be, op, (size_t)(n_local + 1) * sizeof(int));
    perm = (int *)kn_cuda_tmp_alloc(be, op, (size_t)n_slots * sizeof(int));
    slot_pos = (int *)kn_cuda_tmp_alloc(be, op, (size_t)n_slots * sizeof(int));
    if (!offsets || !perm || !slot_pos) {
        rc = TN_ERR_NOMEM;
        goto done;
    }
    moe_count_kernel<<<1, 1024, (size_t)n_local * sizeof(int), s>>>(expert_idx, n_slots,
                                                                    w->expert_offset, n_local, offsets);
    if ((err = cudaGetLastError()) != cudaSuccess) {
        what = "moe_count_kernel";
        goto done;
    }
    /* 1024 threads: each block walks all slots, 1024 per round */
    moe_place_kernel<<<n_local + 1, 1024, 0, s>>>(expert_idx, n_slots, w->expert_offset, n_local,
                                                 offsets, perm, slot_pos);
    if ((err = cudaGetLastError()) != cudaSuccess) {
        what = "moe_place_kernel";
        goto done;
    }

    if (grouped && w->wdtype == KN_FP8_E4M3) {
        y = (float *)kn_cuda_tmp_alloc(be, op, (size_t)n_slots * dim * sizeof(float));
        if (!y) {
            rc = TN_ERR_NOMEM;
            goto done;
        }
        rc = kn_cuda_moe_grouped_fp8(be, op, w, y, x, perm, offsets, n_tokens, k,
                                     ((long long)n_slots + n_local - 1) / n_local);
        if (rc != TN_OK)
            goto done;
    } else if (w->wdtype == KN_FP8_E4M3 && kn_cuda_moe_grouped_fp8_ok(w) &&
               kn_cuda_ctx_of(be)->moe_fp8_gemm != KN_MOE_FP8_GEMM_OFF) {
        y = (float *)kn_cuda_tmp_alloc(be, op, (size_t)n_slots * dim * sizeof(float));
        if (!y) {
            rc = TN_ERR_NOMEM;
            goto done;
        }
        rc = kn_cuda_moe_gemm_fp8(be, op, w, y, x, perm, offsets, n_tokens, k, kn_cuda_ctx_of(be)->moe_fp8_gemm);
        if (rc != TN_OK)
            goto done;
    } else if (grouped) {
        /* Sized for every slot (the routed count stays on the device). */
        xp = kn_cuda_tmp_alloc(be, op, (size_t)n_slots * dim * sizeof(__nv_bfloat16));
        a = kn_cuda_tmp_alloc(be, op, (size_t)n_slots * inter * sizeof(__nv_bfloat16));
        y = (float *)kn_cuda_tmp_alloc(be, op, (size_t)n_slots * dim * sizeof(float));
        if (!xp || !a || !y) {
            rc = TN_ERR_NOMEM;
            goto done;
        }
        moe_gather_kernel<<<n_slots, dim >= 512 ? 256 : 64, 0, s>>>((__nv_bfloat16 *)xp, x, perm, offsets,
                                                                    n_local, k, dim);
        if ((err = cudaGetLastError()) != cudaSuccess) {
            what = "moe_gather_kernel";
            goto done;
        }
        if ((err = launch_grouped(s, w, (__nv_bfloat16 *)a, y, (const __nv_bfloat16 *)xp, offsets,
                                  ((long long)n_slots + n_local - 1) / n_local)) != cudaSuccess) {
            what = "grouped expert kernels";
            goto done;
        }
    } else {
        /* The GEMM sizes must be known on the host: one sync per call. */
        host_off = (int *)malloc((size_t)(n_local + 1) * sizeof(int));
        if (!host_off) {
            rc = TN_ERR_NOMEM;
            goto done;
        }
        if ((err = cudaMemcpyAsync(host_off, offsets, (size_t)(n_local + 1) * sizeof(int),
                                   cudaMemcpyDeviceToHost, s)) != cudaSuccess ||
            (err = cudaStreamSynchronize(s)) != cudaSuccess) {
            what = "expert row counts to the host";
            goto done;
        }
        const int n_routed = host_off[n_local];
        /* y holds n_routed fp32 rows (at least 1 so the combine has a buffer). */
        /* FP8 quantizes straight from x through perm: no xp. */
        const bool gather = w->wdtype != KN_FP8_E4M3;
        y = (float *)kn_cuda_tmp_alloc(be, op, (size_t)(n_routed ? n_routed : 1) * dim * sizeof(float));
        if (gather)
            xp = kn_cuda_tmp_alloc(be, op, (size_t)(n_routed ? n_routed : 1) * dim * rows_elem(w));
        if (!y || (gather && !xp)) {
            rc = TN_ERR_NOMEM;
            goto done;
        }
        if (n_routed > 0) {
            const int threads = dim >= 512 ? 256 : 64;
            if (bf16)
                moe_gather_kernel<<<n_routed, threads, 0, s>>>((__nv_bfloat16 *)xp, x, perm, offsets,
                                                               n_local, k, dim);
            else if (gather)
                moe_gather_kernel<<<n_routed, threads, 0, s>>>((float *)xp, x, perm, offsets, n_local, k,
                                                               dim);
            if ((err = cudaGetLastError()) != cudaSuccess) {
                what = "moe_gather_kernel";
                goto done;
            }
            rc = per_expert_middle(be, op, w, host_off, offsets, y, gather ? xp : x, perm, expert_idx, k);
            if (rc != TN_OK)
                goto done;
        }
    }
    moe_combine_kernel<<<n_tokens, dim >= 512 ? 256 : 64, 0, s>>>(out, y, slot_pos, expert_idx, expert_w,
                                                                 w->down_bias, w->expert_offset, k, dim);
    if ((err = cudaGetLastError()) != cudaSuccess)
        what = "moe_combine_kernel";

done:
    kn_cuda_tmp_free(be, offsets);
    kn_cuda_tmp_free(be, perm);
    kn_cuda_tmp_free(be, slot_pos);
    kn_cuda_tmp_free(be, xp);
    kn_cuda_tmp_free(be, a);
    kn_cuda_tmp_free(be, y);
    free(host_off);
    if (err != cudaSuccess)
        return kn_cuda_device_error(op, what, err);
    return rc;
}

extern "C" void kn_cuda_set_moe_grouped(const kn_backend *be, int mode)
{
    kn_cuda_ctx_of(be)->moe_grouped = mode < 0 ? -1 : mode != 0;
}

extern "C" void kn_cuda_set_moe_fp8_fused_act(const kn_backend *be, int on)
{
    kn_cuda_ctx_of(be)->moe_fp8_fused_act = on != 0;
}

extern "C" void kn_cuda_set_moe_fp8_gemm(const kn_backend *be, int mode)
{
    kn_cuda_ctx_of(be)->moe_fp8_gemm = mode < 0 || mode >= KN_MOE_FP8_GEMM_MODES ? KN_CUDA_DEFAULT_MOE_FP8_GEMM : mode;
}

extern "C" int kn_cuda_moe_fp8_gemm(const kn_backend *be)
{
    return kn_cuda_ctx_of(be)->moe_fp8_gemm;
}

extern "C" int kn_cuda_moe_grouped(const kn_backend *be)
{
    return kn_cuda_ctx_of(be)->moe_grouped;
}
