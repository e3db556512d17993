/* kn_rmsnorm and kn_add_rmsnorm (the residual add fused with the norm)
 * against float64 recomputations, normwise per row; in place gives the same
 * bits; the fused op equals kn_add then kn_rmsnorm on the same backend bit
 * for bit (the engine swapped the one for the other), xn == x leaves the
 * normed rows; on CUDA the sum equals the CPU's bits and the norm is within
 * 1e-6 of the CPU's. And the argument checks. */
#include <math.h>
#include <string.h>
#include "common/status.h"
#include "kernels/elementwise.h"
#include "kernels/rmsnorm.h"
#include "tests/ops/op_harness.h"

typedef struct norm_param {
    int rows, dim;
    float eps;
} norm_param;

/* sum = x (+ delta) in double; out = rmsnorm(sum) * w, all in double. */
static void norm_ref(double *sum, double *out, const float *x, const float *delta, const float *w,
                     int rows, int dim, double eps)
{
    for (int r = 0; r < rows; r++) {
        size_t o = (size_t)r * dim;
        double ss = 0.0;
        for (int i = 0; i < dim; i++) {
            sum[o + i] = (double)x[o + i] + (delta ? (double)delta[o + i] : 0.0);
            ss += sum[o + i] * sum[o + i];
        }
        double inv = 1.0 / sqrt(ss / dim + eps);
        for (int i = 0; i < dim; i++)
            out[o + i] = sum[o + i] * inv * w[i];
    }
}

static void check_rows(op_env *e, const float *got, const double *ref, int rows, int dim,
                       const char *what)
{
    double worst = 0.0;
    for (int r = 0; r < rows; r++) {
        double err = tu_max_rel_err(got + (size_t)r * dim, ref + (size_t)r * dim, (size_t)dim);
        if (!(err <= worst))
            worst = isnan(err) ? INFINITY : err;
    }
    op_check_err(e, worst, op_tol_fp32(e, 0), "%s vs float64 (worst row)", what);
}

static void rmsnorm_case(op_env *e, const void *param)
{
    const norm_param *p = param;
    size_t n = (size_t)p->rows * p->dim;
    float *x = op_rand(e, n, -3.f, 3.f), *w = op_rand(e, (size_t)p->dim, 0.5f, 1.5f);
    double *sum = op_host(e, n * sizeof(double)), *ref = op_host(e, n * sizeof(double));
    norm_ref(sum, ref, x, NULL, w, p->rows, p->dim, p->eps);
    float *d_x = op_up(e, x, n * sizeof(float)), *d_w = op_up(e, w, (size_t)p->dim * sizeof(float));
    float *d_out = op_nan(e, n);
    if (!op_ok(e, kn_rmsnorm(e->be, d_out, d_x, d_w, p->rows, p->dim, p->eps), "kn_rmsnorm"))
        return;
    float *got = op_get(e, d_out, n);
    check_rows(e, got, ref, p->rows, p->dim, "rmsnorm");
    /* in place gives the same bits */
    if (op_ok(e, kn_rmsnorm(e->be, d_x, d_x, d_w, p->rows, p->dim, p->eps), "kn_rmsnorm in place"))
        OP_MEM_EQ(e, op_get(e, d_x, n), got, n * sizeof(float));
    if (e->cuda) {
        float *cpu = op_host(e, n * sizeof(float));
        if (op_ok(e, kn_rmsnorm(e->cpu, cpu, x, w, p->rows, p->dim, p->eps), "kn_rmsnorm cpu"))
            op_check_err(e, tu_max_rel_err_f32(got, cpu, n), 1e-6, "rmsnorm vs CPU");
    }
}

