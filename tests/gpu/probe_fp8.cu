/* One-shot device probe of the block-scaled FP8 product (kernels/fp8.h):
 * the real kn_cuda_quant_fp8 and kn_cuda_gemm_fp8 against a float64 host
 * recomputation of the same function, at GPT-OSS (k = 2880, not a multiple
 * of 128) and k = 4096 shapes, fp32 and bf16 output, with and without bias;
 * then the scale-layout alternatives (unpadded weight-scale rows, padded
 * activation-scale runs) so a wrong layout guess shows which one cuBLASLt
 * wants; then timings. Build (no GPU needed):
 *   see tests/gpu/build_probe_fp8.sh
 * Prints one line per case, "PASS"/"FAIL", and a summary last.
 *
 * The one device run of this probe (2026-12-02) used its first version,
 * before the 16-row padding of the activations: it showed that cuBLASLt
 * has no algorithm for m = 1, 5, 7, 130, 333, that the padded weight-scale
 * rows are the right layout, and the timings in docs/PERF.md. This version
 * is the current API's; it has not run on a GPU yet. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include <cuda_runtime.h>
#include <cublasLt.h>
#include "kernels/cuda/fp8_cuda.cuh"
extern "C" {
#include "kernels/cuda/cuda_ops.h"
#include "kernels/dtype.h"
}

static int failures = 0;

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static float urand(float lo, float hi)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (float)((rng_state >> 11) * (1.0 / 9007199254740992.0));
}

#define CK(call)                                                                     \
    do {                                                                             \
        cudaError_t e_ = (call);                                                     \
        if (e_ != cudaSuccess) {                                                     \
            printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
            exit(2);                                                                 \
        }                                                                            \
    } while (0)

/* Random matrix whose 128-blocks have magnitudes spread over 2^-6..2^6, so
 * the block scales matter. */
static void fill(std::vector<float> &v, size_t rows, size_t cols)
{
    v.resize(rows * cols);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            float mag = ldexpf(1.0f, (int)(((r / 128) * 7 + (c / 128) * 3) % 13) - 6);
            v[r * cols + c] = urand(-1.f, 1.f) * mag;
        }
}

