/* The Hopper (sm_90a) prefill sink attention (attention_wgmma.cu), called
 * by kn_attention_cuda when the backend's attention precision is bf16 and
 * the wgmma switch is on (kn_cuda_set_attn_wgmma, TANDEM_CUDA_ATTN_WGMMA=1).
 * Internal to kernels/cuda/. */
#ifndef TANDEM_KERNELS_CUDA_ATTENTION_WGMMA_CUH
#define TANDEM_KERNELS_CUDA_ATTENTION_WGMMA_CUH
#include "kernels/cuda/cuda_common.cuh"

/* Whether the wgmma kernel in mode `mode` takes this call: head_dim 64,
 * or 128 in modes 6-8 with a page size the TMA form takes and q
 * 16-byte aligned; bf16 pools, more than 16 query vectors (rows x GQA
 * group) in the longest sequence, q and out 8-byte aligned, the pools
 * 16-byte aligned. Other calls keep the earlier kernels. */
bool kn_cuda_attention_wgmma_fits(const struct kn_seq_batch *b, int n_heads, int n_kv_heads,
                                  int head_dim, int page_size, int mode, const float *out,
                                  const float *q, const struct kn_kv_pools *pools);

/* Whether the TMA form takes this page size: 8..128 dividing 128 (a
 * 128-key tile is whole pages, each page a multiple of the 8-row swizzle
 * atom). */
bool kn_cuda_attention_wgmma_tma_fits(int page_size);

/* kn_attention's contract with bf16 operands (Q, K, V, P in bf16; fp32
 * softmax state and accumulation), on the warpgroup tensor cores. mode 1
 * loads K/V with cp.async (every thread, one block barrier per tile);
 * modes 2-7 with bulk tensor copies into an mbarrier ring (need
 * kn_cuda_attention_wgmma_tma_fits): 2 from a producer warp, 3 also
 * overlapping each tile's softmax with the previous tile's P V, 4 as 3
 * with three warpgroups (192 query vectors) per block and Q in shared
 * memory, 5 as 3 with mode 2's producer warp and Q in shared memory, 6 as
 * 2 persistent (one block per SM looping over query tiles; P V chunks and
 * S halves no row sees skipped), 7 as 2, 8 as 6 with a sliding window's
 * keys streamed once per block, 9 as 5 with FlashAttention-3's ping-pong
 * between the two warpgroups. Modes 6-8 take head_dim 128 too (Q in
 * shared memory, 3 stages of 64 KB). Arguments already checked. */
int kn_cuda_attention_wgmma(const kn_backend *be, const char *op, float *out, const float *q,
                            const struct kn_kv_pools *pools, const struct kn_seq_batch *b,
                            int n_heads, int n_kv_heads, int head_dim, int page_size, float scale,
                            const float *sinks, int window, int mode);
#endif
