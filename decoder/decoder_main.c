/* tandem-decoder: continuous-batching decode for the router's requests,
 * with the prompts' KV caches pushed in by prefillers (decoder/decoder.h). */
#include "decoder/decoder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/status.h"
#include "common/options.h"
#include "common/sys.h"
#include "worker/worker_group_env.h"

#define WHO "decoder"

static const char *const INTRO =
    "Runs a Tandem decoder: registers with the router, admits the requests it is\n"
    "given by KV use (prompt pages at admission, one more as each sequence grows;\n"
    "when the pool runs dry the latest admitted sequence is preempted and the\n"
    "router places it again), receives their prompt KV from\n"
    "prefillers over the TransferEngine (UCX), and decodes all running requests\n"
    "together, one token per step (continuous batching), streaming tokens back,\n"
    "on the CPU or a GPU (--device; tokens are sampled where the logits are).\n"
    "Serves GET /metrics and /healthz on --metrics-port. SIGTERM drains: no new\n"
    "requests, the running ones finish, then it deregisters and exits 0; a\n"
    "second SIGTERM/SIGINT stops at once.";

static void send_error(decoder_ctx *ctx, const char *request_id, int code, const char *msg)
{
    tn_log(WHO, "request %s refused: %s", request_id, msg);
    int ours = code == TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL ||
               code == TANDEM__V1__ERROR_CODE__ERROR_CODE_TRANSFER_FAILED;
    ctx->loop.wm.decode_requests[ours ? OUTCOME_ERROR : OUTCOME_CLIENT_ERROR]++;
    Tandem__V1__Error e = TANDEM__V1__ERROR__INIT;
    e.code = code;
    e.message = (char *)msg;
    e.request_id = (char *)request_id;
    Tandem__V1__WorkerMessage m = TANDEM__V1__WORKER_MESSAGE__INIT;
    m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_ERROR;
    m.error = &e;
    link_send(&ctx->loop.link, &m);
}

/* After its lease, a reservation is freed only this much later: the
 * prefiller counts the lease from when the assignment reached it, after
 * the router relayed KvReady. */
#define LEASE_GRACE_MS 2000

/* Tells the router where q's prompt KV goes, leasing its pages to the
 * prefill for kv_lease_ms. */
static void send_kv_ready(decoder_ctx *ctx, sched_seq *q)
{
    q->lease_until_ms = tn_now_ms() + (uint64_t)ctx->cfg.kv_lease_ms + LEASE_GRACE_MS;
    for (int i = 0; i < ctx->s.n_seqs; i++) /* its branches wait on the same prefill */
        if (!strcmp(ctx->s.seqs[i]->leader, q->id))
            ctx->s.seqs[i]->lease_until_ms = q->lease_until_ms;
    Tandem__V1__KvDestination d = TANDEM__V1__KV_DESTINATION__INIT;
    d.decoder_id = ctx->cfg.w.worker_id;
    d.page_ids = q->pages;
    d.n_page_ids = (size_t)q->n_pages;
    d.page_size = ctx->cfg.w.page_size;
    d.lease_end_unix_ms = tn_wall_ms() + (uint64_t)ctx->cfg.kv_lease_ms;
    Tandem__V1__KvReady k = TANDEM__V1__KV_READY__INIT;
    k.request_id = (char *)q->id;
    k.destination = &d;
    Tandem__V1__WorkerMessage m = TANDEM__V1__WORKER_MESSAGE__INIT;
    m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_KV_READY;
    m.kv_ready = &k;
    link_send(&ctx->loop.link, &m);
}

/* The request's sampling as this decoder holds it (sampling, penalties,
 * grammar); 0, or -1 after telling the router why. */
static int sampling_of(decoder_ctx *ctx, const Tandem__V1__DecodeAssignment *a,
                       const char *id, worker_sampling *ws)
{
    char msg[300];
    if (worker_sampling_from_wire(ws, a->sampling, a->penalty_prompt, (int)a->n_penalty_prompt,
                                  ctx->mc->vocab_size, msg, sizeof msg) != TN_OK) {
        send_error(ctx, id, TANDEM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT, msg);
        return -1;
    }
    if (worker_sampling_constrain(ws, a->sampling, ctx->has_vocab ? &ctx->vocab : NULL,
                                  a->stop_token_ids, (int)a->n_stop_token_ids, msg,
                                  sizeof msg) != TN_OK) {
        worker_sampling_free(ws);
        send_error(ctx, id, TANDEM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT, msg);
        return -1;
    }
    return 0;
}

