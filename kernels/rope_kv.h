/* The attention block's step between the q/k/v projections and attention,
 * as one op: Qwen3's per-head q/k RMSNorm (when given), RoPE on q and k,
 * and the append of k and v to the paged KV cache. At decode these are
 * small launches whose own latency dominates (docs/PERF.md); the CUDA
 * backend runs decode-sized calls as one kernel (kn_cuda_set_fused_decode).
 *
 * The result is that of the separate ops in this order:
 *   kn_rmsnorm(q, q, q_norm, n_rows * n_heads, head_dim, eps)     if q_norm
 *   kn_rmsnorm(k, k, k_norm, n_rows * n_kv_heads, head_dim, eps)  if k_norm
 *   kn_rope(q, pos, ...); kn_rope(k, pos, ...)
 *   kn_kv_append(pools, k, v, b, n_kv_heads, head_dim, page_size)
 * so q and k are left normed and rotated in place (attention reads q).
 * On the CPU it is exactly those ops; on CUDA the fused kernel has the
 * same arithmetic but for the order of each norm's double sum. */
#ifndef TANDEM_KERNELS_ROPE_KV_H
#define TANDEM_KERNELS_ROPE_KV_H
#include <stdint.h>
#include "kernels/attention.h"
#include "kernels/backend.h"

typedef struct kn_qk_rope {
    const float *q_norm, *k_norm; /* backend [head_dim] each, or both NULL (no q/k norm) */
    float eps;                    /* their RMSNorm epsilon */
    const int32_t *pos;           /* backend [n_rows]: each row's position (kn_rope) */
    const float *inv_freq;        /* backend [head_dim / 2] (kn_rope_inv_freq) */
    float attn_scale;
} kn_qk_rope;

/* q [n_rows][n_heads][head_dim], k and v [n_rows][n_kv_heads][head_dim]
 * (fp32, n_rows = b->n_rows); pools and b as for kn_kv_append. */
int kn_rope_kv_append(const kn_backend *be, float *q, float *k, const float *v,
                      const kn_kv_pools *pools, const kn_seq_batch *b, int n_heads,
                      int n_kv_heads, int head_dim, int page_size, const kn_qk_rope *r);
#endif
