/* The fused decode ops on every backend: kn_rope_kv_append (per-head q/k
 * RMSNorm + RoPE + KV append, kernels/rope_kv.h) and kn_moe_router (router
 * product + routing, kernels/moe_router.h).
 *
 * kn_rope_kv_append: q and k against a float64 norm + rotation (the angle
 * the float32 product pos * inv_freq, as HF computes it), bound the
 * backend's fp32 bound; the pools byte for byte against the CPU's
 * kn_kv_append of the op's own k and v (which fixes the rounding to bf16 /
 * FP8 of exactly the values the op stored, and that nothing else in the
 * pools moved); v untouched. On CUDA also the separate kernels
 * (kn_cuda_set_fused_decode off): the same bits without the q/k norm, and
 * within 1e-6 with it (the norm's double sum runs in another order).
 *
 * kn_moe_router: the logits against a float64 product, bound the fp32
 * product bound; the routing equal to the CPU's kn_moe_route of the op's
 * own logits (ids exactly, weights within 1e-6); a second launch gives the
 * same bits (the fused kernel's arrival counters reset themselves); on CUDA
 * the unfused pair's logits within the bound. Shapes cover GPT-OSS-20B and
 * Qwen3-30B-A3B at decode, the tile edges of the fused kernel (8 tokens a
 * tile, 32 tiles) and the calls it leaves to the separate kernels (over 256
 * tokens, dim not a multiple of 4).
 *
 * The _normed ops (kn_matmul_w_multi_normed, kn_moe_router_normed: the
 * add + RMSNorm in front of the op, kernels/rmsnorm.h): x after the call
 * equal to the float32 sum x + delta bit for bit (unchanged without
 * delta), xn against a float64 norm of it (the backend's fp32 bound), and
 * the outputs equal bit for bit to the plain op run afterwards on the xn
 * the call wrote (whose own cases check it against float64); a second
 * call on a restored x gives the same bits (the fused GEMV's counter is
 * back at zero). Shapes: GPT-OSS-20B's q/k/v (FP8, one row: CUDA's
 * one-launch GEMV) with and without delta, the longest row it takes and
 * one chunk longer, three rows and f32 weights (the norm and the op
 * apart), Qwen3's; the router (the pair on both backends) at GPT-OSS and
 * Qwen3 decode shapes, several tiles, and a dim off the float4 edge. On
 * CUDA each also with kn_cuda_set_fused_decode off. */
#include <math.h>
#include <string.h>
#include "common/status.h"
#include "kernels/attention.h"
#include "kernels/fp8.h"
#include "kernels/moe.h"
#include "kernels/moe_router.h"
#include "kernels/rope.h"
#include "kernels/rope_kv.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "tests/ops/ops_fp8.h"
#include "tests/ops/op_harness.h"
#include "kernels/cuda/cuda_backend.h"

enum { RKV_MAX_SEQS = 8 };

typedef struct rkv_param {
    int n_seqs, n_q[RKV_MAX_SEQS];   /* rows per sequence */
    int n_heads, n_kv_heads, head_dim, page_size;
    int qk_norm, yarn;
    kn_dtype kv;
} rkv_param;

/* x[n][hd] (in place, double): RMSNorm per head vector, then the rotation. */
static void ref_norm_rope(double *x, const float *w, float eps, int n_heads, int hd, float pos,
                          const float *inv, float scale)
{
    const int half = hd / 2;
    for (int h = 0; h < n_heads; h++) {
        double *xh = x + (size_t)h * hd;
        if (w) {
            double ss = 0.0;
            for (int i = 0; i < hd; i++)
                ss += xh[i] * xh[i];
            double inv_rms = 1.0 / sqrt(ss / hd + (double)eps);
            for (int i = 0; i < hd; i++)
                xh[i] = xh[i] * inv_rms * w[i];
        }
        for (int i = 0; i < half; i++) {
            double a = (double)(pos * inv[i]);
            double c = cos(a) * scale, s = sin(a) * scale, x0 = xh[i], x1 = xh[i + half];
            xh[i] = x0 * c - x1 * s;
            xh[i + half] = x1 * c + x0 * s;
        }
    }
}

