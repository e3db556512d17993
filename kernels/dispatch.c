/* The op entry points: each checks the backend and every argument that
 * reads no buffer (NULL pointers, sizes, dtypes, overlapping ranges), once
 * for both backends, and hands the call to that backend's implementation
 * (kernels/cpu/cpu_ops.h, kernels/cuda/cuda_ops.h). Checks that read the
 * data (token ids, positions, logits, the batch arrays) and a backend's own
 * limits stay in the implementations, which alone can read their memory. */
#include <math.h>
#include <stdint.h>
#include "kernels/attention.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/ep_exchange.h"
#include "kernels/fp8.h"
#include "kernels/fill.h"
#include "kernels/kn_check.h"
#include "kernels/logit_adjust.h"
#include "kernels/logit_mask.h"
#include "kernels/logprobs.h"
#include "kernels/matmul.h"
#include "kernels/moe.h"
#include "kernels/moe_router.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/rope_kv.h"
#include "kernels/sampling.h"
#include "common/status.h"

/* Returns be->kind, or -1 (after saying why) for a NULL or unknown backend. */
static int backend_kind(const char *op, const kn_backend *be)
{
    if (!be) {
        kn_arg_error(op, "backend is NULL");
        return -1;
    }
    if (be->kind != KN_BACKEND_CPU && be->kind != KN_BACKEND_CUDA) {
        kn_arg_error(op, "unknown backend kind %d", (int)be->kind);
        return -1;
    }
    return (int)be->kind;
}

/* The CUDA arm of every switch: the call when the CUDA backend is built in,
 * a clear TN_ERR_UNSUPPORTED otherwise. */
#ifdef TANDEM_CUDA
#define CUDA_CALL(op, call) return call
#else
#define CUDA_CALL(op, call) return kn_no_cuda(op)
#endif

/* Each check_OP returns TN_OK or, after saying why, TN_ERR_ARG. */

static int check_embedding(const float *out, const float *table, const int32_t *ids,
                           int n_tokens, int vocab, int dim)
{
    static const char op[] = "kn_embedding";
    if (!out || !table || !ids)
        return kn_arg_error(op, "NULL %s", !out ? "out" : !table ? "table" : "ids");
    if (n_tokens < 0 || vocab <= 0 || dim <= 0)
        return kn_arg_error(op, "bad sizes n_tokens=%d vocab=%d dim=%d", n_tokens, vocab, dim);
    return TN_OK;
}

static int check_norm(const char *op, int rows, int dim, float eps)
{
    if (rows < 0 || dim <= 0)
        return kn_arg_error(op, "bad sizes rows=%d dim=%d", rows, dim);
    if (!(eps >= 0.0f) || isinf(eps))
        return kn_arg_error(op, "eps %g is not a finite non-negative number", (double)eps);
    return TN_OK;
}

static int check_rmsnorm(const float *out, const float *x, const float *weight, int rows,
                         int dim, float eps)
{
    static const char op[] = "kn_rmsnorm";
    if (!out || !x || !weight)
        return kn_arg_error(op, "NULL %s", !out ? "out" : !x ? "x" : "weight");
    return check_norm(op, rows, dim, eps);
}

static int check_add_rmsnorm(const float *x, const float *xn, const float *delta,
                             const float *weight, int rows, int dim, float eps)
{
    static const char op[] = "kn_add_rmsnorm";
    if (!x || !xn || !delta || !weight)
        return kn_arg_error(op, "NULL %s",
                            !x ? "x" : !xn ? "xn" : !delta ? "delta" : "weight");
    int rc = check_norm(op, rows, dim, eps);
    if (rc != TN_OK)
        return rc;
    size_t bytes = (size_t)rows * dim * sizeof(float);
    /* xn == x is fine (each element is read before it is written); any other
     * overlap would read values this call already changed. */
    if (xn != x && kn_ranges_overlap(xn, bytes, x, bytes))
        return kn_arg_error(op, "xn partially overlaps x");
    if (kn_ranges_overlap(delta, bytes, x, bytes) || kn_ranges_overlap(delta, bytes, xn, bytes))
        return kn_arg_error(op, "delta overlaps x or xn");
    return TN_OK;
}

/* out = x w^T with w_bytes of weight: pointers, sizes, out apart from both. */
static int check_matmul(const char *op, const float *out, const float *x, const void *w,
                        size_t w_bytes, int m, int n, int k)
{
    if (!out || !x || !w)
        return kn_arg_error(op, "NULL %s", !out ? "out" : !x ? "x" : "w");
    if (m < 0 || n <= 0 || k <= 0)
        return kn_arg_error(op, "bad sizes m=%d n=%d k=%d", m, n, k);
    size_t out_bytes = (size_t)m * n * sizeof(float);
    if (kn_ranges_overlap(out, out_bytes, x, (size_t)m * k * sizeof(float)) ||
        kn_ranges_overlap(out, out_bytes, w, w_bytes))
        return kn_arg_error(op, "out overlaps an input");
    return TN_OK;
}

static int check_matmul_w(const float *out, const float *x, const kn_weight *w, int m, int n,
                          int k)
{
    static const char op[] = "kn_matmul_w";
    if (!w)
        return kn_arg_error(op, "NULL weight descriptor");
    size_t elem = kn_dtype_size(w->dtype);
    if (!elem)
        return kn_arg_error(op, "unknown weight dtype %d", (int)w->dtype);
    if (w->dtype == KN_FP8_E4M3 && !w->scale)
        return kn_arg_error(op, "fp8 weight without block scales");
    size_t w_bytes = n > 0 && k > 0 ? (w->dtype == KN_FP8_E4M3 ? kn_fp8_data_bytes(n, k)
                                                               : (size_t)n * k * elem) : 0;
    return check_matmul(op, out, x, w->data, w_bytes, m, n, k);
}

static int check_add(const float *out, const float *a, const float *b, size_t n)
{
    static const char op[] = "kn_add";
    if (!out || !a || !b)
        return kn_arg_error(op, "NULL %s", !out ? "out" : !a ? "a" : "b");
    /* In place is fine; a shifted overlap would read already-written sums. */
    size_t bytes = n * sizeof(float);
    if ((out != a && kn_ranges_overlap(out, bytes, a, bytes)) ||
        (out != b && kn_ranges_overlap(out, bytes, b, bytes)))
        return kn_arg_error(op, "out partially overlaps an input");
    return TN_OK;
}

