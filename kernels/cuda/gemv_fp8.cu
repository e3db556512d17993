/* The dense FP8 GEMV of kn_matmul_w for 1..KN_CUDA_FP8_GEMV_MAX_ROWS rows
 * (gemv_fp8.cuh has the function, its error bound and the design).
 *
 * Each warp owns NC consecutive output columns (weight rows) and all the
 * m rows of x: NC = 2 for up to 2 rows, 4 for more (more rows of x share
 * each x load, which keeps the L1 traffic of x below the weight stream's).
 * Blocks of 4 warps, so q/k/v/o of GPT-OSS (n = 512..5760) give 64..720
 * blocks: every SM busy for n >= 2880 at one row. Rows of x are a template
 * (1, 2, 4, 8) with the real count warp-uniform below it. The replacement
 * for: quant_fp8 kernel + two memsets + cuBLASLt GEMM padded to 16 rows +
 * a copy of the real rows (gemm_fp8.cu), five launches, one here. */
#include "kernels/cuda/gemv_fp8.cuh"
extern "C" {
#include "kernels/cuda/cuda_backend.h"
}

constexpr int GEMV_WARPS = 4;

template <int NC, int R, bool VEC>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
fp8_gemv_kernel(float *out, const float *x, const uint8_t *w, const float *ws, const float *bias,
                int m, int n, int k, int ld, int sld)
{
    const int lane = threadIdx.x & 31;
    const int n0 = (blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5)) * NC;
    if (n0 >= n) /* warp-uniform */
        return;
    const uint8_t *wr[NC];
    const float *sr[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) {
        const int col = min(n0 + c, n - 1); /* past n: computed, not stored */
        wr[c] = w + (size_t)col * ld;
        sr[c] = ws + (size_t)(col / KN_FP8_BLOCK) * sld;
    }
    float acc[NC][R];
#pragma unroll
    for (int c = 0; c < NC; c++)
#pragma unroll
        for (int r = 0; r < R; r++)
            acc[c][r] = 0.f;
    kn_gemv_rows<NC, R, VEC>(acc, wr, sr, x, (size_t)k, m, k, lane);
#pragma unroll
    for (int c = 0; c < NC; c++) {
        const float b = bias && n0 + c < n ? bias[n0 + c] : 0.f;
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float v = kn_gemv_warp_sum(acc[c][r]);
            if (r < m && n0 + c < n && lane == c * R + r) /* spread the stores over lanes */
                out[(size_t)r * n + n0 + c] = v + b;
        }
    }
}

template <int NC, int R>
static void launch(cudaStream_t s, unsigned blocks, bool vec, float *out, const float *x, const uint8_t *w,
                   const float *ws, const float *bias, int m, int n, int k, int ld, int sld)
{
    if (vec)
        fp8_gemv_kernel<NC, R, true><<<blocks, GEMV_WARPS * 32, 0, s>>>(out, x, w, ws, bias, m, n, k, ld, sld);
    else
        fp8_gemv_kernel<NC, R, false><<<blocks, GEMV_WARPS * 32, 0, s>>>(out, x, w, ws, bias, m, n, k, ld, sld);
}

int kn_cuda_fp8_gemv(const kn_backend *be, const char *op, float *out, const float *x,
                     const uint8_t *w, const float *ws, const float *bias, int m, int n, int k)
{
    if (m < 1 || m > KN_CUDA_FP8_GEMV_MAX_ROWS)
        return kn_arg_error(op, "fp8 gemv takes 1..%d rows, got %d", KN_CUDA_FP8_GEMV_MAX_ROWS, m);
    if (n < 1 || k < 1 || ((uintptr_t)w & 15) || ((uintptr_t)ws & 3) || ((uintptr_t)x & 3))
        return TN_ERR_UNSUPPORTED;
    const bool vec = k % 16 == 0 && ((uintptr_t)x & 15) == 0;
    const int ld = (int)kn_fp8_ld((size_t)k), sld = (int)kn_fp8_scale_ld((size_t)k);
    const int nc = m <= 2 ? 2 : 4;
    const unsigned warps = (unsigned)((n + nc - 1) / nc);
    const unsigned blocks = (warps + GEMV_WARPS - 1) / GEMV_WARPS;
    cudaStream_t s = kn_cuda_stream(be);
    if (m == 1)
        launch<2, 1>(s, blocks, vec, out, x, w, ws, bias, m, n, k, ld, sld);
    else if (m == 2)
        launch<2, 2>(s, blocks, vec, out, x, w, ws, bias, m, n, k, ld, sld);
    else if (m <= 4)
        launch<4, 4>(s, blocks, vec, out, x, w, ws, bias, m, n, k, ld, sld);
    else
        launch<4, 8>(s, blocks, vec, out, x, w, ws, bias, m, n, k, ld, sld);
    KN_CUDA_LAUNCH_CHECK(op, "fp8_gemv_kernel");
    return TN_OK;
}

extern "C" void kn_cuda_set_fp8_gemv(const kn_backend *be, int on)
{
    kn_cuda_ctx_of(be)->fp8_gemv = on != 0;
}

extern "C" int kn_cuda_fp8_gemv_on(const kn_backend *be)
{
    return kn_cuda_ctx_of(be)->fp8_gemv;
}
