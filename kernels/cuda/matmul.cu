/* Linear layer on the GPU through cuBLAS: fp32 activations in and out,
 * weights fp32 or bf16.
 *
 * Precision: fp32 weights use exact fp32 (CUBLAS_COMPUTE_32F, CUDA cores)
 * by default; with TANDEM_CUDA_TF32=1 at backend init,
 * CUBLAS_COMPUTE_32F_FAST_TF32 (tensor cores, inputs rounded to 10-bit
 * mantissas, relative error ~3e-4). bf16 weights: x is rounded to bf16 into
 * a temporary (one cheap pass) and the product runs on the bf16 tensor
 * cores with fp32 accumulation and fp32 output (CUBLAS_COMPUTE_32F).
 *
 * cuBLAS is column-major: row-major out[m][n] is the column-major n x m
 * matrix out^T = w x^T, where w read column-major is k x n (ld k), so A = w
 * transposed, and x read column-major is k x m (ld k), so B = x as is. The
 * FP8 weights (kernels/fp8.h) go to cuBLASLt's block-scaled FP8 GEMM
 * (gemm_fp8.cu) after the activations are quantized (quant_fp8.cu).
 *
 * bf16 products go through cuBLASLt with plans cached per shape and row
 * bucket (gemm_bf16_lt.cu; same numerics), unless TANDEM_CUDA_LT_CACHE=0
 * asks for cublasGemmEx, which searches an algorithm per new shape.
 *
 * The bias is broadcast into out first and the product accumulates onto it
 * (beta = 1): one extra pass over out, small next to the product whenever k
 * is more than a few dozen. */
#include <cuda_bf16.h>
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/fp8_cuda.cuh"
#include "kernels/cuda/gemm_fp8_skinny.cuh"
#include "kernels/cuda/gemv_fp8.cuh"
extern "C" {
#include "kernels/matmul.h"
#include "kernels/cuda/cuda_ops.h"
}

__global__ void bias_broadcast_kernel(float *out, const float *bias, int m, int n)
{
    size_t total = (size_t)m * n;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = bias[i % n];
}

__global__ void to_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

static unsigned grid_for(const kn_backend *be, size_t total)
{
    size_t blocks = (total + 255) / 256, cap = (size_t)kn_cuda_ctx_of(be)->sm_count * 16;
    return (unsigned)(blocks < cap ? (blocks ? blocks : 1) : cap);
}

int kn_cuda_to_bf16(const kn_backend *be, const char *op, void *dst, const float *src, size_t n)
{
    if (n == 0)
        return TN_OK;
    to_bf16_kernel<<<grid_for(be, n), 256, 0, kn_cuda_stream(be)>>>((__nv_bfloat16 *)dst, src, n);
    KN_CUDA_LAUNCH_CHECK(op, "to_bf16_kernel");
    return TN_OK;
}

int kn_cuda_gemm(const kn_backend *be, const char *op, float *out, const void *x,
                 const void *w, kn_dtype dt, const float *bias, int m, int n, int k)
{
    return kn_cuda_gemm_on(be, kn_cuda_ctx_of(be)->blas, op, out, x, w, dt, bias, m, n, k);
}

/* The stream and workspace of a cuBLAS handle of this backend (its own or
 * a side stream's), for a cuBLASLt call that must run where that handle's
 * would: concurrent GEMMs must not share a workspace. Every workspace is
 * be->scratch_bytes (backend.cu makes them all the same size). */
static int handle_workspace(const kn_backend *be, cublasHandle_t blas, const char *op,
                            cudaStream_t *stream, void **ws, size_t *ws_bytes)
{
    kn_cuda_ctx *ctx = kn_cuda_ctx_of(be);
    *ws_bytes = be->scratch_bytes;
    if (blas == ctx->blas) {
        *stream = kn_cuda_stream(be);
        *ws = be->scratch;
        return TN_OK;
    }
    for (int i = 0; i < ctx->n_side; i++)
        if (blas == ctx->side_blas[i]) {
            *stream = ctx->side[i];
            *ws = ctx->side_ws[i];
            return TN_OK;
        }
    return kn_arg_error(op, "cuBLAS handle is not one of the backend's");
}