static void rope_kv_case(op_env *e, const void *param)
{
    const rkv_param *c = param;
    const int hd = c->head_dim, half = hd / 2, nh = c->n_heads, nkv = c->n_kv_heads;
    const int ps = c->page_size;
    kn_rope_config cfg = {.head_dim = hd, .theta = c->yarn ? 150000.0 : 1000000.0,
                          .yarn = c->yarn, .factor = 32.0, .beta_fast = 32.0, .beta_slow = 1.0,
                          .original_max_position = 4096, .truncate = 0};
    float *inv = op_host(e, (size_t)half * 4), scale = 0.f;
    if (!op_ok(e, kn_rope_inv_freq(&cfg, inv, &scale), "kn_rope_inv_freq"))
        return;
    /* the batch: each sequence's rows are its newest tokens, pages shuffled
     * over a pool with spare pages */
    int32_t q_offset[RKV_MAX_SEQS + 1] = {0}, kv_len[RKV_MAX_SEQS];
    int rows = 0, max_q = 0, max_kv = 0, max_pages = 1;
    for (int s = 0; s < c->n_seqs; s++) {
        kv_len[s] = c->n_q[s] + tu_rand_int(&e->rng, 3 * ps);
        q_offset[s + 1] = q_offset[s] + c->n_q[s];
        rows += c->n_q[s];
        max_q = c->n_q[s] > max_q ? c->n_q[s] : max_q;
        max_kv = kv_len[s] > max_kv ? kv_len[s] : max_kv;
        int np = (kv_len[s] + ps - 1) / ps;
        max_pages = np > max_pages ? np : max_pages;
    }
    const int n_pages = c->n_seqs * max_pages + 2;
    int32_t *perm = op_host(e, (size_t)n_pages * 4), *pt = op_host(e, (size_t)c->n_seqs * max_pages * 4);
    for (int i = 0; i < n_pages; i++)
        perm[i] = i;
    tu_rand_shuffle_i32(&e->rng, perm, n_pages);
    for (int s = 0, next = 0; s < c->n_seqs; s++)
        for (int p = 0; p < max_pages; p++)
            pt[(size_t)s * max_pages + p] = perm[next++];
    int32_t *pos = op_host(e, (size_t)rows * 4);
    for (int s = 0; s < c->n_seqs; s++)
        for (int r = q_offset[s]; r < q_offset[s + 1]; r++)
            pos[r] = kv_len[s] - c->n_q[s] + (r - q_offset[s]);

    const size_t qn = (size_t)rows * nh * hd, kn = (size_t)rows * nkv * hd;
    float *q = op_rand(e, qn, -2.f, 2.f), *k = op_rand(e, kn, -2.f, 2.f), *v = op_rand(e, kn, -2.f, 2.f);
    float *qw = c->qk_norm ? op_rand(e, (size_t)hd, 0.5f, 1.5f) : NULL;
    float *kw = c->qk_norm ? op_rand(e, (size_t)hd, 0.5f, 1.5f) : NULL;
    const float eps = 1e-6f;
    const size_t pool_bytes = (size_t)n_pages * nkv * ps * kn_kv_row_bytes(c->kv, hd);
    uint8_t *pattern = op_host(e, pool_bytes);
    memset(pattern, 0x3c, pool_bytes);

    /* float64 reference of q and k */
    double *rq = op_host(e, qn * sizeof(double)), *rk = op_host(e, kn * sizeof(double));
    for (size_t i = 0; i < qn; i++)
        rq[i] = q[i];
    for (size_t i = 0; i < kn; i++)
        rk[i] = k[i];
    for (int r = 0; r < rows; r++) {
        ref_norm_rope(rq + (size_t)r * nh * hd, qw, eps, nh, hd, (float)pos[r], inv, scale);
        ref_norm_rope(rk + (size_t)r * nkv * hd, kw, eps, nkv, hd, (float)pos[r], inv, scale);
    }

    kn_seq_batch hb = {.n_seqs = c->n_seqs, .n_rows = rows, .max_pages = max_pages,
                       .max_q_len = max_q, .max_kv_len = max_kv, .q_offset = q_offset,
                       .kv_len = kv_len, .page_table = pt, .n_pages = n_pages};
    kn_seq_batch db = hb;
    db.q_offset = op_up(e, q_offset, (size_t)(c->n_seqs + 1) * 4);
    db.kv_len = op_up(e, kv_len, (size_t)c->n_seqs * 4);
    db.page_table = op_up(e, pt, (size_t)c->n_seqs * max_pages * 4);
    kn_qk_rope rp = {.q_norm = qw ? op_up(e, qw, (size_t)hd * 4) : NULL,
                     .k_norm = kw ? op_up(e, kw, (size_t)hd * 4) : NULL, .eps = eps,
                     .pos = op_up(e, pos, (size_t)rows * 4), .inv_freq = op_up(e, inv, (size_t)half * 4),
                     .attn_scale = scale};
    float *d_q = op_up(e, q, qn * 4), *d_k = op_up(e, k, kn * 4), *d_v = op_up(e, v, kn * 4);
    kn_kv_pools dp = {op_up(e, pattern, pool_bytes), op_up(e, pattern, pool_bytes), c->kv};
    if (!op_ok(e, kn_rope_kv_append(e->be, d_q, d_k, d_v, &dp, &db, nh, nkv, hd, ps, &rp),
               "kn_rope_kv_append"))
        return;
    float *gq = op_get(e, d_q, qn), *gk = op_get(e, d_k, kn), *gv = op_get(e, d_v, kn);
    op_check_err(e, tu_max_rel_err(gq, rq, qn), op_tol_fp32(e, 0), "q vs float64");
    op_check_err(e, tu_max_rel_err(gk, rk, kn), op_tol_fp32(e, 0), "k vs float64");
    OP_MEM_EQ(e, gv, v, kn * 4);
    /* the pools: the CPU's append of the op's own k and v */
    uint8_t *wk = op_host(e, pool_bytes), *wv = op_host(e, pool_bytes);
    memcpy(wk, pattern, pool_bytes);
    memcpy(wv, pattern, pool_bytes);
    kn_kv_pools hp = {wk, wv, c->kv};
    if (!op_ok(e, kn_kv_append(e->cpu, &hp, gk, v, &hb, nkv, hd, ps), "cpu kn_kv_append"))
        return;
    uint8_t *pk = op_host(e, pool_bytes), *pv = op_host(e, pool_bytes);
    op_down(e, pk, dp.k, pool_bytes);
    op_down(e, pv, dp.v, pool_bytes);
    op_check(e, memcmp(pk, wk, pool_bytes) == 0 && memcmp(pv, wv, pool_bytes) == 0,
             "the %s pools differ from kn_kv_append of the op's k and v", kn_dtype_name(c->kv));
#ifdef TANDEM_CUDA
    if (e->cuda) {   /* the separate kernels */
        float *uq = op_up(e, q, qn * 4), *uk = op_up(e, k, kn * 4);
        kn_kv_pools up = {op_up(e, pattern, pool_bytes), op_up(e, pattern, pool_bytes), c->kv};
        kn_cuda_set_fused_decode(e->be, 0);
        int rc = kn_rope_kv_append(e->be, uq, uk, d_v, &up, &db, nh, nkv, hd, ps, &rp);
        kn_cuda_set_fused_decode(e->be, 1);
        if (!op_ok(e, rc, "kn_rope_kv_append unfused"))
            return;
        float *xq = op_get(e, uq, qn), *xk = op_get(e, uk, kn);
        if (!c->qk_norm) {
            op_check(e, memcmp(xq, gq, qn * 4) == 0 && memcmp(xk, gk, kn * 4) == 0,
                     "fused q/k differ from the separate kernels'");
            op_down(e, wk, up.k, pool_bytes);
            op_down(e, wv, up.v, pool_bytes);
            op_check(e, memcmp(pk, wk, pool_bytes) == 0 && memcmp(pv, wv, pool_bytes) == 0,
                     "fused pools differ from the separate kernels'");
        } else {
            op_check_err(e, tu_max_rel_err_f32(gq, xq, qn), 1e-6, "q vs the separate kernels");
            op_check_err(e, tu_max_rel_err_f32(gk, xk, kn), 1e-6, "k vs the separate kernels");
        }
    }
#endif
}

