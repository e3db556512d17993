/* CUDA backend against the CPU backend and float64 references, on the GPU
 * machine (built with `make CUDA=1`, run by tests/gpu/run.sh).
 *
 * Every case draws fresh random inputs, fills the GPU outputs with NaN
 * before the op runs (so an element the op forgets to write fails), runs
 * the op on both backends on the same inputs and checks
 *   - the CUDA result against a float64 recomputation (normwise relative
 *     error, max|got - ref| / max|ref|, within the precision's bound), and
 *   - the CUDA result against the CPU backend's (same bound, or exact where
 *     both backends do the same float operations).
 * NaN never passes (tu_max_rel_err turns it into infinity). Output is TAP:
 * one "ok N - name" / "not ok N - name" per check, then the plan.
 *
 * Usage: test_cuda_ops [seed [moe]]   (seed defaults to the time; `moe` runs
 * only the two bf16 expert paths' cases) */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/attention.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/elementwise.h"
#include "kernels/dtype.h"
#include "kernels/embedding.h"
#include "kernels/fill.h"
#include "kernels/fp8.h"
#include "kernels/matmul.h"
#include "kernels/moe.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/sampling.h"
#include "common/status.h"
#include "kernels/stopwatch.h"
#include "tests/unit/testutil.h"

/* Bounds, normwise relative. fp32 ops land near 1e-6; TF32 products (only
 * with TANDEM_CUDA_TF32=1) near 3e-4. */
#define FP32_TOL 2e-5
#define TF32_TOL 2e-3

typedef struct test_ctx {
    kn_backend cpu, gpu;
    tu_rng rng;
    int n_checks, n_failed;
    int tf32;
} test_ctx;

static void tap(test_ctx *t, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void tap(test_ctx *t, int ok, const char *fmt, ...)
{
    va_list ap;
    t->n_checks++;
    if (!ok)
        t->n_failed++;
    printf("%s %d - ", ok ? "ok" : "not ok", t->n_checks);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

/* A check of err <= tol, printing the error in the name. */
static void check_err(test_ctx *t, double err, double tol, const char *what)
{
    tap(t, err <= tol, "%s: rel err %.3g (bound %.1g)", what, err, tol);
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "test_cuda_ops: %s failed: %s\n", what, tn_status_str(rc));
    printf("Bail out! %s failed\n", what);
    exit(1);
}

static void *dev_alloc(test_ctx *t, size_t bytes)
{
    void *p = kn_malloc(&t->gpu, bytes);
    if (!p)
        die("kn_malloc", TN_ERR_NOMEM);
    return p;
}

static void *dev_upload(test_ctx *t, const void *host, size_t bytes)
{
    void *p = dev_alloc(t, bytes);
    int rc = kn_copy_to_backend(&t->gpu, p, host, bytes);
    if (rc != TN_OK)
        die("kn_copy_to_backend", rc);
    return p;
}

static void dev_download(test_ctx *t, void *host, const void *dev, size_t bytes)
{
    int rc = kn_copy_to_host(&t->gpu, host, dev, bytes);
    if (rc != TN_OK)
        die("kn_copy_to_host", rc);
}

/* Fills n floats of device memory with NaN. */
static void dev_poison(test_ctx *t, float *dev, size_t n)
{
    float *nan_buf = tu_xcalloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++)
        nan_buf[i] = NAN;
    int rc = kn_copy_to_backend(&t->gpu, dev, nan_buf, n * sizeof(float));
    free(nan_buf);
    if (rc != TN_OK)
        die("kn_copy_to_backend", rc);
}

static float *rand_floats(test_ctx *t, size_t n, float lo, float hi)
{
    float *x = tu_xcalloc(n, sizeof(float));
    tu_rand_fill(&t->rng, x, n, lo, hi);
    return x;
}

static double rand_normal(test_ctx *t)
{
    double u1 = tu_rand_uniform(&t->rng), u2 = tu_rand_uniform(&t->rng);
    return sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
}

/* Downloads n floats and returns max rel err against ref (float64). */
static double gpu_err(test_ctx *t, const float *dev, const double *ref, size_t n, float *host_out)
{
    dev_download(t, host_out, dev, n * sizeof(float));
    return tu_max_rel_err(host_out, ref, n);
}

static int all_equal(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

static int run_ok(test_ctx *t, int rc, const char *what)
{
    if (rc != TN_OK)
        tap(t, 0, "%s returned %s", what, tn_status_str(rc));
    return rc == TN_OK;
}

/* ------------------------------------------------------------------ */

static void test_embedding(test_ctx *t, int n_tokens, int vocab, int dim)
{
    float *table = rand_floats(t, (size_t)vocab * dim, -1.f, 1.f);
    int32_t *ids = tu_xcalloc((size_t)n_tokens, sizeof(int32_t));
    for (int i = 0; i < n_tokens; i++)
        ids[i] = tu_rand_int(&t->rng, vocab);
    size_t n = (size_t)n_tokens * dim;
    float *cpu = tu_xcalloc(n, sizeof(float)), *got = tu_xcalloc(n, sizeof(float));
    float *d_table = dev_upload(t, table, (size_t)vocab * dim * sizeof(float));
    int32_t *d_ids = dev_upload(t, ids, (size_t)n_tokens * sizeof(int32_t));
    float *d_out = dev_alloc(t, n * sizeof(float));
    dev_poison(t, d_out, n);
    if (run_ok(t, kn_embedding(&t->gpu, d_out, d_table, d_ids, n_tokens, vocab, dim), "kn_embedding cuda") &&
        run_ok(t, kn_embedding(&t->cpu, cpu, table, ids, n_tokens, vocab, dim), "kn_embedding cpu")) {
        dev_download(t, got, d_out, n * sizeof(float));
        tap(t, all_equal(got, cpu, n), "embedding n_tokens=%d vocab=%d dim=%d: equals CPU", n_tokens, vocab, dim);
    }
    /* A bad id anywhere: TN_ERR_ARG and nothing written. */
    if (n_tokens > 1) {
        ids[n_tokens / 2] = vocab;
        kn_copy_to_backend(&t->gpu, d_ids, ids, (size_t)n_tokens * sizeof(int32_t));
        dev_poison(t, d_out, n);
        int rc = kn_embedding(&t->gpu, d_out, d_table, d_ids, n_tokens, vocab, dim);
        dev_download(t, got, d_out, n * sizeof(float));
        int untouched = 1;
        for (size_t i = 0; i < n; i++)
            untouched &= isnan(got[i]);
        tap(t, rc == TN_ERR_ARG && untouched, "embedding: id %d rejected, output untouched", vocab);
    }
    kn_free(&t->gpu, d_table);
    kn_free(&t->gpu, d_ids);
    kn_free(&t->gpu, d_out);
    free(table), free(ids), free(cpu), free(got);
}

static void test_rmsnorm(test_ctx *t, int rows, int dim, int in_place)
{
    size_t n = (size_t)rows * dim;
    float *x = rand_floats(t, n, -3.f, 3.f), *w = rand_floats(t, (size_t)dim, 0.5f, 1.5f);
    const float eps = 1e-5f;
    double *ref = tu_xcalloc(n, sizeof(double));
    for (int r = 0; r < rows; r++) {
        double ss = 0;
        for (int i = 0; i < dim; i++)
            ss += (double)x[(size_t)r * dim + i] * x[(size_t)r * dim + i];
        double inv = 1.0 / sqrt(ss / dim + eps);
        for (int i = 0; i < dim; i++)
            ref[(size_t)r * dim + i] = x[(size_t)r * dim + i] * inv * w[i];
    }
    float *cpu = tu_xcalloc(n, sizeof(float)), *got = tu_xcalloc(n, sizeof(float));
    float *d_x = dev_upload(t, x, n * sizeof(float)), *d_w = dev_upload(t, w, (size_t)dim * sizeof(float));
    float *d_out = d_x;
    if (!in_place) {
        d_out = dev_alloc(t, n * sizeof(float));
        dev_poison(t, d_out, n);
    }
    if (run_ok(t, kn_rmsnorm(&t->gpu, d_out, d_x, d_w, rows, dim, eps), "kn_rmsnorm cuda") &&
        run_ok(t, kn_rmsnorm(&t->cpu, cpu, x, w, rows, dim, eps), "kn_rmsnorm cpu")) {
        char what[128];
        snprintf(what, sizeof what, "rmsnorm rows=%d dim=%d%s vs float64", rows, dim, in_place ? " in place" : "");
        check_err(t, gpu_err(t, d_out, ref, n, got), FP32_TOL, what);
        snprintf(what, sizeof what, "rmsnorm rows=%d dim=%d vs CPU", rows, dim);
        check_err(t, tu_max_rel_err_f32(got, cpu, n), 1e-6, what);
    }
    if (!in_place)
        kn_free(&t->gpu, d_out);
    kn_free(&t->gpu, d_x);
    kn_free(&t->gpu, d_w);
    free(x), free(w), free(ref), free(cpu), free(got);
}

/* kn_add_rmsnorm: the sum equals the CPU's bit for bit, the norm is within
 * FP32_TOL of float64 and 1e-6 of the CPU, and CUDA fused equals CUDA
 * kn_add + kn_rmsnorm bit for bit (the engine swapped the one for the other).
 * The xn outputs start as NaN so an unwritten element shows. */
static void test_add_rmsnorm(test_ctx *t, int rows, int dim)
{
    size_t n = (size_t)rows * dim, bytes = n * sizeof(float);
    float *x = rand_floats(t, n, -3.f, 3.f), *delta = rand_floats(t, n, -2.f, 2.f);
    float *w = rand_floats(t, (size_t)dim, 0.5f, 1.5f);
    const float eps = 1e-5f;
    double *ref = tu_xcalloc(n, sizeof(double)), *sum = tu_xcalloc(n, sizeof(double));
    for (int r = 0; r < rows; r++) {
        size_t o = (size_t)r * dim;
        double ss = 0;
        for (int i = 0; i < dim; i++) {
            sum[o + i] = (double)x[o + i] + delta[o + i];
            ss += sum[o + i] * sum[o + i];
        }
        double inv = 1.0 / sqrt(ss / dim + eps);
        for (int i = 0; i < dim; i++)
            ref[o + i] = sum[o + i] * inv * w[i];
    }
    float *cpu_x = tu_xcalloc(n, sizeof(float)), *cpu_xn = tu_xcalloc(n, sizeof(float));
    float *got_x = tu_xcalloc(n, sizeof(float)), *got_xn = tu_xcalloc(n, sizeof(float));
    float *un_x = tu_xcalloc(n, sizeof(float)), *un_xn = tu_xcalloc(n, sizeof(float));
    memcpy(cpu_x, x, bytes);
    float *d_x = dev_upload(t, x, bytes), *d_ux = dev_upload(t, x, bytes);
    float *d_delta = dev_upload(t, delta, bytes);
    float *d_w = dev_upload(t, w, (size_t)dim * sizeof(float));
    float *d_xn = dev_alloc(t, bytes), *d_uxn = dev_alloc(t, bytes);
    dev_poison(t, d_xn, n);
    dev_poison(t, d_uxn, n);
    if (run_ok(t, kn_add_rmsnorm(&t->gpu, d_x, d_xn, d_delta, d_w, rows, dim, eps),
               "kn_add_rmsnorm cuda") &&
        run_ok(t, kn_add_rmsnorm(&t->cpu, cpu_x, cpu_xn, delta, w, rows, dim, eps),
               "kn_add_rmsnorm cpu") &&
        run_ok(t, kn_add(&t->gpu, d_ux, d_ux, d_delta, n), "kn_add cuda") &&
        run_ok(t, kn_rmsnorm(&t->gpu, d_uxn, d_ux, d_w, rows, dim, eps), "kn_rmsnorm cuda")) {
        char what[128];
        dev_download(t, got_x, d_x, bytes);
        tap(t, all_equal(got_x, cpu_x, n), "add_rmsnorm rows=%d dim=%d: sum equals CPU", rows, dim);
        snprintf(what, sizeof what, "add_rmsnorm rows=%d dim=%d vs float64", rows, dim);
        check_err(t, gpu_err(t, d_xn, ref, n, got_xn), FP32_TOL, what);
        snprintf(what, sizeof what, "add_rmsnorm rows=%d dim=%d vs CPU", rows, dim);
        check_err(t, tu_max_rel_err_f32(got_xn, cpu_xn, n), 1e-6, what);
        dev_download(t, un_x, d_ux, bytes);
        dev_download(t, un_xn, d_uxn, bytes);
        tap(t, all_equal(got_x, un_x, n) && all_equal(got_xn, un_xn, n),
            "add_rmsnorm rows=%d dim=%d: fused equals kn_add+kn_rmsnorm on CUDA bit for bit",
            rows, dim);
    }
    kn_free(&t->gpu, d_x);
    kn_free(&t->gpu, d_ux);
    kn_free(&t->gpu, d_delta);
    kn_free(&t->gpu, d_w);
    kn_free(&t->gpu, d_xn);
    kn_free(&t->gpu, d_uxn);
    free(x), free(delta), free(w), free(ref), free(sum), free(cpu_x), free(cpu_xn);
    free(got_x), free(got_xn), free(un_x), free(un_xn);
}

static void test_matmul(test_ctx *t, int m, int n, int k, int with_bias)
{
    float *x = rand_floats(t, (size_t)m * k, -1.f, 1.f), *w = rand_floats(t, (size_t)n * k, -1.f, 1.f);
    float *bias = with_bias ? rand_floats(t, (size_t)n, -1.f, 1.f) : NULL;
    size_t no = (size_t)m * n;
    double *ref = tu_xcalloc(no, sizeof(double));
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double acc = bias ? bias[j] : 0.0;
            for (int c = 0; c < k; c++)
                acc += (double)x[(size_t)i * k + c] * w[(size_t)j * k + c];
            ref[(size_t)i * n + j] = acc;
        }
    float *cpu = tu_xcalloc(no, sizeof(float)), *got = tu_xcalloc(no, sizeof(float));
    float *d_x = dev_upload(t, x, (size_t)m * k * sizeof(float));
    float *d_w = dev_upload(t, w, (size_t)n * k * sizeof(float));
    float *d_b = bias ? dev_upload(t, bias, (size_t)n * sizeof(float)) : NULL;
    float *d_out = dev_alloc(t, no * sizeof(float));
    dev_poison(t, d_out, no);
    double tol = t->tf32 ? TF32_TOL : FP32_TOL;
    if (run_ok(t, kn_matmul(&t->gpu, d_out, d_x, d_w, d_b, m, n, k), "kn_matmul cuda") &&
        run_ok(t, kn_matmul(&t->cpu, cpu, x, w, bias, m, n, k), "kn_matmul cpu")) {
        char what[128];
        snprintf(what, sizeof what, "matmul m=%d n=%d k=%d%s%s vs float64", m, n, k,
                 bias ? " +bias" : "", t->tf32 ? " (TF32)" : "");
        check_err(t, gpu_err(t, d_out, ref, no, got), tol, what);
        snprintf(what, sizeof what, "matmul m=%d n=%d k=%d vs CPU", m, n, k);
        check_err(t, tu_max_rel_err_f32(got, cpu, no), tol, what);
    }
    kn_free(&t->gpu, d_x);
    kn_free(&t->gpu, d_w);
    kn_free(&t->gpu, d_b);
    kn_free(&t->gpu, d_out);
    free(x), free(w), free(bias), free(ref), free(cpu), free(got);
}

