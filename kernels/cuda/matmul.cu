/* Linear layer on the GPU through cuBLAS, fp32 in and out.
 *
 * Precision: exact fp32 (CUBLAS_COMPUTE_32F, CUDA cores) by default; with
 * TANDEM_CUDA_TF32=1 at backend init, CUBLAS_COMPUTE_32F_FAST_TF32 (tensor
 * cores, inputs rounded to 10-bit mantissas, relative error ~3e-4).
 *
 * cuBLAS is column-major: row-major out[m][n] is the column-major n x m
 * matrix out^T = w x^T, where w read column-major is k x n (ld k), so A = w
 * transposed, and x read column-major is k x m (ld k), so B = x as is. The bias is broadcast into out first and the
 * product accumulates onto it (beta = 1): one extra pass over out, small
 * next to the product whenever k is more than a few dozen. */
#include "kernels/cuda/cuda_common.cuh"
extern "C" {
#include "kernels/matmul.h"
}

__global__ void bias_broadcast_kernel(float *out, const float *bias, int m, int n)
{
    size_t total = (size_t)m * n;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = bias[i % n];
}

int kn_cuda_linear(const kn_backend *be, const char *op, float *out, const float *x,
                   const float *w, const float *bias, int m, int n, int k)
{
    if (m == 0)
        return KN_OK;
    kn_cuda_ctx *ctx = kn_cuda_ctx_of(be);
    float beta = 0.0f;
    if (bias) {
        size_t total = (size_t)m * n;
        int blocks = (int)((total + 255) / 256);
        if (blocks > ctx->sm_count * 16)
            blocks = ctx->sm_count * 16;
        bias_broadcast_kernel<<<blocks, 256, 0, kn_cuda_stream(be)>>>(out, bias, m, n);
        KN_CUDA_LAUNCH_CHECK(op, "bias_broadcast_kernel");
        beta = 1.0f;
    }
    const float alpha = 1.0f;
    cublasComputeType_t compute =
        ctx->allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasStatus_t st = cublasGemmEx(ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha,
                                     w, CUDA_R_32F, k, x, CUDA_R_32F, k, &beta,
                                     out, CUDA_R_32F, n, compute, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS)
        return kn_cuda_blas_error(op, "cublasGemmEx", st);
    return KN_OK;
}

extern "C" int kn_matmul_cuda(const kn_backend *be, float *out, const float *x,
                              const float *w, const float *bias, int m, int n, int k)
{
    static const char op[] = "kn_matmul";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != KN_OK)
        return rc;
    if (!out || !x || !w)
        return kn_arg_error(op, "NULL %s", !out ? "out" : !x ? "x" : "w");
    if (m < 0 || n <= 0 || k <= 0)
        return kn_arg_error(op, "bad sizes m=%d n=%d k=%d", m, n, k);
    size_t out_bytes = (size_t)m * n * sizeof(float);
    if (kn_ranges_overlap(out, out_bytes, x, (size_t)m * k * sizeof(float)) ||
        kn_ranges_overlap(out, out_bytes, w, (size_t)n * k * sizeof(float)))
        return kn_arg_error(op, "out overlaps an input");
    return kn_cuda_linear(be, op, out, x, w, bias, m, n, k);
}
