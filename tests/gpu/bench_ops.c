/* Times the CUDA backend's dense ops on GPT-OSS-20B prefill shapes (8192
 * tokens, hidden 2880, 64 q / 8 kv heads of 64, 32 experts top-4 of
 * intermediate 2880): kn_matmul and kn_moe_experts in fp32 and with TF32
 * products (TANDEM_CUDA_TF32=1 backend), kn_rmsnorm for bandwidth.
 * Built with `make CUDA=1`; run by tests/gpu/run.sh.
 *
 * Weights are random (throughput does not depend on their values): one
 * 64 MiB random block is tiled over each weight array. Every time is the
 * median of 10 runs after 3 warm-ups, with CUDA events on the backend's
 * stream. Prints a markdown table; useful FLOPs count 2 per multiply-add.
 *
 * Then the decode-sized ops a decode step runs per layer (batch 1 and 32):
 * kn_add_rmsnorm on one row, kn_rope_kv_append (GPT-OSS and Qwen3 heads,
 * bf16 pages) and kn_moe_router, fused and as the separate kernels
 * (kn_cuda_set_fused_decode 0). Those are microseconds of latency, so each
 * time is the median over REPS of DECODE_CALLS calls back to back, per call,
 * recorded as one CUDA graph and replayed as a decode step runs them (no
 * host launch cost between calls; each kernel's latency stays).
 *
 * Then the FP8 decode rows: kn_matmul_w with FP8 weights at 1, 2, 4, 8, 32
 * 64 and 128 rows on GPT-OSS's q/k/v/o (2880 -> 4096/512, 4096 -> 2880) and
 * Qwen3's q (2048 -> 4096), the GEMV (kernels/cuda/gemv_fp8.cu, up to 8
 * rows), the skinny kernel (gemm_fp8_skinny.cu) and cuBLASLt for the same
 * shape, and kn_moe_experts FP8
 * at one token (top-4 of 32, 2880/2880), the expert GEMVs next to the
 * grouped decode path: GB/s of the bytes each must read (weight codes and
 * scales, x, out) and its share of the device's copy ceiling (--hbm-tbps,
 * default the H200's 4.229 TB/s of docs/PERF.md; pass the card's own on
 * another GPU: tests/gpu/run.sh passes the ceilings step's). These time
 * DECODE_CALLS calls back to back in a graph (one call between two events
 * measured the launch, 8-16 us),
 * each GEMV call on the next of as many weight copies as fill 150 MB (3x
 * the L2), the expert rows on 4 experts of 25 MB each: HBM reads, as in a
 * decode step. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/fp8.h"
#include "kernels/elementwise.h"
#include "kernels/matmul.h"
#include "kernels/moe.h"
#include "kernels/moe_router.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/rope_kv.h"
#include "common/status.h"
#include "tests/unit/testutil.h"

enum { WARMUP = 3, REPS = 10, TOKENS = 8192, HIDDEN = 2880, QKV = 5120, ATTN_OUT = 4096,
       EXPERTS = 32, TOPK = 4, INTER = 2880, DECODE_CALLS = 200, DECODE_CTX = 8192,
       DECODE_PAGE = 16, DECODE_MAX_SEQS = 32 };

typedef struct bench {
    kn_backend gpu;
    tu_rng rng;
    float *block; /* host random block tiled over device buffers */
    size_t block_n;
    double copy_gbs; /* the copy ceiling the GB/s rows are shares of */
} bench;

static void fail(const char *what)
{
    fprintf(stderr, "bench_ops: %s failed\n", what);
    exit(1);
}

static float *dev_random(bench *b, size_t n)
{
    float *d = kn_malloc(&b->gpu, n * sizeof(float));
    if (!d)
        fail("kn_malloc");
    for (size_t done = 0; done < n; done += b->block_n) {
        size_t c = n - done < b->block_n ? n - done : b->block_n;
        if (kn_copy_to_backend(&b->gpu, d + done, b->block, c * sizeof(float)) != TN_OK)
            fail("upload");
    }
    return d;
}

static int cmp_float(const void *x, const void *y)
{
    float a = *(const float *)x, c = *(const float *)y;
    return a < c ? -1 : a > c;
}

