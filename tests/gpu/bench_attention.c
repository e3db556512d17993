/* Times kn_attention on the CUDA backend (paged HND cache, GPT-OSS sink;
 * fp32, or the bf16 tensor-core kernel when TANDEM_CUDA_ATTN_BF16=1 is in
 * the environment, the Hopper wgmma ones when TANDEM_CUDA_ATTN_WGMMA=1
 * (cp.async loads), 2 (TMA loads), 3 (TMA, softmax overlapping P V), 4
 * (3 with three warpgroups), 5 (2 with 3's overlap), 6 (2 persistent), 7
 * (2, taking head_dim 128 too), 8 (6 with window layers streaming their
 * keys) or 9 (5 with the warpgroups' ping-pong) is too and the cache is
 * bf16) on
 * GPT-OSS shapes: 64 query heads, 8 KV heads, head_dim 64, sinks; or with
 * SHAPE qwen3 Qwen3-30B-A3B's: 32 query heads, 4 KV heads, head_dim 128,
 * no sinks.
 * Built with `make CUDA=1`; tests/gpu/bench_attention.py runs it next to
 * torch SDPA in the same device call and prints the comparison.
 *
 * Usage: bench_attention prefill N WINDOW [KV [SHAPE]]   (one sequence of N tokens)
 *        bench_attention decode BATCH CONTEXT [KV [SHAPE]]
 * KV: the KV pools' dtype, f32 (default), bf16 or fp8 (rows quantized with
 * their scale as kv_append writes them). SHAPE: gpt-oss (default) or qwen3.
 * Prints one line: RESULT kind=... attn=f32|bf16|wgmma|wgmma-tma|wgmma-tma-pipe|wgmma-tma-pipe-3wg|
 * wgmma-tma-pipe-pw|wgmma-tma-persist|wgmma-tma-d128|wgmma-tma-window|wgmma-tma-pingpong|decode-tma|
 * decode-mma (the kernel that ran; decode-tma / decode-mma: the bf16 tensor-core decode kernels,
 * TANDEM_CUDA_ATTN_BF16=1, over a bf16 cache with TMA copies (TANDEM_CUDA_ATTN_DECODE_TMA=0 turns
 * it off) or over a bf16 or fp8 cache with cp.async copies) kv=... ms=<median> flops=<useful FLOPs> bytes=<min bytes>
 * Inputs are random (never zeros); every timing is the median of 10 runs
 * after 3 warm-ups, with CUDA events on the backend's stream. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/dtype.h"
#include "kernels/fp8.h"
#include "common/status.h"
#include "tests/unit/testutil.h"

enum { PAGE = 16, WARMUP = 3, REPS = 10 };

typedef struct bench {
    kn_backend gpu;
    tu_rng rng;
    int h, hkv, d, sinks; /* query heads, KV heads, head_dim, with sinks */
} bench;

static void fail(const char *what)
{
    fprintf(stderr, "bench_attention: %s failed\n", what);
    exit(1);
}

static void *upload_random(bench *b, size_t n, float lo, float hi)
{
    float *h = malloc(n * sizeof(float));
    void *d = kn_malloc(&b->gpu, n * sizeof(float));
    if (!h || !d)
        fail("allocation");
    tu_rand_fill(&b->rng, h, n, lo, hi);
    if (kn_copy_to_backend(&b->gpu, d, h, n * sizeof(float)) != TN_OK)
        fail("upload");
    free(h);
    return d;
}

/* n random values in [-1, 1) as a KV pool of dtype dt (rows of D). */
static void *upload_pool(bench *b, size_t n, kn_dtype dt)
{
    const size_t D = (size_t)b->d;
    const size_t rows = n / D, bytes = rows * kn_kv_row_bytes(dt, D);
    float *h = malloc(n * sizeof(float));
    unsigned char *enc = malloc(bytes);
    void *d = kn_malloc(&b->gpu, bytes);
    if (!h || !enc || !d)
        fail("allocation");
    tu_rand_fill(&b->rng, h, n, -1.f, 1.f);
    for (size_t r = 0; r < rows; r++) {
        unsigned char *row = enc + r * kn_kv_row_bytes(dt, D);
        if (dt == KN_BF16)
            kn_f32_to_bf16_n((uint16_t *)row, h + r * D, D);
        else if (dt == KN_FP8_E4M3)
            kn_fp8_kv_row_encode(row, h + r * D, D);
        else
            memcpy(row, h + r * D, D * sizeof(float));
    }
    if (kn_copy_to_backend(&b->gpu, d, enc, bytes) != TN_OK)
        fail("upload");
    free(h);
    free(enc);
    return d;
}

