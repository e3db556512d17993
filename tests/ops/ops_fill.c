/* kn_fill_uniform: element i is kn_fill_value(seed, i) (the definition both
 * backends implement, so CUDA writes the CPU's bits), in [lo, hi); bf16 and
 * fp8 are the roundings of that value; a slice made alone with
 * kn_fill_uniform_at equals the same elements of the whole; the same seed
 * repeats, seeds decorrelate, the moments are a uniform's; bad arguments
 * are refused. Also kn_stopwatch (CPU: laps over spins; CUDA: laps over
 * real work) and kn_backend_trim. */
#include <math.h>
#include <string.h>
#include <time.h>
#include "common/status.h"
#include "kernels/dtype.h"
#include "kernels/fill.h"
#include "kernels/stopwatch.h"
#include "tests/ops/op_harness.h"

typedef struct fill_param {
    size_t n;
    uint64_t seed;
    float lo, hi;
} fill_param;

static void fill_case(op_env *e, const void *param)
{
    const fill_param *p = param;
    size_t n = p->n;
    float *d = op_nan(e, n);
    if (op_ok(e, kn_fill_uniform(e->be, d, KN_F32, n, p->seed, p->lo, p->hi), "kn_fill_uniform f32")) {
        float *got = op_get(e, d, n);
        size_t bad = 0, out = 0;
        for (size_t i = 0; i < n; i++) {
            bad += !(got[i] == kn_fill_value(p->seed, i, p->lo, p->hi));
            out += !(got[i] >= p->lo && (got[i] < p->hi || p->lo == p->hi));
        }
        op_check(e, bad == 0 && out == 0, "f32: %zu elements differ from kn_fill_value, %zu out of range",
                 bad, out);
    }
    uint16_t *h = op_host(e, n * sizeof(uint16_t));
    if (op_ok(e, kn_fill_uniform(e->be, d, KN_BF16, n, p->seed, p->lo, p->hi), "kn_fill_uniform bf16")) {
        op_down(e, h, d, n * sizeof(uint16_t));
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += h[i] != kn_f32_to_bf16(kn_fill_value(p->seed, i, p->lo, p->hi));
        op_check(e, bad == 0, "bf16: %zu elements are not the rounded value", bad);
    }
    /* fp8 e4m3 codes (synthetic FP8 weights: the whole e4m3 range) */
    uint8_t *q = op_host(e, n);
    const float ranges[2][2] = { { p->lo, p->hi }, { -448.f, 448.f } };
    for (int r = 0; r < 2; r++) {
        float lo = ranges[r][0], hi = ranges[r][1];
        if (!op_ok(e, kn_fill_uniform(e->be, d, KN_FP8_E4M3, n, p->seed, lo, hi), "kn_fill_uniform fp8"))
            continue;
        op_down(e, q, d, n);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += q[i] != kn_f32_to_e4m3(kn_fill_value(p->seed, i, lo, hi));
        op_check(e, bad == 0, "fp8 [%g, %g): %zu codes are not the rounded value", lo, hi, bad);
    }
    /* a slice of the stream, as synthetic shards use */
    size_t first = (size_t)p->seed * 7919 + 3;
    if (op_ok(e, kn_fill_uniform_at(e->be, d, KN_F32, n, p->seed, first, p->lo, p->hi), "kn_fill_uniform_at")) {
        float *got = op_get(e, d, n);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += !(got[i] == kn_fill_value(p->seed, first + i, p->lo, p->hi));
        op_check(e, bad == 0, "fill_uniform_at first=%zu: %zu elements differ", first, bad);
    }
}

