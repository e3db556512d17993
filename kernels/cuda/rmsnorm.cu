/* RMSNorm on the GPU, alone and fused with the residual add before it: one
 * block per row. The sum of squares is taken in double, and the rounding
 * steps are the CPU backend's (mean rounded to float, 1/sqrt in double, then
 * (x * inv_rms) * weight in float without fused multiply-add), so the two
 * backends agree to the last bits but for the order of the double sum.
 * Both ops run the one kernel template below, with the same launch for a
 * given (dim, alignment), so the fused op's norm is bit-identical to
 * kn_rmsnorm's on the summed rows. out may alias x: each element is read
 * before the same thread writes it.
 *
 * The block is sized to the row: with 16-byte aligned rows (dim a multiple
 * of 4) each thread takes a float4, and there are about dim/4 threads (up
 * to 1024), so a decode row of 2880 is one load per thread and one
 * reduction, not the dozen dependent load rounds of a fixed 256-thread
 * block; at batch 1 that single block's latency is the whole op. */
#include <math.h>
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/rms_row.cuh"
extern "C" {
#include "kernels/rmsnorm.h"
#include "kernels/cuda/cuda_ops.h"
}

static const int RMS_MAX_THREADS = 1024;

/* The block's sum of its threads' partial sums (every thread gets it). */
__device__ __forceinline__ double rms_block_sum(double sum)
{
    __shared__ double warp_sums[RMS_MAX_THREADS / 32];
    sum = kn_rms_warp_sum(sum);
    if ((threadIdx.x & 31) == 0)
        warp_sums[threadIdx.x >> 5] = sum;
    __syncthreads();
    sum = 0.0;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++)
        sum += warp_sums[w];
    return sum;
}

/* ADD: x[r,:] += delta[r,:] first (kn_add's float add), written back to x.
 * Without ADD, x and delta are only read (x is const at the API). The sum
 * of squares uses explicit _rn intrinsics so that no fused multiply-add can
 * make the two instantiations round differently. */
template <bool ADD>
__global__ void __launch_bounds__(RMS_MAX_THREADS)
rmsnorm_kernel(float *out, float *x, const float *delta, const float *weight, int dim,
               float eps)
{
    float *xr = x + (size_t)blockIdx.x * dim;
    float *outr = out + (size_t)blockIdx.x * dim;
    double sum = 0.0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = xr[i];
        if (ADD) {
            v = __fadd_rn(v, delta[(size_t)blockIdx.x * dim + i]);
            xr[i] = v;
        }
        sum = kn_rms_sq(sum, v);
    }
    const float inv_rms = kn_rms_inv(rms_block_sum(sum), dim, eps);
    /* the same thread wrote xr[i] above, so it reads its own sum back */
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        outr[i] = kn_rms_apply(xr[i], inv_rms, weight[i]);
}

/* The same with float4 accesses (dim a multiple of 4, every row 16-byte
 * aligned). The first float4 of each thread stays in registers between the
 * two passes; with dim/4 <= blockDim.x that is all of them. */
template <bool ADD>
__global__ void __launch_bounds__(RMS_MAX_THREADS)
rmsnorm4_kernel(float *out, float *x, const float *delta, const float *weight, int dim,
                float eps)
{
    const int n4 = dim >> 2;
    float4 *xr = (float4 *)(x + (size_t)blockIdx.x * dim);
    float4 *outr = (float4 *)(out + (size_t)blockIdx.x * dim);
    const float4 *dr = (const float4 *)(delta + (ADD ? (size_t)blockIdx.x * dim : 0));
    const float4 *wr = (const float4 *)weight;
    double sum = 0.0;
    float4 first = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        float4 v = xr[i];
        if (ADD) {
            const float4 d = dr[i];
            v = kn_rms_add4(v, d);
            xr[i] = v;
        }
        if (i == (int)threadIdx.x)
            first = v;
        sum = kn_rms_sq4(sum, v);
    }
    const float inv_rms = kn_rms_inv(rms_block_sum(sum), dim, eps);
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        const float4 v = i == (int)threadIdx.x ? first : xr[i], w = __ldg(wr + i);
        outr[i] = kn_rms_apply4(v, inv_rms, w);
    }
}

/* Threads for `work` items per row: a whole number of warps, at least one,
 * at most RMS_MAX_THREADS. */
static int rms_threads(int work)
{
    int t = (work + 31) / 32 * 32;
    return t < 32 ? 32 : t > RMS_MAX_THREADS ? RMS_MAX_THREADS : t;
}

/* Launches either form for rows of dim; shared by both ops because the
 * launch fixes the order of the sum. */
template <bool ADD>
static int rms_launch(const kn_backend *be, const char *op, float *out, float *x,
                      const float *delta, const float *weight, int rows, int dim, float eps)
{
    const bool vec4 = dim % 4 == 0 && kn_cuda_aligned16(out) && kn_cuda_aligned16(x) &&
                      kn_cuda_aligned16(weight) && (!ADD || kn_cuda_aligned16(delta));
    if (vec4)
        rmsnorm4_kernel<ADD><<<rows, rms_threads(dim / 4), 0, kn_cuda_stream(be)>>>(
            out, x, delta, weight, dim, eps);
    else
        rmsnorm_kernel<ADD><<<rows, rms_threads(dim), 0, kn_cuda_stream(be)>>>(
            out, x, delta, weight, dim, eps);
    KN_CUDA_LAUNCH_CHECK(op, vec4 ? "rmsnorm4_kernel" : "rmsnorm_kernel");
    return TN_OK;
}

extern "C" int kn_rmsnorm_cuda(const kn_backend *be, float *out, const float *x,
                               const float *weight, int rows, int dim, float eps)
{
    static const char op[] = "kn_rmsnorm";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK)
        return rc;
    if (rows == 0)
        return TN_OK;
    /* ADD=false never writes x, so dropping const here is safe */
    return rms_launch<false>(be, op, out, (float *)x, NULL, weight, rows, dim, eps);
}

extern "C" int kn_add_rmsnorm_cuda(const kn_backend *be, float *x, float *xn,
                                   const float *delta, const float *weight, int rows,
                                   int dim, float eps)
{
    static const char op[] = "kn_add_rmsnorm";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK)
        return rc;
    if (rows == 0)
        return TN_OK;
    return rms_launch<true>(be, op, xn, x, delta, weight, rows, dim, eps);
}