/* offset shifts every pointer by that many floats (misaligned vector path). */
static void test_add(test_ctx *t, size_t n, int in_place, int offset)
{
    float *a = rand_floats(t, n + offset, -1.f, 1.f), *b = rand_floats(t, n + offset, -1.f, 1.f);
    float *cpu = tu_xcalloc(n, sizeof(float)), *got = tu_xcalloc(n + offset, sizeof(float));
    float *d_a = dev_upload(t, a, (n + offset) * sizeof(float));
    float *d_b = dev_upload(t, b, (n + offset) * sizeof(float));
    float *d_out = d_a;
    if (!in_place) {
        d_out = dev_alloc(t, (n + offset) * sizeof(float));
        dev_poison(t, d_out, n + offset);
    }
    if (run_ok(t, kn_add(&t->gpu, d_out + offset, d_a + offset, d_b + offset, n), "kn_add cuda") &&
        run_ok(t, kn_add(&t->cpu, cpu, a + offset, b + offset, n), "kn_add cpu")) {
        dev_download(t, got, d_out, (n + offset) * sizeof(float));
        tap(t, all_equal(got + offset, cpu, n), "add n=%zu%s offset=%d: equals CPU", n,
            in_place ? " in place" : "", offset);
    }
    if (!in_place)
        kn_free(&t->gpu, d_out);
    kn_free(&t->gpu, d_a);
    kn_free(&t->gpu, d_b);
    free(a), free(b), free(cpu), free(got);
}

static void test_rope(test_ctx *t, int n_tokens, int n_heads, int head_dim, int yarn)
{
    kn_rope_config cfg = { .head_dim = head_dim, .theta = yarn ? 150000.0 : 1000000.0, .yarn = yarn,
                           .factor = 32.0, .beta_fast = 32.0, .beta_slow = 1.0,
                           .original_max_position = 4096, .truncate = 0, .attention_factor = 0.0 };
    int half = head_dim / 2;
    float *inv_freq = tu_xcalloc((size_t)half, sizeof(float)), scale = 1.f;
    if (kn_rope_inv_freq(&cfg, inv_freq, &scale) != TN_OK)
        die("kn_rope_inv_freq", TN_ERR_ARG);
    size_t n = (size_t)n_tokens * n_heads * head_dim;
    float *x = rand_floats(t, n, -2.f, 2.f), *cpu = tu_xcalloc(n, sizeof(float));
    float *got = tu_xcalloc(n, sizeof(float));
    int32_t *pos = tu_xcalloc((size_t)n_tokens, sizeof(int32_t));
    for (int i = 0; i < n_tokens; i++)
        pos[i] = tu_rand_int(&t->rng, 131072);
    double *ref = tu_xcalloc(n, sizeof(double));
    for (int tk = 0; tk < n_tokens; tk++)
        for (int h = 0; h < n_heads; h++)
            for (int i = 0; i < half; i++) {
                size_t o = ((size_t)tk * n_heads + h) * head_dim;
                /* HF's angle is the float32 product; the rest in double. */
                double a = (double)((float)pos[tk] * inv_freq[i]);
                double c = cos(a) * scale, s = sin(a) * scale;
                ref[o + i] = x[o + i] * c - x[o + i + half] * s;
                ref[o + i + half] = x[o + i + half] * c + x[o + i] * s;
            }
    memcpy(cpu, x, n * sizeof(float));
    float *d_x = dev_upload(t, x, n * sizeof(float));
    int32_t *d_pos = dev_upload(t, pos, (size_t)n_tokens * sizeof(int32_t));
    float *d_if = dev_upload(t, inv_freq, (size_t)half * sizeof(float));
    if (run_ok(t, kn_rope(&t->gpu, d_x, d_pos, n_tokens, n_heads, head_dim, d_if, scale), "kn_rope cuda") &&
        run_ok(t, kn_rope(&t->cpu, cpu, pos, n_tokens, n_heads, head_dim, inv_freq, scale), "kn_rope cpu")) {
        char what[128];
        snprintf(what, sizeof what, "rope%s tokens=%d heads=%d head_dim=%d vs float64", yarn ? " YaRN" : "",
                 n_tokens, n_heads, head_dim);
        check_err(t, gpu_err(t, d_x, ref, n, got), FP32_TOL, what);
        snprintf(what, sizeof what, "rope tokens=%d head_dim=%d vs CPU", n_tokens, head_dim);
        check_err(t, tu_max_rel_err_f32(got, cpu, n), 1e-6, what);
    }
    kn_free(&t->gpu, d_x);
    kn_free(&t->gpu, d_pos);
    kn_free(&t->gpu, d_if);
    free(inv_freq), free(x), free(cpu), free(got), free(pos), free(ref);
}

/* ------------------------------------------------------------------ */
/* Paged KV cache and attention.                                      */

typedef struct attn_case {
    const char *name;
    int n_seqs;
    int n_q[8], kv_len[8];
    int n_heads, n_kv_heads, head_dim, page_size, window, sinks;
} attn_case;

/* float64 attention for one (row, head) straight from the host pools. */
static void attn_ref_row(const attn_case *c, const float *q, const float *kp, const float *vp,
                         const int32_t *pages, int pos, int h, int r, const float *sinks,
                         float scale, double *out)
{
    int G = c->n_heads / c->n_kv_heads, kvh = h / G, D = c->head_dim, ps = c->page_size;
    const float *qh = q + ((size_t)r * c->n_heads + h) * D;
    int first = c->window > 0 && pos - c->window + 1 > 0 ? pos - c->window + 1 : 0;
    int nk = pos - first + 1;
    double *sc = tu_xcalloc((size_t)nk, sizeof(double));
    double mx = sinks ? sinks[h] : -INFINITY;
    for (int j = 0; j < nk; j++) {
        int tok = first + j;
        const float *kj = kp + (((size_t)pages[tok / ps] * c->n_kv_heads + kvh) * ps + tok % ps) * D;
        double d = 0;
        for (int i = 0; i < D; i++)
            d += (double)qh[i] * kj[i];
        sc[j] = d * scale;
        if (sc[j] > mx)
            mx = sc[j];
    }
    double den = sinks ? exp(sinks[h] - mx) : 0.0;
    for (int i = 0; i < D; i++)
        out[i] = 0;
    for (int j = 0; j < nk; j++) {
        int tok = first + j;
        const float *vj = vp + (((size_t)pages[tok / ps] * c->n_kv_heads + kvh) * ps + tok % ps) * D;
        double p = exp(sc[j] - mx);
        den += p;
        for (int i = 0; i < D; i++)
            out[i] += p * vj[i];
    }
    for (int i = 0; i < D; i++)
        out[i] /= den;
    free(sc);
}

/* bf16 attention (kn_backend_set_attn_bf16): Q, K, V and P rounded to
 * bf16, fp32 softmax and sums. Max abs error over max |ref| lands near
 * 2e-3..5e-3 on these inputs (bf16 rounding, 2^-9 relative, of the operands);
 * the bound is 1e-2. fp32 rounding alone would stay under 1e-5: an error
 * below BF16_ATTN_MIN means the bf16 kernel did not run. */
#define BF16_ATTN_TOL 1e-2
#define BF16_ATTN_MIN 1e-5

