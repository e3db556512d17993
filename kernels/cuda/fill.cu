/* Seeded uniform fill on the GPU (kernels/fill.h): the same counter-based
 * SplitMix64 expression as kernels/cpu/fill.c, with the product and the sum
 * rounded separately (__fmul_rn/__fadd_rn never fuse), so the bits match
 * the CPU backend's. */
#include <math.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include "kernels/cuda/cuda_common.cuh"
extern "C" {
#include "kernels/fill.h"
#include "kernels/cuda/cuda_ops.h"
}

__device__ __forceinline__ float fill_value(uint64_t seed, size_t i, float lo, float range)
{
    uint64_t z = seed + (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    float u = __fmul_rn((float)(uint32_t)(z >> 40), 0x1.0p-24f);
    return __fadd_rn(lo, __fmul_rn(range, u));
}

__global__ void fill_f32_kernel(float *x, size_t n, uint64_t seed, size_t first, float lo,
                                float range)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = fill_value(seed, first + i, lo, range);
}

__global__ void fill_bf16_kernel(__nv_bfloat16 *x, size_t n, uint64_t seed, size_t first,
                                 float lo, float range)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = __float2bfloat16_rn(fill_value(seed, first + i, lo, range));
}

__global__ void fill_fp8_kernel(uint8_t *x, size_t n, uint64_t seed, size_t first, float lo,
                                float range)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = (uint8_t)__nv_cvt_float_to_fp8(fill_value(seed, first + i, lo, range),
                                              __NV_SATFINITE, __NV_E4M3);
}

extern "C" int kn_fill_uniform_cuda(const kn_backend *be, void *x, kn_dtype dt, size_t n,
                                    uint64_t seed, size_t first, float lo, float hi)
{
    static const char op[] = "kn_fill_uniform";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK)
        return rc;
    if (n == 0)
        return TN_OK;
    /* hi - lo rounded once on the host, as the CPU's (hi - lo) is. */
    volatile float range = hi - lo;
    size_t blocks = (n + 255) / 256, cap = (size_t)kn_cuda_ctx_of(be)->sm_count * 32;
    unsigned grid = (unsigned)(blocks < cap ? blocks : cap);
    cudaStream_t s = kn_cuda_stream(be);
    if (dt == KN_F32)
        fill_f32_kernel<<<grid, 256, 0, s>>>((float *)x, n, seed, first, lo, range);
    else if (dt == KN_FP8_E4M3)
        fill_fp8_kernel<<<grid, 256, 0, s>>>((uint8_t *)x, n, seed, first, lo, range);
    else
        fill_bf16_kernel<<<grid, 256, 0, s>>>((__nv_bfloat16 *)x, n, seed, first, lo, range);
    KN_CUDA_LAUNCH_CHECK(op, "fill kernel");
    return TN_OK;
}
