/* The prefiller process: takes prefill work from the router, runs the
 * prompt through the model in chunks (between chunks it answers the router:
 * heartbeats, cancellations, new work), samples the first token, pushes the
 * prompt's KV cache into the decoder's reserved pages with the
 * TransferEngine, and reports. One request at a time, FIFO: prefill is
 * compute-bound, so batching prompts would not finish any of them sooner. */
#ifndef TANDEM_PREFILLER_PREFILLER_H
#define TANDEM_PREFILLER_PREFILLER_H
#include <stdint.h>
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/rank_group.h"
#include "kernels/backend.h"
#include "kernels/sampling.h"
#include "prefiller/kv_push.h"
#include "worker/worker_http.h"
#include "worker/worker_link.h"
#include "worker/worker_loop.h"
#include "worker/worker_metrics.h"
#include "worker/worker_process.h"
#include "worker/worker_sampling.h"
#include "worker/worker_vocab.h"

typedef struct prefiller_config {
    worker_options w;          /* the flags every worker has (--tp is w.ranks) */
    int max_prompt_tokens;     /* sizes the KV cache; longer prompts are refused */
    int chunk_tokens;          /* prompt tokens per forward call */
    int transfer_timeout_ms;
} prefiller_config;

typedef struct prefill_job {
    struct prefill_job *next;
    char id[24];
    uint64_t key;              /* the request id as a number (TransferEngine tag) */
    int32_t *tokens;
    int n_tokens;
    worker_sampling ws;        /* sampling, penalties, logprobs (rank 0) */
    Tandem__V1__KvDestination *dest; /* an unpacked copy the job owns */
    uint64_t lease_end_ms;     /* tn_wall_ms() after which the decoder's pages are no
                                  longer ours (dest->lease_end_unix_ms); 0: none */
    int cancelled;
    int prompt_lp;             /* -1, or echo's prompt logprobs with this many alternatives */
    tm_token_logprobs *prompt_lps; /* rank 0: [n_tokens - 1], entry i for token i + 1 */
    int last_row;              /* the last prompt token's row in the last chunk's logits */
} prefill_job;

typedef struct prefiller_ctx {
    prefiller_config cfg;
    kn_backend be;
    tm_model *model;
    const tm_config *mc;
    tm_kv_cache kv;
    tm_sampler sampler;        /* rank 0: the first token's draw */
    tm_vocab_trie vocab;       /* --tokenizer: structured outputs' masks */
    int has_vocab;
    kv_pusher *pusher;
    /* the router link, signals, heartbeats, drain and metrics (rank 0; the
     * drain finishes the queue, takes nothing new, then deregisters) */
    worker_loop loop;
    prefill_job *head, *tail;  /* queued work */
    prefill_job *current;      /* the job being prefilled or pushed */
    uint64_t queued_tokens;
    /* TP group: rank 0 talks to the router and hands each job to the other
     * ranks; every rank runs the prompt on its shard and pushes its KV heads */
    rank_group group;
    int group_failed;          /* a peer rank died: report and exit */
} prefiller_ctx;

/* Inside a job: handles what arrived from the router and sends a heartbeat
 * when due; waits up to timeout_ms for something to arrive
 * (worker_loop_service). */
void prefiller_service(prefiller_ctx *ctx, int timeout_ms);

/* Runs one job to the end (prefill, first token, KV push) and reports its
 * PrefillResult to the router. */
void prefiller_run_job(prefiller_ctx *ctx, prefill_job *job);

void prefill_job_free(prefill_job *job);

/* Counts a finished prefill under the outcome its error code stands for. */
void prefiller_count_outcome(prefiller_ctx *ctx, int error_code);

/* Ranks other than 0 of a TP group: run the jobs rank 0 hands out until it
 * says stop (0) or the group fails (-1). */
int prefiller_rank_serve(prefiller_ctx *ctx);
/* Rank 0: tells the other ranks to exit. */
void prefiller_group_stop(prefiller_ctx *ctx);

#endif
