/* Times kn_moe_experts on the CUDA backend with bf16 and FP8 (e4m3, 128x128
 * block scales) expert weights, on
 * GPT-OSS-20B (32 experts of 2880 -> 2880, top-4, clamped SwiGLU, biases)
 * and Qwen3-30B-A3B (128 experts of 2048 -> 768, top-8, SwiGLU) layer
 * shapes (and GPT-OSS-120B, 128 experts of 2880, top-4, FP8 only, 512 and
 * 8192 tokens): prefill 8192 tokens and decode batches 1/8/32/128 (and 512
 * rows, to see where the two paths cross), through both
 * expert paths (the per-expert cuBLAS GEMMs, on one stream and spread over
 * 4 side streams, and the grouped one-launch kernels, forced with
 * kn_cuda_set_moe_grouped / kn_cuda_set_moe_streams; the grouped kernels are
 * not run at prefill sizes, where they re-read the weights for every 64
 * rows by design; the FP8 grouped kernels are, to show the crossover).
 * FP8 rows add "per-expert, unfused act" (kn_cuda_set_moe_fp8_fused_act 0:
 * the activation pass and the quantization as two kernels, as before) and,
 * from 128 tokens, the grouped FP8 GEMMs (moe_gemm_fp8.cu) on mma.sync
 * (the default prefill path) and on wgmma (kn_cuda_set_moe_fp8_gemm 1 / 4;
 * the per-expert rows run with 0). The TFLOP/s column puts them next to
 * bench_moe_peer.py's torch._grouped_mm rows (same shapes, 8192 tokens).
 * Built with
 * `make CUDA=1 gpu-progs`; run by tests/gpu/run.sh bench-moe.
 *
 * Weights are random (kn_fill_uniform on the GPU; time does not depend on
 * the values); routes are uniform over the experts (k distinct per token),
 * as random router weights give. Each time is the median of several
 * CUDA-event-timed calls after warm-ups, events on the backend's stream, so
 * a host sync inside the op (the per-expert path's) counts as the device
 * idle time it causes. Floors: bytes = the weights of the experts some
 * token routes to (each read once) over --hbm-tbps; FLOPs = 6 * routes * dim
 * * inter over --peak-tflops; the floor is the larger.
 *
 * Usage: bench_moe [--hbm-tbps X] [--peak-tflops Y] [--quick] [--fp8-only | --bf16-only]
 *                  [--varying-m]
 * (--varying-m: the bf16 GEMM paths under fresh row counts, see
 * bench_varying_m)
 * Prints a markdown table, one row per (model, weights, batch, path), and a last
 * line "MOE_BENCH_DONE". */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/fp8.h"
#include "kernels/fill.h"
#include "kernels/moe.h"
#include "common/status.h"
#include "tests/unit/testutil.h"

typedef struct moe_model {
    const char *name;
    int n_experts, k, dim, inter;
    kn_act act;
    int biases;
    int fp8_only; /* (GPT-OSS-120B: its experts are FP8 in the checkpoint) */
} moe_model;

static const moe_model MODELS[] = {
    { "gpt-oss-20b", 32, 4, 2880, 2880, KN_ACT_SWIGLU_OAI, 1, 0 },
    { "gpt-oss-120b", 128, 4, 2880, 2880, KN_ACT_SWIGLU_OAI, 1, 1 },
    { "qwen3-30b-a3b", 128, 8, 2048, 768, KN_ACT_SWIGLU, 0, 0 },
};
static const int BATCHES[] = { 1, 8, 32, 128, 512, 8192 }; /* 512: where the paths cross */
enum { PREFILL_MIN = 1024 }; /* batches at least this big are "prefill" */

static void fail(const char *what)
{
    fprintf(stderr, "bench_moe: %s failed\n", what);
    exit(1);
}

static int cmp_float(const void *x, const void *y)
{
    float a = *(const float *)x, c = *(const float *)y;
    return a < c ? -1 : a > c;
}

typedef struct moe_call {
    float *out, *x, *wts;
    int32_t *idx;
    int n_tokens, k;
    kn_moe_weights w;
} moe_call;

