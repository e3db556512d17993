/* tandem-prefiller: computes prompts' KV caches and first tokens for the
 * router and pushes the caches to decoders (see prefiller/prefiller.h). */
#include "prefiller/prefiller.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/status.h"
#include "common/options.h"
#include "common/sys.h"

#define WHO "prefiller"

static const char *const INTRO =
    "Runs a Tandem prefiller: registers with the router, prefills prompts on the\n"
    "CPU or a GPU (--device), samples each request's first token and pushes the\n"
    "prompt's KV cache into the decoder the router chose, over the TransferEngine\n"
    "(UCX; from GPU memory directly or through pinned host buffers, --kv-path).\n"
    "Serves GET /metrics and /healthz on --metrics-port. SIGTERM drains: no new\n"
    "work, the queue finishes, then it deregisters and exits 0; a second\n"
    "SIGTERM/SIGINT stops at once.";

static uint32_t queued_requests(const prefiller_ctx *ctx)
{
    uint32_t n = 0;
    for (prefill_job *j = ctx->head; j; j = j->next)
        n++;
    return n + (ctx->current != NULL);
}

static int held(void *arg)
{
    return (int)queued_requests(arg);
}

static void gauges(void *arg, worker_metrics *wm)
{
    wm->prefill_queue_depth = queued_requests(arg);
}

static void load(void *arg, Tandem__V1__Heartbeat *hb, worker_load *room, double tokens_per_s,
                 uint64_t tokens_total)
{
    prefiller_ctx *ctx = arg;
    Tandem__V1__PrefillerLoad *l = &room->prefiller;
    tandem__v1__prefiller_load__init(l);
    l->queued_input_tokens = ctx->queued_tokens;
    l->queued_requests = queued_requests(ctx);
    l->input_tokens_per_s = tokens_per_s;
    l->input_tokens_total = tokens_total;
    hb->load_case = TANDEM__V1__HEARTBEAT__LOAD_PREFILLER;
    hb->prefiller = l;
}

static void reject(prefiller_ctx *ctx, const char *id, int code, const char *msg)
{
    tn_log(WHO, "request %s refused: %s", id, msg);
    prefiller_count_outcome(ctx, code);
    Tandem__V1__Error e = TANDEM__V1__ERROR__INIT;
    e.code = code;
    e.message = (char *)msg;
    e.request_id = (char *)id;
    Tandem__V1__PrefillResult r = TANDEM__V1__PREFILL_RESULT__INIT;
    r.request_id = (char *)id;
    r.error = &e;
    Tandem__V1__WorkerMessage m = TANDEM__V1__WORKER_MESSAGE__INIT;
    m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_PREFILL_RESULT;
    m.prefill_result = &r;
    link_send(&ctx->loop.link, &m);
}