static void test_attention(test_ctx *t, const attn_case *c, int bf16)
{
    int D = c->head_dim, ps = c->page_size, n_kv = c->n_kv_heads, H = c->n_heads;
    int n_rows = 0, max_q = 0, max_kv = 0, max_pages = 0;
    for (int s = 0; s < c->n_seqs; s++) {
        n_rows += c->n_q[s];
        max_q = c->n_q[s] > max_q ? c->n_q[s] : max_q;
        max_kv = c->kv_len[s] > max_kv ? c->kv_len[s] : max_kv;
        int np = (c->kv_len[s] + ps - 1) / ps;
        max_pages = np > max_pages ? np : max_pages;
    }
    /* Pages of all sequences shuffled over a pool with spare pages. */
    int n_pages = c->n_seqs * max_pages + 3;
    int32_t *perm = tu_xcalloc((size_t)n_pages, sizeof(int32_t));
    for (int i = 0; i < n_pages; i++)
        perm[i] = i;
    tu_rand_shuffle_i32(&t->rng, perm, n_pages);
    int32_t *page_table = tu_xcalloc((size_t)c->n_seqs * max_pages, sizeof(int32_t));
    int32_t q_offset[9] = { 0 }, kv_len[8];
    for (int s = 0, next = 0; s < c->n_seqs; s++) {
        for (int p = 0; p < max_pages; p++)
            page_table[(size_t)s * max_pages + p] = perm[next++];
        q_offset[s + 1] = q_offset[s] + c->n_q[s];
        kv_len[s] = c->kv_len[s];
    }
    size_t pool_n = (size_t)n_pages * n_kv * ps * D;
    size_t row_n = (size_t)n_rows * n_kv * D, q_n = (size_t)n_rows * H * D;
    /* Earlier tokens: random pool contents; this step's rows: kv_append. */
    float *kpool = rand_floats(t, pool_n, -1.f, 1.f), *vpool = rand_floats(t, pool_n, -1.f, 1.f);
    float *k = rand_floats(t, row_n, -1.f, 1.f), *v = rand_floats(t, row_n, -1.f, 1.f);
    float *q = rand_floats(t, q_n, -1.f, 1.f);
    float *sinks = c->sinks ? rand_floats(t, (size_t)H, -1.f, 3.f) : NULL;
    float scale = 1.f / sqrtf((float)D);

    float *d_kp = dev_upload(t, kpool, pool_n * sizeof(float));
    float *d_vp = dev_upload(t, vpool, pool_n * sizeof(float));
    float *d_k = dev_upload(t, k, row_n * sizeof(float)), *d_v = dev_upload(t, v, row_n * sizeof(float));
    float *d_q = dev_upload(t, q, q_n * sizeof(float));
    float *d_sinks = sinks ? dev_upload(t, sinks, (size_t)H * sizeof(float)) : NULL;
    int32_t *d_qo = dev_upload(t, q_offset, (size_t)(c->n_seqs + 1) * sizeof(int32_t));
    int32_t *d_kl = dev_upload(t, kv_len, (size_t)c->n_seqs * sizeof(int32_t));
    int32_t *d_pt = dev_upload(t, page_table, (size_t)c->n_seqs * max_pages * sizeof(int32_t));
    float *d_out = dev_alloc(t, q_n * sizeof(float));
    dev_poison(t, d_out, q_n);

    kn_seq_batch hb = { .n_seqs = c->n_seqs, .n_rows = n_rows, .max_pages = max_pages, .max_q_len = max_q,
                        .max_kv_len = max_kv, .q_offset = q_offset, .kv_len = kv_len,
                        .page_table = page_table, .n_pages = n_pages };
    kn_seq_batch db = hb;
    db.q_offset = d_qo;
    db.kv_len = d_kl;
    db.page_table = d_pt;

    float *got_pool = tu_xcalloc(pool_n, sizeof(float)), *cpu = tu_xcalloc(q_n, sizeof(float));
    float *got = tu_xcalloc(q_n, sizeof(float));
    if (run_ok(t, kn_kv_append(&t->gpu, d_kp, d_vp, d_k, d_v, &db, n_kv, D, ps), "kn_kv_append cuda") &&
        run_ok(t, kn_kv_append(&t->cpu, kpool, vpool, k, v, &hb, n_kv, D, ps), "kn_kv_append cpu")) {
        dev_download(t, got_pool, d_kp, pool_n * sizeof(float));
        int same = all_equal(got_pool, kpool, pool_n);
        dev_download(t, got_pool, d_vp, pool_n * sizeof(float));
        same &= all_equal(got_pool, vpool, pool_n);
        tap(t, same, "kv_append %s: K and V pools equal CPU", c->name);
    }
    double *ref = tu_xcalloc(q_n, sizeof(double));
    for (int s = 0; s < c->n_seqs; s++)
        for (int r = q_offset[s]; r < q_offset[s + 1]; r++) {
            int pos = kv_len[s] - c->n_q[s] + (r - q_offset[s]);
            for (int h = 0; h < H; h++)
                attn_ref_row(c, q, kpool, vpool, page_table + (size_t)s * max_pages, pos, h, r, sinks,
                             scale, ref + ((size_t)r * H + h) * D);
        }
    if (kn_backend_set_attn_bf16(&t->gpu, bf16) != TN_OK)
        die("kn_backend_set_attn_bf16", TN_ERR_DEVICE);
    if (run_ok(t, kn_attention(&t->gpu, d_out, d_q, d_kp, d_vp, &db, H, n_kv, D, ps, scale, d_sinks, c->window),
               "kn_attention cuda") &&
        run_ok(t, kn_attention(&t->cpu, cpu, q, kpool, vpool, &hb, H, n_kv, D, ps, scale, sinks, c->window),
               "kn_attention cpu")) {
        char what[200];
        const char *prec = bf16 ? "bf16 " : "";
        double tol = bf16 ? BF16_ATTN_TOL : FP32_TOL;
        snprintf(what, sizeof what, "attention %s%s vs float64", prec, c->name);
        double err = gpu_err(t, d_out, ref, q_n, got);
        check_err(t, err, tol, what);
        if (bf16)
            tap(t, err > BF16_ATTN_MIN, "attention bf16 %s: the bf16 kernel ran (rel err %.3g above fp32's %g)",
                c->name, err, BF16_ATTN_MIN);
        snprintf(what, sizeof what, "attention %s%s vs CPU", prec, c->name);
        check_err(t, tu_max_rel_err_f32(got, cpu, q_n), tol, what);
    }
    kn_backend_set_attn_bf16(&t->gpu, 0);
    kn_free(&t->gpu, d_kp), kn_free(&t->gpu, d_vp), kn_free(&t->gpu, d_k), kn_free(&t->gpu, d_v);
    kn_free(&t->gpu, d_q), kn_free(&t->gpu, d_sinks), kn_free(&t->gpu, d_qo), kn_free(&t->gpu, d_kl);
    kn_free(&t->gpu, d_pt), kn_free(&t->gpu, d_out);
    free(perm), free(page_table), free(kpool), free(vpool), free(k), free(v), free(q), free(sinks);
    free(got_pool), free(cpu), free(got), free(ref);
}

/* ------------------------------------------------------------------ */
/* MoE.                                                               */

static void test_moe_route(test_ctx *t, int n_tokens, int n_experts, int k, kn_route_mode mode, int renorm)
{
    size_t nl = (size_t)n_tokens * n_experts, no = (size_t)n_tokens * k;
    float *logits = tu_xcalloc(nl, sizeof(float));
    for (size_t i = 0; i < nl; i++)
        logits[i] = (float)(2.0 * rand_normal(t));
    /* A tie in every token: expert 1 copies expert 3's logit. */
    for (int tk = 0; tk < n_tokens; tk++)
        logits[(size_t)tk * n_experts + 1] = logits[(size_t)tk * n_experts + 3];
    int32_t *ci = tu_xcalloc(no, sizeof(int32_t)), *gi = tu_xcalloc(no, sizeof(int32_t));
    float *cw = tu_xcalloc(no, sizeof(float)), *gw = tu_xcalloc(no, sizeof(float));
    float *d_l = dev_upload(t, logits, nl * sizeof(float));
    int32_t *d_i = dev_alloc(t, no * sizeof(int32_t));
    float *d_w = dev_alloc(t, no * sizeof(float));
    dev_poison(t, d_w, no);
    dev_poison(t, (float *)d_i, no); /* 0xffffffff-ish pattern: no valid id */
    if (run_ok(t, kn_moe_route(&t->gpu, d_i, d_w, d_l, n_tokens, n_experts, k, mode, renorm), "kn_moe_route cuda") &&
        run_ok(t, kn_moe_route(&t->cpu, ci, cw, logits, n_tokens, n_experts, k, mode, renorm), "kn_moe_route cpu")) {
        dev_download(t, gi, d_i, no * sizeof(int32_t));
        dev_download(t, gw, d_w, no * sizeof(float));
        /* float64 reference weights from the CPU's picks. */
        double *ref = tu_xcalloc(no, sizeof(double));
        for (int tk = 0; tk < n_tokens; tk++) {
            const float *lt = logits + (size_t)tk * n_experts;
            double top = lt[ci[(size_t)tk * k]], den = 0;
            int over_picks = mode == KN_ROUTE_TOPK_SOFTMAX || renorm;
            for (int e = 0; e < (over_picks ? k : n_experts); e++)
                den += exp((over_picks ? lt[ci[(size_t)tk * k + e]] : lt[e]) - top);
            for (int j = 0; j < k; j++)
                ref[(size_t)tk * k + j] = exp(lt[ci[(size_t)tk * k + j]] - top) / den;
        }
        const char *mname = mode == KN_ROUTE_TOPK_SOFTMAX ? "topk-softmax" : renorm ? "softmax-topk renorm" : "softmax-topk";
        tap(t, memcmp(gi, ci, no * sizeof(int32_t)) == 0, "moe_route %s tokens=%d experts=%d k=%d: ids equal CPU",
            mname, n_tokens, n_experts, k);
        char what[128];
        snprintf(what, sizeof what, "moe_route %s experts=%d k=%d weights vs float64", mname, n_experts, k);
        check_err(t, tu_max_rel_err(gw, ref, no), 1e-6, what);
        snprintf(what, sizeof what, "moe_route %s experts=%d k=%d weights vs CPU", mname, n_experts, k);
        check_err(t, tu_max_rel_err_f32(gw, cw, no), 1e-6, what);
        free(ref);
    }
    kn_free(&t->gpu, d_l), kn_free(&t->gpu, d_i), kn_free(&t->gpu, d_w);
    free(logits), free(ci), free(gi), free(cw), free(gw);
}

static void test_moe_experts(test_ctx *t, int n_tokens, int k, int n_global, int n_local, int offset,
                             int dim, int inter, kn_act act, int biases)
{
    size_t ngu = (size_t)n_local * 2 * inter * dim, nd = (size_t)n_local * dim * inter;
    float *gu = rand_floats(t, ngu, -0.3f, 0.3f), *dn = rand_floats(t, nd, -0.3f, 0.3f);
    float *gub = biases ? rand_floats(t, (size_t)n_local * 2 * inter, -0.5f, 0.5f) : NULL;
    float *dnb = biases ? rand_floats(t, (size_t)n_local * dim, -0.5f, 0.5f) : NULL;
    float *x = rand_floats(t, (size_t)n_tokens * dim, -2.f, 2.f);
    size_t ns = (size_t)n_tokens * k;
    int32_t *idx = tu_xcalloc(ns, sizeof(int32_t));
    float *wts = rand_floats(t, ns, 0.05f, 1.f);
    for (int tk = 0; tk < n_tokens; tk++) /* k distinct experts per token */
        for (int j = 0; j < k; j++) {
            int e, dup;
            do {
                e = tu_rand_int(&t->rng, n_global);
                dup = 0;
                for (int i = 0; i < j; i++)
                    dup |= idx[(size_t)tk * k + i] == e;
            } while (dup);
            idx[(size_t)tk * k + j] = e;
        }
    kn_moe_weights hw = { .n_experts = n_local, .expert_offset = offset, .dim = dim, .inter = inter,
                          .gate_up = gu, .gate_up_bias = gub, .down = dn, .down_bias = dnb,
                          .act = act, .alpha = 1.702f, .limit = 7.0f };
    /* float64 reference. */
    size_t no = (size_t)n_tokens * dim;
    double *ref = tu_xcalloc(no, sizeof(double)), *hbuf = tu_xcalloc((size_t)2 * inter, sizeof(double));
    for (int tk = 0; tk < n_tokens; tk++)
        for (int j = 0; j < k; j++) {
            int e = idx[(size_t)tk * k + j] - offset;
            if (e < 0 || e >= n_local)
                continue;
            const float *xt = x + (size_t)tk * dim;
            for (int o = 0; o < 2 * inter; o++) {
                double acc = gub ? gub[(size_t)e * 2 * inter + o] : 0.0;
                for (int i = 0; i < dim; i++)
                    acc += (double)gu[((size_t)e * 2 * inter + o) * dim + i] * xt[i];
                hbuf[o] = acc;
            }
            for (int i = 0; i < inter; i++) {
                double g = hbuf[i], u = hbuf[inter + i];
                if (act == KN_ACT_SWIGLU_OAI) {
                    g = g < hw.limit ? g : hw.limit;
                    u = u < -hw.limit ? -hw.limit : u > hw.limit ? hw.limit : u;
                    hbuf[i] = g / (1.0 + exp(-(double)hw.alpha * g)) * (u + 1.0);
                } else {
                    hbuf[i] = g / (1.0 + exp(-g)) * u;
                }
            }
            double wgt = wts[(size_t)tk * k + j];
            for (int o = 0; o < dim; o++) {
                double acc = dnb ? dnb[(size_t)e * dim + o] : 0.0;
                for (int i = 0; i < inter; i++)
                    acc += (double)dn[((size_t)e * dim + o) * inter + i] * hbuf[i];
                ref[(size_t)tk * dim + o] += wgt * acc;
            }
        }
    float *d_gu = dev_upload(t, gu, ngu * sizeof(float)), *d_dn = dev_upload(t, dn, nd * sizeof(float));
    float *d_gub = gub ? dev_upload(t, gub, (size_t)n_local * 2 * inter * sizeof(float)) : NULL;
    float *d_dnb = dnb ? dev_upload(t, dnb, (size_t)n_local * dim * sizeof(float)) : NULL;
    float *d_x = dev_upload(t, x, no * sizeof(float));
    int32_t *d_idx = dev_upload(t, idx, ns * sizeof(int32_t));
    float *d_wts = dev_upload(t, wts, ns * sizeof(float));
    float *d_out = dev_alloc(t, no * sizeof(float));
    dev_poison(t, d_out, no);
    kn_moe_weights dw = hw;
    dw.gate_up = d_gu, dw.gate_up_bias = d_gub, dw.down = d_dn, dw.down_bias = d_dnb;
    float *cpu = tu_xcalloc(no, sizeof(float)), *got = tu_xcalloc(no, sizeof(float));
    double tol = t->tf32 ? TF32_TOL : FP32_TOL;
    if (run_ok(t, kn_moe_experts(&t->gpu, d_out, d_x, d_idx, d_wts, n_tokens, k, &dw), "kn_moe_experts cuda") &&
        run_ok(t, kn_moe_experts(&t->cpu, cpu, x, idx, wts, n_tokens, k, &hw), "kn_moe_experts cpu")) {
        char what[192];
        snprintf(what, sizeof what, "moe_experts %s tokens=%d k=%d experts %d..%d of %d dim=%d inter=%d%s vs float64",
                 act == KN_ACT_SWIGLU_OAI ? "clamped-swiglu" : "swiglu", n_tokens, k, offset,
                 offset + n_local - 1, n_global, dim, inter, biases ? " +bias" : "");
        check_err(t, gpu_err(t, d_out, ref, no, got), tol, what);
        snprintf(what, sizeof what, "moe_experts tokens=%d dim=%d inter=%d vs CPU", n_tokens, dim, inter);
        check_err(t, tu_max_rel_err_f32(got, cpu, no), tol, what);
    }
    kn_free(&t->gpu, d_gu), kn_free(&t->gpu, d_dn), kn_free(&t->gpu, d_gub), kn_free(&t->gpu, d_dnb);
    kn_free(&t->gpu, d_x), kn_free(&t->gpu, d_idx), kn_free(&t->gpu, d_wts), kn_free(&t->gpu, d_out);
    free(gu), free(dn), free(gub), free(dnb), free(x), free(idx), free(wts), free(ref), free(hbuf);
    free(cpu), free(got);
}

