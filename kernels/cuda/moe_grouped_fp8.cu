/* The grouped (decode) middle of kn_moe_experts for FP8 weights.
 *
 * Same shape as the bf16 grouped middle of moe_experts.cu (device offsets,
 * no host sync, every selected expert's weights streamed once per pass of
 * up to 8*NT rows), but reading the e4m3 codes and their 128x128 block
 * scales directly: half the bytes of bf16, which is what decode is bound by.
 * It computes kernels/fp8.h's product on both products, as
 * kn_moe_experts_cpu does:
 *   1. moe_fp8_quant_x_kernel  each token row of x -> e4m3 codes + 1x128
 *        scales (bit-identical to kn_fp8_quantize_act_row: IEEE division,
 *        round to nearest even, saturating; zero codes in the row padding).
 *        Per token, not per slot: the gate_up kernel finds a position's
 *        token through perm.
 *   2. moe_fp8_gate_up_kernel  one block per (128 activation columns,
 *        expert): 16 warps, each the gate and up rows of 8 columns. Sums,
 *        bias, activation; the block then owns exactly one 1x128 block of
 *        the activation row, so it takes the amax over its warps in shared
 *        memory and writes the down product's e4m3 codes and scale itself
 *        (the CPU quantizes the fp32 activation the same way).
 *   3. moe_fp8_down_kernel     y[pos] = down_e a[pos] (fp32, no bias).
 *
 * The products: fp8_rows_mma.cuh (e4m3 mma.sync on the codes, fp32 sums,
 * the block scales applied per 128-wide block). */
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include "kernels/cuda/fp8_cuda.cuh"
#include "kernels/cuda/fp8_rows_mma.cuh"
#include "kernels/cuda/moe_grouped_fp8.cuh"
extern "C" {
#include "kernels/fp8.h"
}

/* The padded FP8 layout's sizes (kernels/fp8.h), computed on the host. */
struct fp8_dims {
    int ldx, kbx;             /* codes per x row (dim padded), 128-blocks of dim */
    int ldi, kbi;             /* the same for inter */
    size_t gu_sld, dn_sld;    /* floats per row of gate_up's / down's scales */
    size_t gu_bytes, dn_bytes;   /* codes per expert */
    size_t gu_scales, dn_scales; /* scale floats per expert */
};

constexpr int GU_WARPS = KN_FP8_BLOCK / 8; /* 8 activation columns per warp */

/* One warp per (token, 128-wide block): quant_fp8.cu's quantizer
 * (kn_cuda_fp8_quant_row4) in a plain [n_tokens][ld] / [n_tokens][kb]
 * layout. */
__global__ void moe_fp8_quant_x_kernel(uint8_t *xq, float *xs, const float *x, int n_tokens, int dim,
                                       int kb, int ld)
{
    const int lane = threadIdx.x & 31;
    const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
    const long long tasks = (long long)n_tokens * kb;
    for (long long w = blockIdx.x * (long long)(blockDim.x >> 5) + (threadIdx.x >> 5); w < tasks; w += warps) {
        const int r = (int)(w / kb), b = (int)(w - (long long)r * kb);
        const int c0 = b * KN_FP8_BLOCK + lane * 4;
        float sc;
        const uint32_t packed = kn_cuda_fp8_quant_row4(x + (size_t)r * dim, c0, dim, &sc);
        *(uint32_t *)(xq + (size_t)r * ld + c0) = packed;
        if (lane == 0)
            xs[(size_t)r * kb + b] = sc;
    }
}

/* kernels/moe.h's activation; moe_experts.cu's expert_act and the CPU's
 * expert_activation compute the same. */
__device__ __forceinline__ float fp8_expert_act(float g, float u, int act, float alpha, float limit)
{
    if (act == KN_ACT_SWIGLU_OAI) {
        g = fminf(g, limit);
        u = fminf(fmaxf(u, -limit), limit);
        return g / (1.f + expf(-alpha * g)) * (u + 1.f);
    }
    return g / (1.f + expf(-g)) * u;
}

/* aq[pos] / as[pos]: the e4m3 codes and 1x128 scales of
 * act(gate_up_e x[perm[pos] / k] + b) for the 128 activation columns of
 * block x (codes past inter are zero, up to the padded row width).
 * Grid: (blocks of inter, n_local); the whole block returns together for an
 * expert without rows (block barriers below). */
