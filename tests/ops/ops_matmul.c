/* kn_matmul (x w^T + bias) and kn_matmul_w with f32 and bf16 weights
 * against float64 recomputations (bf16: over the bf16-rounded operands, the
 * function both backends compute), normwise over the whole output; f32
 * weights give exactly kn_matmul's bits; on CUDA also against the CPU.
 * CUDA variants: TF32 products (TANDEM_CUDA_TF32=1, bound 2e-3) and many
 * row counts through one backend, with the cuBLASLt plan cache and through
 * cublasGemmEx (kn_cuda_set_lt_cache). Also bf16 rounding and the argument
 * checks. FP8 weights: ops_fp8.c. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "common/status.h"
#include "kernels/dtype.h"
#include "kernels/matmul.h"
#include "tests/ops/op_harness.h"
#ifdef TANDEM_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

/* The same rounded operands with fp32 sums in another order (tensor-core
 * accumulation): far below the ~3e-3 that unrounded (or TF32-rounded)
 * activations would differ by, so the check sees the rounding itself. */
#define BF16_VS_REF_TOL 2e-4

typedef struct mm_param {
    int m, n, k, bias;
    float x_lo, x_hi;
} mm_param;

/* float64 x w^T + bias over float operands. */
static void ref_matmul(double *out, const float *x, const float *w, const float *bias, int m, int n,
                       int k)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double acc = bias ? bias[j] : 0.0;
            for (int l = 0; l < k; l++)
                acc += (double)x[(size_t)i * k + l] * w[(size_t)j * k + l];
            out[(size_t)i * n + j] = acc;
        }
}

static void matmul_f32(op_env *e, const void *param)
{
    const mm_param *p = param;
    int m = p->m, n = p->n, k = p->k;
    size_t no = (size_t)m * n;
    float *x = op_rand(e, (size_t)m * k, -1.f, 1.f), *w = op_rand(e, (size_t)n * k, -1.f, 1.f);
    float *bias = p->bias ? op_rand(e, (size_t)n, -2.f, 2.f) : NULL;
    double *ref = op_host(e, no * sizeof(double));
    ref_matmul(ref, x, w, bias, m, n, k);
    float *d_x = op_up(e, x, (size_t)m * k * 4), *d_w = op_up(e, w, (size_t)n * k * 4);
    float *d_b = bias ? op_up(e, bias, (size_t)n * 4) : NULL, *d_out = op_nan(e, no);
    double tol = op_tol_fp32(e, 1);
    if (!op_ok(e, kn_matmul(e->be, d_out, d_x, d_w, d_b, m, n, k), "kn_matmul"))
        return;
    float *got = op_get(e, d_out, no);
    op_check_err(e, tu_max_rel_err(got, ref, no), tol, "matmul vs float64%s", e->cuda && e->tf32 ? " (TF32)" : "");
    /* kn_matmul_w with f32 weights: the very same numbers */
    kn_weight wf = { KN_F32, d_w, NULL };
    op_poison(e, d_out, no);
    if (op_ok(e, kn_matmul_w(e->be, d_out, d_x, &wf, d_b, m, n, k), "kn_matmul_w f32"))
        OP_MEM_EQ(e, op_get(e, d_out, no), got, no * sizeof(float));
    if (e->cuda) {
        float *cpu = op_host(e, no * sizeof(float));
        if (op_ok(e, kn_matmul(e->cpu, cpu, x, w, bias, m, n, k), "kn_matmul cpu"))
            op_check_err(e, tu_max_rel_err_f32(got, cpu, no), tol, "matmul vs CPU");
    }
}

/* bf16 weights: float64 over the rounded operands; about bf16's rounding
 * away from the f32 product. */