/* Median ms of REPS calls of op(ctx) after WARMUP. */
typedef int (*op_fn)(const kn_backend *be, void *ctx);
static float time_op(const kn_backend *be, op_fn op, void *ctx)
{
    cudaStream_t s = (cudaStream_t)be->stream;
    cudaEvent_t e0, e1;
    float ms[REPS];
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)
        fail("cudaEventCreate");
    for (int it = 0; it < WARMUP + REPS; it++) {
        cudaEventRecord(e0, s);
        if (op(be, ctx) != TN_OK)
            fail("op");
        cudaEventRecord(e1, s);
        if (cudaEventSynchronize(e1) != cudaSuccess)
            fail("cudaEventSynchronize");
        if (it >= WARMUP)
            cudaEventElapsedTime(&ms[it - WARMUP], e0, e1);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    qsort(ms, REPS, sizeof ms[0], cmp_float);
    return ms[REPS / 2];
}

typedef struct mm_ctx {
    float *out, *x, *w, *bias;
    int m, n, k;
} mm_ctx;

static int run_matmul(const kn_backend *be, void *p)
{
    mm_ctx *c = p;
    return kn_matmul(be, c->out, c->x, c->w, c->bias, c->m, c->n, c->k);
}

typedef struct moe_ctx {
    float *out, *x, *wts;
    int32_t *idx;
    kn_moe_weights w;
} moe_ctx;

static int run_moe(const kn_backend *be, void *p)
{
    moe_ctx *c = p;
    return kn_moe_experts(be, c->out, c->x, c->idx, c->wts, TOKENS, TOPK, &c->w);
}

typedef struct rms_ctx {
    float *out, *x, *w;
} rms_ctx;

static int run_rms(const kn_backend *be, void *p)
{
    rms_ctx *c = p;
    return kn_rmsnorm(be, c->out, c->x, c->w, TOKENS, HIDDEN, 1e-5f);
}

/* The residual add + norm, fused and as the engine ran it before. */
typedef struct add_rms_ctx {
    float *x, *xn, *delta, *w;
} add_rms_ctx;

static int run_add_rms(const kn_backend *be, void *p)
{
    add_rms_ctx *c = p;
    return kn_add_rmsnorm(be, c->x, c->xn, c->delta, c->w, TOKENS, HIDDEN, 1e-5f);
}

static int run_add_then_rms(const kn_backend *be, void *p)
{
    add_rms_ctx *c = p;
    int rc = kn_add(be, c->x, c->x, c->delta, (size_t)TOKENS * HIDDEN);
    return rc != TN_OK ? rc : kn_rmsnorm(be, c->xn, c->x, c->w, TOKENS, HIDDEN, 1e-5f);
}

typedef struct add_rms_rows_ctx {
    add_rms_ctx a;
    int rows;
} add_rms_rows_ctx;

static int run_add_rms_rows(const kn_backend *be, void *p)
{
    add_rms_rows_ctx *c = p;
    return kn_add_rmsnorm(be, c->a.x, c->a.xn, c->a.delta, c->a.w, c->rows, HIDDEN, 1e-5f);
}

static int run_add_then_rms_rows(const kn_backend *be, void *p)
{
    add_rms_rows_ctx *c = p;
    int rc = kn_add(be, c->a.x, c->a.x, c->a.delta, (size_t)c->rows * HIDDEN);
    return rc != TN_OK ? rc : kn_rmsnorm(be, c->a.xn, c->a.x, c->a.w, c->rows, HIDDEN, 1e-5f);
}

/* Median ms per call of DECODE_CALLS calls in a row (REPS runs after WARMUP). */
static float time_op_each(const kn_backend *be, op_fn op, void *ctx)
{
    cudaStream_t s = (cudaStream_t)be->stream;
    cudaEvent_t e0, e1;
    float ms[REPS];
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)
        fail("cudaEventCreate");
    /* The DECODE_CALLS calls recorded as one CUDA graph and the graph
     * replayed, as a decode step runs them: no host launch cost between
     * kernels. An op that cannot be recorded is timed eagerly (said so). */
    kn_graph *g = NULL;
    if (kn_graph_begin(be) == TN_OK) {
        int rc = TN_OK;
        for (int c = 0; c < DECODE_CALLS && rc == TN_OK; c++)
            rc = op(be, ctx);
        if (kn_graph_end(be, &g) != TN_OK || rc != TN_OK) {
            kn_graph_free(g);
            g = NULL;
        }
    }
    if (!g)
        fprintf(stderr, "bench_ops: an op could not be recorded as a graph; timed eagerly\n");
    for (int it = 0; it < WARMUP + REPS; it++) {
        cudaEventRecord(e0, s);
        if (g) {
            if (kn_graph_launch(be, g) != TN_OK)
                fail("kn_graph_launch");
        } else {
            for (int c = 0; c < DECODE_CALLS; c++)
                if (op(be, ctx) != TN_OK)
                    fail("op");
        }
        cudaEventRecord(e1, s);
        if (cudaEventSynchronize(e1) != cudaSuccess)
            fail("cudaEventSynchronize");
        if (it >= WARMUP) {
            cudaEventElapsedTime(&ms[it - WARMUP], e0, e1);
            ms[it - WARMUP] /= DECODE_CALLS;
        }
    }
    kn_graph_free(g);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    qsort(ms, REPS, sizeof ms[0], cmp_float);
    return ms[REPS / 2];
}

