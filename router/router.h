/* The router process: its configuration, its context, and the life of a
 * request inside it.
 *
 * Threads. One core thread owns every ZeroMQ socket (workers, RPC clients)
 * and drives every request's state machine (dispatch.c, rpc_server.c).
 * libmicrohttpd runs one thread per HTTP connection (http_server.c); those
 * threads never touch a socket of the core: they hand new requests and
 * cancellations to the core through queues in the context and wake it with
 * an eventfd, and the core wakes them through each request's own eventfd.
 * One mutex (router_ctx.lock) guards the registry, the requests' output and
 * the queues; the core holds it while it handles a message.
 *
 * A request's path (see docs/ARCHITECTURE.md): placed on a decoder, which
 * reserves KV pages (DecodeAssignment -> KvReady); then on a prefiller
 * (PrefillAssignment -> PrefillResult with the first token); then the
 * decoder decodes (StartDecode -> TokenBatch ... finish). */
#ifndef TANDEM_ROUTER_ROUTER_H
#define TANDEM_ROUTER_ROUTER_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "router/autoscaler.h"
#include "engine/sampler.h"
#include "common/options.h"
#include "router/metrics.h"
#include "router/openai_api.h"
#include "common/sbuf.h"
#include "common/sock_auth.h"
#include "router/text_codec.h"
#include "common/wire.h"
#include "proto/tandem.pb-c.h"
#include "router/workers.h"

typedef struct router_config {
    char host[64];             /* address every socket binds */
    int http_port;             /* 0: any free port */
    int worker_port;
    int rpc_port;
    char port_file[OPT_PATH_MAX];       /* where the bound ports are written ("" = nowhere) */
    char tokenizer[OPT_PATH_MAX]; /* none | bytes | a vocabulary file (text_codec.h) */
    int heartbeat_ms;          /* interval the workers are told to use */
    int worker_timeout_ms;     /* a worker silent this long is dropped */
    int default_max_tokens;    /* completions without max_tokens (OpenAI: 16) */
    int chat_default_max_tokens;
    int max_body_bytes;
    int max_active_requests;   /* beyond this, HTTP 429 / RPC NO_CAPACITY */
    char api_key_file[OPT_PATH_MAX];    /* "" = the APIs are open (docs/SECURITY.md) */
    char worker_secret_file[OPT_PATH_MAX]; /* "" = workers register unauthenticated */
    int metrics_port;          /* -1: /metrics only on the HTTP port; else also here (0: any) */
    int queue_timeout_ms;      /* hold requests no worker can take for this long; 0: refuse at once */
    int progress_timeout_ms;   /* a request on a worker that moves nothing this long is
                                  placed again (0: derived, router_progress_timeout_ms) */
    int drain_timeout_ms;      /* SIGTERM: let requests in flight finish this long */
    int http_max_connections;  /* client connections the API port holds (http_front.h) */
    int http_idle_timeout_ms;  /* a connection with nothing in progress is closed after this */
    int http_request_timeout_ms; /* a request's head and body must arrive within this */
    int http_memory_budget_mb; /* request bodies and their parse, all requests together */
    autoscaler_config as;      /* --scaler, --autoscale-*, --scaler-* */
} router_config;

typedef enum { ORIGIN_HTTP = 0, ORIGIN_RPC = 1 } req_origin;

typedef enum {
    STAGE_NEW = 0,        /* queued for the core */
    STAGE_RESERVING = 1,  /* DecodeAssignment sent, waiting for KvReady */
    STAGE_PREFILLING = 2, /* PrefillAssignment sent, waiting for PrefillResult */
    STAGE_DECODING = 3,   /* StartDecode sent, tokens streaming */
    STAGE_DONE = 4,
    STAGE_HELD = 5,       /* no prefiller or decoder can take it yet (router queue) */
} req_stage;