static void rope_kv_rejects_bad_arguments(op_env *e, const void *param)
{
    (void)param;
    const kn_backend *be = e->be;
    float *q = op_nan(e, 64), *k = op_nan(e, 32), *v = op_nan(e, 32);
    float *inv = op_up(e, (float[4]){1, 1, 1, 1}, 16), *w = op_up(e, (float[8]){1}, 32);
    int32_t *pos = op_up(e, (int32_t[1]){0}, 4), *qo = op_up(e, (int32_t[2]){0, 1}, 8);
    int32_t *kl = op_up(e, (int32_t[1]){1}, 4), *pt = op_up(e, (int32_t[1]){0}, 4);
    uint8_t *pool = op_dev(e, 4 * 8 * 4);
    kn_kv_pools pools = {pool, pool + 64, KN_F32};
    kn_seq_batch b = {.n_seqs = 1, .n_rows = 1, .max_pages = 1, .max_q_len = 1, .max_kv_len = 1,
                      .q_offset = qo, .kv_len = kl, .page_table = pt, .n_pages = 1};
    kn_qk_rope r = {.pos = pos, .inv_freq = inv, .attn_scale = 1.f};
    OP_INT_EQ(e, kn_rope_kv_append(be, q, k, v, &pools, &b, 2, 1, 8, 2, &r), TN_OK);
    OP_INT_EQ(e, kn_rope_kv_append(be, NULL, k, v, &pools, &b, 2, 1, 8, 2, &r), TN_ERR_ARG);
    OP_INT_EQ(e, kn_rope_kv_append(be, q, k, v, &pools, &b, 2, 1, 8, 2, NULL), TN_ERR_ARG);
    OP_INT_EQ(e, kn_rope_kv_append(be, q, k, v, &pools, &b, 2, 1, 7, 2, &r), TN_ERR_ARG); /* odd */
    OP_INT_EQ(e, kn_rope_kv_append(be, q, k, v, &pools, &b, 0, 1, 8, 2, &r), TN_ERR_ARG);
    OP_INT_EQ(e, kn_rope_kv_append(be, q, q + 8, v, &pools, &b, 2, 1, 8, 2, &r), TN_ERR_ARG);
    OP_INT_EQ(e, kn_rope_kv_append(be, q, k, v, NULL, &b, 2, 1, 8, 2, &r), TN_ERR_ARG);
    OP_INT_EQ(e, kn_rope_kv_append(be, q, k, v, &pools, NULL, 2, 1, 8, 2, &r), TN_ERR_ARG);
    kn_qk_rope bad = r;
    bad.q_norm = w;   /* without k_norm */
    OP_INT_EQ(e, kn_rope_kv_append(be, q, k, v, &pools, &b, 2, 1, 8, 2, &bad), TN_ERR_ARG);
    bad.k_norm = w;
    bad.eps = NAN;
    OP_INT_EQ(e, kn_rope_kv_append(be, q, k, v, &pools, &b, 2, 1, 8, 2, &bad), TN_ERR_ARG);
    bad = r;
    bad.attn_scale = INFINITY;
    OP_INT_EQ(e, kn_rope_kv_append(be, q, k, v, &pools, &b, 2, 1, 8, 2, &bad), TN_ERR_ARG);
    bad = r;
    bad.pos = NULL;
    OP_INT_EQ(e, kn_rope_kv_append(be, q, k, v, &pools, &b, 2, 1, 8, 2, &bad), TN_ERR_ARG);
}

