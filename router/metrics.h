/* The router's Prometheus metrics: counters and latency histograms it
 * updates as requests move, plus per-worker gauges taken from heartbeats,
 * rendered in the Prometheus text exposition format (version 0.0.4) for
 * GET /metrics. The autoscaling signals of the design are here:
 * tandem_prefiller_input_tokens_per_second / queued input tokens (prefill
 * pool) and tandem_decoder_batch_size (decode pool). */
#ifndef TANDEM_ROUTER_METRICS_H
#define TANDEM_ROUTER_METRICS_H
#include <stdint.h>
#include "router/sbuf.h"
#include "router/workers.h"

#define METRICS_BUCKETS 14
#define METRICS_HTTP_CODES 9
#define METRICS_FINISH 6

typedef struct histogram {
    uint64_t counts[METRICS_BUCKETS + 1]; /* last: +Inf */
    double sum;
    uint64_t count;
} histogram;

typedef struct router_metrics {
    uint64_t requests_total;                       /* accepted */
    uint64_t finished[METRICS_FINISH];             /* by tandem.v1 FinishReason */
    uint64_t http_responses[METRICS_HTTP_CODES];   /* see metrics.c for the codes */
    uint64_t prompt_tokens, generated_tokens;
    uint64_t workers_expired;
    histogram ttft;                                /* seconds to the first token */
    histogram e2e;                                 /* seconds to the last token */
} router_metrics;

void metrics_init(router_metrics *m);
void metrics_observe(histogram *h, double seconds);
void metrics_http_status(router_metrics *m, int status);
void metrics_render(sbuf *b, const router_metrics *m, const worker_registry *w,
                    int active_requests);

#endif
