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
 * the block scales applied per 128-wide block).
 *
 * Staged token rows (STAGED, the default where they fit in shared memory):
 * every warp of a block multiplies its own weight rows with the same token
 * rows of the pass, so the block copies those rows (codes and 1x128 scales)
 * into shared memory once per pass (16-byte cp.async) and the warps read
 * them there. Unstaged, each warp read all of the pass's token rows from L2
 * for its 8-16 weight rows: as many bytes as the weights, and a dependent
 * L2 round trip inside every 128-wide k block (s12run1's profile: the
 * experts 11.3 of 24.6 ms at batch 128 on an H100). The down kernel stages
 * with 8 warps (128 output columns) a block so a pass's rows serve twice as
 * many weight rows; 32 rows a pass (a GPT-OSS activation pass is 96 KB).
 * Measured (GPT-OSS-20B FP8 decode, context 8192, ms a step, staged vs
 * unstaged in the same call): s14run3 on an H100, batch 8 / 64 / 128
 * 7.65 / 15.52 / 21.07 vs 7.88 / 16.42 / 23.67, batch 32 even (12.11 vs
 * 12.05); s14run2 on the H200 (session 12's build of the same design)
 * batch 64 / 128 12.69 / 17.64 vs 13.73 / 20.41.
 * TANDEM_CUDA_MOE_STAGED=0 (kn_cuda_set_moe_staged) runs the unstaged
 * kernels, for comparison. */
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/fp8_cuda.cuh"
#include "kernels/cuda/fp8_rows_mma.cuh"
#include "kernels/cuda/moe_grouped_fp8.cuh"
#include "kernels/cuda/expert_act.cuh"
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

/* Staged rows: ld + 64 bytes apart, so the two rows a quarter warp reads
 * (g, g + 1; ld is a multiple of 128 bytes) fall on opposite halves of the
 * banks. Codes first, then the rows' scales (nkb floats each). */
__host__ __device__ constexpr int fp8_stage_ld(int ld) { return ld + 64; }
static size_t fp8_stage_bytes(int rows, int ld, int nkb)
{
    return (size_t)rows * fp8_stage_ld(ld) + (size_t)rows * nkb * sizeof(float);
}

/* Copies the nr token rows of a pass into shared memory: row r is token
 * perm[base + r] / k (perm != NULL: the gate_up kernel's x rows) or row
 * base + r (the down kernel's activation rows). Every thread of the block
 * calls it; it returns after a block barrier with the rows in place. */
__device__ __forceinline__ void fp8_stage_pass(uint8_t *sq, float *ss, const uint8_t *xq, const float *xs,
                                               const int *perm, int k, int base, int nr, int ld, int nkb)
{
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5, sld = fp8_stage_ld(ld);
    for (int r = threadIdx.x >> 5; r < nr; r += warps) {
        const int src = perm ? perm[base + r] / k : base + r;
        const uint8_t *g = xq + (size_t)src * ld;
        const uint32_t d = (uint32_t)__cvta_generic_to_shared(sq + (size_t)r * sld);
        for (int c = 16 * lane; c < ld; c += 16 * 32)
            kn_cp_async16(d + c, g + c, 16);
        for (int b = lane; b < nkb; b += 32)
            ss[r * nkb + b] = xs[(size_t)src * nkb + b];
    }
    kn_cp_async_commit();
    kn_cp_async_wait<0>();
    __syncthreads();
}

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

/* aq[pos] / as[pos]: the e4m3 codes and 1x128 scales of
 * act(gate_up_e x[perm[pos] / k] + b) for the 128 activation columns of
 * block x (codes past inter are zero, up to the padded row width).
 * Grid: (blocks of inter, n_local); the whole block returns together for an
 * expert without rows (block barriers below). STAGED: the pass's x rows in
 * dynamic shared memory (fp8_stage_bytes(8 NT, ldx, kbx)). */
template <int NT, int U, bool STAGED>
__global__ void __launch_bounds__(GU_WARPS * 32)
moe_fp8_gate_up_kernel(uint8_t *aq, float *as, const uint8_t *xq, const float *xs, const int *perm,
                       const int *offsets, int k, const uint8_t *gate_up, const float *gate_up_scale,
                       const float *gate_up_bias, int dim, int inter, fp8_dims z, int act, float alpha,
                       float limit)
{
    __shared__ float amax_s[GU_WARPS][8 * NT];
    __shared__ float scale_s[8 * NT];
    extern __shared__ __align__(16) uint8_t gu_stage[];
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
    float *ss = (float *)(gu_stage + (size_t)8 * NT * fp8_stage_ld(ldx)); /* STAGED: the rows' scales */
    for (int r0 = 0; r0 < rows; r0 += 8 * NT) {
        const int nr = min(8 * NT, rows - r0);
        const int *pp = perm + first + r0;
        /* STAGED: the stage is rewritten after this pass's amax barriers,
         * which every warp reaches after its product */
        if (STAGED)
            fp8_stage_pass(gu_stage, ss, xq, xs, perm, k, first + r0, nr, ldx, kbx);
        /* the x row of the pass's position i: staged, by position */
        auto row = [&](int i) { return STAGED ? i : pp[i] / k; };
        int xrow[NT], srow[NT][2];
#pragma unroll
        for (int j = 0; j < NT; j++) {
            xrow[j] = 8 * j + g < nr ? row(8 * j + g) : -1;
            srow[j][0] = row(min(8 * j + 2 * t, nr - 1));
            srow[j][1] = row(min(8 * j + 2 * t + 1, nr - 1));
        }
        float acc[NT][4];
#pragma unroll
        for (int j = 0; j < NT; j++)
            acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
        fp8_rows_dot<NT, U>(acc, wg, wu, sg, su, STAGED ? gu_stage : xq, STAGED ? ss : xs, xrow, srow, 0, kbx, kbx,
                            STAGED ? fp8_stage_ld(ldx) : ldx, nr, lane);
        /* activation, and each token's amax over this warp's 8 columns */
        float v[NT][2];
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int tok = 8 * j + 2 * t + h;
                v[j][h] = valid && tok < nr ? kn_cuda_expert_act(acc[j][h] + bg, acc[j][2 + h] + bu, act, alpha, limit)
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
 * (fp32, no bias). Grid: (column tiles, n_local); WARPS warps a block.
 * Unstaged: 4 warps, each leaves at once when it has no columns. STAGED: 8
 * warps sharing each pass's activation rows in dynamic shared memory
 * (fp8_stage_bytes(8 NT, ldi, kbi)); warps without columns stay for the
 * block barriers. A K split over 8 warps a tile (fp8_tile_ksplit, as the
 * dense skinny kernel) was slower here: s11run1 measured GPT-OSS-20B batch
 * 8 / 32 / 128 at 8.59 / 12.88 / 27.20 ms a step against 7.78 / 12.15 /
 * 24.95 with the unstaged kernel (its 203 registers and the cross-warp
 * reduction cost more than the extra streams gain). */
constexpr int DN_WARPS = 4;        /* 16 output columns per warp */
constexpr int DN_STAGED_WARPS = 8;
template <int NT, int U, bool STAGED>
__global__ void __launch_bounds__((STAGED ? DN_STAGED_WARPS : DN_WARPS) * 32, STAGED ? 2 : 1)
moe_fp8_down_kernel(float *y, const uint8_t *aq, const float *as, const int *offsets, const uint8_t *down,
                    const float *down_scale, int dim, fp8_dims z)
{
    constexpr int WARPS = STAGED ? DN_STAGED_WARPS : DN_WARPS;
    extern __shared__ __align__(16) uint8_t dn_stage[];
    const int e = blockIdx.y, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int first = offsets[e], rows = offsets[e + 1] - first;
    const int c0 = (blockIdx.x * WARPS + (threadIdx.x >> 5)) * 16;
    if (rows == 0 || (!STAGED && c0 >= dim)) /* whole warps (blocks) leave */
        return;
    const int ldi = z.ldi, kbi = z.kbi;
    const size_t sld = z.dn_sld;
    const int lo = min(c0 + g, dim - 1), hi = min(c0 + g + 8, dim - 1);
    const uint8_t *we = down + (size_t)e * z.dn_bytes;
    const float *se = down_scale + (size_t)e * z.dn_scales;
    const uint8_t *wlo = we + (size_t)lo * ldi, *whi = we + (size_t)hi * ldi;
    const float *slo = se + (size_t)(lo / KN_FP8_BLOCK) * sld, *shi = se + (size_t)(hi / KN_FP8_BLOCK) * sld;
    float *ss = (float *)(dn_stage + (size_t)8 * NT * fp8_stage_ld(ldi)); /* STAGED: the rows' scales */
    for (int r0 = 0; r0 < rows; r0 += 8 * NT) {
        const int nr = min(8 * NT, rows - r0), base = first + r0;
        if (STAGED)
            fp8_stage_pass(dn_stage, ss, aq, as, nullptr, 1, base, nr, ldi, kbi);
        int xrow[NT], srow[NT][2];
        const int rb = STAGED ? 0 : base; /* staged rows by position in the pass */
#pragma unroll
        for (int j = 0; j < NT; j++) {
            xrow[j] = 8 * j + g < nr ? rb + 8 * j + g : -1;
            srow[j][0] = rb + min(8 * j + 2 * t, nr - 1);
            srow[j][1] = rb + min(8 * j + 2 * t + 1, nr - 1);
        }
        float acc[NT][4];
#pragma unroll
        for (int j = 0; j < NT; j++)
            acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
        if (c0 < dim) { /* warp-uniform */
            fp8_rows_dot<NT, U>(acc, wlo, whi, slo, shi, STAGED ? dn_stage : aq, STAGED ? ss : as, xrow, srow, 0,
                                kbi, kbi, STAGED ? fp8_stage_ld(ldi) : ldi, nr, lane);
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
        if (STAGED)
            __syncthreads(); /* the stage is rewritten by the next pass */
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

/* Launches one kernel with `bytes` of dynamic shared memory (raising the
 * kernel's limit past the default 48 KB first). */
template <typename K, typename... A>
static cudaError_t launch_smem(K kernel, dim3 grid, int threads, size_t bytes, cudaStream_t s, A... args)
{
    if (bytes > 48 * 1024) {
        cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
        if (err != cudaSuccess)
            return err;
    }
    kernel<<<grid, threads, bytes, s>>>(args...);
    return cudaGetLastError();
}

/* The products' launches, each on its own (run_gu / run_dn) so the grouped
 * GEMMs' diagnostic modes can pair one of them with the other GEMM. Staged
 * where the backend says so and a pass's rows fit the block's shared
 * memory; the staged down kernel takes at most 32 rows a pass. */
template <int NT_GU, int U_GU, int NT_DN, int U_DN>
static cudaError_t launch_fp8_products(const kn_backend *be, const kn_moe_weights *w, float *y, uint8_t *aq,
                                       float *as, const uint8_t *xq, const float *xs, const int *perm,
                                       const int *offsets, int k, bool run_gu = true, bool run_dn = true)
{
    const kn_cuda_ctx *ctx = kn_cuda_ctx_of(be);
    cudaStream_t s = kn_cuda_stream(be);
    const int n_local = w->n_experts, dim = w->dim, inter = w->inter;
    const fp8_dims z = fp8_dims_of(w);
    constexpr int NT_DN_STAGED = NT_DN < 4 ? NT_DN : 4;
    const size_t gu_bytes = fp8_stage_bytes(8 * NT_GU, z.ldx, z.kbx);
    const size_t dn_bytes = fp8_stage_bytes(8 * NT_DN_STAGED, z.ldi, z.kbi);
    /* the gate_up kernel's static shared memory (amax_s, scale_s: 2.1 KB
     * at 32 rows) counts against the same per-block limit */
    const size_t static_room = 4096;
    const bool gu_staged = ctx->moe_staged && gu_bytes + static_room <= (size_t)ctx->smem_optin;
    const bool dn_staged = ctx->moe_staged && dn_bytes + static_room <= (size_t)ctx->smem_optin;
    if (run_gu) {
        const dim3 grid((unsigned)kn_fp8_blocks((size_t)inter), (unsigned)n_local);
        const uint8_t *gu = (const uint8_t *)w->gate_up;
        cudaError_t err =
            gu_staged ? launch_smem(moe_fp8_gate_up_kernel<NT_GU, U_GU, true>, grid, GU_WARPS * 32, gu_bytes, s, aq,
                                    as, xq, xs, perm, offsets, k, gu, w->gate_up_scale, w->gate_up_bias, dim, inter,
                                    z, (int)w->act, w->alpha, w->limit)
                      : launch_smem(moe_fp8_gate_up_kernel<NT_GU, U_GU, false>, grid, GU_WARPS * 32, 0, s, aq, as,
                                    xq, xs, perm, offsets, k, gu, w->gate_up_scale, w->gate_up_bias, dim, inter, z,
                                    (int)w->act, w->alpha, w->limit);
        if (err != cudaSuccess || !run_dn)
            return err;
    }
    const uint8_t *dn = (const uint8_t *)w->down;
    if (dn_staged)
        return launch_smem(moe_fp8_down_kernel<NT_DN_STAGED, U_DN, true>,
                           dim3((unsigned)kn_cuda_div_up(dim, DN_STAGED_WARPS * 16), (unsigned)n_local),
                           DN_STAGED_WARPS * 32, dn_bytes, s, y, aq, as, offsets, dn, w->down_scale, dim, z);
    return launch_smem(moe_fp8_down_kernel<NT_DN, U_DN, false>,
                       dim3((unsigned)kn_cuda_div_up(dim, DN_WARPS * 16), (unsigned)n_local), DN_WARPS * 32, 0, s,
                       y, aq, as, offsets, dn, w->down_scale, dim, z);
}

extern "C" void kn_cuda_set_moe_staged(const kn_backend *be, int on)
{
    kn_cuda_ctx_of(be)->moe_staged = on != 0;
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
    return launch_fp8_products<4, 2, 8, 2>(be, w, y, aq, as, xq, xs, perm, offsets, k, which == 0, which == 1);
}

int kn_cuda_moe_grouped_fp8(const kn_backend *be, const char *op, const kn_moe_weights *w, float *y,
                                       const float *x, const int *perm, const int *offsets, int n_tokens, int k,
                                       long long rows_hint)
{
    if (n_tokens == 0)
        return TN_OK;
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
        err = launch_fp8_products<1, 4, 1, 4>(be, w, y, aq, as, xq, xs, perm, offsets, k);
    else if (rows_hint <= 6)
        err = launch_fp8_products<2, 2, 2, 4>(be, w, y, aq, as, xq, xs, perm, offsets, k);
    else if (rows_hint <= 12)
        err = launch_fp8_products<4, 2, 4, 2>(be, w, y, aq, as, xq, xs, perm, offsets, k);
    else
        err = launch_fp8_products<4, 2, 8, 2>(be, w, y, aq, as, xq, xs, perm, offsets, k);
done:
    kn_cuda_tmp_free(be, xq);
    kn_cuda_tmp_free(be, xs);
    kn_cuda_tmp_free(be, aq);
    kn_cuda_tmp_free(be, as);
    if (err != cudaSuccess)
        return kn_cuda_device_error(op, what, err);
    return rc;
}
