/* Internal to the CUDA backend: the RMSNorm arithmetic every kernel that
 * normalizes rows shares (rmsnorm.cu's kernels, and the decode GEMV that
 * normalizes its input itself: gemv_fp8.cu), so
 * they round alike: the sum of squares in double with explicit _rn
 * intrinsics (no fused multiply-add can change a rounding), the mean
 * rounded to float, 1 / sqrt in double, then (x * inv_rms) * weight in
 * float without fused multiply-add. They differ in the order of the
 * double sum (a last-bit difference in inv_rms at most), and the fused
 * GEMV multiplies by the weight first ((x * weight) * inv_rms:
 * the weight loads then join the first round trip). */
#ifndef TANDEM_KERNELS_CUDA_RMS_ROW_CUH
#define TANDEM_KERNELS_CUDA_RMS_ROW_CUH
#include <math.h>

static __device__ __forceinline__ double kn_rms_sq(double sum, float v)
{
    return __dadd_rn(sum, __dmul_rn((double)v, (double)v));
}

static __device__ __forceinline__ double kn_rms_sq4(double sum, float4 v)
{
    return kn_rms_sq(kn_rms_sq(kn_rms_sq(kn_rms_sq(sum, v.x), v.y), v.z), v.w);
}

static __device__ __forceinline__ float kn_rms_inv(double sum, int dim, float eps)
{
    const float mean_sq = (float)(sum / dim);
    return (float)(1.0 / sqrt((double)mean_sq + (double)eps));
}

static __device__ __forceinline__ float kn_rms_apply(float v, float inv_rms, float w)
{
    return __fmul_rn(__fmul_rn(v, inv_rms), w);
}

static __device__ __forceinline__ float4 kn_rms_apply4(float4 v, float inv_rms, float4 w)
{
    return make_float4(kn_rms_apply(v.x, inv_rms, w.x), kn_rms_apply(v.y, inv_rms, w.y),
                       kn_rms_apply(v.z, inv_rms, w.z), kn_rms_apply(v.w, inv_rms, w.w));
}

static __device__ __forceinline__ float4 kn_rms_add4(float4 a, float4 b)
{
    return make_float4(__fadd_rn(a.x, b.x), __fadd_rn(a.y, b.y), __fadd_rn(a.z, b.z), __fadd_rn(a.w, b.w));
}

/* The warp's sum of a double (every lane gets it). */
static __device__ __forceinline__ double kn_rms_warp_sum(double v)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
#endif