typedef struct router_param {
    int n_tokens, dim, n_experts, k, mode, renormalize, bias;
} router_param;

static void router_case(op_env *e, const void *param)
{
    const router_param *p = param;
    const int T = p->n_tokens, D = p->dim, E = p->n_experts, K = p->k;
    const size_t ln = (size_t)T * E;
    float *x = op_rand(e, (size_t)T * D, -1.f, 1.f), *w = op_rand(e, (size_t)E * D, -0.1f, 0.1f);
    float *bias = p->bias ? op_rand(e, (size_t)E, -0.5f, 0.5f) : NULL;
    double *ref = op_host(e, ln * sizeof(double));
    for (int t = 0; t < T; t++)
        for (int j = 0; j < E; j++) {
            double acc = bias ? bias[j] : 0.0;
            for (int i = 0; i < D; i++)
                acc += (double)x[(size_t)t * D + i] * w[(size_t)j * D + i];
            ref[(size_t)t * E + j] = acc;
        }
    float *d_x = op_up(e, x, (size_t)T * D * 4), *d_w = op_up(e, w, (size_t)E * D * 4);
    float *d_b = bias ? op_up(e, bias, (size_t)E * 4) : NULL, *d_l = op_nan(e, ln);
    int32_t *d_idx = op_dev(e, (size_t)T * K * 4);
    float *d_ew = op_nan(e, (size_t)T * K);
    if (!op_ok(e, kn_moe_router(e->be, d_idx, d_ew, d_l, d_x, d_w, d_b, T, D, E, K,
                                (kn_route_mode)p->mode, p->renormalize), "kn_moe_router"))
        return;
    float *gl = op_get(e, d_l, ln), *gw = op_get(e, d_ew, (size_t)T * K);
    int32_t *gi = op_host(e, (size_t)T * K * 4);
    op_down(e, gi, d_idx, (size_t)T * K * 4);
    op_check_err(e, tu_max_rel_err(gl, ref, ln), op_tol_fp32(e, 1), "logits vs float64");
    /* the routing of the op's own logits, on the CPU */
    int32_t *wi = op_host(e, (size_t)T * K * 4);
    float *ww = op_host(e, (size_t)T * K * 4);
    if (!op_ok(e, kn_moe_route(e->cpu, wi, ww, gl, T, E, K, (kn_route_mode)p->mode, p->renormalize),
               "cpu kn_moe_route"))
        return;
    op_check(e, memcmp(gi, wi, (size_t)T * K * 4) == 0, "expert ids differ from kn_moe_route's");
    op_check_err(e, tu_max_rel_err_f32(gw, ww, (size_t)T * K), 1e-6, "weights vs kn_moe_route");
    /* again: the same bits (the fused kernel's counters are back at zero) */
    op_poison(e, d_ew, (size_t)T * K);
    if (op_ok(e, kn_moe_router(e->be, d_idx, d_ew, d_l, d_x, d_w, d_b, T, D, E, K,
                               (kn_route_mode)p->mode, p->renormalize), "second kn_moe_router")) {
        int32_t *gi2 = op_host(e, (size_t)T * K * 4);
        op_down(e, gi2, d_idx, (size_t)T * K * 4);
        op_check(e, memcmp(gi2, gi, (size_t)T * K * 4) == 0 &&
                        memcmp(op_get(e, d_ew, (size_t)T * K), gw, (size_t)T * K * 4) == 0,
                 "a second launch differs");
    }
#ifdef TANDEM_CUDA
    if (e->cuda) {   /* the separate kernels' logits */
        float *ul = op_nan(e, ln);
        kn_cuda_set_fused_decode(e->be, 0);
        int rc = kn_moe_router(e->be, d_idx, d_ew, ul, d_x, d_w, d_b, T, D, E, K,
                               (kn_route_mode)p->mode, p->renormalize);
        kn_cuda_set_fused_decode(e->be, 1);
        if (op_ok(e, rc, "kn_moe_router unfused"))
            op_check_err(e, tu_max_rel_err(op_get(e, ul, ln), ref, ln), op_tol_fp32(e, 1),
                         "unfused logits vs float64");
    }
#endif
}

