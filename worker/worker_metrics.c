#include "worker/worker_metrics.h"

#include <stdio.h>
#include <string.h>

/* Buckets exactly as docs/METRICS.md gives them. */
static const double PREFILL_DURATION_BOUNDS[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const double STEP_BATCH_BOUNDS[] = {1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256};
static const double STEP_DURATION_BOUNDS[] = {0.002, 0.005, 0.01, 0.015, 0.02,
                                              0.03,  0.05,  0.075, 0.1, 0.25};
static const double TRANSFER_BOUNDS[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                         0.05,   0.1,   0.25,   0.5,   1};
#define N_OF(a) ((int)(sizeof(a) / sizeof *(a)))

void worker_metrics_init(worker_metrics *m, wm_pool pool)
{
    memset(m, 0, sizeof *m);
    m->pool = pool;
    histogram_init(&m->prefill_duration, PREFILL_DURATION_BOUNDS, N_OF(PREFILL_DURATION_BOUNDS));
    histogram_init(&m->decode_step_batch, STEP_BATCH_BOUNDS, N_OF(STEP_BATCH_BOUNDS));
    histogram_init(&m->decode_step_duration, STEP_DURATION_BOUNDS, N_OF(STEP_DURATION_BOUNDS));
    histogram_init(&m->kv_transfer_duration, TRANSFER_BOUNDS, N_OF(TRANSFER_BOUNDS));
}

/* ------------------------------------------------------------ rendering */

enum { ONLY_PREFILL, ONLY_DECODE, BOTH, SENDERS };

typedef enum {
    F_PREFILL_TOKENS, F_PREFILL_BUSY, F_PREFILL_REQUESTS, F_PREFILL_QUEUE, F_PREFILL_DURATION,
    F_DECODE_BATCH, F_DECODE_WAITING, F_STEP_BATCH, F_STEP_DURATION, F_DECODE_TOKENS,
    F_DECODE_REQUESTS, F_DECODE_PREEMPTIONS, F_KV_USED, F_KV_TOTAL, F_KV_OCCUPANCY, F_DRAINING, F_XFER_BYTES,
    F_XFERS, F_XFER_DURATION,
} family_id;

typedef struct family {
    family_id id;
    const char *name, *type;
    int who;
    const char *help;
} family;

static const family FAMILIES[] = {
    {F_PREFILL_TOKENS, "tandem_prefill_input_tokens_total", "counter", ONLY_PREFILL,
     "Prompt tokens prefilled (served)."},
    {F_PREFILL_BUSY, "tandem_prefill_busy_seconds_total", "counter", ONLY_PREFILL,
     "Seconds spent computing prefills."},
    {F_PREFILL_REQUESTS, "tandem_prefill_requests_total", "counter", ONLY_PREFILL,
     "Prefills finished, by outcome."},
    {F_PREFILL_QUEUE, "tandem_prefill_queue_depth", "gauge", ONLY_PREFILL,
     "Requests queued at this prefiller (the one computing included)."},
    {F_PREFILL_DURATION, "tandem_prefill_duration_seconds", "histogram", ONLY_PREFILL,
     "Compute time of one prefill."},
    {F_DECODE_BATCH, "tandem_decode_batch_size", "gauge", ONLY_DECODE,
     "Running sequences now."},
    {F_DECODE_WAITING, "tandem_decode_waiting_sequences", "gauge", ONLY_DECODE,
     "Requests waiting for KV room (admission) at this decoder."},
    {F_STEP_BATCH, "tandem_decode_step_batch_size", "histogram", ONLY_DECODE,
     "Batch size of each decode step."},
    {F_STEP_DURATION, "tandem_decode_step_duration_seconds", "histogram", ONLY_DECODE,
     "Wall time of one decode step (each running sequence's inter-token latency at the decoder)."},
    {F_DECODE_TOKENS, "tandem_decode_output_tokens_total", "counter", ONLY_DECODE,
     "Tokens generated."},
    {F_DECODE_REQUESTS, "tandem_decode_requests_total", "counter", ONLY_DECODE,
     "Sequences finished, by outcome."},
    {F_DECODE_PREEMPTIONS, "tandem_decode_preemptions_total", "counter", ONLY_DECODE,
     "Running sequences preempted (pages taken when the KV pool ran dry; the router "
     "places them again)."},
    {F_KV_USED, "tandem_kv_cache_blocks_used", "gauge", ONLY_DECODE,
     "KV cache pages in use by admitted requests."},
    {F_KV_TOTAL, "tandem_kv_cache_blocks_capacity", "gauge", ONLY_DECODE,
     "KV cache pages allocated at start."},
    {F_KV_OCCUPANCY, "tandem_kv_cache_occupancy_ratio", "gauge", ONLY_DECODE,
     "Used over total KV cache pages."},
    {F_DRAINING, "tandem_worker_draining", "gauge", BOTH,
     "1 while the worker drains after SIGTERM (takes no new work)."},
    {F_XFER_BYTES, "tandem_kv_transfer_bytes_total", "counter", BOTH,
     "KV cache bytes moved prefiller -> decoder."},
    {F_XFERS, "tandem_kv_transfers_total", "counter", BOTH,
     "KV transfers finished, by outcome."},
    {F_XFER_DURATION, "tandem_kv_transfer_duration_seconds", "histogram", SENDERS,
     "One request's KV transfer, first byte posted to completion (sender side)."},
};

static int exports(const family *f, const worker_metrics *m)
{
    switch (f->who) {
    case ONLY_PREFILL:
    case SENDERS:
        return m->pool == WM_PREFILL;
    case ONLY_DECODE:
        return m->pool == WM_DECODE;
    default:
        return 1;
    }
}

static void labels_for(sbuf *l, const worker_metrics_view *v)
{
    sb_reset(l);
    sb_printf(l, "pool=\"%s\",worker=\"", v->m->pool == WM_PREFILL ? "prefill" : "decode");
    prom_label_value(l, v->worker_id);
    sb_puts(l, "\"");
    if (l->oom) /* keep the caller's string valid; the output buffer reports oom */
        sb_reset(l);
}

static void by_outcome(sbuf *b, const char *name, const char *labels, const uint64_t *v)
{
    for (int o = 0; o < OUTCOME_COUNT; o++) {
        char l[1024];
        snprintf(l, sizeof l, "%s,outcome=\"%s\"", labels, prom_outcome_name((metrics_outcome)o));
        prom_sample_u64(b, name, l, v[o]);
    }
}

static void emit(sbuf *b, const family *f, const char *labels, const worker_metrics *m)
{
    char l[1024];
    const char *dir = m->pool == WM_PREFILL ? "send" : "recv";
    double occ = m->kv_blocks_total ? (double)m->kv_blocks_used / m->kv_blocks_total : 0;
    switch (f->id) {
    case F_PREFILL_TOKENS: prom_sample_u64(b, f->name, labels, m->prefill_input_tokens); break;
    case F_PREFILL_BUSY: prom_sample(b, f->name, labels, m->prefill_busy_s); break;
    case F_PREFILL_REQUESTS: by_outcome(b, f->name, labels, m->prefill_requests); break;
    case F_PREFILL_QUEUE: prom_sample_u64(b, f->name, labels, m->prefill_queue_depth); break;
    case F_PREFILL_DURATION: prom_histogram(b, f->name, labels, &m->prefill_duration); break;
    case F_DECODE_BATCH: prom_sample_u64(b, f->name, labels, m->decode_batch_size); break;
    case F_DECODE_WAITING: prom_sample_u64(b, f->name, labels, m->decode_waiting); break;
    case F_STEP_BATCH: prom_histogram(b, f->name, labels, &m->decode_step_batch); break;
    case F_STEP_DURATION: prom_histogram(b, f->name, labels, &m->decode_step_duration); break;
    case F_DECODE_TOKENS: prom_sample_u64(b, f->name, labels, m->decode_output_tokens); break;
    case F_DECODE_REQUESTS: by_outcome(b, f->name, labels, m->decode_requests); break;
    case F_DECODE_PREEMPTIONS: prom_sample_u64(b, f->name, labels, m->decode_preemptions); break;
    case F_KV_USED: prom_sample_u64(b, f->name, labels, m->kv_blocks_used); break;
    case F_KV_TOTAL: prom_sample_u64(b, f->name, labels, m->kv_blocks_total); break;
    case F_KV_OCCUPANCY: prom_sample(b, f->name, labels, occ); break;
    case F_DRAINING: prom_sample(b, f->name, labels, m->draining ? 1 : 0); break;
    case F_XFER_BYTES:
        snprintf(l, sizeof l, "%s,direction=\"%s\"", labels, dir);
        prom_sample_u64(b, f->name, l, m->kv_transfer_bytes);
        break;
    case F_XFERS:
        snprintf(l, sizeof l, "%s,direction=\"%s\"", labels, dir);
        by_outcome(b, f->name, l, m->kv_transfers);
        break;
    case F_XFER_DURATION:
        snprintf(l, sizeof l, "%s,direction=\"%s\"", labels, dir);
        prom_histogram(b, f->name, l, &m->kv_transfer_duration);
        break;
    }
}

void worker_metrics_render(sbuf *b, const worker_metrics_view *views, int n, const char *process)
{
    sbuf l;
    sb_init(&l);
    for (size_t i = 0; i < sizeof FAMILIES / sizeof *FAMILIES; i++) {
        const family *f = &FAMILIES[i];
        int header = 0;
        for (int k = 0; k < n; k++) {
            if (!exports(f, views[k].m))
                continue;
            if (!header) {
                prom_family(b, f->name, f->type, f->help);
                header = 1;
            }
            labels_for(&l, &views[k]);
            emit(b, f, l.p ? l.p : "", views[k].m);
        }
    }
    sb_free(&l);
    if (process) {
        prom_family(b, "tandem_build_info", "gauge", "Always 1.");
        sb_printf(b, "tandem_build_info{process=\"%s\",version=\"0.1\"} 1\n", process);
    }
}

/* ------------------------------------------------------------ wire */

static void hist_to_wire(const histogram *h, Tandem__V1__HistogramData *out, uint64_t *buckets)
{
    tandem__v1__histogram_data__init(out);
    for (int i = 0; i <= h->n_bounds; i++)
        buckets[i] = h->counts[i];
    out->bucket_counts = buckets;
    out->n_bucket_counts = (size_t)h->n_bounds + 1;
    out->sum = h->sum;
}

Tandem__V1__WorkerMetrics *worker_metrics_to_wire(const worker_metrics *m, worker_metrics_wire *st)
{
    Tandem__V1__WorkerMetrics *w = &st->msg;
    tandem__v1__worker_metrics__init(w);
    memcpy(st->outcomes[0], m->prefill_requests, sizeof st->outcomes[0]);
    memcpy(st->outcomes[1], m->decode_requests, sizeof st->outcomes[1]);
    memcpy(st->outcomes[2], m->kv_transfers, sizeof st->outcomes[2]);
    w->kv_transfer_bytes_total = m->kv_transfer_bytes;
    w->kv_transfers_by_outcome = st->outcomes[2];
    w->n_kv_transfers_by_outcome = OUTCOME_COUNT;
    if (m->pool == WM_PREFILL) {
        w->prefill_input_tokens_total = m->prefill_input_tokens;
        w->prefill_busy_seconds_total = m->prefill_busy_s;
        w->prefill_requests_by_outcome = st->outcomes[0];
        w->n_prefill_requests_by_outcome = OUTCOME_COUNT;
        w->prefill_queue_depth = m->prefill_queue_depth;
        hist_to_wire(&m->prefill_duration, &st->hist[0], st->buckets[0]);
        w->prefill_duration = &st->hist[0];
        hist_to_wire(&m->kv_transfer_duration, &st->hist[3], st->buckets[3]);
        w->kv_transfer_duration = &st->hist[3];
    } else {
        w->decode_batch_size = m->decode_batch_size;
        w->decode_waiting_sequences = m->decode_waiting;
        hist_to_wire(&m->decode_step_batch, &st->hist[1], st->buckets[1]);
        w->decode_step_batch_size = &st->hist[1];
        hist_to_wire(&m->decode_step_duration, &st->hist[2], st->buckets[2]);
        w->decode_step_duration = &st->hist[2];
        w->decode_output_tokens_total = m->decode_output_tokens;
        w->decode_requests_by_outcome = st->outcomes[1];
        w->n_decode_requests_by_outcome = OUTCOME_COUNT;
        w->decode_preemptions_total = m->decode_preemptions;
        w->kv_cache_blocks_used = m->kv_blocks_used;
        w->kv_cache_blocks_capacity = m->kv_blocks_total;
    }
    return w;
}

/* NULL (the sender's role does not have it) leaves h zeroed. */
static int hist_ok(const histogram *h, const Tandem__V1__HistogramData *d)
{
    return !d || d->n_bucket_counts == (size_t)h->n_bounds + 1;
}

static void hist_from_wire(histogram *h, const Tandem__V1__HistogramData *d)
{
    histogram_init(h, h->bounds, h->n_bounds);
    if (!d)
        return;
    for (int i = 0; i <= h->n_bounds; i++) {
        h->counts[i] = d->bucket_counts[i];
        h->count += d->bucket_counts[i];
    }
    h->sum = d->sum;
}

static int outcomes_ok(size_t n)
{
    return n == 0 || n == OUTCOME_COUNT;
}

static void outcomes_from_wire(uint64_t *dst, const uint64_t *src, size_t n)
{
    for (int o = 0; o < OUTCOME_COUNT; o++)
        dst[o] = n ? src[o] : 0;
}

int worker_metrics_from_wire(worker_metrics *m, const Tandem__V1__WorkerMetrics *w)
{
    if (!hist_ok(&m->prefill_duration, w->prefill_duration) ||
        !hist_ok(&m->decode_step_batch, w->decode_step_batch_size) ||
        !hist_ok(&m->decode_step_duration, w->decode_step_duration) ||
        !hist_ok(&m->kv_transfer_duration, w->kv_transfer_duration) ||
        !outcomes_ok(w->n_prefill_requests_by_outcome) ||
        !outcomes_ok(w->n_decode_requests_by_outcome) || !outcomes_ok(w->n_kv_transfers_by_outcome))
        return -1;
    m->prefill_input_tokens = w->prefill_input_tokens_total;
    m->prefill_busy_s = w->prefill_busy_seconds_total;
    outcomes_from_wire(m->prefill_requests, w->prefill_requests_by_outcome,
                       w->n_prefill_requests_by_outcome);
    m->prefill_queue_depth = w->prefill_queue_depth;
    hist_from_wire(&m->prefill_duration, w->prefill_duration);
    m->decode_batch_size = w->decode_batch_size;
    m->decode_waiting = w->decode_waiting_sequences;
    hist_from_wire(&m->decode_step_batch, w->decode_step_batch_size);
    hist_from_wire(&m->decode_step_duration, w->decode_step_duration);
    m->decode_output_tokens = w->decode_output_tokens_total;
    outcomes_from_wire(m->decode_requests, w->decode_requests_by_outcome,
                       w->n_decode_requests_by_outcome);
    m->decode_preemptions = w->decode_preemptions_total;
    m->kv_blocks_used = w->kv_cache_blocks_used;
    m->kv_blocks_total = w->kv_cache_blocks_capacity;
    m->kv_transfer_bytes = w->kv_transfer_bytes_total;
    outcomes_from_wire(m->kv_transfers, w->kv_transfers_by_outcome, w->n_kv_transfers_by_outcome);
    hist_from_wire(&m->kv_transfer_duration, w->kv_transfer_duration);
    return 0;
}