static int check_rope(const float *x, const int32_t *pos, int n_tokens, int n_heads,
                      int head_dim, const float *inv_freq, float attn_scale)
{
    static const char op[] = "kn_rope";
    if (!x || !pos || !inv_freq)
        return kn_arg_error(op, "NULL %s", !x ? "x" : !pos ? "pos" : "inv_freq");
    if (n_tokens < 0 || n_heads <= 0 || head_dim <= 0 || head_dim % 2 != 0)
        return kn_arg_error(op, "bad sizes n_tokens=%d n_heads=%d head_dim=%d (must be even)",
                            n_tokens, n_heads, head_dim);
    if (!isfinite(attn_scale))
        return kn_arg_error(op, "attn_scale %g is not finite", (double)attn_scale);
    return TN_OK;
}

/* The batch's host fields; its arrays are backend memory, which the
 * backends check (the CPU) or trust (CUDA's kernels skip bad pages). */
static int check_seq_batch(const char *op, const kn_seq_batch *b)
{
    if (!b)
        return kn_arg_error(op, "NULL batch");
    if (b->n_seqs < 0 || b->n_rows < 0 || b->max_pages <= 0 || b->max_q_len < 0 ||
        b->max_kv_len < 0 || b->n_pages <= 0)
        return kn_arg_error(op, "bad batch sizes n_seqs=%d n_rows=%d max_pages=%d max_q_len=%d "
                            "max_kv_len=%d n_pages=%d", b->n_seqs, b->n_rows, b->max_pages,
                            b->max_q_len, b->max_kv_len, b->n_pages);
    if (b->n_seqs > 0 && (!b->q_offset || !b->kv_len || !b->page_table))
        return kn_arg_error(op, "batch has a NULL %s",
                            !b->q_offset ? "q_offset" : !b->kv_len ? "kv_len" : "page_table");
    if (b->n_rows > 0 && b->n_seqs == 0)
        return kn_arg_error(op, "%d rows but no sequences", b->n_rows);
    if (b->n_rows > 0 && b->max_q_len <= 0)
        return kn_arg_error(op, "max_q_len %d with %d rows", b->max_q_len, b->n_rows);
    return TN_OK;
}

size_t kn_kv_row_bytes(kn_dtype dt, int head_dim)
{
    if (head_dim <= 0)
        return 0;
    switch (dt) {
    case KN_F32: return (size_t)head_dim * 4;
    case KN_BF16: return (size_t)head_dim * 2;
    case KN_FP8_E4M3: return (size_t)head_dim + sizeof(float);
    }
    return 0;
}

/* The pools: both present and of a dtype the ops read (FP8 rows keep
 * their scale 4-byte aligned: head_dim a multiple of 4). */
static int check_kv_pools(const char *op, const kn_kv_pools *p, int head_dim)
{
    if (!p)
        return kn_arg_error(op, "NULL KV pools");
    if (!p->k || !p->v)
        return kn_arg_error(op, "NULL %s", !p->k ? "k_pool" : "v_pool");
    if (p->dtype != KN_F32 && p->dtype != KN_BF16 && p->dtype != KN_FP8_E4M3)
        return kn_arg_error(op, "KV pools of dtype %s (%d): the KV dtypes are f32, bf16 and fp8",
                            kn_dtype_name(p->dtype), (int)p->dtype);
    if (p->dtype == KN_FP8_E4M3 && head_dim % 4 != 0)
        return kn_arg_error(op, "fp8 KV pools need head_dim a multiple of 4, got %d", head_dim);
    return TN_OK;
}

static int check_kv_append(const kn_kv_pools *pools, const float *k, const float *v,
                           const kn_seq_batch *b, int n_kv_heads, int head_dim, int page_size)
{
    static const char op[] = "kn_kv_append";
    int rc = check_kv_pools(op, pools, head_dim);
    if (rc != TN_OK)
        return rc;
    if (!k || !v)
        return kn_arg_error(op, "NULL %s", !k ? "k" : "v");
    if (n_kv_heads <= 0 || head_dim <= 0 || page_size <= 0)
        return kn_arg_error(op, "bad sizes n_kv_heads=%d head_dim=%d page_size=%d",
                            n_kv_heads, head_dim, page_size);
    return check_seq_batch(op, b);
}

static int check_rope_kv_append(const float *q, const float *k, const float *v,
                                const kn_kv_pools *pools, const kn_seq_batch *b, int n_heads,
                                int n_kv_heads, int head_dim, int page_size,
                                const kn_qk_rope *r)
{
    static const char op[] = "kn_rope_kv_append";
    int rc = check_kv_pools(op, pools, head_dim);
    if (rc != TN_OK)
        return rc;
    if (!q || !k || !v || !r)
        return kn_arg_error(op, "NULL %s", !q ? "q" : !k ? "k" : !v ? "v" : "rope parameters");
    if (!r->pos || !r->inv_freq)
        return kn_arg_error(op, "NULL %s", !r->pos ? "pos" : "inv_freq");
    if (n_heads <= 0 || n_kv_heads <= 0 || head_dim <= 0 || head_dim % 2 != 0 || page_size <= 0)
        return kn_arg_error(op, "bad sizes n_heads=%d n_kv_heads=%d head_dim=%d (must be even) "
                            "page_size=%d", n_heads, n_kv_heads, head_dim, page_size);
    if (!r->q_norm != !r->k_norm)
        return kn_arg_error(op, "q_norm and k_norm must be given together");
    if (r->q_norm && (!(r->eps >= 0.0f) || isinf(r->eps)))
        return kn_arg_error(op, "eps %g is not a finite non-negative number", (double)r->eps);
    if (!isfinite(r->attn_scale))
        return kn_arg_error(op, "attn_scale %g is not finite", (double)r->attn_scale);
    rc = check_seq_batch(op, b);
    if (rc != TN_OK)
        return rc;
    const size_t rows = (size_t)b->n_rows, hd = (size_t)head_dim * sizeof(float);
    const size_t q_bytes = rows * n_heads * hd, kv_bytes = rows * n_kv_heads * hd;
    if (kn_ranges_overlap(q, q_bytes, k, kv_bytes) || kn_ranges_overlap(q, q_bytes, v, kv_bytes) ||
        kn_ranges_overlap(k, kv_bytes, v, kv_bytes))
        return kn_arg_error(op, "q, k and v overlap");
    return TN_OK;
}

