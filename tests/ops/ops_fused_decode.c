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
 * tokens, dim not a multiple of 4). */
#include <math.h>
#include <string.h>
#include "common/status.h"
#include "kernels/attention.h"
#include "kernels/moe.h"
#include "kernels/moe_router.h"
#include "kernels/rope.h"
#include "kernels/rope_kv.h"
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
}