/* Checks an assignment and queues it as a job. */
static void on_assignment(prefiller_ctx *ctx, const Tandem__V1__PrefillAssignment *a)
{
    const int BAD = TANDEM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT;
    char msg[300];
    char *end = NULL;
    uint64_t key = strtoull(a->request_id, &end, 16);
    if (strlen(a->request_id) != 16 || !end || *end) {
        reject(ctx, a->request_id, BAD, "request_id must be 16 hex digits");
        return;
    }
    if (a->n_prompt_tokens == 0 || a->n_prompt_tokens > (size_t)ctx->cfg.max_prompt_tokens) {
        snprintf(msg, sizeof msg, "prompt of %zu tokens (this prefiller takes 1..%d)",
                 a->n_prompt_tokens, ctx->cfg.max_prompt_tokens);
        reject(ctx, a->request_id, TANDEM__V1__ERROR_CODE__ERROR_CODE_CONTEXT_TOO_LONG, msg);
        return;
    }
    for (size_t i = 0; i < a->n_prompt_tokens; i++)
        if (a->prompt_tokens[i] < 0 || a->prompt_tokens[i] >= ctx->mc->vocab_size) {
            snprintf(msg, sizeof msg, "prompt token %d outside the vocabulary (%d)",
                     (int)a->prompt_tokens[i], ctx->mc->vocab_size);
            reject(ctx, a->request_id, BAD, msg);
            return;
        }
    worker_sampling ws;
    if (worker_sampling_from_wire(&ws, a->sampling, a->prompt_tokens, (int)a->n_prompt_tokens,
                                  ctx->mc->vocab_size, msg, sizeof msg) != TN_OK) {
        reject(ctx, a->request_id, BAD, msg);
        return;
    }
    if (worker_sampling_constrain(&ws, a->sampling, ctx->has_vocab ? &ctx->vocab : NULL, NULL, 0,
                                  msg, sizeof msg) != TN_OK) {
        worker_sampling_free(&ws);
        reject(ctx, a->request_id, BAD, msg);
        return;
    }
    if (a->n_branch_ids != a->n_branch_seeds || a->n_branch_ids > 256) {
        worker_sampling_free(&ws);
        reject(ctx, a->request_id, BAD, "branch ids and seeds differ in count, or over 256");
        return;
    }
    for (size_t i = 0; i < a->n_branch_ids; i++)
        if (strlen(a->branch_ids[i]) != 16) {
            worker_sampling_free(&ws);
            reject(ctx, a->request_id, BAD, "a branch id must be 16 hex digits");
            return;
        }
    if (a->sampling && a->sampling->prompt_logprobs &&
        a->sampling->top_logprobs > KN_LOGPROBS_MAX_TOP) {
        worker_sampling_free(&ws);
        reject(ctx, a->request_id, BAD, "prompt_logprobs: top_logprobs is over 20");
        return;
    }
    const Tandem__V1__KvDestination *d = a->destination;
    if (!d || d->page_size <= 0 || !d->transfer_endpoint.len ||
        (long)d->n_page_ids * d->page_size < (long)a->n_prompt_tokens) {
        worker_sampling_free(&ws);
        reject(ctx, a->request_id, BAD, "KV destination missing or smaller than the prompt");
        return;
    }
    prefill_job *job = calloc(1, sizeof *job);
    size_t dlen = tandem__v1__kv_destination__get_packed_size(d);
    uint8_t *dbuf = malloc(dlen ? dlen : 1);
    if (job) {
        job->tokens = malloc(a->n_prompt_tokens * sizeof *job->tokens);
        job->n_branches = (int)a->n_branch_ids;
        job->branch_ids = calloc(a->n_branch_ids + 1, sizeof *job->branch_ids);
        job->branch_seeds = calloc(a->n_branch_ids + 1, sizeof *job->branch_seeds);
    }
    if (dbuf && job) {
        tandem__v1__kv_destination__pack(d, dbuf);
        job->dest = tandem__v1__kv_destination__unpack(NULL, dlen, dbuf);
    }
    free(dbuf);
    if (!job || !job->tokens || !job->dest || !job->branch_ids || !job->branch_seeds) {
        prefill_job_free(job);
        worker_sampling_free(&ws);
        reject(ctx, a->request_id, TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL, "out of memory");
        return;
    }
    snprintf(job->id, sizeof job->id, "%s", a->request_id);
    job->key = key;
    job->lease_end_ms = d->lease_end_unix_ms;
    memcpy(job->tokens, a->prompt_tokens, a->n_prompt_tokens * sizeof *job->tokens);
    job->n_tokens = (int)a->n_prompt_tokens;
    job->ws = ws;
    for (size_t i = 0; i < a->n_branch_ids; i++) {
        snprintf(job->branch_ids[i], sizeof job->branch_ids[i], "%s", a->branch_ids[i]);
        job->branch_seeds[i] = a->branch_seeds[i];
    }
    /* echo with logprobs: the prompt tokens' own, as many alternatives as
     * the sampled tokens get */
    job->prompt_lp = a->sampling && a->sampling->prompt_logprobs ? (int)a->sampling->top_logprobs : -1;
    if (ctx->tail)
        ctx->tail->next = job;
    else
        ctx->head = job;
    ctx->tail = job;
    ctx->queued_tokens += (uint64_t)job->n_tokens;
}