static int check_attention(const float *out, const float *q, const kn_kv_pools *pools,
                           const kn_seq_batch *b, int n_heads, int n_kv_heads, int head_dim,
                           int page_size, float scale, int window)
{
    static const char op[] = "kn_attention";
    if (!out || !q)
        return kn_arg_error(op, "NULL %s", !out ? "out" : "q");
    int rc = check_kv_pools(op, pools, head_dim);
    if (rc != TN_OK)
        return rc;
    if (n_heads <= 0 || n_kv_heads <= 0 || head_dim <= 0 || page_size <= 0 || window < 0)
        return kn_arg_error(op, "bad sizes n_heads=%d n_kv_heads=%d head_dim=%d page_size=%d "
                            "window=%d", n_heads, n_kv_heads, head_dim, page_size, window);
    if (n_heads % n_kv_heads != 0)
        return kn_arg_error(op, "n_heads %d is not a multiple of n_kv_heads %d", n_heads,
                            n_kv_heads);
    if (!isfinite(scale))
        return kn_arg_error(op, "scale %g is not finite", (double)scale);
    return check_seq_batch(op, b);
}

static int check_moe_route(const int32_t *expert_idx, const float *expert_w,
                           const float *logits, int n_tokens, int n_experts, int k,
                           kn_route_mode mode)
{
    static const char op[] = "kn_moe_route";
    if (!expert_idx || !expert_w || !logits)
        return kn_arg_error(op, "NULL %s", !expert_idx ? "expert_idx" : !expert_w ? "expert_w" : "logits");
    if (n_tokens < 0 || n_experts <= 0 || k <= 0 || k > n_experts)
        return kn_arg_error(op, "bad sizes n_tokens=%d n_experts=%d k=%d (need 0 < k <= n_experts)",
                            n_tokens, n_experts, k);
    if (mode != KN_ROUTE_TOPK_SOFTMAX && mode != KN_ROUTE_SOFTMAX_TOPK)
        return kn_arg_error(op, "unknown routing mode %d", (int)mode);
    return TN_OK;
}

/* A kn_norm_in of rows x dim: the pair's own checks, and xn apart from x
 * and delta (the fused kernels read x while xn is written). */
static int check_norm_in(const char *op, const kn_norm_in *norm, int rows, int dim)
{
    if (!norm)
        return kn_arg_error(op, "NULL norm");
    int rc = norm->delta ? check_add_rmsnorm(norm->x, norm->xn, norm->delta, norm->weight, rows, dim, norm->eps)
                         : check_rmsnorm(norm->xn, norm->x, norm->weight, rows, dim, norm->eps);
    if (rc != TN_OK) /* its message names the pair's op */
        return rc;
    const size_t bytes = (size_t)rows * dim * sizeof(float);
    if (kn_ranges_overlap(norm->xn, bytes, norm->x, bytes))
        return kn_arg_error(op, "norm xn overlaps x");
    return TN_OK;
}

/* The norm of a kn_..._normed op alone, as its own op on be. */
static int norm_in_run(const kn_backend *be, const kn_norm_in *n, int rows, int dim)
{
    return n->delta ? kn_add_rmsnorm(be, n->x, n->xn, n->delta, n->weight, rows, dim, n->eps)
                    : kn_rmsnorm(be, n->xn, n->x, n->weight, rows, dim, n->eps);
}

static int check_moe_router(const int32_t *expert_idx, const float *expert_w,
                            const float *logits, const float *x, const float *router_w,
                            int n_tokens, int dim, int n_experts, int k, kn_route_mode mode)
{
    static const char op[] = "kn_moe_router";
    if (!expert_idx || !expert_w || !logits)
        return kn_arg_error(op, "NULL %s", !expert_idx ? "expert_idx" : !expert_w ? "expert_w"
                                                                      : "logits");
    if (n_tokens < 0 || dim <= 0 || n_experts <= 0 || k <= 0 || k > n_experts)
        return kn_arg_error(op, "bad sizes n_tokens=%d dim=%d n_experts=%d k=%d (need 0 < k <= "
                            "n_experts)", n_tokens, dim, n_experts, k);
    if (mode != KN_ROUTE_TOPK_SOFTMAX && mode != KN_ROUTE_SOFTMAX_TOPK)
        return kn_arg_error(op, "unknown routing mode %d", (int)mode);
    return check_matmul(op, logits, x, router_w, (size_t)n_experts * dim * sizeof(float),
                        n_tokens, n_experts, dim);
}

static int check_moe_experts(const float *out, const float *x, const int32_t *expert_idx,
                             const float *expert_w, int n_tokens, int k, const kn_moe_weights *w)
{
    static const char op[] = "kn_moe_experts";
    if (!out || !x || !expert_idx || !expert_w || !w)
        return kn_arg_error(op, "NULL %s", !out ? "out" : !x ? "x" : !expert_idx ? "expert_idx"
                                           : !expert_w ? "expert_w" : "weights");
    if (!w->gate_up || !w->down)
        return kn_arg_error(op, "NULL %s weights", !w->gate_up ? "gate_up" : "down");
    if (n_tokens < 0 || k <= 0 || w->n_experts <= 0 || w->expert_offset < 0 || w->dim <= 0 ||
        w->inter <= 0)
        return kn_arg_error(op, "bad sizes n_tokens=%d k=%d n_experts=%d expert_offset=%d "
                            "dim=%d inter=%d", n_tokens, k, w->n_experts, w->expert_offset,
                            w->dim, w->inter);
    if (w->act != KN_ACT_SWIGLU && w->act != KN_ACT_SWIGLU_OAI)
        return kn_arg_error(op, "unknown activation %d", (int)w->act);
    if (w->wdtype != KN_F32 && w->wdtype != KN_BF16 && w->wdtype != KN_FP8_E4M3)
        return kn_arg_error(op, "unknown weight dtype %d", (int)w->wdtype);
    if (w->wdtype == KN_FP8_E4M3 && (!w->gate_up_scale || !w->down_scale))
        return kn_arg_error(op, "fp8 expert weights without block scales");
    if (w->act == KN_ACT_SWIGLU_OAI && (!isfinite(w->alpha) || !(w->limit > 0.0f) ||
                                        isinf(w->limit)))
        return kn_arg_error(op, "clamped SwiGLU needs a finite alpha (%g) and a finite "
                            "positive limit (%g)", (double)w->alpha, (double)w->limit);
    size_t row_bytes = (size_t)n_tokens * w->dim * sizeof(float);
    if (kn_ranges_overlap(out, row_bytes, x, row_bytes))
        return kn_arg_error(op, "out overlaps x");
    return TN_OK;
}

