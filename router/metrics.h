/* The router's Prometheus metrics, named and labelled as docs/METRICS.md
 * (the contract the dashboards and alert rules use) specifies: requests by
 * API and outcome, requests in flight, input and output tokens, TTFT,
 * inter-token latency and request duration histograms, worker_up; and, per
 * registered worker (labels pool, worker), the load its heartbeats report:
 * prefill queue depth and input tokens, decode batch size, waiting
 * sequences, output tokens and KV cache occupancy. Rendered in the
 * Prometheus text format (0.0.4) for GET /metrics. */
#ifndef TANDEM_ROUTER_METRICS_H
#define TANDEM_ROUTER_METRICS_H
#include <stdint.h>
#include "router/sbuf.h"
#include "router/workers.h"

#define METRICS_MAX_BUCKETS 12

typedef enum { API_OPENAI = 0, API_RPC = 1, API_COUNT = 2 } metrics_api;

typedef enum {
    OUTCOME_OK = 0,
    OUTCOME_CLIENT_ERROR,  /* 4xx: bad request, prompt too long, unknown model */
    OUTCOME_REJECTED,      /* no capacity: 429 / 503 */
    OUTCOME_CANCELLED,     /* the client went away or cancelled */
    OUTCOME_TIMEOUT,
    OUTCOME_ERROR,         /* server-side failure */
    OUTCOME_COUNT,
} metrics_outcome;

typedef struct histogram {
    const double *bounds;
    int n_bounds;
    uint64_t counts[METRICS_MAX_BUCKETS + 1]; /* last: +Inf */
    double sum;
    uint64_t count;
} histogram;

typedef struct router_metrics {
    uint64_t requests[API_COUNT][OUTCOME_COUNT]; /* finished */
    int64_t in_flight[API_COUNT];
    uint64_t input_tokens, output_tokens;
    uint64_t accepted;                           /* for the RPC status */
    histogram ttft, itl, duration;
} router_metrics;

void metrics_init(router_metrics *m);
void metrics_observe(histogram *h, double seconds);
/* A request ended (including one refused before it started). */
void metrics_request_done(router_metrics *m, metrics_api api, metrics_outcome outcome);
/* The outcome a failed request's HTTP status stands for. */
metrics_outcome metrics_outcome_for_status(int http_status);
void metrics_render(sbuf *b, const router_metrics *m, const worker_registry *w);

#endif