static float bf16_to_f32(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

struct layout_opts {
    int w_scale_ld_unpadded;   /* weight scale rows ceil(k/128) floats (not rounded to 4) */
    int act_scale_pad4;        /* activation scale runs of round_up(m, 4) */
};

/* Runs one GEMM case; returns the normwise max relative error (or -1 on a
 * library error). */
static double run_case(const kn_backend *be, int m, int n, int k, int out_bf16, int with_bias,
                       layout_opts lo, int host_quant, int *fused, double *quant_ok)
{
    const size_t kp = kn_fp8_ld(k), kb = kn_fp8_blocks(k), nb = kn_fp8_blocks(n);
    *fused = -1;
    *quant_ok = 0;
    std::vector<float> x, w, bias(n);
    fill(x, m, k);
    fill(w, n, k);
    for (int j = 0; j < n; j++)
        bias[j] = urand(-2.f, 2.f);
    std::vector<uint8_t> wq(kn_fp8_data_bytes(n, k));
    std::vector<float> wsc(kn_fp8_scale_count(n, k));
    kn_fp8_quantize_weight(wq.data(), wsc.data(), w.data(), n, k);
    /* host quantization of x: codes [m][kp], scales [m][kb] */
    std::vector<uint8_t> xq((size_t)m * kp);
    std::vector<float> xs((size_t)m * kb);
    for (int i = 0; i < m; i++)
        kn_fp8_quantize_act_row(&xq[(size_t)i * kp], &xs[(size_t)i * kb], &x[(size_t)i * k], k);
    /* float64 reference of the function */
    const size_t sld = kn_fp8_scale_ld(k);
    std::vector<double> ref((size_t)m * n);
    double lut[256];
    for (int c = 0; c < 256; c++)
        lut[c] = kn_e4m3_to_f32((uint8_t)c);
    double refmax = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double acc = with_bias ? bias[j] : 0.0;
            for (size_t b = 0; b < kb; b++) {
                double part = 0;
                for (size_t c = b * 128; c < (b + 1) * 128 && c < (size_t)k; c++)
                    part += lut[xq[(size_t)i * kp + c]] * lut[wq[(size_t)j * kp + c]];
                acc += part * xs[(size_t)i * kb + b] * wsc[(j / 128) * sld + b];
            }
            ref[(size_t)i * n + j] = acc;
            refmax = fmax(refmax, fabs(acc));
        }
    /* device buffers */
    uint8_t *d_wq, *d_xq;
    float *d_ws, *d_xs, *d_x, *d_bias;
    void *d_out;
    size_t out_bytes = (size_t)m * n * (out_bf16 ? 2 : 4);
    size_t act_sc = kn_cuda_fp8_act_scale_count(m, k, 1);
    CK(cudaMalloc(&d_wq, wq.size()));
    CK(cudaMalloc(&d_ws, (nb * sld + 4) * sizeof(float)));
    CK(cudaMalloc(&d_xq, kn_cuda_fp8_padded_rows(m, 1) * kp));
    CK(cudaMalloc(&d_xs, act_sc * sizeof(float)));
    CK(cudaMalloc(&d_x, x.size() * sizeof(float)));
    CK(cudaMalloc(&d_bias, n * sizeof(float)));
    CK(cudaMalloc(&d_out, out_bytes));
    CK(cudaMemcpy(d_wq, wq.data(), wq.size(), cudaMemcpyHostToDevice));
    if (lo.w_scale_ld_unpadded) {
        std::vector<float> packed(nb * kb);
        for (size_t r = 0; r < nb; r++)
            for (size_t b = 0; b < kb; b++)
                packed[r * kb + b] = wsc[r * sld + b];
        CK(cudaMemcpy(d_ws, packed.data(), packed.size() * 4, cudaMemcpyHostToDevice));
    } else {
        CK(cudaMemcpy(d_ws, wsc.data(), wsc.size() * 4, cudaMemcpyHostToDevice));
    }
    CK(cudaMemcpy(d_x, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_bias, bias.data(), n * 4, cudaMemcpyHostToDevice));
    *quant_ok = 1;
    const size_t mp = kn_cuda_fp8_round_rows(m);
    if (!host_quant) {
        /* the device quantization must equal the host's bit for bit */
        CK(cudaMemset(d_xq, 0x7f, (size_t)m * kp));
        CK(cudaMemset(d_xs, 0, act_sc * sizeof(float)));
        if (kn_cuda_quant_fp8(be, "probe", d_xq, d_xs, d_x, m, k, NULL, 1) != TN_OK)
            return -1;
        std::vector<uint8_t> gq((size_t)m * kp);
        std::vector<float> gs(mp * kb);
        CK(cudaMemcpy(gq.data(), d_xq, gq.size(), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gs.data(), d_xs, gs.size() * 4, cudaMemcpyDeviceToHost));
        size_t bad = 0;
        for (size_t i = 0; i < gq.size(); i++)
            bad += gq[i] != xq[i];
        for (int i = 0; i < m; i++)
            for (size_t b = 0; b < kb; b++)
                bad += gs[b * mp + i] != xs[(size_t)i * kb + b];
        *quant_ok = bad == 0;
    } else {
        size_t run = lo.act_scale_pad4 ? (size_t)(m + 3) / 4 * 4 : (size_t)m;
        std::vector<float> t(run * kb, 1.0f);
        for (int i = 0; i < m; i++)
            for (size_t b = 0; b < kb; b++)
                t[b * run + i] = xs[(size_t)i * kb + b];
        CK(cudaMemcpy(d_xq, xq.data(), xq.size(), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_xs, t.data(), t.size() * 4, cudaMemcpyHostToDevice));
    }
    CK(cudaMemset(d_out, 0xff, out_bytes)); /* NaN in fp32 and bf16 */
    int rc = host_quant ? kn_cuda_gemm_fp8(be, "probe", d_out, out_bf16, d_xq, d_xs, d_wq, d_ws,
                                           with_bias ? d_bias : NULL, m, n, k)
                        : kn_cuda_fp8_linear(be, "probe", d_out, out_bf16, d_x, d_wq, d_ws,
                                             with_bias ? d_bias : NULL, m, n, k);
    CK(cudaDeviceSynchronize());
    *fused = with_bias ? kn_cuda_fp8_last_bias_fused(be) : -1;
    double err = -1;
    if (rc == TN_OK) {
        std::vector<uint8_t> raw(out_bytes);
        CK(cudaMemcpy(raw.data(), d_out, out_bytes, cudaMemcpyDeviceToHost));
        double maxdiff = 0;
        for (size_t i = 0; i < (size_t)m * n; i++) {
            double g;
            if (out_bf16) {
                uint16_t b;
                memcpy(&b, &raw[i * 2], 2);
                g = bf16_to_f32(b);
            } else {
                float f;
                memcpy(&f, &raw[i * 4], 4);
                g = f;
            }
            double d = fabs(g - ref[i]);
            if (!(d <= maxdiff))   /* NaN propagates */
                maxdiff = isnan(d) ? INFINITY : d;
        }
        err = maxdiff / (refmax > 0 ? refmax : 1);
    }
    cudaFree(d_wq);
    cudaFree(d_ws);
    cudaFree(d_xq);
    cudaFree(d_xs);
    cudaFree(d_x);
    cudaFree(d_bias);
    cudaFree(d_out);
    return err;
}

