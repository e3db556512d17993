/* CUDA events for kn_stopwatch (cuda_ops.h), and the pool trim. */
#include "kernels/cuda/cuda_common.cuh"
extern "C" {
#include "kernels/cuda/cuda_ops.h"
}

extern "C" int kn_cuda_event_create(const kn_backend *be, void **event)
{
    cudaEvent_t e = NULL;
    KN_CUDA_TRY("kn_stopwatch", cudaSetDevice(be->device));
    KN_CUDA_TRY("kn_stopwatch", cudaEventCreate(&e));
    *event = (void *)e;
    return TN_OK;
}

extern "C" int kn_cuda_event_record(const kn_backend *be, void *event)
{
    KN_CUDA_TRY("kn_stopwatch", cudaEventRecord((cudaEvent_t)event, kn_cuda_stream(be)));
    return TN_OK;
}

extern "C" int kn_cuda_event_elapsed_ms(const kn_backend *be, void *start, void *end, float *ms)
{
    (void)be;
    KN_CUDA_TRY("kn_stopwatch", cudaEventSynchronize((cudaEvent_t)end));
    KN_CUDA_TRY("kn_stopwatch", cudaEventElapsedTime(ms, (cudaEvent_t)start, (cudaEvent_t)end));
    return TN_OK;
}

extern "C" void kn_cuda_event_destroy(const kn_backend *be, void *event)
{
    (void)be;
    if (event)
        cudaEventDestroy((cudaEvent_t)event);
}

extern "C" int kn_cuda_trim(const kn_backend *be)
{
    static const char op[] = "kn_backend_trim";
    KN_CUDA_TRY(op, cudaStreamSynchronize(kn_cuda_stream(be)));
    KN_CUDA_TRY(op, cudaMemPoolTrimTo(kn_cuda_ctx_of(be)->pool, 0));
    /* and what recorded decode graphs' temporaries keep cached (graph.cu) */
    KN_CUDA_TRY(op, cudaDeviceGraphMemTrim(be->device));
    return TN_OK;
}
