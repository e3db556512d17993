/* The CUDA backend's lifetime, buffers and copies (cuda_backend.h), and the
 * device-error helpers every .cu file of kernels/cuda shares. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/fp8_cuda.cuh"
extern "C" {
#include "kernels/cuda_backend.h"
}

/* cuBLAS gets a fixed workspace of its own so it never allocates inside a
 * captured graph; 32 MiB is what NVIDIA recommends for Hopper. */
static const size_t BLAS_WORKSPACE_BYTES = 32u << 20;

int kn_cuda_device_error(const char *op, const char *what, cudaError_t err)
{
    fprintf(stderr, "tandem: %s: %s failed: %s (%s)\n", op, what,
            cudaGetErrorString(err), cudaGetErrorName(err));
    return err == cudaErrorMemoryAllocation ? KN_ERR_NOMEM : KN_ERR_DEVICE;
}

int kn_cuda_blas_error(const char *op, const char *what, cublasStatus_t st)
{
    fprintf(stderr, "tandem: %s: %s failed: %s\n", op, what, cublasGetStatusString(st));
    return st == CUBLAS_STATUS_ALLOC_FAILED ? KN_ERR_NOMEM : KN_ERR_DEVICE;
}

int kn_cuda_check_backend(const char *op, const kn_backend *be)
{
    if (!be)
        return kn_arg_error(op, "backend is NULL");
    if (be->kind != KN_BACKEND_CUDA || !be->blas || !be->stream)
        return kn_arg_error(op, "backend is not an initialised CUDA backend");
    return KN_OK;
}

void *kn_cuda_tmp_alloc(const kn_backend *be, const char *op, size_t bytes)
{
    void *p = NULL;
    cudaError_t err = cudaMallocFromPoolAsync(&p, bytes ? bytes : 16, kn_cuda_ctx_of(be)->pool,
                                              kn_cuda_stream(be));
    if (err != cudaSuccess) {
        kn_cuda_device_error(op, "temporary allocation", err);
        return NULL;
    }
    return p;
}

void kn_cuda_tmp_free(const kn_backend *be, void *ptr)
{
    if (ptr)
        cudaFreeAsync(ptr, kn_cuda_stream(be));
}

/* Releases whatever init created so far; safe on a half-built ctx. */
static void ctx_destroy(kn_cuda_ctx *ctx)
{
    if (!ctx)
        return;
    if (ctx->stream)
        cudaStreamSynchronize(ctx->stream);
    kn_cuda_fp8_free(ctx->fp8);
    if (ctx->blas)
        cublasDestroy(ctx->blas);
    if (ctx->pool)
        cudaMemPoolDestroy(ctx->pool);
    if (ctx->stream)
        cudaStreamDestroy(ctx->stream);
    free(ctx);
}