static void report(const char *what, int m, int n, int k, int out_bf16, int bias, double err,
                   int fused, double quant_ok, int expect_pass)
{
    double tol = out_bf16 ? 8e-3 : 1e-3;
    int pass = err >= 0 && err <= tol && quant_ok == 1;
    if (expect_pass && !pass)
        failures++;
    printf("%-5s %-26s m=%-5d n=%-5d k=%-5d out=%-4s bias=%d fused=%2d quant_bitexact=%d "
           "relerr=%.3g (tol %.0e)\n", pass ? "PASS" : "FAIL", what, m, n, k,
           out_bf16 ? "bf16" : "fp32", bias, fused, (int)quant_ok, err, tol);
}

static void time_gemm(const kn_backend *be, int m, int n, int k)
{
    const size_t kp = kn_fp8_ld(k);
    uint8_t *d_wq, *d_xq;
    float *d_ws, *d_xs, *d_x, *d_out, *d_bias;
    CK(cudaMalloc(&d_wq, kn_fp8_data_bytes(n, k)));
    CK(cudaMalloc(&d_ws, kn_fp8_scale_count(n, k) * 4));
    CK(cudaMalloc(&d_xq, kn_cuda_fp8_padded_rows(m, 1) * kp));
    CK(cudaMalloc(&d_xs, kn_cuda_fp8_act_scale_count(m, k, 1) * 4));
    CK(cudaMalloc(&d_x, (size_t)m * k * 4));
    CK(cudaMalloc(&d_out, kn_cuda_fp8_padded_rows(m, 1) * n * 4));
    CK(cudaMalloc(&d_bias, (size_t)n * 4));
    CK(cudaMemset(d_wq, 0x38, kn_fp8_data_bytes(n, k)));
    CK(cudaMemset(d_ws, 0, kn_fp8_scale_count(n, k) * 4));
    CK(cudaMemset(d_x, 0, (size_t)m * k * 4));
    CK(cudaMemset(d_bias, 0, (size_t)n * 4));
    cudaStream_t s = (cudaStream_t)be->stream;
    cudaEvent_t e0, e1, e2;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventCreate(&e2));
    for (int i = 0; i < 3; i++) {
        kn_cuda_quant_fp8(be, "probe", d_xq, d_xs, d_x, m, k, NULL, 1);
        kn_cuda_gemm_fp8(be, "probe", d_out, 0, d_xq, d_xs, d_wq, d_ws, d_bias,
                         (int)kn_cuda_fp8_round_rows(m), n, k);
    }
    const int reps = 20;
    CK(cudaEventRecord(e0, s));
    for (int i = 0; i < reps; i++)
        kn_cuda_quant_fp8(be, "probe", d_xq, d_xs, d_x, m, k, NULL, 1);
    CK(cudaEventRecord(e1, s));
    for (int i = 0; i < reps; i++)
        kn_cuda_gemm_fp8(be, "probe", d_out, 0, d_xq, d_xs, d_wq, d_ws, d_bias,
                         (int)kn_cuda_fp8_round_rows(m), n, k);
    CK(cudaEventRecord(e2, s));
    CK(cudaEventSynchronize(e2));
    float tq, tg;
    CK(cudaEventElapsedTime(&tq, e0, e1));
    CK(cudaEventElapsedTime(&tg, e1, e2));
    tq /= reps;
    tg /= reps;
    double flops = 2.0 * m * n * (double)kp;
    double wbytes = (double)kn_fp8_data_bytes(n, k);
    printf("TIME  m=%-5d n=%-5d k=%-5d quant %.4f ms (%.0f GB/s read+write)  gemm+bias %.4f ms "
           "= %.0f TFLOP/s, weight stream %.0f GB/s\n", m, n, k, tq,
           ((double)m * k * 4 + (double)m * kp) / (tq * 1e-3) / 1e9, tg,
           flops / (tg * 1e-3) / 1e12, wbytes / (tg * 1e-3) / 1e9);
    cudaFree(d_wq);
    cudaFree(d_ws);
    cudaFree(d_xq);
    cudaFree(d_xs);
    cudaFree(d_x);
    cudaFree(d_out);
    cudaFree(d_bias);
}

