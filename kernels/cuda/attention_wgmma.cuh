/* The Hopper (sm_90a) prefill sink attention (attention_wgmma.cu), called
 * by kn_attention_cuda when the backend's attention precision is bf16 and
 * the wgmma switch is on (kn_cuda_set_attn_wgmma, TANDEM_CUDA_ATTN_WGMMA=1).
 * Internal to kernels/cuda/. */
#ifndef TANDEM_KERNELS_CUDA_ATTENTION_WGMMA_CUH
#define TANDEM_KERNELS_CUDA_ATTENTION_WGMMA_CUH
#include "kernels/cuda/cuda_common.cuh"

/* Whether the wgmma kernel takes this call: head_dim 64, bf16 pools, more
 * than 16 query vectors (rows x GQA group) in the longest sequence, q and
 * out 8-byte aligned, the pools 16-byte aligned. Other calls keep the
 * earlier kernels. */
bool kn_cuda_attention_wgmma_fits(const struct kn_seq_batch *b, int n_heads, int n_kv_heads,
                                  int head_dim, const float *out, const float *q,
                                  const struct kn_kv_pools *pools);

/* Whether the TMA form takes this page size: 8..128 dividing 128 (a
 * 128-key tile is whole pages, each page a multiple of the 8-row swizzle
 * atom). */
bool kn_cuda_attention_wgmma_tma_fits(int page_size);

/* kn_attention's contract with bf16 operands (Q, K, V, P in bf16; fp32
 * softmax state and accumulation), on the warpgroup tensor cores. mode 1
 * loads K/V with cp.async (every thread, one block barrier per tile);
 * modes 2 and 3 with bulk tensor copies from a producer warp into an
 * mbarrier ring (need kn_cuda_attention_wgmma_tma_fits), mode 3 also
 * overlapping each tile's softmax with the previous tile's P V, mode 4 as
 * 3 with three warpgroups (192 query vectors) per block and Q in shared
 * memory, mode 5 as 3 with mode 2's producer warp and Q in shared memory.
 * Arguments already checked. */
int kn_cuda_attention_wgmma(const kn_backend *be, const char *op, float *out, const float *q,
                            const struct kn_kv_pools *pools, const struct kn_seq_batch *b,
                            int n_heads, int n_kv_heads, int head_dim, int page_size, float scale,
                            const float *sinks, int window, int mode);
#endif
