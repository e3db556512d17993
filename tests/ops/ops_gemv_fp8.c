/* kn_matmul_w with FP8 weights at decode sizes (1..8 rows), where the CUDA
 * backend runs the GEMV of kernels/cuda/gemv_fp8.cu: x is read as fp32,
 * not quantized, so its result is checked element by element against the
 * float64 value of x . w_real + bias (w_real = code * block scale) within
 * gemv_fp8.cuh's bound, 2^-18 * sum_k |x w_real| (fp32 sums over chains of
 * 29 + K/2048 roundings: K = 4096 gives 31 * 2^-24, under 2^-19), and
 * against the CPU backend, which quantizes x in 1x128 blocks
 * (kernels/matmul.h), within the exact effect of that quantization,
 * sum_k |x - q(x)| |w_real|, plus both sides' fp32 bounds. The CPU (and
 * CUDA with kn_cuda_set_fp8_gemv off: cuBLASLt) are checked against the
 * float64 of the quantized function, as ops_fp8.c does. Outputs start as
 * NaN (op_nan), so an unwritten column fails. Shapes: GPT-OSS's q/k/v/o
 * (2880 -> 4096/512/512, 4096 -> 2880), Qwen3's (2048 -> 512, 4096 ->
 * 2048), and odd ones at the 128-block and 16-element edges (k = 130,
 * 300, 1; n = 129, 1).
 *
 * kn_moe_experts with FP8 weights at 1..4 tokens, where CUDA runs the
 * expert GEMVs of kernels/cuda/moe_gemv_fp8.cu (x and the activation in
 * fp32): against the float64 MoE on the dequantized weights with nothing
 * rounded, normwise 1e-4 (two chained products each within the bound
 * above, and the activation's expf in fp32: measured well under; the
 * quantizing paths sit near 1e-2 of it, ops_moe.c), on GPT-OSS's and
 * Qwen3's shapes, shared experts, an EP share, and dims off the 16 and
 * 128 edges.
 *
 * kn_matmul_w_multi (q, k, v in one call; one GEMV launch on CUDA): each
 * output equal bit for bit to kn_matmul_w of its layer alone on the same
 * backend (which the cases above check against float64), for FP8 layers
 * (GPT-OSS's and Qwen3's q/k/v, odd sizes), a mix of FP8 and f32 layers
 * (CUDA then runs them one by one), and overlapping outputs refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/status.h"
#include "kernels/fp8.h"
#include "kernels/matmul.h"
#include "tests/ops/op_harness.h"
#include "tests/ops/ops_fp8.h"
#include "tests/ops/ops_moe.h"
#ifdef TANDEM_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

typedef struct gemv_param {
    int m, n, k, bias;
} gemv_param;

/* |got - ref| <= bound elementwise (NaN fails); the first misses reported. */
static void check_bound(op_env *e, const float *got, const double *ref, const double *bound, size_t no,
                        const char *what)
{
    size_t bad = 0;
    for (size_t i = 0; i < no; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (!(d <= bound[i])) {
            if (bad++ < 3)
                op_fail(e, "%s: element %zu = %.9g, want %.9g within %.3g", what, i, (double)got[i], ref[i],
                        bound[i]);
        }
    }
    if (bad)
        op_fail(e, "%s: %zu of %zu elements out of bound", what, bad, no);
}