static void router_rejects_bad_arguments(op_env *e, const void *param)
{
    (void)param;
    const kn_backend *be = e->be;
    float *x = op_up(e, (float[8]){1}, 32), *w = op_up(e, (float[16]){1}, 64);
    float *l = op_nan(e, 8), *ew = op_nan(e, 4);
    int32_t *idx = op_dev(e, 16);
    const kn_route_mode m = KN_ROUTE_TOPK_SOFTMAX;
    OP_INT_EQ(e, kn_moe_router(be, idx, ew, l, x, w, NULL, 2, 4, 4, 2, m, 0), TN_OK);
    OP_INT_EQ(e, kn_moe_router(be, NULL, ew, l, x, w, NULL, 2, 4, 4, 2, m, 0), TN_ERR_ARG);
    OP_INT_EQ(e, kn_moe_router(be, idx, ew, NULL, x, w, NULL, 2, 4, 4, 2, m, 0), TN_ERR_ARG);
    OP_INT_EQ(e, kn_moe_router(be, idx, ew, l, NULL, w, NULL, 2, 4, 4, 2, m, 0), TN_ERR_ARG);
    OP_INT_EQ(e, kn_moe_router(be, idx, ew, l, x, w, NULL, 2, 4, 4, 5, m, 0), TN_ERR_ARG); /* k > E */
    OP_INT_EQ(e, kn_moe_router(be, idx, ew, l, x, w, NULL, 2, 0, 4, 2, m, 0), TN_ERR_ARG);
    OP_INT_EQ(e, kn_moe_router(be, idx, ew, l, x, w, NULL, 2, 4, 4, 2, (kn_route_mode)7, 0), TN_ERR_ARG);
    OP_INT_EQ(e, kn_moe_router(be, idx, ew, x, x, w, NULL, 2, 4, 4, 2, m, 0), TN_ERR_ARG); /* overlap */
    OP_INT_EQ(e, kn_moe_router(be, idx, ew, l, x, w, NULL, 0, 4, 4, 2, m, 0), TN_OK);
}

/* The norm of a _normed case: x, delta (or NULL), weight on the host and
 * the device, xn on the device (NaN). */
typedef struct normed_in {
    float *x, *delta, *w;           /* host */
    float *d_x, *d_delta, *d_w, *d_xn;
    kn_norm_in in;
} normed_in;

static void normed_in_make(op_env *e, normed_in *n, int rows, int dim, int with_delta)
{
    const size_t nx = (size_t)rows * dim;
    n->x = op_rand(e, nx, -2.f, 2.f);
    n->delta = with_delta ? op_rand(e, nx, -1.f, 1.f) : NULL;
    n->w = op_rand(e, (size_t)dim, 0.5f, 1.5f);
    n->d_x = op_up(e, n->x, nx * 4);
    n->d_delta = with_delta ? op_up(e, n->delta, nx * 4) : NULL;
    n->d_w = op_up(e, n->w, (size_t)dim * 4);
    n->d_xn = op_nan(e, nx);
    n->in = (kn_norm_in){n->d_x, n->d_delta, n->d_xn, n->d_w, 1e-5f};
}

/* x after the call is x + delta in float32 (x without delta), xn the
 * float64 norm of it within the fp32 bound; returns xn as the call left
 * it (host). */
static float *normed_in_check(op_env *e, const normed_in *n, int rows, int dim)
{
    const size_t nx = (size_t)rows * dim;
    float *want = op_host(e, nx * 4);
    for (size_t i = 0; i < nx; i++)
        want[i] = n->delta ? n->x[i] + n->delta[i] : n->x[i];
    float *gx = op_get(e, n->d_x, nx), *gxn = op_get(e, n->d_xn, nx);
    op_check(e, memcmp(gx, want, nx * 4) == 0, "x after the call is not x + delta in float32");
    double worst = 0.0;
    double *ref = op_host(e, (size_t)dim * 8);
    for (int r = 0; r < rows; r++) {
        const float *xr = want + (size_t)r * dim;
        double ss = 0.0;
        for (int i = 0; i < dim; i++)
            ss += (double)xr[i] * xr[i];
        const double inv = 1.0 / sqrt(ss / dim + 1e-5);
        for (int i = 0; i < dim; i++)
            ref[i] = xr[i] * inv * n->w[i];
        const double err = tu_max_rel_err(gxn + (size_t)r * dim, ref, (size_t)dim);
        if (!(err <= worst))
            worst = isnan(err) ? INFINITY : err;
    }
    op_check_err(e, worst, op_tol_fp32(e, 0), "xn vs float64 (worst row)");
    return gxn;
}

typedef struct mm_normed_param {
    int m, k, n_lin, n[3], fp8, delta;
} mm_normed_param;

