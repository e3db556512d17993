/* A worker's Prometheus series (docs/METRICS.md, "Prefiller", "Decoder" and
 * "KV transfer"): the numbers, their rendering, and their trip to the router
 * inside every heartbeat (tandem.v1.WorkerMetrics).
 *
 * A worker keeps one worker_metrics, serves it at its own /metrics
 * (worker/worker_http.h) and sends it with each heartbeat; the router keeps
 * the latest one per registered worker and renders them all, grouped by
 * family, as the cluster view. One renderer for both, so the names, labels
 * and buckets cannot drift apart. */
#ifndef TANDEM_WORKER_WORKER_METRICS_H
#define TANDEM_WORKER_WORKER_METRICS_H
#include <stdint.h>
#include "proto/tandem.pb-c.h"
#include "common/prom.h"
#include "common/sbuf.h"

typedef enum { WM_PREFILL = 0, WM_DECODE = 1 } wm_pool;

typedef struct worker_metrics {
    wm_pool pool;
    int draining;                         /* tandem_worker_draining */
    /* prefiller */
    uint64_t prefill_input_tokens;        /* tandem_prefill_input_tokens_total */
    double prefill_busy_s;                /* tandem_prefill_busy_seconds_total */
    uint64_t prefill_requests[OUTCOME_COUNT];
    uint32_t prefill_queue_depth;
    histogram prefill_duration;
    /* decoder */
    uint32_t decode_batch_size;
    uint32_t decode_waiting;
    histogram decode_step_batch;
    histogram decode_step_duration;
    uint64_t decode_output_tokens;
    uint64_t decode_requests[OUTCOME_COUNT];
    uint64_t decode_preemptions;          /* sequences whose pages were taken (scheduler.h) */
    uint32_t kv_blocks_used, kv_blocks_total;
    /* TransferEngine: send (prefiller) or recv (decoder) */
    uint64_t kv_transfer_bytes;
    uint64_t kv_transfers[OUTCOME_COUNT];
    histogram kv_transfer_duration;       /* send side only: the receiver cannot see the first byte */
} worker_metrics;

/* Zeroes m and sets the docs/METRICS.md buckets. */
void worker_metrics_init(worker_metrics *m, wm_pool pool);

/* One worker's metrics under its id, for rendering several together. */
typedef struct worker_metrics_view {
    const char *worker_id;
    const worker_metrics *m;
} worker_metrics_view;

/* Renders every worker series of docs/METRICS.md for the given workers,
 * each family once (HELP, TYPE, then one sample per worker that exports
 * it), labelled pool and worker. process is NULL for the router's cluster
 * view, or "prefiller"/"decoder" to add the worker's own tandem_build_info. */
void worker_metrics_render(sbuf *b, const worker_metrics_view *views, int n, const char *process);

/* Fills out (whose arrays point into st) from m. The result lives as long as
 * m and st. */
typedef struct worker_metrics_wire {
    Tandem__V1__WorkerMetrics msg;
    Tandem__V1__HistogramData hist[4];
    uint64_t buckets[4][PROM_MAX_BUCKETS + 1];
    uint64_t outcomes[3][OUTCOME_COUNT];
} worker_metrics_wire;
Tandem__V1__WorkerMetrics *worker_metrics_to_wire(const worker_metrics *m, worker_metrics_wire *st);

/* Replaces m's numbers with the message's (m keeps its pool; draining comes
 * from the heartbeat). A histogram with the wrong number of buckets or an
 * outcome array of the wrong length is a protocol error: returns -1 and
 * leaves m unchanged. */
int worker_metrics_from_wire(worker_metrics *m, const Tandem__V1__WorkerMetrics *msg);

#endif
