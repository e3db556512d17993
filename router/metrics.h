/* The router's Prometheus metrics, named and labelled as docs/METRICS.md
 * (the contract the dashboards and alert rules use) specifies: requests by
 * API and outcome, requests in flight, input and output tokens, TTFT,
 * inter-token latency and request duration histograms, the router's queue,
 * worker_up, the pools' replicas (desired, current, ready, draining) and the
 * autoscale policy's numbers; and the cluster view: every registered
 * worker's own series as its last heartbeat carried them
 * (worker/worker_metrics.h), labelled pool and worker. Rendered in the
 * Prometheus text format (0.0.4) for GET /metrics. */
#ifndef TANDEM_ROUTER_METRICS_H
#define TANDEM_ROUTER_METRICS_H
#include <stdint.h>
#include "router/autoscaler.h"
#include "common/prom.h"
#include "common/sbuf.h"
#include "router/workers.h"

typedef enum { API_OPENAI = 0, API_RPC = 1, API_COUNT = 2 } metrics_api;

/* Where one request's time goes before its second token
 * (tandem_request_stage_seconds{stage}): the router's timestamps of its
 * messages, and the prefiller's own timings from PrefillResult. */
typedef enum {
    STAGE_T_ROUTER = 0,      /* arrival to DecodeAssignment sent (router queue, placement) */
    STAGE_T_ADMISSION,       /* DecodeAssignment sent to KvReady: the decoder's admission */
    STAGE_T_PREFILL_QUEUE,   /* PrefillAssignment sent to PrefillResult, less the
                                prefiller's prefill and transfer: waiting at the prefiller */
    STAGE_T_PREFILL,         /* the prefiller's compute (PrefillResult.prefill_seconds) */
    STAGE_T_KV_TRANSFER,     /* first token sampled, KV pushed, acked (transfer_seconds) */
    STAGE_T_FIRST_DECODE,    /* StartDecode sent to the decoder's first token: KV notice,
                                staging to the GPU, joining the batch, its first step */
    STAGE_T_COUNT
} metrics_stage;

extern const char *const metrics_stage_names[STAGE_T_COUNT];

typedef struct router_metrics {
    uint64_t requests[API_COUNT][OUTCOME_COUNT]; /* finished */
    int64_t in_flight[API_COUNT];
    uint64_t input_tokens, output_tokens;
    uint64_t accepted;                           /* for the RPC status */
    uint64_t preemptions;                        /* requests placed again after a decoder
                                                    preempted them */
    histogram ttft, itl, duration;
    histogram stage[STAGE_T_COUNT];
} router_metrics;

void metrics_init(router_metrics *m);
void metrics_observe(histogram *h, double seconds);
/* A request ended (including one refused before it started). */
void metrics_request_done(router_metrics *m, metrics_api api, metrics_outcome outcome);
/* The outcome a failed request's HTTP status stands for. */
metrics_outcome metrics_outcome_for_status(int http_status);

/* Pool sizes as the metrics and the dashboard report them: current (the
 * autoscaler's count once it ran, else serving workers), ready (registered
 * and not draining), draining (the local scaler's count of workers told to
 * leave, else registered draining workers). */
void metrics_pool_sizes(const worker_registry *w, const autoscale_status *as, int pool,
                        int *current, int *ready, int *draining);

/* held: requests the router holds, per missing pool (AS_POOL_*). */
void metrics_render(sbuf *b, const router_metrics *m, const worker_registry *w,
                    const autoscale_status *as, const int *held);

#endif
