/* The CUDA backend's lifetime, buffers and copies (cuda_ops.h), and the
 * device-error helpers every .cu file of kernels/cuda shares. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/fp8_cuda.cuh"
#include "kernels/cuda/lt_plan_cache.cuh"
extern "C" {
#include "kernels/cuda/cuda_ops.h"
}

/* cuBLAS gets a fixed workspace of its own so it never allocates inside a
 * captured graph; 32 MiB is what NVIDIA recommends for Hopper. */
static const size_t BLAS_WORKSPACE_BYTES = 32u << 20;

int kn_cuda_device_error(const char *op, const char *what, cudaError_t err)
{
    fprintf(stderr, "tandem: %s: %s failed: %s (%s)\n", op, what,
            cudaGetErrorString(err), cudaGetErrorName(err));
    return err == cudaErrorMemoryAllocation ? TN_ERR_NOMEM : TN_ERR_DEVICE;
}

int kn_cuda_blas_error(const char *op, const char *what, cublasStatus_t st)
{
    fprintf(stderr, "tandem: %s: %s failed: %s\n", op, what, cublasGetStatusString(st));
    return st == CUBLAS_STATUS_ALLOC_FAILED ? TN_ERR_NOMEM : TN_ERR_DEVICE;
}

int kn_cuda_check_backend(const char *op, const kn_backend *be)
{
    if (!be)
        return kn_arg_error(op, "backend is NULL");
    if (be->kind != KN_BACKEND_CUDA || !be->blas || !be->stream)
        return kn_arg_error(op, "backend is not an initialised CUDA backend");
    return TN_OK;
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
    if (kn_cuda_ctx_of(be)->poison_tmp && (err = cudaMemsetAsync(p, 0xff, bytes, kn_cuda_stream(be))) != cudaSuccess) {
        kn_cuda_device_error(op, "temporary poisoning", err);
        cudaFreeAsync(p, kn_cuda_stream(be));
        return NULL;
    }
    return p;
}

void kn_cuda_tmp_free(const kn_backend *be, void *ptr)
{
    if (ptr)
        cudaFreeAsync(ptr, kn_cuda_stream(be));
}

/* One side stream's resources; safe on a half-made set (NULLs skipped). */
static void side_destroy(cudaStream_t stream, cublasHandle_t blas, void *ws, cudaEvent_t done)
{
    if (stream)
        cudaStreamSynchronize(stream);
    if (blas)
        cublasDestroy(blas);
    if (ws)
        cudaFree(ws);
    if (done)
        cudaEventDestroy(done);
    if (stream)
        cudaStreamDestroy(stream);
}

