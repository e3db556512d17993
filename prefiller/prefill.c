/* One prefill job: the prompt through the model in chunks, the first token,
 * the KV push to the decoder, the report to the router. */
#include "prefiller/prefiller.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/status.h"
#include "router/util.h"

#define WHO "prefiller"

void prefill_job_free(prefill_job *job)
{
    if (!job)
        return;
    free(job->tokens);
    if (job->dest)
        tandem__v1__kv_destination__free_unpacked(job->dest, NULL);
    free(job);
}

static void report(prefiller_ctx *ctx, const prefill_job *job, int32_t first, uint64_t rng,
                   int transfer, int code, const char *msg, double t_prefill, double t_xfer)
{
    Tandem__V1__Error e = TANDEM__V1__ERROR__INIT;
    Tandem__V1__PrefillResult r = TANDEM__V1__PREFILL_RESULT__INIT;
    r.request_id = (char *)job->id;
    r.first_token = first;
    r.rng_state = rng;
    r.transfer = transfer;
    r.prompt_len = (uint32_t)job->n_tokens;
    r.prefill_seconds = t_prefill;
    r.transfer_seconds = t_xfer;
    if (code) {
        e.code = code;
        e.message = (char *)msg;
        e.request_id = (char *)job->id;
        r.error = &e;
        tn_log(WHO, "request %s: %s", job->id, msg);
    }
    Tandem__V1__WorkerMessage m = TANDEM__V1__WORKER_MESSAGE__INIT;
    m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_PREFILL_RESULT;
    m.prefill_result = &r;
    link_send(&ctx->link, &m);
}

/* Runs the prompt through the model, a chunk per forward call, answering
 * the router between chunks. Returns 0, 1 if cancelled, or a negative
 * status (message in err). */
static int run_prompt(prefiller_ctx *ctx, prefill_job *job, const int32_t *pages, int n_pages,
                      char *err, size_t errlen)
{
    int chunk = ctx->cfg.chunk_tokens;
    for (int off = 0; off < job->n_tokens; off += chunk) {
        int n = job->n_tokens - off < chunk ? job->n_tokens - off : chunk;
        tm_seq_step step = {.tokens = job->tokens + off, .n_tokens = n, .n_cached = off,
                            .pages = pages, .n_pages = n_pages};
        int rc = tm_forward(ctx->model, &ctx->kv, &step, 1, ctx->logits, NULL);
        if (rc != KN_OK) {
            snprintf(err, errlen, "forward pass failed at prompt token %d: %s", off,
                     kn_status_str(rc));
            return rc;
        }
        prefiller_service(ctx, 0);
        if (job->cancelled)
            return 1;
    }
    return 0;
}

void prefiller_run_job(prefiller_ctx *ctx, prefill_job *job)
{
    const int INTERNAL = TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL;
    const int CANCELLED = TANDEM__V1__ERROR_CODE__ERROR_CODE_CANCELLED;
    const int NONE = TANDEM__V1__TRANSFER_STATUS__TRANSFER_STATUS_NONE;
    char err[512] = "";
    double t0 = tn_now_s();
    int n_pages = tm_kv_pages_for(&ctx->kv, job->n_tokens);
    int32_t *pages = malloc((size_t)(n_pages > 0 ? n_pages : 1) * sizeof *pages);
    if (!pages || n_pages <= 0 || tm_kv_alloc_pages(&ctx->kv, n_pages, pages) != KN_OK) {
        /* Jobs run one at a time and were checked against the cache's size. */
        report(ctx, job, 0, 0, NONE, INTERNAL, "cannot allocate KV pages for the prompt", 0, 0);
        free(pages);
        return;
    }
    int rc = run_prompt(ctx, job, pages, n_pages, err, sizeof err);
    double t1 = tn_now_s();
    if (rc != 0) {
        report(ctx, job, 0, 0, NONE, rc > 0 ? CANCELLED : INTERNAL,
               rc > 0 ? "cancelled during prefill" : err, t1 - t0, 0);
        tm_kv_release_pages(&ctx->kv, pages, n_pages);
        free(pages);
        return;
    }
    ctx->tokens_total += (uint64_t)job->n_tokens;
    ctx->window_tokens += (uint64_t)job->n_tokens;
    uint64_t rng = kn_rng_seed(job->seed);
    int32_t first = 0;
    rc = kn_sample_cpu(&first, ctx->logits, 1, ctx->mc->vocab_size, &job->sampling, &rng);
    if (rc != KN_OK) {
        snprintf(err, sizeof err, "sampling the first token failed: %s", kn_status_str(rc));
        report(ctx, job, 0, 0, NONE, INTERNAL, err, t1 - t0, 0);
        tm_kv_release_pages(&ctx->kv, pages, n_pages);
        free(pages);
        return;
    }
    /* The decoder's pages get the prompt's KV; it continues from there. */
    kv_push *push = NULL;
    int ok = 0;
    if (kv_push_start(ctx->pusher, job->dest, job->key, pages, job->n_tokens,
                      ctx->cfg.transfer_timeout_ms, &push, err, sizeof err) == 0) {
        int cancel_sent = 0;
        while (!kv_push_poll(ctx->pusher, push, &ok, err, sizeof err)) {
            prefiller_service(ctx, 1);
            if (job->cancelled && !cancel_sent) {
                kv_push_cancel(ctx->pusher, push);
                cancel_sent = 1;
            }
        }
        kv_push_release(ctx->pusher, push);
    }
    double t2 = tn_now_s();
    tm_kv_release_pages(&ctx->kv, pages, n_pages);
    free(pages);
    if (!ok) {
        int code = job->cancelled ? CANCELLED : TANDEM__V1__ERROR_CODE__ERROR_CODE_TRANSFER_FAILED;
        char msg[600];
        snprintf(msg, sizeof msg, "KV transfer to %s failed: %s", job->dest->decoder_id, err);
        report(ctx, job, first, rng, TANDEM__V1__TRANSFER_STATUS__TRANSFER_STATUS_FAILED, code,
               job->cancelled ? "cancelled during the KV transfer" : msg, t1 - t0, t2 - t1);
        return;
    }
    report(ctx, job, first, rng, TANDEM__V1__TRANSFER_STATUS__TRANSFER_STATUS_COMPLETE, 0, NULL,
           t1 - t0, t2 - t1);
}