template <int NT, int U>
__global__ void __launch_bounds__(GU_WARPS * 32)
moe_fp8_gate_up_kernel(uint8_t *aq, float *as, const uint8_t *xq, const float *xs, const int *perm,
                       const int *offsets, int k, const uint8_t *gate_up, const float *gate_up_scale,
                       const float *gate_up_bias, int dim, int inter, fp8_dims z, int act, float alpha,
                       float limit)
{
    __shared__ float amax_s[GU_WARPS][8 * NT];
    __shared__ float scale_s[8 * NT];
    const int e = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int first = offsets[e], rows = offsets[e + 1] - first;
    if (rows == 0)
        return;
    const int ldx = z.ldx, kbx = z.kbx, ldi = z.ldi, kbi = z.kbi;
    const size_t sld = z.gu_sld, n2 = 2 * (size_t)inter;
    const int col = blockIdx.x * KN_FP8_BLOCK + warp * 8 + g;
    const bool valid = col < inter;
    const int cc = min(col, inter - 1); /* past the end: computed, stored as zero codes */
    const uint8_t *we = gate_up + (size_t)e * z.gu_bytes;
    const float *se = gate_up_scale + (size_t)e * z.gu_scales;
    const uint8_t *wg = we + (size_t)cc * ldx, *wu = we + ((size_t)inter + cc) * ldx;
    const float *sg = se + (size_t)(cc / KN_FP8_BLOCK) * sld;
    const float *su = se + (size_t)((inter + cc) / KN_FP8_BLOCK) * sld;
    const float bg = gate_up_bias ? gate_up_bias[(size_t)e * n2 + cc] : 0.f;
    const float bu = gate_up_bias ? gate_up_bias[(size_t)e * n2 + inter + cc] : 0.f;
    for (int r0 = 0; r0 < rows; r0 += 8 * NT) {
        const int nr = min(8 * NT, rows - r0);
        const int *pp = perm + first + r0;
        int xrow[NT], srow[NT][2];
#pragma unroll
        for (int j = 0; j < NT; j++) {
            xrow[j] = 8 * j + g < nr ? pp[8 * j + g] / k : -1;
            srow[j][0] = pp[min(8 * j + 2 * t, nr - 1)] / k;
            srow[j][1] = pp[min(8 * j + 2 * t + 1, nr - 1)] / k;
        }
        float acc[NT][4];
#pragma unroll
        for (int j = 0; j < NT; j++)
            acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
        fp8_rows_dot<NT, U>(acc, wg, wu, sg, su, xq, xs, xrow, srow, 0, kbx, kbx, ldx, nr, lane);
        /* activation, and each token's amax over this warp's 8 columns */
        float v[NT][2];
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int tok = 8 * j + 2 * t + h;
                v[j][h] = valid && tok < nr ? fp8_expert_act(acc[j][h] + bg, acc[j][2 + h] + bu, act, alpha, limit)
                                            : 0.f;
                float m = fabsf(v[j][h]);
#pragma unroll
                for (int o = 4; o < 32; o <<= 1)
                    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
                if (g == 0)
                    amax_s[warp][tok] = m;
            }
        __syncthreads();
        if (threadIdx.x < 8 * NT) {
            float m = 0.f;
            for (int w = 0; w < GU_WARPS; w++)
                m = fmaxf(m, amax_s[w][threadIdx.x]);
            const float sc = m > 0.f && isfinite(m) ? m / KN_E4M3_MAX : 1.f;
            scale_s[threadIdx.x] = sc;
            if ((int)threadIdx.x < nr)
                as[(size_t)(first + r0 + threadIdx.x) * kbi + blockIdx.x] = sc;
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int tok = 8 * j + 2 * t + h;
                if (tok < nr)
                    aq[(size_t)(first + r0 + tok) * ldi + col] = valid ? kn_cuda_fp8_to_e4m3(v[j][h] / scale_s[tok]) : 0;
            }
        /* Next pass: amax_s is rewritten after every thread passed this
         * pass's second barrier (its reads are done), scale_s only after
         * the next first barrier, which every warp reaches after these reads. */
    }
}

/* y[pos][col] = down_e dequant(aq[pos]) for this warp's 16 output columns
 * (fp32, no bias). Grid: (column tiles, n_local). A K split over 8 warps a
 * tile (fp8_tile_ksplit, as the dense skinny kernel) was slower here: s11run1
 * measured GPT-OSS-20B batch 8 / 32 / 128 at 8.59 / 12.88 / 27.20 ms a step
 * against 7.78 / 12.15 / 24.95 with this kernel (its 203 registers and the
 * cross-warp reduction cost more than the extra streams gain). */
