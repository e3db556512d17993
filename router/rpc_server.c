/* The router's client RPC API on its ZeroMQ ROUTER socket: generate with a
 * token stream, cancel, cluster status (tandem.v1.ClientMessage). Runs on
 * the core thread with the lock held. */
#include "router/router.h"

#include <zmq.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/sys.h"

#define WHO "router"

static void reply(router_ctx *ctx, const uint8_t *rid, size_t rid_len,
                  const Tandem__V1__ClientMessage *m)
{
    if (wire_send(ctx->rpc_sock, rid, rid_len, &m->base, ZMQ_DONTWAIT) != 0 && errno != EHOSTUNREACH)
        tn_log(WHO, "RPC reply failed: %s", strerror(errno));
}

static void reply_error(router_ctx *ctx, const uint8_t *rid, size_t rid_len, int code,
                        const char *tag, const char *request_id, const char *msg)
{
    if (tag) {
        /* A refused GenerateRequest is a finished request too. */
        metrics_outcome o = code == TANDEM__V1__ERROR_CODE__ERROR_CODE_NO_CAPACITY ? OUTCOME_REJECTED
                            : code == TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL  ? OUTCOME_ERROR
                                                                                   : OUTCOME_CLIENT_ERROR;
        metrics_request_done(&ctx->metrics, API_RPC, o);
    }
    Tandem__V1__Error e = TANDEM__V1__ERROR__INIT;
    e.code = code;
    e.message = (char *)msg;
    e.client_tag = (char *)(tag ? tag : "");
    e.request_id = (char *)(request_id ? request_id : "");
    Tandem__V1__ClientMessage m = TANDEM__V1__CLIENT_MESSAGE__INIT;
    m.body_case = TANDEM__V1__CLIENT_MESSAGE__BODY_ERROR;
    m.error = &e;
    reply(ctx, rid, rid_len, &m);
}

static void on_generate(router_ctx *ctx, const uint8_t *rid, size_t rid_len,
                        const Tandem__V1__GenerateRequest *g)
{
    const char *tag = g->client_tag;
    const int BAD = TANDEM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT;
    if (strlen(tag) >= sizeof(((router_request *)0)->client_tag)) {
        reply_error(ctx, rid, rid_len, BAD, "", NULL, "client_tag longer than 127 bytes");
        return;
    }
    if (!g->model[0] || strlen(g->model) >= API_MAX_MODEL) {
        reply_error(ctx, rid, rid_len, BAD, tag, NULL, "model must be 1..127 bytes");
        return;
    }
    if (g->n_prompt_tokens == 0) {
        reply_error(ctx, rid, rid_len, BAD, tag, NULL, "prompt_tokens must not be empty");
        return;
    }
    float temp = g->sampling ? g->sampling->temperature : 0.0f;
    float top_p = g->sampling ? g->sampling->top_p : 0.0f;
    int top_k = g->sampling ? g->sampling->top_k : 0;
    if (top_p == 0.0f)
        top_p = 1.0f;
    if (!isfinite(temp) || temp < 0 || temp > 2 || !(top_p > 0 && top_p <= 1)) {
        reply_error(ctx, rid, rid_len, BAD, tag, NULL,
                    "sampling: temperature must be in [0, 2] and top_p in (0, 1]");
        return;
    }
    if (ctx->n_active + ctx->n_queued >= ctx->cfg.max_active_requests) {
        reply_error(ctx, rid, rid_len, TANDEM__V1__ERROR_CODE__ERROR_CODE_NO_CAPACITY, tag, NULL,
                    "the router is at its active request limit");
        return;
    }
    router_request *r = request_new(ctx, ORIGIN_RPC);
    if (!r || !(r->prompt = malloc(g->n_prompt_tokens * sizeof *r->prompt))) {
        request_unref(r);
        reply_error(ctx, rid, rid_len, TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL, tag, NULL,
                    "router out of memory");
        return;
    }
    memcpy(r->client_rid, rid, rid_len);
    r->client_rid_len = rid_len;
    snprintf(r->client_tag, sizeof r->client_tag, "%s", tag);
    snprintf(r->model, sizeof r->model, "%s", g->model);
    memcpy(r->prompt, g->prompt_tokens, g->n_prompt_tokens * sizeof *r->prompt);
    r->n_prompt = (int)g->n_prompt_tokens;
    r->kind = API_COMPLETIONS;
    r->temperature = temp;
    r->top_p = top_p;
    r->top_k = top_k;
    r->seed = g->has_seed && g->sampling ? g->sampling->seed : tn_random_u64();
    r->stream = g->stream;
    api_error e;
    if (request_admit(ctx, r, (int)(g->max_tokens > 0x7fffffff ? 0x7fffffff : g->max_tokens),
                      g->stop_token_ids, (int)g->n_stop_token_ids, g->ignore_eos, &e) != 0) {
        reply_error(ctx, rid, rid_len, error_code_from_http(&e), tag, NULL, e.message);
        request_unref(r);
        return;
    }
    Tandem__V1__GenerateAccepted acc = TANDEM__V1__GENERATE_ACCEPTED__INIT;
    acc.client_tag = r->client_tag;
    acc.request_id = r->id;
    acc.prompt_tokens = (uint32_t)r->n_prompt;
    Tandem__V1__ClientMessage m = TANDEM__V1__CLIENT_MESSAGE__INIT;
    m.body_case = TANDEM__V1__CLIENT_MESSAGE__BODY_ACCEPTED;
    m.accepted = &acc;
    reply(ctx, rid, rid_len, &m);
    request_table_add(ctx, r);
    request_unref(r); /* the table's reference is the only one */
    ctx->metrics.accepted++;
    ctx->metrics.in_flight[API_RPC]++;
    ctx->metrics.input_tokens += (uint64_t)r->n_prompt;
    dispatch_place(ctx, r);
}