typedef struct router_request {
    struct router_request *hnext;  /* hash chain of the core's table */
    struct router_request *qnext;  /* submit / cancel queue link */
    uint64_t key;                  /* the table key: that of the current attempt */
    char id[24];                   /* 16 hex digits of the first key: what clients see */
    char wid[24];                  /* 16 hex digits of key: the request_id workers see.
                                      A request placed again after losing a worker
                                      (dispatch.c, requeue) gets a new key, so late
                                      messages about an earlier attempt are ignored */
    int attempts;                  /* placements after the first (worker failures) */
    req_origin origin;
    api_kind kind;
    long created;                  /* unix seconds, for OpenAI "created" */
    double t_start, t_first, t_last; /* monotonic: submission, first and latest token */

    /* RPC origin: where replies go. */
    uint8_t client_rid[WIRE_MAX_ID];
    size_t client_rid_len;
    char client_tag[128];

    /* What to run. */
    char model[API_MAX_MODEL];
    int32_t *prompt;
    int n_prompt;
    float temperature, top_p;
    int top_k;
    uint64_t seed;
    int max_tokens;
    int32_t *stop_ids;             /* the client's plus the model's EOS ids */
    int n_stop_ids;
    char *stop_strs[API_MAX_STOP]; /* matched here, on the decoded text */
    uint32_t *grammar;         /* structured outputs: the program (SamplingParams.grammar) */
    int n_grammar;
    int n_stop_strs;
    size_t max_stop_len;
    int stream, include_usage, with_token_ids;
    /* Penalties and logit_bias (applied by the workers, engine/sampler.h). */
    float presence_penalty, frequency_penalty, repetition_penalty; /* repetition 1: none */
    int32_t *bias_tokens;          /* checked against the vocabulary in request_admit */
    float *bias_values;
    int n_bias;
    int logprobs;                  /* -1: none; else alternatives per token (0..20) */
    int score_logprobs;            /* keep the tokens' logprobs although the client
                                      did not ask (best_of ranks choices by them) */
    int prompt_logprobs;           /* echo with logprobs: the prefiller returns the
                                      prompt tokens' logprobs too */
    tm_token_logprobs *prompt_lp;  /* [n_prompt - 1]: prompt token i + 1's (under lock) */
    int n_prompt_lp;

    /* Placement (core thread only). */
    req_stage stage;
    char prefiller[WIRE_MAX_ID + 1];
    char decoder[WIRE_MAX_ID + 1];
    int on_prefiller;              /* counted in the prefiller's accounting */
    int on_decoder;                /* counted in the decoder's accounting */
    int pages_committed;
    int assigned_tokens;           /* prompt tokens counted on the prefiller */
    int zombie;                    /* cancelled while prefilling: kept until the
                                      prefiller reports, then the decoder's pages
                                      are released */
    uint64_t prefiller_serial;     /* router_worker.serial of the entries counted on */
    uint64_t decoder_serial;
    double t_progress;             /* monotonic: the current attempt's latest step
                                      (placed, KV reserved, first token, tokens) */
    /* Stage timestamps of the current attempt (monotonic; 0: not reached),
     * for tandem_request_stage_seconds (router/metrics.h). */
    double t_assigned_decode, t_assigned_prefill, t_start_decode;

    /* Output (under lock): tokens, their decoded text, the end. */
    int32_t *out;
    size_t *out_text_end;          /* text length after each token */
    size_t *out_reasoning_end;     /* chat formats: reasoning length after each token */
    int *out_tools_end;            /* chat formats: tool calls complete after each token */
    tm_token_logprobs *out_lp;     /* each token's logprobs (when logprobs >= 0; sized
                                      cap_lp, filled by request_store_logprobs) */
    int cap_lp;
    int n_out, cap_out;
    sbuf text;                     /* (chat: content) truncated at a matched stop string */
    sbuf reasoning;                /* chat formats: reasoning_content */
    chat_parser *parser;           /* chat formats: the output's parser, else NULL */
    char parse_error[256];         /* why the output broke the chat format */
    int finished;
    int finish_reason;             /* TANDEM__V1__FINISH_REASON__* */
    api_error error;               /* when finish_reason is ERROR */
    int rpc_sent;                  /* RPC: tokens already sent to the client */

    /* Shared ownership between the core and an HTTP connection thread. */
    int refs;
    int notify_fd;                 /* eventfd the connection thread waits on */
    int cancel_queued;

    /* Held by the router (STAGE_HELD, core thread only). */
    struct router_request *held_next;
    double held_since;
    int held_for;                  /* AS_POOL_PREFILL or AS_POOL_DECODE: what is missing */
} router_request;

#define ROUTER_HASH_BUCKETS 4096

