/* The CUDA backend's side of backend.h, implemented in the .cu files of
 * kernels/cuda/ and linked only when the build defines TANDEM_CUDA.
 * backend.c forwards to these after it has checked the arguments (be
 * non-NULL, be->kind == KN_BACKEND_CUDA, pointers non-NULL when bytes > 0),
 * so they need not check them again.
 *
 * The per-op kn_OP_cuda functions are declared in each op header; the .cu
 * files that define them must give them C linkage (extern "C"). */
#ifndef TANDEM_KERNELS_CUDA_BACKEND_H
#define TANDEM_KERNELS_CUDA_BACKEND_H
#include <stddef.h>
#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Selects `device`, creates the stream and BLAS handles and fills *be with
 * kind KN_BACKEND_CUDA. Returns KN_OK, KN_ERR_ARG (no such device) or
 * KN_ERR_DEVICE. On failure *be must be left so that kn_cuda_backend_free
 * (and kn_backend_free) on it is safe. */
int kn_cuda_backend_init(kn_backend *be, int device);
/* Releases everything kn_cuda_backend_init created, including be->scratch. */
void kn_cuda_backend_free(kn_backend *be);
/* cudaStreamSynchronize on be->stream: KN_OK or KN_ERR_DEVICE. */
int kn_cuda_backend_sync(const kn_backend *be);
/* Device memory on be->device; NULL on failure. */
void *kn_cuda_malloc(const kn_backend *be, size_t bytes);
void kn_cuda_free(const kn_backend *be, void *ptr);
/* Host <-> device copies, complete when they return: KN_OK or KN_ERR_DEVICE. */
int kn_cuda_copy_to_device(const kn_backend *be, void *dst, const void *host_src, size_t bytes);
int kn_cuda_copy_to_host(const kn_backend *be, void *host_dst, const void *src, size_t bytes);
/* Page-locked host memory (cudaHostAlloc); NULL on failure. */
void *kn_cuda_host_alloc(const kn_backend *be, size_t bytes);
void kn_cuda_host_free(const kn_backend *be, void *ptr);

/* Events for kn_stopwatch: create (timing enabled), record on be's stream,
 * milliseconds between two recorded events (waits for the later one),
 * destroy (NULL is fine). KN_OK or KN_ERR_DEVICE. */
int kn_cuda_event_create(const kn_backend *be, void **event);
int kn_cuda_event_record(const kn_backend *be, void *event);
int kn_cuda_event_elapsed_ms(const kn_backend *be, void *start, void *end, float *ms);
void kn_cuda_event_destroy(const kn_backend *be, void *event);
/* Returns the memory the backend's pool of op temporaries holds while idle
 * to the device (after a long prefill, before a big allocation). */
int kn_cuda_trim(const kn_backend *be);
/* The attention precision flag behind the backend (kn_backend_set_attn_bf16). */
void kn_cuda_set_attn_bf16(const kn_backend *be, int on);
int kn_cuda_attn_bf16(const kn_backend *be);

#ifdef __cplusplus
}
#endif
#endif
