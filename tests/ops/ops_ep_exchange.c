/* kn_ep_pack, kn_ep_unpack, kn_ep_combine: the packed blocks, slots and
 * padding against a host recomputation (exact: they only move data), the
 * combine against a float64 sum; and the argument checks. */
#include <math.h>
#include <string.h>
#include "common/status.h"
#include "kernels/ep_exchange.h"
#include "tests/ops/op_harness.h"

typedef struct ep_param {
    int n, k, dim, ranks, per_rank, cap;
} ep_param;

static int goes_to(const int32_t *ids, int k, int p, int per_rank, int n_experts)
{
    for (int j = 0; j < k; j++)
        if (ids[j] >= 0 && ids[j] < n_experts && ids[j] / per_rank == p)
            return 1;
    return 0;
}

static void ep_case(op_env *e, const void *param)
{
    const ep_param *p = param;
    const int n = p->n, k = p->k, dim = p->dim, W = p->ranks, cap = p->cap;
    const int n_experts = W * p->per_rank;
    const size_t rw = KN_EP_ROW_WORDS(dim, k), rows = (size_t)W * cap;
    float *x = op_rand(e, (size_t)n * dim, -1.f, 1.f);
    float *ew = op_rand(e, (size_t)n * k, 0.f, 1.f);
    int32_t *eidx = op_host(e, (size_t)n * k * sizeof(int32_t) + 1);
    for (size_t i = 0; i < (size_t)n * k; i++)
        eidx[i] = tu_rand_int(&e->rng, n_experts);
    if (n > 2) {   /* a route outside the experts goes nowhere */
        eidx[k] = -1;
        eidx[2 * k] = n_experts + 3;
    }
    uint32_t *d_send = op_dev(e, rows * rw * 4);
    op_poison(e, d_send, rows * rw);
    int32_t *d_slot = op_dev(e, (size_t)W * n * sizeof(int32_t) + 1);
    float *d_x = op_up(e, x, (size_t)n * dim * sizeof(float));
    int32_t *d_eidx = op_up(e, eidx, (size_t)n * k * sizeof(int32_t));
    float *d_ew = op_up(e, ew, (size_t)n * k * sizeof(float));
    if (!op_ok(e, kn_ep_pack(e->be, d_send, d_slot, d_x, d_eidx, d_ew, n, k, dim, W,
                             p->per_rank, cap), "kn_ep_pack"))
        return;
    uint32_t *send = op_host(e, rows * rw * 4);
    int32_t *slot = op_host(e, (size_t)W * n * sizeof(int32_t) + 1);
    op_down(e, send, d_send, rows * rw * 4);
    op_down(e, slot, d_slot, (size_t)W * n * sizeof(int32_t));
    for (int r = 0; r < W && !e->failed; r++) {
        int row = 0;
        for (int t = 0; t < n && !e->failed; t++) {
            const int32_t *ids = eidx + (size_t)t * k;
            if (!goes_to(ids, k, r, p->per_rank, n_experts)) {
                OP_INT_EQ(e, slot[(size_t)r * n + t], -1);
                continue;
            }
            OP_INT_EQ(e, slot[(size_t)r * n + t], row);
            const uint32_t *got = send + ((size_t)r * cap + row) * rw;
            op_check(e, memcmp(got, x + (size_t)t * dim, (size_t)dim * 4) == 0 &&
                            memcmp(got + dim, ids, (size_t)k * 4) == 0 &&
                            memcmp(got + dim + k, ew + (size_t)t * k, (size_t)k * 4) == 0,
                     "rank %d row %d: not token %d", r, row, t);
            row++;
        }
        for (; row < cap && !e->failed; row++) {
            const uint32_t *got = send + ((size_t)r * cap + row) * rw;
            for (int j = 0; j < k; j++) {
                int32_t id;
                float w;
                memcpy(&id, got + dim + j, 4);
                memcpy(&w, got + dim + k + j, 4);
                op_check(e, id == n_experts && w == 0.0f,
                         "rank %d padding row %d route %d: expert %d weight %g", r, row, j, id,
                         (double)w);
            }
        }
    }
    /* unpack: the same words, split into the expert op's arrays */
    float *d_ux = op_nan(e, rows * dim), *d_uw = op_nan(e, rows * k);
    int32_t *d_ui = op_dev(e, rows * k * sizeof(int32_t));
    if (op_ok(e, kn_ep_unpack(e->be, d_ux, d_ui, d_uw, d_send, (int)rows, k, dim),
              "kn_ep_unpack")) {
        uint32_t *ux = op_host(e, rows * dim * 4), *ui = op_host(e, rows * k * 4),
                 *uw = op_host(e, rows * k * 4);
        op_down(e, ux, d_ux, rows * dim * 4);
        op_down(e, ui, d_ui, rows * k * 4);
        op_down(e, uw, d_uw, rows * k * 4);
        for (size_t r = 0; r < rows && !e->failed; r++) {
            const uint32_t *src = send + r * rw;
            op_check(e, memcmp(ux + r * dim, src, (size_t)dim * 4) == 0 &&
                            memcmp(ui + r * k, src + dim, (size_t)k * 4) == 0 &&
                            memcmp(uw + r * k, src + dim + k, (size_t)k * 4) == 0,
                     "unpacked row %zu differs from the packed one", r);
        }
    }
    /* combine: each token's shares in rank order, against float64 */
    float *shares = op_rand(e, rows * dim, -1.f, 1.f);
    float *d_out = op_nan(e, (size_t)n * dim);
    if (op_ok(e, kn_ep_combine(e->be, d_out, op_up(e, shares, rows * dim * 4), d_slot, n, dim,
                               W, cap), "kn_ep_combine")) {
        float *got = op_get(e, d_out, (size_t)n * dim);
        double worst = 0, scale = 0;
        for (int t = 0; t < n; t++)
            for (int i = 0; i < dim; i++) {
                double ref = 0;
                for (int r = 0; r < W; r++) {
                    int s = slot[(size_t)r * n + t];
                    if (s >= 0)
                        ref += shares[((size_t)r * cap + s) * dim + i];
                }
                double d = fabs((double)got[(size_t)t * dim + i] - ref);
                if (!(d <= worst))
                    worst = isnan(d) ? INFINITY : d;
                if (fabs(ref) > scale)
                    scale = fabs(ref);
            }
        op_check_err(e, worst / (scale > 0 ? scale : 1), op_tol_fp32(e, 0), "kn_ep_combine");
    }
}

