/* CUDA graphs of the backend stream's work (kernels/backend.h kn_graph_*):
 * stream capture into a graph, instantiation, replay. Capture runs in
 * thread-local mode, so a call that cannot be captured (a host wait, a
 * synchronous copy, cudaMalloc) fails inside the op that made it and
 * invalidates the capture; kn_cuda_graph_end then reports the capture as
 * failed and leaves the stream usable for eager work. */
#include <stdio.h>
#include <stdlib.h>
#include "kernels/cuda/cuda_common.cuh"
extern "C" {
#include "kernels/cuda/cuda_ops.h"
}

struct kn_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

extern "C" int kn_cuda_graph_begin(const kn_backend *be)
{
    static const char op[] = "kn_graph_begin";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK)
        return rc;
    KN_CUDA_TRY(op, cudaStreamBeginCapture(kn_cuda_stream(be), cudaStreamCaptureModeThreadLocal));
    return TN_OK;
}

extern "C" int kn_cuda_graph_end(const kn_backend *be, kn_graph **out)
{
    static const char op[] = "kn_graph_end";
    *out = NULL;
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK)
        return rc;
    cudaGraph_t graph = NULL;
    cudaError_t err = cudaStreamEndCapture(kn_cuda_stream(be), &graph);
    if (err != cudaSuccess || !graph) {
        /* an op inside made an uncapturable call: its error was reported
         * there; clear the capture's error so eager work can follow */
        (void)cudaGetLastError();
        if (graph)
            cudaGraphDestroy(graph);
        return kn_cuda_device_error(op, "stream capture", err != cudaSuccess ? err : cudaErrorStreamCaptureInvalidated);
    }
    cudaGraphExec_t exec = NULL;
    /* an op that leaves a temporary unfreed must not block the next replay */
    err = cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        cudaGraphDestroy(graph);
        return kn_cuda_device_error(op, "cudaGraphInstantiate", err);
    }
    kn_graph *g = (kn_graph *)calloc(1, sizeof *g);
    if (!g) {
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        return TN_ERR_NOMEM;
    }
    g->graph = graph;
    g->exec = exec;
    *out = g;
    return TN_OK;
}

extern "C" int kn_cuda_graph_launch(const kn_backend *be, kn_graph *g)
{
    static const char op[] = "kn_graph_launch";
    KN_CUDA_TRY(op, cudaGraphLaunch(g->exec, kn_cuda_stream(be)));
    return TN_OK;
}

extern "C" void kn_cuda_graph_free(kn_graph *g)
{
    if (!g)
        return;
    if (g->exec)
        cudaGraphExecDestroy(g->exec);
    if (g->graph)
        cudaGraphDestroy(g->graph);
    free(g);
}

extern "C" int kn_cuda_copy_to_device_async(const kn_backend *be, void *dst, const void *host_src,
                                            size_t bytes)
{
    static const char op[] = "kn_copy_to_backend_async";
    KN_CUDA_TRY(op, cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, kn_cuda_stream(be)));
    return TN_OK;
}