/* ------------------------------------------------------------------ */
/* bf16 weights: kn_matmul_w and the bf16 expert path against the CPU   */
/* backend (the same function: bf16-rounded operands, fp32 sums) and    */
/* float64 over the rounded operands.                                   */

/* The same rounded operands with fp32 sums in another order (tensor-core
 * accumulation): far below the ~3e-3 that unrounded (or TF32-rounded)
 * activations would differ by, so the check sees the rounding itself. */
#define BF16_VS_REF_TOL 2e-4
#define BF16_MOE_TOL 1e-3      /* + activations rounding to neighbouring bf16s */
/* GPU vs CPU experts: the fp32 gate_up sums reach the activation's bf16
 * rounding in another order, so an activation can land one bf16 ulp
 * (2^-8 relative) away; measured 1.03e-3 with k=1 and 16 tokens (few terms
 * per output, so one flip weighs). Bound: 2^-8, one ulp on every term. */
#define BF16_MOE_VS_CPU_TOL 3.9e-3

static void test_matmul_bf16(test_ctx *t, int m, int n, int k, int with_bias)
{
    float *x = rand_floats(t, (size_t)m * k, -2.f, 2.f), *wf = rand_floats(t, (size_t)n * k, -1.f, 1.f);
    float *bias = with_bias ? rand_floats(t, (size_t)n, -1.f, 1.f) : NULL;
    uint16_t *wb = tu_xcalloc((size_t)n * k, sizeof *wb);
    kn_f32_to_bf16_n(wb, wf, (size_t)n * k);
    size_t no = (size_t)m * n;
    double *ref = tu_xcalloc(no, sizeof(double));
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double acc = bias ? bias[j] : 0.0;
            for (int c = 0; c < k; c++)
                acc += (double)kn_round_bf16(x[(size_t)i * k + c]) * kn_bf16_to_f32(wb[(size_t)j * k + c]);
            ref[(size_t)i * n + j] = acc;
        }
    float *cpu = tu_xcalloc(no, sizeof(float)), *got = tu_xcalloc(no, sizeof(float));
    float *d_x = dev_upload(t, x, (size_t)m * k * sizeof(float));
    uint16_t *d_w = dev_upload(t, wb, (size_t)n * k * sizeof(uint16_t));
    float *d_b = bias ? dev_upload(t, bias, (size_t)n * sizeof(float)) : NULL;
    float *d_out = dev_alloc(t, no * sizeof(float));
    dev_poison(t, d_out, no);
    kn_weight hw = { KN_BF16, wb, NULL }, dw = { KN_BF16, d_w, NULL };
    if (run_ok(t, kn_matmul_w(&t->gpu, d_out, d_x, &dw, d_b, m, n, k), "kn_matmul_w bf16 cuda") &&
        run_ok(t, kn_matmul_w(&t->cpu, cpu, x, &hw, bias, m, n, k), "kn_matmul_w bf16 cpu")) {
        char what[128];
        snprintf(what, sizeof what, "matmul_w bf16 m=%d n=%d k=%d%s vs float64 of rounded operands", m, n,
                 k, bias ? " +bias" : "");
        check_err(t, gpu_err(t, d_out, ref, no, got), BF16_VS_REF_TOL, what);
        snprintf(what, sizeof what, "matmul_w bf16 m=%d n=%d k=%d vs CPU", m, n, k);
        check_err(t, tu_max_rel_err_f32(got, cpu, no), BF16_VS_REF_TOL, what);
    }
    kn_free(&t->gpu, d_x), kn_free(&t->gpu, d_w), kn_free(&t->gpu, d_b), kn_free(&t->gpu, d_out);
    free(x), free(wf), free(bias), free(wb), free(ref), free(cpu), free(got);
}

static void test_moe_experts_bf16(test_ctx *t, int n_tokens, int k, int n_experts, int dim, int inter,
                                  kn_act act)
{
    size_t ngu = (size_t)n_experts * 2 * inter * dim, nd = (size_t)n_experts * dim * inter;
    float *guf = rand_floats(t, ngu, -0.3f, 0.3f), *dnf = rand_floats(t, nd, -0.3f, 0.3f);
    uint16_t *gu = tu_xcalloc(ngu, sizeof *gu), *dn = tu_xcalloc(nd, sizeof *dn);
    kn_f32_to_bf16_n(gu, guf, ngu);
    kn_f32_to_bf16_n(dn, dnf, nd);
    float *gub = rand_floats(t, (size_t)n_experts * 2 * inter, -0.5f, 0.5f);
    float *dnb = rand_floats(t, (size_t)n_experts * dim, -0.5f, 0.5f);
    float *x = rand_floats(t, (size_t)n_tokens * dim, -2.f, 2.f);
    size_t ns = (size_t)n_tokens * k, no = (size_t)n_tokens * dim;
    int32_t *idx = tu_xcalloc(ns, sizeof(int32_t));
    float *wts = rand_floats(t, ns, 0.05f, 1.f);
    for (int tk = 0; tk < n_tokens; tk++)
        for (int j = 0; j < k; j++) {
            int e, dup;
            do {
                e = tu_rand_int(&t->rng, n_experts);
                dup = 0;
                for (int i = 0; i < j; i++)
                    dup |= idx[(size_t)tk * k + i] == e;
            } while (dup);
            idx[(size_t)tk * k + j] = e;
        }
    kn_moe_weights hw = { .n_experts = n_experts, .expert_offset = 0, .dim = dim, .inter = inter,
                          .wdtype = KN_BF16, .gate_up = gu, .gate_up_bias = gub, .down = dn,
                          .down_bias = dnb, .act = act, .alpha = 1.702f, .limit = 7.0f };
    float *cpu = tu_xcalloc(no, sizeof(float)), *got = tu_xcalloc(no, sizeof(float));
    uint16_t *d_gu = dev_upload(t, gu, ngu * sizeof(uint16_t)), *d_dn = dev_upload(t, dn, nd * sizeof(uint16_t));
    float *d_gub = dev_upload(t, gub, (size_t)n_experts * 2 * inter * sizeof(float));
    float *d_dnb = dev_upload(t, dnb, (size_t)n_experts * dim * sizeof(float));
    float *d_x = dev_upload(t, x, no * sizeof(float));
    int32_t *d_idx = dev_upload(t, idx, ns * sizeof(int32_t));
    float *d_wts = dev_upload(t, wts, ns * sizeof(float));
    float *d_out = dev_alloc(t, no * sizeof(float));
    dev_poison(t, d_out, no);
    kn_moe_weights dw = hw;
    dw.gate_up = d_gu, dw.gate_up_bias = d_gub, dw.down = d_dn, dw.down_bias = d_dnb;
    if (run_ok(t, kn_moe_experts(&t->gpu, d_out, d_x, d_idx, d_wts, n_tokens, k, &dw), "kn_moe_experts bf16 cuda") &&
        run_ok(t, kn_moe_experts(&t->cpu, cpu, x, idx, wts, n_tokens, k, &hw), "kn_moe_experts bf16 cpu")) {
        dev_download(t, got, d_out, no * sizeof(float));
        char what[160];
        snprintf(what, sizeof what, "moe_experts bf16 weights %s tokens=%d k=%d experts=%d dim=%d inter=%d vs CPU",
                 act == KN_ACT_SWIGLU_OAI ? "clamped-swiglu" : "swiglu", n_tokens, k, n_experts, dim, inter);
        check_err(t, tu_max_rel_err_f32(got, cpu, no), BF16_MOE_VS_CPU_TOL, what);
    }
    kn_free(&t->gpu, d_gu), kn_free(&t->gpu, d_dn), kn_free(&t->gpu, d_gub), kn_free(&t->gpu, d_dnb);
    kn_free(&t->gpu, d_x), kn_free(&t->gpu, d_idx), kn_free(&t->gpu, d_wts), kn_free(&t->gpu, d_out);
    free(guf), free(dnf), free(gu), free(dn), free(gub), free(dnb), free(x), free(idx), free(wts);
    free(cpu), free(got);
}

/* Many row counts m in a row through one backend with one (n, k): the bf16
 * GEMMs keep cuBLASLt plans per row bucket (four per octave) and run them with
 * the real m (kernels/cuda/lt_plan_cache.cuh), so a plan that is wrong for
 * some m of its bucket, or a stale cached layout, shows here. Rows are
 * independent, so the float64 reference and the CPU result are computed
 * once for the largest m and each call is checked on its first m rows; the
 * whole output buffer is NaN before every call. lt = 0 runs the same series
 * through cublasGemmEx (kn_cuda_set_lt_cache). One check per series (the
 * worst m named) and one for the CPU comparison. */
static void test_matmul_bf16_rows(test_ctx *t, const char *label, const int *ms, int n_m, int n, int k,
                                  int with_bias, int lt)
{
    int max_m = 0;
    for (int i = 0; i < n_m; i++)
        max_m = ms[i] > max_m ? ms[i] : max_m;
    float *x = rand_floats(t, (size_t)max_m * k, -2.f, 2.f), *wf = rand_floats(t, (size_t)n * k, -1.f, 1.f);
    float *bias = with_bias ? rand_floats(t, (size_t)n, -1.f, 1.f) : NULL;
    uint16_t *wb = tu_xcalloc((size_t)n * k, sizeof *wb);
    kn_f32_to_bf16_n(wb, wf, (size_t)n * k);
    size_t no = (size_t)max_m * n;
    double *ref = tu_xcalloc(no, sizeof(double));
    for (int i = 0; i < max_m; i++)
        for (int j = 0; j < n; j++) {
            double acc = bias ? bias[j] : 0.0;
            for (int c = 0; c < k; c++)
                acc += (double)kn_round_bf16(x[(size_t)i * k + c]) * kn_bf16_to_f32(wb[(size_t)j * k + c]);
            ref[(size_t)i * n + j] = acc;
        }
    float *cpu = tu_xcalloc(no, sizeof(float)), *got = tu_xcalloc(no, sizeof(float));
    float *d_x = dev_upload(t, x, (size_t)max_m * k * sizeof(float));
    uint16_t *d_w = dev_upload(t, wb, (size_t)n * k * sizeof(uint16_t));
    float *d_b = bias ? dev_upload(t, bias, (size_t)n * sizeof(float)) : NULL;
    float *d_out = dev_alloc(t, no * sizeof(float));
    kn_weight hw = { KN_BF16, wb, NULL }, dw = { KN_BF16, d_w, NULL };
    kn_cuda_set_lt_cache(&t->gpu, lt);
    long long searches0 = kn_cuda_lt_searches(&t->gpu);
    double worst = 0.0, worst_cpu = 0.0;
    int worst_m = 0, worst_cpu_m = 0, ran = 0;
    if (run_ok(t, kn_matmul_w(&t->cpu, cpu, x, &hw, bias, max_m, n, k), "kn_matmul_w bf16 cpu")) {
        for (ran = 0; ran < n_m; ran++) {
            const int m = ms[ran];
            dev_poison(t, d_out, no);
            if (!run_ok(t, kn_matmul_w(&t->gpu, d_out, d_x, &dw, d_b, m, n, k), "kn_matmul_w bf16 cuda"))
                break;
            double err = gpu_err(t, d_out, ref, (size_t)m * n, got);
            double err_cpu = tu_max_rel_err_f32(got, cpu, (size_t)m * n);
            if (!(err <= worst)) /* a NaN output reads as infinity and sticks */
                worst = err, worst_m = m;
            if (!(err_cpu <= worst_cpu))
                worst_cpu = err_cpu, worst_cpu_m = m;
        }
    }
    long long searches = kn_cuda_lt_searches(&t->gpu) - searches0;
    kn_cuda_set_lt_cache(&t->gpu, 1);
    if (ran == n_m) {
        char what[200];
        snprintf(what, sizeof what, "matmul_w bf16 %s: %d row counts (%d..%d) n=%d k=%d%s via %s, worst m=%d, "
                 "vs float64 of rounded operands", label, n_m, ms[0], ms[n_m - 1], n, k, bias ? " +bias" : "",
                 lt ? "cuBLASLt plan cache" : "cublasGemmEx", worst_m);
        check_err(t, worst, BF16_VS_REF_TOL, what);
        snprintf(what, sizeof what, "matmul_w bf16 %s via %s, worst m=%d, vs CPU", label,
                 lt ? "cuBLASLt plan cache" : "cublasGemmEx", worst_cpu_m);
        check_err(t, worst_cpu, BF16_VS_REF_TOL, what);
        printf("# matmul_w bf16 %s: %d calls, %lld cuBLASLt heuristic queries\n", label, n_m, searches);
    }
    kn_free(&t->gpu, d_x), kn_free(&t->gpu, d_w), kn_free(&t->gpu, d_b), kn_free(&t->gpu, d_out);
    free(x), free(wf), free(bias), free(wb), free(ref), free(cpu), free(got);
}