/* n > 1: the request's other choices join q as branches sharing its
 * prompt's pages. A branch that cannot join is refused on its own. */
static void add_branches(decoder_ctx *ctx, const Tandem__V1__DecodeAssignment *a, sched_seq *q)
{
    for (size_t i = 0; i < a->n_branch_ids; i++) {
        worker_sampling ws;
        if (sampling_of(ctx, a, a->branch_ids[i], &ws) != 0)
            continue;
        sched_seq *b;
        int rc = sched_add_branch(&ctx->s, q, a->branch_ids[i], &ws, &b);
        worker_sampling_free(&ws); /* zeroed when the branch took it */
        if (rc != 0)
            send_error(ctx, a->branch_ids[i],
                       rc == TN_ERR_NOMEM ? TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL
                                          : TANDEM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT,
                       rc == TN_ERR_NOMEM ? "decoder out of memory"
                                          : "bad or duplicate branch id");
    }
}

static void on_assignment(decoder_ctx *ctx, const Tandem__V1__DecodeAssignment *a)
{
    char msg[300];
    if (a->prompt_len > INT32_MAX || a->max_tokens > INT32_MAX ||
        a->n_stop_token_ids > INT32_MAX || a->n_penalty_prompt > INT32_MAX) {
        send_error(ctx, a->request_id, TANDEM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT,
                   "invalid sizes");
        return;
    }
    if (a->n_branch_ids >= (size_t)ctx->cfg.max_batch) {
        snprintf(msg, sizeof msg, "%zu branches; this decoder takes at most %d", a->n_branch_ids,
                 ctx->cfg.max_batch - 1);
        send_error(ctx, a->request_id, TANDEM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT, msg);
        return;
    }
    worker_sampling ws;
    if (sampling_of(ctx, a, a->request_id, &ws) != 0)
        return;
    sched_request req = {
        .id = a->request_id,
        .prompt_len = (int)a->prompt_len,
        .max_tokens = (int)a->max_tokens,
        .stop_ids = a->stop_token_ids,
        .n_stop_ids = (int)a->n_stop_token_ids,
        .ws = &ws,
        .n_branches = (int)a->n_branch_ids,
    };
    sched_seq *q = NULL;
    int submitted = sched_submit(&ctx->s, &req, &q);
    worker_sampling_free(&ws); /* zeroed when the sequence took it */
    if (submitted == SCHED_ADMITTED || submitted == SCHED_QUEUED)
        add_branches(ctx, a, q);
    switch (submitted) {
    case SCHED_ADMITTED:
        send_kv_ready(ctx, q);
        break;
    case SCHED_QUEUED:
        break; /* KvReady goes out when it is admitted */
    case TN_ERR_NEVER_FITS:
        snprintf(msg, sizeof msg, "needs %d KV pages; this decoder has %d in all",
                 tm_kv_pages_needed(req.prompt_len, req.max_tokens, ctx->s.page_size),
                 ctx->s.n_pages);
        send_error(ctx, a->request_id, TANDEM__V1__ERROR_CODE__ERROR_CODE_KV_NEVER_FITS, msg);
        break;
    case TN_ERR_TOO_LONG:
        snprintf(msg, sizeof msg, "prompt %d + max_tokens %d exceeds the context of %d",
                 req.prompt_len, req.max_tokens, ctx->s.max_context);
        send_error(ctx, a->request_id, TANDEM__V1__ERROR_CODE__ERROR_CODE_CONTEXT_TOO_LONG, msg);
        break;
    case TN_ERR_NOMEM:
        send_error(ctx, a->request_id, TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL,
                   "decoder out of memory");
        break;
    default:
        send_error(ctx, a->request_id, TANDEM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT,
                   "bad request id, sizes or a duplicate request id");
        break;
    }
}

