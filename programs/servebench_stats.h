/* tandem-servebench's statistics: one point's summary from its per-request
 * records. The definitions (docs/PERF.md, "Serving benchmark metrics") follow
 * vLLM's `bench serve`:
 *   TTFT   first token-carrying chunk - send, per completed request
 *   TPOT   (e2e - TTFT) / (output tokens - 1), per completed request with
 *          more than one output token
 *   ITL    every gap between consecutive token-carrying chunks of completed
 *          requests, all requests pooled
 *   E2E    end of stream ([DONE]) - send, per completed request
 *   throughput  completed requests, their input and output tokens, / the
 *          point's duration (first send to last end)
 *   goodput completed requests meeting every SLO given / duration
 * and, over completed and aborted requests alike, TTFT, ITL and the tokens
 * received (the *_streamed figures).
 * Percentiles interpolate linearly between order statistics (numpy's
 * default, which vLLM uses). */
#ifndef TANDEM_PROGRAMS_SERVEBENCH_STATS_H
#define TANDEM_PROGRAMS_SERVEBENCH_STATS_H
#include <stddef.h>
#include "programs/servebench_client.h"

/* A distribution in seconds; n == 0: no samples (the rest is 0). */
typedef struct svb_dist {
    size_t n;
    double mean, p50, p90, p99, max;
} svb_dist;

/* Service-level objectives in seconds; 0: not set. A request meets
 * itl_s when every one of its inter-chunk gaps is at most itl_s. */
typedef struct svb_slo {
    double ttft_s, itl_s, tpot_s, e2e_s;
} svb_slo;

typedef struct svb_summary {
    int requests, counts[SVB_N_OUTCOMES];
    long input_tokens, output_tokens;  /* of completed requests */
    double duration_s;
    double req_per_s, input_tok_per_s, output_tok_per_s, total_tok_per_s;
    int good;
    double goodput_req_per_s;
    svb_dist ttft, tpot, itl, e2e;
    /* Over every request that streamed, the ones the point's time bound
     * aborted included (a bounded point at a high load completes few
     * requests; its running streams still show the decode rate): TTFT of
     * those that got a first token, every chunk gap, and the tokens they
     * received / duration. Not in vLLM's report. */
    svb_dist ttft_streamed, itl_streamed;
    long streamed_tokens;
    double streamed_tok_per_s;
    int gpus;
    double usd_per_gpu_hour;
    double output_tok_per_s_per_gpu, total_tok_per_s_per_gpu;
    /* The whole GPU cost charged to one kind of token at a time: what a
     * million of them cost if the GPUs did nothing else. */
    double usd_per_m_input, usd_per_m_output, usd_per_m_total;
} svb_summary;

/* Linear-interpolation percentile (0 <= p <= 100) of sorted[0..n), n >= 1. */
double svb_percentile(const double *sorted, size_t n, double p);

/* The prompt tokens a completed request counts: the server's
 * usage.prompt_tokens, else the length asked for. */
int svb_input_tokens(const svb_record *r);
/* Its output tokens: usage.completion_tokens, else the token ids counted. */
int svb_output_tokens(const svb_record *r);

int svb_summarize(const svb_record *recs, int n, double duration_s, const svb_slo *slo, int gpus,
                  double usd_per_gpu_hour, svb_summary *out, char *err, size_t errlen);

#endif