static void gemv_fp8(op_env *e, const void *param)
{
    const gemv_param *p = param;
    const int m = p->m, n = p->n, k = p->k;
    const size_t no = (size_t)m * n;
    float *x = op_rand(e, (size_t)m * k, -2.f, 2.f);
    float *bias = p->bias ? op_rand(e, (size_t)n, -1.f, 1.f) : NULL;
    uint8_t *wq;
    float *ws;
    ops_fp8_weight(e, n, k, 1, &wq, &ws);
    float *wr = op_host(e, (size_t)n * k * sizeof(float)), *xq = op_host(e, (size_t)m * k * sizeof(float));
    kn_fp8_dequantize_weight(wr, wq, ws, n, k);
    for (int i = 0; i < m; i++)
        kn_fp8_round_act_row(xq + (size_t)i * k, x + (size_t)i * k, k);
    /* float64: exact and quantized-x values, sum |x w|, sum |x - q(x)| |w| */
    double *exact = op_host(e, no * 8), *quant = op_host(e, no * 8);
    double *s_abs = op_host(e, no * 8), *q_abs = op_host(e, no * 8), *qs_abs = op_host(e, no * 8);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            const float *xr = x + (size_t)i * k, *qr = xq + (size_t)i * k, *w = wr + (size_t)j * k;
            double ex = bias ? bias[j] : 0.0, qu = ex, sa = 0, qa = 0, qsa = 0;
            for (int c = 0; c < k; c++) {
                ex += (double)xr[c] * w[c];
                qu += (double)qr[c] * w[c];
                sa += fabs((double)xr[c] * w[c]);
                qa += fabs(((double)qr[c] - xr[c]) * w[c]);
                qsa += fabs((double)qr[c] * w[c]);
            }
            const size_t o = (size_t)i * n + j;
            const double ab = bias ? fabs(bias[j]) : 0.0;
            exact[o] = ex, quant[o] = qu, s_abs[o] = sa + ab, q_abs[o] = qa, qs_abs[o] = qsa + ab;
        }
    kn_weight dw = { KN_FP8_E4M3, op_up(e, wq, kn_fp8_data_bytes(n, k)),
                     op_up(e, ws, kn_fp8_scale_count(n, k) * sizeof(float)) };
    float *d_x = op_up(e, x, (size_t)m * k * 4), *d_b = bias ? op_up(e, bias, (size_t)n * 4) : NULL;
    float *d_out = op_nan(e, no);
    if (!op_ok(e, kn_matmul_w(e->be, d_out, d_x, &dw, d_b, m, n, k), "kn_matmul_w fp8"))
        return;
    float *got = op_get(e, d_out, no);
    double *bound = op_host(e, no * 8);
    if (!e->cuda) { /* the quantized function, fp32 sgemm */
        op_check_err(e, tu_max_rel_err(got, quant, no), TU_FP32_REL_TOL, "cpu vs float64 of the FP8 function");
        /* and x's quantization moves it from the exact value by at most
         * sum |x - q(x)| |w| (the bound the CUDA run's comparison with
         * the CPU adds to the GEMV's) */
        for (size_t i = 0; i < no; i++)
            bound[i] = q_abs[i] + ((double)k + 2) * 0x1p-24 * (s_abs[i] + q_abs[i]) + 1e-30;
        check_bound(e, got, exact, bound, no, "cpu vs float64 of x w_real");
        return;
    }