/* Median ms of reps calls after warm-ups (on the backend's stream). */
static float time_call(const kn_backend *be, const moe_call *c, int warmup, int reps)
{
    cudaStream_t s = (cudaStream_t)be->stream;
    cudaEvent_t e0, e1;
    float ms[64];
    if (reps > 64)
        reps = 64;
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)
        fail("cudaEventCreate");
    for (int it = 0; it < warmup + reps; it++) {
        if (cudaEventRecord(e0, s) != cudaSuccess)
            fail("cudaEventRecord");
        if (kn_moe_experts(be, c->out, c->x, c->idx, c->wts, c->n_tokens, c->k, &c->w) != TN_OK)
            fail("kn_moe_experts");
        if (cudaEventRecord(e1, s) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess)
            fail("cudaEventRecord/Synchronize");
        if (it >= warmup && cudaEventElapsedTime(&ms[it - warmup], e0, e1) != cudaSuccess)
            fail("cudaEventElapsedTime");
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    qsort(ms, (size_t)reps, sizeof ms[0], cmp_float);
    return ms[reps / 2];
}

static void *dev_fill(const kn_backend *be, kn_dtype dt, size_t n, uint64_t seed, float lo, float hi)
{
    void *d = kn_malloc(be, n * kn_dtype_size(dt));
    if (!d || kn_fill_uniform(be, d, dt, n, seed, lo, hi) != TN_OK)
        fail("weight fill");
    return d;
}