/* q's first token (from the prefill) and its generator after it. */
static void start_seq(decoder_ctx *ctx, sched_seq *q, int32_t first, uint64_t rng)
{
    if (first < 0 || first >= ctx->mc->vocab_size) {
        send_error(ctx, q->id, TANDEM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT,
                   "first token outside the vocabulary");
        return;
    }
    if (q->ws.con && tm_constraint_accept(q->ws.con, first) != TN_OK) {
        send_error(ctx, q->id, TANDEM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT,
                   "the first token breaks the request's grammar");
        return;
    }
    if (tm_penalties_add_output(&q->ws.pen, first) != TN_OK) {
        send_error(ctx, q->id, TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL,
                   "decoder out of memory");
        return;
    }
    sched_start(&ctx->s, q, first, rng);
    if (q->state == SEQ_FINISHED)
        decoder_finish_seq(ctx, q);
}

static void on_start(decoder_ctx *ctx, const Tandem__V1__StartDecode *s)
{
    sched_seq *q = sched_find(&ctx->s, s->request_id);
    if (!q || q->cancelled || q->state != SEQ_RESERVED || q->leader[0])
        return;
    size_t nb = s->n_branch_ids;
    if (s->n_branch_first_tokens != nb || s->n_branch_rng_states != nb) {
        send_error(ctx, s->request_id, TANDEM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT,
                   "StartDecode: branch ids, first tokens and generator states differ in count");
        return;
    }
    /* the branches first: the leader may finish (and leave) at once */
    for (size_t i = 0; i < nb; i++) {
        sched_seq *b = sched_find(&ctx->s, s->branch_ids[i]);
        if (b && !b->cancelled && b->state == SEQ_RESERVED && !strcmp(b->leader, q->id))
            start_seq(ctx, b, s->branch_first_tokens[i], s->branch_rng_states[i]);
    }
    start_seq(ctx, q, s->first_token, s->rng_state);
}

static void on_cancel(void *arg, const Tandem__V1__Cancel *c)
{
    decoder_ctx *ctx = arg;
    sched_seq *q = sched_find(&ctx->s, c->request_id);
    if (!q)
        return;
    if (!q->cancelled)
        ctx->loop.wm.decode_requests[OUTCOME_CANCELLED]++;
    if (q->state == SEQ_RESERVED && !q->kv_arrived && !c->release_kv) {
        /* A prefiller may still be writing into its pages: freed on the
         * transfer's notice, or after orphan_release_ms if none comes. */
        q->cancelled = 1;
        q->release_at_ms = tn_now_ms() + (uint64_t)ctx->cfg.orphan_release_ms;
        return;
    }
    sched_remove(&ctx->s, q);
}

/* The router forgot us (it restarted, or dropped us for missing
 * heartbeats and placed our requests elsewhere): every sequence belongs to
 * nobody now. Those whose prompt KV may still be arriving wait (cancelled)
 * for their transfer to end; the rest are freed at once. */
static void drop_old_session(void *arg)
{
    decoder_ctx *ctx = arg;
    int freed = 0, held = 0;
    uint64_t release_at = tn_now_ms() + (uint64_t)ctx->cfg.orphan_release_ms;
    for (int i = ctx->s.n_seqs - 1; i >= 0; i--) {
        sched_seq *q = ctx->s.seqs[i];
        if (q->state == SEQ_RESERVED && !q->kv_arrived) {
            if (!q->cancelled) {
                q->cancelled = 1;
                q->release_at_ms = release_at;
            }
            held++;
        } else {
            sched_remove(&ctx->s, q);
            freed++;
        }
    }
    tn_log(WHO, "registered again: dropped %d sequence(s), %d more once their KV transfer ends",
           freed, held);
}

/* Frees cancelled reservations whose transfer never reported: by then the
 * prefiller's own transfer timeout has closed the connection. And frees
 * reservations whose lease ended before they ran (no KV, or no first
 * token): the prefiller starts no push after the lease and ends its
 * transfer by then, so nothing writes into the pages any more; the router
 * hears that the request failed here (it would otherwise wait for it). */