/* The per-expert path (forced) with fresh random routes for many token
 * counts in a row: every call splits the rows over the experts anew, so
 * the expert GEMMs see many different m through the plan cache, on the
 * backend's stream and spread over side streams (each with its own
 * workspace). Each call is a full check against the CPU. */
static void test_moe_experts_bf16_rows(test_ctx *t)
{
    static const int tokens[] = { 1, 3, 7, 16, 17, 31, 33, 50, 64, 97, 128, 200, 257 };
    kn_cuda_set_moe_grouped(&t->gpu, 0);
    for (int streams = 1; streams <= 4; streams += 3) {
        kn_cuda_set_moe_streams(&t->gpu, streams);
        for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++)
            test_moe_experts_bf16(t, tokens[i], 4, 32, 288, 192, KN_ACT_SWIGLU_OAI);
    }
    kn_cuda_set_moe_streams(&t->gpu, 1);
    kn_cuda_set_moe_grouped(&t->gpu, -1);
}

/* ------------------------------------------------------------------ */
/* FP8 weights (kernels/fp8.h): kn_matmul_w and the FP8 expert path      */
/* against the CPU backend (the same function: bit-identical activation */
/* quantization, then sums) and float64 of that function.               */

/* Hopper's FP8 tensor cores sum each 128-wide k block with less than fp32
 * precision before cuBLASLt promotes it with the block scales: the device
 * probe measured 2-3e-4 normwise (tests/gpu/probe_fp8.cu). */
#define FP8_TOL 1e-3
/* In the experts the GPU's h differs from the CPU's by that much, so an
 * activation near an e4m3 rounding boundary can land on the neighbouring
 * code (2^-3 relative at most) before the down product. */
#define FP8_MOE_TOL 2e-2

/* An [n][k] weight whose 128x128 blocks have magnitudes 2^-3..2^3, quantized
 * on the host; *data / *scale are host buffers (free them). */
static void fp8_weight(test_ctx *t, int n, int k, uint8_t **data, float **scale)
{
    float *w = tu_xcalloc((size_t)n * k, sizeof(float));
    for (int r = 0; r < n; r++)
        for (int c = 0; c < k; c++)
            w[(size_t)r * k + c] = (float)(tu_rand_uniform(&t->rng) * 2 - 1) *
                                   ldexpf(1.0f, (r / 128 * 5 + c / 128 * 3) % 7 - 3);
    *data = tu_xcalloc(kn_fp8_data_bytes(n, k), 1);
    *scale = tu_xcalloc(kn_fp8_scale_count(n, k), sizeof(float));
    kn_fp8_quantize_weight(*data, *scale, w, n, k);
    free(w);
}

static void test_matmul_fp8(test_ctx *t, int m, int n, int k, int with_bias)
{
    float *x = rand_floats(t, (size_t)m * k, -2.f, 2.f);
    float *bias = with_bias ? rand_floats(t, (size_t)n, -1.f, 1.f) : NULL;
    uint8_t *wq;
    float *ws;
    fp8_weight(t, n, k, &wq, &ws);
    size_t no = (size_t)m * n, ld = kn_fp8_ld(k), kb = kn_fp8_blocks(k), sld = kn_fp8_scale_ld(k);
    double *ref = tu_xcalloc(no, sizeof(double));
    uint8_t *xq = tu_xcalloc(ld, 1);
    float *xs = tu_xcalloc(kb, sizeof(float));
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
            ref[(size_t)i * n + j] = acc;
        }
    }
    float *cpu = tu_xcalloc(no, sizeof(float)), *got = tu_xcalloc(no, sizeof(float));
    float *d_x = dev_upload(t, x, (size_t)m * k * sizeof(float));
    uint8_t *d_w = dev_upload(t, wq, kn_fp8_data_bytes(n, k));
    float *d_s = dev_upload(t, ws, kn_fp8_scale_count(n, k) * sizeof(float));
    float *d_b = bias ? dev_upload(t, bias, (size_t)n * sizeof(float)) : NULL;
    float *d_out = dev_alloc(t, no * sizeof(float));
    dev_poison(t, d_out, no);
    kn_weight hw = { KN_FP8_E4M3, wq, ws }, dw = { KN_FP8_E4M3, d_w, d_s };
    if (run_ok(t, kn_matmul_w(&t->gpu, d_out, d_x, &dw, d_b, m, n, k), "kn_matmul_w fp8 cuda") &&
        run_ok(t, kn_matmul_w(&t->cpu, cpu, x, &hw, bias, m, n, k), "kn_matmul_w fp8 cpu")) {
        char what[160];
        snprintf(what, sizeof what, "matmul_w fp8 m=%d n=%d k=%d%s vs float64 of the FP8 function", m,
                 n, k, bias ? " +bias" : "");
        check_err(t, gpu_err(t, d_out, ref, no, got), FP8_TOL, what);
        snprintf(what, sizeof what, "matmul_w fp8 m=%d n=%d k=%d vs CPU", m, n, k);
        check_err(t, tu_max_rel_err_f32(got, cpu, no), FP8_TOL, what);
    }
    kn_free(&t->gpu, d_x), kn_free(&t->gpu, d_w), kn_free(&t->gpu, d_s), kn_free(&t->gpu, d_b);
    kn_free(&t->gpu, d_out);
    free(x), free(bias), free(wq), free(ws), free(ref), free(xq), free(xs), free(cpu), free(got);
}

static void test_moe_experts_fp8(test_ctx *t, int n_tokens, int k, int n_experts, int dim, int inter,
                                 kn_act act)
{
    size_t gdb = kn_fp8_data_bytes(2 * inter, dim), gsc = kn_fp8_scale_count(2 * inter, dim);
    size_t ddb = kn_fp8_data_bytes(dim, inter), dsc = kn_fp8_scale_count(dim, inter);
    uint8_t *gu = tu_xcalloc(n_experts * gdb, 1), *dn = tu_xcalloc(n_experts * ddb, 1);
    float *gus = tu_xcalloc(n_experts * gsc, sizeof(float)), *dns = tu_xcalloc(n_experts * dsc, sizeof(float));
    for (int e = 0; e < n_experts; e++) {
        uint8_t *q;
        float *s;
        fp8_weight(t, 2 * inter, dim, &q, &s);
        memcpy(gu + e * gdb, q, gdb), memcpy(gus + e * gsc, s, gsc * sizeof(float));
        free(q), free(s);
        fp8_weight(t, dim, inter, &q, &s);
        memcpy(dn + e * ddb, q, ddb), memcpy(dns + e * dsc, s, dsc * sizeof(float));
        free(q), free(s);
    }
    /* keep h near 1: the weights' magnitudes go up to 8 */
    for (size_t i = 0; i < n_experts * gsc; i++)
        gus[i] /= (float)dim;
    for (size_t i = 0; i < n_experts * dsc; i++)
        dns[i] /= (float)inter;
    float *gub = rand_floats(t, (size_t)n_experts * 2 * inter, -0.5f, 0.5f);
    float *dnb = rand_floats(t, (size_t)n_experts * dim, -0.5f, 0.5f);
    float *x = rand_floats(t, (size_t)n_tokens * dim, -2.f, 2.f);
    size_t ns = (size_t)n_tokens * k, no = (size_t)n_tokens * dim;
    int32_t *idx = tu_xcalloc(ns, sizeof(int32_t));
    float *wts = rand_floats(t, ns, 0.05f, 1.f);
    for (int tk = 0; tk < n_tokens; tk++)
        for (int j = 0; j < k; j++) {
            int e, dup;
            do {
                e = tu_rand_int(&t->rng, n_experts);
                dup = 0;
                for (int i = 0; i < j; i++)
                    dup |= idx[(size_t)tk * k + i] == e;
            } while (dup);
            idx[(size_t)tk * k + j] = e;
        }
    kn_moe_weights hw = { .n_experts = n_experts, .expert_offset = 0, .dim = dim, .inter = inter,
                          .wdtype = KN_FP8_E4M3, .gate_up = gu, .gate_up_bias = gub, .down = dn,
                          .down_bias = dnb, .gate_up_scale = gus, .down_scale = dns, .act = act,
                          .alpha = 1.702f, .limit = 7.0f };
    float *cpu = tu_xcalloc(no, sizeof(float)), *got = tu_xcalloc(no, sizeof(float));
    kn_moe_weights dw = hw;
    dw.gate_up = dev_upload(t, gu, n_experts * gdb);
    dw.down = dev_upload(t, dn, n_experts * ddb);
    dw.gate_up_scale = dev_upload(t, gus, n_experts * gsc * sizeof(float));
    dw.down_scale = dev_upload(t, dns, n_experts * dsc * sizeof(float));
    dw.gate_up_bias = dev_upload(t, gub, (size_t)n_experts * 2 * inter * sizeof(float));
    dw.down_bias = dev_upload(t, dnb, (size_t)n_experts * dim * sizeof(float));
    float *d_x = dev_upload(t, x, no * sizeof(float));
    int32_t *d_idx = dev_upload(t, idx, ns * sizeof(int32_t));
    float *d_wts = dev_upload(t, wts, ns * sizeof(float));
    float *d_out = dev_alloc(t, no * sizeof(float));
    dev_poison(t, d_out, no);
    if (run_ok(t, kn_moe_experts(&t->gpu, d_out, d_x, d_idx, d_wts, n_tokens, k, &dw), "kn_moe_experts fp8 cuda") &&
        run_ok(t, kn_moe_experts(&t->cpu, cpu, x, idx, wts, n_tokens, k, &hw), "kn_moe_experts fp8 cpu")) {
        dev_download(t, got, d_out, no * sizeof(float));
        char what[160];
        snprintf(what, sizeof what, "moe_experts fp8 weights %s tokens=%d k=%d experts=%d dim=%d inter=%d vs CPU",
                 act == KN_ACT_SWIGLU_OAI ? "clamped-swiglu" : "swiglu", n_tokens, k, n_experts, dim, inter);
        check_err(t, tu_max_rel_err_f32(got, cpu, no), FP8_MOE_TOL, what);
    }
    kn_free(&t->gpu, (void *)dw.gate_up), kn_free(&t->gpu, (void *)dw.down);
    kn_free(&t->gpu, (void *)dw.gate_up_scale), kn_free(&t->gpu, (void *)dw.down_scale);
    kn_free(&t->gpu, (void *)dw.gate_up_bias), kn_free(&t->gpu, (void *)dw.down_bias);
    kn_free(&t->gpu, d_x), kn_free(&t->gpu, d_idx), kn_free(&t->gpu, d_wts), kn_free(&t->gpu, d_out);
    free(gu), free(dn), free(gus), free(dns), free(gub), free(dnb), free(x), free(idx), free(wts);
    free(cpu), free(got);
}

/* ------------------------------------------------------------------ */
/* The two bf16 expert paths of the CUDA backend (the grouped one-launch */
/* kernel and the per-expert cuBLAS GEMMs, forced through                */
/* kn_cuda_set_moe_grouped) on the real models' shapes, both against the */
/* CPU backend and against each other.                                   */

typedef struct moe_shape {
    const char *name;
    int n_global, dim, inter;
    kn_act act;
    int biases;
    int fp8; /* KN_FP8_E4M3 weights (block scales gus/dns) instead of bf16 */
    /* all n_global experts: host (CPU backend) and device copies */
    void *gu, *dn, *d_gu, *d_dn;
    float *gub, *dnb, *d_gub, *d_dnb;
    float *gus, *dns, *d_gus, *d_dns;
} moe_shape;

/* Bytes of one expert's gate_up / down weights, floats of their scales. */
static size_t moe_gu_bytes(const moe_shape *s)
{
    return s->fp8 ? kn_fp8_data_bytes(2 * (size_t)s->inter, s->dim) : 2 * (size_t)s->inter * s->dim * 2;
}
static size_t moe_dn_bytes(const moe_shape *s)
{
    return s->fp8 ? kn_fp8_data_bytes(s->dim, s->inter) : (size_t)s->dim * s->inter * 2;
}

/* Synthetic FP8 weights: random finite codes everywhere (the row padding
 * too, which must meet zero activation codes) and a random scale per
 * 128x128 block in [0.5, 1.5] * a / 448, so values are within about +-1.5a
 * and a wrong block's scale shows; scale-row padding 1 (kernels/fp8.h). */
