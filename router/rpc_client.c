#include "router/rpc_client.h"
#include "common/status.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>
#include "common/sys.h"
#include "common/wire.h"

int rpc_client_open(rpc_client *c, const char *endpoint, char *err, size_t errlen)
{
    return rpc_client_open_auth(c, endpoint, NULL, err, errlen);
}

int rpc_client_open_auth(rpc_client *c, const char *endpoint, const sock_auth *auth, char *err,
                         size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->zctx = zmq_ctx_new();
    if (!c->zctx || !(c->sock = zmq_socket(c->zctx, ZMQ_DEALER))) {
        snprintf(err, errlen, "cannot create a ZeroMQ socket: %s", zmq_strerror(errno));
        rpc_client_close(c);
        return TN_ERR_SYS;
    }
    int linger = 0;
    zmq_setsockopt(c->sock, ZMQ_LINGER, &linger, sizeof linger);
    if (auth && auth->enabled && sock_auth_client(c->sock, auth) != 0) {
        snprintf(err, errlen, "cannot set up CURVE: %s", zmq_strerror(errno));
        rpc_client_close(c);
        return TN_ERR_SYS;
    }
    if (zmq_connect(c->sock, endpoint) != 0) {
        snprintf(err, errlen, "cannot connect to %s: %s", endpoint, zmq_strerror(errno));
        rpc_client_close(c);
        return TN_ERR_SYS;
    }
    c->next_tag = tn_random_u64();
    return 0;
}

void rpc_client_close(rpc_client *c)
{
    if (c->sock)
        zmq_close(c->sock);
    if (c->zctx)
        zmq_ctx_term(c->zctx);
    memset(c, 0, sizeof *c);
}

int rpc_client_send(rpc_client *c, const Tandem__V1__ClientMessage *m)
{
    return wire_send(c->sock, NULL, 0, &m->base, 0);
}

int rpc_client_recv(rpc_client *c, int timeout_ms, Tandem__V1__ClientMessage **out)
{
    uint64_t deadline = tn_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        uint64_t now = tn_now_ms();
        int left = now < deadline ? (int)(deadline - now) : 0;
        zmq_pollitem_t it = {c->sock, 0, ZMQ_POLLIN, 0};
        int n = zmq_poll(&it, 1, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            return 0;
        ProtobufCMessage *msg = NULL;
        int rc = wire_recv(c->sock, NULL, 0, NULL, &tandem__v1__client_message__descriptor,
                           &msg, ZMQ_DONTWAIT);
        if (rc == 0) {
            *out = (Tandem__V1__ClientMessage *)msg;
            return 1;
        }
        if (rc == -1 && errno != EAGAIN)
            return -1;
        /* A malformed message: skip it. */
    }
}

int rpc_cancel(rpc_client *c, const char *request_id)
{
    Tandem__V1__Cancel cancel = TANDEM__V1__CANCEL__INIT;
    cancel.request_id = (char *)request_id;
    Tandem__V1__ClientMessage m = TANDEM__V1__CLIENT_MESSAGE__INIT;
    m.body_case = TANDEM__V1__CLIENT_MESSAGE__BODY_CANCEL;
    m.cancel = &cancel;
    return rpc_client_send(c, &m);
}