static void release_orphans(decoder_ctx *ctx, uint64_t now)
{
    for (int i = ctx->s.n_seqs - 1; i >= 0; i--) {
        sched_seq *q = ctx->s.seqs[i];
        /* A cancelled reservation's prefill may still push until its lease
         * ends (the prefiller honours it), so that bounds the wait too. */
        uint64_t release_at = q->release_at_ms;
        if (q->lease_until_ms && (!release_at || q->lease_until_ms < release_at))
            release_at = q->lease_until_ms;
        if (q->cancelled && release_at && now >= release_at) {
            tn_log(WHO, "request %s: no word from its KV transfer; freeing its pages", q->id);
            sched_remove(&ctx->s, q);
        } else if (!q->cancelled && q->state == SEQ_RESERVED && q->lease_until_ms &&
                   now >= q->lease_until_ms) {
            char msg[200];
            snprintf(msg, sizeof msg, "the KV lease of its prefill ended after %d ms with %s; "
                     "its %d pages are free again", ctx->cfg.kv_lease_ms,
                     q->kv_arrived ? "no first token" : "no KV transfer", q->n_pages);
            send_error(ctx, q->id, TANDEM__V1__ERROR_CODE__ERROR_CODE_TRANSFER_FAILED, msg);
            sched_remove(&ctx->s, q);
        }
    }
}

static void on_transfer_peer(void *arg, const Tandem__V1__TransferPeer *p)
{
    decoder_ctx *ctx = arg;
    if (p->removed) {
        kv_receiver_remove_peer(ctx->recv, p->worker_id);
        tn_log(WHO, "prefiller %s is gone", p->worker_id);
        return;
    }
    char err[300];
    if (kv_receiver_add_peer(ctx->recv, p->worker_id, p->transfer_endpoint.data,
                             p->transfer_endpoint.len, err, sizeof err) != 0)
        tn_log(WHO, "cannot connect to prefiller %s: %s", p->worker_id, err);
    else
        tn_log(WHO, "connected to prefiller %s", p->worker_id);
}

static void handle_notices(decoder_ctx *ctx)
{
    uint64_t key, bytes;
    int complete;
    while (kv_receiver_next(ctx->recv, &key, &complete, &bytes)) {
        ctx->loop.wm.kv_transfers[complete ? OUTCOME_OK : OUTCOME_CANCELLED]++;
        ctx->loop.wm.kv_transfer_bytes += bytes;
        char id[24];
        snprintf(id, sizeof id, "%016llx", (unsigned long long)key);
        sched_seq *q = sched_find(&ctx->s, id);
        if (!q)
            continue;
        if (q->cancelled) {
            sched_remove(&ctx->s, q); /* no more writes: the pages are free */
            continue;
        }
        if (!complete) {
            /* The transfer is over unfinished (the prefiller stopped: no
             * more writes follow) and the prefiller reports the failure, so
             * the router places the request again under a new id: the
             * lease ends here and the pages return to the pool now. */
            sched_remove(&ctx->s, q);
            continue;
        }
        /* staged KV: the prompt's pages go from the host mirror to the GPU */
        int n_prompt = (q->prompt_len + ctx->s.page_size - 1) / ctx->s.page_size;
        char err[200];
        if (kv_receiver_land(ctx->recv, q->pages, n_prompt < q->n_pages ? n_prompt : q->n_pages,
                             err, sizeof err) != 0) {
            send_error(ctx, q->id, TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL, err);
            sched_remove(&ctx->s, q);
            continue;
        }
        sched_kv_arrived(&ctx->s, q);
        if (q->state == SEQ_FINISHED)
            decoder_finish_seq(ctx, q);
    }
}

static void gauges(void *arg, worker_metrics *wm)
{
    decoder_ctx *ctx = arg;
    wm->decode_batch_size = (uint32_t)sched_running(&ctx->s);
    wm->decode_waiting = (uint32_t)sched_waiting(&ctx->s);
    wm->kv_blocks_total = (uint32_t)ctx->s.n_pages;
    wm->kv_blocks_used = (uint32_t)(ctx->s.n_pages - sched_pages_available(&ctx->s));
}