static void on_cancel(router_ctx *ctx, const uint8_t *rid, size_t rid_len,
                      const Tandem__V1__Cancel *c)
{
    router_request *r = request_find_client(ctx, c->request_id);
    if (!r || r->origin != ORIGIN_RPC || r->client_rid_len != rid_len ||
        memcmp(r->client_rid, rid, rid_len) || r->finished) {
        reply_error(ctx, rid, rid_len, TANDEM__V1__ERROR_CODE__ERROR_CODE_UNKNOWN_REQUEST, "",
                    c->request_id, "no active request with that id belongs to this client");
        return;
    }
    tn_log(WHO, "request %s cancelled by its RPC client", r->id);
    dispatch_cancel(ctx, r);
}

static void on_status(router_ctx *ctx, const uint8_t *rid, size_t rid_len)
{
    int n = ctx->workers.n;
    Tandem__V1__WorkerStatus *ws = calloc((size_t)(n ? n : 1), sizeof *ws);
    Tandem__V1__WorkerStatus **wp = calloc((size_t)(n ? n : 1), sizeof *wp);
    Tandem__V1__PrefillerLoad *pl = calloc((size_t)(n ? n : 1), sizeof *pl);
    Tandem__V1__DecoderLoad *dl = calloc((size_t)(n ? n : 1), sizeof *dl);
    char **models = calloc((size_t)(n ? n : 1), sizeof *models);
    if (!ws || !wp || !pl || !dl || !models) {
        reply_error(ctx, rid, rid_len, TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL, "", NULL,
                    "router out of memory");
        goto out;
    }
    uint64_t now = tn_now_ms();
    int n_models = 0;
    for (int i = 0; i < n; i++) {
        const router_worker *w = ctx->workers.w[i];
        tandem__v1__worker_status__init(&ws[i]);
        ws[i].worker_id = (char *)w->id;
        ws[i].role = w->role;
        ws[i].model = (char *)w->model;
        ws[i].ms_since_heartbeat = (uint32_t)(now - w->last_seen_ms);
        ws[i].requests_in_flight = (uint32_t)w->in_flight;
        if (w->role == TANDEM__V1__WORKER_ROLE__WORKER_ROLE_PREFILLER) {
            tandem__v1__prefiller_load__init(&pl[i]);
            pl[i].queued_input_tokens = w->pload.queued_input_tokens;
            pl[i].queued_requests = w->pload.queued_requests;
            pl[i].input_tokens_per_s = w->pload.input_tokens_per_s;
            pl[i].input_tokens_total = w->pload.input_tokens_total;
            ws[i].load_case = TANDEM__V1__WORKER_STATUS__LOAD_PREFILLER;
            ws[i].prefiller = &pl[i];
        } else {
            tandem__v1__decoder_load__init(&dl[i]);
            dl[i].batch_size = w->dload.batch_size;
            dl[i].waiting = w->dload.waiting;
            dl[i].kv_pages_free = w->dload.kv_pages_free;
            dl[i].kv_pages_total = w->dload.kv_pages_total;
            dl[i].tokens_per_s = w->dload.tokens_per_s;
            dl[i].tokens_total = w->dload.tokens_total;
            ws[i].load_case = TANDEM__V1__WORKER_STATUS__LOAD_DECODER;
            ws[i].decoder = &dl[i];
        }
        wp[i] = &ws[i];
        int dup = 0;
        for (int k = 0; k < n_models; k++)
            dup |= !strcmp(models[k], w->model);
        if (!dup)
            models[n_models++] = (char *)w->model;
    }
    Tandem__V1__ClusterStatus st = TANDEM__V1__CLUSTER_STATUS__INIT;
    st.workers = wp;
    st.n_workers = (size_t)n;
    st.requests_active = (uint32_t)ctx->n_active;
    st.requests_total = ctx->metrics.accepted;
    st.models = models;
    st.n_models = (size_t)n_models;
    Tandem__V1__ClientMessage m = TANDEM__V1__CLIENT_MESSAGE__INIT;
    m.body_case = TANDEM__V1__CLIENT_MESSAGE__BODY_STATUS;
    m.status = &st;
    reply(ctx, rid, rid_len, &m);
out:
    free(ws);
    free(wp);
    free(pl);
    free(dl);
    free(models);
}