static void mm_normed_run(op_env *e, const mm_normed_param *p, const char *how)
{
    const int m = p->m, k = p->k;
    normed_in ni;
    normed_in_make(e, &ni, m, k, p->delta);
    kn_weight w[3];
    kn_linear lin[3], plain[3];
    for (int i = 0; i < p->n_lin; i++) {
        if (p->fp8) {
            uint8_t *wq;
            float *ws;
            ops_fp8_weight(e, p->n[i], k, 1, &wq, &ws);
            w[i] = (kn_weight){KN_FP8_E4M3, op_up(e, wq, kn_fp8_data_bytes(p->n[i], k)),
                               op_up(e, ws, kn_fp8_scale_count(p->n[i], k) * sizeof(float))};
        } else {
            w[i] = (kn_weight){KN_F32, op_up(e, op_rand(e, (size_t)p->n[i] * k, -0.1f, 0.1f),
                                             (size_t)p->n[i] * k * 4), NULL};
        }
        float *bias = op_up(e, op_rand(e, (size_t)p->n[i], -0.5f, 0.5f), (size_t)p->n[i] * 4);
        lin[i] = (kn_linear){op_nan(e, (size_t)m * p->n[i]), &w[i], bias, p->n[i]};
        plain[i] = lin[i];
        plain[i].out = op_nan(e, (size_t)m * p->n[i]);
    }
    if (!op_ok(e, kn_matmul_w_multi_normed(e->be, lin, p->n_lin, &ni.in, m, k), how))
        return;
    float *gxn = normed_in_check(e, &ni, m, k);
    if (!op_ok(e, kn_matmul_w_multi(e->be, plain, p->n_lin, ni.d_xn, m, k), "kn_matmul_w_multi on xn"))
        return;
    float *first[3];
    for (int i = 0; i < p->n_lin; i++) {
        const size_t no = (size_t)m * p->n[i];
        first[i] = op_get(e, lin[i].out, no);
        op_check(e, memcmp(first[i], op_get(e, plain[i].out, no), no * 4) == 0,
                 "%s: output %d differs from kn_matmul_w_multi's on its xn", how, i);
    }
    /* again from the same x: the same bits */
    op_put(e, ni.d_x, ni.x, (size_t)m * k * 4);
    op_poison(e, ni.d_xn, (size_t)m * k);
    for (int i = 0; i < p->n_lin; i++)
        op_poison(e, lin[i].out, (size_t)m * p->n[i]);
    if (!op_ok(e, kn_matmul_w_multi_normed(e->be, lin, p->n_lin, &ni.in, m, k), "second call"))
        return;
    op_check(e, memcmp(op_get(e, ni.d_xn, (size_t)m * k), gxn, (size_t)m * k * 4) == 0,
             "%s: a second call's xn differs", how);
    for (int i = 0; i < p->n_lin; i++)
        op_check(e, memcmp(op_get(e, lin[i].out, (size_t)m * p->n[i]), first[i], (size_t)m * p->n[i] * 4) == 0,
                 "%s: a second call's output %d differs", how, i);
}

static void mm_normed_case(op_env *e, const void *param)
{
    mm_normed_run(e, param, "kn_matmul_w_multi_normed");
#ifdef TANDEM_CUDA
    if (e->cuda) { /* the norm and the op as separate launches */
        kn_cuda_set_fused_decode(e->be, 0);
        mm_normed_run(e, param, "kn_matmul_w_multi_normed unfused");
        kn_cuda_set_fused_decode(e->be, 1);
    }
#endif
}

static void router_normed_run(op_env *e, const router_param *p, int with_delta, const char *how)
{
    const int T = p->n_tokens, D = p->dim, E = p->n_experts, K = p->k;
    const size_t ln = (size_t)T * E;
    normed_in ni;
    normed_in_make(e, &ni, T, D, with_delta);
    float *d_w = op_up(e, op_rand(e, (size_t)E * D, -0.1f, 0.1f), (size_t)E * D * 4);
    float *d_b = p->bias ? op_up(e, op_rand(e, (size_t)E, -0.5f, 0.5f), (size_t)E * 4) : NULL;
    float *d_l = op_nan(e, ln), *d_l2 = op_nan(e, ln), *d_ew = op_nan(e, (size_t)T * K),
          *d_ew2 = op_nan(e, (size_t)T * K);
    int32_t *d_idx = op_dev(e, (size_t)T * K * 4), *d_idx2 = op_dev(e, (size_t)T * K * 4);
    const kn_route_mode mode = (kn_route_mode)p->mode;
    if (!op_ok(e, kn_moe_router_normed(e->be, d_idx, d_ew, d_l, &ni.in, d_w, d_b, T, D, E, K, mode,
                                       p->renormalize), how))
        return;
    float *gxn = normed_in_check(e, &ni, T, D);
    if (!op_ok(e, kn_moe_router(e->be, d_idx2, d_ew2, d_l2, ni.d_xn, d_w, d_b, T, D, E, K, mode, p->renormalize),
               "kn_moe_router on xn"))
        return;
    float *gl = op_get(e, d_l, ln), *gw = op_get(e, d_ew, (size_t)T * K);
    int32_t *gi = op_host(e, (size_t)T * K * 4), *gi2 = op_host(e, (size_t)T * K * 4);
    op_down(e, gi, d_idx, (size_t)T * K * 4);
    op_down(e, gi2, d_idx2, (size_t)T * K * 4);
    op_check(e, memcmp(gl, op_get(e, d_l2, ln), ln * 4) == 0 && memcmp(gi, gi2, (size_t)T * K * 4) == 0 &&
                    memcmp(gw, op_get(e, d_ew2, (size_t)T * K), (size_t)T * K * 4) == 0,
             "%s: logits or routing differ from kn_moe_router's on its xn", how);
    op_put(e, ni.d_x, ni.x, (size_t)T * D * 4);
    op_poison(e, ni.d_xn, (size_t)T * D);
    op_poison(e, d_l, ln);
    if (!op_ok(e, kn_moe_router_normed(e->be, d_idx, d_ew, d_l, &ni.in, d_w, d_b, T, D, E, K, mode,
                                       p->renormalize), "second call"))
        return;
    op_check(e, memcmp(op_get(e, d_l, ln), gl, ln * 4) == 0 &&
                    memcmp(op_get(e, ni.d_xn, (size_t)T * D), gxn, (size_t)T * D * 4) == 0,
             "%s: a second call differs", how);
}