static void load(void *arg, Tandem__V1__Heartbeat *hb, worker_load *room, double tokens_per_s,
                 uint64_t tokens_total)
{
    decoder_ctx *ctx = arg;
    Tandem__V1__DecoderLoad *l = &room->decoder;
    tandem__v1__decoder_load__init(l);
    l->batch_size = (uint32_t)sched_running(&ctx->s);
    l->waiting = (uint32_t)sched_waiting(&ctx->s);
    l->kv_pages_free = (uint32_t)sched_pages_available(&ctx->s);
    l->kv_pages_total = (uint32_t)ctx->s.n_pages;
    l->tokens_per_s = tokens_per_s;
    l->tokens_total = tokens_total;
    hb->load_case = TANDEM__V1__HEARTBEAT__LOAD_DECODER;
    hb->decoder = l;
}

static int held(void *arg)
{
    decoder_ctx *ctx = arg;
    return ctx->s.n_seqs;
}

static int awaiting_kv(const decoder_ctx *ctx)
{
    for (int i = 0; i < ctx->s.n_seqs; i++)
        if (ctx->s.seqs[i]->state == SEQ_RESERVED)
            return 1;
    return 0;
}

/* A DP group that lost a rank cannot step: fail this rank's requests and
 * tell the router, then stop. */
static void report_group_failure(decoder_ctx *ctx)
{
    char msg[400];
    snprintf(msg, sizeof msg, "decoder group failed: %s", comm_error(ctx->group.world));
    tn_log(WHO, "%s", msg);
    while (ctx->s.n_seqs > 0) {
        sched_seq *q = ctx->s.seqs[0];
        send_error(ctx, q->id, TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL, msg);
        sched_remove(&ctx->s, q);
    }
    send_error(ctx, "", TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL, msg);
    ctx->loop.stop = 1;
    ctx->group_failed = 1;
}

/* Every rank learns whether any rank has sequences to step, whether any is
 * stopping, whether any drains (a DP group is one replica: it leaves as a
 * whole, so every rank drains), and whether every rank has left (the ranks
 * that have keep stepping with the others until then). Returns 0, or -1
 * when the group failed. */
static int group_agree(decoder_ctx *ctx)
{
    worker_loop *wl = &ctx->loop;
    float v[4] = {sched_running(&ctx->s) > 0 ? 1.0f : 0.0f, wl->stop ? 1.0f : 0.0f,
                  wl->draining ? 1.0f : 0.0f, wl->left ? 0.0f : 1.0f};
    if (comm_all_reduce_sum(ctx->group.world, v, 4) != TN_OK)
        return -1;
    ctx->group_step = v[0] > 0;
    if (v[1] > 0)
        wl->stop = 1;
    if (v[2] > 0 && !wl->draining) {
        tn_log(WHO, "another rank of the group drains: draining (%d sequences to finish)",
               ctx->s.n_seqs);
        worker_loop_drain(wl);
    }
    if (v[3] == 0)
        wl->stop = 1; /* every rank drained and deregistered */
    return 0;
}

/* The decoder's own messages (Cancel and TransferPeer come to on_cancel and
 * on_transfer_peer). */
static int on_message(void *arg, const Tandem__V1__WorkerMessage *m)
{
    decoder_ctx *ctx = arg;
    switch (m->body_case) {
    case TANDEM__V1__WORKER_MESSAGE__BODY_DECODE_ASSIGNMENT:
        if (m->decode_assignment)
            on_assignment(ctx, m->decode_assignment);
        return 1;
    case TANDEM__V1__WORKER_MESSAGE__BODY_START_DECODE:
        if (m->start_decode)
            on_start(ctx, m->start_decode);
        return 1;
    default:
        return 0;
    }
}

/* Busy when decoding; short naps while a KV transfer may need its
 * acknowledgement (UCX progress); otherwise sleep until a message. */
static int poll_timeout(void *arg, int due_ms)
{
    decoder_ctx *ctx = arg;
    int timeout = sched_running(&ctx->s) || ctx->group_step ? 0 : awaiting_kv(ctx) ? 1 : due_ms;
    if ((ctx->loop.lockstep || ctx->loop.draining) && timeout > 20)
        timeout = 20; /* the group waits for its slowest rank at every step; a drain
                         waits for its deregistration's answer */
    return timeout;
}

