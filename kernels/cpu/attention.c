/* GQA attention over the paged HND KV cache on the CPU.
 *
 * One task per (row, query head), spread over OpenMP threads. Each task makes
 * two passes over its visible keys: scores first (kept in the thread's
 * scratch), then the softmax weights applied to V. The max includes the sink
 * logit, so exp never overflows, and the sink adds to the denominator only:
 * that is GPT-OSS's "attend to nothing" column.
 *
 * bf16 and FP8 pools are read as they are: each element is widened to
 * fp32 inside the dot product and the V update (bf16: a 16-bit shift,
 * exact; FP8: the code's value from a 256-entry table, times the row's
 * scale, which multiplies the row's dot product or weight once), so no
 * fp32 copy of the cache is made. */
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/cpu_ops.h"
#include "kernels/attention.h"
#include "kernels/cpu/seq_batch.h"
#include "kernels/dtype.h"
#include "kernels/kn_check.h"
#include "common/status.h"

static inline float bf16_at(const uint16_t *p, int d)
{
    return kn_bf16_to_f32(p[d]);
}

/* An FP8 row's scale, stored after its head_dim codes. */
static inline float fp8_scale(const uint8_t *row, int head_dim)
{
    float s;
    memcpy(&s, row + head_dim, sizeof s);
    return s;
}

/* q . row over head_dim elements of the row at byte offset off of a pool
 * of dtype dt (e4m3: the table of code values). */
static inline float dot_row(const float *q, const void *pool, kn_dtype dt, size_t off,
                            int head_dim, const float *e4m3)
{
    float dot = 0.0f;
    const char *row = (const char *)pool + off;
    if (dt == KN_BF16) {
        const uint16_t *r = (const uint16_t *)row;
        for (int d = 0; d < head_dim; d++)
            dot += q[d] * bf16_at(r, d);
    } else if (dt == KN_FP8_E4M3) {
        const uint8_t *r = (const uint8_t *)row;
        for (int d = 0; d < head_dim; d++)
            dot += q[d] * e4m3[r[d]];
        dot *= fp8_scale(r, head_dim);
    } else {
        const float *r = (const float *)row;
        for (int d = 0; d < head_dim; d++)
            dot += q[d] * r[d];
    }
    return dot;
}

/* acc += p * row, the row as dot_row reads it. */
static inline void axpy_row(float *acc, float p, const void *pool, kn_dtype dt, size_t off,
                            int head_dim, const float *e4m3)
{
    const char *row = (const char *)pool + off;
    if (dt == KN_BF16) {
        const uint16_t *r = (const uint16_t *)row;
        for (int d = 0; d < head_dim; d++)
            acc[d] += p * bf16_at(r, d);
    } else if (dt == KN_FP8_E4M3) {
        const uint8_t *r = (const uint8_t *)row;
        const float ps = p * fp8_scale(r, head_dim);
        for (int d = 0; d < head_dim; d++)
            acc[d] += ps * e4m3[r[d]];
    } else {
        const float *r = (const float *)row;
        for (int d = 0; d < head_dim; d++)
            acc[d] += p * r[d];
    }
}

int kn_attention_cpu(float *out, const float *q, const kn_kv_pools *pools,
                     const kn_seq_batch *b, int n_heads,
                     int n_kv_heads, int head_dim, int page_size, float scale,
                     const float *sinks, int window)
{
    static const char op[] = "kn_attention";
    int rc = kn_cpu_check_seq_batch(op, b, page_size, window > 0 ? window - 1 : INT_MAX);
    if (rc != TN_OK)
        return rc;
    if (b->n_rows == 0)
        return TN_OK;

    int group = n_heads / n_kv_heads;
    size_t max_keys = (size_t)b->max_kv_len;
    if (window > 0 && (size_t)window < max_keys)
        max_keys = (size_t)window;
    size_t per_thread = max_keys + (size_t)head_dim;
    int n_threads = omp_get_max_threads();
    float *scratch = malloc((size_t)n_threads * per_thread * sizeof(float));
    if (!scratch)
        return TN_ERR_NOMEM;

    /* byte offsets: row (page, kv head, slot) starts at row * row_bytes */
    const size_t row_bytes = kn_kv_row_bytes(pools->dtype, head_dim);
    long n_tasks = (long)b->n_rows * n_heads;
    float e4m3[256];
    for (int c = 0; pools->dtype == KN_FP8_E4M3 && c < 256; c++)
        e4m3[c] = kn_e4m3_to_f32((uint8_t)c);

    /* Threads pay off only when there is enough work per step: a decode
     * step of a few sequences is faster on one thread than waiting for a
     * descheduled one (seen on a loaded 2-core machine). */
    size_t work = (size_t)n_tasks * max_keys * (size_t)head_dim;
    #pragma omp parallel for num_threads(n_threads) schedule(dynamic, 4) if (work > 262144)
    for (long task = 0; task < n_tasks; task++) {
        float *scores = scratch + (size_t)omp_get_thread_num() * per_thread;
        float *acc = scores + max_keys;
        int r = (int)(task / n_heads), h = (int)(task % n_heads);
        int s = kn_cpu_seq_of_row(b, r);
        int pos = kn_cpu_row_position(b, s, r);
        int first = (window > 0 && pos - window + 1 > 0) ? pos - window + 1 : 0;
        int n_keys = pos - first + 1;
        const int32_t *pages = b->page_table + (size_t)s * b->max_pages;
        const size_t kvh = (size_t)(h / group);
        const float *qh = q + ((size_t)r * n_heads + h) * head_dim;

        float max_logit = sinks ? sinks[h] : -INFINITY;
        for (int j = 0; j < n_keys; j++) {
            int t = first + j;
            size_t row = ((size_t)pages[t / page_size] * n_kv_heads + kvh) * page_size +
                         (size_t)(t % page_size);
            scores[j] = dot_row(qh, pools->k, pools->dtype, row * row_bytes, head_dim, e4m3) *
                        scale;
            if (scores[j] > max_logit)
                max_logit = scores[j];
        }

        for (int d = 0; d < head_dim; d++)
            acc[d] = 0.0f;
        double denom = sinks ? exp((double)sinks[h] - max_logit) : 0.0;
        for (int j = 0; j < n_keys; j++) {
            int t = first + j;
            size_t row = ((size_t)pages[t / page_size] * n_kv_heads + kvh) * page_size +
                         (size_t)(t % page_size);
            float p = expf(scores[j] - max_logit);
            denom += p;
            axpy_row(acc, p, pools->v, pools->dtype, row * row_bytes, head_dim, e4m3);
        }
        float inv_denom = (float)(1.0 / denom);
        float *oh = out + ((size_t)r * n_heads + h) * head_dim;
        for (int d = 0; d < head_dim; d++)
            oh[d] = acc[d] * inv_denom;
    }
    free(scratch);
    return TN_OK;
}
