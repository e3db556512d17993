/* The router's side of a request's journey through the workers: placement,
 * every message from prefillers and decoders, cancellation and worker
 * failure. Runs on the core thread with the context lock held. */
#include "router/router.h"

#include <zmq.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/kv_cache.h"
#include "router/placement.h"
#include "common/sys.h"
#include "worker/worker_sampling.h"

#define WHO "router"

static int send_worker(router_ctx *ctx, const char *worker, const Tandem__V1__WorkerMessage *m)
{
    if (wire_send(ctx->worker_sock, worker, strlen(worker), &m->base, ZMQ_DONTWAIT) != 0) {
        tn_log(WHO, "send to worker %s failed: %s", worker, strerror(errno));
        return -1;
    }
    return 0;
}

static void send_cancel(router_ctx *ctx, const char *worker, const char *request_id, int release_kv)
{
    Tandem__V1__Cancel c = TANDEM__V1__CANCEL__INIT;
    c.request_id = (char *)request_id;
    c.release_kv = release_kv;
    Tandem__V1__WorkerMessage m = TANDEM__V1__WORKER_MESSAGE__INIT;
    m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_CANCEL;
    m.cancel = &c;
    send_worker(ctx, worker, &m);
}

static void send_error(router_ctx *ctx, const char *rid, size_t rid_len, int code,
                       const char *request_id, const char *msg)
{
    Tandem__V1__Error e = TANDEM__V1__ERROR__INIT;
    e.code = code;
    e.message = (char *)msg;
    e.request_id = (char *)(request_id ? request_id : "");
    Tandem__V1__WorkerMessage m = TANDEM__V1__WORKER_MESSAGE__INIT;
    m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_ERROR;
    m.error = &e;
    wire_send(ctx->worker_sock, rid, rid_len, &m.base, ZMQ_DONTWAIT);
}

/* A send to w failed: ZeroMQ has no connection for its id (the process died
 * or restarted and has not registered again). Placement skips it until a
 * message from it arrives; the request the send was for is placed again. */
static void mark_unreachable(router_worker *w)
{
    if (!w->unreachable)
        tn_log(WHO, "worker %s is unreachable: placing nothing on it until it is heard from",
               w->id);
    w->unreachable = 1;
}

/* Releases what the router counted for r on its workers (the entries it was
 * counted on: a worker that was replaced took its counts with it). */
static void release_prefiller(router_ctx *ctx, router_request *r)
{
    if (!r->on_prefiller)
        return;
    r->on_prefiller = 0;
    router_worker *w = workers_find_serial(&ctx->workers, r->prefiller, r->prefiller_serial);
    if (w) {
        w->in_flight--;
        w->assigned_input_tokens -= (uint64_t)r->assigned_tokens;
    }
}

static void release_decoder(router_ctx *ctx, router_request *r)
{
    if (!r->on_decoder)
        return;
    r->on_decoder = 0;
    router_worker *w = workers_find_serial(&ctx->workers, r->decoder, r->decoder_serial);
    if (w) {
        w->in_flight--;
        w->pages_committed -= r->pages_committed;
    }
}

static void unhold(router_ctx *ctx, router_request *r);
static void start_over(router_ctx *ctx, router_request *r, int next_attempt, const char *why);

/* f leaves its leader's group (it was placed on its own, ended, or the
 * leader's prefill is done and f decodes as a sequence of its own). */
static void group_unlink(router_request *f)
{
    router_request *l = f->leader;
    if (!l)
        return;
    for (int i = 0; i < l->n_followers; i++)
        if (l->followers[i] == f) {
            l->followers[i] = l->followers[--l->n_followers];
            break;
        }
    f->leader = NULL;
    request_unref(l);
}

/* The leader r leaves the stages its followers ride on (placed again,
 * ended) before its prefill delivered: each follower still riding is
 * dropped at the decoder and placed on its own (or cancelled with it). */
static void group_release(router_ctx *ctx, router_request *r, int cancelled, const char *why)
{
    while (r->n_followers > 0) {
        router_request *f = r->followers[r->n_followers - 1];
        f->refs++;
        group_unlink(f);
        if (!f->finished && f->stage == STAGE_RIDING) {
            send_cancel(ctx, f->decoder, f->wid, 1);
            if (cancelled) {
                dispatch_finish(ctx, f, TANDEM__V1__FINISH_REASON__FINISH_REASON_CANCELLED, NULL);
            } else {
                char w[WIRE_MAX_ID + 200];
                snprintf(w, sizeof w, "its leader %s %s", r->id, why);
                start_over(ctx, f, 0, w);
            }
        }
        request_unref(f);
    }
}

void dispatch_finish(router_ctx *ctx, router_request *r, int reason, const api_error *err)
{
    if (r->finished)
        return;
    if (r->stage == STAGE_HELD)
        unhold(ctx, r);
    if (reason != TANDEM__V1__FINISH_REASON__FINISH_REASON_ERROR &&
        reason != TANDEM__V1__FINISH_REASON__FINISH_REASON_CANCELLED)
        request_finish_output(r);
    r->finished = 1;
    r->finish_reason = reason;
    if (err)
        r->error = *err;
    group_unlink(r);
    group_release(ctx, r, reason == TANDEM__V1__FINISH_REASON__FINISH_REASON_CANCELLED,
                  "ended before its first token");
    release_decoder(ctx, r);
    if (!r->zombie) {
        release_prefiller(ctx, r);
        r->stage = STAGE_DONE;
    }
    metrics_api api = r->origin == ORIGIN_RPC ? API_RPC : API_OPENAI;
    metrics_outcome outcome = OUTCOME_OK;
    if (reason == TANDEM__V1__FINISH_REASON__FINISH_REASON_CANCELLED)
        outcome = OUTCOME_CANCELLED;
    else if (reason == TANDEM__V1__FINISH_REASON__FINISH_REASON_ERROR)
        outcome = metrics_outcome_for_status(err ? err->http_status : 500);
    metrics_request_done(&ctx->metrics, api, outcome);
    ctx->metrics.in_flight[api]--;
    metrics_observe(&ctx->metrics.duration, tn_now_s() - r->t_start);
    if (r->origin == ORIGIN_RPC)
        rpc_deliver(ctx, r);
    else
        tn_wakefd_signal(r->notify_fd);
    if (!r->zombie)
        request_table_remove(ctx, r);
}

