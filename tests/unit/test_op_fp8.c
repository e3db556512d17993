/* FP8 e4m3fn and the block-scaled FP8 products (kernels/fp8.h), and the
 * MXFP4 decoding of GPT-OSS experts (engine/mxfp4.h):
 *   - decode of all 256 codes against the format's definition in float64;
 *   - encode against a float64 round-to-nearest-even search over the 127
 *     finite magnitudes: every code value, every midpoint (ties to the even
 *     code), one float on each side of every midpoint, saturation,
 *     infinities, NaN, subnormals, and random floats over 2^-14..2^10;
 *   - the weight and activation quantizers' layouts and scales;
 *   - kn_matmul_w and kn_moe_experts with FP8 weights on the CPU against a
 *     float64 recomputation of the contract's function;
 *   - MXFP4 rows decoded from hand-made blocks against values worked out by
 *     hand. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "engine/mxfp4.h"
#include "kernels/backend.h"
#include "kernels/dtype.h"
#include "kernels/fp8.h"
#include "kernels/matmul.h"
#include "kernels/moe.h"
#include "common/status.h"
#include "testutil.h"

/* e4m3fn by definition: sign, 4 exponent bits (bias 7), 3 mantissa bits,
 * exponent 0 subnormal, S.1111.111 NaN, nothing infinite. */
static double ref_decode(int c)
{
    int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    if (e == 15 && m == 7)
        return NAN;
    double v = e == 0 ? (m / 8.0) * pow(2.0, -6) : (1.0 + m / 8.0) * pow(2.0, e - 7);
    return s ? -v : v;
}

/* Round to nearest, ties to the even code, saturate to 448, NaN stays NaN. */
static int ref_encode(double x)
{
    if (isnan(x))
        return signbit(x) ? 0xff : 0x7f;
    int sign = signbit(x) ? 0x80 : 0;
    double a = fabs(x);
    if (a >= 448.0)
        return sign | 0x7e;
    int best = 0;
    for (int c = 0; c < 0x7e; c++) {
        double lo = ref_decode(c), hi = ref_decode(c + 1);
        if (a >= lo && a <= hi) {
            if (a - lo < hi - a)
                best = c;
            else if (a - lo > hi - a)
                best = c + 1;
            else
                best = (c & 1) ? c + 1 : c;
            break;
        }
    }
    return sign | best;
}

static void check_encode(float x)
{
    int want = ref_encode((double)x), got = kn_f32_to_e4m3(x);
    if (isnan(x)) {   /* any NaN code, sign kept */
        assert_true((got & 0x7f) == 0x7f);
        return;
    }
    if (got != want)
        fail_msg("e4m3(%a) = 0x%02x, want 0x%02x", (double)x, got, want);
}

static void e4m3_decode_all_codes(void **state)
{
    (void)state;
    for (int c = 0; c < 256; c++) {
        double want = ref_decode(c);
        float got = kn_e4m3_to_f32((uint8_t)c);
        if (isnan(want)) {
            assert_true(isnan(got));
            continue;
        }
        if ((double)got != want || !!signbit(got) != !!signbit(want))
            fail_msg("code 0x%02x decodes to %a, want %a", c, (double)got, want);
    }
    assert_true(kn_e4m3_to_f32(0x7e) == 448.0f);
    assert_true(kn_e4m3_to_f32(0x01) == 0x1p-9f);
    assert_true(kn_e4m3_to_f32(0x08) == 0x1p-6f);
    assert_true(signbit(kn_e4m3_to_f32(0x80)) != 0);
    assert_int_equal(kn_dtype_size(KN_FP8_E4M3), 1);
    assert_string_equal(kn_dtype_name(KN_FP8_E4M3), "fp8");
}

