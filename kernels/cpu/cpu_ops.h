/* The CPU backend's op implementations (the .c files of kernels/cpu/), called by the
 * op entry points in kernels/dispatch.c after those have checked every
 * argument that reads no buffer (backend, NULL pointers, sizes, dtypes,
 * overlaps). Each takes host memory only; checks that read the data (token
 * ids in range, finite logits, the batch arrays) stay here. Internal to
 * kernels/ (and tests of the CPU backend): not part of the op API. */
#ifndef TANDEM_KERNELS_CPU_CPU_OPS_H
#define TANDEM_KERNELS_CPU_CPU_OPS_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/attention.h"
#include "kernels/dtype.h"
#include "kernels/matmul.h"
#include "kernels/moe.h"
#include "kernels/rope_kv.h"
#include "kernels/logit_adjust.h"
#include "kernels/logit_mask.h"
#include "kernels/logprobs.h"
#include "kernels/sampling.h"

int kn_embedding_cpu(float *out, const float *table, const int32_t *ids,
                     int n_tokens, int vocab, int dim);
int kn_gather_rows_cpu(float *out, const float *table, const int32_t *rows, int n,
                       int n_table_rows, int dim);
int kn_rmsnorm_cpu(float *out, const float *x, const float *weight, int rows,
                   int dim, float eps);
int kn_add_rmsnorm_cpu(float *x, float *xn, const float *delta, const float *weight,
                       int rows, int dim, float eps);
int kn_matmul_cpu(float *out, const float *x, const float *w, const float *bias,
                  int m, int n, int k);
int kn_matmul_w_cpu(float *out, const float *x, const kn_weight *w, const float *bias,
                    int m, int n, int k);
int kn_add_cpu(float *out, const float *a, const float *b, size_t n);
int kn_rope_cpu(float *x, const int32_t *pos, int n_tokens, int n_heads,
                int head_dim, const float *inv_freq, float attn_scale);
int kn_kv_append_cpu(const kn_kv_pools *pools, const float *k, const float *v,
                     const kn_seq_batch *b, int n_kv_heads, int head_dim, int page_size);
int kn_attention_cpu(float *out, const float *q, const kn_kv_pools *pools,
                     const kn_seq_batch *b, int n_heads,
                     int n_kv_heads, int head_dim, int page_size, float scale,
                     const float *sinks, int window);
int kn_moe_route_cpu(int32_t *expert_idx, float *expert_w, const float *logits,
                     int n_tokens, int n_experts, int k, kn_route_mode mode,
                     int renormalize);
int kn_moe_router_cpu(int32_t *expert_idx, float *expert_w, float *logits, const float *x,
                      const float *router_w, const float *router_b, int n_tokens, int dim,
                      int n_experts, int k, kn_route_mode mode, int renormalize);
int kn_rope_kv_append_cpu(float *q, float *k, const float *v, const kn_kv_pools *pools,
                          const kn_seq_batch *b, int n_heads, int n_kv_heads, int head_dim,
                          int page_size, const kn_qk_rope *r);
int kn_moe_experts_cpu(float *out, const float *x, const int32_t *expert_idx,
                       const float *expert_w, int n_tokens, int k,
                       const kn_moe_weights *w);
int kn_ep_pack_cpu(void *send, int32_t *slot, const float *x, const int32_t *expert_idx,
                   const float *expert_w, int n_tokens, int k, int dim, int n_ranks,
                   int experts_per_rank, int cap);
int kn_ep_unpack_cpu(float *x, int32_t *expert_idx, float *expert_w, const void *recv,
                     int n_rows, int k, int dim);
int kn_ep_combine_cpu(float *out, const float *shares, const int32_t *slot, int n_tokens,
                      int dim, int n_ranks, int cap);
int kn_sample_cpu(int32_t *tokens, const float *logits, int n_rows, int vocab,
                  const kn_sampling *params, uint64_t *rng_state);
int kn_logprobs_cpu(const float *logits, int n_rows, int vocab, const int32_t *tokens,
                    float *token_logprob, int top_n, int32_t *top_ids, float *top_logprobs);
int kn_logit_adjust_cpu(float *logits, int n_rows, int vocab, const kn_logit_adjust *params,
                        const int32_t *row_start, const kn_logit_entry *entries);
int kn_logit_mask_cpu(float *logits, int n_rows, int vocab, const uint32_t *mask);
int kn_fill_uniform_cpu(void *x, kn_dtype dt, size_t n, uint64_t seed, size_t first,
                        float lo, float hi);
#endif
