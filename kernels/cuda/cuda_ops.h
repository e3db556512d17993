/* The CUDA backend's implementations, C-callable (the .cu files of
 * kernels/cuda/ define them with extern "C"; linked only when the build
 * defines TANDEM_CUDA). Internal to kernels/ (and tests of the CUDA
 * backend): not part of the op API.
 *
 * backend.c and stopwatch.c forward to the lifetime, buffer and event
 * functions after they have checked the arguments (be non-NULL, be->kind ==
 * KN_BACKEND_CUDA, pointers non-NULL when bytes > 0), so these need not
 * check them again. The op entry points in kernels/dispatch.c call the
 * kn_OP_cuda functions after checking every argument that reads no buffer
 * (NULL pointers, sizes, dtypes, overlaps); these check only what is
 * CUDA-specific (an initialised CUDA backend, kernel limits) or needs the
 * device data. */
#ifndef TANDEM_KERNELS_CUDA_CUDA_OPS_H
#define TANDEM_KERNELS_CUDA_CUDA_OPS_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "kernels/attention.h"
#include "kernels/dtype.h"
#include "kernels/matmul.h"
#include "kernels/moe.h"
#include "kernels/rope_kv.h"
#include "kernels/logit_adjust.h"
#include "kernels/logit_mask.h"
#include "kernels/logprobs.h"
#include "kernels/sampling.h"

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
int kn_cuda_copy_on_device(const kn_backend *be, void *dst, const void *src, size_t bytes);
/* Page-locked host memory (cudaHostAlloc); NULL on failure. */
void *kn_cuda_host_alloc(const kn_backend *be, size_t bytes);
void kn_cuda_host_free(const kn_backend *be, void *ptr);
/* cudaMemcpyAsync host -> device on be's stream, no wait. */
int kn_cuda_copy_to_device_async(const kn_backend *be, void *dst, const void *host_src, size_t bytes);
/* Stream capture and graphs (graph.cu; kernels/backend.h kn_graph_*). */
int kn_cuda_graph_begin(const kn_backend *be);
int kn_cuda_graph_end(const kn_backend *be, kn_graph **out);
int kn_cuda_graph_launch(const kn_backend *be, kn_graph *g);
void kn_cuda_graph_free(kn_graph *g);

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

/* The ops (kernels/OP.h states each contract). */
int kn_embedding_cuda(const kn_backend *be, float *out, const float *table,
                      const int32_t *ids, int n_tokens, int vocab, int dim);
int kn_gather_rows_cuda(const kn_backend *be, float *out, const float *table,
                        const int32_t *rows, int n, int n_table_rows, int dim);
int kn_rmsnorm_cuda(const kn_backend *be, float *out, const float *x,
                    const float *weight, int rows, int dim, float eps);
int kn_add_rmsnorm_cuda(const kn_backend *be, float *x, float *xn, const float *delta,
                        const float *weight, int rows, int dim, float eps);
int kn_matmul_cuda(const kn_backend *be, float *out, const float *x,
                   const float *w, const float *bias, int m, int n, int k);
int kn_matmul_w_cuda(const kn_backend *be, float *out, const float *x, const kn_weight *w,
                     const float *bias, int m, int n, int k);
int kn_matmul_w_multi_cuda(const kn_backend *be, const kn_linear *lin, int n_lin, const float *x, int m, int k);
int kn_matmul_w_multi_normed_cuda(const kn_backend *be, const kn_linear *lin, int n_lin,
                                  const kn_norm_in *norm, int m, int k);
int kn_add_cuda(const kn_backend *be, float *out, const float *a, const float *b, size_t n);
int kn_rope_cuda(const kn_backend *be, float *x, const int32_t *pos, int n_tokens,
                 int n_heads, int head_dim, const float *inv_freq, float attn_scale);
int kn_kv_append_cuda(const kn_backend *be, const kn_kv_pools *pools,
                      const float *k, const float *v, const kn_seq_batch *b,
                      int n_kv_heads, int head_dim, int page_size);
int kn_attention_cuda(const kn_backend *be, float *out, const float *q,
                      const kn_kv_pools *pools, const kn_seq_batch *b, int n_heads, int n_kv_heads,
                      int head_dim, int page_size, float scale,
                      const float *sinks, int window);
int kn_moe_route_cuda(const kn_backend *be, int32_t *expert_idx, float *expert_w,
                      const float *logits, int n_tokens, int n_experts, int k,
                      kn_route_mode mode, int renormalize);
int kn_moe_router_cuda(const kn_backend *be, int32_t *expert_idx, float *expert_w,
                       float *logits, const float *x, const float *router_w,
                       const float *router_b, int n_tokens, int dim, int n_experts, int k,
                       kn_route_mode mode, int renormalize);
int kn_rope_kv_append_cuda(const kn_backend *be, float *q, float *k, const float *v,
                           const kn_kv_pools *pools, const kn_seq_batch *b, int n_heads,
                           int n_kv_heads, int head_dim, int page_size, const kn_qk_rope *r);
int kn_moe_experts_cuda(const kn_backend *be, float *out, const float *x,
                        const int32_t *expert_idx, const float *expert_w,
                        int n_tokens, int k, const kn_moe_weights *w);
int kn_ep_pack_cuda(const kn_backend *be, void *send, int32_t *slot, const float *x,
                    const int32_t *expert_idx, const float *expert_w, int n_tokens, int k,
                    int dim, int n_ranks, int experts_per_rank, int cap);
int kn_ep_unpack_cuda(const kn_backend *be, float *x, int32_t *expert_idx, float *expert_w,
                      const void *recv, int n_rows, int k, int dim);
int kn_ep_combine_cuda(const kn_backend *be, float *out, const float *shares,
                       const int32_t *slot, int n_tokens, int dim, int n_ranks, int cap);
int kn_sample_cuda(const kn_backend *be, int32_t *tokens, const float *logits,
                   int n_rows, int vocab, const kn_sampling *params,
                   uint64_t *rng_state);
int kn_logprobs_cuda(const kn_backend *be, const float *logits, int n_rows, int vocab,
                     const int32_t *tokens, float *token_logprob, int top_n, int32_t *top_ids,
                     float *top_logprobs);
int kn_logit_adjust_cuda(const kn_backend *be, float *logits, int n_rows, int vocab,
                         const kn_logit_adjust *params, const int32_t *row_start,
                         const kn_logit_entry *entries);
int kn_logit_mask_cuda(const kn_backend *be, float *logits, int n_rows, int vocab,
                       const uint32_t *mask);
int kn_fill_uniform_cuda(const kn_backend *be, void *x, kn_dtype dt, size_t n, uint64_t seed,
                         size_t first, float lo, float hi);

#ifdef __cplusplus
}
#endif
#endif