static void router_normed_case(op_env *e, const void *param)
{
    for (int d = 0; d < 2; d++) {
        router_normed_run(e, param, d, d ? "kn_moe_router_normed (delta)" : "kn_moe_router_normed");
#ifdef TANDEM_CUDA
        if (e->cuda) {
            kn_cuda_set_fused_decode(e->be, 0);
            router_normed_run(e, param, d, "kn_moe_router_normed unfused");
            kn_cuda_set_fused_decode(e->be, 1);
        }
#endif
    }
}

static void normed_rejects_bad_arguments(op_env *e, const void *param)
{
    (void)param;
    const kn_backend *be = e->be;
    float *x = op_up(e, (float[8]){1}, 32), *d = op_up(e, (float[8]){1}, 32), *w = op_up(e, (float[4]){1}, 16);
    float *xn = op_nan(e, 8), *out = op_nan(e, 8), *rw = op_up(e, (float[16]){1}, 64);
    float *l = op_nan(e, 8), *ew = op_nan(e, 4);
    int32_t *idx = op_dev(e, 16);
    kn_weight fw = {KN_F32, rw, NULL};
    kn_linear lin = {out, &fw, NULL, 4};
    kn_norm_in ok = {x, d, xn, w, 1e-5f};
    OP_INT_EQ(e, kn_matmul_w_multi_normed(be, &lin, 1, &ok, 2, 4), TN_OK);
    OP_INT_EQ(e, kn_matmul_w_multi_normed(be, &lin, 1, NULL, 2, 4), TN_ERR_ARG);
    kn_norm_in bad = ok;
    bad.xn = x; /* xn over x */
    OP_INT_EQ(e, kn_matmul_w_multi_normed(be, &lin, 1, &bad, 2, 4), TN_ERR_ARG);
    bad = ok;
    bad.weight = NULL;
    OP_INT_EQ(e, kn_matmul_w_multi_normed(be, &lin, 1, &bad, 2, 4), TN_ERR_ARG);
    bad = ok;
    bad.eps = NAN;
    OP_INT_EQ(e, kn_matmul_w_multi_normed(be, &lin, 1, &bad, 2, 4), TN_ERR_ARG);
    kn_linear over = {d, &fw, NULL, 4}; /* the output over delta */
    OP_INT_EQ(e, kn_matmul_w_multi_normed(be, &over, 1, &ok, 2, 4), TN_ERR_ARG);
    const kn_route_mode m = KN_ROUTE_TOPK_SOFTMAX;
    OP_INT_EQ(e, kn_moe_router_normed(be, idx, ew, l, &ok, rw, NULL, 2, 4, 4, 2, m, 0), TN_OK);
    OP_INT_EQ(e, kn_moe_router_normed(be, idx, ew, l, NULL, rw, NULL, 2, 4, 4, 2, m, 0), TN_ERR_ARG);
    OP_INT_EQ(e, kn_moe_router_normed(be, idx, ew, x, &ok, rw, NULL, 2, 4, 4, 2, m, 0), TN_ERR_ARG);
    bad = ok;
    bad.xn = d; /* xn over delta */
    OP_INT_EQ(e, kn_moe_router_normed(be, idx, ew, l, &bad, rw, NULL, 2, 4, 4, 2, m, 0), TN_ERR_ARG);
}