/* The KV transfers' notices, then the reservations they left behind. */
static void progress(void *arg)
{
    decoder_ctx *ctx = arg;
    handle_notices(ctx);
    release_orphans(ctx, tn_now_ms());
}

/* The GPU runs a decode step asynchronously: while the host waits for
 * it, KV arriving over shared memory (which moves only inside UCX
 * progress on this side) keeps flowing and acks go out. Notices are only
 * queued here; handle_notices acts on them between steps. */
static void progress_during_step(void *arg)
{
    decoder_ctx *ctx = arg;
    te_engine_progress(kv_receiver_engine(ctx->recv));
}

static int arm(void *arg, int *fd)
{
    decoder_ctx *ctx = arg;
    return te_engine_arm(kv_receiver_engine(ctx->recv), fd);
}

/* One decode step (with the group: once every rank agreed to), then the
 * waiting requests that fit now. */
static int step(void *arg)
{
    decoder_ctx *ctx = arg;
    if (ctx->loop.lockstep) {
        if (group_agree(ctx) != 0) {
            report_group_failure(ctx);
            return 1;
        }
        if (ctx->loop.stop)
            return 1;
    }
    if (decoder_step(ctx) == TN_ERR_PEER) {
        report_group_failure(ctx);
        return 1;
    }
    sched_seq *admitted[64];
    int n;
    while ((n = sched_admit_waiting(&ctx->s, admitted, 64)) > 0)
        for (int i = 0; i < n; i++)
            send_kv_ready(ctx, admitted[i]);
    return 0;
}

static const worker_role DECODER_ROLE = {
    .who = WHO, .held_what = "sequences",
    .cancel = on_cancel, .transfer_peer = on_transfer_peer, .on_message = on_message,
    .new_session = drop_old_session,
    .poll_timeout = poll_timeout, .progress = progress, .arm = arm, .held = held,
    .load = load, .gauges = gauges,
    .step = step,
};

static void ctx_free(decoder_ctx *ctx)
{
    worker_loop_free(&ctx->loop);
    kn_backend_set_wait_hook(&ctx->be, NULL, NULL); /* it progresses ctx->recv */
    if (ctx->recv)
        kv_receiver_close(ctx->recv);
    sched_free(&ctx->s);
    tm_kv_cache_free(&ctx->kv);
    tm_sampler_free(&ctx->sampler);
    tm_vocab_trie_free(&ctx->vocab);
    tm_model_free(ctx->model);
    kn_backend_free(&ctx->be);
    free(ctx->batch);
    free(ctx->steps);
    free(ctx->sampled);
    free(ctx->params);
    free(ctx->rngs);
    free(ctx->pens);
    free(ctx->cons);
    free(ctx->top_logprobs);
    free(ctx->logprobs);
    free(ctx->logprobs_wire);
    free(ctx);
}

/* The role's flags and their defaults, after the common ones: -1 to go
 * on, or the exit status (worker_parse_flags). */
static const char *env_var(const char *name)
{
    return getenv(name);
}