static void bench_model(const kn_backend *be, tu_rng *rng, const moe_model *m, kn_dtype wd, double hbm_tbps,
                        double peak_tflops, int quick)
{
    const int fp8 = wd == KN_FP8_E4M3;
    /* elements (bf16) or bytes (fp8 codes, rows padded to 128) of all experts */
    const size_t ngu = (size_t)m->n_experts * (fp8 ? kn_fp8_data_bytes(2 * (size_t)m->inter, m->dim)
                                                   : 2 * (size_t)m->inter * m->dim);
    const size_t nd = (size_t)m->n_experts * (fp8 ? kn_fp8_data_bytes(m->dim, m->inter) : (size_t)m->dim * m->inter);
    const size_t gsc = kn_fp8_scale_count(2 * (size_t)m->inter, m->dim), dsc = kn_fp8_scale_count(m->dim, m->inter);
    moe_call c;
    memset(&c, 0, sizeof c);
    c.k = m->k;
    c.w = (kn_moe_weights){ .n_experts = m->n_experts, .expert_offset = 0, .dim = m->dim, .inter = m->inter,
                            .wdtype = wd, .act = m->act, .alpha = 1.702f, .limit = 7.0f };
    if (fp8) { /* codes over the whole e4m3 range, scales making values ~0.03 */
        c.w.gate_up = dev_fill(be, KN_FP8_E4M3, ngu, 1, -448.f, 448.f);
        c.w.down = dev_fill(be, KN_FP8_E4M3, nd, 2, -448.f, 448.f);
        c.w.gate_up_scale = dev_fill(be, KN_F32, (size_t)m->n_experts * gsc, 7, 0.5f * 0.03f / 448.f, 0.03f / 448.f);
        c.w.down_scale = dev_fill(be, KN_F32, (size_t)m->n_experts * dsc, 8, 0.5f * 0.03f / 448.f, 0.03f / 448.f);
    } else {
        c.w.gate_up = dev_fill(be, KN_BF16, ngu, 1, -0.03f, 0.03f);
        c.w.down = dev_fill(be, KN_BF16, nd, 2, -0.03f, 0.03f);
    }
    if (m->biases) {
        c.w.gate_up_bias = dev_fill(be, KN_F32, (size_t)m->n_experts * 2 * m->inter, 3, -0.1f, 0.1f);
        c.w.down_bias = dev_fill(be, KN_F32, (size_t)m->n_experts * m->dim, 4, -0.1f, 0.1f);
    }
    const int max_tokens = BATCHES[sizeof BATCHES / sizeof BATCHES[0] - 1];
    c.x = dev_fill(be, KN_F32, (size_t)max_tokens * m->dim, 5, -1.f, 1.f);
    c.out = kn_malloc(be, (size_t)max_tokens * m->dim * sizeof(float));
    c.idx = kn_malloc(be, (size_t)max_tokens * m->k * sizeof(int32_t));
    c.wts = dev_fill(be, KN_F32, (size_t)max_tokens * m->k, 6, 0.05f, 0.5f);
    int32_t *idx = malloc((size_t)max_tokens * m->k * sizeof(int32_t));
    char *used = malloc((size_t)m->n_experts);
    if (!c.out || !c.idx || !idx || !used)
        fail("allocation");
    /* what one expert's products must read: weights (+ scales) + biases */
    const double expert_bytes = (fp8 ? (double)(ngu + nd) / m->n_experts + (gsc + dsc) * 4.0
                                     : 3.0 * m->dim * m->inter * 2) +
                                (m->biases ? (3.0 * m->inter + m->dim) * 4 : 0);

    for (size_t bi = 0; bi < sizeof BATCHES / sizeof BATCHES[0]; bi++) {
        const int T = BATCHES[bi];
        if (quick && T > 32 && T < PREFILL_MIN)
            continue;
        if (m->fp8_only && T < 512) /* (120B: the prefill question only; keeps the step short) */
            continue;
        memset(used, 0, (size_t)m->n_experts);
        for (int t = 0; t < T; t++)
            for (int j = 0; j < m->k; j++) {
                int e, dup;
                do {
                    e = tu_rand_int(rng, m->n_experts);
                    dup = 0;
                    for (int i = 0; i < j; i++)
                        dup |= idx[(size_t)t * m->k + i] == e;
                } while (dup);
                idx[(size_t)t * m->k + j] = e;
                used[e] = 1;
            }
        int n_used = 0;
        for (int e = 0; e < m->n_experts; e++)
            n_used += used[e];
        if (kn_copy_to_backend(be, c.idx, idx, (size_t)T * m->k * sizeof(int32_t)) != TN_OK)
            fail("route upload");
        c.n_tokens = T;
        const double bytes = n_used * expert_bytes;
        const double flops = 6.0 * T * m->k * m->dim * m->inter;
        const double floor_ms = 1e3 * (bytes / (hbm_tbps * 1e12) > flops / (peak_tflops * 1e12)
                                           ? bytes / (hbm_tbps * 1e12)
                                           : flops / (peak_tflops * 1e12));
        const int prefill = T >= PREFILL_MIN;
        /* What the backend picks by default (the rule in moe_experts.cu). */
        const char *rows_env = getenv("TANDEM_CUDA_MOE_GROUPED_ROWS");
        int thr = rows_env && atoi(rows_env) > 0 ? atoi(rows_env) : KN_CUDA_MOE_GROUPED_ROWS;
        int auto_grouped = (long long)T * m->k <= (long long)thr * m->n_experts;
        /* mode 0: per-expert GEMMs, 1: grouped kernels, 2: per-expert GEMMs
         * over 4 side streams (TANDEM_CUDA_MOE_STREAMS=4), 3 (FP8): per-expert
         * with the unfused activation + quantization, 4 / 5 (FP8, 128 tokens
         * and up): the grouped FP8 GEMMs on mma.sync (kn_cuda_set_moe_fp8_gemm
         * 1, the default off the grouped kernels) / on wgmma (4), 6: on the
         * warp-specialised TMA + wgmma kernel (7); the other modes run with
         * it 0; 7 (FP8, up to KN_CUDA_MOE_GEMV_TOKENS tokens): the expert
         * GEMVs (moe_gemv_fp8.cu, the default there), which the other modes
         * run with off */
        static const char *const mode_name[8] = { "per-expert", "grouped", "per-expert, 4 streams",
                                                  "per-expert, unfused act", "grouped GEMM (mma.sync e4m3)",
                                                  "grouped GEMM (wgmma e4m3)",
                                                  "grouped GEMM (warp-specialised TMA + wgmma e4m3)",
                                                  "expert gemv (fp32 act)" };
        const int gemv = fp8 && T <= KN_CUDA_MOE_GEMV_TOKENS;
        const int default_mode = gemv ? 7 : auto_grouped ? 1 : fp8 && T >= 128 ? 6 : 0;
        const int fp8_gemm_was = kn_cuda_moe_fp8_gemm(be);
        for (int mode = 0; mode < (fp8 ? 8 : 3); mode++) {
            if (mode == 7 && !gemv)
                continue;
            if (mode == 1 && prefill && !fp8)
                continue;
            if (fp8 && (mode == 2 || mode == 3) && !prefill) /* (the prefill-path variants: keep the run short) */
                continue;
            if (mode >= 4 && mode <= 6 && T < 128)
                continue;
            kn_cuda_set_moe_grouped(be, mode == 1);
            kn_cuda_set_moe_streams(be, mode == 2 ? 4 : 1);
            kn_cuda_set_moe_fp8_fused_act(be, mode != 3);
            kn_cuda_set_moe_fp8_gemm(be, mode == 4 ? 1 : mode == 5 ? 4 : mode == 6 ? 7 : 0);
            kn_cuda_set_moe_gemv(be, mode == 7);
            float ms = time_call(be, &c, prefill ? 2 : 5, prefill ? 5 : (quick ? 11 : 21));
            kn_cuda_set_moe_grouped(be, -1);
            kn_cuda_set_moe_streams(be, 1);
            kn_cuda_set_moe_fp8_fused_act(be, 1);
            kn_cuda_set_moe_fp8_gemm(be, fp8_gemm_was);
            kn_cuda_set_moe_gemv(be, 1);
            printf("| %s | %s | %s %d | %s%s | %.3f | %.0f | %.1f | %d | %.3f | %.1fx |\n", m->name,
                   fp8 ? "fp8" : "bf16", prefill ? "prefill" : T > 128 ? "tokens" : "decode", T, mode_name[mode],
                   mode == default_mode ? " (default)" : "", ms, bytes / (ms * 1e-3) / 1e9,
                   flops / (ms * 1e-3) / 1e12, n_used, floor_ms, ms / floor_ms);
            fflush(stdout);
        }
    }
    kn_free(be, (void *)c.w.gate_up), kn_free(be, (void *)c.w.down);
    kn_free(be, (void *)c.w.gate_up_bias), kn_free(be, (void *)c.w.down_bias);
    kn_free(be, (void *)c.w.gate_up_scale), kn_free(be, (void *)c.w.down_scale);
    kn_free(be, c.x), kn_free(be, c.out), kn_free(be, c.idx), kn_free(be, c.wts);
    free(idx), free(used);
}

