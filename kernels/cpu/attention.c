/* GQA attention over the paged HND KV cache on the CPU.
 *
 * One task per (row, query head), spread over OpenMP threads. Each task makes
 * two passes over its visible keys: scores first (kept in the thread's
 * scratch), then the softmax weights applied to V. The max includes the sink
 * logit, so exp never overflows, and the sink adds to the denominator only:
 * that is GPT-OSS's "attend to nothing" column.
 *
 * bf16 pools are read as they are: each element is widened to fp32 (a
 * 16-bit shift, exact) inside the dot product and the V update, so the
 * arithmetic is the fp32 path's on the bf16 values and no fp32 copy of the
 * cache is made. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
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

/* q . row over head_dim elements of a pool of dtype dt at element off. */
static inline float dot_row(const float *q, const void *pool, kn_dtype dt, size_t off,
                            int head_dim)
{
    float dot = 0.0f;
    if (dt == KN_BF16) {
        const uint16_t *r = (const uint16_t *)pool + off;
        for (int d = 0; d < head_dim; d++)
            dot += q[d] * bf16_at(r, d);
    } else {
        const float *r = (const float *)pool + off;
        for (int d = 0; d < head_dim; d++)
            dot += q[d] * r[d];
    }
    return dot;
}

/* acc += p * row, the row as dot_row reads it. */
static inline void axpy_row(float *acc, float p, const void *pool, kn_dtype dt, size_t off,
                            int head_dim)
{
    if (dt == KN_BF16) {
        const uint16_t *r = (const uint16_t *)pool + off;
        for (int d = 0; d < head_dim; d++)
            acc[d] += p * bf16_at(r, d);
    } else {
        const float *r = (const float *)pool + off;
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
    int rc = kn_cpu_check_seq_batch(op, b, page_size);
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

    size_t head_stride = (size_t)page_size * head_dim;
    size_t page_stride = (size_t)n_kv_heads * head_stride;
    long n_tasks = (long)b->n_rows * n_heads;

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
        size_t kv_head_off = (size_t)(h / group) * head_stride;
        const float *qh = q + ((size_t)r * n_heads + h) * head_dim;

        float max_logit = sinks ? sinks[h] : -INFINITY;
        for (int j = 0; j < n_keys; j++) {
            int t = first + j;
            size_t kj = (size_t)pages[t / page_size] * page_stride + kv_head_off +
                        (size_t)(t % page_size) * head_dim;
            scores[j] = dot_row(qh, pools->k, pools->dtype, kj, head_dim) * scale;
            if (scores[j] > max_logit)
                max_logit = scores[j];
        }

        for (int d = 0; d < head_dim; d++)
            acc[d] = 0.0f;
        double denom = sinks ? exp((double)sinks[h] - max_logit) : 0.0;
        for (int j = 0; j < n_keys; j++) {
            int t = first + j;
            size_t vj = (size_t)pages[t / page_size] * page_stride + kv_head_off +
                        (size_t)(t % page_size) * head_dim;
            float p = expf(scores[j] - max_logit);
            denom += p;
            axpy_row(acc, p, pools->v, pools->dtype, vj, head_dim);
        }
        float inv_denom = (float)(1.0 / denom);
        float *oh = out + ((size_t)r * n_heads + h) * head_dim;
        for (int d = 0; d < head_dim; d++)
            oh[d] = acc[d] * inv_denom;
    }
    free(scratch);
    return TN_OK;
}