static void e4m3_encode_exhaustive(void **state)
{
    (void)state;
    for (int sgn = 0; sgn < 2; sgn++) {
        for (int c = 0; c <= 0x7e; c++) {
            float v = (float)ref_decode(c) * (sgn ? -1.0f : 1.0f);
            check_encode(v);
            if (c > 0)
                assert_int_equal(kn_f32_to_e4m3(v), (sgn ? 0x80 : 0) | c);
            if (c < 0x7e) {
                /* the midpoint is a float (4 significant bits + 1) */
                double mid = (ref_decode(c) + ref_decode(c + 1)) / 2 * (sgn ? -1 : 1);
                float fm = (float)mid;
                assert_true((double)fm == mid);
                check_encode(fm);
                check_encode(nextafterf(fm, 0.0f));
                check_encode(nextafterf(fm, sgn ? -INFINITY : INFINITY));
                /* ties go to the even code */
                int lo = c, want = (lo & 1) ? lo + 1 : lo;
                assert_int_equal(kn_f32_to_e4m3(fm), (sgn ? 0x80 : 0) | want);
            }
        }
    }
    /* saturation, specials, the subnormal range */
    const float special[] = { 448.0f, 449.0f, 463.99f, 464.0f, 480.0f, 1e9f, FLT_MAX, INFINITY,
                              -INFINITY, -464.0f, 0.0f, -0.0f, 0x1p-10f, 3 * 0x1p-10f,
                              0x1p-11f, FLT_MIN, 0x1p-149f, 0x1.fp-7f, 0x1.ep-7f };
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        check_encode(special[i]);
    assert_int_equal(kn_f32_to_e4m3(INFINITY), 0x7e);
    assert_int_equal(kn_f32_to_e4m3(-INFINITY), 0xfe);
    assert_int_equal(kn_f32_to_e4m3(464.0f), 0x7e);
    assert_int_equal(kn_f32_to_e4m3(0x1p-10f), 0x00);       /* tie between 0 and 2^-9 */
    assert_int_equal(kn_f32_to_e4m3(3 * 0x1p-10f), 0x02);   /* tie between codes 1 and 2 */
    assert_int_equal(kn_f32_to_e4m3(NAN) & 0x7f, 0x7f);
    assert_int_equal(kn_f32_to_e4m3(-NAN), 0xff);
    tu_rng rng;
    tu_rng_init(&rng, 808);
    for (int i = 0; i < 200000; i++) {
        double e = -14.0 + 24.0 * tu_rand_uniform(&rng);
        float x = (float)(pow(2.0, e) * (tu_rand_uniform(&rng) < 0.5 ? -1 : 1));
        check_encode(x);
    }
}

static void fp8_weight_layout(void **state)
{
    (void)state;
    const size_t n = 200, k = 300;   /* neither a multiple of 128 */
    tu_rng rng;
    tu_rng_init(&rng, 809);
    float *w = tu_xcalloc(n * k, sizeof *w), *back = tu_xcalloc(n * k, sizeof *back);
    for (size_t r = 0; r < n; r++)
        for (size_t c = 0; c < k; c++)   /* magnitudes differ from block to block */
            w[r * k + c] = (float)(tu_rand_uniform(&rng) - 0.5) * ldexpf(1.0f, (int)((r / 128 + 2 * (c / 128)) % 7) - 3);
    for (size_t r = 128; r < n; r++)   /* an all-zero block: (1, 2) */
        for (size_t c = 256; c < k; c++)
            w[r * k + c] = 0.0f;
    assert_int_equal(kn_fp8_ld(k), 384);
    assert_int_equal(kn_fp8_scale_ld(k), 4);
    assert_int_equal(kn_fp8_blocks(n), 2);
    uint8_t *q = tu_xcalloc(kn_fp8_data_bytes(n, k), 1);
    float *s = tu_xcalloc(kn_fp8_scale_count(n, k), sizeof *s);
    kn_fp8_quantize_weight(q, s, w, n, k);
    for (size_t bi = 0; bi < 2; bi++) {
        for (size_t bj = 0; bj < 3; bj++) {
            float amax = 0;
            for (size_t r = bi * 128; r < n && r < bi * 128 + 128; r++)
                for (size_t c = bj * 128; c < k && c < bj * 128 + 128; c++)
                    amax = fmaxf(amax, fabsf(w[r * k + c]));
            float want = amax > 0 ? amax / 448.0f : 1.0f;
            assert_true(s[bi * 4 + bj] == want);
        }
        assert_true(s[bi * 4 + 3] == 1.0f);   /* row padding of the scales */
    }
    for (size_t r = 0; r < n; r++) {
        for (size_t c = 0; c < 384; c++) {
            uint8_t code = q[r * 384 + c];
            if (c >= k) {
                assert_int_equal(code, 0);
                continue;
            }
            assert_int_equal(code, kn_f32_to_e4m3(w[r * k + c] / s[(r / 128) * 4 + c / 128]));
        }
    }
    kn_fp8_dequantize_weight(back, q, s, n, k);
    for (size_t r = 0; r < n; r++)
        for (size_t c = 0; c < k; c++) {
            float want = kn_e4m3_to_f32(q[r * 384 + c]) * s[(r / 128) * 4 + c / 128];
            assert_true(back[r * k + c] == want);
            /* e4m3 keeps 4 significant bits: half a step is 2^-4 relative,
             * and values far below the block's amax are subnormal steps of
             * 2^-9 * scale */
            float step = fmaxf(fabsf(w[r * k + c]) * 0x1p-4f, s[(r / 128) * 4 + c / 128] * 0x1p-10f);
            assert_true(fabsf(back[r * k + c] - w[r * k + c]) <= step * 1.0001f);
        }
    free(w);
    free(back);
    free(q);
    free(s);
}