static void *upload(bench *b, const void *h, size_t bytes)
{
    void *d = kn_malloc(&b->gpu, bytes);
    if (!d || kn_copy_to_backend(&b->gpu, d, h, bytes) != TN_OK)
        fail("upload");
    return d;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    kn_dtype kv_dt = argc >= 5 && !strcmp(argv[4], "bf16")  ? KN_BF16
                   : argc >= 5 && !strcmp(argv[4], "fp8") ? KN_FP8_E4M3
                                                          : KN_F32;
    const char *shape = argc == 6 ? argv[5] : "gpt-oss";
    if (argc < 4 || argc > 6 || (strcmp(argv[1], "prefill") && strcmp(argv[1], "decode")) ||
        (argc >= 5 && strcmp(argv[4], "f32") && strcmp(argv[4], "bf16") && strcmp(argv[4], "fp8")) ||
        (strcmp(shape, "gpt-oss") && strcmp(shape, "qwen3"))) {
        fprintf(stderr, "usage: bench_attention prefill N WINDOW [f32|bf16|fp8 [gpt-oss|qwen3]] | "
                "decode BATCH CONTEXT [f32|bf16|fp8 [gpt-oss|qwen3]]\n");
        return 2;
    }
    int prefill = strcmp(argv[1], "prefill") == 0;
    int a1 = atoi(argv[2]), a2 = atoi(argv[3]);
    if (a1 <= 0 || a2 < 0 || (!prefill && a2 <= 0)) {
        fprintf(stderr, "bench_attention: bad sizes %d %d\n", a1, a2);
        return 2;
    }
    bench b;
    memset(&b, 0, sizeof b);
    tu_rng_init(&b.rng, 12345);
    const int qwen3 = strcmp(shape, "qwen3") == 0;
    b.h = qwen3 ? 32 : 64;
    b.hkv = qwen3 ? 4 : 8;
    b.d = qwen3 ? 128 : 64;
    b.sinks = !qwen3;
    const int H = b.h, HKV = b.hkv, D = b.d;
    if (kn_backend_init_cuda(&b.gpu, 0) != TN_OK)
        fail("kn_backend_init_cuda");

    int n_seqs = prefill ? 1 : a1, kv = prefill ? a1 : a2, nq = prefill ? a1 : 1, window = prefill ? a2 : 0;
    int n_rows = n_seqs * nq, max_pages = (kv + PAGE - 1) / PAGE, n_pages = n_seqs * max_pages;
    int32_t *q_offset = malloc((size_t)(n_seqs + 1) * sizeof(int32_t));
    int32_t *kv_len = malloc((size_t)n_seqs * sizeof(int32_t));
    int32_t *pages = malloc((size_t)n_pages * sizeof(int32_t));
    if (!q_offset || !kv_len || !pages)
        fail("allocation");
    for (int i = 0; i < n_pages; i++)
        pages[i] = i;
    tu_rand_shuffle_i32(&b.rng, pages, n_pages);
    for (int s = 0; s <= n_seqs; s++)
        q_offset[s] = s * nq;
    for (int s = 0; s < n_seqs; s++)
        kv_len[s] = kv;

    size_t pool_n = (size_t)n_pages * HKV * PAGE * D, q_n = (size_t)n_rows * H * D;
    void *d_k = upload_pool(&b, pool_n, kv_dt), *d_v = upload_pool(&b, pool_n, kv_dt);
    kn_kv_pools pools = { d_k, d_v, kv_dt };
    float *d_q = upload_random(&b, q_n, -1.f, 1.f), *d_sinks = b.sinks ? upload_random(&b, H, 0.f, 2.f) : NULL;
    float *d_out = kn_malloc(&b.gpu, q_n * sizeof(float));
    if (!d_out)
        fail("kn_malloc");
    kn_seq_batch sb = { .n_seqs = n_seqs, .n_rows = n_rows, .max_pages = max_pages, .max_q_len = nq,
                        .max_kv_len = kv, .n_pages = n_pages };
    sb.q_offset = upload(&b, q_offset, (size_t)(n_seqs + 1) * sizeof(int32_t));
    sb.kv_len = upload(&b, kv_len, (size_t)n_seqs * sizeof(int32_t));
    sb.page_table = upload(&b, pages, (size_t)n_pages * sizeof(int32_t));

    cudaStream_t stream = (cudaStream_t)b.gpu.stream;
    cudaEvent_t ev0, ev1;
    if (cudaEventCreate(&ev0) != cudaSuccess || cudaEventCreate(&ev1) != cudaSuccess)
        fail("cudaEventCreate");
    float ms[REPS];
    for (int it = 0; it < WARMUP + REPS; it++) {
        cudaEventRecord(ev0, stream);
        int rc = kn_attention(&b.gpu, d_out, d_q, &pools, &sb, H, HKV, D, PAGE, 1.f / sqrtf((float)D), d_sinks,
                              window);
        cudaEventRecord(ev1, stream);
        if (rc != TN_OK || cudaEventSynchronize(ev1) != cudaSuccess)
            fail("kn_attention");
        if (it >= WARMUP)
            cudaEventElapsedTime(&ms[it - WARMUP], ev0, ev1);
    }
    /* The output must be finite: a timing of a broken kernel means nothing. */
    float *out = malloc(q_n * sizeof(float));
    if (!out || kn_copy_to_host(&b.gpu, out, d_out, q_n * sizeof(float)) != TN_OK)
        fail("download");
    for (size_t i = 0; i < q_n; i++)
        if (!isfinite(out[i]))
            fail("finite output check");
    qsort(ms, REPS, sizeof ms[0], cmp_float);

    /* Useful work: 2 FLOPs per multiply-add for q.k and for p*v over each
     * row's visible keys. Minimum bytes: q, out, and the K/V each read once. */
    double visible = 0;
    for (int s = 0; s < n_seqs; s++)
        for (int r = 0; r < nq; r++) {
            long pos = kv - nq + r;
            long keys = pos + 1;
            if (window > 0 && keys > window)
                keys = window;
            visible += (double)keys;
        }
    double flops = 4.0 * D * H * visible;
    double bytes = 2.0 * q_n * sizeof(float) +
                   2.0 * (double)n_seqs * kv * HKV * (double)kn_kv_row_bytes(kv_dt, D);
    printf("RESULT kind=%s attn=%s kv=%s shape=%s a=%d b=%d ms=%.4f ms_min=%.4f ms_max=%.4f flops=%.6g "
           "bytes=%.6g\n", argv[1],
           kn_cuda_attn_wgmma_launches(&b.gpu, 9) > 0   ? "wgmma-tma-pingpong"
           : kn_cuda_attn_wgmma_launches(&b.gpu, 8) > 0 ? "wgmma-tma-window"
           : kn_cuda_attn_wgmma_launches(&b.gpu, 7) > 0 ? "wgmma-tma-d128"
           : kn_cuda_attn_wgmma_launches(&b.gpu, 6) > 0 ? "wgmma-tma-persist"
           : kn_cuda_attn_wgmma_launches(&b.gpu, 5) > 0 ? "wgmma-tma-pipe-pw"
           : kn_cuda_attn_wgmma_launches(&b.gpu, 4) > 0 ? "wgmma-tma-pipe-3wg"
           : kn_cuda_attn_wgmma_launches(&b.gpu, 3) > 0 ? "wgmma-tma-pipe"
           : kn_cuda_attn_wgmma_launches(&b.gpu, 2) > 0 ? "wgmma-tma"
           : kn_cuda_attn_wgmma_launches(&b.gpu, 1) > 0 ? "wgmma"
           : kn_cuda_attn_decode_tma_launches(&b.gpu) > 0 ? "decode-tma"
           : kn_cuda_attn_decode_mma_launches(&b.gpu) > 0 ? "decode-mma"
           : kn_backend_attn_bf16(&b.gpu)               ? "bf16"
                                                        : "f32",
           kn_dtype_name(kv_dt), shape, a1, a2,
           ms[REPS / 2], ms[0], ms[REPS - 1], flops, bytes);

    free(out), free(q_offset), free(kv_len), free(pages);
    kn_free(&b.gpu, d_k), kn_free(&b.gpu, d_v), kn_free(&b.gpu, d_q);
    if (d_sinks)
        kn_free(&b.gpu, d_sinks);
    kn_free(&b.gpu, d_out), kn_free(&b.gpu, (void *)sb.q_offset), kn_free(&b.gpu, (void *)sb.kv_len);
    kn_free(&b.gpu, (void *)sb.page_table);
    cudaEventDestroy(ev0), cudaEventDestroy(ev1);
    kn_backend_free(&b.gpu);
    return 0;
}