/* One decode step's q/k/v rows of `rows` sequences at position
 * DECODE_CTX - 1 over bf16 pages. */
typedef struct rkv_ctx {
    float *q, *k, *v;
    kn_kv_pools pools;
    kn_seq_batch b;
    kn_qk_rope r;
    int n_heads, n_kv_heads, head_dim;
} rkv_ctx;

static int run_rope_kv(const kn_backend *be, void *p)
{
    rkv_ctx *c = p;
    return kn_rope_kv_append(be, c->q, c->k, c->v, &c->pools, &c->b, c->n_heads, c->n_kv_heads,
                             c->head_dim, DECODE_PAGE, &c->r);
}

static void rkv_setup(bench *b, rkv_ctx *c, int rows, int nh, int nkv, int hd, int qk_norm)
{
    const int pages = DECODE_CTX / DECODE_PAGE;
    int32_t qo[DECODE_MAX_SEQS + 1], kl[DECODE_MAX_SEQS], pos[DECODE_MAX_SEQS];
    int32_t *pt = malloc((size_t)rows * pages * sizeof(int32_t));
    if (!pt)
        fail("malloc");
    for (int s = 0; s <= rows; s++)
        qo[s] = s;
    for (int s = 0; s < rows; s++) {
        kl[s] = DECODE_CTX;
        pos[s] = DECODE_CTX - 1;
        for (int i = 0; i < pages; i++)
            pt[(size_t)s * pages + i] = s * pages + i;
    }
    memset(c, 0, sizeof *c);
    c->n_heads = nh, c->n_kv_heads = nkv, c->head_dim = hd;
    c->q = dev_random(b, (size_t)rows * nh * hd);
    c->k = dev_random(b, (size_t)rows * nkv * hd);
    c->v = dev_random(b, (size_t)rows * nkv * hd);
    const size_t pool_bytes = (size_t)rows * pages * nkv * DECODE_PAGE * hd * 2;
    c->pools = (kn_kv_pools){kn_malloc(&b->gpu, pool_bytes), kn_malloc(&b->gpu, pool_bytes), KN_BF16};
    int32_t *d_qo = kn_malloc(&b->gpu, sizeof qo), *d_kl = kn_malloc(&b->gpu, sizeof kl);
    int32_t *d_pt = kn_malloc(&b->gpu, (size_t)rows * pages * sizeof(int32_t));
    int32_t *d_pos = kn_malloc(&b->gpu, sizeof pos);
    float inv[128] = {0}, scale = 1.f;
    kn_rope_config cfg = {.head_dim = hd, .theta = 150000.0, .yarn = 1, .factor = 32.0,
                          .beta_fast = 32.0, .beta_slow = 1.0, .original_max_position = 4096};
    float *d_inv = kn_malloc(&b->gpu, sizeof inv);
    if (!c->pools.k || !c->pools.v || !d_qo || !d_kl || !d_pt || !d_pos || !d_inv ||
        kn_rope_inv_freq(&cfg, inv, &scale) != TN_OK ||
        kn_copy_to_backend(&b->gpu, d_qo, qo, sizeof qo) != TN_OK ||
        kn_copy_to_backend(&b->gpu, d_kl, kl, sizeof kl) != TN_OK ||
        kn_copy_to_backend(&b->gpu, d_pos, pos, sizeof pos) != TN_OK ||
        kn_copy_to_backend(&b->gpu, d_inv, inv, sizeof inv) != TN_OK ||
        kn_copy_to_backend(&b->gpu, d_pt, pt, (size_t)rows * pages * sizeof(int32_t)) != TN_OK)
        fail("rope_kv setup");
    free(pt);
    c->b = (kn_seq_batch){.n_seqs = rows, .n_rows = rows, .max_pages = pages, .max_q_len = 1,
                          .max_kv_len = DECODE_CTX, .q_offset = d_qo, .kv_len = d_kl,
                          .page_table = d_pt, .n_pages = rows * pages};
    c->r = (kn_qk_rope){.q_norm = qk_norm ? dev_random(b, (size_t)hd) : NULL,
                        .k_norm = qk_norm ? dev_random(b, (size_t)hd) : NULL, .eps = 1e-6f,
                        .pos = d_pos, .inv_freq = d_inv, .attn_scale = scale};
}