static void add_rmsnorm_case(op_env *e, const void *param)
{
    const norm_param *p = param;
    int rows = p->rows, dim = p->dim;
    size_t n = (size_t)rows * dim, bytes = n * sizeof(float);
    float *x0 = op_rand(e, n, -3.f, 3.f), *delta = op_rand(e, n, -2.f, 2.f);
    float *w = op_rand(e, (size_t)dim, 0.5f, 1.5f);
    double *sum = op_host(e, n * sizeof(double)), *ref = op_host(e, n * sizeof(double));
    norm_ref(sum, ref, x0, delta, w, rows, dim, p->eps);
    float *d_x = op_up(e, x0, bytes), *d_delta = op_up(e, delta, bytes);
    float *d_w = op_up(e, w, (size_t)dim * sizeof(float)), *d_xn = op_nan(e, n);
    if (!op_ok(e, kn_add_rmsnorm(e->be, d_x, d_xn, d_delta, d_w, rows, dim, p->eps), "kn_add_rmsnorm"))
        return;
    float *x = op_get(e, d_x, n), *xn = op_get(e, d_xn, n);
    double worst = 0.0;
    for (int r = 0; r < rows; r++) {
        double err = tu_max_rel_err(x + (size_t)r * dim, sum + (size_t)r * dim, (size_t)dim);
        if (!(err <= worst))
            worst = isnan(err) ? INFINITY : err;
    }
    op_check_err(e, worst, op_tol_fp32(e, 0), "add_rmsnorm sum vs float64 (worst row)");
    check_rows(e, xn, ref, rows, dim, "add_rmsnorm");
    /* the unfused pair on the same backend gives the same bits */
    float *d_ux = op_up(e, x0, bytes), *d_uxn = op_nan(e, n);
    if (op_ok(e, kn_add(e->be, d_ux, d_ux, d_delta, n), "kn_add") &&
        op_ok(e, kn_rmsnorm(e->be, d_uxn, d_ux, d_w, rows, dim, p->eps), "kn_rmsnorm")) {
        float *uxn = op_get(e, d_uxn, n);
        op_check(e, memcmp(op_get(e, d_ux, n), x, bytes) == 0 && memcmp(uxn, xn, bytes) == 0,
                 "fused differs from kn_add + kn_rmsnorm");
        /* xn == x leaves the normed rows, same bits */
        op_put(e, d_x, x0, bytes);
        if (op_ok(e, kn_add_rmsnorm(e->be, d_x, d_x, d_delta, d_w, rows, dim, p->eps), "xn == x"))
            OP_MEM_EQ(e, op_get(e, d_x, n), uxn, bytes);
    }
    if (e->cuda) {
        float *cx = op_host(e, bytes), *cxn = op_host(e, bytes);
        memcpy(cx, x0, bytes);
        if (op_ok(e, kn_add_rmsnorm(e->cpu, cx, cxn, delta, w, rows, dim, p->eps), "cpu")) {
            op_check(e, memcmp(x, cx, bytes) == 0, "add_rmsnorm: the sum differs from the CPU's");
            op_check_err(e, tu_max_rel_err_f32(xn, cxn, n), 1e-6, "add_rmsnorm vs CPU");
        }
    }
}