/* --varying-m: the host cost of the per-expert bf16 GEMMs when every
 * forward brings new row counts, as in a server. One "forward" is 24
 * kn_moe_experts calls (GPT-OSS-20B's 24 layers; one layer's weights,
 * reused) with the per-expert path forced, each call with fresh random
 * routes (so fresh per-expert m for its 32 x 2 GEMMs), uploaded before the
 * clock starts; the time is host wall clock from the first call to the
 * end of a stream sync, median over forwards after warm-ups. Both bf16
 * GEMM paths run in the same process (kn_cuda_set_lt_cache): cublasGemmEx
 * (TANDEM_CUDA_LT_CACHE=0, an algorithm search per new shape) and
 * cuBLASLt with plans cached per row bucket (the default). */
enum { VM_LAYERS = 24, VM_WARMUP = 2, VM_REPS = 7 };

static double wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void random_routes(tu_rng *rng, int32_t *idx, int n_tokens, int k, int n_experts)
{
    for (int t = 0; t < n_tokens; t++)
        for (int j = 0; j < k; j++) {
            int e, dup;
            do {
                e = tu_rand_int(rng, n_experts);
                dup = 0;
                for (int i = 0; i < j; i++)
                    dup |= idx[(size_t)t * k + i] == e;
            } while (dup);
            idx[(size_t)t * k + j] = e;
        }
}

