/* The bf16 tensor-core prefill attention (attention_mma.cu), called by
 * kn_attention_cuda when the backend's attention precision is bf16.
 * Internal to kernels/cuda/. */
#ifndef TANDEM_KERNELS_CUDA_ATTENTION_MMA_CUH
#define TANDEM_KERNELS_CUDA_ATTENTION_MMA_CUH
#include "kernels/cuda/cuda_common.cuh"

/* Whether the bf16 kernel takes this call: head_dim 64 or 128, more than 16
 * query vectors (rows x GQA group) in the longest sequence (decode-sized
 * batches stay on the fp32 split-KV kernels), 16-byte aligned buffers. */
bool kn_cuda_attention_mma_fits(const struct kn_seq_batch *b, int n_heads, int n_kv_heads, int head_dim,
                                const float *out, const float *q, const struct kn_kv_pools *pools);

/* kn_attention's contract with bf16 operands (Q, K, V, P rounded to bf16;
 * fp32 softmax state and accumulation). Arguments already checked. */
int kn_cuda_attention_mma(const kn_backend *be, const char *op, float *out, const float *q,
                          const struct kn_kv_pools *pools, const struct kn_seq_batch *b,
                          int n_heads, int n_kv_heads, int head_dim, int page_size, float scale,
                          const float *sinks, int window);
#endif