int main(void)
{
    kn_backend be;
    int rc = kn_cuda_backend_init(&be, 0);
    if (rc != TN_OK) {
        printf("FAIL backend init %d\n", rc);
        return 1;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    int ver = 0;
    cudaRuntimeGetVersion(&ver);
    printf("device %s sm_%d%d, CUDA runtime %d, cublasLt %zu\n", prop.name, prop.major,
           prop.minor, ver, cublasLtGetVersion());
    layout_opts std_lo = {0, 0};
    const int shapes[][3] = { {1, 2880, 2880}, {7, 5760, 2880}, {64, 2880, 2880},
                              {333, 200, 2880}, {5, 4096, 4096}, {130, 640, 4096},
                              {3, 384, 64}, {17, 96, 200} };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ob = 0; ob < 2; ob++)
            for (int bias = 0; bias < 2; bias++) {
                int fused = -1;
                double qok = 0;
                int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                double err = run_case(&be, m, n, k, ob, bias, std_lo, 0, &fused, &qok);
                report("device quant + gemm", m, n, k, ob, bias, err, fused, qok, 1);
            }
    {   /* segmented quantization (the MoE experts' rows): scales of each
         * segment at kn_cuda_fp8_seg_base, outer-dim major inside it */
        const int m = 10, k = 2880, kb = (int)kn_fp8_blocks(k), kp = (int)kn_fp8_ld(k);
        const int segs[4] = {0, 3, 3, 10};
        std::vector<float> x;
        fill(x, m, k);
        float *d_x, *d_s;
        uint8_t *d_q;
        int *d_seg;
        size_t ns = kn_cuda_fp8_act_scale_count(m, k, 3);
        CK(cudaMalloc(&d_x, x.size() * 4));
        CK(cudaMalloc(&d_q, kn_cuda_fp8_padded_rows(m, 3) * kp));
        CK(cudaMalloc(&d_s, ns * 4));
        CK(cudaMalloc(&d_seg, sizeof segs));
        CK(cudaMemcpy(d_x, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_seg, segs, sizeof segs, cudaMemcpyHostToDevice));
        CK(cudaMemset(d_s, 0xff, ns * 4));
        CK(cudaMemset(d_q, 0, kn_cuda_fp8_padded_rows(m, 3) * kp));
        int qrc = kn_cuda_quant_fp8(&be, "probe", d_q, d_s, d_x, m, k, d_seg, 3);
        CK(cudaDeviceSynchronize());
        std::vector<uint8_t> gq(kn_cuda_fp8_padded_rows(m, 3) * kp), hq(kp);
        std::vector<float> gs(ns), hs(kb);
        CK(cudaMemcpy(gq.data(), d_q, gq.size(), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gs.data(), d_s, ns * 4, cudaMemcpyDeviceToHost));
        size_t bad = qrc != TN_OK;
        for (int g = 0; g < 3; g++)
            for (int r = segs[g]; r < segs[g + 1]; r++) {
                size_t p0 = kn_cuda_fp8_seg_row(segs[g], g), rows = segs[g + 1] - segs[g];
                kn_fp8_quantize_act_row(hq.data(), hs.data(), &x[(size_t)r * k], k);
                bad += memcmp(hq.data(), &gq[(p0 + r - segs[g]) * kp], kp) != 0;
                for (int b = 0; b < kb; b++)
                    bad += gs[kn_cuda_fp8_seg_base(p0, g, k) +
                              (size_t)b * kn_cuda_fp8_round_rows(rows) + (r - segs[g])] != hs[b];
            }
        if (bad)
            failures++;
        printf("%-5s segmented quant (segments 0,3,3,10; k=2880): %zu mismatches\n",
               bad ? "FAIL" : "PASS", bad);
        cudaFree(d_x);
        cudaFree(d_q);
        cudaFree(d_s);
        cudaFree(d_seg);
    }
    /* layout alternatives, host-quantized activations (informative) */
    const int alt[][3] = { {64, 640, 2880} };
    for (size_t s = 0; s < sizeof alt / sizeof alt[0]; s++) {
        int m = alt[s][0], n = alt[s][1], k = alt[s][2], fused = -1;
        double qok = 0;
        layout_opts v[4] = { {0, 0}, {1, 0}, {0, 1}, {1, 1} };
        const char *names[4] = { "alt: wld pad4, act ld m", "alt: wld unpadded", "alt: act ld pad4",
                                 "alt: both" };
        for (int i = 0; i < 4; i++) {
            double err = run_case(&be, m, n, k, 0, 1, v[i], 1, &fused, &qok);
            report(names[i], m, n, k, 0, 1, err, fused, qok, 0);
        }
    }
    time_gemm(&be, 8192, 5760, 2880);
    time_gemm(&be, 8192, 2880, 2880);
    time_gemm(&be, 32768, 5120, 2880);
    time_gemm(&be, 128, 5760, 2880);
    time_gemm(&be, 1, 5760, 2880);
    kn_cuda_backend_free(&be);
    printf("SUMMARY %s: %d failing required case(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