int kn_cuda_side_streams(const kn_backend *be, const char *op, int n)
{
    kn_cuda_ctx *ctx = kn_cuda_ctx_of(be);
    cudaError_t err;
    if (n > KN_CUDA_MAX_SIDE)
        n = KN_CUDA_MAX_SIDE;
    if (n > 0 && !ctx->side_fork &&
        (err = cudaEventCreateWithFlags(&ctx->side_fork, cudaEventDisableTiming)) != cudaSuccess) {
        ctx->side_fork = NULL;
        return kn_cuda_device_error(op, "side stream event", err);
    }
    while (ctx->n_side < n) {
        cudaStream_t stream = NULL;
        cublasHandle_t blas = NULL;
        void *ws = NULL;
        cudaEvent_t done = NULL;
        cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
        if ((err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess ||
            (err = cudaEventCreateWithFlags(&done, cudaEventDisableTiming)) != cudaSuccess ||
            (err = cudaMalloc(&ws, BLAS_WORKSPACE_BYTES)) != cudaSuccess) {
            side_destroy(stream, blas, ws, done);
            return kn_cuda_device_error(op, "side stream setup", err);
        }
        if ((st = cublasCreate(&blas)) != CUBLAS_STATUS_SUCCESS)
            blas = NULL;
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasSetStream(blas, stream);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasSetWorkspace(blas, ws, BLAS_WORKSPACE_BYTES);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasSetMathMode(blas, ctx->allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
        if (st != CUBLAS_STATUS_SUCCESS) {
            side_destroy(stream, blas, ws, done);
            return kn_cuda_blas_error(op, "side stream cuBLAS handle", st);
        }
        ctx->side[ctx->n_side] = stream;
        ctx->side_blas[ctx->n_side] = blas;
        ctx->side_ws[ctx->n_side] = ws;
        ctx->side_done[ctx->n_side] = done;
        ctx->n_side++;
    }
    return TN_OK;
}

/* Releases whatever init created so far; safe on a half-built ctx. */
static void ctx_destroy(kn_cuda_ctx *ctx)
{
    if (!ctx)
        return;
    for (int i = 0; i < ctx->n_side; i++)
        side_destroy(ctx->side[i], ctx->side_blas[i], ctx->side_ws[i], ctx->side_done[i]);
    if (ctx->side_fork)
        cudaEventDestroy(ctx->side_fork);
    if (ctx->stream)
        cudaStreamSynchronize(ctx->stream);
    if (ctx->router_done)
        cudaFree(ctx->router_done);
    kn_cuda_fp8_free(ctx->fp8);
    kn_lt_cache_free(ctx->lt_cache);
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
        return TN_ERR_NOMEM;
    }
    int rc = TN_OK;
    cublasStatus_t st;
    cudaMemPoolProps props;
    uint64_t keep_all = UINT64_MAX;
    const char *tf32 = getenv("TANDEM_CUDA_TF32");
    ctx->allow_tf32 = tf32 && strcmp(tf32, "1") == 0;
    const char *attn_bf16 = getenv("TANDEM_CUDA_ATTN_BF16");
    ctx->attn_bf16 = attn_bf16 && strcmp(attn_bf16, "1") == 0;
    /* wgmma + TMA sink attention by default: mode 2 on the H200 took
     * GPT-OSS-20B FP8 prefill from 156.2 to 122.4 ms at 8192 tokens and
     * 1159 to 658 ms at 32768 (docs/PERF.md, s4run5), and mode 7, the same
     * kernel taking head_dim 128 too, Qwen3-30B-A3B from 522 to 287 ms
     * (s5run3); "0" selects the
     * mma.sync kernels, 1..9 the other wgmma variants. */
    const char *attn_wgmma = getenv("TANDEM_CUDA_ATTN_WGMMA");
    ctx->attn_wgmma = !attn_wgmma ? KN_CUDA_DEFAULT_ATTN_WGMMA
                      : attn_wgmma[0] >= '0' && attn_wgmma[0] <= '0' + KN_CUDA_ATTN_WGMMA_MODES && !attn_wgmma[1]
                          ? attn_wgmma[0] - '0'
                          : KN_CUDA_DEFAULT_ATTN_WGMMA;
    const char *decode_tma = getenv("TANDEM_CUDA_ATTN_DECODE_TMA");
    ctx->attn_decode_tma = !(decode_tma && strcmp(decode_tma, "0") == 0);
    const char *moe_grouped = getenv("TANDEM_CUDA_MOE_GROUPED");
    ctx->moe_grouped = !moe_grouped ? -1 : strcmp(moe_grouped, "1") == 0 ? 1
                                       : strcmp(moe_grouped, "0") == 0 ? 0 : -1;
    const char *moe_staged = getenv("TANDEM_CUDA_MOE_STAGED");
    ctx->moe_staged = !(moe_staged && strcmp(moe_staged, "0") == 0);
    const char *moe_streams = getenv("TANDEM_CUDA_MOE_STREAMS");
    /* 4 by default: measured on the H200 (docs/PERF.md, s2run5), spreading
     * the prefill experts' GEMMs over 4 streams cut GPT-OSS-20B FP8 prefill
     * of 8192 tokens from 152.1 to 146.8 ms and never lost in bench_moe's
     * prefill rows; decode takes the grouped kernels and is unaffected. */
    ctx->moe_streams = moe_streams && atoi(moe_streams) >= 1 ? atoi(moe_streams)
                                                              : KN_CUDA_DEFAULT_MOE_STREAMS;
    if (ctx->moe_streams > KN_CUDA_MAX_SIDE)
        ctx->moe_streams = KN_CUDA_MAX_SIDE;
    const char *fused_act = getenv("TANDEM_CUDA_FP8_FUSED_ACT");
    ctx->moe_fp8_fused_act = !(fused_act && strcmp(fused_act, "0") == 0);
    const char *poison = getenv("TANDEM_CUDA_POISON_TMP");
    ctx->poison_tmp = poison && strcmp(poison, "1") == 0;
    const char *fp8_gemm = getenv("TANDEM_CUDA_MOE_FP8_GEMM");
    ctx->moe_fp8_gemm = fp8_gemm && fp8_gemm[0] >= '0' && fp8_gemm[0] <= '9' && !fp8_gemm[1] ? fp8_gemm[0] - '0'
                                                                                  : KN_CUDA_DEFAULT_MOE_FP8_GEMM;
    const char *lt_cache = getenv("TANDEM_CUDA_LT_CACHE");
    ctx->bf16_lt = !(lt_cache && strcmp(lt_cache, "0") == 0);
    const char *fp8_gemv = getenv("TANDEM_CUDA_FP8_GEMV");
    ctx->fp8_gemv = !(fp8_gemv && strcmp(fp8_gemv, "0") == 0);
    const char *moe_gemv = getenv("TANDEM_CUDA_MOE_GEMV");
    ctx->moe_gemv = !(moe_gemv && strcmp(moe_gemv, "0") == 0);
    const char *skinny = getenv("TANDEM_CUDA_FP8_SKINNY");
    ctx->fp8_skinny = skinny ? (atoi(skinny) > 0 ? atoi(skinny) : 0) : 2;
    const char *moe_rows = getenv("TANDEM_CUDA_MOE_GROUPED_ROWS");
    ctx->moe_grouped_rows = moe_rows && atoi(moe_rows) > 0 ? atoi(moe_rows) : KN_CUDA_MOE_GROUPED_ROWS;
    const char *fused_decode = getenv("TANDEM_CUDA_FUSED_DECODE");
    ctx->fused_decode = !(fused_decode && strcmp(fused_decode, "0") == 0);

    if ((err = cudaDeviceGetAttribute(&ctx->sm_count, cudaDevAttrMultiProcessorCount, device)) ||
        (err = cudaDeviceGetAttribute(&ctx->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device)) ||
        (err = cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking))) {
        rc = kn_cuda_device_error(op, "stream creation", err);
        goto fail;
    }
    /* the arrival counters: the router's tiles, the normed GEMV's, the
     * expert GEMV's down groups */
    if ((err = cudaMalloc(&ctx->router_done, KN_CUDA_DONE_WORDS * sizeof(unsigned))) ||
        (err = cudaMemset(ctx->router_done, 0, KN_CUDA_DONE_WORDS * sizeof(unsigned))) ||
        (err = cudaDeviceSynchronize())) {
        rc = kn_cuda_device_error(op, "router counters", err);
        goto fail;
    }
    ctx->gemv_done = ctx->router_done + KN_CUDA_ROUTER_TILES;
    ctx->moe_down_done = ctx->gemv_done + 1;
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
    return TN_OK;

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

extern "C" void kn_cuda_set_attn_wgmma(const kn_backend *be, int mode)
{
    kn_cuda_ctx_of(be)->attn_wgmma = mode >= 1 && mode <= KN_CUDA_ATTN_WGMMA_MODES ? mode : 0;
}

extern "C" int kn_cuda_attn_wgmma(const kn_backend *be)
{
    return kn_cuda_ctx_of(be)->attn_wgmma;
}

extern "C" long long kn_cuda_attn_wgmma_launches(const kn_backend *be, int mode)
{
    return mode >= 1 && mode <= KN_CUDA_ATTN_WGMMA_MODES ? kn_cuda_ctx_of(be)->attn_wgmma_launches[mode - 1] : 0;
}

extern "C" long long kn_cuda_attn_decode_mma_launches(const kn_backend *be)
{
    return kn_cuda_ctx_of(be)->attn_decode_mma_launches;
}

extern "C" long long kn_cuda_attn_decode_tma_launches(const kn_backend *be)
{
    return kn_cuda_ctx_of(be)->attn_decode_tma_launches;
}

extern "C" void kn_cuda_set_attn_decode_tma(const kn_backend *be, int on)
{
    kn_cuda_ctx_of(be)->attn_decode_tma = on != 0;
}

extern "C" void kn_cuda_set_fused_decode(const kn_backend *be, int on)
{
    kn_cuda_ctx_of(be)->fused_decode = on != 0;
}

extern "C" int kn_cuda_fused_decode(const kn_backend *be)
{
    return kn_cuda_ctx_of(be)->fused_decode;
}

extern "C" void kn_cuda_set_poison_tmp(const kn_backend *be, int on)
{
    kn_cuda_ctx_of(be)->poison_tmp = on != 0;
}

extern "C" void kn_cuda_set_moe_streams(const kn_backend *be, int n)
{
    kn_cuda_ctx_of(be)->moe_streams = n < 1 ? 1 : n > KN_CUDA_MAX_SIDE ? KN_CUDA_MAX_SIDE : n;
}

extern "C" void kn_cuda_set_lt_cache(const kn_backend *be, int on)
{
    kn_cuda_ctx_of(be)->bf16_lt = on != 0;
}

extern "C" long long kn_cuda_lt_searches(const kn_backend *be)
{
    const struct kn_lt_cache *c = kn_cuda_ctx_of(be)->lt_cache;
    return c ? c->searches : 0;
}

extern "C" int kn_cuda_attn_bf16(const kn_backend *be)
{
    return kn_cuda_ctx_of(be)->attn_bf16;
}

/* cudaStreamSynchronize, or with a wait hook a query loop that runs the
 * hook between queries (kn_backend_set_wait_hook). */
static cudaError_t stream_wait(const kn_backend *be, cudaStream_t s)
{
    if (!be->wait_hook)
        return cudaStreamSynchronize(s);
    for (;;) {
        cudaError_t err = cudaStreamQuery(s);
        if (err != cudaErrorNotReady)
            return err;
        be->wait_hook(be->wait_arg);
    }
}

extern "C" int kn_cuda_backend_sync(const kn_backend *be)
{
    KN_CUDA_TRY("kn_backend_sync", stream_wait(be, kn_cuda_stream(be)));
    return TN_OK;
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
    KN_CUDA_TRY(op, stream_wait(be, s));
    return TN_OK;
}

extern "C" int kn_cuda_copy_on_device(const kn_backend *be, void *dst, const void *src,
                                      size_t bytes)
{
    static const char op[] = "kn_copy_on_backend";
    KN_CUDA_TRY(op, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, kn_cuda_stream(be)));
    return TN_OK;
}

extern "C" int kn_cuda_copy_to_host(const kn_backend *be, void *host_dst, const void *src,
                                    size_t bytes)
{
    static const char op[] = "kn_copy_to_host";
    cudaStream_t s = kn_cuda_stream(be);
    KN_CUDA_TRY(op, cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, s));
    KN_CUDA_TRY(op, stream_wait(be, s));
    return TN_OK;
}
