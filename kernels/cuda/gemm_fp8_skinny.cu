/* The dense FP8 product of kn_matmul_w / kn_matmul_w_multi at a few to a
 * hundred rows (decode batches), gemm_fp8_skinny.cuh has the function.
 *
 * Why: at 8-64 rows the cuBLASLt path (quant_fp8 + two memsets + a GEMM
 * padded to 16 rows + a copy of the real rows, gemm_fp8.cu) took 20.9 us
 * for GPT-OSS's q projection at 8 rows (bench_ops, s8run8) where reading
 * its 11.8 MB takes 2.8 us, and a decode step at batch 32 spent 2.6 ms of
 * 12.8 in q/k/v/o (s10run1's profile) against ~0.15 ms of weight reads;
 * the one-row GEMV (gemv_fp8.cu) multiplies in fp32 FMAs per row of x, so
 * past a few rows it is instruction-bound. Here: two launches, x quantized
 * per 1x128 block to e4m3 (moe_grouped_fp8.cu's kernel: the same function
 * as the CPU's and cuBLASLt's, kernels/fp8.h), then one kernel over every
 * matrix's 16-column tiles (q, k and v in one launch):
 *   - a block of SK_WARPS warps owns 16 weight rows (output columns) of one
 *     matrix; the warps split K into contiguous ranges of 128-wide blocks,
 *     each streaming its share of the 16 rows from HBM once per pass
 *     (fp8_rows_mma.cuh: e4m3 mma.sync on the codes, 8 rows of x a tile,
 *     NT tiles a pass);
 *   - warp w > 0 leaves its sums in shared memory, warp 0 adds them in warp
 *     order (deterministic, no atomics), adds the bias and writes the rows.
 * Each 16 bytes of a lane's weights feed 8 NT rows of x through two mmas
 * a tile, where the GEMV spends 16 conversions and 16 FMAs per 16 bytes
 * and row. */
#include "kernels/cuda/fp8_rows_mma.cuh"
#include "kernels/cuda/gemm_fp8_skinny.cuh"
#include "kernels/cuda/moe_grouped_fp8.cuh"
extern "C" {
#include "kernels/cuda/cuda_backend.h"
}

namespace {

constexpr int SK_WARPS = 8; /* warps per block: they split K */
constexpr int SK_COLS = 16; /* output columns per block: the mma's 16 weight rows */

/* The matrices of one launch: matrix i takes blocks [block0[i], block0[i + 1]). */
struct SkinnyMats {
    float *out[KN_CUDA_GEMV_MATS];
    const uint8_t *w[KN_CUDA_GEMV_MATS];
    const float *ws[KN_CUDA_GEMV_MATS], *bias[KN_CUDA_GEMV_MATS];
    int n[KN_CUDA_GEMV_MATS], block0[KN_CUDA_GEMV_MATS + 1];
    int n_mats;
};

/* The block's 16 columns of its matrix for all m rows (fp8_tile_ksplit). */
template <int NT, int U>
__global__ void __launch_bounds__(SK_WARPS * 32, 2)
fp8_skinny_kernel(const SkinnyMats g, const uint8_t *xq, const float *xs, int m, int ld, int nkb, int sld)
{
    __shared__ float red[SK_WARPS - 1][NT * 4][32]; /* warps 1..: [value][lane], conflict-free */
    int i = 0;
#pragma unroll
    for (int j = 1; j < KN_CUDA_GEMV_MATS; j++)
        if (j < g.n_mats && (int)blockIdx.x >= g.block0[j])
            i = j;
    const int c0 = ((int)blockIdx.x - g.block0[i]) * SK_COLS;
    fp8_tile_ksplit<NT, U, SK_WARPS>(red, g.w[i], g.ws[i], g.n[i], c0, ld, sld, nkb, xq, xs, 0, m, g.out[i],
                                     (size_t)g.n[i], g.bias[i]);
}

template <int NT, int U>
cudaError_t launch(cudaStream_t s, const SkinnyMats &g, unsigned blocks, const uint8_t *xq, const float *xs, int m,
                   int ld, int nkb, int sld)
{
    fp8_skinny_kernel<NT, U><<<blocks, SK_WARPS * 32, 0, s>>>(g, xq, xs, m, ld, nkb, sld);
    return cudaGetLastError();
}

} /* namespace */

int kn_cuda_fp8_skinny_takes(const kn_backend *be, int m)
{
    const int from = kn_cuda_ctx_of(be)->fp8_skinny;
    return from > 0 && m >= from && m <= KN_CUDA_FP8_SKINNY_ROWS;
}

int kn_cuda_fp8_skinny_multi(const kn_backend *be, const char *op, const kn_cuda_gemv_mat *mats, int n_mats,
                             const float *x, int m, int k)
{
    if (m < 1 || n_mats < 1 || n_mats > KN_CUDA_GEMV_MATS || k < 1)
        return TN_ERR_UNSUPPORTED;
    SkinnyMats g;
    memset(&g, 0, sizeof g);
    g.n_mats = n_mats;
    g.block0[0] = 0;
    for (int i = 0; i < n_mats; i++) {
        if (mats[i].n < 1 || !kn_cuda_aligned16(mats[i].w) || ((uintptr_t)mats[i].ws & 3))
            return TN_ERR_UNSUPPORTED;
        g.out[i] = mats[i].out;
        g.w[i] = mats[i].w;
        g.ws[i] = mats[i].ws;
        g.bias[i] = mats[i].bias;
        g.n[i] = mats[i].n;
        g.block0[i + 1] = g.block0[i] + (mats[i].n + SK_COLS - 1) / SK_COLS;
    }
    const int ld = (int)kn_fp8_ld((size_t)k), nkb = (int)kn_fp8_blocks((size_t)k);
    const int sld = (int)kn_fp8_scale_ld((size_t)k);
    uint8_t *xq = (uint8_t *)kn_cuda_tmp_alloc(be, op, (size_t)m * ld);
    float *xs = (float *)kn_cuda_tmp_alloc(be, op, (size_t)m * nkb * sizeof(float));
    int rc = TN_OK;
    if (!xq || !xs) {
        rc = TN_ERR_NOMEM;
    } else {
        cudaError_t err = kn_cuda_moe_fp8_quant_x(be, xq, xs, x, m, k);
        const unsigned blocks = (unsigned)g.block0[n_mats];
        cudaStream_t s = kn_cuda_stream(be);
        /* 8 NT rows a pass; U k blocks of weight loads in flight a warp
         * (more where few rows leave the weight stream all that matters) */
        if (err == cudaSuccess) {
            if (m <= 8)
                err = launch<1, 4>(s, g, blocks, xq, xs, m, ld, nkb, sld);
            else if (m <= 16)
                err = launch<2, 2>(s, g, blocks, xq, xs, m, ld, nkb, sld);
            else if (m <= 32)
                err = launch<4, 2>(s, g, blocks, xq, xs, m, ld, nkb, sld);
            else
                err = launch<8, 2>(s, g, blocks, xq, xs, m, ld, nkb, sld);
        }
        if (err != cudaSuccess)
            rc = kn_cuda_device_error(op, "fp8 skinny gemm", err);
    }
    kn_cuda_tmp_free(be, xq);
    kn_cuda_tmp_free(be, xs);
    return rc;
}

extern "C" void kn_cuda_set_fp8_skinny(const kn_backend *be, int from_rows)
{
    kn_cuda_ctx_of(be)->fp8_skinny = from_rows > 0 ? from_rows : 0;
}

extern "C" int kn_cuda_fp8_skinny(const kn_backend *be)
{
    return kn_cuda_ctx_of(be)->fp8_skinny;
}