static int parse_flags(decoder_config *c, int argc, char **argv)
{
    worker_options *o = &c->w;
    worker_options_default(o);
    c->kv_pages = 1024;
    c->max_batch = 64;
    c->orphan_release_ms = 60000;
    c->kv_lease_ms = 120000;
    const opt_spec specs[] = {
        {"kv-pages", OPT_INT, &c->kv_pages, 0, "KV cache capacity in pages"},
        {"max-batch", OPT_INT, &c->max_batch, 0, "most sequences decoded together"},
        {"orphan-release-ms", OPT_INT, &c->orphan_release_ms, 0,
         "free a cancelled reservation whose KV transfer never reports after this long "
         "(keep it above the prefillers' --transfer-timeout-ms)"},
        {"kv-lease-ms", OPT_INT, &c->kv_lease_ms, 0,
         "lease a reservation's pages to its prefill for this long: a request whose KV or "
         "first token has not come by then (plus 2 s) is failed and its pages freed; the "
         "prefiller starts no push after it (keep it above the longest prefill queue wait "
         "plus --transfer-timeout-ms)"},
        {"group-from-env", OPT_BOOL, &c->group_from_env, 0,
         "a decoder group on Kubernetes: --dp/--ep, --rank, --world, --local-ranks and "
         "--group-leader from POD_NAME, TANDEM_DECODER_PODS_PER_GROUP, "
         "TANDEM_DECODER_GPUS_PER_POD, TANDEM_DECODER_HEADLESS_SERVICE, POD_NAMESPACE "
         "(with --rank/--world and no --group-leader, TANDEM_DECODER_GROUP_LEADER names "
         "rank 0 instead: deploy/image/tandem-decoder-pod)"},
    };
    int rc = worker_parse_flags(o, "tandem-decoder", INTRO, "dp", specs,
                                (int)(sizeof specs / sizeof *specs), argc, argv);
    char err[400];
    if (rc < 0 && c->group_from_env && worker_group_from_env(o, env_var, err, sizeof err)) {
        fprintf(stderr, "tandem-decoder: %s\n", err);
        return 2;
    }
    /* deploy/image/tandem-decoder-pod starts one process per rank with
     * --rank/--world and names rank 0's pod in the environment */
    const char *leader = getenv("TANDEM_DECODER_GROUP_LEADER");
    if (rc < 0 && !o->group_leader[0] && o->world > 0 && leader && leader[0] &&
        snprintf(o->group_leader, sizeof o->group_leader, "%s", leader) >=
            (int)sizeof o->group_leader) {
        fprintf(stderr, "tandem-decoder: TANDEM_DECODER_GROUP_LEADER is too long\n");
        return 2;
    }
    return rc;
}

