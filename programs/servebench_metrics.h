/* Where a request's time goes, from the cluster's own timings: the router's
 * /metrics (which relays every worker's histograms, docs/METRICS.md) is
 * read before and after a point, and the growth of each histogram's _sum
 * and _count gives the mean of what happened during the point. Means only:
 * the buckets are too coarse for percentiles of these stages. */
#ifndef TANDEM_PROGRAMS_SERVEBENCH_METRICS_H
#define TANDEM_PROGRAMS_SERVEBENCH_METRICS_H
#include <stddef.h>

typedef enum {
    SVB_T_ROUTER_TTFT,    /* router: arrival to first token sent */
    SVB_T_PREFILL,        /* prefiller: compute of one prefill */
    SVB_T_KV_TRANSFER,    /* prefiller: one KV push, first byte to ack */
    SVB_T_DECODE_STEP,    /* decoder: one batched step */
    SVB_T_ROUTER_ITL,     /* router: gap between tokens sent to one client */
    SVB_T_ROUTER_E2E,     /* router: arrival to last token */
    /* tandem_request_stage_seconds (router/metrics.h): one request's stages
     * up to its second token, which add up to the router's TTFT plus the
     * first decode */
    SVB_T_S_ROUTER,       /* arrival to DecodeAssignment: router queue, placement */
    SVB_T_S_ADMISSION,    /* the decoder's admission (KV reservation) */
    SVB_T_S_PREFILL_QUEUE, /* waiting at the prefiller (and the control messages) */
    SVB_T_S_PREFILL,      /* the prefiller's compute, as it reported it */
    SVB_T_S_KV_TRANSFER,  /* first token sampled, KV pushed and acked */
    SVB_T_S_FIRST_DECODE, /* StartDecode to the decoder's first token */
    SVB_N_TIMINGS
} svb_timing;

extern const char *const svb_timing_names[SVB_N_TIMINGS];

typedef struct svb_prom {
    double sum[SVB_N_TIMINGS], count[SVB_N_TIMINGS];
    /* tandem_prefill_input_tokens_total and tandem_decode_output_tokens_total:
     * the workers' metrics reach the router with their heartbeats, so a
     * reader waits until these have caught up with what it sent */
    double prefill_tokens, decode_tokens;
} svb_prom;

/* Adds up, over every label set, the _sum and _count of each timing's
 * histogram in a Prometheus text page. A page without a family leaves it 0. */
void svb_prom_parse(const char *text, svb_prom *out);

/* after - before: the mean of each timing over the point (0 when nothing
 * was observed) and how many observations it holds. */
void svb_prom_means(const svb_prom *before, const svb_prom *after, double *mean_s, double *count);

#endif