/* The exchange's sizes: the packed buffers' rows must fit an int (the
 * expert op's row count) and their bytes a size_t. */
static int check_ep_sizes(const char *op, int n_tokens, int k, int dim, int n_ranks, int cap)
{
    if (n_tokens < 0 || k <= 0 || dim <= 0 || n_ranks <= 0 || cap < n_tokens || cap < 0)
        return kn_arg_error(op, "bad sizes n_tokens=%d k=%d dim=%d n_ranks=%d cap=%d", n_tokens,
                            k, dim, n_ranks, cap);
    if ((long long)n_ranks * cap > 0x7fffffffLL ||
        (double)n_ranks * cap * (double)KN_EP_ROW_WORDS(dim, k) * 4.0 > (double)SIZE_MAX / 2)
        return kn_arg_error(op, "%d ranks x %d rows per rank is too many", n_ranks, cap);
    return TN_OK;
}

static int check_ep_pack(const void *send, const int32_t *slot, const float *x,
                         const int32_t *expert_idx, const float *expert_w, int n_tokens, int k,
                         int dim, int n_ranks, int experts_per_rank, int cap)
{
    static const char op[] = "kn_ep_pack";
    int rc = check_ep_sizes(op, n_tokens, k, dim, n_ranks, cap);
    if (rc)
        return rc;
    if (experts_per_rank <= 0 || (long long)experts_per_rank * n_ranks > 0x7fffffffLL)
        return kn_arg_error(op, "bad experts_per_rank %d for %d ranks", experts_per_rank,
                            n_ranks);
    if (!send && cap > 0)
        return kn_arg_error(op, "NULL send");
    if (n_tokens > 0 && (!slot || !x || !expert_idx || !expert_w))
        return kn_arg_error(op, "NULL %s", !slot ? "slot" : !x ? "x" : !expert_idx
                                               ? "expert_idx" : "expert_w");
    size_t send_bytes = (size_t)n_ranks * cap * KN_EP_ROW_WORDS(dim, k) * 4;
    if (n_tokens > 0 && kn_ranges_overlap(send, send_bytes, x, (size_t)n_tokens * dim * 4))
        return kn_arg_error(op, "send overlaps x");
    return TN_OK;
}

static int check_ep_unpack(const float *x, const int32_t *expert_idx, const float *expert_w,
                           const void *recv, int n_rows, int k, int dim)
{
    static const char op[] = "kn_ep_unpack";
    int rc = check_ep_sizes(op, n_rows, k, dim, 1, n_rows);
    if (rc)
        return rc;
    if (n_rows > 0 && (!x || !expert_idx || !expert_w || !recv))
        return kn_arg_error(op, "NULL %s", !x ? "x" : !expert_idx ? "expert_idx"
                                           : !expert_w ? "expert_w" : "recv");
    size_t recv_bytes = (size_t)n_rows * KN_EP_ROW_WORDS(dim, k) * 4;
    if (n_rows > 0 && kn_ranges_overlap(recv, recv_bytes, x, (size_t)n_rows * dim * 4))
        return kn_arg_error(op, "x overlaps recv");
    return TN_OK;
}

static int check_ep_combine(const float *out, const float *shares, const int32_t *slot,
                            int n_tokens, int dim, int n_ranks, int cap)
{
    static const char op[] = "kn_ep_combine";
    int rc = check_ep_sizes(op, n_tokens, 1, dim, n_ranks, cap);
    if (rc)
        return rc;
    if (n_tokens > 0 && (!out || !shares || !slot))
        return kn_arg_error(op, "NULL %s", !out ? "out" : !shares ? "shares" : "slot");
    if (n_tokens > 0 && kn_ranges_overlap(out, (size_t)n_tokens * dim * 4, shares,
                                          (size_t)n_ranks * cap * dim * 4))
        return kn_arg_error(op, "out overlaps shares");
    return TN_OK;
}

static int check_sample(const int32_t *tokens, const float *logits, int n_rows, int vocab,
                        const kn_sampling *params, const uint64_t *rng_state)
{
    static const char op[] = "kn_sample";
    if (!tokens || !logits || !params || !rng_state)
        return kn_arg_error(op, "NULL %s", !tokens ? "tokens" : !logits ? "logits"
                                           : !params ? "params" : "rng_state");
    if (n_rows < 0 || vocab <= 0)
        return kn_arg_error(op, "bad sizes n_rows=%d vocab=%d", n_rows, vocab);
    return TN_OK;
}

static int check_logprobs(const float *logits, int n_rows, int vocab, const int32_t *tokens,
                          const float *token_logprob, int top_n, const int32_t *top_ids,
                          const float *top_logprobs)
{
    static const char op[] = "kn_logprobs";
    if (!logits || (token_logprob && !tokens))
        return kn_arg_error(op, "NULL %s", !logits ? "logits" : "tokens");
    if (n_rows < 0 || vocab <= 0)
        return kn_arg_error(op, "bad sizes n_rows=%d vocab=%d", n_rows, vocab);
    if (top_n < 0 || top_n > KN_LOGPROBS_MAX_TOP || top_n > vocab)
        return kn_arg_error(op, "top_n=%d is outside [0, %d] (vocab %d)", top_n,
                            KN_LOGPROBS_MAX_TOP, vocab);
    if (top_n > 0 && (!top_ids || !top_logprobs))
        return kn_arg_error(op, "NULL top_%s with top_n=%d", !top_ids ? "ids" : "logprobs", top_n);
    for (int r = 0; token_logprob && r < n_rows; r++)
        if (tokens[r] >= vocab)
            return kn_arg_error(op, "row %d: token %d is outside the vocabulary of %d", r,
                                (int)tokens[r], vocab);
    return TN_OK;
}

