/* The bf16 tensor-core decode attention over bf16 or FP8 pools
 * (attention_decode_mma.cu), called by kn_attention_cuda when the backend's
 * attention precision is bf16. Internal to kernels/cuda/. */
#ifndef TANDEM_KERNELS_CUDA_ATTENTION_DECODE_MMA_CUH
#define TANDEM_KERNELS_CUDA_ATTENTION_DECODE_MMA_CUH
#include "kernels/cuda/cuda_common.cuh"

/* Whether the decode kernel takes this call: bf16 or FP8 pools, head_dim 64 or
 * 128, at most 16 query vectors (rows x GQA group) in the longest
 * sequence, 16-byte aligned buffers. */
bool kn_cuda_attention_decode_mma_fits(const struct kn_seq_batch *b, int n_heads, int n_kv_heads,
                                       int head_dim, const float *out, const float *q,
                                       const struct kn_kv_pools *pools);

/* The key splits per (sequence, KV head) the decode kernel launches for a
 * batch of n_seqs sequences whose longest has max_kv_len keys (1 when the
 * batch alone fills the GPU). Depends only on these three numbers, so a
 * launch sized for a length bound stays valid for any shorter sequence. */
int kn_cuda_decode_mma_splits(const kn_backend *be, int n_seqs, int n_kv_heads, int max_kv_len);

/* Merges the key splits' partial states part_o [n_row_heads][n_splits][D]
 * and part_ml [n_row_heads][n_splits][2] (m in the log2 domain, l) into
 * out [n_row_heads][D], D = head_dim <= 256: the combine after this file's
 * decode kernel and attention.cu's split kernel, one launch. */
int kn_cuda_attn_split_combine(const kn_backend *be, const char *op, float *out, const float *part_o,
                               const float *part_ml, size_t n_row_heads, int n_splits, int head_dim);
/* The split kernels' partial states around one launch: *part_o / *part_ml
 * sized for n_splits > 1 (NULL for one split), and after the launch (its
 * status rc) the combine into out when there are splits, then both freed.
 * kn_cuda_attn_split_parts returns TN_ERR_NOMEM with nothing held. */
int kn_cuda_attn_split_parts(const kn_backend *be, const char *op, size_t n_row_heads, int n_splits, int head_dim,
                             float **part_o, float **part_ml);
int kn_cuda_attn_split_finish(const kn_backend *be, const char *op, int rc, float *out, float *part_o,
                              float *part_ml, size_t n_row_heads, int n_splits, int head_dim);

/* kn_attention's contract with Q and P rounded to bf16 (fp32 softmax state
 * and accumulation). Arguments already checked. */
int kn_cuda_attention_decode_mma(const kn_backend *be, const char *op, float *out, const float *q,
                                 const struct kn_kv_pools *pools, const struct kn_seq_batch *b,
                                 int n_heads, int n_kv_heads, int head_dim, int page_size,
                                 float scale, const float *sinks, int window);
/* The same function with TMA copies (attention_decode_tma.cu): bf16
 * pools (tensor-map boxes) or 16-byte aligned FP8 pools (1-D bulk copies
 * of a tile's rows), page_size a multiple of 16, and everything
 * kn_cuda_attention_decode_mma_fits asks. */
bool kn_cuda_attention_decode_tma_fits(const struct kn_seq_batch *b, int n_heads, int n_kv_heads, int head_dim,
                                       int page_size, const float *out, const float *q,
                                       const struct kn_kv_pools *pools);
int kn_cuda_attention_decode_tma(const kn_backend *be, const char *op, float *out, const float *q,
                                 const struct kn_kv_pools *pools, const struct kn_seq_batch *b, int n_heads,
                                 int n_kv_heads, int head_dim, int page_size, float scale, const float *sinks,
                                 int window);
#endif