static void fp8_activation_rows(void **state)
{
    (void)state;
    const size_t k = 300;
    float x[300], r1[300], r2[300];
    tu_rng rng;
    tu_rng_init(&rng, 810);
    tu_rand_fill(&rng, x, k, -3.0f, 3.0f);
    for (size_t c = 128; c < 256; c++)
        x[c] = 0.0f;                    /* a zero block: scale 1, codes 0 */
    x[7] = NAN;                         /* NaN does not change its block's scale */
    uint8_t q[384];
    float s[3];
    kn_fp8_quantize_act_row(q, s, x, k);
    float amax0 = 0, amax2 = 0;
    for (size_t c = 0; c < 128; c++)
        if (!isnan(x[c]))
            amax0 = fmaxf(amax0, fabsf(x[c]));
    for (size_t c = 256; c < k; c++)
        amax2 = fmaxf(amax2, fabsf(x[c]));
    assert_true(s[0] == amax0 / 448.0f);
    assert_true(s[1] == 1.0f);
    assert_true(s[2] == amax2 / 448.0f);
    assert_int_equal(q[7] & 0x7f, 0x7f);
    for (size_t c = k; c < 384; c++)
        assert_int_equal(q[c], 0);
    memcpy(r2, x, sizeof x);
    kn_fp8_round_act_row(r1, x, k);
    kn_fp8_round_act_row(r2, r2, k);   /* in place */
    for (size_t c = 0; c < k; c++) {
        if (c == 7) {
            assert_true(isnan(r1[c]) && isnan(r2[c]));
            continue;
        }
        float want = kn_e4m3_to_f32(q[c]) * s[c / 128];
        assert_true(r1[c] == want && r2[c] == want);
    }
}

/* float64 value of the FP8 product's function, from the quantizers' codes
 * and scales (checked above). */
static void ref_fp8_matmul(double *out, const float *x, const uint8_t *wq, const float *ws,
                           const float *bias, int m, int n, int k)
{
    const size_t ld = kn_fp8_ld(k), kb = kn_fp8_blocks(k), sld = kn_fp8_scale_ld(k);
    uint8_t *xq = tu_xcalloc(ld, 1);
    float *xs = tu_xcalloc(kb, sizeof *xs);
    for (int i = 0; i < m; i++) {
        kn_fp8_quantize_act_row(xq, xs, x + (size_t)i * k, k);
        for (int j = 0; j < n; j++) {
            double acc = bias ? bias[j] : 0.0;
            for (size_t b = 0; b < kb; b++) {
                double part = 0;
                for (size_t c = b * 128; c < (size_t)k && c < b * 128 + 128; c++)
                    part += (double)kn_e4m3_to_f32(xq[c]) * kn_e4m3_to_f32(wq[(size_t)j * ld + c]);
                acc += part * xs[b] * ws[(j / 128) * sld + b];
            }
            out[(size_t)i * n + j] = acc;
        }
    }
    free(xq);
    free(xs);
}