#ifdef TANDEM_CUDA
    /* every path the backend has for these rows, each on its own (the call
     * above took the default one; its output is checked here as the path
     * it is) */
    const int gemv_was = kn_cuda_fp8_gemv_on(e->be), skinny_was = kn_cuda_fp8_skinny(e->be);
    float *cpu = op_host(e, no * 4);
    double *cpu_d = op_host(e, no * 8);
    kn_weight hw = { KN_FP8_E4M3, wq, ws };
    if (!op_ok(e, kn_matmul_w(e->cpu, cpu, x, &hw, bias, m, n, k), "kn_matmul_w fp8 cpu"))
        return;
    for (size_t i = 0; i < no; i++)
        cpu_d[i] = cpu[i];
    /* the GEMV: fp32 x, within gemv_fp8.cuh's bound of the exact value */
    if (m <= KN_CUDA_FP8_GEMV_ROWS) {
        kn_cuda_set_fp8_skinny(e->be, 0);
        kn_cuda_set_fp8_gemv(e->be, 1);
        float *d_g = op_nan(e, no);
        const int rc = kn_matmul_w(e->be, d_g, d_x, &dw, d_b, m, n, k);
        if (op_ok(e, rc, "kn_matmul_w fp8, gemv")) {
            float *g = op_get(e, d_g, no);
            for (size_t i = 0; i < no; i++)
                bound[i] = 0x1p-18 * s_abs[i] + 1e-30;
            check_bound(e, g, exact, bound, no, "gemv vs float64 of x w_real");
            for (size_t i = 0; i < no; i++)
                bound[i] = q_abs[i] + ((double)k + 2) * 0x1p-24 * (s_abs[i] + q_abs[i]) + 0x1p-18 * s_abs[i] + 1e-30;
            check_bound(e, g, cpu_d, bound, no, "gemv vs CPU (x quantized there)");
        }
    }
    /* the skinny kernel: the quantized function, within
     * gemm_fp8_skinny.cuh's bound of its float64 value, and of the CPU's */
    if (m <= KN_CUDA_FP8_SKINNY_ROWS) {
        kn_cuda_set_fp8_skinny(e->be, 1);
        float *d_s = op_nan(e, no);
        const int rc = kn_matmul_w(e->be, d_s, d_x, &dw, d_b, m, n, k);
        if (op_ok(e, rc, "kn_matmul_w fp8, skinny")) {
            float *sk = op_get(e, d_s, no);
            for (size_t i = 0; i < no; i++)
                bound[i] = 0x1p-15 * qs_abs[i] + 1e-30;
            check_bound(e, sk, quant, bound, no, "skinny vs float64 of q(x) w_real");
            for (size_t i = 0; i < no; i++)
                bound[i] = (0x1p-15 + ((double)k + 2) * 0x1p-24) * qs_abs[i] + 1e-30;
            check_bound(e, sk, cpu_d, bound, no, "skinny vs CPU");
        }
    }
    /* both off: the cuBLASLt path (odd n: it has no algorithm and says so,
     * ops_fp8.c; for other n that are not a multiple of 16 whether it has
     * one depends on the cuBLASLt version: the H200's 13.0 has none for n
     * = 130, so "unsupported" is an acceptable answer there, a wrong result
     * never is) */
    kn_cuda_set_fp8_skinny(e->be, 0);
    kn_cuda_set_fp8_gemv(e->be, 0);
    float *d_off = op_nan(e, no);
    int rc = kn_matmul_w(e->be, d_off, d_x, &dw, d_b, m, n, k);
    kn_cuda_set_fp8_gemv(e->be, gemv_was);
    kn_cuda_set_fp8_skinny(e->be, skinny_was);
    if (n % 2 != 0) {
        OP_INT_EQ(e, rc, TN_ERR_UNSUPPORTED);
    } else if (n % 16 != 0 && rc == TN_ERR_UNSUPPORTED) {
        /* no cuBLASLt algorithm for this n: the kernels above are the paths */
    } else if (op_ok(e, rc, "kn_matmul_w fp8, gemv and skinny off")) {
        float *off = op_get(e, d_off, no);
        op_check_err(e, tu_max_rel_err(off, quant, no), 1e-3, "cuBLASLt fp8 vs float64");
    }
    /* the default path's output is one of the above */
    const int takes_skinny = skinny_was > 0 && m >= skinny_was && m <= KN_CUDA_FP8_SKINNY_ROWS;
    if (takes_skinny) {
        for (size_t i = 0; i < no; i++)
            bound[i] = 0x1p-15 * qs_abs[i] + 1e-30;
        check_bound(e, got, quant, bound, no, "default path (skinny) vs float64 of q(x) w_real");
    } else if (gemv_was && m <= KN_CUDA_FP8_GEMV_ROWS) {
        for (size_t i = 0; i < no; i++)
            bound[i] = 0x1p-18 * s_abs[i] + 1e-30;
        check_bound(e, got, exact, bound, no, "default path (gemv) vs float64 of x w_real");
    } else {
        op_check_err(e, tu_max_rel_err(got, quant, no), 1e-3, "default path (cuBLASLt) vs float64");
    }
#else
    op_fail(e, "a CUDA backend in a build without TANDEM_CUDA");
#endif
}

typedef struct moe_gemv_param {
    int n_tok, k, n_global, n_local, offset, dim, inter, biases;
    kn_act act;
} moe_gemv_param;

static double ref_act(double g, double u, kn_act act, double alpha, double limit)
{
    if (act == KN_ACT_SWIGLU_OAI) {
        g = g > limit ? limit : g;
        u = u > limit ? limit : u < -limit ? -limit : u;
        return g / (1.0 + exp(-alpha * g)) * (u + 1.0);
    }
    return g / (1.0 + exp(-g)) * u;
}