/* Every host argument of kn_logit_adjust_apply, so a backend only applies. */
static int check_logit_adjust(const float *logits, int n_rows, int vocab,
                              const kn_logit_adjust *params, const int32_t *row_start,
                              const kn_logit_entry *entries)
{
    static const char op[] = "kn_logit_adjust_apply";
    if (!logits || !params || !row_start)
        return kn_arg_error(op, "NULL %s", !logits ? "logits" : !params ? "params" : "row_start");
    if (n_rows < 0 || vocab <= 0)
        return kn_arg_error(op, "bad sizes n_rows=%d vocab=%d", n_rows, vocab);
    if (row_start[0] != 0)
        return kn_arg_error(op, "row_start[0] is %d, not 0", (int)row_start[0]);
    if (row_start[n_rows] > 0 && !entries)
        return kn_arg_error(op, "NULL entries for %d entries", (int)row_start[n_rows]);
    for (int r = 0; r < n_rows; r++) {
        const kn_logit_adjust *p = &params[r];
        if (!isfinite(p->presence) || !isfinite(p->frequency) || !isfinite(p->repetition) ||
            p->repetition <= 0.0f)
            return kn_arg_error(op, "row %d: bad parameters presence=%g frequency=%g repetition=%g",
                                r, (double)p->presence, (double)p->frequency,
                                (double)p->repetition);
        if (row_start[r + 1] < row_start[r])
            return kn_arg_error(op, "row_start decreases at row %d", r);
        for (int32_t k = row_start[r]; k < row_start[r + 1]; k++) {
            const kn_logit_entry *e = &entries[k];
            if (e->token < 0 || e->token >= vocab || (k > row_start[r] && e->token <= entries[k - 1].token))
                return kn_arg_error(op, "row %d: entry token %d is out of range or out of order", r,
                                    (int)e->token);
            if (e->out_count < 0 || !isfinite(e->bias))
                return kn_arg_error(op, "row %d: token %d has count %d bias %g", r, (int)e->token,
                                    (int)e->out_count, (double)e->bias);
        }
    }
    return TN_OK;
}

static int check_fill(const void *x, kn_dtype dt, size_t n, float lo, float hi)
{
    static const char op[] = "kn_fill_uniform";
    if (!x && n > 0)
        return kn_arg_error(op, "NULL buffer");
    if (!isfinite(lo) || !isfinite(hi) || lo > hi)
        return kn_arg_error(op, "bad range [%g, %g)", (double)lo, (double)hi);
    if (dt != KN_F32 && dt != KN_BF16 && dt != KN_FP8_E4M3)
        return kn_arg_error(op, "unknown dtype %d", (int)dt);
    return TN_OK;
}

/* The backend's kind when it and the op's arguments pass (check is a
 * check_OP call, evaluated only after the backend passed); -1 otherwise,
 * which every switch below turns into TN_ERR_ARG. */
#define CHECKED_KIND(op, be, check) \
    (backend_kind((op), (be)) < 0 || (check) != TN_OK ? -1 : (int)(be)->kind)

int kn_embedding(const kn_backend *be, float *out, const float *table,
                 const int32_t *ids, int n_tokens, int vocab, int dim)
{
    switch (CHECKED_KIND("kn_embedding", be,
                         check_embedding(out, table, ids, n_tokens, vocab, dim))) {
    case KN_BACKEND_CPU:
        return kn_embedding_cpu(out, table, ids, n_tokens, vocab, dim);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_embedding", kn_embedding_cuda(be, out, table, ids, n_tokens, vocab, dim));
    }
    return TN_ERR_ARG;
}

int kn_gather_rows(const kn_backend *be, float *out, const float *table,
                   const int32_t *rows, int n, int n_table_rows, int dim)
{
    switch (CHECKED_KIND("kn_gather_rows", be,
                         check_embedding(out, table, rows, n, n_table_rows, dim))) {
    case KN_BACKEND_CPU:
        return kn_gather_rows_cpu(out, table, rows, n, n_table_rows, dim);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_gather_rows", kn_gather_rows_cuda(be, out, table, rows, n, n_table_rows, dim));
    }
    return TN_ERR_ARG;
}

int kn_rmsnorm(const kn_backend *be, float *out, const float *x,
               const float *weight, int rows, int dim, float eps)
{
    switch (CHECKED_KIND("kn_rmsnorm", be, check_rmsnorm(out, x, weight, rows, dim, eps))) {
    case KN_BACKEND_CPU:
        return kn_rmsnorm_cpu(out, x, weight, rows, dim, eps);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_rmsnorm", kn_rmsnorm_cuda(be, out, x, weight, rows, dim, eps));
    }
    return TN_ERR_ARG;
}

int kn_add_rmsnorm(const kn_backend *be, float *x, float *xn, const float *delta,
                   const float *weight, int rows, int dim, float eps)
{
    switch (CHECKED_KIND("kn_add_rmsnorm", be,
                         check_add_rmsnorm(x, xn, delta, weight, rows, dim, eps))) {
    case KN_BACKEND_CPU:
        return kn_add_rmsnorm_cpu(x, xn, delta, weight, rows, dim, eps);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_add_rmsnorm",
                  kn_add_rmsnorm_cuda(be, x, xn, delta, weight, rows, dim, eps));
    }
    return TN_ERR_ARG;
}