static float *fp8_block_scales(test_ctx *t, int n_experts, size_t n, size_t k, float a)
{
    size_t per = kn_fp8_scale_count(n, k), ld = kn_fp8_scale_ld(k), kb = kn_fp8_blocks(k);
    float *sc = rand_floats(t, (size_t)n_experts * per, 0.5f * a / 448.f, 1.5f * a / 448.f);
    for (size_t i = 0; i < (size_t)n_experts * per; i++)
        if (i % ld >= kb)
            sc[i] = 1.f;
    return sc;
}

static void moe_shape_make(test_ctx *t, moe_shape *s, uint64_t seed)
{
    size_t gub = (size_t)s->n_global * moe_gu_bytes(s), dnb = (size_t)s->n_global * moe_dn_bytes(s);
    s->gu = tu_xcalloc(gub, 1);
    s->dn = tu_xcalloc(dnb, 1);
    /* Scaled so h and y stay O(1) (the clamp does not swallow everything). */
    float a_gu = sqrtf(3.f / (float)s->dim), a_dn = sqrtf(3.f / (float)s->inter);
    int rc;
    s->gus = s->dns = s->d_gus = s->d_dns = NULL;
    if (s->fp8) {
        rc = kn_fill_uniform(&t->cpu, s->gu, KN_FP8_E4M3, gub, seed, -448.f, 448.f);
        if (rc == TN_OK)
            rc = kn_fill_uniform(&t->cpu, s->dn, KN_FP8_E4M3, dnb, seed + 1, -448.f, 448.f);
        s->gus = fp8_block_scales(t, s->n_global, 2 * (size_t)s->inter, s->dim, a_gu);
        s->dns = fp8_block_scales(t, s->n_global, s->dim, s->inter, a_dn);
        s->d_gus = dev_upload(t, s->gus, (size_t)s->n_global * kn_fp8_scale_count(2 * (size_t)s->inter, s->dim) *
                                             sizeof(float));
        s->d_dns = dev_upload(t, s->dns, (size_t)s->n_global * kn_fp8_scale_count(s->dim, s->inter) * sizeof(float));
    } else {
        rc = kn_fill_uniform(&t->cpu, s->gu, KN_BF16, gub / 2, seed, -a_gu, a_gu);
        if (rc == TN_OK)
            rc = kn_fill_uniform(&t->cpu, s->dn, KN_BF16, dnb / 2, seed + 1, -a_dn, a_dn);
    }
    if (rc != TN_OK)
        die("kn_fill_uniform cpu", rc);
    s->d_gu = dev_upload(t, s->gu, gub);
    s->d_dn = dev_upload(t, s->dn, dnb);
    s->gub = s->dnb = s->d_gub = s->d_dnb = NULL;
    if (s->biases) {
        s->gub = rand_floats(t, (size_t)s->n_global * 2 * s->inter, -0.5f, 0.5f);
        s->dnb = rand_floats(t, (size_t)s->n_global * s->dim, -0.5f, 0.5f);
        s->d_gub = dev_upload(t, s->gub, (size_t)s->n_global * 2 * s->inter * sizeof(float));
        s->d_dnb = dev_upload(t, s->dnb, (size_t)s->n_global * s->dim * sizeof(float));
    }
}

static void moe_shape_free(test_ctx *t, moe_shape *s)
{
    kn_free(&t->gpu, s->d_gu), kn_free(&t->gpu, s->d_dn), kn_free(&t->gpu, s->d_gub), kn_free(&t->gpu, s->d_dnb);
    kn_free(&t->gpu, s->d_gus), kn_free(&t->gpu, s->d_dns);
    free(s->gu), free(s->dn), free(s->gub), free(s->dnb), free(s->gus), free(s->dns);
}

/* The weights of experts [offset, offset + n_local) as an EP rank holds them. */
static kn_moe_weights moe_shape_view(const moe_shape *s, int on_device, int offset, int n_local)
{
    size_t gu_off = (size_t)offset * moe_gu_bytes(s), dn_off = (size_t)offset * moe_dn_bytes(s);
    const char *gu = on_device ? s->d_gu : s->gu, *dn = on_device ? s->d_dn : s->dn;
    const float *gub = on_device ? s->d_gub : s->gub, *dnb = on_device ? s->d_dnb : s->dnb;
    const float *gus = on_device ? s->d_gus : s->gus, *dns = on_device ? s->d_dns : s->dns;
    kn_moe_weights w = { .n_experts = n_local, .expert_offset = offset, .dim = s->dim, .inter = s->inter,
                         .wdtype = s->fp8 ? KN_FP8_E4M3 : KN_BF16, .gate_up = gu + gu_off, .gate_up_bias = gub ? gub + (size_t)offset * 2 * s->inter : NULL,
                         .down = dn + dn_off, .down_bias = dnb ? dnb + (size_t)offset * s->dim : NULL,
                         .act = s->act, .alpha = 1.702f, .limit = 7.0f };
    if (s->fp8) {
        w.gate_up_scale = gus + (size_t)offset * kn_fp8_scale_count(2 * (size_t)s->inter, s->dim);
        w.down_scale = dns + (size_t)offset * kn_fp8_scale_count(s->dim, s->inter);
    }
    return w;
}

/* One batch through both CUDA paths and the CPU: experts [offset, offset +
 * n_local) of the shape held here, k distinct routes per token over all
 * n_global experts (so routes to experts held elsewhere occur whenever
 * n_local < n_global); skew sends every token's first route to the first
 * held expert (an expert with many more rows than the others, which takes
 * several passes of the grouped kernel). */
static void moe_paths_run(test_ctx *t, const moe_shape *s, int offset, int n_local, int n_tokens, int k,
                          int skew)
{
    size_t ns = (size_t)n_tokens * k, no = (size_t)n_tokens * s->dim;
    float *x = rand_floats(t, no ? no : 1, -2.f, 2.f), *wts = rand_floats(t, ns ? ns : 1, 0.05f, 1.f);
    int32_t *idx = tu_xcalloc(ns ? ns : 1, sizeof(int32_t));
    for (int tk = 0; tk < n_tokens; tk++)
        for (int j = 0; j < k; j++) {
            int e, dup;
            do {
                e = skew && j == 0 ? offset : tu_rand_int(&t->rng, s->n_global);
                dup = 0;
                for (int i = 0; i < j; i++)
                    dup |= idx[(size_t)tk * k + i] == e;
            } while (dup);
            idx[(size_t)tk * k + j] = e;
        }
    kn_moe_weights hw = moe_shape_view(s, 0, offset, n_local), dw = moe_shape_view(s, 1, offset, n_local);
    float *cpu = tu_xcalloc(no ? no : 1, sizeof(float));
    float *got[4] = { tu_xcalloc(no ? no : 1, sizeof(float)), tu_xcalloc(no ? no : 1, sizeof(float)),
                      tu_xcalloc(no ? no : 1, sizeof(float)), tu_xcalloc(no ? no : 1, sizeof(float)) };
    float *d_x = dev_upload(t, x, (no ? no : 1) * sizeof(float));
    int32_t *d_idx = dev_upload(t, idx, (ns ? ns : 1) * sizeof(int32_t));
    float *d_wts = dev_upload(t, wts, (ns ? ns : 1) * sizeof(float));
    float *d_out = dev_alloc(t, (no ? no : 1) * sizeof(float));
    char what[224];
    snprintf(what, sizeof what, "moe_experts %s %s experts %d..%d of %d, tokens=%d k=%d%s", s->fp8 ? "fp8" : "bf16",
             s->name, offset, offset + n_local - 1, s->n_global, n_tokens, k, skew ? " skewed" : "");
    int cpu_ok = run_ok(t, kn_moe_experts(&t->cpu, cpu, x, idx, wts, n_tokens, k, &hw), "kn_moe_experts cpu");
    int ran[4] = { 0, 0, 0, 0 };
    /* mode 0: per-expert GEMMs on the backend's stream, 1: grouped kernels,
     * 2: bf16: per-expert GEMMs over 4 side streams (the GPT-OSS shape
     * only); FP8: per-expert with the activation and its quantization as
     * two kernels (kn_cuda_set_moe_fp8_fused_act 0; mode 0 fuses them);
     * 3 (FP8, the GPT-OSS shape): per-expert GEMMs over 4 side streams. */
    static const char *const mode_name[2][4] = {
        { "per-expert", "grouped", "per-expert on 4 streams", "" },
        { "per-expert", "grouped", "per-expert unfused act", "per-expert on 4 streams" } };
    const int n_modes = s->fp8 ? (s->dim == 2880 ? 4 : 3) : (s->dim == 2880 ? 3 : 2);
    for (int mode = 0; mode < n_modes; mode++) {
        float *dst = got[mode];
        dev_poison(t, d_out, no ? no : 1);
        kn_cuda_set_moe_grouped(&t->gpu, mode == 1);
        kn_cuda_set_moe_streams(&t->gpu, mode == (s->fp8 ? 3 : 2) ? 4 : 1);
        kn_cuda_set_moe_fp8_fused_act(&t->gpu, !(mode == 2 && s->fp8));
        int rc = kn_moe_experts(&t->gpu, d_out, d_x, d_idx, d_wts, n_tokens, k, &dw);
        kn_cuda_set_moe_grouped(&t->gpu, -1);
        kn_cuda_set_moe_streams(&t->gpu, 1);
        kn_cuda_set_moe_fp8_fused_act(&t->gpu, 1);
        char w2[256];
        snprintf(w2, sizeof w2, "kn_moe_experts cuda %s", mode_name[s->fp8][mode]);
        if (!run_ok(t, rc, w2))
            continue;
        dev_download(t, dst, d_out, (no ? no : 1) * sizeof(float));
        if (n_tokens == 0) { /* nothing to write: out stays as it was */
            tap(t, isnan(dst[0]), "%s, %s path: returns without writing", what, mode_name[s->fp8][mode]);
            continue;
        }
        ran[mode] = 1;
        if (cpu_ok) {
            snprintf(w2, sizeof w2, "%s, %s path vs CPU", what, mode_name[s->fp8][mode]);
            check_err(t, tu_max_rel_err_f32(dst, cpu, no), s->fp8 ? FP8_MOE_TOL : BF16_MOE_VS_CPU_TOL, w2);
        }
    }
    if (ran[0] && ran[1]) {
        char w2[256];
        snprintf(w2, sizeof w2, "%s, grouped vs per-expert", what);
        check_err(t, tu_max_rel_err_f32(got[1], got[0], no), s->fp8 ? FP8_MOE_TOL : BF16_MOE_TOL, w2);
    }
    if (s->fp8 && ran[0] && ran[2]) {
        /* The fused kernel computes the unfused pair's codes and scales
         * bit for bit, so the outputs are equal (NaN anywhere fails). */
        size_t diff = 0;
        for (size_t i = 0; i < no; i++)
            diff += !(got[0][i] == got[2][i]);
        tap(t, diff == 0, "%s, per-expert fused act+quant vs unfused: identical (%zu of %zu differ)", what,
            diff, no);
    }
    if (s->fp8 && ran[0] && ran[3]) {
        char w2[288];
        snprintf(w2, sizeof w2, "%s, per-expert on 4 streams vs on one", what);
        check_err(t, tu_max_rel_err_f32(got[3], got[0], no), FP8_MOE_TOL, w2);
    }
    kn_free(&t->gpu, d_x), kn_free(&t->gpu, d_idx), kn_free(&t->gpu, d_wts), kn_free(&t->gpu, d_out);
    free(x), free(wts), free(idx), free(cpu), free(got[0]), free(got[1]), free(got[2]), free(got[3]);
}