int main(int argc, char **argv)
{
    decoder_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        fprintf(stderr, "tandem-decoder: out of memory\n");
        return 1;
    }
    worker_loop_init(&ctx->loop, &DECODER_ROLE, ctx, WM_DECODE);
    int prc = parse_flags(&ctx->cfg, argc, argv);
    if (prc < 0 && (ctx->cfg.kv_lease_ms <= 0 || ctx->cfg.orphan_release_ms <= 0)) {
        fprintf(stderr, "tandem-decoder: --kv-lease-ms and --orphan-release-ms must be "
                "positive\n");
        prc = 2;
    }
    if (prc >= 0) {
        free(ctx);
        return prc;
    }
    decoder_config *c = &ctx->cfg;
    worker_options *o = &c->w;
    char err[512];
    /* the DP ranks first, before any thread exists */
    rank_group_spec spec;
    worker_group_spec(o, 1, o->ranks, "decode", &spec);
    if (rank_group_start(&ctx->group, &spec, err, sizeof err) != TN_OK) {
        fprintf(stderr, "tandem-decoder: %s\n", err);
        free(ctx);
        return 1;
    }
    worker_fill_names(o, "decoder");
    if (ctx->group.size > 1) {   /* each DP rank is a decoder of its own */
        char base[sizeof o->worker_id];
        snprintf(base, sizeof base, "%s", o->worker_id);
        if (snprintf(o->worker_id, sizeof o->worker_id, "%s-dp%d", base, ctx->group.rank) >=
            (int)sizeof o->worker_id) {
            fprintf(stderr, "tandem-decoder: --worker-id is too long\n");
            free(ctx);
            return 2;
        }
    }
    int rc = 1;
    if (worker_loop_open_signals(&ctx->loop, 1) != 0) {
        fprintf(stderr, "tandem-decoder: cannot set up signals\n");
        goto out;
    }
    if (worker_load_model(o, WHO, &ctx->group, &ctx->be, &ctx->model, err, sizeof err) != 0) {
        fprintf(stderr, "tandem-decoder: %s\n", err);
        goto out;
    }
    /* the group's control communicator exists once the layout is built */
    ctx->loop.lockstep = ctx->group.world != NULL;
    ctx->mc = tm_model_config(ctx->model);
    /* The longest sequence: every token but the last is cached. */
    long cap = (long)c->kv_pages * o->page_size + 1;
    ctx->max_context = cap < ctx->mc->max_position ? (int)cap : ctx->mc->max_position;
    size_t mb = (size_t)c->max_batch;
    ctx->batch = calloc(mb, sizeof *ctx->batch);
    ctx->steps = calloc(mb, sizeof *ctx->steps);
    ctx->sampled = calloc(mb, sizeof *ctx->sampled);
    ctx->params = calloc(mb, sizeof *ctx->params);
    ctx->rngs = calloc(mb, sizeof *ctx->rngs);
    ctx->pens = calloc(mb, sizeof *ctx->pens);
    ctx->cons = calloc(mb, sizeof *ctx->cons);
    ctx->top_logprobs = calloc(mb, sizeof *ctx->top_logprobs);
    ctx->logprobs = calloc(mb, sizeof *ctx->logprobs);
    ctx->logprobs_wire = calloc(mb, sizeof *ctx->logprobs_wire);
    tm_sampler_init(&ctx->sampler, &ctx->be);
    if (worker_vocab_load(o->tokenizer, ctx->mc->vocab_size, &ctx->vocab, &ctx->has_vocab, err,
                          sizeof err) != TN_OK) {
        fprintf(stderr, "tandem-decoder: %s\n", err);
        goto out;
    }
    if (!ctx->batch || !ctx->steps || !ctx->sampled || !ctx->params || !ctx->rngs ||
        !ctx->pens || !ctx->cons || !ctx->top_logprobs || !ctx->logprobs || !ctx->logprobs_wire ||
        sched_init(&ctx->s, c->kv_pages, o->page_size, c->max_batch, ctx->max_context) != 0 ||
        tm_kv_cache_init(&ctx->kv, &ctx->be, o->kv_elem, ctx->mc->n_layers, ctx->mc->n_kv_heads,
                         ctx->mc->head_dim, o->page_size, c->kv_pages) != TN_OK) {
        fprintf(stderr, "tandem-decoder: cannot allocate %d KV pages and step buffers\n",
                c->kv_pages);
        goto out;
    }
    tn_log(WHO, "%s: %s KV cache, %d pages of %zu bytes per layer and pool", o->worker_id,
           kn_dtype_name(ctx->kv.dtype), c->kv_pages, tm_kv_page_bytes(&ctx->kv));
    if (kv_receiver_open(&ctx->kv, o->worker_id, o->ucx_tls, o->same_host_shm, o->kv_path_mode, &ctx->recv, err,
                         sizeof err) != 0) {
        fprintf(stderr, "tandem-decoder: TransferEngine: %s\n", err);
        goto out;
    }
    tn_log(WHO, "%s: KV transfer %s", o->worker_id, kv_receiver_path(ctx->recv));
    kn_backend_set_wait_hook(&ctx->be, progress_during_step, ctx);
    const uint8_t *ep;
    size_t ep_len;
    kv_receiver_endpoint(ctx->recv, &ep, &ep_len);
    Tandem__V1__Register reg;
    worker_register_init(&reg, o, TANDEM__V1__WORKER_ROLE__WORKER_ROLE_DECODER, ctx->mc,
                         ctx->max_context, c->kv_pages, ep, ep_len);
    if (worker_loop_join(&ctx->loop, o, &reg, err, sizeof err) != 0) {
        fprintf(stderr, "tandem-decoder: %s\n", err);
        goto out;
    }
    tn_log(WHO, "%s: model %s (%s) on %s, %d KV pages of %d tokens, batch %d, DP %d EP %d, "
           "router %s (pid %d)", o->worker_id, o->model_name, ctx->mc->model_type, o->device,
           c->kv_pages, o->page_size, c->max_batch, o->ranks, o->ep, o->router, (int)getpid());
    worker_loop_run(&ctx->loop);
    rc = ctx->group_failed || ctx->loop.replaced ? 1 : 0;
    tn_log(WHO, "%s: stopped", o->worker_id);
out:
    rc = worker_finish(o, "tandem-decoder", &ctx->group, &ctx->model, rc);
    ctx_free(ctx);
    return rc;
}
