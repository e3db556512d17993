/* Element-wise add on the GPU (the residual connection). */
#include "kernels/cuda/cuda_common.cuh"
extern "C" {
#include "kernels/elementwise.h"
#include "kernels/cuda/cuda_ops.h"
}

/* In place is fine (each element is read before it is written by the same
 * thread); float4 when all three pointers are 16-byte aligned. */
__global__ void add_kernel(float *out, const float *a, const float *b, size_t n, bool vec4)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i0 = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (vec4) {
        size_t n4 = n / 4;
        for (size_t i = i0; i < n4; i += stride) {
            float4 x = ((const float4 *)a)[i], y = ((const float4 *)b)[i];
            ((float4 *)out)[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
        }
        for (size_t i = n4 * 4 + i0; i < n; i += stride)
            out[i] = a[i] + b[i];
    } else {
        for (size_t i = i0; i < n; i += stride)
            out[i] = a[i] + b[i];
    }
}


extern "C" int kn_add_cuda(const kn_backend *be, float *out, const float *a, const float *b, size_t n)
{
    static const char op[] = "kn_add";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK)
        return rc;
    if (n == 0)
        return TN_OK;
    bool vec4 = kn_cuda_aligned16(out) && kn_cuda_aligned16(a) && kn_cuda_aligned16(b);
    size_t work = vec4 ? n / 4 + 1 : n;
    size_t blocks = (work + 255) / 256;
    size_t max_blocks = (size_t)kn_cuda_ctx_of(be)->sm_count * 8;
    add_kernel<<<(unsigned)(blocks < max_blocks ? blocks : max_blocks), 256, 0, kn_cuda_stream(be)>>>(
        out, a, b, n, vec4);
    KN_CUDA_LAUNCH_CHECK(op, "add_kernel");
    return TN_OK;
}