static void moe_gemv_fp8(op_env *e, const void *param)
{
    const moe_gemv_param *p = param;
    const int dim = p->dim, inter = p->inter, nl = p->n_local;
    const size_t gdb = kn_fp8_data_bytes(2 * (size_t)inter, dim), gsc = kn_fp8_scale_count(2 * (size_t)inter, dim);
    const size_t ddb = kn_fp8_data_bytes(dim, inter), dsc = kn_fp8_scale_count(dim, inter);
    uint8_t *guq = op_host(e, nl * gdb), *dnq = op_host(e, nl * ddb);
    float *gus = op_host(e, nl * gsc * 4), *dns = op_host(e, nl * dsc * 4);
    for (int ex = 0; ex < nl; ex++) {
        uint8_t *q;
        float *sc;
        ops_fp8_weight(e, 2 * inter, dim, 1, &q, &sc);
        memcpy(guq + ex * gdb, q, gdb);
        for (size_t i = 0; i < gsc; i++) /* keep h near 1 */
            gus[ex * gsc + i] = sc[i] / (float)dim;
        ops_fp8_weight(e, dim, inter, 1, &q, &sc);
        memcpy(dnq + ex * ddb, q, ddb);
        for (size_t i = 0; i < dsc; i++)
            dns[ex * dsc + i] = sc[i] / (float)inter;
    }
    float *gub = p->biases ? op_rand(e, (size_t)nl * 2 * inter, -0.5f, 0.5f) : NULL;
    float *dnb = p->biases ? op_rand(e, (size_t)nl * dim, -0.5f, 0.5f) : NULL;
    kn_moe_weights hw = {
        .n_experts = nl, .expert_offset = p->offset, .dim = dim, .inter = inter, .wdtype = KN_FP8_E4M3,
        .gate_up = guq, .gate_up_bias = gub, .down = dnq, .down_bias = dnb, .gate_up_scale = gus,
        .down_scale = dns, .act = p->act, .alpha = 1.702f, .limit = 7.0f,
    };
    const size_t no = (size_t)p->n_tok * dim, ns = (size_t)p->n_tok * p->k;
    float *x = op_rand(e, no, -2.f, 2.f), *rw = op_host(e, ns * 4);
    int32_t *idx = op_host(e, ns * 4);
    ops_moe_routes(e, idx, rw, p->n_tok, p->k, p->n_global, 0, 0);
    /* float64 reference on each route's dequantized expert */
    double *ref = op_host(e, no * 8), *h = op_host(e, 2 * (size_t)inter * 8), *a = op_host(e, (size_t)inter * 8);
    float *gu = op_host(e, 2 * (size_t)inter * dim * 4), *dn = op_host(e, (size_t)dim * inter * 4);
    for (int t = 0; t < p->n_tok; t++)
        for (int j = 0; j < p->k; j++) {
            const int ex = idx[(size_t)t * p->k + j] - p->offset;
            if (ex < 0 || ex >= nl)
                continue;
            kn_fp8_dequantize_weight(gu, guq + ex * gdb, gus + ex * gsc, 2 * inter, dim);
            kn_fp8_dequantize_weight(dn, dnq + ex * ddb, dns + ex * dsc, dim, inter);
            for (int r = 0; r < 2 * inter; r++) {
                double acc = gub ? gub[(size_t)ex * 2 * inter + r] : 0.0;
                for (int c = 0; c < dim; c++)
                    acc += (double)gu[(size_t)r * dim + c] * x[(size_t)t * dim + c];
                h[r] = acc;
            }
            for (int c = 0; c < inter; c++)
                a[c] = ref_act(h[c], h[inter + c], p->act, 1.702f, 7.0f);
            for (int d = 0; d < dim; d++) {
                double acc = dnb ? dnb[(size_t)ex * dim + d] : 0.0;
                for (int c = 0; c < inter; c++)
                    acc += (double)dn[(size_t)d * inter + c] * a[c];
                ref[(size_t)t * dim + d] += rw[(size_t)t * p->k + j] * acc;
            }
        }
    kn_moe_weights dw = ops_moe_upload(e, &hw, gdb, ddb);
    float *d_out = op_nan(e, no);
    int rc = kn_moe_experts(e->be, d_out, op_up(e, x, no * 4), op_up(e, idx, ns * 4), op_up(e, rw, ns * 4),
                            p->n_tok, p->k, &dw);
    if (!op_ok(e, rc, "kn_moe_experts fp8 (gemv)"))
        return;
    float *got = op_get(e, d_out, no);
    double err = tu_max_rel_err(got, ref, no);
    printf("# fp8 expert gemv vs float64 (nothing rounded): normwise rel err %.3g\n", err);
    op_check_err(e, err, 1e-4, "fp8 expert gemv vs float64");
    /* Again into a poisoned output: on CUDA the down kernel's arrival
     * counters must be back at zero after a launch (the route sums are in
     * a fixed order, so the result is the same bit for bit). */
    float *d_again = op_nan(e, no);
    rc = kn_moe_experts(e->be, d_again, op_up(e, x, no * 4), op_up(e, idx, ns * 4), op_up(e, rw, ns * 4),
                        p->n_tok, p->k, &dw);
    if (!op_ok(e, rc, "kn_moe_experts fp8 (gemv), second call"))
        return;
    const size_t diff = op_count_unequal(op_get(e, d_again, no), got, no);
    op_check(e, diff == 0, "fp8 expert gemv: a second call gives the same output (%zu of %zu differ)", diff, no);
}

