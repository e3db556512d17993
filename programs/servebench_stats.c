#include "programs/servebench_stats.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "common/status.h"

double svb_percentile(const double *v, size_t n, double p)
{
    double h = (double)(n - 1) * p / 100.0;
    size_t lo = (size_t)floor(h);
    if (lo + 1 >= n)
        return v[n - 1];
    return v[lo] + (h - (double)lo) * (v[lo + 1] - v[lo]);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void dist_of(double *v, size_t n, svb_dist *d)
{
    memset(d, 0, sizeof *d);
    if (n == 0)
        return;
    qsort(v, n, sizeof *v, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    d->n = n;
    d->mean = sum / (double)n;
    d->p50 = svb_percentile(v, n, 50);
    d->p90 = svb_percentile(v, n, 90);
    d->p99 = svb_percentile(v, n, 99);
    d->max = v[n - 1];
}

int svb_input_tokens(const svb_record *r)
{
    return r->prompt_tokens >= 0 ? r->prompt_tokens : r->input_len;
}

int svb_output_tokens(const svb_record *r)
{
    return r->usage_tokens >= 0 ? r->usage_tokens : r->id_tokens;
}

/* Does a completed request meet every SLO that is set? */
static int meets(const svb_record *r, const svb_slo *s)
{
    double e2e = r->t_end - r->t_send;
    if (s->e2e_s > 0 && e2e > s->e2e_s)
        return 0;
    if (r->n_chunks == 0)
        return !(s->ttft_s > 0 || s->tpot_s > 0 || s->itl_s > 0);
    double ttft = r->chunk_t[0] - r->t_send;
    if (s->ttft_s > 0 && ttft > s->ttft_s)
        return 0;
    int out = svb_output_tokens(r);
    /* one output token: no TPOT, which meets any limit (as vLLM counts it) */
    if (s->tpot_s > 0 && out > 1 && (e2e - ttft) / (double)(out - 1) > s->tpot_s)
        return 0;
    if (s->itl_s > 0)
        for (int k = 1; k < r->n_chunks; k++)
            if (r->chunk_t[k] - r->chunk_t[k - 1] > s->itl_s)
                return 0;
    return 1;
}

static double per_million(double usd_per_hour, double tok_per_s)
{
    return tok_per_s > 0 ? usd_per_hour / (tok_per_s * 3600.0) * 1e6 : 0;
}

int svb_summarize(const svb_record *recs, int n, double duration_s, const svb_slo *slo, int gpus,
                  double usd_per_gpu_hour, svb_summary *s, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->requests = n;
    s->duration_s = duration_s;
    s->gpus = gpus;
    s->usd_per_gpu_hour = usd_per_gpu_hour;
    size_t n_itl = 0;
    for (int i = 0; i < n; i++)
        if (recs[i].n_chunks > 1)
            n_itl += (size_t)recs[i].n_chunks - 1;
    double *ttft = malloc(((size_t)n + 1) * sizeof *ttft);
    double *tpot = malloc(((size_t)n + 1) * sizeof *tpot);
    double *e2e = malloc(((size_t)n + 1) * sizeof *e2e);
    double *itl = malloc((n_itl + 1) * sizeof *itl);
    double *ttft_s = malloc(((size_t)n + 1) * sizeof *ttft_s);
    double *itl_s = malloc((n_itl + 1) * sizeof *itl_s);
    if (!ttft || !tpot || !e2e || !itl || !ttft_s || !itl_s) {
        free(ttft);
        free(tpot);
        free(e2e);
        free(itl);
        free(ttft_s);
        free(itl_s);
        return tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory for the statistics");
    }
    size_t nt = 0, np = 0, ne = 0, ni = 0, nts = 0, nis = 0;
    for (int i = 0; i < n; i++) {
        const svb_record *r = &recs[i];
        s->counts[r->outcome]++;
        if (r->outcome == SVB_OK || r->outcome == SVB_ABORTED) {
            if (r->n_chunks > 0)
                ttft_s[nts++] = r->chunk_t[0] - r->t_send;
            for (int k = 1; k < r->n_chunks; k++)
                itl_s[nis++] = r->chunk_t[k] - r->chunk_t[k - 1];
            s->streamed_tokens += r->outcome == SVB_OK ? svb_output_tokens(r) : r->id_tokens;
        }
        if (r->outcome != SVB_OK)
            continue;
        int out = svb_output_tokens(r);
        s->input_tokens += svb_input_tokens(r);
        s->output_tokens += out;
        double e = r->t_end - r->t_send;
        e2e[ne++] = e;
        if (r->n_chunks > 0) {
            double t = r->chunk_t[0] - r->t_send;
            ttft[nt++] = t;
            if (out > 1)
                tpot[np++] = (e - t) / (double)(out - 1);
        }
        for (int k = 1; k < r->n_chunks; k++)
            itl[ni++] = r->chunk_t[k] - r->chunk_t[k - 1];
        if (meets(r, slo))
            s->good++;
    }
    dist_of(ttft, nt, &s->ttft);
    dist_of(tpot, np, &s->tpot);
    dist_of(e2e, ne, &s->e2e);
    dist_of(itl, ni, &s->itl);
    dist_of(ttft_s, nts, &s->ttft_streamed);
    dist_of(itl_s, nis, &s->itl_streamed);
    free(ttft_s);
    free(itl_s);
    free(ttft);
    free(tpot);
    free(e2e);
    free(itl);
    if (duration_s > 0) {
        s->req_per_s = s->counts[SVB_OK] / duration_s;
        s->goodput_req_per_s = s->good / duration_s;
        s->input_tok_per_s = (double)s->input_tokens / duration_s;
        s->output_tok_per_s = (double)s->output_tokens / duration_s;
        s->total_tok_per_s = s->input_tok_per_s + s->output_tok_per_s;
        s->streamed_tok_per_s = (double)s->streamed_tokens / duration_s;
    }
    s->output_tok_per_s_per_gpu = s->output_tok_per_s / gpus;
    s->total_tok_per_s_per_gpu = s->total_tok_per_s / gpus;
    double usd_per_hour = gpus * usd_per_gpu_hour;
    s->usd_per_m_input = per_million(usd_per_hour, s->input_tok_per_s);
    s->usd_per_m_output = per_million(usd_per_hour, s->output_tok_per_s);
    s->usd_per_m_total = per_million(usd_per_hour, s->total_tok_per_s);
    return TN_OK;
}