static void matmul_bf16(op_env *e, const void *param)
{
    const mm_param *p = param;
    int m = p->m, n = p->n, k = p->k;
    size_t no = (size_t)m * n, nw = (size_t)n * k;
    float *x = op_rand(e, (size_t)m * k, -2.f, 2.f), *w = op_rand(e, nw, -1.f, 1.f);
    float *bias = p->bias ? op_rand(e, (size_t)n, -1.f, 1.f) : NULL;
    uint16_t *wb = op_host(e, nw * sizeof *wb);
    float *xr = op_host(e, (size_t)m * k * 4), *wr = op_host(e, nw * 4);
    kn_f32_to_bf16_n(wb, w, nw);
    kn_bf16_to_f32_n(wr, wb, nw);
    for (size_t i = 0; i < (size_t)m * k; i++)
        xr[i] = kn_round_bf16(x[i]);
    double *ref = op_host(e, no * sizeof(double)), *ref32 = op_host(e, no * sizeof(double));
    ref_matmul(ref, xr, wr, bias, m, n, k);
    ref_matmul(ref32, x, w, bias, m, n, k);
    float *d_x = op_up(e, x, (size_t)m * k * 4), *d_b = bias ? op_up(e, bias, (size_t)n * 4) : NULL;
    kn_weight dw = { KN_BF16, op_up(e, wb, nw * 2), NULL };
    float *d_out = op_nan(e, no);
    double tol = e->cuda ? BF16_VS_REF_TOL : TU_FP32_REL_TOL;
    if (!op_ok(e, kn_matmul_w(e->be, d_out, d_x, &dw, d_b, m, n, k), "kn_matmul_w bf16"))
        return;
    float *got = op_get(e, d_out, no);
    op_check_err(e, tu_max_rel_err(got, ref, no), tol, "bf16 vs float64 of the rounded operands");
    double vs_f32 = tu_max_rel_err(got, ref32, no);
    if (k >= 9)
        op_check(e, vs_f32 > 1e-5 && vs_f32 < 3e-2, "bf16: %g from the f32 product", vs_f32);
    if (e->cuda) {
        float *cpu = op_host(e, no * 4);
        kn_weight hw = { KN_BF16, wb, NULL };
        if (op_ok(e, kn_matmul_w(e->cpu, cpu, x, &hw, bias, m, n, k), "kn_matmul_w bf16 cpu"))
            op_check_err(e, tu_max_rel_err_f32(got, cpu, no), BF16_VS_REF_TOL, "bf16 vs CPU");
    }
}

static void matmul_args(op_env *e, const void *param)
{
    (void)param;
    const kn_backend *be = e->be;
    float *x = op_up(e, (float[12]){ 0 }, 48), *w = op_up(e, (float[12]){ 0 }, 48);
    float *out = op_up(e, (float[12]){ 0 }, 48);
    OP_INT_EQ(e, kn_matmul(be, NULL, x, w, NULL, 2, 3, 2), TN_ERR_ARG);
    OP_INT_EQ(e, kn_matmul(be, out, NULL, w, NULL, 2, 3, 2), TN_ERR_ARG);
    OP_INT_EQ(e, kn_matmul(be, out, x, NULL, NULL, 2, 3, 2), TN_ERR_ARG);
    OP_INT_EQ(e, kn_matmul(be, out, x, w, NULL, -1, 3, 2), TN_ERR_ARG);
    OP_INT_EQ(e, kn_matmul(be, out, x, w, NULL, 2, 0, 2), TN_ERR_ARG);
    OP_INT_EQ(e, kn_matmul(be, out, x, w, NULL, 2, 3, 0), TN_ERR_ARG);
    OP_INT_EQ(e, kn_matmul(be, x, x, w, NULL, 2, 3, 2), TN_ERR_ARG);      /* out is x */
    OP_INT_EQ(e, kn_matmul(be, x + 2, x, w, NULL, 2, 3, 2), TN_ERR_ARG);  /* overlaps */
    OP_INT_EQ(e, kn_matmul(be, out, x, w, NULL, 0, 3, 2), TN_OK);
    uint16_t *wb = op_up(e, (uint16_t[4]){ 0 }, 8);
    kn_weight bad = { (kn_dtype)9, wb, NULL };
    OP_INT_EQ(e, kn_matmul_w(be, out, x, &bad, NULL, 2, 2, 1), TN_ERR_ARG);
    OP_INT_EQ(e, kn_matmul_w(be, out, x, NULL, NULL, 2, 2, 1), TN_ERR_ARG);
    kn_weight nul = { KN_BF16, NULL, NULL };
    OP_INT_EQ(e, kn_matmul_w(be, out, x, &nul, NULL, 2, 2, 1), TN_ERR_ARG);
    kn_weight ok = { KN_BF16, wb, NULL };
    OP_INT_EQ(e, kn_matmul_w(be, x, x, &ok, NULL, 2, 2, 1), TN_ERR_ARG);   /* out is x */
    OP_INT_EQ(e, kn_matmul_w(be, out, x, &ok, NULL, 2, 2, 0), TN_ERR_ARG);
}

/* Rounding to bf16: to nearest, ties to even, NaN stays NaN, overflow to
 * inf (host functions of kernels/dtype.h). */
