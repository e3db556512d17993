/* A backend is where ops run and where their buffers live. Every op takes a
 * backend first and only pointers to that backend's memory: host memory for
 * KN_BACKEND_CPU, device memory for KN_BACKEND_CUDA. Host-side scalars and the
 * fields of descriptor structs marked "host" stay on the host for both.
 *
 * The CPU backend is always built. The CUDA backend exists when the build
 * found nvcc (TANDEM_CUDA defined); otherwise kn_backend_init_cuda returns
 * TN_ERR_UNSUPPORTED, so a CPU-only binary never needs a GPU at run time. */
#ifndef TANDEM_KERNELS_BACKEND_H
#define TANDEM_KERNELS_BACKEND_H

#include <stddef.h>

typedef enum { KN_BACKEND_CPU = 0, KN_BACKEND_CUDA = 1 } kn_backend_kind;

typedef struct kn_backend {
    kn_backend_kind kind;
    int device;      /* CUDA device ordinal; unused on CPU */
    void *stream;    /* cudaStream_t on CUDA */
    void *blas;      /* cublasHandle_t / cublasLtHandle_t holder on CUDA */
    void *scratch;   /* backend-owned workspace, grown on demand */
    size_t scratch_bytes;
    /* kn_backend_set_wait_hook; NULL: waits for the device block */
    void (*wait_hook)(void *arg);
    void *wait_arg;
} kn_backend;

int kn_backend_init_cpu(kn_backend *be);
int kn_backend_init_cuda(kn_backend *be, int device);
void kn_backend_free(kn_backend *be);
/* Waits for all work queued on the backend (no-op on CPU). */
int kn_backend_sync(const kn_backend *be);
/* While a wait for the device runs (kn_backend_sync, kn_copy_to_host,
 * kn_copy_to_backend on CUDA), hook(arg) is called over and over instead of
 * blocking in the driver, until the stream's work is done: the host does
 * its other work inside a step (the decoder drives the UCX progress of KV
 * arriving while the GPU decodes). The hook must not queue work on this
 * backend. NULL restores blocking waits. The CPU backend never waits, so
 * it never calls the hook. */
void kn_backend_set_wait_hook(kn_backend *be, void (*hook)(void *arg), void *arg);
/* Waits for queued work and returns memory the backend keeps cached for op
 * temporaries (CUDA's stream-ordered pool) to the device, so a following
 * large kn_malloc can use it. No-op on CPU. */
int kn_backend_trim(const kn_backend *be);

/* Attention precision on CUDA. Off (the default): kn_attention computes in
 * fp32 and matches the CPU backend to fp32 rounding. On: prefill-sized
 * calls (more than 16 rows x GQA group in a sequence, head_dim 64 or 128)
 * run a tensor-core kernel with bf16 Q, K, V and P and fp32 softmax and
 * accumulation (normwise relative error ~3e-3 against float64); decode
 * over bf16 pools (at most 16 rows x GQA group per sequence, head_dim 64
 * or 128) runs the tensor-core decode kernel with bf16 Q and P the same
 * way; other decode calls stay fp32. The CUDA backend starts with it on when the environment has
 * TANDEM_CUDA_ATTN_BF16=1 at init; the engine turns it on with bf16
 * weights unless TANDEM_CUDA_ATTN_BF16=0. The flag lives in the backend's
 * device state (hence the const handle); set it between ops, not while
 * another thread queues work on the backend. On the CPU backend, on = 1
 * returns TN_ERR_UNSUPPORTED (the CPU computes in fp32) and on = 0 is a
 * no-op. */
int kn_backend_set_attn_bf16(const kn_backend *be, int on);
/* 1 when the backend's attention runs in bf16 (see above), else 0. */
int kn_backend_attn_bf16(const kn_backend *be);

/* Buffers on the backend. kn_malloc returns NULL on failure. */
void *kn_malloc(const kn_backend *be, size_t bytes);
void kn_free(const kn_backend *be, void *ptr);
int kn_copy_to_backend(const kn_backend *be, void *dst, const void *host_src, size_t bytes);
int kn_copy_to_host(const kn_backend *be, void *host_dst, const void *src, size_t bytes);
/* Backend buffer to backend buffer (ordered with the backend's other work,
 * no host wait on CUDA); the ranges may not overlap. */
int kn_copy_on_backend(const kn_backend *be, void *dst, const void *src, size_t bytes);

/* Host memory that copies to and from the backend run fastest from:
 * page-locked (pinned, cudaHostAlloc) on CUDA, plain aligned memory on the
 * CPU. For staging buffers that live long (pinning is slow and scarce).
 * kn_host_alloc returns NULL on failure; kn_host_free takes NULL. */
void *kn_host_alloc(const kn_backend *be, size_t bytes);
void kn_host_free(const kn_backend *be, void *ptr);

/* A host -> backend copy queued behind the backend's work without a host
 * wait (CUDA: cudaMemcpyAsync on the backend's stream; the CPU copies at
 * once). host_src must stay unchanged until the queued work reaches the
 * copy (after kn_backend_sync), and should come from kn_host_alloc: from
 * pageable memory CUDA stages the copy, which may wait for the host. */
int kn_copy_to_backend_async(const kn_backend *be, void *dst, const void *host_src, size_t bytes);

/* CUDA graphs: kn_graph_begin starts recording the backend's stream (ops
 * called until kn_graph_end are recorded, not run); kn_graph_end stops it
 * and makes an executable graph, or returns an error (the stream is usable
 * again either way) when an op in between needed the host (a wait, a
 * synchronous copy, an allocation outside the stream's pool);
 * kn_graph_launch queues one replay of the recorded work with the same
 * arguments (pointers are baked in: the buffers must still exist, their
 * contents are read at replay). The CPU backend has no graphs:
 * TN_ERR_UNSUPPORTED. kn_graph_free takes NULL. */
typedef struct kn_graph kn_graph;
int kn_graph_begin(const kn_backend *be);
int kn_graph_end(const kn_backend *be, kn_graph **out);
int kn_graph_launch(const kn_backend *be, kn_graph *g);
void kn_graph_free(kn_graph *g);

#endif