static void matmul_w_fp8_matches_float64(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    tu_rng rng;
    tu_rng_init(&rng, 811);
    const int shapes[][3] = { { 1, 1, 1 }, { 3, 200, 300 }, { 5, 129, 128 }, { 17, 40, 2880 } };
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            int m = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
            float *x = tu_xcalloc((size_t)m * k, sizeof *x), *w = tu_xcalloc((size_t)n * k, 4);
            float *bias = tu_xcalloc((size_t)n, sizeof *bias);
            float *out = tu_xcalloc((size_t)m * n, sizeof *out);
            double *ref = tu_xcalloc((size_t)m * n, sizeof *ref);
            tu_rand_fill(&rng, x, (size_t)m * k, -2.0f, 2.0f);
            tu_rand_fill(&rng, w, (size_t)n * k, -0.1f, 0.1f);
            tu_rand_fill(&rng, bias, (size_t)n, -1.0f, 1.0f);
            uint8_t *wq = tu_xcalloc(kn_fp8_data_bytes(n, k), 1);
            float *ws = tu_xcalloc(kn_fp8_scale_count(n, k), sizeof *ws);
            kn_fp8_quantize_weight(wq, ws, w, n, k);
            ref_fp8_matmul(ref, x, wq, ws, with_bias ? bias : NULL, m, n, k);
            kn_weight kw = { KN_FP8_E4M3, wq, ws };
            for (size_t i = 0; i < (size_t)m * n; i++)
                out[i] = NAN;
            assert_int_equal(kn_matmul_w(&be, out, x, &kw, with_bias ? bias : NULL, m, n, k),
                             TN_OK);
            /* the CPU dequantizes both sides to fp32 (exact up to one fp32
             * rounding of code * scale) and runs sgemm: fp32 accuracy */
            double err = tu_max_rel_err(out, ref, (size_t)m * n);
            if (!(err <= TU_FP32_REL_TOL))
                fail_msg("m=%d n=%d k=%d bias=%d: rel err %g", m, n, k, with_bias, err);
            free(x);
            free(w);
            free(bias);
            free(out);
            free(ref);
            free(wq);
            free(ws);
        }
    /* an FP8 weight needs its scales */
    float x1[4] = {1, 2, 3, 4}, o1[2];
    uint8_t q1[256] = {0};
    kn_weight noscale = { KN_FP8_E4M3, q1, NULL };
    assert_int_equal(kn_matmul_w(&be, o1, x1, &noscale, NULL, 1, 2, 2), TN_ERR_ARG);
    kn_backend_free(&be);
}

/* float64 MoE with FP8 weights: the activations go through the same
 * quantization as the op (x rows, and the expert activation computed in
 * fp32 from the float64 h rounded to fp32). */
static void ref_moe_fp8(double *out, const float *x, const int32_t *idx, const float *rw,
                        int n_tok, int k, const kn_moe_weights *w, const float *gu_deq,
                        const float *dn_deq)
{
    const int dim = w->dim, inter = w->inter;
    float *xr = tu_xcalloc((size_t)dim, sizeof *xr), *a = tu_xcalloc((size_t)inter, sizeof *a);
    for (int t = 0; t < n_tok; t++) {
        kn_fp8_round_act_row(xr, x + (size_t)t * dim, (size_t)dim);
        for (int d = 0; d < dim; d++)
            out[(size_t)t * dim + d] = 0;
        for (int j = 0; j < k; j++) {
            int e = idx[t * k + j];
            const float *gu = gu_deq + (size_t)e * 2 * inter * dim;
            const float *dn = dn_deq + (size_t)e * dim * inter;
            for (int i = 0; i < inter; i++) {
                double g = w->gate_up_bias[(size_t)e * 2 * inter + i];
                double u = w->gate_up_bias[(size_t)e * 2 * inter + inter + i];
                for (int d = 0; d < dim; d++) {
                    g += (double)gu[(size_t)i * dim + d] * xr[d];
                    u += (double)gu[(size_t)(inter + i) * dim + d] * xr[d];
                }
                float gf = fminf((float)g, w->limit);
                float uf = fminf(fmaxf((float)u, -w->limit), w->limit);
                a[i] = gf / (1.0f + expf(-w->alpha * gf)) * (uf + 1.0f);
            }
            kn_fp8_round_act_row(a, a, (size_t)inter);
            for (int d = 0; d < dim; d++) {
                double y = w->down_bias[(size_t)e * dim + d];
                for (int i = 0; i < inter; i++)
                    y += (double)dn[(size_t)d * inter + i] * a[i];
                out[(size_t)t * dim + d] += rw[t * k + j] * y;
            }
        }
    }
    free(xr);
    free(a);
}

