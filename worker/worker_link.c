#include "worker/worker_link.h"
#include "common/status.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>
#include "common/sys.h"

#define REGISTER_RETRY_MS 1000

static void send_register(worker_link *l, uint64_t now_ms)
{
    if (zmq_send(l->sock, l->register_msg, l->register_len, ZMQ_DONTWAIT) < 0)
        tn_log(l->who, "cannot send the registration: %s", zmq_strerror(errno));
    l->last_register_ms = now_ms;
}

int link_open(worker_link *l, const char *who, const char *endpoint, const char *id,
              const Tandem__V1__Register *reg, char *err, size_t errlen)
{
    return link_open_auth(l, who, endpoint, id, reg, NULL, err, errlen);
}

int link_open_auth(worker_link *l, const char *who, const char *endpoint, const char *id,
                   const Tandem__V1__Register *reg, const sock_auth *auth, char *err,
                   size_t errlen)
{
    memset(l, 0, sizeof *l);
    l->who = who;
    if (!id[0] || strlen(id) > WIRE_MAX_ID) {
        snprintf(err, errlen, "worker id must be 1..%d bytes", WIRE_MAX_ID);
        return TN_ERR_ARG;
    }
    snprintf(l->id, sizeof l->id, "%s", id);
    Tandem__V1__WorkerMessage m = TANDEM__V1__WORKER_MESSAGE__INIT;
    m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_REGISTER;
    m.register_ = (Tandem__V1__Register *)reg;
    l->register_len = tandem__v1__worker_message__get_packed_size(&m);
    l->register_msg = malloc(l->register_len ? l->register_len : 1);
    l->zctx = zmq_ctx_new();
    if (!l->register_msg || !l->zctx || !(l->sock = zmq_socket(l->zctx, ZMQ_DEALER))) {
        snprintf(err, errlen, "cannot create the ZeroMQ socket: %s", zmq_strerror(errno));
        link_close(l);
        return TN_ERR_SYS;
    }
    tandem__v1__worker_message__pack(&m, l->register_msg);
    int linger = 0, hwm = 100000;
    zmq_setsockopt(l->sock, ZMQ_ROUTING_ID, l->id, strlen(l->id));
    zmq_setsockopt(l->sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(l->sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(l->sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
    if (auth && auth->enabled && sock_auth_client(l->sock, auth) != 0) {
        snprintf(err, errlen, "cannot set up CURVE on the router connection: %s",
                 zmq_strerror(errno));
        link_close(l);
        return TN_ERR_SYS;
    }
    char ep[300];
    snprintf(ep, sizeof ep, "%s%s", strstr(endpoint, "://") ? "" : "tcp://", endpoint);
    if (zmq_connect(l->sock, ep) != 0) {
        snprintf(err, errlen, "cannot connect to the router at %s: %s", endpoint,
                 zmq_strerror(errno));
        link_close(l);
        return TN_ERR_SYS;
    }
    send_register(l, tn_now_ms());
    return 0;
}

void link_close(worker_link *l)
{
    if (l->sock)
        zmq_close(l->sock);
    if (l->zctx)
        zmq_ctx_term(l->zctx);
    free(l->register_msg);
    memset(l, 0, sizeof *l);
}

int link_send(worker_link *l, const Tandem__V1__WorkerMessage *m)
{
    if (wire_send(l->sock, NULL, 0, &m->base, ZMQ_DONTWAIT) != 0) {
        tn_log(l->who, "send to the router failed: %s", zmq_strerror(errno));
        return -1;
    }
    return 0;
}

int link_recv(worker_link *l, Tandem__V1__WorkerMessage **out)
{
    for (;;) {
        ProtobufCMessage *msg = NULL;
        int rc = wire_recv(l->sock, NULL, 0, NULL, &tandem__v1__worker_message__descriptor,
                           &msg, ZMQ_DONTWAIT);
        if (rc == -1)
            return 0;
        if (rc == -2) {
            tn_log(l->who, "dropped a malformed message from the router");
            continue;
        }
        Tandem__V1__WorkerMessage *m = (Tandem__V1__WorkerMessage *)msg;
        if (m->body_case == TANDEM__V1__WORKER_MESSAGE__BODY_REGISTER_ACK && m->register_ack) {
            if (!l->registered)
                tn_log(l->who, "registered with the router as %s (heartbeat every %u ms)", l->id,
                       m->register_ack->heartbeat_interval_ms);
            l->registered = 1;
            l->heartbeat_ms = m->register_ack->heartbeat_interval_ms
                                  ? m->register_ack->heartbeat_interval_ms : 500;
            tandem__v1__worker_message__free_unpacked(m, NULL);
            continue;
        }
        if (m->body_case == TANDEM__V1__WORKER_MESSAGE__BODY_DEREGISTER_ACK && m->deregister_ack) {
            if (m->deregister_ack->accepted) {
                tn_log(l->who, "deregistered: leaving");
                l->drain = LINK_LEFT;
            } else if (l->drain == LINK_DEREGISTERING) {
                tn_log(l->who, "the router says not yet (%s): finishing those first",
                       m->deregister_ack->reason);
                l->drain = LINK_DRAINING;
            }
            tandem__v1__worker_message__free_unpacked(m, NULL);
            continue;
        }
        if (m->body_case == TANDEM__V1__WORKER_MESSAGE__BODY_ERROR && m->error &&
            m->error->code == TANDEM__V1__ERROR_CODE__ERROR_CODE_WORKER_REPLACED) {
            /* Registering again would be refused again, every second,
             * forever: this process's work is already placed elsewhere. */
            if (!l->replaced[0])
                snprintf(l->replaced, sizeof l->replaced, "the router refused our registration: %s",
                         m->error->message[0] ? m->error->message
                                              : "a newer process serves under this id");
            l->registered = 0;
            tandem__v1__worker_message__free_unpacked(m, NULL);
            continue;
        }
        if (m->body_case == TANDEM__V1__WORKER_MESSAGE__BODY_ERROR && m->error &&
            m->error->code == TANDEM__V1__ERROR_CODE__ERROR_CODE_UNKNOWN_WORKER &&
            l->drain != LINK_SERVING) {
            /* Leaving: the router forgot us (restart, expiry); nothing to
             * deregister from. */
            if (l->drain == LINK_DEREGISTERING || l->drain == LINK_DRAINING)
                tn_log(l->who, "the router does not know us any more: leaving");
            l->drain = LINK_LEFT;
            tandem__v1__worker_message__free_unpacked(m, NULL);
            continue;
        }
        if (m->body_case == TANDEM__V1__WORKER_MESSAGE__BODY_ERROR && m->error &&
            m->error->code == TANDEM__V1__ERROR_CODE__ERROR_CODE_UNKNOWN_WORKER) {
            if (l->replaced[0]) {
                tandem__v1__worker_message__free_unpacked(m, NULL);
                continue;
            }
            if (l->registered) {
                tn_log(l->who, "the router does not know us (restarted?): registering again");
                l->session++;
            }
            l->registered = 0;
            send_register(l, tn_now_ms());
            tandem__v1__worker_message__free_unpacked(m, NULL);
            continue;
        }
        if (m->body_case == TANDEM__V1__WORKER_MESSAGE__BODY_ERROR && m->error &&
            !m->error->request_id[0]) {
            tn_log(l->who, "router error %d: %s", (int)m->error->code, m->error->message);
            tandem__v1__worker_message__free_unpacked(m, NULL);
            continue;
        }
        *out = m;
        return 1;
    }
}

int link_next_due_ms(const worker_link *l, uint64_t now_ms)
{
    if (l->replaced[0])
        return REGISTER_RETRY_MS; /* nothing due any more */
    uint64_t due = l->registered ? l->last_heartbeat_ms + l->heartbeat_ms
                                 : l->last_register_ms + REGISTER_RETRY_MS;
    return due > now_ms ? (int)(due - now_ms) : 0;
}

int link_tick(worker_link *l, uint64_t now_ms)
{
    if (l->replaced[0])
        return 0;
    if (!l->registered) {
        if (now_ms - l->last_register_ms >= REGISTER_RETRY_MS)
            send_register(l, now_ms);
        return 0;
    }
    return now_ms - l->last_heartbeat_ms >= l->heartbeat_ms;
}

void link_heartbeat_sent(worker_link *l, uint64_t now_ms)
{
    l->last_heartbeat_ms = now_ms;
}

void link_begin_drain(worker_link *l)
{
    if (l->drain == LINK_SERVING)
        l->drain = LINK_DRAINING;
}

/* How long a Deregister may go unanswered before the worker leaves anyway:
 * long enough for a live router (it answers at once), short enough that a
 * worker whose router is gone exits well inside its grace period. */
static uint64_t ack_timeout_ms(const worker_link *l)
{
    uint64_t t = 3 * (uint64_t)(l->heartbeat_ms ? l->heartbeat_ms : 500);
    return t < 1000 ? 1000 : t;
}

int link_drain_step(worker_link *l, int idle, uint64_t now_ms)
{
    switch (l->drain) {
    case LINK_SERVING:
        return 0;
    case LINK_LEFT:
        return 1;
    case LINK_DEREGISTERING:
        if (now_ms - l->deregister_sent_ms < ack_timeout_ms(l))
            return 0;
        tn_log(l->who, "no answer to Deregister within %llu ms: leaving",
               (unsigned long long)ack_timeout_ms(l));
        l->drain = LINK_LEFT;
        return 1;
    case LINK_DRAINING:
        break;
    }
    if (!idle || now_ms < l->next_deregister_ms)
        return 0;
    if (!l->registered) {
        l->drain = LINK_LEFT; /* never got in: nothing to leave */
        return 1;
    }
    Tandem__V1__Deregister d = TANDEM__V1__DEREGISTER__INIT;
    d.worker_id = l->id;
    Tandem__V1__WorkerMessage m = TANDEM__V1__WORKER_MESSAGE__INIT;
    m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_DEREGISTER;
    m.deregister = &d;
    link_send(l, &m);
    l->drain = LINK_DEREGISTERING;
    l->deregister_sent_ms = now_ms;
    /* After a "not yet", ask again no sooner than a heartbeat later. */
    l->next_deregister_ms = now_ms + (l->heartbeat_ms ? l->heartbeat_ms : 500);
    return 0;
}