typedef struct router_ctx {
    router_config cfg;
    text_codec codec;
    pthread_mutex_t lock;

    void *zctx;
    void *worker_sock;             /* ROUTER: prefillers and decoders */
    void *rpc_sock;                /* ROUTER: RPC clients */
    int wake_fd;                   /* HTTP threads -> core */
    int shutdown_fd;               /* set once at shutdown; every waiter polls it */
    int http_port, worker_port, rpc_port;
    struct MHD_Daemon *httpd;
    struct http_front *front;      /* the API port's connections (http_front.h) */
    size_t http_mem_used;          /* reserved by HTTP requests (--http-memory-budget-mb) */
    /* Authentication (docs/SECURITY.md): CURVE keys of the worker and RPC
     * sockets, their ZAP handler, and the API key's hash for HTTP. */
    sock_auth worker_auth, rpc_auth;
    void *zap;
    int api_key_set;
    unsigned char api_key_hash[32];
    struct MHD_Daemon *metrics_httpd; /* --metrics-port: /metrics, /healthz, /dashboard */
    int metrics_port;
    double t_start;                /* monotonic start time (the dashboard's zero) */
    int stopping;                  /* shutting down (SIGTERM): admit nothing new; requests
                                      in flight finish until drain_deadline_s */
    int stop_final;                /* the drain is over: fail what is left, place nothing */
    double drain_deadline_s;
    double next_progress_check_s;

    worker_registry workers;
    router_request *table[ROUTER_HASH_BUCKETS];
    int n_active;                  /* requests in the table */
    int n_queued;                  /* submitted by HTTP threads, not yet taken */
    int n_http_responses;          /* HTTP responses still being written (a finished
                                      request's end may not be on the wire yet): a
                                      drain waits for them */
    uint64_t next_key;
    router_request *submit_head, *submit_tail;
    router_request *cancel_head, *cancel_tail;
    router_metrics metrics;
    /* Requests held because no worker can take them yet (FIFO). */
    router_request *held_head, *held_tail;
    int n_held[AS_POOL_COUNT];
    struct autoscaler *autoscaler;
    autoscale_status as_status;    /* published by the autoscale loop */
} router_ctx;

/* ---- router_options.c: flags and config file (docs/API.md "Configuration") */

void router_config_default(router_config *c);
/* Parses argv and the --config file it names into c (holding defaults).
 * Returns OPTS_OK, OPTS_HELP or OPTS_ERROR (common/options.h) with a reason. */
int router_config_parse(router_config *c, int argc, char **argv, char *err, size_t errlen);
void router_config_print_help(FILE *out, router_config *c, const char *intro);
/* Ranges and combinations (ports, limits, scaler settings, the policy). */
int router_config_validate(const router_config *c, char *err, size_t errlen);

/* ---- requests.c */

/* A fresh request with one reference (the creator's), or NULL on OOM. */
router_request *request_new(router_ctx *ctx, req_origin origin);
/* Drops one reference; frees at zero. Caller holds the lock. */
void request_unref(router_request *r);
/* The request whose current attempt has this wire id (workers' messages). */
router_request *request_find(const router_ctx *ctx, const char *id);
/* The request clients know by this id, whatever its attempt. */
router_request *request_find_client(const router_ctx *ctx, const char *id);
/* Gives r a fresh key and wire id (a new attempt), keeping its client id
 * and its place in the table. */
void request_rekey(router_ctx *ctx, router_request *r);
void request_table_add(router_ctx *ctx, router_request *r);
void request_table_remove(router_ctx *ctx, router_request *r);

/* Queues r for cancellation by the core (client went away); any thread,
 * lock held. Takes a reference that the core drops. */
void request_queue_cancel(router_ctx *ctx, router_request *r);

/* Appends generated tokens (decoding their text, or parsing them with the
 * chat format, and matching stop strings on the content). Returns 1 if a
 * stop string ended the request's output (the caller then finishes it with
 * FINISH_REASON_STOP_STRING), 0 otherwise, -1 on OOM, -2 when the output
 * breaks the chat format (reason in r->parse_error). */
int request_append(router_ctx *ctx, router_request *r, const int32_t *toks, int n);

/* Keeps the logprobs of the n tokens about to be appended (request_append
 * next): lps[i] belongs to toks[i]. 0, or -1 on OOM or when the worker sent
 * none or not one per token (n_lps != n) although the request asked. */