static void moe_experts_fp8_matches_float64(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    tu_rng rng;
    tu_rng_init(&rng, 812);
    const int n_tok = 11, n_exp = 6, k = 2, dim = 160, inter = 72;
    size_t gsz = (size_t)2 * inter * dim, dsz = (size_t)dim * inter;
    float *gu = tu_xcalloc(n_exp * gsz, 4), *dn = tu_xcalloc(n_exp * dsz, 4);
    float *gub = tu_xcalloc((size_t)n_exp * 2 * inter, 4), *dnb = tu_xcalloc((size_t)n_exp * dim, 4);
    tu_rand_fill(&rng, gu, n_exp * gsz, -0.2f, 0.2f);
    tu_rand_fill(&rng, dn, n_exp * dsz, -0.2f, 0.2f);
    tu_rand_fill(&rng, gub, (size_t)n_exp * 2 * inter, -0.5f, 0.5f);
    tu_rand_fill(&rng, dnb, (size_t)n_exp * dim, -0.5f, 0.5f);
    size_t gdb = kn_fp8_data_bytes(2 * inter, dim), gsc = kn_fp8_scale_count(2 * inter, dim);
    size_t ddb = kn_fp8_data_bytes(dim, inter), dsc = kn_fp8_scale_count(dim, inter);
    uint8_t *guq = tu_xcalloc(n_exp * gdb, 1), *dnq = tu_xcalloc(n_exp * ddb, 1);
    float *gus = tu_xcalloc(n_exp * gsc, 4), *dns = tu_xcalloc(n_exp * dsc, 4);
    float *gud = tu_xcalloc(n_exp * gsz, 4), *dnd = tu_xcalloc(n_exp * dsz, 4);
    for (int e = 0; e < n_exp; e++) {
        kn_fp8_quantize_weight(guq + e * gdb, gus + e * gsc, gu + e * gsz, 2 * inter, dim);
        kn_fp8_quantize_weight(dnq + e * ddb, dns + e * dsc, dn + e * dsz, dim, inter);
        kn_fp8_dequantize_weight(gud + e * gsz, guq + e * gdb, gus + e * gsc, 2 * inter, dim);
        kn_fp8_dequantize_weight(dnd + e * dsz, dnq + e * ddb, dns + e * dsc, dim, inter);
    }
    kn_moe_weights w = {
        .n_experts = n_exp, .expert_offset = 0, .dim = dim, .inter = inter,
        .wdtype = KN_FP8_E4M3, .gate_up = guq, .gate_up_bias = gub, .down = dnq,
        .down_bias = dnb, .gate_up_scale = gus, .down_scale = dns,
        .act = KN_ACT_SWIGLU_OAI, .alpha = 1.702f, .limit = 7.0f,
    };
    float *x = tu_xcalloc((size_t)n_tok * dim, 4), *out = tu_xcalloc((size_t)n_tok * dim, 4);
    float *rw = tu_xcalloc((size_t)n_tok * k, 4);
    int32_t *idx = tu_xcalloc((size_t)n_tok * k, sizeof *idx);
    double *ref = tu_xcalloc((size_t)n_tok * dim, sizeof *ref);
    tu_rand_fill(&rng, x, (size_t)n_tok * dim, -2.0f, 2.0f);
    for (int t = 0; t < n_tok; t++) {
        idx[t * k] = tu_rand_int(&rng, n_exp);
        idx[t * k + 1] = (idx[t * k] + 1 + tu_rand_int(&rng, n_exp - 1)) % n_exp;
        rw[t * k] = 0.6f;
        rw[t * k + 1] = 0.4f;
    }
    ref_moe_fp8(ref, x, idx, rw, n_tok, k, &w, gud, dnd);
    assert_int_equal(kn_moe_experts(&be, out, x, idx, rw, n_tok, k, &w), TN_OK);
    /* Same quantization on both sides; where fp32 sgemm and the float64 sum
     * put an activation on different sides of an e4m3 rounding boundary,
     * that one activation moves by one e4m3 step (2^-3 relative at most),
     * which moves the output by well under 5e-3 of its norm; without such
     * a flip the two agree to fp32 accuracy. */
    double err = tu_max_rel_err(out, ref, (size_t)n_tok * dim);
    if (!(err <= 5e-3))
        fail_msg("fp8 experts: rel err %g", err);
    print_message("# fp8 experts vs float64: normwise rel err %.3g\n", err);
    w.down_scale = NULL;
    assert_int_equal(kn_moe_experts(&be, out, x, idx, rw, n_tok, k, &w), TN_ERR_ARG);
    free(gu); free(dn); free(gub); free(dnb); free(guq); free(dnq); free(gus); free(dns);
    free(gud); free(dnd); free(x); free(out); free(rw); free(idx); free(ref);
    kn_backend_free(&be);
}

