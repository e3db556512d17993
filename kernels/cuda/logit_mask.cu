/* Token masks on the GPU (kernels/logit_mask.h): the host bitmask goes up
 * in one copy, then a grid over (row, token) clears the masked logits. */
#include <math.h>
#include "kernels/cuda/cuda_common.cuh"
extern "C" {
#include "kernels/cuda/cuda_ops.h"
}

namespace {

__global__ void logit_mask_kernel(float *logits, int vocab, int words, const uint32_t *mask)
{
    const int r = blockIdx.y;
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= vocab)
        return;
    if (!(mask[(size_t)r * words + (t >> 5)] >> (t & 31) & 1u))
        logits[(size_t)r * vocab + t] = -INFINITY;
}

} // namespace

extern "C" int kn_logit_mask_cuda(const kn_backend *be, float *logits, int n_rows, int vocab,
                                  const uint32_t *mask)
{
    static const char op[] = "kn_logit_mask_apply";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK || n_rows == 0)
        return rc;
    const int words = kn_logit_mask_words(vocab);
    const size_t bytes = (size_t)n_rows * words * sizeof *mask;
    uint32_t *d = (uint32_t *)kn_cuda_tmp_alloc(be, op, bytes);
    if (!d)
        return TN_ERR_NOMEM;
    cudaStream_t s = kn_cuda_stream(be);
    cudaError_t err = cudaMemcpyAsync(d, mask, bytes, cudaMemcpyHostToDevice, s);
    if (err == cudaSuccess) {
        dim3 grid((unsigned)((vocab + 255) / 256), (unsigned)n_rows);
        logit_mask_kernel<<<grid, 256, 0, s>>>(logits, vocab, words, d);
        err = cudaGetLastError();
    }
    /* the caller's mask is pageable host memory read by the async copy:
     * wait before returning it */
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(s);
    kn_cuda_tmp_free(be, d);
    if (err != cudaSuccess)
        return kn_cuda_device_error(op, "token mask", err);
    return TN_OK;
}