static void on_cancel(void *arg, const Tandem__V1__Cancel *c)
{
    prefiller_ctx *ctx = arg;
    if (ctx->current && !strcmp(ctx->current->id, c->request_id)) {
        ctx->current->cancelled = 1;
        return;
    }
    prefill_job **p = &ctx->head, *prev = NULL;
    while (*p && strcmp((*p)->id, c->request_id)) {
        prev = *p;
        p = &(*p)->next;
    }
    if (!*p)
        return; /* already reported */
    prefill_job *job = *p;
    *p = job->next;
    if (ctx->tail == job)
        ctx->tail = prev;
    ctx->queued_tokens -= (uint64_t)job->n_tokens;
    reject(ctx, job->id, TANDEM__V1__ERROR_CODE__ERROR_CODE_CANCELLED, "cancelled while queued");
    prefill_job_free(job);
}

/* The router introduces a decoder (or says it left): connect now, so the
 * UCX connection set-up is over before a push needs it. */
static void on_transfer_peer(void *arg, const Tandem__V1__TransferPeer *p)
{
    prefiller_ctx *ctx = arg;
    char err[300];
    if (kv_pusher_introduce(ctx->pusher, p->worker_id, p->transfer_endpoint.data,
                            p->transfer_endpoint.len, p->removed, err, sizeof err) != 0)
        tn_log(WHO, "cannot connect to decoder %s now (its first push will try again): %s",
               p->worker_id, err);
    else if (p->removed)
        tn_log(WHO, "decoder %s is gone", p->worker_id);
    else
        tn_log(WHO, "connecting to decoder %s", p->worker_id);
}

/* The router forgot us (it restarted, or dropped us for missing
 * heartbeats and placed our work elsewhere): nobody waits for the queued
 * jobs any more, and the current one is cancelled (its KV push, if
 * started, tells the decoder no more writes follow). */
static void drop_old_session(void *arg)
{
    prefiller_ctx *ctx = arg;
    int n = 0;
    while (ctx->head) {
        prefill_job *j = ctx->head;
        ctx->head = j->next;
        ctx->queued_tokens -= (uint64_t)j->n_tokens;
        prefill_job_free(j);
        n++;
    }
    ctx->tail = NULL;
    if (ctx->current)
        ctx->current->cancelled = 1;
    tn_log(WHO, "registered again: dropped %d queued job(s)%s", n,
           ctx->current ? " and cancelled the current one" : "");
}

/* The prefiller's own message: work (Cancel and TransferPeer come to
 * on_cancel and on_transfer_peer). */
static int on_message(void *arg, const Tandem__V1__WorkerMessage *m)
{
    if (m->body_case != TANDEM__V1__WORKER_MESSAGE__BODY_PREFILL_ASSIGNMENT)
        return 0;
    if (m->prefill_assignment)
        on_assignment(arg, m->prefill_assignment);
    return 1;
}

void prefiller_service(prefiller_ctx *ctx, int timeout_ms)
{
    worker_loop_service(&ctx->loop, timeout_ms);
}

/* UCX makes progress only when asked: keep connection set-up from
 * decoders moving while idle. */
static void progress(void *arg)
{
    prefiller_ctx *ctx = arg;
    kv_pusher_progress(ctx->pusher);
}

static int arm(void *arg, int *fd)
{
    prefiller_ctx *ctx = arg;
    return te_engine_arm(kv_pusher_engine(ctx->pusher), fd);
}

static int poll_timeout(void *arg, int due_ms)
{
    prefiller_ctx *ctx = arg;
    int t = ctx->head ? 0 : ctx->loop.draining ? 20 : ctx->group.world ? 50 : 1000;
    return t < due_ms ? t : due_ms;
}

/* The second signal: the job in flight stops too. */
static void on_stop(void *arg)
{
    prefiller_ctx *ctx = arg;
    if (ctx->current)
        ctx->current->cancelled = 1;
}