constexpr int DN_WARPS = 4; /* 16 output columns per warp */
template <int NT, int U>
__global__ void __launch_bounds__(DN_WARPS * 32)
moe_fp8_down_kernel(float *y, const uint8_t *aq, const float *as, const int *offsets, const uint8_t *down,
                    const float *down_scale, int dim, fp8_dims z)
{
    const int e = blockIdx.y, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int first = offsets[e], rows = offsets[e + 1] - first;
    const int c0 = (blockIdx.x * DN_WARPS + (threadIdx.x >> 5)) * 16;
    if (rows == 0 || c0 >= dim) /* whole warps leave; no block barrier below */
        return;
    const int ldi = z.ldi, kbi = z.kbi;
    const size_t sld = z.dn_sld;
    const int lo = min(c0 + g, dim - 1), hi = min(c0 + g + 8, dim - 1);
    const uint8_t *we = down + (size_t)e * z.dn_bytes;
    const float *se = down_scale + (size_t)e * z.dn_scales;
    const uint8_t *wlo = we + (size_t)lo * ldi, *whi = we + (size_t)hi * ldi;
    const float *slo = se + (size_t)(lo / KN_FP8_BLOCK) * sld, *shi = se + (size_t)(hi / KN_FP8_BLOCK) * sld;
    for (int r0 = 0; r0 < rows; r0 += 8 * NT) {
        const int nr = min(8 * NT, rows - r0), base = first + r0;
        int xrow[NT], srow[NT][2];
#pragma unroll
        for (int j = 0; j < NT; j++) {
            xrow[j] = 8 * j + g < nr ? base + 8 * j + g : -1;
            srow[j][0] = base + min(8 * j + 2 * t, nr - 1);
            srow[j][1] = base + min(8 * j + 2 * t + 1, nr - 1);
        }
        float acc[NT][4];
#pragma unroll
        for (int j = 0; j < NT; j++)
            acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
        fp8_rows_dot<NT, U>(acc, wlo, whi, slo, shi, aq, as, xrow, srow, 0, kbi, kbi, ldi, nr, lane);
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int tok = 8 * j + 2 * t + h;
                if (tok < nr) {
                    float *yr = y + (size_t)(base + tok) * dim;
                    if (c0 + g < dim)
                        yr[c0 + g] = acc[j][h];
                    if (c0 + g + 8 < dim)
                        yr[c0 + g + 8] = acc[j][2 + h];
                }
            }
    }
}

int kn_cuda_moe_grouped_fp8_ok(const kn_moe_weights *w)
{
    return w->wdtype == KN_FP8_E4M3 && kn_cuda_aligned16(w->gate_up) && kn_cuda_aligned16(w->down) &&
           ((uintptr_t)w->gate_up_scale & 3u) == 0 && ((uintptr_t)w->down_scale & 3u) == 0;
}

static fp8_dims fp8_dims_of(const kn_moe_weights *w)
{
    const int dim = w->dim, inter = w->inter;
    fp8_dims z;
    z.ldx = (int)kn_fp8_ld((size_t)dim);
    z.kbx = (int)kn_fp8_blocks((size_t)dim);
    z.ldi = (int)kn_fp8_ld((size_t)inter);
    z.kbi = (int)kn_fp8_blocks((size_t)inter);
    z.gu_sld = kn_fp8_scale_ld((size_t)dim);
    z.dn_sld = kn_fp8_scale_ld((size_t)inter);
    z.gu_bytes = kn_fp8_data_bytes(2 * (size_t)inter, (size_t)dim);
    z.dn_bytes = kn_fp8_data_bytes((size_t)dim, (size_t)inter);
    z.gu_scales = kn_fp8_scale_count(2 * (size_t)inter, (size_t)dim);
    z.dn_scales = kn_fp8_scale_count((size_t)dim, (size_t)inter);
    return z;
}

/* The products' launches, each on its own (run_gu / run_dn) so the grouped
 * GEMMs' diagnostic modes can pair one of them with the other GEMM. */
template <int NT_GU, int U_GU, int NT_DN, int U_DN>
static cudaError_t launch_fp8_products(cudaStream_t s, const kn_moe_weights *w, float *y, uint8_t *aq, float *as,
                                       const uint8_t *xq, const float *xs, const int *perm, const int *offsets,
                                       int k, bool run_gu = true, bool run_dn = true)
{
    const int n_local = w->n_experts, dim = w->dim, inter = w->inter;
    const fp8_dims z = fp8_dims_of(w);
    if (run_gu) {
        dim3 gu_grid((unsigned)kn_fp8_blocks((size_t)inter), (unsigned)n_local);
        moe_fp8_gate_up_kernel<NT_GU, U_GU><<<gu_grid, GU_WARPS * 32, 0, s>>>(
            aq, as, xq, xs, perm, offsets, k, (const uint8_t *)w->gate_up, w->gate_up_scale, w->gate_up_bias,
            dim, inter, z, (int)w->act, w->alpha, w->limit);
        cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess || !run_dn)
            return err;
    }
    dim3 dn_grid((unsigned)kn_cuda_div_up(dim, DN_WARPS * 16), (unsigned)n_local);
    moe_fp8_down_kernel<NT_DN, U_DN><<<dn_grid, DN_WARPS * 32, 0, s>>>(
        y, aq, as, offsets, (const uint8_t *)w->down, w->down_scale, dim, z);
    return cudaGetLastError();
}