static void test_moe_paths(test_ctx *t)
{
    /* GPT-OSS-20B: 32 experts of 2880 x 2880, top-4, clamped SwiGLU, biases. */
    moe_shape oss = { .name = "gpt-oss-20b", .n_global = 32, .dim = 2880, .inter = 2880,
                      .act = KN_ACT_SWIGLU_OAI, .biases = 1 };
    moe_shape_make(t, &oss, 11);
    static const int oss_tokens[] = { 1, 8, 32, 128, 200, 300 };
    for (size_t i = 0; i < sizeof oss_tokens / sizeof oss_tokens[0]; i++)
        moe_paths_run(t, &oss, 0, 32, oss_tokens[i], 4, 0);
    moe_paths_run(t, &oss, 0, 32, 40, 4, 1);
    moe_paths_run(t, &oss, 0, 32, 7, 1, 0);
    moe_paths_run(t, &oss, 8, 8, 32, 4, 0); /* an EP rank's 8 of 32 */
    moe_paths_run(t, &oss, 24, 8, 3, 4, 0);
    moe_shape_free(t, &oss);

    /* Qwen3-30B-A3B: 128 experts of 2048 -> 768, top-8, SwiGLU, no biases. */
    moe_shape qwen = { .name = "qwen3-30b-a3b", .n_global = 128, .dim = 2048, .inter = 768,
                       .act = KN_ACT_SWIGLU, .biases = 0 };
    moe_shape_make(t, &qwen, 12);
    static const int qwen_tokens[] = { 1, 8, 32, 128 };
    for (size_t i = 0; i < sizeof qwen_tokens / sizeof qwen_tokens[0]; i++)
        moe_paths_run(t, &qwen, 0, 128, qwen_tokens[i], 8, 0);
    moe_paths_run(t, &qwen, 0, 128, 32, 8, 1);
    for (int k = 1; k <= 7; k++)
        moe_paths_run(t, &qwen, 0, 128, 16, k, 0);
    moe_paths_run(t, &qwen, 96, 32, 24, 8, 0);
    moe_paths_run(t, &qwen, 0, 128, 0, 8, 0); /* no tokens */
    moe_shape_free(t, &qwen);

    /* Sizes the tensor-core grouped kernels do not take (K % 32 != 0): the
     * CUDA-core kernels, 16-byte (K % 8 == 0) and scalar, next to the
     * tensor-core one for the other product; experts with many rows
     * (several passes). */
    moe_shape odd = { .name = "dim 33 inter 17", .n_global = 16, .dim = 33, .inter = 17,
                      .act = KN_ACT_SWIGLU_OAI, .biases = 1 };
    moe_shape_make(t, &odd, 13);
    moe_paths_run(t, &odd, 12, 4, 3, 2, 0);
    moe_paths_run(t, &odd, 0, 16, 50, 8, 1);
    moe_shape_free(t, &odd);
    moe_shape mid = { .name = "dim 96 inter 40", .n_global = 16, .dim = 96, .inter = 40,
                      .act = KN_ACT_SWIGLU, .biases = 1 };
    moe_shape_make(t, &mid, 14);
    moe_paths_run(t, &mid, 0, 16, 200, 4, 0);
    moe_paths_run(t, &mid, 4, 8, 61, 8, 1);
    moe_shape_free(t, &mid);
    moe_shape mid2 = { .name = "dim 40 inter 96", .n_global = 8, .dim = 40, .inter = 96,
                       .act = KN_ACT_SWIGLU_OAI, .biases = 0 };
    moe_shape_make(t, &mid2, 15);
    moe_paths_run(t, &mid2, 0, 8, 9, 3, 0);
    moe_paths_run(t, &mid2, 0, 8, 100, 2, 1);
    moe_shape_free(t, &mid2);
}

/* The FP8 expert paths: the grouped kernels (moe_grouped_fp8.cu: e4m3
 * codes and block scales read directly, activations quantized on the way)
 * and the per-expert cuBLASLt GEMMs, against the CPU and each other, on the
 * same real shapes (2880 is not a multiple of 128: padded rows and scale
 * rows) plus a small odd one. Both compute kernels/fp8.h's function; they
 * differ in fp32 summation order (and Hopper's FP8 tensor-core sums in the
 * per-expert GEMMs, 2-3e-4), which can move a gate_up sum across an e4m3
 * rounding boundary of the intermediate activation: that code is then one
 * e4m3 step (2^-3 relative) away, so the bound is FP8_MOE_TOL, as for the
 * per-expert path against the CPU. all = 0 (the whole suite's run) keeps
 * one case of each kind, so the CPU references (every expert dequantized
 * per call) stay short; all = 1 (argument moe-fp8) runs every case. */
static void test_moe_paths_fp8(test_ctx *t, int all)
{
    moe_shape oss = { .name = "gpt-oss-20b", .n_global = 32, .dim = 2880, .inter = 2880,
                      .act = KN_ACT_SWIGLU_OAI, .biases = 1, .fp8 = 1 };
    moe_shape_make(t, &oss, 21);
    static const int oss_tokens[] = { 1, 32, 300, 8, 128 };
    for (size_t i = 0; i < (all ? 5u : 3u); i++)
        moe_paths_run(t, &oss, 0, 32, oss_tokens[i], 4, 0);
    moe_paths_run(t, &oss, 0, 32, 40, 4, 1);  /* one expert with every token: several passes */
    moe_paths_run(t, &oss, 0, 32, 7, 1, 0);
    moe_paths_run(t, &oss, 8, 8, 32, 4, 0);   /* an EP rank's 8 of 32 */
    if (all)
        moe_paths_run(t, &oss, 24, 8, 3, 4, 1);
    moe_paths_run(t, &oss, 0, 32, 0, 4, 0);   /* no tokens */
    moe_shape_free(t, &oss);

    moe_shape qwen = { .name = "qwen3-30b-a3b", .n_global = 128, .dim = 2048, .inter = 768,
                       .act = KN_ACT_SWIGLU, .biases = 0, .fp8 = 1 };
    moe_shape_make(t, &qwen, 22);
    static const int qwen_tokens[] = { 1, 32, 8, 128 };
    for (size_t i = 0; i < (all ? 4u : 2u); i++)
        moe_paths_run(t, &qwen, 0, 128, qwen_tokens[i], 8, 0);
    moe_paths_run(t, &qwen, 0, 128, 64, 8, 1);
    for (int k = 1; k <= 7; k += all ? 1 : 3)
        moe_paths_run(t, &qwen, 0, 128, 16, k, 0);
    moe_paths_run(t, &qwen, 96, 32, 24, 8, 0);
    if (all)
        moe_paths_run(t, &qwen, 32, 32, 5, 8, 1);
    moe_shape_free(t, &qwen);

    /* Neither dim is a multiple of 128 (nor of 32): one partial 128-block
     * of activation columns, padded rows on both products. */
    moe_shape odd = { .name = "dim 200 inter 130", .n_global = 16, .dim = 200, .inter = 130,
                      .act = KN_ACT_SWIGLU_OAI, .biases = 1, .fp8 = 1 };
    moe_shape_make(t, &odd, 23);
    moe_paths_run(t, &odd, 0, 16, 1, 8, 0);
    moe_paths_run(t, &odd, 0, 16, 300, 2, 1);
    moe_paths_run(t, &odd, 4, 8, 61, 8, 0);
    moe_shape_free(t, &odd);
}

/* kn_fill_uniform: the GPU writes the CPU's bits, f32 and bf16. */
static void test_fill(test_ctx *t, size_t n, uint64_t seed, float lo, float hi)
{
    float *cpu = tu_xcalloc(n, sizeof(float)), *got = tu_xcalloc(n, sizeof(float));
    float *d = dev_alloc(t, n * sizeof(float));
    dev_poison(t, d, n);
    if (run_ok(t, kn_fill_uniform(&t->gpu, d, KN_F32, n, seed, lo, hi), "kn_fill_uniform cuda") &&
        run_ok(t, kn_fill_uniform(&t->cpu, cpu, KN_F32, n, seed, lo, hi), "kn_fill_uniform cpu")) {
        dev_download(t, got, d, n * sizeof(float));
        tap(t, all_equal(got, cpu, n), "fill_uniform f32 n=%zu seed=%llu [%g, %g): GPU bits equal CPU", n,
            (unsigned long long)seed, (double)lo, (double)hi);
    }
    /* bf16 into the same buffer: n bf16 values, compared as bytes */
    if (run_ok(t, kn_fill_uniform(&t->gpu, d, KN_BF16, n, seed, lo, hi), "kn_fill_uniform bf16 cuda") &&
        run_ok(t, kn_fill_uniform(&t->cpu, cpu, KN_BF16, n, seed, lo, hi), "kn_fill_uniform bf16 cpu")) {
        dev_download(t, got, d, n * sizeof(uint16_t));
        tap(t, memcmp(got, cpu, n * sizeof(uint16_t)) == 0, "fill_uniform bf16 n=%zu: GPU bits equal CPU", n);
    }
    /* fp8 e4m3 codes (synthetic FP8 weights): n bytes */
    if (run_ok(t, kn_fill_uniform(&t->gpu, d, KN_FP8_E4M3, n, seed, -448.f, 448.f), "kn_fill_uniform fp8 cuda") &&
        run_ok(t, kn_fill_uniform(&t->cpu, cpu, KN_FP8_E4M3, n, seed, -448.f, 448.f), "kn_fill_uniform fp8 cpu")) {
        dev_download(t, got, d, n);
        tap(t, memcmp(got, cpu, n) == 0, "fill_uniform fp8 n=%zu: GPU bits equal CPU", n);
    }
    /* a slice of the stream (kn_fill_uniform_at), as synthetic shards use */
    size_t first = (size_t)seed * 7919 + 3;
    if (run_ok(t, kn_fill_uniform_at(&t->gpu, d, KN_F32, n, seed, first, lo, hi), "kn_fill_uniform_at cuda") &&
        run_ok(t, kn_fill_uniform_at(&t->cpu, cpu, KN_F32, n, seed, first, lo, hi), "kn_fill_uniform_at cpu")) {
        dev_download(t, got, d, n * sizeof(float));
        tap(t, all_equal(got, cpu, n), "fill_uniform_at f32 n=%zu first=%zu: GPU bits equal CPU", n, first);
    }
    kn_free(&t->gpu, d);
    free(cpu), free(got);
}

/* kn_stopwatch on the stream: laps over real work are positive and each
 * lands in its group. */
static void test_stopwatch(test_ctx *t)
{
    kn_stopwatch *sw = NULL;
    size_t n = (size_t)64 << 20;
    float *d = dev_alloc(t, n * sizeof(float));
    double ms[2] = { 0, 0 };
    int rc = kn_stopwatch_create(&t->gpu, 2, 8, &sw);
    if (rc == TN_OK)
        rc = kn_stopwatch_start(sw);
    for (int i = 0; i < 3 && rc == TN_OK; i++) {
        rc = kn_fill_uniform(&t->gpu, d, KN_F32, n, (uint64_t)i, 0.f, 1.f);
        if (rc == TN_OK)
            rc = kn_stopwatch_lap(sw, i == 0 ? 0 : 1);
    }
    if (rc == TN_OK)
        rc = kn_stopwatch_collect(sw, ms);
    tap(t, rc == TN_OK && ms[0] > 0 && ms[1] > 0, "stopwatch: 1 fill %.3f ms, 2 fills %.3f ms (%s)", ms[0],
        ms[1], tn_status_str(rc));
    kn_stopwatch_free(sw);
    kn_free(&t->gpu, d);
}

/* ------------------------------------------------------------------ */
/* Sampling: the same tokens and generator states as the CPU.          */

static void test_sampling(test_ctx *t, int n_rows, int vocab, int rounds)
{
    static const kn_sampling settings[] = {
        { 0.0f, 1.0f, 0 },   { 0.7f, 1.0f, 0 },  { 1.0f, 1.0f, 50 }, { 0.8f, 0.9f, 0 },
        { 1.0f, 0.95f, 40 }, { 1.5f, 0.5f, 0 },  { 0.6f, 1.0f, 1 },  { 2.0f, 0.999f, 0 },
    };
    const int n_settings = (int)(sizeof settings / sizeof settings[0]);
    kn_sampling *params = tu_xcalloc((size_t)n_rows, sizeof *params);
    uint64_t *st_cpu = tu_xcalloc((size_t)n_rows, sizeof(uint64_t));
    uint64_t *st_gpu = tu_xcalloc((size_t)n_rows, sizeof(uint64_t));
    int32_t *tok_cpu = tu_xcalloc((size_t)n_rows, sizeof(int32_t));
    int32_t *tok_gpu = tu_xcalloc((size_t)n_rows, sizeof(int32_t));
    size_t nl = (size_t)n_rows * vocab;
    float *logits = tu_xcalloc(nl, sizeof(float));
    float *d_l = dev_alloc(t, nl * sizeof(float));
    for (int r = 0; r < n_rows; r++) {
        params[r] = settings[r % n_settings];
        st_cpu[r] = st_gpu[r] = kn_rng_seed(tu_rand_u64(&t->rng));
    }
    int mismatches = 0, state_mismatch = 0, failures = 0;
    for (int round = 0; round < rounds; round++) {
        for (size_t i = 0; i < nl; i++)
            logits[i] = (float)(3.0 * rand_normal(t));
        /* Exact ties with the row max, and a -inf logit. */
        for (int r = 0; r < n_rows; r++) {
            float *lr = logits + (size_t)r * vocab;
            int a = tu_rand_int(&t->rng, vocab), b = tu_rand_int(&t->rng, vocab);
            lr[a] = lr[b] = 12.0f;
            lr[tu_rand_int(&t->rng, vocab)] = -INFINITY;
        }
        if (kn_copy_to_backend(&t->gpu, d_l, logits, nl * sizeof(float)) != TN_OK)
            die("kn_copy_to_backend", TN_ERR_DEVICE);
        for (int r = 0; r < n_rows; r++)
            tok_gpu[r] = -1;
        int rg = kn_sample(&t->gpu, tok_gpu, d_l, n_rows, vocab, params, st_gpu);
        int rcpu = kn_sample(&t->cpu, tok_cpu, logits, n_rows, vocab, params, st_cpu);
        if (rg != TN_OK || rcpu != TN_OK) {
            failures++;
            continue;
        }
        for (int r = 0; r < n_rows; r++) {
            mismatches += tok_gpu[r] != tok_cpu[r];
            state_mismatch += st_gpu[r] != st_cpu[r];
        }
    }
    tap(t, failures == 0 && mismatches == 0 && state_mismatch == 0,
        "sample rows=%d vocab=%d x %d rounds (greedy/temperature/top-k/top-p): tokens equal CPU "
        "(%d mismatches, %d generator mismatches, %d failed calls)", n_rows, vocab, rounds, mismatches,
        state_mismatch, failures);
    /* A NaN logit: TN_ERR_ARG and no generator moves. */
    logits[(size_t)(n_rows - 1) * vocab + 5] = NAN;
    kn_copy_to_backend(&t->gpu, d_l, logits, nl * sizeof(float));
    uint64_t before = st_gpu[1];
    int rg = kn_sample(&t->gpu, tok_gpu, d_l, n_rows, vocab, params, st_gpu);
    tap(t, rg == TN_ERR_ARG && st_gpu[1] == before, "sample: NaN logit rejected, generators untouched");
    kn_free(&t->gpu, d_l);
    free(params), free(st_cpu), free(st_gpu), free(tok_cpu), free(tok_gpu), free(logits);
}