static void bf16_rounding(op_env *e, const void *param)
{
    (void)param;
    OP_INT_EQ(e, kn_f32_to_bf16(1.0f), 0x3f80);
    OP_INT_EQ(e, kn_f32_to_bf16(-2.0f), 0xc000);
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: even (1) wins; 1 + 3*2^-8
     * is halfway between 1 + 2^-7 and 1 + 2^-6: even (1 + 2^-6) wins. */
    OP_INT_EQ(e, kn_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    OP_INT_EQ(e, kn_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    OP_INT_EQ(e, kn_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    OP_TRUE(e, kn_bf16_to_f32(kn_f32_to_bf16(FLT_MAX)) == INFINITY);   /* past bf16 max 3.39e38 */
    OP_TRUE(e, kn_bf16_to_f32(kn_f32_to_bf16(-INFINITY)) == -INFINITY);
    OP_TRUE(e, isnan(kn_bf16_to_f32(kn_f32_to_bf16(NAN))));
    float tiny = 0x1p-130f;   /* subnormal: kept to bf16's precision */
    OP_TRUE(e, kn_round_bf16(tiny) == tiny);
    OP_INT_EQ(e, kn_dtype_size(KN_BF16), 2);
    OP_INT_EQ(e, kn_dtype_size(KN_F32), 4);
    OP_STR_EQ(e, kn_dtype_name(KN_BF16), "bf16");
}

#ifdef TANDEM_CUDA
typedef struct rows_param {
    const char *label;
    int ms[160], n_m, n, k, bias, lt;
} rows_param;

/* Many row counts m in a row through one backend with one (n, k): the bf16
 * GEMMs keep cuBLASLt plans per row bucket (four per octave) and run them
 * with the real m, so a plan that is wrong for some m of its bucket, or a
 * stale cached layout, shows here. Rows are independent, so the float64
 * reference and the CPU result are computed once for the largest m and each
 * call is checked on its first m rows; the output is NaN before every call.
 * lt = 0 runs the same series through cublasGemmEx. */
static void matmul_bf16_rows(op_env *e, const void *param)
{
    const rows_param *p = param;
    int max_m = 0, n = p->n, k = p->k;
    for (int i = 0; i < p->n_m; i++)
        max_m = p->ms[i] > max_m ? p->ms[i] : max_m;
    size_t no = (size_t)max_m * n, nw = (size_t)n * k;
    float *x = op_rand(e, (size_t)max_m * k, -2.f, 2.f), *w = op_rand(e, nw, -1.f, 1.f);
    float *bias = p->bias ? op_rand(e, (size_t)n, -1.f, 1.f) : NULL;
    uint16_t *wb = op_host(e, nw * 2);
    float *xr = op_host(e, (size_t)max_m * k * 4), *wr = op_host(e, nw * 4);
    kn_f32_to_bf16_n(wb, w, nw);
    kn_bf16_to_f32_n(wr, wb, nw);
    for (size_t i = 0; i < (size_t)max_m * k; i++)
        xr[i] = kn_round_bf16(x[i]);
    double *ref = op_host(e, no * sizeof(double));
    ref_matmul(ref, xr, wr, bias, max_m, n, k);
    float *cpu = op_host(e, no * 4), *got = op_host(e, no * 4);
    float *d_x = op_up(e, x, (size_t)max_m * k * 4), *d_b = bias ? op_up(e, bias, (size_t)n * 4) : NULL;
    float *d_out = op_dev(e, no * 4);
    kn_weight hw = { KN_BF16, wb, NULL }, dw = { KN_BF16, op_up(e, wb, nw * 2), NULL };
    if (!op_ok(e, kn_matmul_w(e->cpu, cpu, x, &hw, bias, max_m, n, k), "kn_matmul_w bf16 cpu"))
        return;
    kn_cuda_set_lt_cache(e->be, p->lt);
    long long searches0 = kn_cuda_lt_searches(e->be);
    double worst = 0.0, worst_cpu = 0.0;
    int worst_m = 0, worst_cpu_m = 0;
    for (int i = 0; i < p->n_m; i++) {
        int m = p->ms[i];
        op_poison(e, d_out, no);
        if (!op_ok(e, kn_matmul_w(e->be, d_out, d_x, &dw, d_b, m, n, k), "kn_matmul_w bf16"))
            break;
        op_down(e, got, d_out, (size_t)m * n * 4);
        double err = tu_max_rel_err(got, ref, (size_t)m * n);
        double err_cpu = tu_max_rel_err_f32(got, cpu, (size_t)m * n);
        if (!(err <= worst)) /* a NaN output reads as infinity and sticks */
            worst = err, worst_m = m;
        if (!(err_cpu <= worst_cpu))
            worst_cpu = err_cpu, worst_cpu_m = m;
    }
    long long searches = kn_cuda_lt_searches(e->be) - searches0;
    kn_cuda_set_lt_cache(e->be, 1);
    const char *via = p->lt ? "cuBLASLt plan cache" : "cublasGemmEx";
    op_check_err(e, worst, BF16_VS_REF_TOL, "via %s, worst m=%d, vs float64 of rounded operands", via, worst_m);
    op_check_err(e, worst_cpu, BF16_VS_REF_TOL, "via %s, worst m=%d, vs CPU", via, worst_cpu_m);
    printf("# matmul_w bf16 %s: %d calls, %lld cuBLASLt heuristic queries\n", p->label, p->n_m, searches);
}

static void register_rows(void)
{
    /* row counts through one backend: odd 1..299, then the bucket edges */
    static rows_param odd = { .label = "odd m", .n_m = 150, .n = 96, .k = 80, .bias = 1, .lt = 1 };
    static const int edges[] = { 16, 17, 31, 32, 33, 1023, 1024, 1025, 15, 1, 2, 3, 4, 5, 63, 64, 65 };
    rows_param ed = { .label = "bucket edges", .n_m = (int)(sizeof edges / sizeof edges[0]), .n = 200,
                      .k = 576, .bias = 1, .lt = 1 };
    for (int i = 0; i < 150; i++)
        odd.ms[i] = 2 * i + 1;
    memcpy(ed.ms, edges, sizeof edges);
    OP_CASE("matmul_w_rows", OP_CUDA, matmul_bf16_rows, odd, "bf16 odd m n=96 k=80 +bias lt");
    rows_param again = odd;
    again.label = "odd m again (warm plans)";
    again.bias = 0;
    OP_CASE("matmul_w_rows", OP_CUDA, matmul_bf16_rows, again, "bf16 odd m again (warm plans) n=96 k=80");
    OP_CASE("matmul_w_rows", OP_CUDA, matmul_bf16_rows, ed, "bf16 bucket edges n=200 k=576 +bias lt");
    ed.lt = 0;
    OP_CASE("matmul_w_rows", OP_CUDA, matmul_bf16_rows, ed, "bf16 bucket edges n=200 k=576 +bias gemmex");
    rows_param onk = odd;
    onk.label = "odd n/k";
    onk.n_m = 40, onk.n = 129, onk.k = 72, onk.bias = 0;
    OP_CASE("matmul_w_rows", OP_CUDA, matmul_bf16_rows, onk, "bf16 odd n/k 40 row counts n=129 k=72 lt");
}
#endif

void ops_register_matmul(void)
{
    /* the CPU tests' shapes with and without bias, then the CUDA test's
     * (GPT-OSS's 2880, a vocab slice of 201088 / 64) */
    static const int f32[][3] = { { 1, 1, 1 },     { 3, 5, 7 },    { 1, 33, 65 },  { 17, 33, 65 },
                                  { 64, 96, 128 }, { 130, 70, 257 } };
    for (size_t s = 0; s < sizeof f32 / sizeof f32[0]; s++)
        for (int b = 0; b < 2; b++) {
            mm_param p = { f32[s][0], f32[s][1], f32[s][2], b, -1.f, 1.f };
            OP_CASE("matmul", OP_ALL, matmul_f32, p, "f32 m=%d n=%d k=%d%s", p.m, p.n, p.k, b ? " +bias" : "");
        }
    static const mm_param f32_cuda[] = { { 1, 2880, 2880, 1, -1.f, 1.f }, { 37, 129, 65, 0, -1.f, 1.f },
                                         { 300, 512, 2880, 1, -1.f, 1.f }, { 5, 201088 / 64, 2880, 0, -1.f, 1.f } };
    for (size_t s = 0; s < sizeof f32_cuda / sizeof f32_cuda[0]; s++) {
        const mm_param *p = &f32_cuda[s];
        OP_CASE("matmul", OP_ALL, matmul_f32, *p, "f32 m=%d n=%d k=%d%s", p->m, p->n, p->k, p->bias ? " +bias" : "");
    }
    static const mm_param bf16[] = { { 1, 1, 1, 1, -2.f, 2.f },      { 5, 7, 9, 1, -2.f, 2.f },
                                     { 33, 65, 130, 1, -2.f, 2.f },  { 64, 40, 256, 1, -2.f, 2.f },
                                     { 1, 2880, 2880, 1, -2.f, 2.f }, { 37, 129, 72, 0, -2.f, 2.f },
                                     { 300, 512, 2880, 1, -2.f, 2.f } };
    for (size_t s = 0; s < sizeof bf16 / sizeof bf16[0]; s++) {
        const mm_param *p = &bf16[s];
        OP_CASE("matmul_w", OP_ALL, matmul_bf16, *p, "bf16 m=%d n=%d k=%d%s", p->m, p->n, p->k,
                p->bias ? " +bias" : "");
    }
    OP_CASE("matmul", OP_ALL, matmul_args, bf16[0], "rejects bad arguments");
    OP_CASE("dtype", OP_CPU, bf16_rounding, bf16[0], "bf16 rounding");
#ifdef TANDEM_CUDA
    register_rows();
#endif
}