static void rkv_free(bench *b, rkv_ctx *c)
{
    void *p[] = {c->q, c->k, c->v, c->pools.k, c->pools.v, (void *)c->b.q_offset,
                 (void *)c->b.kv_len, (void *)c->b.page_table, (void *)c->r.pos,
                 (void *)c->r.inv_freq, (void *)c->r.q_norm, (void *)c->r.k_norm};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        if (p[i])
            kn_free(&b->gpu, p[i]);
}

typedef struct router_ctx {
    float *logits, *x, *w, *bias, *ew;
    int32_t *idx;
    int rows, dim, experts, k;
    kn_route_mode mode;
} router_ctx;

static int run_router(const kn_backend *be, void *p)
{
    router_ctx *c = p;
    return kn_moe_router(be, c->idx, c->ew, c->logits, c->x, c->w, c->bias, c->rows, c->dim,
                         c->experts, c->k, c->mode, 1);
}

/* Each decode op fused and unfused: ms per call. */
static void decode_rows(bench *b)
{
    printf("\n| decode op | shape | fused ms/call | separate kernels ms/call |\n"
           "| --- | --- | --- | --- |\n");
    for (int rows = 1; rows <= 32; rows *= 32) {
        add_rms_ctx a = {dev_random(b, (size_t)rows * HIDDEN), dev_random(b, (size_t)rows * HIDDEN),
                         dev_random(b, (size_t)rows * HIDDEN), dev_random(b, HIDDEN)};
        float f = time_op_each(&b->gpu, run_add_rms_rows, &(add_rms_rows_ctx){a, rows});
        float u = time_op_each(&b->gpu, run_add_then_rms_rows, &(add_rms_rows_ctx){a, rows});
        printf("| kn_add_rmsnorm (separate: kn_add + kn_rmsnorm) | %dx%d | %.4f | %.4f |\n", rows,
               HIDDEN, f, u);
        kn_free(&b->gpu, a.x), kn_free(&b->gpu, a.xn), kn_free(&b->gpu, a.delta), kn_free(&b->gpu, a.w);
        static const struct { const char *name; int nh, nkv, hd, norm; } heads[] = {
            {"GPT-OSS 64/8 heads of 64, YaRN", 64, 8, 64, 0},
            {"Qwen3 32/4 heads of 128, q/k norm", 32, 4, 128, 1}};
        for (int h = 0; h < 2; h++) {
            rkv_ctx c;
            rkv_setup(b, &c, rows, heads[h].nh, heads[h].nkv, heads[h].hd, heads[h].norm);
            kn_cuda_set_fused_decode(&b->gpu, 1);
            f = time_op_each(&b->gpu, run_rope_kv, &c);
            kn_cuda_set_fused_decode(&b->gpu, 0);
            u = time_op_each(&b->gpu, run_rope_kv, &c);
            kn_cuda_set_fused_decode(&b->gpu, 1);
            printf("| kn_rope_kv_append, bf16 pages (%s) | %d rows | %.4f | %.4f |\n", heads[h].name,
                   rows, f, u);
            rkv_free(b, &c);
        }
        static const struct { const char *name; int dim, experts, k; kn_route_mode mode; } rt[] = {
            {"GPT-OSS-20B", 2880, 32, 4, KN_ROUTE_TOPK_SOFTMAX},
            {"GPT-OSS-120B", 2880, 128, 4, KN_ROUTE_TOPK_SOFTMAX},
            {"Qwen3-30B-A3B", 2048, 128, 8, KN_ROUTE_SOFTMAX_TOPK}};
        for (int i = 0; i < 3; i++) {
            router_ctx c = {dev_random(b, (size_t)rows * rt[i].experts),
                            dev_random(b, (size_t)rows * rt[i].dim),
                            dev_random(b, (size_t)rt[i].experts * rt[i].dim),
                            dev_random(b, (size_t)rt[i].experts),
                            dev_random(b, (size_t)rows * rt[i].k),
                            kn_malloc(&b->gpu, (size_t)rows * rt[i].k * sizeof(int32_t)),
                            rows, rt[i].dim, rt[i].experts, rt[i].k, rt[i].mode};
            if (!c.idx)
                fail("kn_malloc");
            kn_cuda_set_fused_decode(&b->gpu, 1);
            f = time_op_each(&b->gpu, run_router, &c);
            kn_cuda_set_fused_decode(&b->gpu, 0);
            u = time_op_each(&b->gpu, run_router, &c);
            kn_cuda_set_fused_decode(&b->gpu, 1);
            printf("| kn_moe_router (%s, %d experts top-%d) | %d rows x %d | %.4f | %.4f |\n",
                   rt[i].name, rt[i].experts, rt[i].k, rows, rt[i].dim, f, u);
            kn_free(&b->gpu, c.logits), kn_free(&b->gpu, c.x), kn_free(&b->gpu, c.w);
            kn_free(&b->gpu, c.bias), kn_free(&b->gpu, c.ew), kn_free(&b->gpu, c.idx);
        }
    }
}

