/* GQA attention over a paged, head-major (HND) KV cache.
 *
 * KV pool layout, one pool per layer for K and one for V:
 *   pool[page][kv_head][slot][head_dim]     slot in [0, page_size)
 * of rows of the pools' dtype (kn_kv_pools): a row is head_dim elements
 * (f32, bf16), or for FP8 head_dim e4m3 codes followed by the row's fp32
 * scale, kn_kv_row_bytes. A page belongs to one sequence; within a page
 * each KV head's tokens are one contiguous run of page_size rows. That is what lets the
 * TransferEngine split or merge heads across TP ranks with plain contiguous
 * copies. Token t of a sequence lives in page page_table[s][t / page_size],
 * slot t % page_size. A page_table entry may be -1 for a page the op
 * touches no row of (kn_kv_append: wholly before the sequence's first row;
 * kn_attention: wholly before the first key its first row sees, for a
 * window layer whose pages out of the window were given back).
 *
 * A batch is n_seqs sequences; sequence s contributes rows
 * [q_offset[s], q_offset[s+1]) of q/k/v/out, which are its newest tokens:
 * row r has position kv_len[s] - n_q(s) + (r - q_offset[s]), where kv_len[s]
 * counts the sequence's tokens including this step's. Prefill is one
 * sequence with many rows; decode is many sequences with one row each.
 */
#ifndef TANDEM_KERNELS_ATTENTION_H
#define TANDEM_KERNELS_ATTENTION_H
#include <stdint.h>
#include "kernels/backend.h"
#include "kernels/dtype.h"

typedef struct kn_seq_batch {
    int n_seqs;                /* host */
    int n_rows;                /* host: q_offset[n_seqs] */
    int max_pages;             /* host: row stride of page_table */
    int max_q_len;             /* host: max rows of one sequence (launch sizing) */
    int max_kv_len;            /* host: max kv_len (launch sizing) */
    const int32_t *q_offset;   /* backend [n_seqs + 1] */
    const int32_t *kv_len;     /* backend [n_seqs] */
    const int32_t *page_table; /* backend [n_seqs][max_pages] */
    int n_pages;               /* host: pages in each pool; the pages a sequence
                                  uses must be ids in [0, n_pages) */
} kn_seq_batch;

/* One layer's K and V pools on the backend and the dtype of their
 * elements. The pools hold the dtype's native bytes; nothing keeps an fp32
 * copy.
 *   KN_F32
 *   KN_BF16      the top 16 bits of the fp32 value after round to nearest
 *                even
 *   KN_FP8_E4M3  per (token, KV head) row: head_dim e4m3fn codes, then the
 *                row's fp32 dequant scale s (4 bytes, native byte order;
 *                head_dim must be a multiple of 4, so s is 4-byte aligned):
 *                value[d] = e4m3(code[d]) * s. kn_kv_append sets
 *                s = amax(|row|) / 448 (1 for an all-zero or non-finite
 *                amax) and code = e4m3(x / s) (IEEE division, round to
 *                nearest even, saturating): each element is within 2^-4
 *                of itself relative, or 2^-10 s absolute (subnormals). The
 *                scale lives in the row, so it travels with the page and a
 *                row is quantized once, when it is written. */
typedef struct kn_kv_pools {
    void *k, *v;
    kn_dtype dtype;
} kn_kv_pools;

/* Bytes of one (token, KV head) row of a pool of dtype dt: head_dim
 * elements, plus the fp32 scale for FP8. 0 for an unknown dtype. */
size_t kn_kv_row_bytes(kn_dtype dt, int head_dim);

/* Writes this step's k, v rows [n_rows][n_kv_heads][head_dim] (fp32) into
 * the pools at their positions, rounded (FP8: quantized) to the pools'
 * dtype. */
int kn_kv_append(const kn_backend *be, const kn_kv_pools *pools,
                 const float *k, const float *v, const kn_seq_batch *b,
                 int n_kv_heads, int head_dim, int page_size);

/* out[r][h][:] = sum_j p_j v_j over the keys row r may see, where
 *   p = softmax([q.k_j * scale for visible j] ++ [sinks[h]]) without the sink
 * column (GPT-OSS's learned sink; sinks == NULL means no sink column).
 * Visible: j <= pos(r) (causal) and, if window > 0, j > pos(r) - window.
 * Query head h reads KV head h / (n_heads / n_kv_heads). K and V are read
 * in the pools' dtype and widened to fp32 as they are loaded (exact for
 * bf16; FP8: code value times the row's scale, rounded to fp32); scores,
 * softmax and the output are computed as with fp32 pools. */
int kn_attention(const kn_backend *be, float *out, const float *q,
                 const kn_kv_pools *pools, const kn_seq_batch *b,
                 int n_heads, int n_kv_heads, int head_dim, int page_size,
                 float scale, const float *sinks, int window);
#endif