int rpc_generate(rpc_client *c, const rpc_generate_params *p, rpc_chunk_fn fn, void *user,
                 char *request_id, int idle_timeout_ms, char *err, size_t errlen)
{
    char tag[32];
    snprintf(tag, sizeof tag, "%016" PRIx64, c->next_tag++);
    Tandem__V1__SamplingParams sp = TANDEM__V1__SAMPLING_PARAMS__INIT;
    sp.temperature = p->temperature;
    sp.top_p = p->top_p;
    sp.top_k = p->top_k;
    sp.seed = p->seed;
    Tandem__V1__GenerateRequest g = TANDEM__V1__GENERATE_REQUEST__INIT;
    g.model = (char *)p->model;
    g.prompt_tokens = (int32_t *)p->prompt;
    g.n_prompt_tokens = (size_t)p->n_prompt;
    g.sampling = &sp;
    g.has_seed = p->has_seed;
    g.max_tokens = (uint32_t)(p->max_tokens > 0 ? p->max_tokens : 0);
    g.stop_token_ids = (int32_t *)p->stop_ids;
    g.n_stop_token_ids = (size_t)p->n_stop_ids;
    g.ignore_eos = p->ignore_eos;
    g.stream = p->stream;
    g.client_tag = tag;
    Tandem__V1__ClientMessage m = TANDEM__V1__CLIENT_MESSAGE__INIT;
    m.body_case = TANDEM__V1__CLIENT_MESSAGE__BODY_GENERATE;
    m.generate = &g;
    request_id[0] = '\0';
    if (rpc_client_send(c, &m) != 0) {
        snprintf(err, errlen, "send failed: %s", zmq_strerror(errno));
        return TN_ERR_SYS;
    }
    int cancelled = 0;
    for (;;) {
        Tandem__V1__ClientMessage *r = NULL;
        int rc = rpc_client_recv(c, idle_timeout_ms, &r);
        if (rc <= 0) {
            snprintf(err, errlen, rc == 0 ? "no reply from the router within %d ms"
                                          : "receive failed", idle_timeout_ms);
            return TN_ERR_ARG;
        }
        int result = -2; /* keep going */
        if (r->body_case == TANDEM__V1__CLIENT_MESSAGE__BODY_ERROR && r->error &&
            !strcmp(r->error->client_tag, tag)) {
            snprintf(err, errlen, "refused (code %d): %s", (int)r->error->code, r->error->message);
            result = -1;
        } else if (r->body_case == TANDEM__V1__CLIENT_MESSAGE__BODY_ACCEPTED && r->accepted &&
                   !strcmp(r->accepted->client_tag, tag)) {
            snprintf(request_id, 24, "%s", r->accepted->request_id);
        } else if (r->body_case == TANDEM__V1__CLIENT_MESSAGE__BODY_CHUNK && r->chunk &&
                   request_id[0] && !strcmp(r->chunk->request_id, request_id)) {
            if (fn && fn(user, r->chunk) && !cancelled) {
                rpc_cancel(c, request_id);
                cancelled = 1;
            }
            if (r->chunk->finish_reason != TANDEM__V1__FINISH_REASON__FINISH_REASON_NONE) {
                result = r->chunk->finish_reason;
                if (result == TANDEM__V1__FINISH_REASON__FINISH_REASON_ERROR && r->chunk->error)
                    snprintf(err, errlen, "%s", r->chunk->error->message);
            }
        }
        tandem__v1__client_message__free_unpacked(r, NULL);
        if (result != -2)
            return result;
    }
}

int rpc_status(rpc_client *c, int timeout_ms, Tandem__V1__ClusterStatus **out, char *err,
               size_t errlen)
{
    Tandem__V1__StatusRequest sr = TANDEM__V1__STATUS_REQUEST__INIT;
    Tandem__V1__ClientMessage m = TANDEM__V1__CLIENT_MESSAGE__INIT;
    m.body_case = TANDEM__V1__CLIENT_MESSAGE__BODY_STATUS_REQUEST;
    m.status_request = &sr;
    *out = NULL;
    if (rpc_client_send(c, &m) != 0) {
        snprintf(err, errlen, "send failed: %s", zmq_strerror(errno));
        return TN_ERR_SYS;
    }
    uint64_t deadline = tn_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        uint64_t now = tn_now_ms();
        Tandem__V1__ClientMessage *r = NULL;
        int rc = rpc_client_recv(c, now < deadline ? (int)(deadline - now) : 0, &r);
        if (rc <= 0) {
            snprintf(err, errlen, "no status from the router within %d ms", timeout_ms);
            return TN_ERR_TIMEOUT;
        }
        if (r->body_case == TANDEM__V1__CLIENT_MESSAGE__BODY_STATUS && r->status) {
            /* Detach the status so the caller owns it alone. */
            *out = r->status;
            r->status = NULL;
            r->body_case = TANDEM__V1__CLIENT_MESSAGE__BODY__NOT_SET;
            tandem__v1__client_message__free_unpacked(r, NULL);
            return 0;
        }
        tandem__v1__client_message__free_unpacked(r, NULL);
    }
}