int kn_matmul(const kn_backend *be, float *out, const float *x, const float *w,
              const float *bias, int m, int n, int k)
{
    switch (CHECKED_KIND("kn_matmul", be,
                         check_matmul("kn_matmul", out, x, w,
                                      (size_t)(n > 0 ? n : 0) * (k > 0 ? k : 0) * sizeof(float),
                                      m, n, k))) {
    case KN_BACKEND_CPU:
        return kn_matmul_cpu(out, x, w, bias, m, n, k);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_matmul", kn_matmul_cuda(be, out, x, w, bias, m, n, k));
    }
    return TN_ERR_ARG;
}

int kn_matmul_w(const kn_backend *be, float *out, const float *x, const kn_weight *w,
                const float *bias, int m, int n, int k)
{
    switch (CHECKED_KIND("kn_matmul_w", be, check_matmul_w(out, x, w, m, n, k))) {
    case KN_BACKEND_CPU:
        return kn_matmul_w_cpu(out, x, w, bias, m, n, k);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_matmul_w", kn_matmul_w_cuda(be, out, x, w, bias, m, n, k));
    }
    return TN_ERR_ARG;
}

static int check_matmul_w_multi(const kn_linear *lin, int n_lin, const float *x, int m, int k)
{
    static const char op[] = "kn_matmul_w_multi";
    if (!lin || n_lin < 1 || n_lin > KN_LINEAR_MAX)
        return kn_arg_error(op, "%d layers (1..%d)", lin ? n_lin : 0, KN_LINEAR_MAX);
    for (int i = 0; i < n_lin; i++) {
        int rc = check_matmul_w(lin[i].out, x, lin[i].w, m, lin[i].n, k);
        if (rc != TN_OK)
            return kn_arg_error(op, "layer %d of %d: see above", i, n_lin);
        for (int j = 0; j < i; j++)
            if (kn_ranges_overlap(lin[i].out, (size_t)m * lin[i].n * sizeof(float), lin[j].out,
                                  (size_t)m * lin[j].n * sizeof(float)))
                return kn_arg_error(op, "outputs %d and %d overlap", j, i);
    }
    return TN_OK;
}

int kn_matmul_w_multi(const kn_backend *be, const kn_linear *lin, int n_lin, const float *x, int m, int k)
{
    switch (CHECKED_KIND("kn_matmul_w_multi", be, check_matmul_w_multi(lin, n_lin, x, m, k))) {
    case KN_BACKEND_CPU:
        for (int i = 0; i < n_lin; i++) {
            int rc = kn_matmul_w_cpu(lin[i].out, x, lin[i].w, lin[i].bias, m, lin[i].n, k);
            if (rc != TN_OK)
                return rc;
        }
        return TN_OK;
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_matmul_w_multi", kn_matmul_w_multi_cuda(be, lin, n_lin, x, m, k));
    }
    return TN_ERR_ARG;
}

static int check_matmul_w_multi_normed(const kn_linear *lin, int n_lin, const kn_norm_in *norm, int m,
                                       int k)
{
    static const char op[] = "kn_matmul_w_multi_normed";
    int rc = check_norm_in(op, norm, m, k);
    if (rc == TN_OK)
        rc = check_matmul_w_multi(lin, n_lin, norm->xn, m, k);
    const size_t bytes = (size_t)m * k * sizeof(float);
    for (int i = 0; rc == TN_OK && i < n_lin; i++) {
        const size_t ob = (size_t)m * lin[i].n * sizeof(float);
        if (kn_ranges_overlap(lin[i].out, ob, norm->x, bytes) ||
            (norm->delta && kn_ranges_overlap(lin[i].out, ob, norm->delta, bytes)))
            rc = kn_arg_error(op, "output %d overlaps the norm's x or delta", i);
    }
    return rc;
}

int kn_matmul_w_multi_normed(const kn_backend *be, const kn_linear *lin, int n_lin,
                             const kn_norm_in *norm, int m, int k)
{
    switch (CHECKED_KIND("kn_matmul_w_multi_normed", be,
                         check_matmul_w_multi_normed(lin, n_lin, norm, m, k))) {
    case KN_BACKEND_CPU: {
        int rc = norm_in_run(be, norm, m, k);
        for (int i = 0; rc == TN_OK && i < n_lin; i++)
            rc = kn_matmul_w_cpu(lin[i].out, norm->xn, lin[i].w, lin[i].bias, m, lin[i].n, k);
        return rc;
    }
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_matmul_w_multi_normed", kn_matmul_w_multi_normed_cuda(be, lin, n_lin, norm, m, k));
    }
    return TN_ERR_ARG;
}

int kn_add(const kn_backend *be, float *out, const float *a, const float *b, size_t n)
{
    switch (CHECKED_KIND("kn_add", be, check_add(out, a, b, n))) {
    case KN_BACKEND_CPU:
        return kn_add_cpu(out, a, b, n);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_add", kn_add_cuda(be, out, a, b, n));
    }
    return TN_ERR_ARG;
}

int kn_rope(const kn_backend *be, float *x, const int32_t *pos, int n_tokens,
            int n_heads, int head_dim, const float *inv_freq, float attn_scale)
{
    switch (CHECKED_KIND("kn_rope", be,
                         check_rope(x, pos, n_tokens, n_heads, head_dim, inv_freq, attn_scale))) {
    case KN_BACKEND_CPU:
        return kn_rope_cpu(x, pos, n_tokens, n_heads, head_dim, inv_freq, attn_scale);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_rope", kn_rope_cuda(be, x, pos, n_tokens, n_heads, head_dim,
                                          inv_freq, attn_scale));
    }
    return TN_ERR_ARG;
}

int kn_kv_append(const kn_backend *be, const kn_kv_pools *pools,
                 const float *k, const float *v, const kn_seq_batch *b,
                 int n_kv_heads, int head_dim, int page_size)
{
    switch (CHECKED_KIND("kn_kv_append", be,
                         check_kv_append(pools, k, v, b, n_kv_heads, head_dim, page_size))) {
    case KN_BACKEND_CPU:
        return kn_kv_append_cpu(pools, k, v, b, n_kv_heads, head_dim, page_size);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_kv_append", kn_kv_append_cuda(be, pools, k, v, b,
                                                    n_kv_heads, head_dim, page_size));
    }
    return TN_ERR_ARG;
}