static void bench_varying_m(const kn_backend *be, tu_rng *rng, const int *tokens, int n_sizes)
{
    const moe_model *m = &MODELS[0];
    int max_tokens = 0;
    for (int i = 0; i < n_sizes; i++)
        max_tokens = tokens[i] > max_tokens ? tokens[i] : max_tokens;
    const size_t ngu = (size_t)m->n_experts * 2 * m->inter * m->dim;
    const size_t nd = (size_t)m->n_experts * m->dim * m->inter;
    const size_t n_slots = (size_t)max_tokens * m->k;
    kn_moe_weights w = { .n_experts = m->n_experts, .expert_offset = 0, .dim = m->dim, .inter = m->inter,
                         .wdtype = KN_BF16, .act = m->act, .alpha = 1.702f, .limit = 7.0f };
    w.gate_up = dev_fill(be, KN_BF16, ngu, 1, -0.03f, 0.03f);
    w.down = dev_fill(be, KN_BF16, nd, 2, -0.03f, 0.03f);
    w.gate_up_bias = dev_fill(be, KN_F32, (size_t)m->n_experts * 2 * m->inter, 3, -0.1f, 0.1f);
    w.down_bias = dev_fill(be, KN_F32, (size_t)m->n_experts * m->dim, 4, -0.1f, 0.1f);
    float *x = dev_fill(be, KN_F32, (size_t)max_tokens * m->dim, 5, -1.f, 1.f);
    float *wts = dev_fill(be, KN_F32, n_slots, 6, 0.05f, 0.5f);
    float *out = kn_malloc(be, (size_t)max_tokens * m->dim * sizeof(float));
    int32_t *d_idx = kn_malloc(be, VM_LAYERS * n_slots * sizeof(int32_t));
    int32_t *idx = malloc(VM_LAYERS * n_slots * sizeof(int32_t));
    if (!out || !d_idx || !idx)
        fail("allocation");
    printf("\n## varying m: %d x kn_moe_experts (per-expert bf16 GEMMs, %d experts x 2 each), fresh routes "
           "per call, host wall ms per forward (median of %d)\n\n"
           "| tokens | bf16 GEMM path | median ms | min ms | max ms | cuBLASLt queries per forward |\n"
           "| ---: | --- | ---: | ---: | ---: | ---: |\n", VM_LAYERS, m->n_experts, VM_REPS);
    kn_cuda_set_moe_grouped(be, 0);
    kn_cuda_set_moe_streams(be, 1);
    for (int si = 0; si < n_sizes; si++) {
        const int T = tokens[si];
        const size_t slots = (size_t)T * m->k;
        double med[2];
        for (int lt = 0; lt < 2; lt++) {
            float ms[VM_REPS];
            long long queries = 0;
            kn_cuda_set_lt_cache(be, lt);
            for (int it = 0; it < VM_WARMUP + VM_REPS; it++) {
                for (int l = 0; l < VM_LAYERS; l++)
                    random_routes(rng, idx + l * slots, T, m->k, m->n_experts);
                if (kn_copy_to_backend(be, d_idx, idx, VM_LAYERS * slots * sizeof(int32_t)) != TN_OK)
                    fail("route upload");
                long long q0 = kn_cuda_lt_searches(be);
                double t0 = wall_ms();
                for (int l = 0; l < VM_LAYERS; l++)
                    if (kn_moe_experts(be, out, x, d_idx + l * slots, wts, T, m->k, &w) != TN_OK)
                        fail("kn_moe_experts");
                if (kn_backend_sync(be) != TN_OK)
                    fail("kn_backend_sync");
                if (it >= VM_WARMUP) {
                    ms[it - VM_WARMUP] = (float)(wall_ms() - t0);
                    queries += kn_cuda_lt_searches(be) - q0;
                }
            }
            qsort(ms, VM_REPS, sizeof ms[0], cmp_float);
            med[lt] = ms[VM_REPS / 2];
            printf("| %d | %s | %.2f | %.2f | %.2f | %.1f |\n", T,
                   lt ? "cuBLASLt, cached plans" : "cublasGemmEx (TANDEM_CUDA_LT_CACHE=0)", ms[VM_REPS / 2],
                   ms[0], ms[VM_REPS - 1], (double)queries / VM_REPS);
            fflush(stdout);
        }
        printf("| %d | speedup (GemmEx / cached) | %.2fx | | | |\n", T, med[0] / med[1]);
    }
    kn_cuda_set_lt_cache(be, 1);
    kn_cuda_set_moe_grouped(be, -1);
    kn_free(be, (void *)w.gate_up), kn_free(be, (void *)w.down);
    kn_free(be, (void *)w.gate_up_bias), kn_free(be, (void *)w.down_bias);
    kn_free(be, x), kn_free(be, wts), kn_free(be, out), kn_free(be, d_idx);
    free(idx);
}

