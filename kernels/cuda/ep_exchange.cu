/* Expert-parallel exchange on the GPU (kernels/ep_exchange.h): packing,
 * unpacking and the weighted combine run on the stream with the routes in
 * device memory, and nothing waits for the host. */
#include "kernels/cuda/cuda_common.cuh"
extern "C" {
#include "kernels/ep_exchange.h"
#include "kernels/cuda/cuda_ops.h"
}

#define EP_PACK_THREADS 1024

/* One block per destination rank p: a block-wide scan over the tokens (in
 * chunks of blockDim) numbers the tokens that go to p; each writes its slot
 * and its routes, then the rows past the last route nowhere. */
__global__ void ep_pack_route_kernel(uint32_t *send, int32_t *slot, const int32_t *eidx,
                                     const float *ew, int n_tokens, int k, int dim,
                                     int per_rank, int n_experts, int cap)
{
    const int p = blockIdx.x;
    const size_t rw = (size_t)dim + 2 * (size_t)k;
    uint32_t *block = send + (size_t)p * cap * rw;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    __shared__ int warp_base[32];
    __shared__ int chunk_total;
    int base = 0;   /* rows taken by earlier chunks; the same in every thread */
    for (int t0 = 0; t0 < n_tokens; t0 += blockDim.x) {
        const int t = t0 + threadIdx.x;
        int hit = 0;
        if (t < n_tokens)
            for (int j = 0; j < k; j++) {
                int e = eidx[(size_t)t * k + j];
                hit |= e >= 0 && e < n_experts && e / per_rank == p;
            }
        const unsigned ballot = __ballot_sync(0xffffffffu, hit);
        if (lane == 0)
            warp_base[warp] = __popc(ballot);
        __syncthreads();
        if (threadIdx.x == 0) {
            int run = 0;
            for (int w = 0; w < n_warps; w++) {
                int c = warp_base[w];
                warp_base[w] = run;
                run += c;
            }
            chunk_total = run;
        }
        __syncthreads();
        if (t < n_tokens) {
            const int row = base + warp_base[warp] + __popc(ballot & ((1u << lane) - 1u));
            slot[(size_t)p * n_tokens + t] = hit ? row : -1;
            if (hit) {
                uint32_t *dst = block + (size_t)row * rw + dim;
                for (int j = 0; j < k; j++) {
                    dst[j] = (uint32_t)eidx[(size_t)t * k + j];
                    dst[k + j] = __float_as_uint(ew[(size_t)t * k + j]);
                }
            }
        }
        base += chunk_total;
        __syncthreads();   /* warp_base and chunk_total are reused */
    }
    for (int row = base + threadIdx.x; row < cap; row += blockDim.x) {
        uint32_t *dst = block + (size_t)row * rw + dim;
        for (int j = 0; j < k; j++) {
            dst[j] = (uint32_t)n_experts;   /* held by no rank */
            dst[k + j] = 0u;        /* 0.0f */
        }
    }
}

/* Block (t, p): token t's activations into its row of p's block. */
__global__ void ep_pack_rows_kernel(uint32_t *send, const int32_t *slot, const float *x,
                                    int n_tokens, int k, int dim, int cap)
{
    const int t = blockIdx.x, p = blockIdx.y;
    const int row = slot[(size_t)p * n_tokens + t];
    if (row < 0)
        return;
    const size_t rw = (size_t)dim + 2 * (size_t)k;
    uint32_t *dst = send + ((size_t)p * cap + row) * rw;
    const float *src = x + (size_t)t * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        dst[i] = __float_as_uint(src[i]);
}

__global__ void ep_unpack_kernel(float *x, int32_t *eidx, float *ew, const uint32_t *recv, int k,
                                 int dim)
{
    const int r = blockIdx.x;
    const size_t rw = (size_t)dim + 2 * (size_t)k;
    const uint32_t *src = recv + (size_t)r * rw;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        x[(size_t)r * dim + i] = __uint_as_float(src[i]);
    for (int j = threadIdx.x; j < k; j += blockDim.x) {
        eidx[(size_t)r * k + j] = (int32_t)src[dim + j];
        ew[(size_t)r * k + j] = __uint_as_float(src[dim + k + j]);
    }
}

/* One block per token; the shares are added in rank order, as on the CPU. */
__global__ void ep_combine_kernel(float *out, const float *shares, const int32_t *slot,
                                  int n_tokens, int dim, int n_ranks, int cap)
{
    const int t = blockIdx.x;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float acc = 0.0f;
        for (int p = 0; p < n_ranks; p++) {
            const int s = slot[(size_t)p * n_tokens + t];
            if (s >= 0)
                acc += shares[((size_t)p * cap + s) * dim + i];
        }
        out[(size_t)t * dim + i] = acc;
    }
}

static int row_threads(int dim)
{
    return dim >= 512 ? 256 : 64;
}

extern "C" int kn_ep_pack_cuda(const kn_backend *be, void *send, int32_t *slot, const float *x,
                               const int32_t *expert_idx, const float *expert_w, int n_tokens,
                               int k, int dim, int n_ranks, int experts_per_rank, int cap)
{
    static const char op[] = "kn_ep_pack";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK)
        return rc;
    if (n_ranks > 65535)
        return kn_arg_error(op, "%d ranks is more than one grid dimension holds", n_ranks);
    if (cap == 0)
        return TN_OK;
    cudaStream_t s = kn_cuda_stream(be);
    ep_pack_route_kernel<<<n_ranks, EP_PACK_THREADS, 0, s>>>(
        (uint32_t *)send, slot, expert_idx, expert_w, n_tokens, k, dim, experts_per_rank,
        n_ranks * experts_per_rank, cap);
    KN_CUDA_LAUNCH_CHECK(op, "ep_pack_route_kernel");
    if (n_tokens > 0) {
        ep_pack_rows_kernel<<<dim3((unsigned)n_tokens, (unsigned)n_ranks), row_threads(dim), 0,
                              s>>>((uint32_t *)send, slot, x, n_tokens, k, dim, cap);
        KN_CUDA_LAUNCH_CHECK(op, "ep_pack_rows_kernel");
    }
    return TN_OK;
}

extern "C" int kn_ep_unpack_cuda(const kn_backend *be, float *x, int32_t *expert_idx,
                                 float *expert_w, const void *recv, int n_rows, int k, int dim)
{
    static const char op[] = "kn_ep_unpack";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK)
        return rc;
    if (n_rows == 0)
        return TN_OK;
    ep_unpack_kernel<<<n_rows, row_threads(dim), 0, kn_cuda_stream(be)>>>(
        x, expert_idx, expert_w, (const uint32_t *)recv, k, dim);
    KN_CUDA_LAUNCH_CHECK(op, "ep_unpack_kernel");
    return TN_OK;
}

extern "C" int kn_ep_combine_cuda(const kn_backend *be, float *out, const float *shares,
                                  const int32_t *slot, int n_tokens, int dim, int n_ranks,
                                  int cap)
{
    static const char op[] = "kn_ep_combine";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK)
        return rc;
    if (n_tokens == 0)
        return TN_OK;
    ep_combine_kernel<<<n_tokens, row_threads(dim), 0, kn_cuda_stream(be)>>>(
        out, shares, slot, n_tokens, dim, n_ranks, cap);
    KN_CUDA_LAUNCH_CHECK(op, "ep_combine_kernel");
    return TN_OK;
}