int kn_rope_kv_append(const kn_backend *be, float *q, float *k, const float *v,
                      const kn_kv_pools *pools, const kn_seq_batch *b, int n_heads,
                      int n_kv_heads, int head_dim, int page_size, const kn_qk_rope *r)
{
    switch (CHECKED_KIND("kn_rope_kv_append", be,
                         check_rope_kv_append(q, k, v, pools, b, n_heads, n_kv_heads, head_dim,
                                              page_size, r))) {
    case KN_BACKEND_CPU:
        return kn_rope_kv_append_cpu(q, k, v, pools, b, n_heads, n_kv_heads, head_dim,
                                     page_size, r);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_rope_kv_append", kn_rope_kv_append_cuda(be, q, k, v, pools, b, n_heads,
                                                              n_kv_heads, head_dim, page_size,
                                                              r));
    }
    return TN_ERR_ARG;
}

int kn_attention(const kn_backend *be, float *out, const float *q,
                 const kn_kv_pools *pools, const kn_seq_batch *b,
                 int n_heads, int n_kv_heads, int head_dim, int page_size,
                 float scale, const float *sinks, int window)
{
    switch (CHECKED_KIND("kn_attention", be,
                         check_attention(out, q, pools, b, n_heads, n_kv_heads, head_dim,
                                         page_size, scale, window))) {
    case KN_BACKEND_CPU:
        return kn_attention_cpu(out, q, pools, b, n_heads, n_kv_heads,
                                head_dim, page_size, scale, sinks, window);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_attention", kn_attention_cuda(be, out, q, pools, b, n_heads,
                                                    n_kv_heads, head_dim, page_size, scale,
                                                    sinks, window));
    }
    return TN_ERR_ARG;
}

int kn_moe_route(const kn_backend *be, int32_t *expert_idx, float *expert_w,
                 const float *logits, int n_tokens, int n_experts, int k,
                 kn_route_mode mode, int renormalize)
{
    switch (CHECKED_KIND("kn_moe_route", be,
                         check_moe_route(expert_idx, expert_w, logits, n_tokens, n_experts, k, mode))) {
    case KN_BACKEND_CPU:
        return kn_moe_route_cpu(expert_idx, expert_w, logits, n_tokens, n_experts, k,
                                mode, renormalize);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_moe_route", kn_moe_route_cuda(be, expert_idx, expert_w, logits,
                                                    n_tokens, n_experts, k, mode,
                                                    renormalize));
    }
    return TN_ERR_ARG;
}

int kn_moe_router(const kn_backend *be, int32_t *expert_idx, float *expert_w, float *logits,
                  const float *x, const float *router_w, const float *router_b, int n_tokens,
                  int dim, int n_experts, int k, kn_route_mode mode, int renormalize)
{
    switch (CHECKED_KIND("kn_moe_router", be,
                         check_moe_router(expert_idx, expert_w, logits, x, router_w, n_tokens,
                                          dim, n_experts, k, mode))) {
    case KN_BACKEND_CPU:
        return kn_moe_router_cpu(expert_idx, expert_w, logits, x, router_w, router_b, n_tokens,
                                 dim, n_experts, k, mode, renormalize);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_moe_router", kn_moe_router_cuda(be, expert_idx, expert_w, logits, x,
                                                      router_w, router_b, n_tokens, dim,
                                                      n_experts, k, mode, renormalize));
    }
    return TN_ERR_ARG;
}

int kn_moe_router_normed(const kn_backend *be, int32_t *expert_idx, float *expert_w, float *logits,
                         const kn_norm_in *norm, const float *router_w, const float *router_b,
                         int n_tokens, int dim, int n_experts, int k, kn_route_mode mode,
                         int renormalize)
{
    static const char op[] = "kn_moe_router_normed";
    int rc = check_norm_in(op, norm, n_tokens, dim);
    if (rc == TN_OK)
        rc = check_moe_router(expert_idx, expert_w, logits, norm->xn, router_w, n_tokens, dim, n_experts, k,
                              mode);
    const size_t bytes = (size_t)n_tokens * dim * sizeof(float),
                 lb = (size_t)n_tokens * n_experts * sizeof(float);
    if (rc == TN_OK && (kn_ranges_overlap(logits, lb, norm->x, bytes) ||
                        (norm->delta && kn_ranges_overlap(logits, lb, norm->delta, bytes))))
        rc = kn_arg_error(op, "logits overlap the norm's x or delta");
    /* every backend runs the pair (on CUDA a router that normalized its
     * tokens itself measured slower than the norm kernel before it:
     * docs/gpu-runs/s9run1-4) */
    if (CHECKED_KIND(op, be, rc) < 0)
        return TN_ERR_ARG;
    rc = norm_in_run(be, norm, n_tokens, dim);
    return rc != TN_OK ? rc
                       : kn_moe_router(be, expert_idx, expert_w, logits, norm->xn, router_w, router_b, n_tokens,
                                       dim, n_experts, k, mode, renormalize);
}

int kn_moe_experts(const kn_backend *be, float *out, const float *x,
                   const int32_t *expert_idx, const float *expert_w,
                   int n_tokens, int k, const kn_moe_weights *w)
{
    switch (CHECKED_KIND("kn_moe_experts", be,
                         check_moe_experts(out, x, expert_idx, expert_w, n_tokens, k, w))) {
    case KN_BACKEND_CPU:
        return kn_moe_experts_cpu(out, x, expert_idx, expert_w, n_tokens, k, w);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_moe_experts", kn_moe_experts_cuda(be, out, x, expert_idx, expert_w,
                                                        n_tokens, k, w));
    }
    return TN_ERR_ARG;
}

int kn_ep_pack(const kn_backend *be, void *send, int32_t *slot, const float *x,
               const int32_t *expert_idx, const float *expert_w, int n_tokens, int k,
               int dim, int n_ranks, int experts_per_rank, int cap)
{
    switch (CHECKED_KIND("kn_ep_pack", be,
                         check_ep_pack(send, slot, x, expert_idx, expert_w, n_tokens, k, dim,
                                       n_ranks, experts_per_rank, cap))) {
    case KN_BACKEND_CPU:
        return kn_ep_pack_cpu(send, slot, x, expert_idx, expert_w, n_tokens, k, dim, n_ranks,
                              experts_per_rank, cap);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_ep_pack", kn_ep_pack_cuda(be, send, slot, x, expert_idx, expert_w,
                                                n_tokens, k, dim, n_ranks, experts_per_rank,
                                                cap));
    }
    return TN_ERR_ARG;
}