int main(int argc, char **argv)
{
    test_ctx t;
    memset(&t, 0, sizeof t);
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : (uint64_t)time(NULL);
    tu_rng_init(&t.rng, seed);
    const char *tf32 = getenv("TANDEM_CUDA_TF32");
    t.tf32 = tf32 && strcmp(tf32, "1") == 0;
    printf("# test_cuda_ops seed=%llu tf32=%d\n", (unsigned long long)seed, t.tf32);
    int rc = kn_backend_init_cpu(&t.cpu);
    if (rc != TN_OK)
        die("kn_backend_init_cpu", rc);
    rc = kn_backend_init_cuda(&t.gpu, 0);
    if (rc != TN_OK)
        die("kn_backend_init_cuda", rc);

    if (argc > 2 && strcmp(argv[2], "moe") == 0) { /* the expert paths alone (memcheck runs) */
        test_moe_paths(&t);
        goto finish;
    }
    if (argc > 2 && strcmp(argv[2], "moe-fp8") == 0) { /* the FP8 expert paths alone */
        test_moe_paths_fp8(&t, 1);
        goto finish;
    }

    test_embedding(&t, 1, 1000, 64);
    test_embedding(&t, 300, 5000, 2880);
    test_embedding(&t, 17, 333, 33);

    test_rmsnorm(&t, 1, 2880, 0);
    test_rmsnorm(&t, 300, 2880, 0);
    test_rmsnorm(&t, 7, 37, 0);
    test_rmsnorm(&t, 64, 4096, 1);
    test_rmsnorm(&t, 513, 64, 0); /* Qwen3's per-head q/k norm shape */
    test_add_rmsnorm(&t, 8192, 2880); /* GPT-OSS-20B prefill residual */
    test_add_rmsnorm(&t, 7, 64);
    test_add_rmsnorm(&t, 300, 4096);

    test_matmul(&t, 1, 2880, 2880, 1);
    test_matmul(&t, 37, 129, 65, 0);
    test_matmul(&t, 300, 512, 2880, 1);
    test_matmul(&t, 5, 201088 / 64, 2880, 0);

    test_add(&t, 1, 0, 0);
    test_add(&t, 1000003, 0, 0);
    test_add(&t, 4096, 1, 0);
    test_add(&t, 12345, 0, 1);

    test_rope(&t, 37, 8, 64, 1);
    test_rope(&t, 100, 4, 128, 0);
    test_rope(&t, 5, 3, 6, 0);

    static const attn_case cases[] = {
        { "prefill 1 seq 200 rows, 16/2 heads, d64, page 16, sinks", 1, { 200 }, { 200 }, 16, 2, 64, 16, 0, 1 },
        { "prefill 1 seq 300 rows, sliding window 128, sinks", 1, { 300 }, { 300 }, 16, 2, 64, 16, 128, 1 },
        { "chunked prefill 2 seqs (70 of 150, 33 of 33), 8/2 heads, d128, no sink", 2, { 70, 33 }, { 150, 33 },
          8, 2, 128, 16, 0, 0 },
        { "MHA 4/4 heads, d64, 100 rows, page 5, sinks", 1, { 100 }, { 100 }, 4, 4, 64, 5, 0, 1 },
        { "decode 5 seqs kv 1..2500 (split-KV), 16/2 heads, d64, sinks", 5, { 1, 1, 1, 1, 1 },
          { 1, 17, 300, 1500, 2500 }, 16, 2, 64, 16, 0, 1 },
        { "decode 3 seqs kv 40..3000, window 128, sinks", 3, { 1, 1, 1 }, { 40, 700, 3000 }, 16, 2, 64, 16, 128, 1 },
        { "decode 2 seqs kv 2000, 32/4 heads d128, no sink (split-KV)", 2, { 1, 1 }, { 2000, 1999 }, 32, 4, 128, 16,
          0, 0 },
        { "prefill d80 (generic kernel) 45 rows, 4/2 heads, sinks", 1, { 45 }, { 45 }, 4, 2, 80, 16, 0, 1 },
        { "spec-decode 3 rows x 2 seqs kv 600, 16/2 heads, d64, sinks, window 128", 2, { 3, 3 }, { 600, 601 },
          16, 2, 64, 16, 128, 1 },
        { "decode d96 (generic) kv 1300, 12/4 heads, sinks", 2, { 1, 2 }, { 1300, 77 }, 12, 4, 96, 8, 0, 1 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        test_attention(&t, &cases[i], 0);

    /* The bf16 tensor-core prefill kernel: the prefill cases above, then
     * GPT-OSS's 64/8 heads, odd lengths, chunked multi-sequence batches,
     * windows with and without sinks (rows whose first tiles are all
     * masked), head_dim 128. */
    static const attn_case bf16_cases[] = {
        { "prefill 1 seq 200 rows, 16/2 heads, d64, page 16, sinks", 1, { 200 }, { 200 }, 16, 2, 64, 16, 0, 1 },
        { "prefill 1 seq 300 rows, sliding window 128, sinks", 1, { 300 }, { 300 }, 16, 2, 64, 16, 128, 1 },
        { "chunked prefill 2 seqs (70 of 150, 33 of 33), 8/2 heads, d128, no sink", 2, { 70, 33 }, { 150, 33 },
          8, 2, 128, 16, 0, 0 },
        { "MHA 4/4 heads, d64, 100 rows, page 5, sinks", 1, { 100 }, { 100 }, 4, 4, 64, 5, 0, 1 },
        { "GPT-OSS 64/8 heads d64, 777 rows, window 128, sinks", 1, { 777 }, { 777 }, 64, 8, 64, 16, 128, 1 },
        { "GPT-OSS 64/8 heads d64, 3 seqs (517 of 517, 129 of 1000, 5 of 63), sinks", 3, { 517, 129, 5 },
          { 517, 1000, 63 }, 64, 8, 64, 16, 0, 1 },
        { "32/4 heads d128, 333 rows, page 16, no sink", 1, { 333 }, { 333 }, 32, 4, 128, 16, 0, 0 },
        { "window 128 chunked 2 seqs (300 of 1200, 64 of 64), 16/2 d64, page 7, sinks", 2, { 300, 64 },
          { 1200, 64 }, 16, 2, 64, 7, 128, 1 },
        { "window 64, no sink, 16/2 heads d64, 400 rows", 1, { 400 }, { 400 }, 16, 2, 64, 16, 64, 0 },
        { "d128 window 100, sinks, 8/1 heads, 2 seqs (250 of 250, 31 of 400)", 2, { 250, 31 }, { 250, 400 }, 8,
          1, 128, 16, 100, 1 },
    };
    for (size_t i = 0; i < sizeof bf16_cases / sizeof bf16_cases[0]; i++)
        test_attention(&t, &bf16_cases[i], 1);
    {
        /* The precision switch: CPU refuses bf16, CUDA reports what it has. */
        int cpu_rc = kn_backend_set_attn_bf16(&t.cpu, 1);
        int gpu_rc = kn_backend_set_attn_bf16(&t.gpu, 1);
        int on = kn_backend_attn_bf16(&t.gpu);
        kn_backend_set_attn_bf16(&t.gpu, 0);
        tap(&t, cpu_rc == TN_ERR_UNSUPPORTED && gpu_rc == TN_OK && on == 1 && kn_backend_attn_bf16(&t.gpu) == 0 &&
                    kn_backend_attn_bf16(&t.cpu) == 0,
            "attention precision switch: cpu refuses bf16 (%d), cuda sets and clears it", cpu_rc);
    }

    test_moe_route(&t, 50, 32, 4, KN_ROUTE_TOPK_SOFTMAX, 0);
    test_moe_route(&t, 77, 128, 8, KN_ROUTE_SOFTMAX_TOPK, 1);
    test_moe_route(&t, 33, 128, 8, KN_ROUTE_SOFTMAX_TOPK, 0);
    test_moe_route(&t, 9, 60, 6, KN_ROUTE_TOPK_SOFTMAX, 0);

    test_moe_experts(&t, 40, 4, 8, 8, 0, 64, 96, KN_ACT_SWIGLU_OAI, 1);
    test_moe_experts(&t, 61, 8, 32, 8, 8, 96, 40, KN_ACT_SWIGLU, 0);
    test_moe_experts(&t, 200, 4, 32, 32, 0, 288, 192, KN_ACT_SWIGLU_OAI, 1);
    test_moe_experts(&t, 3, 2, 16, 4, 12, 33, 17, KN_ACT_SWIGLU_OAI, 1);

    test_matmul_bf16(&t, 1, 2880, 2880, 1);
    test_matmul_bf16(&t, 37, 129, 72, 0);
    test_matmul_bf16(&t, 300, 512, 2880, 1);
    test_moe_experts_bf16(&t, 40, 4, 8, 64, 96, KN_ACT_SWIGLU_OAI);
    test_moe_experts_bf16(&t, 200, 4, 32, 288, 192, KN_ACT_SWIGLU_OAI);
    test_moe_experts_bf16(&t, 61, 8, 16, 128, 48, KN_ACT_SWIGLU);
    {
        /* row counts through one backend: odd 1..299, then the bucket edges */
        int odd[150], edges[] = { 16, 17, 31, 32, 33, 1023, 1024, 1025, 15, 1, 2, 3, 4, 5, 63, 64, 65 };
        for (int i = 0; i < 150; i++)
            odd[i] = 2 * i + 1;
        test_matmul_bf16_rows(&t, "odd m", odd, 150, 96, 80, 1, 1);
        test_matmul_bf16_rows(&t, "odd m again (warm plans)", odd, 150, 96, 80, 0, 1);
        test_matmul_bf16_rows(&t, "bucket edges", edges, (int)(sizeof edges / sizeof edges[0]), 200, 576, 1, 1);
        test_matmul_bf16_rows(&t, "bucket edges", edges, (int)(sizeof edges / sizeof edges[0]), 200, 576, 1, 0);
        test_matmul_bf16_rows(&t, "odd n/k", odd, 40, 129, 72, 0, 1);
    }
    test_moe_experts_bf16_rows(&t);
    test_moe_paths(&t);
    /* FP8: GPT-OSS's k = 2880 (not a multiple of 128), n not a multiple of
     * 128, rows 1..300 (cuBLASLt needs 16-row multiples: padded inside) */
    test_matmul_fp8(&t, 1, 2880, 2880, 1);
    test_matmul_fp8(&t, 7, 200, 2880, 1);
    test_matmul_fp8(&t, 33, 5760, 2880, 0);
    test_matmul_fp8(&t, 300, 512, 2880, 1);
    test_matmul_fp8(&t, 130, 640, 4096, 1);
    test_matmul_fp8(&t, 17, 1000, 300, 0);
    test_moe_experts_fp8(&t, 1, 4, 32, 2880, 2880, KN_ACT_SWIGLU_OAI);
    test_moe_experts_fp8(&t, 200, 4, 32, 288, 192, KN_ACT_SWIGLU_OAI);
    test_moe_experts_fp8(&t, 61, 8, 16, 256, 768, KN_ACT_SWIGLU);
    test_moe_paths_fp8(&t, 0);
    test_fill(&t, 1, 3, -1.f, 1.f);
    test_fill(&t, 1000003, 12345, -0.05f, 0.05f);
    test_fill(&t, 4096, 0, 0.9f, 1.1f);
    test_stopwatch(&t);

    test_sampling(&t, 16, 1000, 20);
    test_sampling(&t, 8, 201088, 3);

finish:
    kn_backend_free(&t.gpu);
    kn_backend_free(&t.cpu);
    printf("1..%d\n", t.n_checks);
    printf("# %d checks, %d failed\n", t.n_checks, t.n_failed);
    return t.n_failed ? 1 : 0;
}
