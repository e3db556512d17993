/* The dense FP8 GEMV of kn_matmul_w for 1..KN_CUDA_FP8_GEMV_ROWS rows
 * (gemv_fp8.cuh has the function, its error bound and the design).
 *
 * Each block owns NC consecutive output columns (weight rows) and all the
 * m rows of x: NC = 8 at one row (x's bytes per chunk then half the
 * weight bytes the block streams), 4 for more (the R x values of a chunk
 * come from L1, shared by the SM's blocks). So q/k/v/o of GPT-OSS (n =
 * 512..4096) give 64..512 blocks at one row, 128..1024 above. Rows of x
 * are a template (1, 2, 4, 8) with the real count block-uniform below it.
 * The replacement
 * for: quant_fp8 kernel + two memsets + cuBLASLt GEMM padded to 16 rows +
 * a copy of the real rows (gemm_fp8.cu), five launches, one here. */
#include "kernels/cuda/gemv_fp8.cuh"
#include "kernels/cuda/rms_row.cuh"
extern "C" {
#include "kernels/cuda/cuda_backend.h"
}

/* Up to KN_CUDA_GEMV_MATS weights over the same x in one launch (q, k,
 * v): matrix i takes blocks [block0[i], block0[i + 1]). */
struct GemvMats {
    float *out[KN_CUDA_GEMV_MATS];
    const uint8_t *w[KN_CUDA_GEMV_MATS];
    const float *ws[KN_CUDA_GEMV_MATS], *bias[KN_CUDA_GEMV_MATS];
    int n[KN_CUDA_GEMV_MATS], block0[KN_CUDA_GEMV_MATS + 1];
    int n_mats;
};

/* The packing of kn_cuda_gemv_mat into g (TN_ERR_UNSUPPORTED for an empty
 * matrix or weights not aligned for the vector loads), and each matrix's
 * first block for NC weight rows a block. */
static int gemv_mats_pack(GemvMats *g, const kn_cuda_gemv_mat *mats, int n_mats)
{
    memset(g, 0, sizeof *g);
    g->n_mats = n_mats;
    for (int i = 0; i < n_mats; i++) {
        if (mats[i].n < 1 || ((uintptr_t)mats[i].w & 15) || ((uintptr_t)mats[i].ws & 3))
            return TN_ERR_UNSUPPORTED;
        g->out[i] = mats[i].out;
        g->w[i] = mats[i].w;
        g->ws[i] = mats[i].ws;
        g->bias[i] = mats[i].bias;
        g->n[i] = mats[i].n;
    }
    return TN_OK;
}

static unsigned gemv_mats_blocks(GemvMats *g, int nc)
{
    g->block0[0] = 0;
    for (int i = 0; i < g->n_mats; i++)
        g->block0[i + 1] = g->block0[i] + (g->n[i] + nc - 1) / nc;
    return (unsigned)g->block0[g->n_mats];
}

/* This block's matrix i, its output columns n0 .. n0 + nv - 1 (of n), and
 * (thread 0) the start of their copy into wbuf, completing on bar. */
template <int NC>
static __device__ __forceinline__ void gemv_block_rows(const GemvMats &g, int ld, uint8_t *wbuf, uint64_t *bar,
                                                       int &i, int &n, int &n0, int &nv)
{
    i = 0;
#pragma unroll
    for (int j = 1; j < KN_CUDA_GEMV_MATS; j++)
        if (j < g.n_mats && (int)blockIdx.x >= g.block0[j])
            i = j;
    n = g.n[i];
    n0 = ((int)blockIdx.x - g.block0[i]) * NC;
    nv = min(NC, n - n0);
    if (threadIdx.x == 0)
        kn_gemv_rows_start2(kn_smem_addr(bar), kn_smem_addr(wbuf), g.w[i] + (size_t)n0 * ld, nv, 0, NULL, 0, ld);
}

/* A block owns NC weight rows (output columns n0..n0+NC-1) of one matrix
 * for all m rows of x; gemv_fp8.cuh says how it copies them in and splits
 * K. */