/* The statistics of one long stream, slices, and the argument checks. */
static void fill_stream(op_env *e, const void *param)
{
    (void)param;
    const kn_backend *be = e->be;
    const size_t n = 200003;
    float *d_a = op_dev(e, n * sizeof(float)), *d_b = op_dev(e, n * sizeof(float));
    OP_INT_EQ(e, kn_fill_uniform(be, d_a, KN_F32, n, 42, -0.5f, 1.5f), TN_OK);
    OP_INT_EQ(e, kn_fill_uniform(be, d_b, KN_F32, n, 42, -0.5f, 1.5f), TN_OK);
    float *a = op_get(e, d_a, n), *c;
    OP_MEM_EQ(e, a, op_get(e, d_b, n), n * sizeof *a);
    double sum = 0, sq = 0;
    for (size_t i = 0; i < n; i++) {
        sum += a[i];
        sq += (double)a[i] * a[i];
    }
    double mean = sum / n, var = sq / n - mean * mean;
    OP_TRUE(e, fabs(mean - 0.5) < 0.01);          /* uniform [-0.5, 1.5): mean 0.5 */
    OP_TRUE(e, fabs(var - 4.0 / 12.0) < 0.01);    /* variance (hi - lo)^2 / 12 */
    /* element i never depends on element i - 1 */
    OP_TRUE(e, a[1000] == kn_fill_value(42, 1000, -0.5f, 1.5f));
    /* another seed: uncorrelated */
    OP_INT_EQ(e, kn_fill_uniform(be, d_b, KN_F32, n, 43, -0.5f, 1.5f), TN_OK);
    c = op_get(e, d_b, n);
    double cov = 0;
    for (size_t i = 0; i < n; i++)
        cov += (a[i] - 0.5) * (c[i] - 0.5);
    OP_TRUE(e, fabs(cov / n) < 0.01);
    /* slices made alone equal the same elements of the whole, f32 and bf16 */
    OP_INT_EQ(e, kn_fill_uniform_at(be, d_b, KN_F32, 5000, 42, 123457, -0.5f, 1.5f), TN_OK);
    OP_MEM_EQ(e, op_get(e, d_b, 5000), a + 123457, 5000 * sizeof *a);
    uint16_t hpart[777];
    OP_INT_EQ(e, kn_fill_uniform_at(be, d_b, KN_BF16, 777, 42, 99, -0.5f, 1.5f), TN_OK);
    op_down(e, hpart, d_b, sizeof hpart);
    for (size_t i = 0; i < 777; i++)
        if (hpart[i] != kn_f32_to_bf16(a[99 + i])) {
            op_fail(e, "bf16 slice element %zu", i);
            break;
        }
    /* lo == hi gives a constant; bad arguments are refused */
    OP_INT_EQ(e, kn_fill_uniform(be, d_a, KN_F32, 10, 1, 2.0f, 2.0f), TN_OK);
    a = op_get(e, d_a, 10);
    OP_TRUE(e, a[0] == 2.0f && a[9] == 2.0f);
    OP_INT_EQ(e, kn_fill_uniform(be, d_a, KN_F32, 10, 1, 1.0f, 0.0f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_fill_uniform(be, d_a, KN_F32, 10, 1, NAN, 1.0f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_fill_uniform(be, d_a, KN_F32, 10, 1, 0.0f, INFINITY), TN_ERR_ARG);
    OP_INT_EQ(e, kn_fill_uniform(be, d_a, (kn_dtype)3, 10, 1, 0.0f, 1.0f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_fill_uniform(be, NULL, KN_F32, 10, 1, 0.0f, 1.0f), TN_ERR_ARG);
    OP_INT_EQ(e, kn_fill_uniform(be, NULL, KN_F32, 0, 1, 0.0f, 1.0f), TN_OK);
    OP_INT_EQ(e, kn_fill_uniform(NULL, d_a, KN_F32, 10, 1, 0.0f, 1.0f), TN_ERR_ARG);
}

static void spin(double ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do
        clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1e3 + (t.tv_nsec - t0.tv_nsec) * 1e-6 < ms);
}

/* CPU: laps charge the time since the previous lap to their group; collects
 * add up. Only what the clock guarantees is asserted (a stretch that spun
 * 2 ms lasted at least that), never durations against a threshold. */
static void stopwatch_cpu(op_env *e, const void *param)
{
    (void)param;
    kn_stopwatch *sw = NULL;
    OP_INT_EQ(e, kn_stopwatch_create(e->be, 3, 4, &sw), TN_OK);
    if (!sw)
        return;
    double ms[3] = { 0 };
    OP_INT_EQ(e, kn_stopwatch_lap(sw, 0), TN_ERR_ARG);          /* before start */
    OP_INT_EQ(e, kn_stopwatch_start(sw), TN_OK);
    spin(2);
    OP_INT_EQ(e, kn_stopwatch_lap(sw, 2), TN_OK);
    OP_INT_EQ(e, kn_stopwatch_lap(sw, 0), TN_OK);               /* ~nothing */
    spin(2);
    OP_INT_EQ(e, kn_stopwatch_lap(sw, 2), TN_OK);
    OP_INT_EQ(e, kn_stopwatch_lap(sw, 3), TN_ERR_ARG);          /* no group 3 */
    OP_INT_EQ(e, kn_stopwatch_lap(sw, -1), TN_ERR_ARG);
    OP_INT_EQ(e, kn_stopwatch_lap(sw, 1), TN_OK);               /* 4th lap */
    OP_INT_EQ(e, kn_stopwatch_lap(sw, 1), TN_ERR_ARG);          /* past max_laps */
    OP_INT_EQ(e, kn_stopwatch_collect(sw, ms), TN_OK);
    OP_TRUE(e, ms[2] >= 4.0);                                   /* two 2 ms spins */
    OP_TRUE(e, ms[0] >= 0 && ms[1] >= 0);
    double before = ms[2];
    OP_INT_EQ(e, kn_stopwatch_collect(sw, ms), TN_OK);          /* nothing new */
    OP_TRUE(e, ms[2] == before);
    OP_INT_EQ(e, kn_stopwatch_lap(sw, 0), TN_ERR_ARG);          /* needs a new start */
    OP_INT_EQ(e, kn_stopwatch_collect(NULL, ms), TN_ERR_ARG);
    kn_stopwatch_free(sw);
    kn_stopwatch_free(NULL);
    sw = NULL;
    OP_INT_EQ(e, kn_stopwatch_create(e->be, 0, 4, &sw), TN_ERR_ARG);
    OP_TRUE(e, sw == NULL);
    OP_INT_EQ(e, kn_backend_trim(e->be), TN_OK);
    OP_INT_EQ(e, kn_backend_trim(NULL), TN_ERR_ARG);
}

/* CUDA: laps over real work on the stream are positive and each lands in
 * its group. */
static void stopwatch_cuda(op_env *e, const void *param)
{
    (void)param;
    kn_stopwatch *sw = NULL;
    size_t n = (size_t)64 << 20;
    float *d = op_dev(e, n * sizeof(float));
    double ms[2] = { 0, 0 };
    int rc = kn_stopwatch_create(e->be, 2, 8, &sw);
    if (rc == TN_OK)
        rc = kn_stopwatch_start(sw);
    for (int i = 0; i < 3 && rc == TN_OK; i++) {
        rc = kn_fill_uniform(e->be, d, KN_F32, n, (uint64_t)i, 0.f, 1.f);
        if (rc == TN_OK)
            rc = kn_stopwatch_lap(sw, i == 0 ? 0 : 1);
    }
    if (rc == TN_OK)
        rc = kn_stopwatch_collect(sw, ms);
    op_check(e, rc == TN_OK && ms[0] > 0 && ms[1] > 0, "stopwatch: 1 fill %.3f ms, 2 fills %.3f ms (%s)",
             ms[0], ms[1], tn_status_str(rc));
    kn_stopwatch_free(sw);
    OP_INT_EQ(e, kn_backend_trim(e->be), TN_OK);
}

void ops_register_fill(void)
{
    static const fill_param cases[] = { { 1, 3, -1.f, 1.f }, { 1000003, 12345, -0.05f, 0.05f },
                                        { 4096, 0, 0.9f, 1.1f }, { 200003, 42, -0.5f, 1.5f } };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        OP_CASE("fill", OP_ALL, fill_case, cases[i], "n=%zu seed=%llu [%g, %g)", cases[i].n,
                (unsigned long long)cases[i].seed, (double)cases[i].lo, (double)cases[i].hi);
    OP_CASE("fill", OP_ALL, fill_stream, cases[0], "stream statistics, slices, bad arguments");
    OP_CASE("stopwatch", OP_CPU, stopwatch_cpu, cases[0], "groups laps");
    OP_CASE("stopwatch", OP_CUDA, stopwatch_cuda, cases[0], "laps over fills");
}