/* A TP group that lost a rank cannot prefill: say so to the router (for
 * the job in flight, if any, and for the worker) and stop. */
static void report_group_failure(prefiller_ctx *ctx)
{
    char msg[400];
    snprintf(msg, sizeof msg, "prefiller group failed: %s", comm_error(ctx->group.world));
    tn_log(WHO, "%s", msg);
    Tandem__V1__Error e = TANDEM__V1__ERROR__INIT;
    e.code = TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL;
    e.message = msg;
    e.request_id = "";
    Tandem__V1__WorkerMessage m = TANDEM__V1__WORKER_MESSAGE__INIT;
    m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_ERROR;
    m.error = &e;
    link_send(&ctx->loop.link, &m);
    while (ctx->head) {   /* queued work will never run here */
        prefill_job *j = ctx->head;
        ctx->head = j->next;
        reject(ctx, j->id, TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL, msg);
        prefill_job_free(j);
    }
    ctx->tail = NULL;
    ctx->loop.stop = 1;
}

/* Before each round: a TP group that lost a rank stops the prefiller. */
static int check_group(void *arg)
{
    prefiller_ctx *ctx = arg;
    if (ctx->group.world && !ctx->group_failed && comm_poll_peers(ctx->group.world) != TN_OK)
        ctx->group_failed = 1;
    if (!ctx->group_failed)
        return 0;
    report_group_failure(ctx);
    return 1;
}

/* Runs the first queued job, if any, to the end. */
static int step(void *arg)
{
    prefiller_ctx *ctx = arg;
    if (ctx->loop.stop || !ctx->head)
        return 0;
    prefill_job *job = ctx->head;
    ctx->head = job->next;
    if (!ctx->head)
        ctx->tail = NULL;
    job->next = NULL;
    ctx->current = job;
    prefiller_run_job(ctx, job);
    ctx->queued_tokens -= (uint64_t)job->n_tokens;
    ctx->current = NULL;
    prefill_job_free(job);
    return 0;
}

static void shutdown_group(void *arg)
{
    prefiller_group_stop(arg);
}

static const worker_role PREFILLER_ROLE = {
    .who = WHO, .held_what = "requests",
    .cancel = on_cancel, .transfer_peer = on_transfer_peer, .on_message = on_message,
    .new_session = drop_old_session,
    .poll_timeout = poll_timeout, .progress = progress, .arm = arm, .held = held,
    .load = load, .gauges = gauges,
    .on_stop = on_stop, .check = check_group, .step = step, .shutdown = shutdown_group,
};

/* The TransferEngine endpoint the router hands to decoders: this rank's
 * hello, or for a TP group every rank's, in rank order
 * (TransferGroupEndpoint). Collective over the group. */
static int group_endpoint(prefiller_ctx *ctx, uint8_t **out, size_t *out_len, char *err,
                          size_t errlen)
{
    const uint8_t *ep;
    size_t len;
    kv_pusher_endpoint(ctx->pusher, &ep, &len);
    *out = NULL;
    *out_len = 0;
    if (!ctx->group.world) {
        *out = malloc(len ? len : 1);
        if (!*out)
            return TN_ERR_ARG;
        memcpy(*out, ep, len);
        *out_len = len;
        return 0;
    }
    const int W = ctx->group.size;
    uint64_t mine = len, lens[COMM_MAX_WORLD], max = 0;
    if (comm_all_gather(ctx->group.world, &mine, lens, sizeof mine) != TN_OK) {
        snprintf(err, errlen, "sharing TransferEngine endpoints: %s",
                 comm_error(ctx->group.world));
        return TN_ERR_ARG;
    }
    for (int r = 0; r < W; r++)
        max = lens[r] > max ? lens[r] : max;
    uint8_t *pad = calloc(1, max ? max : 1), *all = calloc((size_t)W, max ? max : 1);
    int rc = pad && all ? 0 : -1;
    if (pad)
        memcpy(pad, ep, len);
    /* everyone joins the gather even after a failed allocation */
    if (comm_all_gather(ctx->group.world, pad ? pad : all, all ? all : pad,
                        pad && all ? max : 0) != TN_OK) {
        snprintf(err, errlen, "sharing TransferEngine endpoints: %s",
                 comm_error(ctx->group.world));
        rc = -1;
    }
    if (!rc && ctx->group.rank == 0) {
        ProtobufCBinaryData parts[COMM_MAX_WORLD];
        for (int r = 0; r < W; r++)
            parts[r] = (ProtobufCBinaryData){(size_t)lens[r], all + (size_t)r * max};
        Tandem__V1__TransferGroupEndpoint g = TANDEM__V1__TRANSFER_GROUP_ENDPOINT__INIT;
        g.rank_endpoints = parts;
        g.n_rank_endpoints = (size_t)W;
        *out_len = tandem__v1__transfer_group_endpoint__get_packed_size(&g);
        *out = malloc(*out_len ? *out_len : 1);
        if (*out)
            tandem__v1__transfer_group_endpoint__pack(&g, *out);
        else
            rc = -1;
    }
    if (rc && !err[0])
        snprintf(err, errlen, "out of memory");
    free(pad);
    free(all);
    return rc;
}