typedef struct multi_param {
    int m, k, n_lin, n[3], f32_last; /* f32_last: the last layer's weight is f32 */
} multi_param;

static void matmul_multi(op_env *e, const void *param)
{
    const multi_param *p = param;
    const int m = p->m, k = p->k;
    float *d_x = op_up(e, op_rand(e, (size_t)m * k, -2.f, 2.f), (size_t)m * k * 4);
    kn_weight w[3];
    kn_linear lin[3];
    float *single[3];
    for (int i = 0; i < p->n_lin; i++) {
        const int n = p->n[i];
        if (p->f32_last && i == p->n_lin - 1) {
            w[i] = (kn_weight){ KN_F32, op_up(e, op_rand(e, (size_t)n * k, -1.f, 1.f), (size_t)n * k * 4), NULL };
        } else {
            uint8_t *wq;
            float *ws;
            ops_fp8_weight(e, n, k, 1, &wq, &ws);
            w[i] = (kn_weight){ KN_FP8_E4M3, op_up(e, wq, kn_fp8_data_bytes(n, k)),
                                op_up(e, ws, kn_fp8_scale_count(n, k) * sizeof(float)) };
        }
        const float *bias = i != 1 ? op_up(e, op_rand(e, (size_t)n, -1.f, 1.f), (size_t)n * 4) : NULL;
        lin[i] = (kn_linear){ op_nan(e, (size_t)m * n), &w[i], bias, n };
        single[i] = op_nan(e, (size_t)m * n);
        if (!op_ok(e, kn_matmul_w(e->be, single[i], d_x, &w[i], bias, m, n, k), "kn_matmul_w alone"))
            return;
    }
    if (!op_ok(e, kn_matmul_w_multi(e->be, lin, p->n_lin, d_x, m, k), "kn_matmul_w_multi"))
        return;
    for (int i = 0; i < p->n_lin; i++) {
        const size_t no = (size_t)m * p->n[i];
        const float *got = op_get(e, lin[i].out, no), *want = op_get(e, single[i], no);
        size_t bad = 0;
        for (size_t j = 0; j < no; j++)
            bad += memcmp(&got[j], &want[j], sizeof(float)) != 0;
        if (bad)
            op_fail(e, "layer %d: %zu of %zu outputs differ from kn_matmul_w alone (first: %.9g vs %.9g)", i, bad,
                    no, (double)got[0], (double)want[0]);
    }
    /* outputs that overlap: refused, nothing computed */
    kn_linear twice[2] = { lin[0], lin[0] };
    OP_INT_EQ(e, kn_matmul_w_multi(e->be, twice, 2, d_x, m, k), TN_ERR_ARG);
}

