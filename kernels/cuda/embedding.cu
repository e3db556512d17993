/* Token embedding lookup on the GPU. The ids live in device memory, so
 * the contract "an id outside [0, vocab) gives TN_ERR_ARG and writes
 * nothing" costs one check kernel and a wait for its verdict: the gather
 * kernel itself reads the verdict on the device and writes nothing for a
 * bad batch, and the host waits only to return the status. */
#include <limits.h>
#include "kernels/cuda/cuda_common.cuh"
extern "C" {
#include "kernels/embedding.h"
#include "kernels/cuda/cuda_ops.h"
}

/* first_bad starts at INT_MAX and ends as the lowest bad token index. */
__global__ void embedding_check_kernel(const int32_t *ids, int n_tokens, int vocab, int *first_bad)
{
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < n_tokens; t += gridDim.x * blockDim.x)
        if (ids[t] < 0 || ids[t] >= vocab)
            atomicMin(first_bad, t);
}

/* One block per token row; float4 copies when rows are 16-byte aligned. */
__global__ void embedding_gather_kernel(float *out, const float *table, const int32_t *ids,
                                        int dim, const int *first_bad, bool vec4)
{
    if (*first_bad != INT_MAX)
        return;
    int t = blockIdx.x;
    const float *src = table + (size_t)ids[t] * dim;
    float *dst = out + (size_t)t * dim;
    if (vec4) {
        for (int i = threadIdx.x; i < dim / 4; i += blockDim.x)
            ((float4 *)dst)[i] = ((const float4 *)src)[i];
    } else {
        for (int i = threadIdx.x; i < dim; i += blockDim.x)
            dst[i] = src[i];
    }
}

/* kn_gather_rows: one block per output row; rows outside the table give
 * zeros (the host checked them; this only keeps reads inside). */
__global__ void gather_rows_kernel(float *out, const float *table, const int32_t *rows,
                                   int n_table_rows, int dim, bool vec4)
{
    const int t = blockIdx.x, r = rows[t];
    const bool ok = r >= 0 && r < n_table_rows;
    const float *src = table + (size_t)(ok ? r : 0) * dim;
    float *dst = out + (size_t)t * dim;
    if (vec4) {
        for (int i = threadIdx.x; i < dim / 4; i += blockDim.x)
            ((float4 *)dst)[i] = ok ? ((const float4 *)src)[i] : make_float4(0.f, 0.f, 0.f, 0.f);
    } else {
        for (int i = threadIdx.x; i < dim; i += blockDim.x)
            dst[i] = ok ? src[i] : 0.f;
    }
}

extern "C" int kn_gather_rows_cuda(const kn_backend *be, float *out, const float *table,
                                   const int32_t *rows, int n, int n_table_rows, int dim)
{
    static const char op[] = "kn_gather_rows";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK || n == 0)
        return rc;
    bool vec4 = dim % 4 == 0 && kn_cuda_aligned16(out) && kn_cuda_aligned16(table);
    int threads = (vec4 ? dim / 4 : dim) < 256 ? 64 : 256;
    gather_rows_kernel<<<n, threads, 0, kn_cuda_stream(be)>>>(out, table, rows, n_table_rows, dim, vec4);
    KN_CUDA_LAUNCH_CHECK(op, "gather_rows_kernel");
    return TN_OK;
}

extern "C" int kn_embedding_cuda(const kn_backend *be, float *out, const float *table,
                                 const int32_t *ids, int n_tokens, int vocab, int dim)
{
    static const char op[] = "kn_embedding";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK)
        return rc;
    if (n_tokens == 0)
        return TN_OK;
    cudaStream_t s = kn_cuda_stream(be);
    int *first_bad = (int *)kn_cuda_tmp_alloc(be, op, sizeof(int));
    if (!first_bad)
        return TN_ERR_NOMEM;
    int host_bad = INT_MAX, bad_id = 0;
    rc = TN_OK;
    cudaError_t err = cudaMemcpyAsync(first_bad, &host_bad, sizeof(int), cudaMemcpyHostToDevice, s);
    if (err == cudaSuccess) {
        int blocks = kn_cuda_div_up(n_tokens, 256);
        embedding_check_kernel<<<blocks < 1024 ? blocks : 1024, 256, 0, s>>>(ids, n_tokens, vocab,
                                                                            first_bad);
        err = cudaGetLastError();
    }
    if (err == cudaSuccess) {
        bool vec4 = dim % 4 == 0 && kn_cuda_aligned16(out) && kn_cuda_aligned16(table);
        int threads = (vec4 ? dim / 4 : dim) < 256 ? 64 : 256;
        embedding_gather_kernel<<<n_tokens, threads, 0, s>>>(out, table, ids, dim, first_bad, vec4);
        err = cudaGetLastError();
    }
    if (err == cudaSuccess)
        err = cudaMemcpyAsync(&host_bad, first_bad, sizeof(int), cudaMemcpyDeviceToHost, s);
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(s);
    if (err == cudaSuccess && host_bad != INT_MAX) {
        err = cudaMemcpy(&bad_id, ids + host_bad, sizeof(int), cudaMemcpyDeviceToHost);
        if (err == cudaSuccess)
            rc = kn_arg_error(op, "token %d has id %d outside [0, %d)", host_bad, bad_id, vocab);
    }
    kn_cuda_tmp_free(be, first_bad);
    if (err != cudaSuccess)
        return kn_cuda_device_error(op, "embedding lookup", err);
    return rc;
}