cudaError_t kn_cuda_moe_fp8_quant_x(const kn_backend *be, uint8_t *xq, float *xs, const float *x, int n_tokens, int dim)
{
    const int ldx = (int)kn_fp8_ld((size_t)dim), kbx = (int)kn_fp8_blocks((size_t)dim);
    const long long tasks = (long long)n_tokens * kbx, cap = (long long)kn_cuda_ctx_of(be)->sm_count * 32;
    const long long blocks = (tasks + 7) / 8;
    moe_fp8_quant_x_kernel<<<(unsigned)(blocks < cap ? blocks : cap), 256, 0, kn_cuda_stream(be)>>>(
        xq, xs, x, n_tokens, dim, kbx, ldx);
    return cudaGetLastError();
}

cudaError_t kn_cuda_moe_fp8_decode_product(const kn_backend *be, const kn_moe_weights *w, int which, float *y,
                                           uint8_t *aq, float *as, const uint8_t *xq, const float *xs,
                                           const int *perm, const int *offsets, int k)
{
    return launch_fp8_products<4, 2, 8, 2>(kn_cuda_stream(be), w, y, aq, as, xq, xs, perm, offsets, k,
                                           which == 0, which == 1);
}

int kn_cuda_moe_grouped_fp8(const kn_backend *be, const char *op, const kn_moe_weights *w, float *y,
                                       const float *x, const int *perm, const int *offsets, int n_tokens, int k,
                                       long long rows_hint)
{
    if (n_tokens == 0)
        return TN_OK;
    cudaStream_t s = kn_cuda_stream(be);
    const size_t n_slots = (size_t)n_tokens * k;
    const int ldx = (int)kn_fp8_ld((size_t)w->dim), kbx = (int)kn_fp8_blocks((size_t)w->dim);
    const size_t ldi = kn_fp8_ld((size_t)w->inter), kbi = kn_fp8_blocks((size_t)w->inter);
    int rc = TN_OK;
    cudaError_t err = cudaSuccess;
    const char *what = "moe_fp8_quant_x_kernel";
    /* x quantized per token; the activation per slot (the routed count stays
     * on the device, so every slot gets room) */
    uint8_t *xq = (uint8_t *)kn_cuda_tmp_alloc(be, op, (size_t)n_tokens * ldx);
    float *xs = (float *)kn_cuda_tmp_alloc(be, op, (size_t)n_tokens * kbx * sizeof(float));
    uint8_t *aq = (uint8_t *)kn_cuda_tmp_alloc(be, op, n_slots * ldi);
    float *as = (float *)kn_cuda_tmp_alloc(be, op, n_slots * kbi * sizeof(float));
    if (!xq || !xs || !aq || !as) {
        rc = TN_ERR_NOMEM;
        goto done;
    }
    err = kn_cuda_moe_fp8_quant_x(be, xq, xs, x, n_tokens, w->dim);
    if (err != cudaSuccess)
        goto done;
    what = "grouped fp8 expert kernels";
    /* Rows per pass with headroom over the mean rows per expert (as the
     * bf16 grouped middle): a second pass re-reads the expert's weights.
     * <NT, U> per kernel: 8*NT rows per pass, U 128-wide blocks of weight
     * loads in flight (more when few rows leave the weight stream all that
     * matters); the gate_up kernel's 512 threads cap it at 128 registers,
     * so at most 32 rows per pass there. */
    if (rows_hint <= 2)
        err = launch_fp8_products<1, 4, 1, 4>(s, w, y, aq, as, xq, xs, perm, offsets, k);
    else if (rows_hint <= 6)
        err = launch_fp8_products<2, 2, 2, 4>(s, w, y, aq, as, xq, xs, perm, offsets, k);
    else if (rows_hint <= 12)
        err = launch_fp8_products<4, 2, 4, 2>(s, w, y, aq, as, xq, xs, perm, offsets, k);
    else
        err = launch_fp8_products<4, 2, 8, 2>(s, w, y, aq, as, xq, xs, perm, offsets, k);
done:
    kn_cuda_tmp_free(be, xq);
    kn_cuda_tmp_free(be, xs);
    kn_cuda_tmp_free(be, aq);
    kn_cuda_tmp_free(be, as);
    if (err != cudaSuccess)
        return kn_cuda_device_error(op, what, err);
    return rc;
}