/* n random finite e4m3 codes on the device (NaN codes 0x7f/0xff avoided). */
static uint8_t *dev_fp8(bench *b, size_t n)
{
    uint8_t *d = kn_malloc(&b->gpu, n ? n : 1);
    size_t chunk = (size_t)16 << 20;
    uint8_t *h = malloc(chunk);
    if (!d || !h)
        fail("fp8 weight allocation");
    for (size_t i = 0; i < chunk; i++) {
        uint8_t c = (uint8_t)tu_rand_int(&b->rng, 256);
        h[i] = (c & 0x7f) == 0x7f ? 0x38 : c;
    }
    for (size_t done = 0; done < n; done += chunk) {
        size_t c = n - done < chunk ? n - done : chunk;
        if (kn_copy_to_backend(&b->gpu, d + done, h, c) != TN_OK)
            fail("fp8 upload");
    }
    free(h);
    return d;
}

typedef struct mmw_ctx {
    float *out, *x, *bias;
    kn_weight w;
    int m, n, k;
    const uint8_t *copies; /* NULL, or n_copies weights stride bytes apart, taken in turn */
    size_t stride;
    int n_copies, next;
} mmw_ctx;

static int run_matmul_w(const kn_backend *be, void *p)
{
    mmw_ctx *c = p;
    if (c->copies) {
        c->w.data = c->copies + (size_t)c->next * c->stride;
        c->next = (c->next + 1) % c->n_copies;
    }
    return kn_matmul_w(be, c->out, c->x, &c->w, c->bias, c->m, c->n, c->k);
}

typedef struct moe1_ctx {
    float *out, *x, *wts;
    int32_t *idx;
    int n_tokens;
    kn_moe_weights w;
} moe1_ctx;

static int run_moe1(const kn_backend *be, void *p)
{
    moe1_ctx *c = p;
    return kn_moe_experts(be, c->out, c->x, c->idx, c->wts, c->n_tokens, TOPK, &c->w);
}

static void gb_row(const bench *b, const char *op, const char *path, const char *shape, float ms, double bytes)
{
    double gbs = bytes / (ms * 1e-3) / 1e9;
    printf("| %s | %s | %s | %.4f | %.0f GB/s (%.0f%% of %.3g TB/s) |\n", op, path, shape, ms, gbs,
           100.0 * gbs / b->copy_gbs, b->copy_gbs / 1e3);
}