static void ep_args(op_env *e, const void *param)
{
    (void)param;
    const kn_backend *be = e->be;
    uint32_t *send = op_dev(e, 4 * KN_EP_ROW_WORDS(4, 2) * 4);
    int32_t *slot = op_dev(e, 4 * sizeof(int32_t));
    float *x = op_nan(e, 8), *w = op_nan(e, 4), *out = op_nan(e, 8);
    int32_t *ids = op_up(e, (int32_t[4]){ 0, 1, 2, 3 }, 16);
    OP_INT_EQ(e, kn_ep_pack(be, send, slot, x, ids, w, 2, 2, 4, 2, 2, 1), TN_ERR_ARG); /* cap < n */
    OP_INT_EQ(e, kn_ep_pack(be, send, slot, x, ids, w, 2, 0, 4, 2, 2, 2), TN_ERR_ARG);
    OP_INT_EQ(e, kn_ep_pack(be, send, slot, x, ids, w, 2, 2, 4, 0, 2, 2), TN_ERR_ARG);
    OP_INT_EQ(e, kn_ep_pack(be, send, slot, x, ids, w, 2, 2, 4, 2, 0, 2), TN_ERR_ARG);
    OP_INT_EQ(e, kn_ep_pack(be, send, NULL, x, ids, w, 2, 2, 4, 2, 2, 2), TN_ERR_ARG);
    OP_INT_EQ(e, kn_ep_pack(be, NULL, slot, x, ids, w, 2, 2, 4, 2, 2, 2), TN_ERR_ARG);
    OP_INT_EQ(e, kn_ep_pack(be, send, NULL, NULL, NULL, NULL, 0, 2, 4, 2, 2, 2), TN_OK);
    OP_INT_EQ(e, kn_ep_unpack(be, x, ids, w, NULL, 2, 2, 4), TN_ERR_ARG);
    OP_INT_EQ(e, kn_ep_unpack(be, x, ids, w, send, -1, 2, 4), TN_ERR_ARG);
    OP_INT_EQ(e, kn_ep_combine(be, out, x, NULL, 2, 4, 1, 2), TN_ERR_ARG);
    OP_INT_EQ(e, kn_ep_combine(be, out, x, slot, 2, 4, 1, 1), TN_ERR_ARG);
    OP_INT_EQ(e, kn_ep_combine(be, x, x, slot, 2, 4, 1, 2), TN_ERR_ARG);   /* aliasing */
}

void ops_register_ep_exchange(void)
{
    static const ep_param cases[] = {
        { 1, 1, 1, 1, 1, 1 },       { 5, 2, 3, 2, 4, 5 },       { 7, 4, 16, 4, 8, 12 },
        { 128, 4, 2880, 4, 8, 128 }, { 1500, 4, 64, 8, 16, 2000 }, { 33, 8, 128, 2, 64, 40 },
        { 0, 4, 32, 4, 2, 3 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        OP_CASE("ep_exchange", OP_ALL, ep_case, cases[i], "n=%d k=%d dim=%d ranks=%d cap=%d",
                cases[i].n, cases[i].k, cases[i].dim, cases[i].ranks, cases[i].cap);
    OP_CASE("ep_exchange", OP_ALL, ep_args, cases[0], "rejects bad arguments");
}