void rpc_handle_message(router_ctx *ctx, const uint8_t *rid, size_t rid_len,
                        const Tandem__V1__ClientMessage *m)
{
    switch (m->body_case) {
    case TANDEM__V1__CLIENT_MESSAGE__BODY_GENERATE:
        if (m->generate)
            on_generate(ctx, rid, rid_len, m->generate);
        break;
    case TANDEM__V1__CLIENT_MESSAGE__BODY_CANCEL:
        if (m->cancel)
            on_cancel(ctx, rid, rid_len, m->cancel);
        break;
    case TANDEM__V1__CLIENT_MESSAGE__BODY_STATUS_REQUEST:
        on_status(ctx, rid, rid_len);
        break;
    default:
        reply_error(ctx, rid, rid_len, TANDEM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT, "",
                    NULL, "expected generate, cancel or status_request");
        break;
    }
}

void rpc_deliver(router_ctx *ctx, router_request *r)
{
    if (!r->stream && !r->finished)
        return;
    if (r->stream && r->rpc_sent == r->n_out && !r->finished)
        return;
    Tandem__V1__Error e = TANDEM__V1__ERROR__INIT;
    Tandem__V1__TokenChunk c = TANDEM__V1__TOKEN_CHUNK__INIT;
    c.request_id = r->id;
    c.tokens = r->out ? r->out + r->rpc_sent : NULL; /* no output yet: NULL + 0 is UB */
    c.n_tokens = (size_t)(r->n_out - r->rpc_sent);
    c.prompt_tokens = (uint32_t)r->n_prompt;
    c.completion_tokens = (uint32_t)r->n_out;
    if (r->finished) {
        c.finish_reason = r->finish_reason;
        if (r->finish_reason == TANDEM__V1__FINISH_REASON__FINISH_REASON_ERROR) {
            e.code = error_code_from_http(&r->error);
            e.message = r->error.message;
            e.request_id = r->id;
            e.client_tag = r->client_tag;
            c.error = &e;
        }
    }
    Tandem__V1__ClientMessage m = TANDEM__V1__CLIENT_MESSAGE__INIT;
    m.body_case = TANDEM__V1__CLIENT_MESSAGE__BODY_CHUNK;
    m.chunk = &c;
    if (wire_send(ctx->rpc_sock, r->client_rid, r->client_rid_len, &m.base, ZMQ_DONTWAIT) != 0) {
        /* EHOSTUNREACH: the client is gone; EAGAIN: it stopped reading. */
        tn_log(WHO, "request %s: RPC client unreachable (%s), cancelling", r->id, strerror(errno));
        request_queue_cancel(ctx, r);
        return;
    }
    r->rpc_sent = r->n_out;
}