static void ctx_free(prefiller_ctx *ctx)
{
    worker_loop_free(&ctx->loop);
    while (ctx->head) {
        prefill_job *j = ctx->head;
        ctx->head = j->next;
        prefill_job_free(j);
    }
    if (ctx->pusher)
        kv_pusher_close(ctx->pusher);
    tm_kv_cache_free(&ctx->kv);
    tm_sampler_free(&ctx->sampler);
    tm_vocab_trie_free(&ctx->vocab);
    tm_model_free(ctx->model);
    kn_backend_free(&ctx->be);
    free(ctx);
}

/* The role's flags and their defaults, after the common ones: -1 to go
 * on, or the exit status (worker_parse_flags). */
static int parse_flags(prefiller_config *c, int argc, char **argv)
{
    worker_options *o = &c->w;
    worker_options_default(o);
    c->max_prompt_tokens = 4096;
    c->chunk_tokens = 512;
    c->transfer_timeout_ms = 30000;
    const opt_spec specs[] = {
        {"max-prompt-tokens", OPT_INT, &c->max_prompt_tokens, 0,
         "longest prompt accepted (sizes the KV cache)"},
        {"chunk-tokens", OPT_INT, &c->chunk_tokens, 0,
         "prompt tokens per forward call (the router is answered between chunks)"},
        {"transfer-timeout-ms", OPT_INT, &c->transfer_timeout_ms, 0,
         "give up a KV push after this long"},
    };
    return worker_parse_flags(o, "tandem-prefiller", INTRO, "tp", specs,
                              (int)(sizeof specs / sizeof *specs), argc, argv);
}