/* The FP8 decode rows (file comment). */
static void bench_fp8_decode(bench *b)
{
    static const int shapes[][2] = { { 4096, 2880 }, { 512, 2880 }, { 2880, 4096 }, { 4096, 2048 } };
    static const char *names[] = { "q (GPT-OSS)", "k/v (GPT-OSS)", "o (GPT-OSS)", "q (Qwen3)" };
    static const int rows[] = { 1, 2, 4, 8, 32, 64, 128 };
    printf("\n| op | path | shape M x N x K | median ms | rate |\n| --- | --- | --- | --- | --- |\n");
    float *x = dev_random(b, (size_t)128 * 4096), *out = dev_random(b, (size_t)128 * 5760);
    float *bias = dev_random(b, 5760);
    const int skinny_was = kn_cuda_fp8_skinny(&b->gpu);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int n = shapes[s][0], k = shapes[s][1];
        /* copies of the weight filling 3x the H200's 50 MB L2, taken in
         * turn, so calls back to back read HBM as a decode step does */
        const size_t wb = kn_fp8_data_bytes(n, k);
        int n_copies = (int)(((size_t)150 << 20) / wb) + 1;
        n_copies = n_copies > 256 ? 256 : n_copies;
        mmw_ctx c = { out, x, bias, { KN_FP8_E4M3, NULL, NULL }, 0, n, k, NULL, wb, n_copies, 0 };
        uint8_t *wq = dev_fp8(b, wb * n_copies);
        float *ws = dev_random(b, kn_fp8_scale_count(n, k));
        c.copies = wq;
        c.w.scale = ws;
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
            c.m = rows[r];
            double bytes = (double)kn_fp8_data_bytes(n, k) + 4.0 * kn_fp8_scale_count(n, k) +
                           4.0 * c.m * (k + n) + 4.0 * n;
            char shape[96], op[96];
            snprintf(shape, sizeof shape, "%d x %d x %d", c.m, n, k);
            snprintf(op, sizeof op, "fp8 gemv %s +bias", names[s]);
            /* each path alone: the GEMV (fp32 x), the skinny kernel (x
             * quantized), cuBLASLt (quant + GEMM) */
            for (int path = 0; path < 3; path++) {
                if ((path == 0 && c.m > KN_CUDA_FP8_GEMV_ROWS) || (path == 1 && c.m > KN_CUDA_FP8_SKINNY_ROWS))
                    continue;
                kn_cuda_set_fp8_gemv(&b->gpu, path == 0);
                kn_cuda_set_fp8_skinny(&b->gpu, path == 1 ? 1 : 0);
                float ms = time_op_each(&b->gpu, run_matmul_w, &c);
                gb_row(b, op, path == 0 ? "gemv" : path == 1 ? "skinny (quant + mma)" : "cuBLASLt (quant + GEMM)",
                       shape, ms, bytes);
            }
        }
        kn_cuda_set_fp8_gemv(&b->gpu, 1);
        kn_cuda_set_fp8_skinny(&b->gpu, skinny_was);
        kn_free(&b->gpu, wq);
        kn_free(&b->gpu, ws);
    }
    /* the experts at one token: 4 of 32 experts' gate_up and down */
    moe1_ctx m;
    memset(&m, 0, sizeof m);
    m.out = out;
    m.x = x;
    m.n_tokens = 1;
    int32_t idx[TOPK] = { 3, 17, 8, 30 };
    float wts[TOPK] = { 0.4f, 0.3f, 0.2f, 0.1f };
    m.idx = kn_malloc(&b->gpu, sizeof idx);
    m.wts = kn_malloc(&b->gpu, sizeof wts);
    if (!m.idx || !m.wts || kn_copy_to_backend(&b->gpu, m.idx, idx, sizeof idx) != TN_OK ||
        kn_copy_to_backend(&b->gpu, m.wts, wts, sizeof wts) != TN_OK)
        fail("moe decode upload");
    const size_t gub = kn_fp8_data_bytes(2 * INTER, HIDDEN), dnb = kn_fp8_data_bytes(HIDDEN, INTER);
    const size_t gus = kn_fp8_scale_count(2 * INTER, HIDDEN), dns = kn_fp8_scale_count(HIDDEN, INTER);
    m.w = (kn_moe_weights){ .n_experts = EXPERTS, .expert_offset = 0, .dim = HIDDEN, .inter = INTER,
                            .wdtype = KN_FP8_E4M3, .act = KN_ACT_SWIGLU_OAI, .alpha = 1.702f, .limit = 7.0f };
    m.w.gate_up = dev_fp8(b, EXPERTS * gub);
    m.w.down = dev_fp8(b, EXPERTS * dnb);
    m.w.gate_up_scale = dev_random(b, EXPERTS * gus);
    m.w.down_scale = dev_random(b, EXPERTS * dns);
    m.w.gate_up_bias = dev_random(b, (size_t)EXPERTS * 2 * INTER);
    m.w.down_bias = dev_random(b, (size_t)EXPERTS * HIDDEN);
    double bytes = TOPK * ((double)gub + dnb + 4.0 * (gus + dns) + 4.0 * (2 * INTER + HIDDEN));
    for (int on = 1; on >= 0; on--) {
        kn_cuda_set_moe_gemv(&b->gpu, on);
        float ms = time_op_each(&b->gpu, run_moe1, &m);
        gb_row(b, "fp8 experts (top-4 of 32, clamped SwiGLU, biases)", on ? "expert gemv" : "grouped decode",
               "1 token, 2880/2880", ms, bytes);
    }
    kn_cuda_set_moe_gemv(&b->gpu, 1);
    kn_free(&b->gpu, (void *)m.w.gate_up), kn_free(&b->gpu, (void *)m.w.down);
    kn_free(&b->gpu, (void *)m.w.gate_up_scale), kn_free(&b->gpu, (void *)m.w.down_scale);
    kn_free(&b->gpu, (void *)m.w.gate_up_bias), kn_free(&b->gpu, (void *)m.w.down_bias);
    kn_free(&b->gpu, m.idx), kn_free(&b->gpu, m.wts);
    kn_free(&b->gpu, x), kn_free(&b->gpu, out), kn_free(&b->gpu, bias);
}

