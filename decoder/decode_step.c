/* One continuous-batching step: every running sequence feeds its last
 * token, one forward call computes all their logits, each row is sampled
 * with its own parameters and generator, and the new tokens go to the
 * router in one TokenBatch. */
#include "decoder/decoder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/sampler.h"
#include "worker/worker_sampling.h"
#include "common/status.h"
#include "common/sys.h"

#define WHO "decoder"

static int finish_reason(const sched_seq *q)
{
    switch (q->finish) {
    case SCHED_FINISH_LENGTH:
        return TANDEM__V1__FINISH_REASON__FINISH_REASON_LENGTH;
    case SCHED_FINISH_STOP:
        return TANDEM__V1__FINISH_REASON__FINISH_REASON_STOP;
    default:
        return TANDEM__V1__FINISH_REASON__FINISH_REASON_NONE;
    }
}

static void send_batch(decoder_ctx *ctx, Tandem__V1__TokenChunk **chunks, int n)
{
    Tandem__V1__TokenBatch b = TANDEM__V1__TOKEN_BATCH__INIT;
    b.chunks = chunks;
    b.n_chunks = (size_t)n;
    Tandem__V1__WorkerMessage m = TANDEM__V1__WORKER_MESSAGE__INIT;
    m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_TOKEN_BATCH;
    m.token_batch = &b;
    link_send(&ctx->loop.link, &m);
}

void decoder_finish_seq(decoder_ctx *ctx, sched_seq *q)
{
    ctx->loop.wm.decode_requests[OUTCOME_OK]++;
    Tandem__V1__TokenChunk c = TANDEM__V1__TOKEN_CHUNK__INIT;
    c.request_id = q->id;
    c.finish_reason = finish_reason(q);
    Tandem__V1__TokenChunk *cp = &c;
    send_batch(ctx, &cp, 1);
    sched_remove(&ctx->s, q);
}

/* A failed step ends every sequence in it with an error. */
static void fail_batch(decoder_ctx *ctx, int n, const char *msg)
{
    tn_log(WHO, "decode step failed: %s", msg);
    for (int i = 0; i < n; i++) {
        Tandem__V1__Error e = TANDEM__V1__ERROR__INIT;
        e.code = TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL;
        e.message = (char *)msg;
        e.request_id = ctx->batch[i]->id;
        Tandem__V1__TokenChunk c = TANDEM__V1__TOKEN_CHUNK__INIT;
        c.request_id = ctx->batch[i]->id;
        c.finish_reason = TANDEM__V1__FINISH_REASON__FINISH_REASON_ERROR;
        c.error = &e;
        Tandem__V1__TokenChunk *cp = &c;
        send_batch(ctx, &cp, 1);
        sched_remove(&ctx->s, ctx->batch[i]);
        ctx->loop.wm.decode_requests[OUTCOME_ERROR]++;
    }
}

/* Tells the router about every sequence the batch's page needs preempted
 * (it places each again with its output so far) and forgets them. */
static void report_preempted(decoder_ctx *ctx)
{
    sched_seq *q;
    while ((q = sched_next_preempted(&ctx->s)) != NULL) {
        char why[200];
        snprintf(why, sizeof why, "the KV pool (%d pages) ran dry; preempted after %d tokens "
                 "as the latest admitted sequence", ctx->s.n_pages, q->n_generated);
        tn_log(WHO, "request %s: %s", q->id, why);
        Tandem__V1__Preempted p = TANDEM__V1__PREEMPTED__INIT;
        p.request_id = q->id;
        p.reason = why;
        p.tokens_cached = (uint32_t)q->n_cached;
        Tandem__V1__WorkerMessage m = TANDEM__V1__WORKER_MESSAGE__INIT;
        m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_PREEMPTED;
        m.preempted = &p;
        link_send(&ctx->loop.link, &m);
        ctx->loop.wm.decode_preemptions++;
        sched_remove(&ctx->s, q);
    }
}

