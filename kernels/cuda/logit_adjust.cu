/* Penalties and logit_bias on the GPU (kernels/logit_adjust.h): the host
 * arrays (checked by the dispatcher) go up in one copy, then one block per
 * row applies kn_logit_adjust_rule, the CPU backend's own rule, to the
 * row's entries (distinct tokens, so no two threads touch one logit). */
#include <stdlib.h>
#include <string.h>
#include "kernels/cuda/cuda_common.cuh"
extern "C" {
#include "kernels/logit_adjust_rule.h"
#include "kernels/cuda/cuda_ops.h"
}

namespace {

__global__ void logit_adjust_kernel(float *logits, int vocab, const kn_logit_adjust *params,
                                    const int32_t *row_start, const kn_logit_entry *entries)
{
    const int r = blockIdx.x;
    const kn_logit_adjust p = params[r];
    float *l = logits + (size_t)r * vocab;
    for (int32_t k = row_start[r] + (int32_t)threadIdx.x; k < row_start[r + 1]; k += blockDim.x) {
        const kn_logit_entry e = entries[k];
        l[e.token] = kn_logit_adjust_rule(l[e.token], p.presence, p.frequency, p.repetition, &e);
    }
}

} // namespace

extern "C" int kn_logit_adjust_cuda(const kn_backend *be, float *logits, int n_rows, int vocab,
                                    const kn_logit_adjust *params, const int32_t *row_start,
                                    const kn_logit_entry *entries)
{
    static const char op[] = "kn_logit_adjust_apply";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK || n_rows == 0 || row_start[n_rows] == 0)
        return rc;
    const size_t pb = (size_t)n_rows * sizeof *params;
    const size_t sb = ((size_t)n_rows + 1) * sizeof *row_start;
    const size_t eb = (size_t)row_start[n_rows] * sizeof *entries;
    /* params, then row_start and entries, each at an 16-byte aligned offset */
    const size_t so = (pb + 15) & ~(size_t)15, eo = (so + sb + 15) & ~(size_t)15;
    char *h = (char *)malloc(eo + eb);
    char *d = (char *)kn_cuda_tmp_alloc(be, op, eo + eb);
    if (!h || !d) {
        free(h);
        kn_cuda_tmp_free(be, d);
        return TN_ERR_NOMEM;
    }
    memcpy(h, params, pb);
    memcpy(h + so, row_start, sb);
    memcpy(h + eo, entries, eb);
    cudaStream_t s = kn_cuda_stream(be);
    cudaError_t err = cudaMemcpyAsync(d, h, eo + eb, cudaMemcpyHostToDevice, s);
    if (err == cudaSuccess) {
        logit_adjust_kernel<<<n_rows, 128, 0, s>>>(logits, vocab, (const kn_logit_adjust *)d,
                                                   (const int32_t *)(d + so),
                                                   (const kn_logit_entry *)(d + eo));
        err = cudaGetLastError();
    }
    /* the staging buffer is pageable host memory read by the async copy:
     * wait before freeing it */
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(s);
    free(h);
    kn_cuda_tmp_free(be, d);
    if (err != cudaSuccess)
        return kn_cuda_device_error(op, "logit adjustment", err);
    return TN_OK;
}