template <int NC, int R, bool VEC>
__global__ void __launch_bounds__(KN_GEMV_THREADS, R == 1 ? KN_GEMV_MIN_BLOCKS : 1)
fp8_gemv_kernel(const GemvMats g, const float *x, int m, int k, int ld, int sld)
{
    extern __shared__ __align__(128) uint8_t wbuf[]; /* [NC][ld] */
    __shared__ __align__(8) uint64_t bar;
    __shared__ float red[KN_GEMV_WARPS][NC * R];
    const int tid = threadIdx.x;
    int i, n, n0, nv;
    gemv_block_rows<NC>(g, ld, wbuf, &bar, i, n, n0, nv);
    const float *sr[NC];
#pragma unroll
    for (int c = 0; c < NC; c++)
        sr[c] = g.ws[i] + (size_t)(min(n0 + c, n - 1) / KN_FP8_BLOCK) * sld;
    float acc[NC][R];
#pragma unroll
    for (int c = 0; c < NC; c++)
#pragma unroll
        for (int r = 0; r < R; r++)
            acc[c][r] = 0.f;
    __syncthreads(); /* bar initialised */
    kn_gemv_smem_rows<NC, R, VEC>(acc, wbuf, ld, (1u << nv) - 1u, sr, x, (size_t)k, m, k, tid, kn_smem_addr(&bar));
    kn_gemv_block_sum<NC * R>(&acc[0][0], red, tid);
    if (tid < NC * R) {
        const int c = tid / R, r = tid % R;
        if (r < m && c < nv)
            g.out[i][(size_t)r * n + n0 + c] = kn_gemv_block_total(red, tid) + (g.bias[i] ? g.bias[i][n0 + c] : 0.f);
    }
}

template <int NC, int R>
static void launch(cudaStream_t s, GemvMats g, bool vec, const float *x, int m, int k, int ld, int sld)
{
    const unsigned blocks = gemv_mats_blocks(&g, NC);
    const size_t smem = (size_t)NC * ld;
    if (vec)
        fp8_gemv_kernel<NC, R, true><<<blocks, KN_GEMV_THREADS, smem, s>>>(g, x, m, k, ld, sld);
    else
        fp8_gemv_kernel<NC, R, false><<<blocks, KN_GEMV_THREADS, smem, s>>>(g, x, m, k, ld, sld);
}

template <int NC>
static void launch_rows(cudaStream_t s, const GemvMats &g, bool vec, const float *x, int m, int k, int ld, int sld)
{
    if (m == 1)
        launch<NC, 1>(s, g, vec, x, m, k, ld, sld);
    else if (m == 2)
        launch<NC, 2>(s, g, vec, x, m, k, ld, sld);
    else if (m <= 4)
        launch<NC, 4>(s, g, vec, x, m, k, ld, sld);
    else
        launch<NC, 8>(s, g, vec, x, m, k, ld, sld);
}

int kn_cuda_fp8_gemv_multi(const kn_backend *be, const char *op, const kn_cuda_gemv_mat *mats, int n_mats,
                           const float *x, int m, int k)
{
    if (m < 1 || m > KN_CUDA_FP8_GEMV_ROWS)
        return kn_arg_error(op, "fp8 gemv takes 1..%d rows, got %d", KN_CUDA_FP8_GEMV_ROWS, m);
    if (n_mats < 1 || n_mats > KN_CUDA_GEMV_MATS || k < 1 || ((uintptr_t)x & 3))
        return TN_ERR_UNSUPPORTED;
    GemvMats g;
    if (gemv_mats_pack(&g, mats, n_mats) != TN_OK)
        return TN_ERR_UNSUPPORTED;
    const bool vec = k % 16 == 0 && ((uintptr_t)x & 15) == 0;
    const int ld = (int)kn_fp8_ld((size_t)k), sld = (int)kn_fp8_scale_ld((size_t)k);
    cudaStream_t s = kn_cuda_stream(be);
    /* 8 rows a block (23.5 KB of shared memory at K = 2880), 4 where 8 rows
     * would pass the static shared-memory limit; past that the cuBLASLt path. */
    if ((size_t)8 * ld <= (size_t)KN_GEMV_SMEM_MAX)
        launch_rows<8>(s, g, vec, x, m, k, ld, sld);
    else if ((size_t)4 * ld <= (size_t)KN_GEMV_SMEM_MAX)
        launch_rows<4>(s, g, vec, x, m, k, ld, sld);
    else
        return TN_ERR_UNSUPPORTED;
    KN_CUDA_LAUNCH_CHECK(op, "fp8_gemv_kernel");
    return TN_OK;
}

