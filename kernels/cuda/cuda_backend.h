/* The CUDA backend's side of backend.h, implemented in the .cu files of
 * kernels/cuda/ and linked only when the build defines TANDEM_CUDA.
 * backend.c forwards to these after it has checked the arguments (be
 * non-NULL, be->kind == KN_BACKEND_CUDA, pointers non-NULL when bytes > 0),
 * so they need not check them again.
 *
 * The per-op kn_OP_cuda functions are declared in each op header; the .cu
 * files that define them must give them C linkage (extern "C"). */
#ifndef TANDEM_KERNELS_CUDA_CUDA_BACKEND_H
#define TANDEM_KERNELS_CUDA_CUDA_BACKEND_H
#include <stddef.h>
#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Selects `device`, creates the stream and BLAS handles and fills *be with
 * kind KN_BACKEND_CUDA. Returns TN_OK, TN_ERR_ARG (no such device) or
 * TN_ERR_DEVICE. On failure *be must be left so that kn_cuda_backend_free
 * (and kn_backend_free) on it is safe. */
int kn_cuda_backend_init(kn_backend *be, int device);
/* Releases everything kn_cuda_backend_init created, including be->scratch. */
void kn_cuda_backend_free(kn_backend *be);
/* cudaStreamSynchronize on be->stream: TN_OK or TN_ERR_DEVICE. */
int kn_cuda_backend_sync(const kn_backend *be);
/* Device memory on be->device; NULL on failure. */
void *kn_cuda_malloc(const kn_backend *be, size_t bytes);
void kn_cuda_free(const kn_backend *be, void *ptr);
/* Host <-> device copies, complete when they return: TN_OK or TN_ERR_DEVICE. */
int kn_cuda_copy_to_device(const kn_backend *be, void *dst, const void *host_src, size_t bytes);
int kn_cuda_copy_to_host(const kn_backend *be, void *host_dst, const void *src, size_t bytes);
/* Page-locked host memory (cudaHostAlloc); NULL on failure. */
void *kn_cuda_host_alloc(const kn_backend *be, size_t bytes);
void kn_cuda_host_free(const kn_backend *be, void *ptr);

/* Events for kn_stopwatch: create (timing enabled), record on be's stream,
 * milliseconds between two recorded events (waits for the later one),
 * destroy (NULL is fine). TN_OK or TN_ERR_DEVICE. */
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
/* The MoE expert path (kernels/cuda/moe_experts.cu), for benchmarks and
 * tests: -1 picks by rows per expert (the default; the grouped kernel when
 * n_tokens*k <= TANDEM_CUDA_MOE_GROUPED_ROWS (default
 * KN_CUDA_MOE_GROUPED_ROWS) times the local experts), 0 forces the
 * per-expert cuBLAS GEMMs, 1 the grouped kernel (bf16 and FP8 weights; fp32
 * weights always take cuBLAS). Starts from TANDEM_CUDA_MOE_GROUPED=0/1 at init. */
#define KN_CUDA_MOE_GROUPED_ROWS 32
void kn_cuda_set_moe_grouped(const kn_backend *be, int mode);
int kn_cuda_moe_grouped(const kn_backend *be);
/* The per-expert MoE path's GEMMs spread over n streams (1..4; 1 keeps
 * them on the backend's stream; the default is 4). Starts from
 * TANDEM_CUDA_MOE_STREAMS=n at init (n = 1 turns the side streams off). */
void kn_cuda_set_moe_streams(const kn_backend *be, int n);
/* The per-expert MoE path with FP8 weights: 1 (the default) computes the
 * activation and its e4m3 quantization for the down product in one kernel,
 * 0 in two (an fp32 activation pass between them); both give the same
 * codes, scales and outputs. Starts from TANDEM_CUDA_FP8_FUSED_ACT=0/1 at
 * init. */
void kn_cuda_set_moe_fp8_fused_act(const kn_backend *be, int on);
/* bf16 GEMMs (kn_matmul_w, the per-expert MoE products): 1 (the default)
 * runs them through cuBLASLt with plans cached per (n, k, row
 * bucket, four per octave); 0 through cublasGemmEx, which searches an algorithm for every
 * new (m, n, k) on the host. Starts from TANDEM_CUDA_LT_CACHE=0/1 at init;
 * for benchmarks and tests. */
void kn_cuda_set_lt_cache(const kn_backend *be, int on);
/* cuBLASLt heuristic queries the backend has made so far (FP8 and bf16
 * plans together): flat once the plan cache is warm. */
long long kn_cuda_lt_searches(const kn_backend *be);

#ifdef __cplusplus
}
#endif
#endif