int main(int argc, char **argv)
{
    prefiller_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        fprintf(stderr, "tandem-prefiller: out of memory\n");
        return 1;
    }
    worker_loop_init(&ctx->loop, &PREFILLER_ROLE, ctx, WM_PREFILL);
    int prc = parse_flags(&ctx->cfg, argc, argv);
    if (prc >= 0) {
        free(ctx);
        return prc;
    }
    prefiller_config *c = &ctx->cfg;
    worker_options *o = &c->w;
    char err[512];
    /* the TP ranks first, before any thread exists */
    rank_group_spec spec;
    worker_group_spec(o, o->ranks, 1, "prefill", &spec);
    if (rank_group_start(&ctx->group, &spec, err, sizeof err) != TN_OK) {
        fprintf(stderr, "tandem-prefiller: %s\n", err);
        free(ctx);
        return 1;
    }
    const int rank0 = ctx->group.rank == 0;
    worker_fill_names(o, "prefiller");
    /* the group's rank 0 handles the signals and tells the others */
    int rc = 1;
    uint8_t *endpoint = NULL;
    size_t endpoint_len = 0;
    if (worker_loop_open_signals(&ctx->loop, rank0) != 0) {
        fprintf(stderr, "tandem-prefiller: cannot set up signals\n");
        goto out;
    }
    if (worker_load_model(o, WHO, &ctx->group, &ctx->be, &ctx->model, err, sizeof err) != 0) {
        fprintf(stderr, "tandem-prefiller: rank %d: %s\n", ctx->group.rank, err);
        goto out;
    }
    ctx->mc = tm_model_config(ctx->model);
    tm_sampler_init(&ctx->sampler, &ctx->be);
    if (worker_vocab_load(o->tokenizer, ctx->mc->vocab_size, &ctx->vocab, &ctx->has_vocab, err,
                          sizeof err) != TN_OK) {
        fprintf(stderr, "tandem-prefiller: %s\n", err);
        goto out;
    }
    int n_pages = (c->max_prompt_tokens + o->page_size - 1) / o->page_size;
    /* each TP rank caches only its KV heads */
    if (tm_kv_cache_init(&ctx->kv, &ctx->be, o->kv_elem, ctx->mc->n_layers,
                         tm_model_kv_heads(ctx->model), ctx->mc->head_dim, o->page_size,
                         n_pages) != TN_OK) {
        fprintf(stderr, "tandem-prefiller: cannot allocate a KV cache of %d pages\n", n_pages);
        goto out;
    }
    tn_log(WHO, "rank %d: %s KV cache, %d pages of %zu bytes per layer and pool",
           ctx->group.rank, kn_dtype_name(ctx->kv.dtype), n_pages, tm_kv_page_bytes(&ctx->kv));
    char engine_name[160];
    snprintf(engine_name, sizeof engine_name, "%s-r%d", o->worker_id, ctx->group.rank);
    if (kv_pusher_open_rank(&ctx->kv, ctx->mc->n_kv_heads, o->ranks, ctx->group.rank,
                            ctx->group.world ? engine_name : o->worker_id, o->ucx_tls,
                            o->same_host_shm, o->kv_path_mode, &ctx->pusher, err,
                            sizeof err) != 0) {
        fprintf(stderr, "tandem-prefiller: TransferEngine: %s\n", err);
        goto out;
    }
    tn_log(WHO, "rank %d: KV transfer %s", ctx->group.rank, kv_pusher_path(ctx->pusher));
    if (group_endpoint(ctx, &endpoint, &endpoint_len, err, sizeof err) != 0) {
        fprintf(stderr, "tandem-prefiller: rank %d: %s\n", ctx->group.rank, err);
        goto out;
    }
    if (!rank0) {
        tn_log(WHO, "%s: TP rank %d of %d ready (pid %d)", o->worker_id, ctx->group.rank,
               ctx->group.size, (int)getpid());
        rc = prefiller_rank_serve(ctx) == 0 ? 0 : 1;
        goto out;
    }
    int max_ctx = c->max_prompt_tokens < ctx->mc->max_position ? c->max_prompt_tokens
                                                              : ctx->mc->max_position;
    Tandem__V1__Register reg;
    worker_register_init(&reg, o, TANDEM__V1__WORKER_ROLE__WORKER_ROLE_PREFILLER, ctx->mc,
                         max_ctx, n_pages, endpoint, endpoint_len);
    if (worker_loop_join(&ctx->loop, o, &reg, err, sizeof err) != 0) {
        fprintf(stderr, "tandem-prefiller: %s\n", err);
        prefiller_group_stop(ctx);
        goto out;
    }
    tn_log(WHO, "%s: model %s (%s) on %s, %d KV pages of %d tokens, TP %d EP %d, router %s",
           o->worker_id, o->model_name, ctx->mc->model_type, o->device, n_pages, o->page_size,
           o->ranks, o->ep, o->router);
    worker_loop_run(&ctx->loop);
    rc = ctx->group_failed || ctx->loop.replaced ? 1 : 0;
    tn_log(WHO, "%s: stopped", o->worker_id);
out:
    free(endpoint);
    rc = worker_finish(o, "tandem-prefiller", &ctx->group, &ctx->model, rc);
    ctx_free(ctx);
    return rc;
}
