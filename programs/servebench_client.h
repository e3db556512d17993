/* tandem-servebench's HTTP client: sends one point's requests as streaming
 * OpenAI requests (libcurl multi, one thread) under a concurrency limit and
 * their arrival times, and records for each request its own timestamps
 * (sent, every chunk that carried tokens, end) and token counts. It judges
 * each stream but computes no statistic (servebench_stats.h does). */
#ifndef TANDEM_PROGRAMS_SERVEBENCH_CLIENT_H
#define TANDEM_PROGRAMS_SERVEBENCH_CLIENT_H
#include <stddef.h>
#include "programs/servebench_workload.h"

typedef enum {
    SVB_OK,           /* 200, well-formed stream, one finish_reason, [DONE] */
    SVB_HTTP_ERROR,   /* a non-200 answer */
    SVB_STREAM_ERROR, /* an error event inside the stream */
    SVB_MALFORMED,    /* bad framing, non-JSON event, no [DONE], token counts that disagree */
    SVB_LOST,         /* the connection failed or timed out (--timeout-s) */
    SVB_ABORTED,      /* still running at the point's time bound: closed (cancelled) */
    SVB_NOT_SENT,     /* not started before the point's time bound */
    SVB_N_OUTCOMES
} svb_outcome;

extern const char *const svb_outcome_names[SVB_N_OUTCOMES];

typedef struct svb_record {
    svb_outcome outcome;
    int input_len, output_len;  /* what the workload asked for */
    int prompt_tokens;          /* usage.prompt_tokens, -1 when the server sent none */
    int usage_tokens;           /* usage.completion_tokens, -1 when none */
    int id_tokens;              /* token ids counted in the chunks */
    int text_chunks;            /* chunks that carried text but no token ids */
    double t_send, t_end;       /* seconds from the point's start; t_end: the stream's end */
    double *chunk_t;            /* arrival of every chunk that carried tokens */
    int n_chunks, cap_chunks;
    char why[200];              /* what went wrong, for outcomes other than ok */
} svb_record;

typedef struct svb_client_cfg {
    const char *url;            /* base URL, e.g. http://127.0.0.1:8000 */
    svb_api api;
    const char *auth_header;    /* "Authorization: Bearer ..." or NULL */
    int concurrency;            /* requests in flight at most (>= 1) */
    double send_until_s;        /* start nothing after this (0: no bound) */
    double stop_at_s;           /* abort what still runs at this time (0: no bound) */
    int timeout_s;              /* longest one request may take */
} svb_client_cfg;

/* Runs reqs[0..n) and fills recs[0..n) (caller frees with
 * svb_records_free). *duration_s: from the start to the last request's end
 * (or the abort). Returns TN_OK unless the client itself failed (out of
 * memory, libcurl could not start): request failures are outcomes. */
int svb_client_run(const svb_client_cfg *cfg, const svb_request *reqs, int n, svb_record *recs,
                  double *duration_s, char *err, size_t errlen);
void svb_records_free(svb_record *recs, int n);

/* GET url into *body (NUL-terminated; caller frees). For /metrics. */
int svb_http_get(const char *url, const char *auth_header, char **body, char *err, size_t errlen);

#endif