static void rmsnorm_args(op_env *e, const void *param)
{
    (void)param;
    const kn_backend *be = e->be;
    float *x = op_up(e, (float[8]){ 1 }, 8 * sizeof(float));
    float *w = op_up(e, (float[4]){ 1, 1, 1, 1 }, 4 * sizeof(float)), *out = op_nan(e, 8);
    OP_INT_EQ(e, kn_rmsnorm(be, NULL, x, w, 2, 4, 1e-5f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_rmsnorm(be, out, NULL, w, 2, 4, 1e-5f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_rmsnorm(be, out, x, NULL, 2, 4, 1e-5f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_rmsnorm(be, out, x, w, -1, 4, 1e-5f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_rmsnorm(be, out, x, w, 2, 0, 1e-5f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_rmsnorm(be, out, x, w, 2, 4, -1e-5f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_rmsnorm(be, out, x, w, 2, 4, NAN), TN_ERR_ARG);
    OP_INT_EQ(e, kn_rmsnorm(be, out, x, w, 2, 4, INFINITY), TN_ERR_ARG);
    OP_INT_EQ(e, kn_rmsnorm(be, out, x, w, 0, 4, 1e-5f), TN_OK);
}

static void add_rmsnorm_args(op_env *e, const void *param)
{
    (void)param;
    const kn_backend *be = e->be;
    float *x = op_up(e, (float[16]){ 1 }, 16 * sizeof(float));
    float *d = op_up(e, (float[8]){ 1 }, 8 * sizeof(float));
    float *w = op_up(e, (float[4]){ 1, 1, 1, 1 }, 4 * sizeof(float)), *xn = op_nan(e, 8);
    OP_INT_EQ(e, kn_add_rmsnorm(NULL, x, xn, d, w, 2, 4, 1e-5f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_add_rmsnorm(be, NULL, xn, d, w, 2, 4, 1e-5f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_add_rmsnorm(be, x, NULL, d, w, 2, 4, 1e-5f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_add_rmsnorm(be, x, xn, NULL, w, 2, 4, 1e-5f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_add_rmsnorm(be, x, xn, d, NULL, 2, 4, 1e-5f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_add_rmsnorm(be, x, xn, d, w, -1, 4, 1e-5f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_add_rmsnorm(be, x, xn, d, w, 2, 0, 1e-5f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_add_rmsnorm(be, x, xn, d, w, 2, 4, -1e-5f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_add_rmsnorm(be, x, xn, d, w, 2, 4, NAN), TN_ERR_ARG);
    OP_INT_EQ(e, kn_add_rmsnorm(be, x, xn, d, w, 2, 4, INFINITY), TN_ERR_ARG);
    /* xn shifted into x, delta overlapping x or xn */
    OP_INT_EQ(e, kn_add_rmsnorm(be, x, x + 1, d, w, 2, 4, 1e-5f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_add_rmsnorm(be, x, xn, x + 2, w, 1, 4, 1e-5f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_add_rmsnorm(be, x, xn, xn, w, 2, 4, 1e-5f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_add_rmsnorm(be, x, xn, d, w, 0, 4, 1e-5f), TN_OK);
}

void ops_register_norm(void)
{
    /* the CPU tests' shapes with both eps (300 x 256 and 64 x 2880: above
     * the OpenMP threshold), then the CUDA test's (GPT-OSS hidden 2880,
     * Qwen3's per-head q/k norm 513 x 64) */
    static const int small[][2] = { { 1, 1 }, { 3, 7 }, { 5, 64 }, { 17, 129 } };
    static const float eps[] = { 1e-6f, 1e-5f };
    for (size_t s = 0; s < 4; s++)
        for (int k = 0; k < 2; k++) {
            norm_param p = { small[s][0], small[s][1], eps[k] };
            OP_CASE("rmsnorm", OP_ALL, rmsnorm_case, p, "rows=%d dim=%d eps=%g", p.rows, p.dim, p.eps);
            OP_CASE("add_rmsnorm", OP_ALL, add_rmsnorm_case, p, "rows=%d dim=%d eps=%g", p.rows, p.dim,
                    p.eps);
        }
    static const norm_param rms[] = { { 300, 256, 1e-6f }, { 300, 256, 1e-5f }, { 1, 2880, 1e-5f },
                                      { 300, 2880, 1e-5f }, { 7, 37, 1e-5f }, { 64, 4096, 1e-5f },
                                      { 513, 64, 1e-5f } };
    for (size_t i = 0; i < sizeof rms / sizeof rms[0]; i++)
        OP_CASE("rmsnorm", OP_ALL, rmsnorm_case, rms[i], "rows=%d dim=%d eps=%g", rms[i].rows,
                rms[i].dim, rms[i].eps);
    static const norm_param arn[] = { { 64, 2880, 1e-6f }, { 64, 2880, 1e-5f }, { 7, 64, 1e-5f },
                                      { 300, 4096, 1e-5f } };
    for (size_t i = 0; i < sizeof arn / sizeof arn[0]; i++)
        OP_CASE("add_rmsnorm", OP_ALL, add_rmsnorm_case, arn[i], "rows=%d dim=%d eps=%g", arn[i].rows,
                arn[i].dim, arn[i].eps);
    /* GPT-OSS-20B's prefill residual: too big for the CPU's float64 run */
    norm_param big = { 8192, 2880, 1e-5f };
    OP_CASE("add_rmsnorm", OP_CUDA, add_rmsnorm_case, big, "rows=%d dim=%d eps=%g", big.rows, big.dim,
            big.eps);
    OP_CASE("rmsnorm", OP_ALL, rmsnorm_args, big, "rejects bad arguments");
    OP_CASE("add_rmsnorm", OP_ALL, add_rmsnorm_args, big, "rejects bad arguments");
}