void ops_register_gemv_fp8(void)
{
    static const multi_param multi[] = {
        { 1, 2880, 3, { 4096, 512, 512 }, 0 }, /* GPT-OSS q/k/v at decode */
        { 8, 2048, 3, { 4096, 512, 512 }, 0 }, /* Qwen3-30B-A3B, 8 rows */
        { 3, 130, 3, { 129, 7, 300 }, 0 },     /* odd sizes */
        { 2, 256, 2, { 64, 32, 0 }, 1 },       /* FP8 + f32: one by one */
        { 12, 384, 3, { 256, 128, 128 }, 0 },  /* rows past the GEMV */
        { 32, 2880, 3, { 4096, 512, 512 }, 0 }, /* GPT-OSS q/k/v at batch 32 */
        { 130, 256, 3, { 64, 16, 32 }, 0 },    /* past the skinny kernel: cuBLASLt */
        { 128, 2880, 3, { 4096, 512, 512 }, 0 }, /* GPT-OSS q/k/v at batch 128: x quantized once */
        { 100, 256, 2, { 129, 64, 0 }, 0 },    /* odd n: cuBLASLt refuses, one by one */
    };
    for (size_t i = 0; i < sizeof multi / sizeof multi[0]; i++)
        OP_CASE("matmul_w_multi", OP_ALL, matmul_multi, multi[i], "%d layers m=%d k=%d n=%d,%d%s", multi[i].n_lin,
                multi[i].m, multi[i].k, multi[i].n[0], multi[i].n[1], multi[i].f32_last ? " (last f32)" : "");
    static const gemv_param cases[] = {
        { 1, 4096, 2880, 1 }, { 2, 512, 2880, 1 }, { 3, 2880, 4096, 1 }, { 8, 4096, 2880, 1 },
        { 1, 512, 2048, 0 },  { 8, 2048, 4096, 0 }, { 3, 129, 130, 1 },  { 8, 200, 300, 1 },
        { 2, 1, 1, 1 },       { 5, 257, 128, 0 },   { 4, 130, 2880, 1 }, { 7, 384, 200, 0 },
        /* decode batches: the skinny kernel (and cuBLASLt) on CUDA */
        { 16, 512, 2880, 1 }, { 32, 4096, 2880, 1 }, { 64, 2880, 4096, 0 }, { 128, 512, 2880, 1 },
        { 9, 257, 300, 1 },   { 100, 129, 130, 1 }, { 33, 16, 128, 0 },   { 128, 2880, 256, 1 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        OP_CASE("matmul_w", OP_ALL, gemv_fp8, cases[i], "fp8 gemv m=%d n=%d k=%d%s", cases[i].m, cases[i].n,
                cases[i].k, cases[i].bias ? " +bias" : "");
    /* the expert GEMVs run on CUDA only (the CPU quantizes: ops_moe.c) */
    static const moe_gemv_param moe[] = {
        { 1, 4, 8, 8, 0, 2880, 2880, 1, KN_ACT_SWIGLU_OAI },     /* GPT-OSS's shapes */
        { 3, 8, 16, 16, 0, 2048, 768, 0, KN_ACT_SWIGLU },        /* Qwen3-30B-A3B's shapes */
        { 4, 4, 6, 6, 0, 256, 384, 1, KN_ACT_SWIGLU_OAI },       /* tokens share experts */
        { 2, 3, 9, 4, 3, 200, 136, 1, KN_ACT_SWIGLU_OAI },       /* EP share, dims off 16 */
        { 1, 6, 8, 8, 0, 130, 100, 1, KN_ACT_SWIGLU },           /* 6 routes: two passes */
        { 2, 10, 16, 16, 0, 256, 128, 1, KN_ACT_SWIGLU_OAI },    /* 10 routes (past a portable cluster) */
    };
    for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++)
        OP_CASE("moe_experts", OP_CUDA, moe_gemv_fp8, moe[i],
                "fp8 gemv %s tokens=%d k=%d experts %d..%d of %d dim=%d inter=%d%s",
                moe[i].act == KN_ACT_SWIGLU ? "swiglu" : "swiglu_oai", moe[i].n_tok, moe[i].k, moe[i].offset,
                moe[i].offset + moe[i].n_local - 1, moe[i].n_global, moe[i].dim, moe[i].inter,
                moe[i].biases ? " +bias" : "");
}
