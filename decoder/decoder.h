/* The decoder process: admits the requests the router assigns by KV use,
 * preempting the latest when the pool runs dry (decoder/scheduler.h), receives their prompt KV from
 * prefillers through the TransferEngine, and runs continuous batching: every
 * step advances all running sequences by one token in one forward call,
 * sequences joining and leaving between steps. Tokens go back to the router
 * as one TokenBatch per step. */
#ifndef TANDEM_DECODER_DECODER_H
#define TANDEM_DECODER_DECODER_H
#include <stdint.h>
#include "decoder/kv_receive.h"
#include "decoder/scheduler.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/rank_group.h"
#include "kernels/backend.h"
#include "worker/worker_http.h"
#include "worker/worker_link.h"
#include "worker/worker_loop.h"
#include "worker/worker_metrics.h"
#include "worker/worker_process.h"
#include "worker/worker_vocab.h"

typedef struct decoder_config {
    worker_options w;          /* the flags every worker has (--dp is w.ranks) */
    int kv_pages;              /* KV cache capacity */
    int max_batch;             /* sequences admitted at once */
    int orphan_release_ms;     /* a cancelled reservation whose KV transfer never
                                  reports is freed after this long */
    int group_from_env;        /* the group's layout from the pod's environment */
    int kv_lease_ms;           /* a reservation whose KV or first token has not
                                  come this long after KvReady is freed */
} decoder_config;

typedef struct decoder_ctx {
    decoder_config cfg;
    kn_backend be;
    tm_model *model;
    const tm_config *mc;
    tm_kv_cache kv;            /* pools only: pages are handed out by sched */
    sched s;
    kv_receiver *recv;
    /* the router link, signals, heartbeats, drain (finish the running
     * sequences, take nothing new) and metrics; a grouped rank steps on
     * with the others (loop.lockstep) until every rank has left */
    worker_loop loop;
    int max_context;
    /* step buffers, sized for max_batch */
    sched_seq **batch;
    tm_seq_step *steps;
    int32_t *sampled;          /* host: only token ids come back from the device */
    kn_sampling *params;
    uint64_t *rngs;
    const tm_penalties **pens; /* the batch's penalty states (engine/sampler.h) */
    int *top_logprobs;         /* -1: no logprobs for that row */
    tm_constraint **cons;      /* structured outputs (NULL: unconstrained row) */
    tm_vocab_trie vocab;       /* --tokenizer: what the constraints mask over */
    int has_vocab;
    tm_token_logprobs *logprobs;
    Tandem__V1__TokenLogprobs *logprobs_wire;
    tm_sampler sampler;
    /* DP+EP group: every rank is a decoder of its own (own requests, KV
     * cache, registration); the experts are split across the EP group, so
     * the ranks step together, a rank without sequences joining empty */
    rank_group group;
    int group_step;            /* some rank of the group has sequences this step */
    int group_failed;
} decoder_ctx;

/* Runs one decode step over the running batch and streams its tokens.
 * Returns the batch size (0: nothing ran) or a negative status. With
 * group_step set and no sequence here, runs the group's step empty (this
 * rank's experts serve the others' tokens) and returns 0. */
int decoder_step(decoder_ctx *ctx);

/* Sends the end of q (a TokenChunk with its finish reason) and forgets it. */
void decoder_finish_seq(decoder_ctx *ctx, sched_seq *q);

#endif