int request_store_logprobs(router_request *r, Tandem__V1__TokenLogprobs *const *lps,
                           size_t n_lps, int n);
/* Keeps the prompt's logprobs from the first PrefillResult that has them
 * (a re-placed attempt's prompt holds earlier output after the prompt:
 * only the first n_prompt - 1 entries count). 0 when the request did not
 * ask or has them; -1 on OOM or when fewer or malformed entries came. */
int request_store_prompt_logprobs(router_request *r, Tandem__V1__TokenLogprobs *const *lps,
                                  size_t n_lps);

/* Flushes the chat parser at the end of the output (text it held back). */
void request_finish_output(router_request *r);
/* The chat completion's tool calls so far (from the parser), and how many. */
const chat_tool_call *request_tool_calls(const router_request *r, int *n);

/* Validates what a request asks for against the registered models and
 * fills model-dependent fields: the stop id set (client's + EOS unless
 * ignore_eos), max_tokens default and bounds. Caller holds the lock.
 * Returns 0 or -1 with e filled (HTTP status + OpenAI error). */
int request_admit(router_ctx *ctx, router_request *r, int max_tokens_given,
                  const int32_t *stop_ids, int n_stop_ids, int ignore_eos, api_error *e);

/* ---- dispatch.c (core thread, lock held) */

/* Places a submitted request: picks a decoder and sends DecodeAssignment. */
void dispatch_place(router_ctx *ctx, router_request *r);
/* Handles one message from a worker. */
void dispatch_worker_message(router_ctx *ctx, const char *rid, size_t rid_len,
                             const Tandem__V1__WorkerMessage *m);
/* Cancels r everywhere it runs and finishes it as CANCELLED. */
void dispatch_cancel(router_ctx *ctx, router_request *r);
/* Drops workers that stopped heartbeating, placing their requests again. */
void dispatch_expire_workers(router_ctx *ctx, uint64_t now_ms);
/* Places again (or fails, attempts exhausted) every request whose worker
 * made no progress for the progress timeout; frees zombies whose prefiller
 * never reported. Cheap to call often: it scans at most every 250 ms. */
void dispatch_check_progress(router_ctx *ctx, double now_s);
/* The progress timeout in effect (--progress-timeout-ms, or derived). */
int router_progress_timeout_ms(const router_config *c);
/* Ends r: records the reason, releases its accounting, wakes its waiter,
 * delivers the end to an RPC client, and drops it from the table (unless it
 * is a zombie still waiting for its prefiller). */
void dispatch_finish(router_ctx *ctx, router_request *r, int reason, const api_error *err);
/* Fails every active request (router shutdown). */
void dispatch_fail_all(router_ctx *ctx, const char *why);
/* Moves HTTP submissions into the table (placing each) and handles the
 * queued cancellations. */
void dispatch_process_queues(router_ctx *ctx);
/* Places held requests that a worker can take now, in arrival order, and
 * fails those held longer than --queue-timeout-ms. */
void dispatch_retry_held(router_ctx *ctx);

/* ---- rpc_server.c (core thread, lock held) */

void rpc_handle_message(router_ctx *ctx, const uint8_t *rid, size_t rid_len,
                        const Tandem__V1__ClientMessage *m);
/* Sends tokens appended since the last call (streaming clients) and, once
 * finished, the final chunk. */
void rpc_deliver(router_ctx *ctx, router_request *r);

/* ---- dashboard.c (lock held) */

/* The JSON behind /dashboard: pools, workers, the autoscaler's state, and
 * its history points and decisions newer than since_s (seconds since the
 * router started; negative: all). */
void dashboard_state_json(router_ctx *ctx, sbuf *b, double since_s);
/* The self-contained page (HTML + inline JS), embedded at build time. */
const char *dashboard_html(size_t *len);

/* ---- http_server.c */

int http_start(router_ctx *ctx, char *err, size_t errlen);
void http_stop(router_ctx *ctx);

/* ---- maps between protocol codes and OpenAI/HTTP errors */

const char *finish_reason_str(int reason);
/* Fills e for a failure with the given tandem.v1 error code. */
void error_from_code(api_error *e, int code, const char *message);
int error_code_from_http(const api_error *e);

#endif
