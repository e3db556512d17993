/* The op entry points: each checks the backend and hands the call to that
 * backend's implementation. Argument checks beyond the backend live in the
 * implementations, because only they can read their backend's memory. */
#include "kernels/attention.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/fill.h"
#include "kernels/kn_check.h"
#include "kernels/matmul.h"
#include "kernels/moe.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
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

int kn_embedding(const kn_backend *be, float *out, const float *table,
                 const int32_t *ids, int n_tokens, int vocab, int dim)
{
    switch (backend_kind("kn_embedding", be)) {
    case KN_BACKEND_CPU:
        return kn_embedding_cpu(out, table, ids, n_tokens, vocab, dim);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_embedding", kn_embedding_cuda(be, out, table, ids, n_tokens, vocab, dim));
    }
    return TN_ERR_ARG;
}

int kn_rmsnorm(const kn_backend *be, float *out, const float *x,
               const float *weight, int rows, int dim, float eps)
{
    switch (backend_kind("kn_rmsnorm", be)) {
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
    switch (backend_kind("kn_add_rmsnorm", be)) {
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
    switch (backend_kind("kn_matmul", be)) {
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
    switch (backend_kind("kn_matmul_w", be)) {
    case KN_BACKEND_CPU:
        return kn_matmul_w_cpu(out, x, w, bias, m, n, k);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_matmul_w", kn_matmul_w_cuda(be, out, x, w, bias, m, n, k));
    }
    return TN_ERR_ARG;
}

int kn_add(const kn_backend *be, float *out, const float *a, const float *b, size_t n)
{
    switch (backend_kind("kn_add", be)) {
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
    switch (backend_kind("kn_rope", be)) {
    case KN_BACKEND_CPU:
        return kn_rope_cpu(x, pos, n_tokens, n_heads, head_dim, inv_freq, attn_scale);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_rope", kn_rope_cuda(be, x, pos, n_tokens, n_heads, head_dim,
                                          inv_freq, attn_scale));
    }
    return TN_ERR_ARG;
}

int kn_kv_append(const kn_backend *be, float *k_pool, float *v_pool,
                 const float *k, const float *v, const kn_seq_batch *b,
                 int n_kv_heads, int head_dim, int page_size)
{
    switch (backend_kind("kn_kv_append", be)) {
    case KN_BACKEND_CPU:
        return kn_kv_append_cpu(k_pool, v_pool, k, v, b, n_kv_heads, head_dim, page_size);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_kv_append", kn_kv_append_cuda(be, k_pool, v_pool, k, v, b,
                                                    n_kv_heads, head_dim, page_size));
    }
    return TN_ERR_ARG;
}

int kn_attention(const kn_backend *be, float *out, const float *q,
                 const float *k_pool, const float *v_pool, const kn_seq_batch *b,
                 int n_heads, int n_kv_heads, int head_dim, int page_size,
                 float scale, const float *sinks, int window)
{
    switch (backend_kind("kn_attention", be)) {
    case KN_BACKEND_CPU:
        return kn_attention_cpu(out, q, k_pool, v_pool, b, n_heads, n_kv_heads,
                                head_dim, page_size, scale, sinks, window);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_attention", kn_attention_cuda(be, out, q, k_pool, v_pool, b, n_heads,
                                                    n_kv_heads, head_dim, page_size, scale,
                                                    sinks, window));
    }
    return TN_ERR_ARG;
}

int kn_moe_route(const kn_backend *be, int32_t *expert_idx, float *expert_w,
                 const float *logits, int n_tokens, int n_experts, int k,
                 kn_route_mode mode, int renormalize)
{
    switch (backend_kind("kn_moe_route", be)) {
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

int kn_moe_experts(const kn_backend *be, float *out, const float *x,
                   const int32_t *expert_idx, const float *expert_w,
                   int n_tokens, int k, const kn_moe_weights *w)
{
    switch (backend_kind("kn_moe_experts", be)) {
    case KN_BACKEND_CPU:
        return kn_moe_experts_cpu(out, x, expert_idx, expert_w, n_tokens, k, w);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_moe_experts", kn_moe_experts_cuda(be, out, x, expert_idx, expert_w,
                                                        n_tokens, k, w));
    }
    return TN_ERR_ARG;
}

int kn_sample(const kn_backend *be, int32_t *tokens, const float *logits,
              int n_rows, int vocab, const kn_sampling *params,
              uint64_t *rng_state)
{
    switch (backend_kind("kn_sample", be)) {
    case KN_BACKEND_CPU:
        return kn_sample_cpu(tokens, logits, n_rows, vocab, params, rng_state);
    case KN_BACKEND_CUDA:
        CUDA_CALL("kn_sample", kn_sample_cuda(be, tokens, logits, n_rows, vocab, params,
                                              rng_state));
    }
    return TN_ERR_ARG;
}

int kn_fill_uniform_at(const kn_backend *be, void *x, kn_dtype dt, size_t n, uint64_t seed,
                       size_t first, float lo, float hi)
{
    switch (backend_kind("kn_fill_uniform", be)) {
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