static void row(const char *op, const char *prec, const char *shape, float ms, double flops, double bytes)
{
    printf("| %s | %s | %s | %.3f | ", op, prec, shape, ms);
    if (flops > 0)
        printf("%.1f TFLOP/s |\n", flops / (ms * 1e-3) / 1e12);
    else
        printf("%.2f TB/s |\n", bytes / (ms * 1e-3) / 1e12);
}

int main(int argc, char **argv)
{
    bench b;
    memset(&b, 0, sizeof b);
    b.copy_gbs = 4229.0; /* the H200's measured copy ceiling (docs/PERF.md) */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            printf("usage: bench_ops [--hbm-tbps X]\n"
                   "Times the dense ops on GPT-OSS-20B prefill shapes and the FP8 decode ops on the\n"
                   "CUDA backend; the decode rows' GB/s are shown as shares of X TB/s, the device's\n"
                   "copy ceiling (default 4.229, the H200's; tests/gpu/run.sh passes the measured one).\n");
            return 0;
        } else if (strcmp(argv[i], "--hbm-tbps") == 0 && i + 1 < argc && atof(argv[i + 1]) > 0) {
            b.copy_gbs = 1e3 * atof(argv[++i]);
        } else {
            fprintf(stderr, "bench_ops: unknown or incomplete argument %s (see --help)\n", argv[i]);
            return 2;
        }
    }
    tu_rng_init(&b.rng, 7);
    b.block_n = (size_t)16 << 20;
    b.block = malloc(b.block_n * sizeof(float));
    if (!b.block)
        fail("malloc");
    tu_rand_fill(&b.rng, b.block, b.block_n, -0.05f, 0.05f);
    unsetenv("TANDEM_CUDA_TF32");
    if (kn_backend_init_cuda(&b.gpu, 0) != TN_OK)
        fail("kn_backend_init_cuda");
    kn_backend tf32;
    setenv("TANDEM_CUDA_TF32", "1", 1);
    if (kn_backend_init_cuda(&tf32, 0) != TN_OK)
        fail("kn_backend_init_cuda (TF32)");
    unsetenv("TANDEM_CUDA_TF32");

    printf("| op | precision | shape | median ms | rate |\n| --- | --- | --- | --- | --- |\n");
    float *x = dev_random(&b, (size_t)TOKENS * ATTN_OUT);
    float *out = dev_random(&b, (size_t)TOKENS * QKV);
    float *w_qkv = dev_random(&b, (size_t)QKV * HIDDEN), *b_qkv = dev_random(&b, QKV);
    float *w_o = dev_random(&b, (size_t)HIDDEN * ATTN_OUT), *b_o = dev_random(&b, HIDDEN);
    mm_ctx qkv = { out, x, w_qkv, b_qkv, TOKENS, QKV, HIDDEN };
    mm_ctx oproj = { out, x, w_o, b_o, TOKENS, HIDDEN, ATTN_OUT };
    const kn_backend *bes[2] = { &b.gpu, &tf32 };
    const char *prec[2] = { "fp32", "tf32" };
    for (int i = 0; i < 2; i++) {
        float ms = time_op(bes[i], run_matmul, &qkv);
        row("kn_matmul (qkv, +bias)", prec[i], "8192x5120x2880", ms, 2.0 * TOKENS * QKV * HIDDEN, 0);
        ms = time_op(bes[i], run_matmul, &oproj);
        row("kn_matmul (o_proj, +bias)", prec[i], "8192x2880x4096", ms, 2.0 * TOKENS * HIDDEN * ATTN_OUT, 0);
    }

    /* MoE: every token picks TOPK distinct experts uniformly. */
    int32_t *idx = malloc((size_t)TOKENS * TOPK * sizeof(int32_t));
    float *wts = malloc((size_t)TOKENS * TOPK * sizeof(float));
    if (!idx || !wts)
        fail("malloc");
    for (int t = 0; t < TOKENS; t++) {
        for (int j = 0; j < TOPK; j++) {
            int e, dup;
            do {
                e = tu_rand_int(&b.rng, EXPERTS);
                dup = 0;
                for (int i = 0; i < j; i++)
                    dup |= idx[t * TOPK + i] == e;
            } while (dup);
            idx[t * TOPK + j] = e;
            wts[t * TOPK + j] = 0.25f;
        }
    }
    moe_ctx moe;
    moe.out = out;
    moe.x = x;
    moe.idx = kn_malloc(&b.gpu, (size_t)TOKENS * TOPK * sizeof(int32_t));
    moe.wts = kn_malloc(&b.gpu, (size_t)TOKENS * TOPK * sizeof(float));
    if (!moe.idx || !moe.wts ||
        kn_copy_to_backend(&b.gpu, moe.idx, idx, (size_t)TOKENS * TOPK * sizeof(int32_t)) != TN_OK ||
        kn_copy_to_backend(&b.gpu, moe.wts, wts, (size_t)TOKENS * TOPK * sizeof(float)) != TN_OK)
        fail("moe upload");
    moe.w = (kn_moe_weights){ .n_experts = EXPERTS, .expert_offset = 0, .dim = HIDDEN, .inter = INTER,
                              .act = KN_ACT_SWIGLU_OAI, .alpha = 1.702f, .limit = 7.0f };
    moe.w.gate_up = dev_random(&b, (size_t)EXPERTS * 2 * INTER * HIDDEN);
    moe.w.gate_up_bias = dev_random(&b, (size_t)EXPERTS * 2 * INTER);
    moe.w.down = dev_random(&b, (size_t)EXPERTS * HIDDEN * INTER);
    moe.w.down_bias = dev_random(&b, (size_t)EXPERTS * HIDDEN);
    double moe_flops = 2.0 * TOKENS * TOPK * (2.0 * INTER * HIDDEN + (double)HIDDEN * INTER);
    for (int i = 0; i < 2; i++) {
        float ms = time_op(bes[i], run_moe, &moe);
        row("kn_moe_experts (32 experts, top-4, clamped SwiGLU, biases)", prec[i], "8192 tokens, 2880/2880", ms,
            moe_flops, 0);
    }

    rms_ctx rms = { out, x, w_o };
    float ms = time_op(&b.gpu, run_rms, &rms);
    row("kn_rmsnorm", "fp32", "8192x2880", ms, 0, 2.0 * TOKENS * HIDDEN * sizeof(float));

    /* x (8192x4096 floats) holds the residual stream; out its norm. The sum
     * grows over the reps, harmlessly for a timing. TB/s counts the fused
     * op's four passes for both, so the unfused row shows the cost of its fifth. */
    add_rms_ctx arms = { x, out, dev_random(&b, (size_t)TOKENS * HIDDEN), w_o };
    ms = time_op(&b.gpu, run_add_rms, &arms);
    row("kn_add_rmsnorm (fused)", "fp32", "8192x2880", ms, 0, 4.0 * TOKENS * HIDDEN * sizeof(float));
    ms = time_op(&b.gpu, run_add_then_rms, &arms);
    row("kn_add + kn_rmsnorm (unfused)", "fp32", "8192x2880", ms, 0, 4.0 * TOKENS * HIDDEN * sizeof(float));
    kn_free(&b.gpu, arms.delta);
    decode_rows(&b);

    bench_fp8_decode(&b);

    kn_free(&b.gpu, x), kn_free(&b.gpu, out), kn_free(&b.gpu, w_qkv), kn_free(&b.gpu, b_qkv);
    kn_free(&b.gpu, w_o), kn_free(&b.gpu, b_o), kn_free(&b.gpu, moe.idx), kn_free(&b.gpu, moe.wts);
    kn_free(&b.gpu, (void *)moe.w.gate_up), kn_free(&b.gpu, (void *)moe.w.gate_up_bias);
    kn_free(&b.gpu, (void *)moe.w.down), kn_free(&b.gpu, (void *)moe.w.down_bias);
    free(idx), free(wts), free(b.block);
    kn_backend_free(&tf32);
    kn_backend_free(&b.gpu);
    return 0;
}
