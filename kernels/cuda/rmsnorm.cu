/* RMSNorm on the GPU: one block per row. The sum of squares is taken in
 * double, and the rounding steps are the CPU backend's (mean rounded to
 * float, 1/sqrt in double, then (x * inv_rms) * weight in float without
 * fused multiply-add), so the two backends agree to the last bits but for
 * the order of the double sum. out may alias x: each element is read before
 * the same thread writes it. */
#include <math.h>
#include "kernels/cuda/cuda_common.cuh"
extern "C" {
#include "kernels/rmsnorm.h"
}

static const int RMS_THREADS = 256;

__global__ void __launch_bounds__(RMS_THREADS)
rmsnorm_kernel(float *out, const float *x, const float *weight, int dim, float eps)
{
    __shared__ double warp_sums[RMS_THREADS / 32];
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *outr = out + (size_t)blockIdx.x * dim;
    double sum = 0.0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        double v = xr[i];
        sum += v * v;
    }
    for (int off = 16; off > 0; off >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if ((threadIdx.x & 31) == 0)
        warp_sums[threadIdx.x >> 5] = sum;
    __syncthreads();
    sum = 0.0;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++)
        sum += warp_sums[w];
    float mean_sq = (float)(sum / dim);
    float inv_rms = (float)(1.0 / sqrt((double)mean_sq + (double)eps));
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        outr[i] = __fmul_rn(__fmul_rn(xr[i], inv_rms), weight[i]);
}

extern "C" int kn_rmsnorm_cuda(const kn_backend *be, float *out, const float *x,
                               const float *weight, int rows, int dim, float eps)
{
    static const char op[] = "kn_rmsnorm";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != KN_OK)
        return rc;
    if (!out || !x || !weight)
        return kn_arg_error(op, "NULL %s", !out ? "out" : !x ? "x" : "weight");
    if (rows < 0 || dim <= 0)
        return kn_arg_error(op, "bad sizes rows=%d dim=%d", rows, dim);
    if (!(eps >= 0.0f) || isinf(eps))
        return kn_arg_error(op, "eps %g is not a finite non-negative number", (double)eps);
    if (rows == 0)
        return KN_OK;
    int threads = dim >= 1024 ? RMS_THREADS : dim >= 256 ? 128 : 64;
    rmsnorm_kernel<<<rows, threads, 0, kn_cuda_stream(be)>>>(out, x, weight, dim, eps);
    KN_CUDA_LAUNCH_CHECK(op, "rmsnorm_kernel");
    return KN_OK;
}