/* kn_matmul_w_multi_normed at one row (gemv_fp8.cuh): the norm in front
 * of fp8_gemv_kernel<NC, 1, true>. */
struct GemvNorm {
    float *x;
    const float *delta, *w;
    float *xn;
    float eps;
    unsigned *done;
};

/* fp8_gemv_kernel<NC, 1, true> whose x row is rmsnorm(x + delta) * w:
 * while the block's weight rows arrive, each thread loads its chunks of x,
 * delta and w and the chunks' weight scales in one round trip (k = 16 tid
 * + 2048 i: the whole row over the block, K <= 4096), keeping (x + delta)
 * * w; the block sums the squares of x + delta (rms_row.cuh's arithmetic)
 * and scales the kept values by inv_rms, so the products see exactly the
 * values block 0 writes to xn (the weight applied before inv_rms, where
 * kn_add_rmsnorm applies it after: one rounding apart, and loading w up
 * front saves a round trip after the sum). The NC rows share one 128-row
 * scale block (n0 % 8 == 0), so a chunk has one scale; the products and
 * the block sum are fp8_gemv_kernel's. x is only read until every block
 * has: the last block to arrive (the counter) writes x + delta back, then
 * resets the counter for the next launch. */
template <int NC>
__global__ void __launch_bounds__(KN_GEMV_THREADS, KN_GEMV_MIN_BLOCKS)
fp8_gemv_normed_kernel(const GemvMats g, const GemvNorm nm, int k, int ld, int sld)
{
    static_assert(KN_FP8_BLOCK % NC == 0, "a block's rows share one scale row");
    extern __shared__ __align__(128) uint8_t wbuf[]; /* [NC][ld] */
    __shared__ __align__(8) uint64_t bar;
    __shared__ float red[KN_GEMV_WARPS][NC];
    __shared__ double sq_red[KN_GEMV_WARPS];
    __shared__ bool last;
    const int tid = threadIdx.x;
    int i, n, n0, nv;
    gemv_block_rows<NC>(g, ld, wbuf, &bar, i, n, n0, nv);
    const float *srow = g.ws[i] + (size_t)(n0 / KN_FP8_BLOCK) * sld;
    float xv[KN_GEMV_PRE][16], sc[KN_GEMV_PRE];
    double sq = 0.0;
#pragma unroll
    for (int p = 0; p < KN_GEMV_PRE; p++) {
        const int k0 = 16 * (tid + p * KN_GEMV_THREADS);
        if (k0 < k) {
            sc[p] = srow[k0 / KN_FP8_BLOCK];
#pragma unroll
            for (int q = 0; q < 4; q++) {
                float4 v = *reinterpret_cast<const float4 *>(nm.x + k0 + 4 * q);
                if (nm.delta)
                    v = kn_rms_add4(v, *reinterpret_cast<const float4 *>(nm.delta + k0 + 4 * q));
                const float4 w = __ldg(reinterpret_cast<const float4 *>(nm.w + k0 + 4 * q));
                sq = kn_rms_sq4(sq, v);
                xv[p][4 * q] = __fmul_rn(v.x, w.x), xv[p][4 * q + 1] = __fmul_rn(v.y, w.y);
                xv[p][4 * q + 2] = __fmul_rn(v.z, w.z), xv[p][4 * q + 3] = __fmul_rn(v.w, w.w);
            }
        }
    }
    sq = kn_rms_warp_sum(sq);
    if ((tid & 31) == 0)
        sq_red[tid >> 5] = sq;
    __syncthreads(); /* sq_red written, bar initialised */
    sq = sq_red[0];
#pragma unroll
    for (int w = 1; w < KN_GEMV_WARPS; w++)
        sq += sq_red[w];
    const float inv_rms = kn_rms_inv(sq, k, nm.eps);
#pragma unroll
    for (int p = 0; p < KN_GEMV_PRE; p++) {
        const int k0 = 16 * (tid + p * KN_GEMV_THREADS);
        if (k0 < k) {
#pragma unroll
            for (int j = 0; j < 16; j++)
                xv[p][j] = __fmul_rn(xv[p][j], inv_rms);
            if (blockIdx.x == 0)
#pragma unroll
                for (int q = 0; q < 4; q++)
                    *reinterpret_cast<float4 *>(nm.xn + k0 + 4 * q) =
                        make_float4(xv[p][4 * q], xv[p][4 * q + 1], xv[p][4 * q + 2], xv[p][4 * q + 3]);
        }
    }
    float acc[NC];
#pragma unroll
    for (int c = 0; c < NC; c++)
        acc[c] = 0.f;
    kn_mbar_wait(kn_smem_addr(&bar), 0);
#pragma unroll
    for (int p = 0; p < KN_GEMV_PRE; p++) {
        const int k0 = 16 * (tid + p * KN_GEMV_THREADS);
        if (k0 >= k)
            break;
#pragma unroll
        for (int c = 0; c < NC; c++)
            if (c < nv)
                acc[c] = fmaf(kn_gemv_dot16(*reinterpret_cast<const uint4 *>(wbuf + (size_t)c * ld + k0), xv[p]),
                              sc[p], acc[c]);
    }
    kn_gemv_block_sum<NC>(acc, red, tid);
    if (tid < NC && tid < nv)
        g.out[i][n0 + tid] = kn_gemv_block_total(red, tid) + (g.bias[i] ? g.bias[i][n0 + tid] : 0.f);
    if (!nm.delta)
        return;
    /* every thread's x loads returned before the block sum's barrier */
    if (tid == 0)
        last = atomicAdd(nm.done, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last)
        return;
    /* x + delta again (from L2: holding it in registers would cost the
     * kernel its 64-register bound) */
    for (int k4 = tid; k4 < k / 4; k4 += KN_GEMV_THREADS) {
        float4 *xr = reinterpret_cast<float4 *>(nm.x) + k4;
        *xr = kn_rms_add4(*xr, reinterpret_cast<const float4 *>(nm.delta)[k4]);
    }
    if (tid == 0)
        *nm.done = 0;
}