int kn_cuda_gemm_on(const kn_backend *be, cublasHandle_t blas, const char *op, float *out,
                    const void *x, const void *w, kn_dtype dt, const float *bias, int m, int n, int k)
{
    if (m == 0)
        return TN_OK;
    kn_cuda_ctx *ctx = kn_cuda_ctx_of(be);
    float beta = 0.0f;
    if (bias) {
        cudaStream_t s = kn_cuda_stream(be);
        cublasStatus_t gst = cublasGetStream(blas, &s);
        if (gst != CUBLAS_STATUS_SUCCESS)
            return kn_cuda_blas_error(op, "cublasGetStream", gst);
        bias_broadcast_kernel<<<grid_for(be, (size_t)m * n), 256, 0, s>>>(out, bias, m, n);
        KN_CUDA_LAUNCH_CHECK(op, "bias_broadcast_kernel");
        beta = 1.0f;
    }
    if (dt == KN_BF16 && ctx->bf16_lt) {
        void *ws = NULL;
        size_t ws_bytes = 0;
        cudaStream_t s = NULL;
        int rc = handle_workspace(be, blas, op, &s, &ws, &ws_bytes);
        if (rc == TN_OK)
            rc = kn_cuda_gemm_bf16_lt(be, s, ws, ws_bytes, op, out, x, w, beta, m, n, k);
        return rc;
    }
    const float alpha = 1.0f;
    cudaDataType_t type = dt == KN_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasComputeType_t compute = dt == KN_BF16   ? CUBLAS_COMPUTE_32F
                                  : ctx->allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                    : CUBLAS_COMPUTE_32F;
    cublasStatus_t st = cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha,
                                     w, type, k, x, type, k, &beta,
                                     out, CUDA_R_32F, n, compute, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS)
        return kn_cuda_blas_error(op, "cublasGemmEx", st);
    return TN_OK;
}

int kn_cuda_linear(const kn_backend *be, const char *op, float *out, const float *x,
                   const float *w, const float *bias, int m, int n, int k)
{
    return kn_cuda_gemm(be, op, out, x, w, KN_F32, bias, m, n, k);
}

extern "C" int kn_matmul_cuda(const kn_backend *be, float *out, const float *x,
                              const float *w, const float *bias, int m, int n, int k)
{
    static const char op[] = "kn_matmul";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK)
        return rc;
    return kn_cuda_linear(be, op, out, x, w, bias, m, n, k);
}

extern "C" int kn_matmul_w_cuda(const kn_backend *be, float *out, const float *x,
                                const kn_weight *w, const float *bias, int m, int n, int k)
{
    static const char op[] = "kn_matmul_w";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK || m == 0)
        return rc;
    /* decode batches: the skinny tensor-core kernel (gemm_fp8_skinny.cuh),
     * else at few rows the GEMV, which reads x as fp32 (gemv_fp8.cuh);
     * both decline unaligned weights, which then take cuBLASLt */
    if (w->dtype == KN_FP8_E4M3 && w->scale && kn_cuda_fp8_skinny_takes(be, m)) {
        const kn_cuda_gemv_mat mat = { out, (const uint8_t *)w->data, w->scale, bias, n };
        rc = kn_cuda_fp8_skinny_multi(be, op, &mat, 1, x, m, k);
        if (rc != TN_ERR_UNSUPPORTED)
            return rc;
    }
    if (w->dtype == KN_FP8_E4M3 && w->scale && kn_cuda_ctx_of(be)->fp8_gemv &&
        m <= KN_CUDA_FP8_GEMV_ROWS) {
        rc = kn_cuda_fp8_gemv(be, op, out, x, (const uint8_t *)w->data, w->scale, bias, m, n, k);
        if (rc != TN_ERR_UNSUPPORTED)
            return rc;
    }
    if (w->dtype == KN_FP8_E4M3) {
        rc = kn_cuda_fp8_linear(be, op, out, 0, x, (const uint8_t *)w->data, w->scale, bias, m, n, k);
        /* cuBLASLt has no block-scaled algorithm for some shapes (odd n):
         * the skinny kernel, where it is on, computes the same function at
         * any row count */
        if (rc == TN_ERR_UNSUPPORTED && w->scale && kn_cuda_ctx_of(be)->fp8_skinny > 0) {
            const kn_cuda_gemv_mat mat = { out, (const uint8_t *)w->data, w->scale, bias, n };
            rc = kn_cuda_fp8_skinny_multi(be, op, &mat, 1, x, m, k);
        }
        return rc;
    }
    if (w->dtype == KN_F32)
        return kn_cuda_linear(be, op, out, x, (const float *)w->data, bias, m, n, k);
    size_t nx = (size_t)m * k;
    void *xb = kn_cuda_tmp_alloc(be, op, nx * sizeof(__nv_bfloat16));
    if (!xb)
        return TN_ERR_NOMEM;
    rc = kn_cuda_to_bf16(be, op, xb, x, nx);
    if (rc == TN_OK)
        rc = kn_cuda_gemm(be, op, out, xb, w->data, KN_BF16, bias, m, n, k);
    kn_cuda_tmp_free(be, xb);
    return rc;
}