static void fail(router_ctx *ctx, router_request *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void fail(router_ctx *ctx, router_request *r, int code, const char *fmt, ...)
{
    char msg[WIRE_MAX_ID + 400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    api_error e;
    error_from_code(&e, code, msg);
    tn_log(WHO, "request %s failed: %s", r->id, msg);
    dispatch_finish(ctx, r, TANDEM__V1__FINISH_REASON__FINISH_REASON_ERROR, &e);
}

/* How many times a request is placed again after losing a worker before
 * it fails: enough to ride out a worker crash or two, few enough that a
 * request that kills or stalls every worker it meets does not loop. */
#define MAX_ATTEMPTS 3

static void requeue(router_ctx *ctx, router_request *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Starts r's placement over under a new wire id (late messages about the
 * old one match nothing), after the caller told the workers of the old one
 * to drop it. next_attempt: a worker held it and failed (counts towards
 * MAX_ATTEMPTS); 0: no worker ever got it (a send failed, no prefiller was
 * there to take the reservation), which is no reason to give up. */
static void start_over(router_ctx *ctx, router_request *r, int next_attempt, const char *why)
{
    group_unlink(r);
    group_release(ctx, r, 0, "was placed again");
    release_prefiller(ctx, r);
    release_decoder(ctx, r);
    if (r->n_out >= r->max_tokens) {
        /* Every token arrived; only the end was lost with the worker. */
        dispatch_finish(ctx, r, TANDEM__V1__FINISH_REASON__FINISH_REASON_LENGTH, NULL);
        return;
    }
    if (next_attempt)
        r->attempts++;
    request_rekey(ctx, r);
    r->stage = STAGE_NEW;
    r->prefiller[0] = r->decoder[0] = '\0';
    r->pages_committed = 0;
    tn_log(WHO, "request %s: %s; placing it again as %s (attempt %d, after %d tokens)", r->id,
           why, r->wid, r->attempts + 1, r->n_out);
    dispatch_place(ctx, r);
}

/* A worker holding r failed (died, stopped heartbeating, or the KV transfer
 * to the decoder timed out). The caller has told the surviving worker to
 * drop its part. r starts over on the workers now registered, under a new
 * wire id, resuming after the tokens it already delivered: its client sees
 * a pause, then the rest of the output (see docs/RELIABILITY.md). After
 * MAX_ATTEMPTS placements it fails with code instead. */
static void requeue(router_ctx *ctx, router_request *r, int code, const char *fmt, ...)
{
    char why[WIRE_MAX_ID + 300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    release_prefiller(ctx, r);
    release_decoder(ctx, r);
    if (r->n_out >= r->max_tokens) {
        /* Every token arrived; only the end was lost with the worker. */
        dispatch_finish(ctx, r, TANDEM__V1__FINISH_REASON__FINISH_REASON_LENGTH, NULL);
        return;
    }
    if (r->attempts + 1 >= MAX_ATTEMPTS) {
        fail(ctx, r, code, "%s (gave up after %d attempts)", why, r->attempts + 1);
        return;
    }
    /* Without the router queue (--queue-timeout-ms 0) a request no worker
     * can take fails at once: say why it needed one. */
    if (ctx->cfg.queue_timeout_ms <= 0 &&
        (!workers_serve_model(&ctx->workers, r->model, TANDEM__V1__WORKER_ROLE__WORKER_ROLE_DECODER) ||
         !workers_serve_model(&ctx->workers, r->model, TANDEM__V1__WORKER_ROLE__WORKER_ROLE_PREFILLER))) {
        fail(ctx, r, code, "%s, and no other worker serves model '%s'", why, r->model);
        return;
    }
    start_over(ctx, r, 1, why);
}

/* SamplingParams.logit_bias built from r's biases (freed after sending). */
typedef struct wire_bias {
    Tandem__V1__LogitBias *items;
    Tandem__V1__LogitBias **ptrs;
} wire_bias;

static void wire_bias_free(wire_bias *b)
{
    free(b->items);
    free(b->ptrs);
    b->items = NULL;
    b->ptrs = NULL;
}

static int wire_bias_fill(wire_bias *b, Tandem__V1__SamplingParams *s, const router_request *r)
{
    b->items = NULL;
    b->ptrs = NULL;
    if (r->n_bias == 0)
        return 0;
    b->items = calloc((size_t)r->n_bias, sizeof *b->items);
    b->ptrs = calloc((size_t)r->n_bias, sizeof *b->ptrs);
    if (!b->items || !b->ptrs) {
        wire_bias_free(b);
        return -1;
    }
    for (int i = 0; i < r->n_bias; i++) {
        tandem__v1__logit_bias__init(&b->items[i]);
        b->items[i].token = r->bias_tokens[i];
        b->items[i].bias = r->bias_values[i];
        b->ptrs[i] = &b->items[i];
    }
    s->logit_bias = b->ptrs;
    s->n_logit_bias = (size_t)r->n_bias;
    return 0;
}

/* Penalties, logit_bias and logprobs (engine/sampler.h on the workers). A
 * re-placed attempt prefills the output so far after the prompt
 * (attempt_prompt): output_in_prompt tells the penalties to count those
 * tokens as output. s points into r. */
static void fill_sampling_extras(Tandem__V1__SamplingParams *s, const router_request *r)
{
    s->presence_penalty = r->presence_penalty;
    s->frequency_penalty = r->frequency_penalty;
    s->repetition_penalty = r->repetition_penalty;
    /* Only a penalty counts output (and then the decoder gets the prompt,
     * worker_sampling_needs_prompt): without one the field stays 0. */
    const int penalised = r->presence_penalty != 0.0f || r->frequency_penalty != 0.0f ||
                          r->repetition_penalty != 1.0f;
    s->output_in_prompt = penalised ? (uint32_t)r->n_out : 0;
    s->logprobs = r->logprobs >= 0 || r->score_logprobs;
    s->top_logprobs = r->logprobs > 0 ? (uint32_t)r->logprobs : 0;
    s->prompt_logprobs = r->prompt_logprobs && !r->prompt_lp;
}

/* A new attempt (a worker lost, or the decoder preempted it) draws from a
 * different stream than the first one did (its first draw is a later token
 * of the output). */
static uint64_t attempt_seed(const router_request *r)
{
    return r->seed + (uint64_t)(r->attempts + r->preemptions) * 0x9E3779B97F4A7C15ull;
}

static void fill_sampling(Tandem__V1__SamplingParams *s, const router_request *r)
{
    s->temperature = r->temperature;
    s->top_p = r->top_p;
    s->top_k = r->top_k;
    s->seed = attempt_seed(r);
    fill_sampling_extras(s, r);
    /* structured outputs: a re-placed attempt replays the output so far */
    s->grammar = r->grammar;
    s->n_grammar = (size_t)r->n_grammar;
    s->grammar_prefix = r->grammar ? r->out : NULL;
    s->n_grammar_prefix = r->grammar ? (size_t)r->n_out : 0;
}

/* The prompt the current attempt prefills: the request's prompt, then
 * what earlier attempts generated (the caller frees it when it is not
 * r->prompt). NULL on OOM. */
static int32_t *attempt_prompt(const router_request *r)
{
    if (r->n_out == 0)
        return r->prompt;
    int32_t *p = malloc((size_t)(r->n_prompt + r->n_out) * sizeof *p);
    if (p) {
        memcpy(p, r->prompt, (size_t)r->n_prompt * sizeof *p);
        memcpy(p + r->n_prompt, r->out, (size_t)r->n_out * sizeof *p);
    }
    return p;
}

/* ------------------------------------------------------------ router queue
 * A request no worker can take right now (none registered for its model,
 * or every one draining) waits here, in arrival order, for up to
 * --queue-timeout-ms, instead of failing at once: a worker the autoscaler
 * started, or a replacement, takes it. */

static void hold(router_ctx *ctx, router_request *r, int missing)
{
    r->stage = STAGE_HELD;
    r->held_for = missing;
    if (r->held_since <= 0)
        r->held_since = tn_now_s();
    r->held_next = NULL;
    if (ctx->held_tail)
        ctx->held_tail->held_next = r;
    else
        ctx->held_head = r;
    ctx->held_tail = r;
    ctx->n_held[missing]++;
}

static void unhold(router_ctx *ctx, router_request *r)
{
    router_request **p = &ctx->held_head, *prev = NULL;
    while (*p && *p != r) {
        prev = *p;
        p = &(*p)->held_next;
    }
    if (!*p)
        return;
    *p = r->held_next;
    if (ctx->held_tail == r)
        ctx->held_tail = prev;
    r->held_next = NULL;
    ctx->n_held[r->held_for]--;
    r->stage = STAGE_NEW;
}

/* Holds r for what is missing, or fails it when holding is off, the router
 * is stopping, or it has waited long enough. */
static void hold_or_fail(router_ctx *ctx, router_request *r, int missing, double waited_s)
{
    const char *what = missing == AS_POOL_PREFILL ? "prefiller" : "decoder";
    if (ctx->cfg.queue_timeout_ms <= 0 || ctx->stop_final) {
        fail(ctx, r, TANDEM__V1__ERROR_CODE__ERROR_CODE_NO_CAPACITY,
             "no %s is registered for model '%s'", what, r->model);
    } else if (waited_s * 1000.0 >= ctx->cfg.queue_timeout_ms) {
        fail(ctx, r, TANDEM__V1__ERROR_CODE__ERROR_CODE_NO_CAPACITY,
             "no %s for model '%s' became available within %d ms", what, r->model,
             ctx->cfg.queue_timeout_ms);
    } else {
        hold(ctx, r, missing);
    }
}

void dispatch_retry_held(router_ctx *ctx)
{
    router_request *r = ctx->held_head;
    ctx->held_head = ctx->held_tail = NULL;
    for (int i = 0; i < AS_POOL_COUNT; i++)
        ctx->n_held[i] = 0;
    while (r) {
        router_request *next = r->held_next;
        r->held_next = NULL;
        r->stage = STAGE_NEW;
        dispatch_place(ctx, r); /* places it, holds it again (in order) or fails it */
        r = next;
    }
}

/* Followers that can ride on leader r's first placement as decoder
 * branches: fresh (not placed, no output), as r is. The others are
 * unlinked and placed on their own when their turn comes. Returns how
 * many are left in r->followers. */
static int riders(router_request *r)
{
    int fresh = r->n_out == 0 && r->attempts == 0 && r->preemptions == 0;
    for (int i = r->n_followers - 1; i >= 0; i--) {
        router_request *f = r->followers[i];
        if (!fresh || f->finished || f->stage != STAGE_NEW || f->n_out || f->attempts ||
            f->preemptions)
            group_unlink(f);
    }
    return r->n_followers;
}

void dispatch_place(router_ctx *ctx, router_request *r)
{
    if (r->stage == STAGE_RIDING)
        return; /* placed with its leader */
    double waited = r->held_since > 0 ? tn_now_s() - r->held_since : 0;
    if (ctx->stop_final) {
        fail(ctx, r, TANDEM__V1__ERROR_CODE__ERROR_CODE_NO_CAPACITY, "the router is shutting down");
        return;
    }
    router_worker *d = NULL, *p = NULL;
    /* A request placed again after losing a worker continues from the
     * tokens it already produced: they join the prompt (attempt_prompt) and
     * count against max_tokens. */
    int prompt_len = r->n_prompt + r->n_out, max_tokens = r->max_tokens - r->n_out;
    place_status st = placement_pick_decoder(&ctx->workers, r->model, prompt_len,
                                             max_tokens, &d);
    if (st == PLACE_NO_WORKER) {
        hold_or_fail(ctx, r, AS_POOL_DECODE, waited);
        return;
    }
    if (st == PLACE_OK && placement_pick_prefiller(&ctx->workers, r->model, &p) != PLACE_OK) {
        hold_or_fail(ctx, r, AS_POOL_PREFILL, waited);
        return;
    }
    if (st == PLACE_NEVER_FITS) {
        fail(ctx, r, TANDEM__V1__ERROR_CODE__ERROR_CODE_KV_NEVER_FITS,
             "the request needs more KV cache (%d prompt + %d output tokens) than any decoder has",
             r->n_prompt, r->max_tokens);
        return;
    }
    Tandem__V1__SamplingParams sp = TANDEM__V1__SAMPLING_PARAMS__INIT;
    fill_sampling(&sp, r);
    wire_bias bias;
    int32_t *pen_prompt = NULL;
    if (wire_bias_fill(&bias, &sp, r) != 0 ||
        (worker_sampling_needs_prompt(&sp) && !(pen_prompt = attempt_prompt(r)))) {
        wire_bias_free(&bias);
        fail(ctx, r, TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL, "router out of memory");
        return;
    }
    Tandem__V1__DecodeAssignment a = TANDEM__V1__DECODE_ASSIGNMENT__INIT;
    if (pen_prompt) {
        /* Repetition counts the prompt, and a re-placed attempt's earlier
         * output sits at its end: the decoder needs those tokens. */
        a.penalty_prompt = pen_prompt;
        a.n_penalty_prompt = (size_t)prompt_len;
    }
    a.request_id = r->wid;
    a.prompt_len = (uint32_t)prompt_len;
    a.max_tokens = (uint32_t)max_tokens;
    a.stop_token_ids = r->stop_ids;
    a.n_stop_token_ids = (size_t)r->n_stop_ids;
    a.sampling = &sp;
    /* n > 1: the choices still fresh ride along as branches (one prefill) */
    int n_br = riders(r);
    char *br_ids[n_br > 0 ? n_br : 1];
    for (int i = 0; i < n_br; i++)
        br_ids[i] = r->followers[i]->wid;
    if (n_br > 0) {
        a.branch_ids = br_ids;
        a.n_branch_ids = (size_t)n_br;
    }
    Tandem__V1__WorkerMessage m = TANDEM__V1__WORKER_MESSAGE__INIT;
    m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_DECODE_ASSIGNMENT;
    m.decode_assignment = &a;
    int sent = send_worker(ctx, d->id, &m);
    wire_bias_free(&bias);
    if (pen_prompt && pen_prompt != r->prompt)
        free(pen_prompt);
    if (sent != 0) {
        /* The decoder's connection is gone: it never got the request.
         * Placement skips it now, so this ends (another decoder, the router
         * queue, or a failure) within as many rounds as there are decoders. */
        mark_unreachable(d);
        r->stage = STAGE_NEW;
        dispatch_place(ctx, r);
        return;
    }
    snprintf(r->decoder, sizeof r->decoder, "%s", d->id);
    r->decoder_serial = d->serial;
    r->pages_committed = placement_pages_at_admission(prompt_len, max_tokens, d->page_size);
    d->pages_committed += r->pages_committed;
    d->in_flight++;
    r->on_decoder = 1;
    r->stage = STAGE_RESERVING;
    r->t_progress = tn_now_s();
    if (r->attempts == 0 && r->t_assigned_decode == 0)
        metrics_observe(&ctx->metrics.stage[STAGE_T_ROUTER], r->t_progress - r->t_start);
    r->t_assigned_decode = r->t_progress;
    r->t_assigned_prefill = r->t_start_decode = 0;
    r->held_since = 0; /* a later hold (its worker lost) waits afresh */
    for (int i = 0; i < n_br; i++) {
        router_request *f = r->followers[i];
        snprintf(f->decoder, sizeof f->decoder, "%s", d->id);
        f->decoder_serial = d->serial;
        f->pages_committed = 1; /* its prompt pages are the leader's */
        d->pages_committed += 1;
        d->in_flight++;
        f->on_decoder = 1;
        f->stage = STAGE_RIDING;
        f->t_progress = r->t_progress;
    }
    if (n_br > 0)
        tn_log(WHO, "request %s: %d choices on decoder %s as one prefill (%s leads, %d branches)",
               r->id, n_br + 1, d->id, r->wid, n_br);
}

/* w sent a message about its work: it is not stuck. */
static void worker_progress(router_worker *w)
{
    w->last_progress_ms = tn_now_ms();
}

static void on_kv_ready(router_ctx *ctx, router_worker *from, const Tandem__V1__KvReady *k)
{
    worker_progress(from);
    router_request *r = request_find(ctx, k->request_id);
    if (!r || r->finished || r->stage != STAGE_RESERVING || strcmp(r->decoder, from->id) ||
        !k->destination) {
        /* Nobody will prefill into these pages: give them back. */
        send_cancel(ctx, from->id, k->request_id, 1);
        return;
    }
    r->t_progress = tn_now_s();
    router_worker *p = NULL;
    if (placement_pick_prefiller(&ctx->workers, r->model, &p) != PLACE_OK) {
        /* The prefiller went away while the decoder reserved: give the
         * pages back and start over, which holds r in the router queue
         * until a prefiller is there (or fails it at --queue-timeout-ms). */
        send_cancel(ctx, from->id, r->wid, 1);
        start_over(ctx, r, 0, "no prefiller can take it");
        return;
    }
    int32_t *prompt = attempt_prompt(r);
    if (!prompt) {
        send_cancel(ctx, from->id, r->wid, 1);
        fail(ctx, r, TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL, "router out of memory");
        return;
    }
    Tandem__V1__SamplingParams sp = TANDEM__V1__SAMPLING_PARAMS__INIT;
    fill_sampling(&sp, r);
    wire_bias bias;
    if (wire_bias_fill(&bias, &sp, r) != 0) {
        if (prompt != r->prompt)
            free(prompt);
        send_cancel(ctx, from->id, r->wid, 1);
        fail(ctx, r, TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL, "router out of memory");
        return;
    }
    Tandem__V1__PrefillAssignment a = TANDEM__V1__PREFILL_ASSIGNMENT__INIT;
    /* its riding choices draw their first tokens in the same prefill */
    char *br_ids[r->n_followers > 0 ? r->n_followers : 1];
    uint64_t br_seeds[r->n_followers > 0 ? r->n_followers : 1];
    size_t n_br = 0;
    for (int i = 0; i < r->n_followers; i++)
        if (r->followers[i]->stage == STAGE_RIDING && !r->followers[i]->finished) {
            br_ids[n_br] = r->followers[i]->wid;
            br_seeds[n_br++] = attempt_seed(r->followers[i]);
        }
    a.branch_ids = br_ids;
    a.n_branch_ids = n_br;
    a.branch_seeds = br_seeds;
    a.n_branch_seeds = n_br;
    a.request_id = r->wid;
    a.prompt_tokens = prompt;
    a.n_prompt_tokens = (size_t)(r->n_prompt + r->n_out);
    a.sampling = &sp;
    /* The decoder's TransferEngine endpoint travels from the registry, so
     * decoders need not repeat it in every KvReady. */
    Tandem__V1__KvDestination dest = *k->destination;
    if (!dest.transfer_endpoint.len) {
        dest.transfer_endpoint.data = from->endpoint;
        dest.transfer_endpoint.len = from->endpoint_len;
    }
    a.destination = &dest;
    Tandem__V1__WorkerMessage m = TANDEM__V1__WORKER_MESSAGE__INIT;
    m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_PREFILL_ASSIGNMENT;
    m.prefill_assignment = &a;
    /* Stamped before the send: the prefiller may start (and its own
     * prefill + transfer clock run) before this thread returns from it, and
     * the prefill queue stage is the round trip less the prefiller's times. */
    double t_sent = tn_now_s();
    int sent = send_worker(ctx, p->id, &m);
    wire_bias_free(&bias);
    if (prompt != r->prompt)
        free(prompt);
    if (sent != 0) {
        mark_unreachable(p);
        send_cancel(ctx, from->id, r->wid, 1);
        char why[WIRE_MAX_ID + 64];
        snprintf(why, sizeof why, "prefiller %s is unreachable", p->id);
        start_over(ctx, r, 0, why);
        return;
    }
    snprintf(r->prefiller, sizeof r->prefiller, "%s", p->id);
    r->prefiller_serial = p->serial;
    p->in_flight++;
    r->assigned_tokens = r->n_prompt + r->n_out;
    p->assigned_input_tokens += (uint64_t)r->assigned_tokens;
    r->on_prefiller = 1;
    r->stage = STAGE_PREFILLING;
    r->t_assigned_prefill = t_sent;
    if (r->t_assigned_decode > 0)
        metrics_observe(&ctx->metrics.stage[STAGE_T_ADMISSION],
                        r->t_assigned_prefill - r->t_assigned_decode);
}

/* Appends tokens to r and delivers them; ends r if a stop string matched.
 * Returns 1 if r finished here. */
static int deliver_tokens(router_ctx *ctx, router_request *r, const int32_t *toks, int n,
                          Tandem__V1__TokenLogprobs *const *lps, size_t n_lps)
{
    if (request_store_logprobs(r, lps, n_lps, n) != 0) {
        if (r->stage == STAGE_DECODING)
            send_cancel(ctx, r->decoder, r->wid, 1);
        fail(ctx, r, TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL,
             n_lps == (size_t)n ? "router out of memory (logprobs)"
                                : "a worker sent tokens without the logprobs the request asked for");
        return 1;
    }
    int rc = request_append(ctx, r, toks, n);
    if (rc < 0) {
        if (r->stage == STAGE_DECODING)
            send_cancel(ctx, r->decoder, r->wid, 1);
        if (rc == -2)
            fail(ctx, r, TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL,
                 "the model's output breaks its chat format: %s", r->parse_error);
        else
            fail(ctx, r, TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL, "router out of memory");
        return 1;
    }
    if (rc == 1) {
        send_cancel(ctx, r->decoder, r->wid, 1);
        dispatch_finish(ctx, r, TANDEM__V1__FINISH_REASON__FINISH_REASON_STOP_STRING, NULL);
        return 1;
    }
    if (r->origin == ORIGIN_RPC)
        rpc_deliver(ctx, r);
    else
        tn_wakefd_signal(r->notify_fd);
    return 0;
}

/* A successful prefill's stages: the prefiller's own compute and transfer
 * times, and the rest of the assignment's round trip as its queue. */
static void observe_prefill_stages(router_ctx *ctx, router_request *r,
                                   const Tandem__V1__PrefillResult *res)
{
    double now = tn_now_s();
    if (r->t_assigned_prefill > 0) {
        double queue = now - r->t_assigned_prefill - res->prefill_seconds - res->transfer_seconds;
        metrics_observe(&ctx->metrics.stage[STAGE_T_PREFILL_QUEUE], queue > 0 ? queue : 0);
        metrics_observe(&ctx->metrics.stage[STAGE_T_PREFILL], res->prefill_seconds);
        metrics_observe(&ctx->metrics.stage[STAGE_T_KV_TRANSFER], res->transfer_seconds);
    }
    r->t_start_decode = now;
}

static void on_prefill_result(router_ctx *ctx, router_worker *from,
                              const Tandem__V1__PrefillResult *res)
{
    worker_progress(from);
    router_request *r = request_find(ctx, res->request_id);
    if (!r || strcmp(r->prefiller, from->id) || r->stage != STAGE_PREFILLING)
        return; /* its decoder is gone (and with it the pages) */
    release_prefiller(ctx, r);
    r->t_progress = tn_now_s();
    /* The decoder's reservations move too: the pages of this one are about
     * to be decoded and freed, so requests waiting for its room are not
     * stuck while prefills for it complete. */
    router_worker *dec = workers_find_serial(&ctx->workers, r->decoder, r->decoder_serial);
    if (dec)
        worker_progress(dec);
    if (r->zombie) {
        /* Cancelled while prefilling: the transfer is over now either way. */
        send_cancel(ctx, r->decoder, r->wid, 1);
        r->zombie = 0;
        r->stage = STAGE_DONE;
        request_table_remove(ctx, r);
        return;
    }
    int code = res->error ? res->error->code : 0;
    if (code == 0 && res->transfer != TANDEM__V1__TRANSFER_STATUS__TRANSFER_STATUS_COMPLETE)
        code = TANDEM__V1__ERROR_CODE__ERROR_CODE_TRANSFER_FAILED;
    if (code != 0) {
        const char *why = res->error && res->error->message[0] ? res->error->message
                                                                 : "KV transfer incomplete";
        send_cancel(ctx, r->decoder, r->wid, 1);
        if (code == TANDEM__V1__ERROR_CODE__ERROR_CODE_TRANSFER_FAILED)
            requeue(ctx, r, code, "prefill on %s failed: %s", from->id, why);
        else
            fail(ctx, r, code, "prefill on %s failed: %s", from->id, why);
        return;
    }
    observe_prefill_stages(ctx, r, res);
    Tandem__V1__StartDecode s = TANDEM__V1__START_DECODE__INIT;
    s.request_id = r->wid;
    s.first_token = res->first_token;
    s.rng_state = res->rng_state;
    Tandem__V1__WorkerMessage m = TANDEM__V1__WORKER_MESSAGE__INIT;
    m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_START_DECODE;
    m.start_decode = &s;
    r->stage = STAGE_DECODING;
    if (request_store_prompt_logprobs(r, res->prompt_logprobs, res->n_prompt_logprobs) != 0) {
        send_cancel(ctx, r->decoder, r->wid, 1);
        fail(ctx, r, TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL,
             "prefiller %s sent %zu prompt logprobs for a prompt of %d tokens (echo)", from->id,
             res->n_prompt_logprobs, r->n_prompt);
        return;
    }
    int32_t first = res->first_token;
    Tandem__V1__TokenLogprobs *first_lp = res->first_logprobs;
    /* the riding choices' first tokens go out first: each is a request of
     * its own to the client (a stop string may end one here) */
    size_t nb = res->n_branch_ids;
    if (res->n_branch_first_tokens != nb || res->n_branch_rng_states != nb ||
        (res->n_branch_first_logprobs && res->n_branch_first_logprobs != nb))
        nb = 0; /* malformed: the riders are placed on their own below */
    char *br_ids[nb > 0 ? nb : 1];
    int32_t br_tok[nb > 0 ? nb : 1];
    uint64_t br_rng[nb > 0 ? nb : 1];
    router_request *br_req[nb > 0 ? nb : 1];
    size_t n_start = 0;
    for (size_t i = 0; i < nb; i++) {
        router_request *f = request_find(ctx, res->branch_ids[i]);
        if (!f || f->leader != r || f->stage != STAGE_RIDING || f->finished)
            continue;
        int32_t t = res->branch_first_tokens[i];
        Tandem__V1__TokenLogprobs *lp = res->n_branch_first_logprobs ? res->branch_first_logprobs[i]
                                                                     : NULL;
        f->stage = STAGE_DECODING;
        f->t_progress = r->t_progress;
        group_unlink(f);
        f->refs++;
        /* echo with logprobs: the prompt is the leader's, so are its logprobs */
        if (request_store_prompt_logprobs(f, res->prompt_logprobs, res->n_prompt_logprobs) != 0) {
            send_cancel(ctx, f->decoder, f->wid, 1);
            fail(ctx, f, TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL,
                 "prefiller %s sent %zu prompt logprobs for a prompt of %d tokens (echo)",
                 from->id, res->n_prompt_logprobs, f->n_prompt);
            request_unref(f);
            continue;
        }
        if (deliver_tokens(ctx, f, &t, 1, &lp, lp ? 1 : 0)) {
            request_unref(f);
            continue;
        }
        br_req[n_start] = f;
        br_ids[n_start] = f->wid;
        br_tok[n_start] = t;
        br_rng[n_start++] = res->branch_rng_states[i];
    }
    s.branch_ids = br_ids;
    s.n_branch_ids = n_start;
    s.branch_first_tokens = br_tok;
    s.n_branch_first_tokens = n_start;
    s.branch_rng_states = br_rng;
    s.n_branch_rng_states = n_start;
    /* riders the prefill drew nothing for are placed on their own */
    group_release(ctx, r, 0, "had its prefill without it");
    int sent = -1;
    if (!deliver_tokens(ctx, r, &first, 1, &first_lp, first_lp ? 1 : 0))
        sent = send_worker(ctx, r->decoder, &m);
    for (size_t i = 0; i < n_start; i++) {
        router_request *f = br_req[i];
        if (sent != 0 && !f->finished) {
            /* no StartDecode for the branches (the leader ended at its
             * first token, or its decoder is gone): each continues on its
             * own from its first token */
            send_cancel(ctx, f->decoder, f->wid, 1);
            start_over(ctx, f, 0, "its leader's decode did not start");
        }
        request_unref(f);
    }
    if (r->finished)
        return;
    if (sent != 0) {
        /* The decoder holding its KV is gone: a lost worker for r. */
        router_worker *d = workers_find_serial(&ctx->workers, r->decoder, r->decoder_serial);
        if (d)
            mark_unreachable(d);
        requeue(ctx, r, TANDEM__V1__ERROR_CODE__ERROR_CODE_WORKER_LOST,
                "decoder %s is unreachable", r->decoder);
        return;
    }
}

static void on_token_batch(router_ctx *ctx, router_worker *from, const Tandem__V1__TokenBatch *b)
{
    worker_progress(from);
    double now = tn_now_s();
    for (size_t i = 0; i < b->n_chunks; i++) {
        const Tandem__V1__TokenChunk *c = b->chunks[i];
        router_request *r = request_find(ctx, c->request_id);
        if (!r || r->finished || strcmp(r->decoder, from->id) || r->stage != STAGE_DECODING) {
            if (c->finish_reason == TANDEM__V1__FINISH_REASON__FINISH_REASON_NONE)
                send_cancel(ctx, from->id, c->request_id, 1);
            continue;
        }
        r->t_progress = now;
        if (c->n_tokens && r->t_start_decode > 0) {
            metrics_observe(&ctx->metrics.stage[STAGE_T_FIRST_DECODE], now - r->t_start_decode);
            r->t_start_decode = 0;
        }
        if (c->n_tokens &&
            deliver_tokens(ctx, r, c->tokens, (int)c->n_tokens, c->logprobs, c->n_logprobs))
            continue;
        if (c->finish_reason == TANDEM__V1__FINISH_REASON__FINISH_REASON_ERROR) {
            fail(ctx, r, c->error ? c->error->code : TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL,
                 "decoder %s: %s", from->id, c->error ? c->error->message : "failed");
        } else if (c->finish_reason != TANDEM__V1__FINISH_REASON__FINISH_REASON_NONE) {
            dispatch_finish(ctx, r, c->finish_reason, NULL);
        }
    }
}

/* The decoder ran out of KV pages and took r's (decoder/scheduler.h): it
 * has forgotten r, and every token r produced there has arrived (the
 * TokenBatches came first on the same connection). r is placed again with
 * prompt + output as its prompt, like a request whose worker was lost, but
 * this is no failure: it does not count towards MAX_ATTEMPTS. */
static void on_preempted(router_ctx *ctx, router_worker *from, const Tandem__V1__Preempted *p)
{
    worker_progress(from);
    router_request *r = request_find(ctx, p->request_id);
    if (!r || r->finished || strcmp(r->decoder, from->id) || r->stage != STAGE_DECODING)
        return; /* ended or placed again meanwhile; the decoder holds nothing */
    ctx->metrics.preemptions++;
    r->preemptions++;
    char why[WIRE_MAX_ID + 300];
    snprintf(why, sizeof why, "decoder %s preempted it (%s)", from->id,
             p->reason && p->reason[0] ? p->reason : "no reason given");
    start_over(ctx, r, 0, why);
}

static void on_worker_error(router_ctx *ctx, router_worker *from, const Tandem__V1__Error *e)
{
    tn_log(WHO, "worker %s reports error %d for request '%s': %s", from->id, (int)e->code,
           e->request_id, e->message);
    if (!e->request_id[0])
        return;
    router_request *r = request_find(ctx, e->request_id);
    if (!r || r->finished)
        return;
    if (!strcmp(r->decoder, from->id) && r->stage == STAGE_PREFILLING)
        send_cancel(ctx, r->prefiller, r->wid, 0);
    if (!strcmp(r->decoder, from->id) || !strcmp(r->prefiller, from->id))
        fail(ctx, r, e->code ? (int)e->code : TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL,
             "%s: %s", from->id, e->message);
}

/* Tells worker `to` about worker `about` of the other role (or that it is
 * gone): its TransferEngine endpoint, so the two connect before traffic. */
static void send_transfer_peer(router_ctx *ctx, const router_worker *to,
                               const router_worker *about, int removed)
{
    Tandem__V1__TransferPeer tp = TANDEM__V1__TRANSFER_PEER__INIT;
    tp.worker_id = (char *)about->id;
    tp.transfer_endpoint.data = about->endpoint;
    tp.transfer_endpoint.len = about->endpoint_len;
    tp.removed = removed;
    Tandem__V1__WorkerMessage m = TANDEM__V1__WORKER_MESSAGE__INIT;
    m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_TRANSFER_PEER;
    m.transfer_peer = &tp;
    send_worker(ctx, to->id, &m);
}

/* Introduces w to the workers of the other role serving its model, and
 * them to w, so every decoder knows every prefiller's TransferEngine (to
 * acknowledge its pushes) and every prefiller connects to every decoder
 * when it is introduced, not on its first push: UCX's connection set-up
 * then finishes off the request path (docs/RELIABILITY.md, UCX wire-up).
 * removed: w is gone; only the others are told. */
static void introduce(router_ctx *ctx, const router_worker *w, int removed)
{
    for (int i = 0; i < ctx->workers.n; i++) {
        const router_worker *o = ctx->workers.w[i];
        if (o == w || o->role == w->role || strcmp(o->model, w->model))
            continue;
        send_transfer_peer(ctx, o, w, removed);
        if (!removed)
            send_transfer_peer(ctx, w, o, 0);
    }
}

static void worker_lost(router_ctx *ctx, const char *id, uint64_t serial, const char *why);

static const char *role_name(int role)
{
    return role == TANDEM__V1__WORKER_ROLE__WORKER_ROLE_PREFILLER ? "prefiller" : "decoder";
}

/* Removes worker i from the registry and places its work again: the other
 * role's workers hear it is gone (TransferPeer removed), its counts go with
 * the entry, and every request it held starts over. */
static void drop_worker(router_ctx *ctx, int i, const char *why)
{
    router_worker *w = ctx->workers.w[i];
    char id[WIRE_MAX_ID + 1];
    snprintf(id, sizeof id, "%s", w->id);
    uint64_t serial = w->serial;
    introduce(ctx, w, 1);
    workers_remove_at(&ctx->workers, i);
    worker_lost(ctx, id, serial, why);
}

static void on_register(router_ctx *ctx, const char *rid, size_t rid_len,
                        const Tandem__V1__Register *reg)
{
    char err[512];
    if (workers_is_retired(&ctx->workers, rid, rid_len, reg->incarnation)) {
        /* A process that a newer one replaced (it was frozen, not dead):
         * its work was placed elsewhere; two processes under one id cannot
         * both serve. */
        snprintf(err, sizeof err, "worker %.*s incarnation %016llx was replaced by a newer "
                 "process under the same id; refusing it", (int)rid_len, rid,
                 (unsigned long long)reg->incarnation);
        tn_log(WHO, "registration refused: %s", err);
        send_error(ctx, rid, rid_len, TANDEM__V1__ERROR_CODE__ERROR_CODE_WORKER_REPLACED, NULL, err);
        return;
    }
    /* Same id, new process (a scaler restarted a dead worker before its
     * heartbeats lapsed): the old process is gone with its KV cache and
     * queue, and the new one knows none of its requests. The old entry
     * leaves (with its counts), the new one registers, and then the old
     * one's requests start over at once, on the new process or elsewhere,
     * rather than after --worker-timeout-ms or never. */
    char old_id[WIRE_MAX_ID + 1] = "", why[WIRE_MAX_ID + 128] = "";
    uint64_t old_serial = 0;
    for (int i = 0; workers_is_restart(&ctx->workers, rid, rid_len, reg) && i < ctx->workers.n; i++) {
        router_worker *old = ctx->workers.w[i];
        if (old->id_len != rid_len || memcmp(old->id, rid, rid_len))
            continue;
        snprintf(why, sizeof why, "%s %s restarted (incarnation %016llx replaced by %016llx)",
                 role_name(old->role), old->id, (unsigned long long)old->incarnation,
                 (unsigned long long)reg->incarnation);
        tn_log(WHO, "%s: placing the old process's %d requests again", why, old->in_flight);
        snprintf(old_id, sizeof old_id, "%s", old->id);
        old_serial = old->serial;
        workers_retire(&ctx->workers, old);
        introduce(ctx, old, 1);
        workers_remove_at(&ctx->workers, i);
        break;
    }
    router_worker *w = workers_register(&ctx->workers, rid, rid_len, reg, tn_now_ms(), err,
                                        sizeof err);
    if (!w) {
        tn_log(WHO, "registration refused: %s", err);
        send_error(ctx, rid, rid_len, TANDEM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT, NULL, err);
        if (old_serial)
            worker_lost(ctx, old_id, old_serial, why);
        return;
    }
    tn_log(WHO, "registered %s %s (model %s, vocab %d, context %d, page %d, pages %d)",
           w->role == TANDEM__V1__WORKER_ROLE__WORKER_ROLE_PREFILLER ? "prefiller" : "decoder",
           w->id, w->model, w->vocab_size, w->max_context, w->page_size, w->kv_pages_total);
    Tandem__V1__RegisterAck ack = TANDEM__V1__REGISTER_ACK__INIT;
    ack.worker_id = w->id;
    ack.heartbeat_interval_ms = (uint32_t)ctx->cfg.heartbeat_ms;
    Tandem__V1__WorkerMessage m = TANDEM__V1__WORKER_MESSAGE__INIT;
    m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_REGISTER_ACK;
    m.register_ack = &ack;
    send_worker(ctx, w->id, &m);
    introduce(ctx, w, 0);
    if (old_serial)
        worker_lost(ctx, old_id, old_serial, why);
    if (ctx->held_head)
        dispatch_retry_held(ctx); /* what waited for a worker like this one */
}

/* A draining worker that holds nothing asks to leave. It may not know of
 * assignments still on the wire to it (sent before its drain notice
 * arrived): the router's accounting does, and while it counts any the
 * answer is "not yet"; the assignments reach the worker before the answer,
 * so it finishes them and asks again. */
static void on_deregister(router_ctx *ctx, router_worker *w)
{
    Tandem__V1__DeregisterAck ack = TANDEM__V1__DEREGISTER_ACK__INIT;
    char reason[128] = "";
    Tandem__V1__WorkerMessage m = TANDEM__V1__WORKER_MESSAGE__INIT;
    m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_DEREGISTER_ACK;
    m.deregister_ack = &ack;
    if (w->in_flight > 0) {
        snprintf(reason, sizeof reason, "%d requests are still assigned to it", w->in_flight);
        ack.reason = reason;
        send_worker(ctx, w->id, &m);
        return;
    }
    ack.accepted = 1;
    ack.reason = reason;
    send_worker(ctx, w->id, &m);
    tn_log(WHO, "worker %s drained and deregistered", w->id);
    introduce(ctx, w, 1);
    for (int i = 0; i < ctx->workers.n; i++)
        if (ctx->workers.w[i] == w) {
            workers_remove_at(&ctx->workers, i);
            break;
        }
}

void dispatch_worker_message(router_ctx *ctx, const char *rid, size_t rid_len,
                             const Tandem__V1__WorkerMessage *m)
{
    if (m->body_case == TANDEM__V1__WORKER_MESSAGE__BODY_REGISTER && m->register_) {
        on_register(ctx, rid, rid_len, m->register_);
        return;
    }
    router_worker *w = workers_find(&ctx->workers, rid, rid_len);
    if (!w) {
        /* A worker we do not know (the router restarted, or it expired):
         * it re-registers when told. */
        send_error(ctx, rid, rid_len, TANDEM__V1__ERROR_CODE__ERROR_CODE_UNKNOWN_WORKER, NULL,
                   "unknown worker: register first");
        return;
    }
    w->last_seen_ms = tn_now_ms();
    if (w->unreachable) {
        tn_log(WHO, "worker %s is reachable again", w->id);
        w->unreachable = 0;
    }
    switch (m->body_case) {
    case TANDEM__V1__WORKER_MESSAGE__BODY_HEARTBEAT:
        if (m->heartbeat) {
            int rc = workers_heartbeat(w, m->heartbeat, w->last_seen_ms);
            if (rc == 1)
                tn_log(WHO, "worker %s is draining: placing nothing new on it (%d requests left)",
                       w->id, w->in_flight);
            else if (rc < 0)
                tn_log(WHO, "worker %s sent malformed metrics (histogram buckets or outcomes): ignored",
                       w->id);
        }
        break;
    case TANDEM__V1__WORKER_MESSAGE__BODY_DEREGISTER:
        on_deregister(ctx, w);
        break;
    case TANDEM__V1__WORKER_MESSAGE__BODY_KV_READY:
        if (m->kv_ready)
            on_kv_ready(ctx, w, m->kv_ready);
        break;
    case TANDEM__V1__WORKER_MESSAGE__BODY_PREFILL_RESULT:
        if (m->prefill_result)
            on_prefill_result(ctx, w, m->prefill_result);
        break;
    case TANDEM__V1__WORKER_MESSAGE__BODY_TOKEN_BATCH:
        if (m->token_batch)
            on_token_batch(ctx, w, m->token_batch);
        break;
    case TANDEM__V1__WORKER_MESSAGE__BODY_ERROR:
        if (m->error)
            on_worker_error(ctx, w, m->error);
        break;
    case TANDEM__V1__WORKER_MESSAGE__BODY_PREEMPTED:
        if (m->preempted)
            on_preempted(ctx, w, m->preempted);
        break;
    default:
        tn_log(WHO, "worker %s sent an unexpected message (case %d)", w->id, (int)m->body_case);
        break;
    }
}

void dispatch_cancel(router_ctx *ctx, router_request *r)
{
    if (r->finished)
        return;
    switch (r->stage) {
    case STAGE_RESERVING:
    case STAGE_DECODING:
    case STAGE_RIDING: /* a branch: its pages are shared, never freed under a prefill */
        /* No prefiller writes into its pages any more: release at once. */
        send_cancel(ctx, r->decoder, r->wid, 1);
        break;
    case STAGE_PREFILLING:
        /* The prefiller may be writing KV into the decoder's pages; they are
         * released when it reports (or dies). */
        send_cancel(ctx, r->prefiller, r->wid, 0);
        r->zombie = 1;
        break;
    default:
        break;
    }
    dispatch_finish(ctx, r, TANDEM__V1__FINISH_REASON__FINISH_REASON_CANCELLED, NULL);
}

/* Every request in the table, collected first so finishing may unlink them. */
static int collect(router_ctx *ctx, router_request ***out)
{
    router_request **v = malloc((size_t)(ctx->n_active ? ctx->n_active : 1) * sizeof *v);
    if (!v)
        return -1;
    int n = 0;
    for (int b = 0; b < ROUTER_HASH_BUCKETS; b++)
        for (router_request *r = ctx->table[b]; r && n < ctx->n_active; r = r->hnext) {
            r->refs++;
            v[n++] = r;
        }
    *out = v;
    return n;
}

/* The registry entry (id, serial), already removed, is gone (why: the
 * worker stopped heartbeating, or restarted): what was placed on it is
 * placed again (a worker registered meanwhile under the same id is another
 * entry, and may take it). */
static void worker_lost(router_ctx *ctx, const char *id, uint64_t serial, const char *why)
{
    router_request **v;
    int n = collect(ctx, &v);
    if (n < 0)
        return;
    const int LOST = TANDEM__V1__ERROR_CODE__ERROR_CODE_WORKER_LOST;
    for (int i = 0; i < n; i++) {
        router_request *r = v[i];
        int on_dec = !strcmp(r->decoder, id) && r->decoder_serial == serial;
        int is_dec = on_dec && r->on_decoder;
        int is_pre = !strcmp(r->prefiller, id) && r->prefiller_serial == serial &&
                     (r->stage == STAGE_PREFILLING || r->zombie);
        if (r->zombie && (is_pre || on_dec)) {
            if (is_pre)
                send_cancel(ctx, r->decoder, r->wid, 1);
            release_prefiller(ctx, r);
            r->zombie = 0;
            r->stage = STAGE_DONE;
            request_table_remove(ctx, r);
        } else if (!r->finished && is_dec) {
            /* Its KV cache is gone with it; a prefill in progress for it is
             * useless. */
            if (r->stage == STAGE_PREFILLING)
                send_cancel(ctx, r->prefiller, r->wid, 0);
            requeue(ctx, r, LOST, "%s", why);
        } else if (!r->finished && is_pre) {
            /* The dead prefiller writes no more: the reserved pages are free. */
            send_cancel(ctx, r->decoder, r->wid, 1);
            requeue(ctx, r, LOST, "%s", why);
        }
        request_unref(r);
    }
    free(v);
}

void dispatch_expire_workers(router_ctx *ctx, uint64_t now_ms)
{
    workers_prune_lost(&ctx->workers, now_ms);
    int i;
    while ((i = workers_next_expired(&ctx->workers, now_ms, (uint64_t)ctx->cfg.worker_timeout_ms)) >= 0) {
        router_worker *w = ctx->workers.w[i];
        char why[WIRE_MAX_ID + 64];
        snprintf(why, sizeof why, "%s %s stopped responding", role_name(w->role), w->id);
        tn_log(WHO, "worker %s missed heartbeats for %d ms: dropping it", w->id,
               ctx->cfg.worker_timeout_ms);
        workers_note_lost(&ctx->workers, w, now_ms);
        drop_worker(ctx, i, why);
    }
}

/* The worker r waits on in its stage, if it is still the entry r was
 * placed on. */
static router_worker *waited_on(router_ctx *ctx, const router_request *r)
{
    if (r->stage == STAGE_PREFILLING)
        return workers_find_serial(&ctx->workers, r->prefiller, r->prefiller_serial);
    return workers_find_serial(&ctx->workers, r->decoder, r->decoder_serial);
}

/* Whether r has waited too long for its worker. A reservation or prefill
 * may wait behind others on a busy worker (admission, the prefill queue),
 * so there the worker's progress on any request counts; a decoding
 * sequence gets a token every step, so there only its own does. */
static int stalled(router_ctx *ctx, const router_request *r, double now, double limit_s)
{
    router_worker *w = waited_on(ctx, r);
    double idle = now - r->t_progress;
    if (w && r->stage != STAGE_DECODING) {
        double w_idle = now - (double)w->last_progress_ms / 1000.0; /* one clock */
        if (w_idle < idle)
            idle = w_idle;
    }
    return idle > limit_s;
}

void dispatch_check_progress(router_ctx *ctx, double now)
{
    if (now < ctx->next_progress_check_s)
        return;
    ctx->next_progress_check_s = now + 0.25;
    int limit_ms = router_progress_timeout_ms(&ctx->cfg);
    double limit_s = limit_ms / 1000.0;
    router_request **v;
    int n = collect(ctx, &v);
    if (n < 0)
        return;
    for (int i = 0; i < n; i++) {
        router_request *r = v[i];
        if (r->zombie) {
            /* Cancelled while prefilling, and the prefiller never reported:
             * it will not write any more; the decoder's pages are free. */
            if (stalled(ctx, r, now, limit_s)) {
                tn_log(WHO, "request %s: prefiller %s never reported on the cancelled prefill "
                       "within %d ms: releasing its KV reservation on %s", r->id, r->prefiller,
                       limit_ms, r->decoder);
                send_cancel(ctx, r->decoder, r->wid, 1);
                release_prefiller(ctx, r);
                r->zombie = 0;
                r->stage = STAGE_DONE;
                request_table_remove(ctx, r);
            }
        } else if (!r->finished && r->stage >= STAGE_RESERVING && r->stage <= STAGE_DECODING &&
                   stalled(ctx, r, now, limit_s)) {
            const char *who = r->stage == STAGE_PREFILLING ? r->prefiller : r->decoder;
            const char *what = r->stage == STAGE_RESERVING    ? "KV reservation"
                               : r->stage == STAGE_PREFILLING ? "prefill"
                                                              : "decode";
            char why[WIRE_MAX_ID + 96];
            snprintf(why, sizeof why, "no progress on its %s by %s for %d ms", what, who,
                     limit_ms);
            if (r->stage == STAGE_PREFILLING)
                send_cancel(ctx, r->prefiller, r->wid, 0);
            /* The decoder's pages are released now: a prefiller that is
             * stuck is not writing into them. */
            send_cancel(ctx, r->decoder, r->wid, 1);
            requeue(ctx, r, TANDEM__V1__ERROR_CODE__ERROR_CODE_WORKER_LOST, "%s", why);
        }
        request_unref(r);
    }
    free(v);
}

void dispatch_fail_all(router_ctx *ctx, const char *why)
{
    router_request **v;
    int n = collect(ctx, &v);
    if (n < 0)
        return;
    for (int i = 0; i < n; i++) {
        router_request *r = v[i];
        if (!r->finished) {
            if (r->stage == STAGE_PREFILLING)
                send_cancel(ctx, r->prefiller, r->wid, 0);
            if ((r->stage >= STAGE_RESERVING && r->stage <= STAGE_DECODING) ||
                r->stage == STAGE_RIDING)
                send_cancel(ctx, r->decoder, r->wid, 1);
            fail(ctx, r, TANDEM__V1__ERROR_CODE__ERROR_CODE_NO_CAPACITY, "%s", why);
        }
        if (r->zombie) {
            r->zombie = 0;
            request_table_remove(ctx, r);
        }
        request_unref(r);
    }
    free(v);
}

void dispatch_process_queues(router_ctx *ctx)
{
    while (ctx->submit_head) {
        router_request *r = ctx->submit_head;
        ctx->submit_head = r->qnext;
        if (!ctx->submit_head)
            ctx->submit_tail = NULL;
        r->qnext = NULL;
        ctx->n_queued--;
        request_table_add(ctx, r);
        request_unref(r); /* the queue's reference */
        dispatch_place(ctx, r);
    }
    while (ctx->cancel_head) {
        router_request *r = ctx->cancel_head;
        ctx->cancel_head = r->qnext;
        if (!ctx->cancel_head)
            ctx->cancel_tail = NULL;
        r->qnext = NULL;
        if (!r->finished && r->stage != STAGE_NEW)
            dispatch_cancel(ctx, r);
        request_unref(r);
    }
}