int kn_cuda_fp8_gemv_multi_normed(const kn_backend *be, const char *op, const kn_cuda_gemv_mat *mats,
                                  int n_mats, const kn_norm_in *norm, int k, unsigned *done)
{
    if (n_mats < 1 || n_mats > KN_CUDA_GEMV_MATS || k < 16 || k % 16 != 0 || k > KN_GEMV_PRE_K ||
        !kn_cuda_aligned16(norm->x) || !kn_cuda_aligned16(norm->xn) || !kn_cuda_aligned16(norm->weight) ||
        (norm->delta && !kn_cuda_aligned16(norm->delta)))
        return TN_ERR_UNSUPPORTED;
    GemvMats g;
    if (gemv_mats_pack(&g, mats, n_mats) != TN_OK)
        return TN_ERR_UNSUPPORTED;
    const int ld = (int)kn_fp8_ld((size_t)k), sld = (int)kn_fp8_scale_ld((size_t)k);
    const int NC = 8; /* kn_cuda_fp8_gemv_multi's choice at this K */
    if ((size_t)NC * ld > (size_t)KN_GEMV_SMEM_MAX)
        return TN_ERR_UNSUPPORTED;
    const unsigned blocks = gemv_mats_blocks(&g, NC);
    const GemvNorm nm = { norm->x, norm->delta, norm->weight, norm->xn, norm->eps, done };
    fp8_gemv_normed_kernel<NC><<<blocks, KN_GEMV_THREADS, (size_t)NC * ld, kn_cuda_stream(be)>>>(g, nm, k, ld,
                                                                                                   sld);
    KN_CUDA_LAUNCH_CHECK(op, "fp8_gemv_normed_kernel");
    return TN_OK;
}

int kn_cuda_fp8_gemv(const kn_backend *be, const char *op, float *out, const float *x,
                     const uint8_t *w, const float *ws, const float *bias, int m, int n, int k)
{
    const kn_cuda_gemv_mat mat = { out, w, ws, bias, n };
    return kn_cuda_fp8_gemv_multi(be, op, &mat, 1, x, m, k);
}

extern "C" void kn_cuda_set_fp8_gemv(const kn_backend *be, int on)
{
    kn_cuda_ctx_of(be)->fp8_gemv = on != 0;
}

extern "C" int kn_cuda_fp8_gemv_on(const kn_backend *be)
{
    return kn_cuda_ctx_of(be)->fp8_gemv;
}