extern "C" int kn_cuda_backend_init(kn_backend *be, int device)
{
    static const char op[] = "kn_backend_init_cuda";
    memset(be, 0, sizeof *be);
    int n_devices = 0;
    cudaError_t err = cudaGetDeviceCount(&n_devices);
    if (err != cudaSuccess)
        return kn_cuda_device_error(op, "cudaGetDeviceCount", err);
    if (device < 0 || device >= n_devices)
        return kn_arg_error(op, "device %d does not exist (%d CUDA devices)", device, n_devices);
    KN_CUDA_TRY(op, cudaSetDevice(device));

    kn_cuda_ctx *ctx = (kn_cuda_ctx *)calloc(1, sizeof *ctx);
    if (!ctx) {
        fprintf(stderr, "tandem: %s: out of host memory\n", op);
        return KN_ERR_NOMEM;
    }
    int rc = KN_OK;
    cublasStatus_t st;
    cudaMemPoolProps props;
    uint64_t keep_all = UINT64_MAX;
    const char *tf32 = getenv("TANDEM_CUDA_TF32");
    ctx->allow_tf32 = tf32 && strcmp(tf32, "1") == 0;
    const char *attn_bf16 = getenv("TANDEM_CUDA_ATTN_BF16");
    ctx->attn_bf16 = attn_bf16 && strcmp(attn_bf16, "1") == 0;

    if ((err = cudaDeviceGetAttribute(&ctx->sm_count, cudaDevAttrMultiProcessorCount, device)) ||
        (err = cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking))) {
        rc = kn_cuda_device_error(op, "stream creation", err);
        goto fail;
    }
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    if ((err = cudaMemPoolCreate(&ctx->pool, &props))) {
        rc = kn_cuda_device_error(op, "cudaMemPoolCreate", err);
        goto fail;
    }
    /* Keep freed temporaries in the pool: ops allocate the same sizes every
     * layer, and returning memory to the driver each time costs a sync. */
    if ((err = cudaMemPoolSetAttribute(ctx->pool, cudaMemPoolAttrReleaseThreshold, &keep_all))) {
        rc = kn_cuda_device_error(op, "cudaMemPoolSetAttribute", err);
        goto fail;
    }
    if ((st = cublasCreate(&ctx->blas)) != CUBLAS_STATUS_SUCCESS) {
        rc = kn_cuda_blas_error(op, "cublasCreate", st);
        goto fail;
    }
    if ((err = cudaMalloc(&be->scratch, BLAS_WORKSPACE_BYTES))) {
        be->scratch = NULL;
        rc = kn_cuda_device_error(op, "cudaMalloc(cuBLAS workspace)", err);
        goto fail;
    }
    be->scratch_bytes = BLAS_WORKSPACE_BYTES;
    if ((st = cublasSetStream(ctx->blas, ctx->stream)) != CUBLAS_STATUS_SUCCESS ||
        (st = cublasSetWorkspace(ctx->blas, be->scratch, be->scratch_bytes)) != CUBLAS_STATUS_SUCCESS ||
        (st = cublasSetMathMode(ctx->blas, ctx->allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                           : CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS) {
        rc = kn_cuda_blas_error(op, "cuBLAS handle setup", st);
        goto fail;
    }
    be->kind = KN_BACKEND_CUDA;
    be->device = device;
    be->stream = ctx->stream;
    be->blas = ctx;
    return KN_OK;

fail:
    ctx_destroy(ctx); /* the cuBLAS handle goes before its workspace */
    if (be->scratch)
        cudaFree(be->scratch);
    memset(be, 0, sizeof *be);
    return rc;
}

extern "C" void kn_cuda_backend_free(kn_backend *be)
{
    if (!be || be->kind != KN_BACKEND_CUDA)
        return;
    cudaSetDevice(be->device);
    kn_cuda_ctx *ctx = kn_cuda_ctx_of(be);
    if (ctx && ctx->stream)
        cudaStreamSynchronize(ctx->stream);
    ctx_destroy(ctx); /* the cuBLAS handle goes before its workspace */
    if (be->scratch)
        cudaFree(be->scratch);
    memset(be, 0, sizeof *be);
}

extern "C" void kn_cuda_set_attn_bf16(const kn_backend *be, int on)
{
    kn_cuda_ctx_of(be)->attn_bf16 = on != 0;
}

extern "C" int kn_cuda_attn_bf16(const kn_backend *be)
{
    return kn_cuda_ctx_of(be)->attn_bf16;
}

extern "C" int kn_cuda_backend_sync(const kn_backend *be)
{
    KN_CUDA_TRY("kn_backend_sync", cudaStreamSynchronize(kn_cuda_stream(be)));
    return KN_OK;
}

extern "C" void *kn_cuda_malloc(const kn_backend *be, size_t bytes)
{
    void *p = NULL;
    cudaError_t err = cudaSetDevice(be->device);
    if (err == cudaSuccess)
        err = cudaMalloc(&p, bytes ? bytes : 16);
    if (err != cudaSuccess) {
        kn_cuda_device_error("kn_malloc", "cudaMalloc", err);
        return NULL;
    }
    return p;
}

extern "C" void kn_cuda_free(const kn_backend *be, void *ptr)
{
    if (!ptr)
        return;
    /* Buffers may still be in use by queued work: cudaFree waits for the
     * device, but only after our stream's work is known to be done. */
    cudaStreamSynchronize(kn_cuda_stream(be));
    cudaError_t err = cudaFree(ptr);
    if (err != cudaSuccess)
        kn_cuda_device_error("kn_free", "cudaFree", err);
}

extern "C" void *kn_cuda_host_alloc(const kn_backend *be, size_t bytes)
{
    void *p = NULL;
    cudaError_t err = cudaSetDevice(be->device);
    if (err == cudaSuccess)
        err = cudaHostAlloc(&p, bytes ? bytes : 16, cudaHostAllocDefault);
    if (err != cudaSuccess) {
        kn_cuda_device_error("kn_host_alloc", "cudaHostAlloc", err);
        return NULL;
    }
    return p;
}

extern "C" void kn_cuda_host_free(const kn_backend *be, void *ptr)
{
    /* copies queued from or into it must be done first */
    cudaStreamSynchronize(kn_cuda_stream(be));
    cudaError_t err = cudaFreeHost(ptr);
    if (err != cudaSuccess)
        kn_cuda_device_error("kn_host_free", "cudaFreeHost", err);
}

extern "C" int kn_cuda_copy_to_device(const kn_backend *be, void *dst, const void *host_src,
                                      size_t bytes)
{
    static const char op[] = "kn_copy_to_backend";
    cudaStream_t s = kn_cuda_stream(be);
    KN_CUDA_TRY(op, cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, s));
    KN_CUDA_TRY(op, cudaStreamSynchronize(s));
    return KN_OK;
}

extern "C" int kn_cuda_copy_to_host(const kn_backend *be, void *host_dst, const void *src,
                                    size_t bytes)
{
    static const char op[] = "kn_copy_to_host";
    cudaStream_t s = kn_cuda_stream(be);
    KN_CUDA_TRY(op, cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, s));
    KN_CUDA_TRY(op, cudaStreamSynchronize(s));
    return KN_OK;
}