static void mxfp4_decodes_hand_made_blocks(void **state)
{
    (void)state;
    const float fp4[16] = { 0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6 };
    for (int c = 0; c < 16; c++) {
        assert_true(tm_fp4_value((uint8_t)c) == fp4[c]);
        assert_true(!!signbit(tm_fp4_value((uint8_t)c)) == (c >= 8));
    }
    /* group 0, scale 2^0: bytes 0x21 0x9f, then 0x00...; group 1, scale
     * 2^1: byte 0x7e; group 2, scale 2^-2: byte 0x35; group 3, scale
     * 2^-127 (e8m0 0): byte 0x0f */
    uint8_t blocks[4 * 16] = { 0 }, scales[4] = { 127, 128, 125, 0 };
    blocks[0] = 0x21;
    blocks[1] = 0x9f;
    blocks[16] = 0x7e;
    blocks[32] = 0x35;
    blocks[48] = 0x0f;
    float got[128];
    tm_mxfp4_decode_row(got, blocks, scales, 4);
    float want[128] = { 0 };
    want[0] = 0.5f;     /* 0x21: low nibble 1 (0.5), high nibble 2 (1.0) */
    want[1] = 1.0f;
    want[2] = -6.0f;    /* 0x9f: low f (-6), high 9 (-0.5) */
    want[3] = -0.5f;
    want[32] = -8.0f;   /* 0x7e: low e (-4) * 2, high 7 (6) * 2 */
    want[33] = 12.0f;
    want[64] = 0.75f;   /* 0x35: low 5 (3) / 4, high 3 (1.5) / 4 */
    want[65] = 0.375f;
    want[96] = -6.0f * 0x1p-127f;   /* 0x0f: low f (-6) * 2^-127, high 0 */
    want[97] = 0.0f;
    for (int i = 0; i < 128; i++)
        if (got[i] != want[i])
            fail_msg("element %d: %a, want %a", i, (double)got[i], (double)want[i]);
    scales[1] = 255;    /* e8m0 NaN */
    tm_mxfp4_decode_row(got, blocks, scales, 4);
    assert_true(isnan(got[32]) && isnan(got[40]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(e4m3_decode_all_codes),
        cmocka_unit_test(e4m3_encode_exhaustive),
        cmocka_unit_test(fp8_weight_layout),
        cmocka_unit_test(fp8_activation_rows),
        cmocka_unit_test(matmul_w_fp8_matches_float64),
        cmocka_unit_test(moe_experts_fp8_matches_float64),
        cmocka_unit_test(mxfp4_decodes_hand_made_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