extern "C" int kn_matmul_w_multi_cuda(const kn_backend *be, const kn_linear *lin, int n_lin, const float *x,
                                      int m, int k)
{
    static const char op[] = "kn_matmul_w_multi";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK || m == 0)
        return rc;
    /* all FP8 at skinny or GEMV rows: one product launch (kn_matmul_w_cuda's
     * rule for each; n_lin <= KN_LINEAR_MAX = KN_CUDA_GEMV_MATS, checked by
     * the dispatcher) */
    const bool skinny = kn_cuda_fp8_skinny_takes(be, m);
    bool one = skinny || (kn_cuda_ctx_of(be)->fp8_gemv && m <= KN_CUDA_FP8_GEMV_ROWS);
    kn_cuda_gemv_mat mats[KN_CUDA_GEMV_MATS];
    for (int i = 0; one && i < n_lin; i++) {
        one = lin[i].w->dtype == KN_FP8_E4M3 && lin[i].w->scale;
        mats[i] = (kn_cuda_gemv_mat){ lin[i].out, (const uint8_t *)lin[i].w->data, lin[i].w->scale, lin[i].bias,
                                      lin[i].n };
    }
    if (one) {
        rc = skinny ? kn_cuda_fp8_skinny_multi(be, op, mats, n_lin, x, m, k)
                    : kn_cuda_fp8_gemv_multi(be, op, mats, n_lin, x, m, k);
        if (rc != TN_ERR_UNSUPPORTED)
            return rc;
    }
    /* all FP8 past those rows: x quantized once for every layer, then
     * cuBLASLt per layer (at batch 128 that is one quantization and its two
     * memsets instead of three for q, k and v); a shape cuBLASLt refuses
     * (odd n) sends every layer the one-by-one way below */
    bool fp8 = n_lin > 1;
    for (int i = 0; fp8 && i < n_lin; i++)
        fp8 = lin[i].w->dtype == KN_FP8_E4M3 && lin[i].w->scale;
    if (fp8) {
        uint8_t *xq = NULL;
        float *xs = NULL;
        rc = kn_cuda_fp8_quantize_rows(be, op, x, m, k, &xq, &xs);
        for (int i = 0; rc == TN_OK && i < n_lin; i++)
            rc = kn_cuda_fp8_linear_quantized(be, op, lin[i].out, 0, xq, xs, (const uint8_t *)lin[i].w->data,
                                              lin[i].w->scale, lin[i].bias, m, lin[i].n, k);
        kn_cuda_tmp_free(be, xq);
        kn_cuda_tmp_free(be, xs);
        if (rc != TN_ERR_UNSUPPORTED)
            return rc;
    }
    for (int i = 0; i < n_lin; i++)
        if ((rc = kn_matmul_w_cuda(be, lin[i].out, x, lin[i].w, lin[i].bias, m, lin[i].n, k)) != TN_OK)
            return rc;
    return TN_OK;
}

extern "C" int kn_matmul_w_multi_normed_cuda(const kn_backend *be, const kn_linear *lin, int n_lin,
                                             const kn_norm_in *norm, int m, int k)
{
    static const char op[] = "kn_matmul_w_multi_normed";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK || m == 0)
        return rc;
    /* one row, all FP8: the GEMV normalizes the row itself (one launch) */
    kn_cuda_ctx *ctx = kn_cuda_ctx_of(be);
    bool one = ctx->fp8_gemv && ctx->fused_decode && m == 1;
    kn_cuda_gemv_mat mats[KN_CUDA_GEMV_MATS];
    for (int i = 0; one && i < n_lin; i++) {
        one = lin[i].w->dtype == KN_FP8_E4M3 && lin[i].w->scale;
        mats[i] = (kn_cuda_gemv_mat){ lin[i].out, (const uint8_t *)lin[i].w->data, lin[i].w->scale, lin[i].bias,
                                      lin[i].n };
    }
    if (one) {
        rc = kn_cuda_fp8_gemv_multi_normed(be, op, mats, n_lin, norm, k, ctx->gemv_done);
        if (rc != TN_ERR_UNSUPPORTED)
            return rc;
    }
    rc = norm->delta ? kn_add_rmsnorm_cuda(be, norm->x, norm->xn, norm->delta, norm->weight, m, k, norm->eps)
                     : kn_rmsnorm_cuda(be, norm->xn, norm->x, norm->weight, m, k, norm->eps);
    return rc != TN_OK ? rc : kn_matmul_w_multi_cuda(be, lin, n_lin, norm->xn, m, k);
}