int main(int argc, char **argv)
{
    double hbm_tbps = 4.229, peak_tflops = 789.8;
    int quick = 0, fp8_only = 0, bf16_only = 0, varying_m = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            printf("usage: bench_moe [--hbm-tbps X] [--peak-tflops Y] [--quick] [--fp8-only | --bf16-only]\n"
                   "                 [--varying-m]\n"
                   "Times kn_moe_experts (bf16 and FP8 weights) on GPT-OSS-20B and Qwen3-30B-A3B layer shapes,\n"
                   "both CUDA expert paths; floors from X TB/s (default 4.229) and Y TFLOP/s (789.8).\n"
                   "--quick skips batches 128 and 512 and takes fewer repetitions.\n"
                   "--fp8-only / --bf16-only: only that weight format's rows.\n"
                   "--varying-m instead times 24-layer forwards of per-expert GEMMs with fresh row\n"
                   "counts every call (GPT-OSS-20B, 512/2048/8192 tokens), cublasGemmEx vs cached\n"
                   "cuBLASLt plans, host wall clock.\n");
            return 0;
        } else if (strcmp(argv[i], "--hbm-tbps") == 0 && i + 1 < argc) {
            hbm_tbps = atof(argv[++i]);
        } else if (strcmp(argv[i], "--peak-tflops") == 0 && i + 1 < argc) {
            peak_tflops = atof(argv[++i]);
        } else if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "--fp8-only") == 0) {
            fp8_only = 1;
        } else if (strcmp(argv[i], "--bf16-only") == 0) {
            bf16_only = 1;
        } else if (strcmp(argv[i], "--varying-m") == 0) {
            varying_m = 1;
        } else {
            fprintf(stderr, "bench_moe: unknown argument %s (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (!(hbm_tbps > 0) || !(peak_tflops > 0)) {
        fprintf(stderr, "bench_moe: --hbm-tbps and --peak-tflops must be positive\n");
        return 2;
    }
    kn_backend gpu;
    if (kn_backend_init_cuda(&gpu, 0) != TN_OK)
        fail("kn_backend_init_cuda");
    tu_rng rng;
    tu_rng_init(&rng, 7);
    if (varying_m) {
        static const int tokens[] = { 512, 2048, 8192 };
        bench_varying_m(&gpu, &rng, tokens, (int)(sizeof tokens / sizeof tokens[0]));
        kn_backend_free(&gpu);
        printf("MOE_BENCH_DONE\n");
        return 0;
    }
    printf("| model | weights | batch | path | median ms | weight GB/s | TFLOP/s | experts read | floor ms | x floor |\n"
           "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (size_t i = 0; i < sizeof MODELS / sizeof MODELS[0]; i++)
        for (int f = 0; f < 2; f++)
            if ((f == 0 && !fp8_only && !MODELS[i].fp8_only) || (f == 1 && !bf16_only))
                bench_model(&gpu, &rng, &MODELS[i], f ? KN_FP8_E4M3 : KN_BF16, hbm_tbps, peak_tflops, quick);
    kn_backend_free(&gpu);
    printf("MOE_BENCH_DONE\n");
    return 0;
}