void ops_register_fused_decode(void)
{
    static const kn_dtype kvs[] = {KN_F32, KN_BF16, KN_FP8_E4M3};
    for (int d = 0; d < 3; d++) {
        /* GPT-OSS-20B at batch 1 and 5 (YaRN, head_dim 64, no q/k norm) */
        rkv_param g1 = {1, {1}, 64, 8, 64, 16, 0, 1, kvs[d]};
        rkv_param g5 = {5, {1, 1, 1, 1, 1}, 64, 8, 64, 16, 0, 1, kvs[d]};
        /* Qwen3-30B-A3B at batch 3 (plain RoPE, head_dim 128, q/k norm) */
        rkv_param q3 = {3, {1, 1, 1}, 32, 4, 128, 16, 1, 0, kvs[d]};
        /* several rows per sequence, small heads */
        rkv_param pf = {2, {3, 4}, 4, 2, 16, 4, 1, 1, kvs[d]};
        const rkv_param *ps[] = {&g1, &g5, &q3, &pf};
        for (int i = 0; i < 4; i++)
            OP_CASE("rope_kv_append", OP_ALL, rope_kv_case, *ps[i],
                    "seqs=%d rows0=%d heads=%d/%d head_dim=%d%s%s kv=%s", ps[i]->n_seqs,
                    ps[i]->n_q[0], ps[i]->n_heads, ps[i]->n_kv_heads, ps[i]->head_dim,
                    ps[i]->qk_norm ? " qk_norm" : "", ps[i]->yarn ? " YaRN" : "",
                    kn_dtype_name(kvs[d]));
    }
    /* over the fused kernel's 256 rows: the separate kernels */
    rkv_param big = {1, {300}, 4, 2, 64, 16, 1, 1, KN_BF16};
    OP_CASE("rope_kv_append", OP_ALL, rope_kv_case, big, "seqs=1 rows=300 qk_norm bf16");
    OP_CASE("rope_kv_append", OP_ALL, rope_kv_rejects_bad_arguments, big, "rejects bad arguments");

    static const router_param rt[] = {
        {1, 2880, 32, 4, KN_ROUTE_TOPK_SOFTMAX, 0, 1},   /* GPT-OSS-20B decode */
        {5, 2880, 32, 4, KN_ROUTE_TOPK_SOFTMAX, 0, 1},
        {9, 2880, 128, 4, KN_ROUTE_TOPK_SOFTMAX, 0, 1},  /* GPT-OSS-120B, two tiles */
        {1, 2048, 128, 8, KN_ROUTE_SOFTMAX_TOPK, 1, 0},  /* Qwen3-30B-A3B decode */
        {8, 2048, 128, 8, KN_ROUTE_SOFTMAX_TOPK, 0, 0},
        {64, 2048, 128, 8, KN_ROUTE_SOFTMAX_TOPK, 1, 0},
        {256, 64, 256, 32, KN_ROUTE_TOPK_SOFTMAX, 0, 1}, /* all 32 tiles, 256 experts */
        {300, 256, 32, 4, KN_ROUTE_TOPK_SOFTMAX, 0, 1},  /* over 32 tiles: separate kernels */
        {3, 37, 7, 2, KN_ROUTE_SOFTMAX_TOPK, 0, 1},      /* dim % 4 != 0: separate kernels */
    };
    for (size_t i = 0; i < sizeof rt / sizeof rt[0]; i++)
        OP_CASE("moe_router", OP_ALL, router_case, rt[i], "tokens=%d dim=%d experts=%d k=%d %s%s%s",
                rt[i].n_tokens, rt[i].dim, rt[i].n_experts, rt[i].k,
                rt[i].mode == KN_ROUTE_TOPK_SOFTMAX ? "topk-softmax" : "softmax-topk",
                rt[i].renormalize ? " renorm" : "", rt[i].bias ? " bias" : "");
    router_param none = {0};
    OP_CASE("moe_router", OP_ALL, router_rejects_bad_arguments, none, "rejects bad arguments");

    static const mm_normed_param mn[] = {
        {1, 2880, 3, {4096, 512, 512}, 1, 1}, /* GPT-OSS-20B q/k/v at batch 1 */
        {1, 2880, 3, {4096, 512, 512}, 1, 0}, /* the first layer: no residual to add */
        {1, 2048, 3, {4096, 512, 512}, 1, 1}, /* Qwen3-30B-A3B */
        {1, 4096, 1, {200}, 1, 1},            /* the longest row the one-launch GEMV takes */
        {1, 4112, 1, {64}, 1, 1},             /* one chunk longer: apart */
        {3, 2880, 3, {256, 64, 64}, 1, 1},    /* three rows: apart */
        {1, 300, 2, {40, 24}, 0, 1},          /* f32 weights: apart */
    };
    for (size_t i = 0; i < sizeof mn / sizeof mn[0]; i++)
        OP_CASE("matmul_w_multi_normed", OP_ALL, mm_normed_case, mn[i], "m=%d k=%d n=%d%s%s %s", mn[i].m,
                mn[i].k, mn[i].n[0], mn[i].n_lin > 1 ? "/.." : "", mn[i].delta ? " +delta" : "",
                mn[i].fp8 ? "fp8" : "f32");
    static const router_param rn[] = {
        {1, 2880, 32, 4, KN_ROUTE_TOPK_SOFTMAX, 0, 1},  /* GPT-OSS-20B decode */
        {1, 2048, 128, 8, KN_ROUTE_SOFTMAX_TOPK, 1, 0}, /* Qwen3-30B-A3B decode */
        {2, 2880, 128, 4, KN_ROUTE_TOPK_SOFTMAX, 0, 1},  /* GPT-OSS-120B, two tokens */
        {19, 2880, 128, 4, KN_ROUTE_TOPK_SOFTMAX, 0, 1}, /* three tiles: apart */
        {3, 37, 7, 2, KN_ROUTE_SOFTMAX_TOPK, 0, 1},     /* dim % 4 != 0: apart */
    };
    for (size_t i = 0; i < sizeof rn / sizeof rn[0]; i++)
        OP_CASE("moe_router_normed", OP_ALL, router_normed_case, rn[i], "tokens=%d dim=%d experts=%d k=%d",
                rn[i].n_tokens, rn[i].dim, rn[i].n_experts, rn[i].k);
    OP_CASE("matmul_w_multi_normed", OP_ALL, normed_rejects_bad_arguments, none, "rejects bad arguments");
}