int kn_ep_unpack(const kn_backend *be, float *x, int32_t *expert_idx, float *expert_w,
                 const void *recv, int n_rows, int k, int dim)
{
    switch (CHECKED_KIND("kn_ep_unpack", be,
                         check_ep_unpack(x, expert_idx, expert_w, recv, n_rows, k, dim))) {
    case KN_BACKEND_CPU:
        return kn_ep_unpack_cpu(x, expert_idx, expert_w, recv, n_rows, k, dim);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_ep_unpack", kn_ep_unpack_cuda(be, x, expert_idx, expert_w, recv, n_rows,
                                                    k, dim));
    }
    return TN_ERR_ARG;
}

int kn_ep_combine(const kn_backend *be, float *out, const float *shares, const int32_t *slot,
                  int n_tokens, int dim, int n_ranks, int cap)
{
    switch (CHECKED_KIND("kn_ep_combine", be,
                         check_ep_combine(out, shares, slot, n_tokens, dim, n_ranks, cap))) {
    case KN_BACKEND_CPU:
        return kn_ep_combine_cpu(out, shares, slot, n_tokens, dim, n_ranks, cap);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_ep_combine", kn_ep_combine_cuda(be, out, shares, slot, n_tokens, dim,
                                                      n_ranks, cap));
    }
    return TN_ERR_ARG;
}

int kn_sample(const kn_backend *be, int32_t *tokens, const float *logits,
              int n_rows, int vocab, const kn_sampling *params,
              uint64_t *rng_state)
{
    switch (CHECKED_KIND("kn_sample", be,
                         check_sample(tokens, logits, n_rows, vocab, params, rng_state))) {
    case KN_BACKEND_CPU:
        return kn_sample_cpu(tokens, logits, n_rows, vocab, params, rng_state);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_sample", kn_sample_cuda(be, tokens, logits, n_rows, vocab, params,
                                              rng_state));
    }
    return TN_ERR_ARG;
}

int kn_logprobs(const kn_backend *be, const float *logits, int n_rows, int vocab,
                const int32_t *tokens, float *token_logprob, int top_n, int32_t *top_ids,
                float *top_logprobs)
{
    switch (CHECKED_KIND("kn_logprobs", be,
                         check_logprobs(logits, n_rows, vocab, tokens, token_logprob, top_n,
                                        top_ids, top_logprobs))) {
    case KN_BACKEND_CPU:
        return kn_logprobs_cpu(logits, n_rows, vocab, tokens, token_logprob, top_n, top_ids,
                               top_logprobs);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_logprobs", kn_logprobs_cuda(be, logits, n_rows, vocab, tokens,
                                                  token_logprob, top_n, top_ids, top_logprobs));
    }
    return TN_ERR_ARG;
}

int kn_logit_adjust_apply(const kn_backend *be, float *logits, int n_rows, int vocab,
                          const kn_logit_adjust *params, const int32_t *row_start,
                          const kn_logit_entry *entries)
{
    switch (CHECKED_KIND("kn_logit_adjust_apply", be,
                         check_logit_adjust(logits, n_rows, vocab, params, row_start, entries))) {
    case KN_BACKEND_CPU:
        return kn_logit_adjust_cpu(logits, n_rows, vocab, params, row_start, entries);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_logit_adjust_apply",
                  kn_logit_adjust_cuda(be, logits, n_rows, vocab, params, row_start, entries));
    }
    return TN_ERR_ARG;
}

/* Every row of a token mask must allow some token. */
static int check_logit_mask(const float *logits, int n_rows, int vocab, const uint32_t *mask)
{
    static const char op[] = "kn_logit_mask_apply";
    if (!logits || !mask)
        return kn_arg_error(op, "NULL %s", !logits ? "logits" : "mask");
    if (n_rows < 0 || vocab <= 0)
        return kn_arg_error(op, "bad sizes n_rows=%d vocab=%d", n_rows, vocab);
    const int words = kn_logit_mask_words(vocab);
    const uint32_t last = vocab % 32 ? (1u << (vocab % 32)) - 1u : 0xffffffffu;
    for (int r = 0; r < n_rows; r++) {
        const uint32_t *m = mask + (size_t)r * words;
        uint32_t any = m[words - 1] & last;
        for (int w = 0; w + 1 < words && !any; w++)
            any = m[w];
        if (!any)
            return kn_arg_error(op, "row %d: the mask allows no token", r);
    }
    return TN_OK;
}

int kn_logit_mask_apply(const kn_backend *be, float *logits, int n_rows, int vocab,
                        const uint32_t *mask)
{
    switch (CHECKED_KIND("kn_logit_mask_apply", be,
                         check_logit_mask(logits, n_rows, vocab, mask))) {
    case KN_BACKEND_CPU:
        return kn_logit_mask_cpu(logits, n_rows, vocab, mask);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_logit_mask_apply", kn_logit_mask_cuda(be, logits, n_rows, vocab, mask));
    }
    return TN_ERR_ARG;
}

int kn_fill_uniform_at(const kn_backend *be, void *x, kn_dtype dt, size_t n, uint64_t seed,
                       size_t first, float lo, float hi)
{
    switch (CHECKED_KIND("kn_fill_uniform", be, check_fill(x, dt, n, lo, hi))) {
    case KN_BACKEND_CPU:
        return kn_fill_uniform_cpu(x, dt, n, seed, first, lo, hi);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_fill_uniform", kn_fill_uniform_cuda(be, x, dt, n, seed, first, lo, hi));
    }
    return TN_ERR_ARG;
}

int kn_fill_uniform(const kn_backend *be, void *x, kn_dtype dt, size_t n, uint64_t seed,
                    float lo, float hi)
{
    return kn_fill_uniform_at(be, x, dt, n, seed, 0, lo, hi);
}