int decoder_step(decoder_ctx *ctx)
{
    int n = sched_form_batch(&ctx->s, ctx->batch, ctx->cfg.max_batch);
    report_preempted(ctx);
    /* branches about to write into a page they shared get their own copy */
    int n_copies;
    const int32_t *copies = sched_take_copies(&ctx->s, &n_copies);
    for (int i = 0; i < n_copies; i++) {
        int rc = tm_kv_copy_page(&ctx->kv, copies[2 * i + 1], copies[2 * i]);
        if (rc != TN_OK) {
            char msg[160];
            snprintf(msg, sizeof msg, "copying a shared KV page failed: %s", tn_status_str(rc));
            fail_batch(ctx, n, msg);
            return rc;
        }
    }
    if (n == 0)
        return ctx->group_step ? tm_forward(ctx->model, NULL, NULL, 0, NULL, NULL) : 0;
    for (int i = 0; i < n; i++) {
        sched_seq *q = ctx->batch[i];
        ctx->steps[i] = (tm_seq_step){.tokens = &q->next_token, .n_tokens = 1,
                                      .n_cached = q->n_cached, .pages = q->pages,
                                      .n_pages = q->n_pages};
        ctx->params[i] = q->ws.params;
        ctx->rngs[i] = q->rng;
        ctx->pens[i] = &q->ws.pen;
        ctx->cons[i] = q->ws.con;
        ctx->top_logprobs[i] = q->ws.top_logprobs;
    }
    int vocab = ctx->mc->vocab_size;
    double t0 = tn_now_s();
    /* the logits stay where they were computed and are sampled there: on
     * the GPU only the n token ids come back */
    int rc = tm_forward(ctx->model, &ctx->kv, ctx->steps, n, NULL, NULL);
    if (rc == TN_OK)
        rc = tm_sample_rows(&ctx->sampler, tm_model_last_logits(ctx->model), n, vocab,
                            ctx->params, ctx->rngs, ctx->pens, ctx->cons, ctx->top_logprobs, ctx->sampled,
                            ctx->logprobs);
    for (int i = 0; rc == TN_OK && i < n; i++) {
        rc = tm_penalties_add_output(&ctx->batch[i]->ws.pen, ctx->sampled[i]);
        if (rc == TN_OK && ctx->cons[i])
            rc = tm_constraint_accept(ctx->cons[i], ctx->sampled[i]);
    }
    if (rc != TN_OK) {
        char msg[160];
        snprintf(msg, sizeof msg, "forward/sampling failed: %s", tn_status_str(rc));
        fail_batch(ctx, n, msg);
        return rc;
    }
    Tandem__V1__TokenChunk *chunks = calloc((size_t)n, sizeof *chunks);
    Tandem__V1__TokenChunk **ptrs = calloc((size_t)n, sizeof *ptrs);
    Tandem__V1__TokenLogprobs **lp_ptrs = calloc((size_t)n, sizeof *lp_ptrs);
    if (!chunks || !ptrs || !lp_ptrs) {
        free(chunks);
        free(ptrs);
        free(lp_ptrs);
        fail_batch(ctx, n, "decoder out of memory");
        return TN_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++) {
        sched_seq *q = ctx->batch[i];
        q->rng = ctx->rngs[i];
        sched_token(&ctx->s, q, ctx->sampled[i]);
        tandem__v1__token_chunk__init(&chunks[i]);
        chunks[i].request_id = q->id;
        chunks[i].tokens = &ctx->sampled[i];
        chunks[i].n_tokens = 1;
        chunks[i].finish_reason = finish_reason(q);
        if (q->ws.top_logprobs >= 0) {
            worker_logprobs_to_wire(&ctx->logprobs_wire[i], &ctx->logprobs[i]);
            lp_ptrs[i] = &ctx->logprobs_wire[i];
            chunks[i].logprobs = &lp_ptrs[i];
            chunks[i].n_logprobs = 1;
        }
        ptrs[i] = &chunks[i];
    }
    send_batch(ctx, ptrs, n);
    free(chunks);
    free(ptrs);
    free(lp_ptrs);
    for (int i = 0; i < n; i++)
        if (ctx->batch[i]->state == SEQ_FINISHED) {
            sched_remove(&ctx->s, ctx->batch[i]);
            ctx->loop.wm.decode_requests[OUTCOME_OK]++;
        }
    /* One step = one token for each running sequence: its duration is every
     * sequence's inter-token latency at the decoder. */
    histogram_observe(&ctx->loop.wm.decode_step_duration, tn_now_s() - t0);
    histogram_observe(&ctx->loop.wm.decode_step_batch, (double)n);
    ctx->loop.wm.decode_output_tokens += (uint64_t)n;
    worker_loop_count_tokens(&ctx->loop, (uint64_t)n);
    return n;
}
