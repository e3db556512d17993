#include "transfer/transfer_session.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>
#include "transfer/transfer_internal.h"

/* Waits for a readable socket, bounded by the absolute deadline. */
static int wait_readable(void *sock, double deadline)
{
    for (;;) {
        double left = deadline - te_now_seconds();
        if (left <= 0)
            return 0;
        zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
        int rc = zmq_poll(&item, 1, (long)(left * 1000) + 1);
        if (rc > 0)
            return 1;
        if (rc < 0 && zmq_errno() != EINTR)
            return -1;
    }
}

/* Receives one frame into a malloc'ed buffer. */
static int recv_frame(void *sock, uint8_t **buf, size_t *len, int *more)
{
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, sock, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&msg);
        return -1;
    }
    *len = zmq_msg_size(&msg);
    *buf = malloc(*len ? *len : 1);
    if (*buf)
        memcpy(*buf, zmq_msg_data(&msg), *len);
    *more = zmq_msg_more(&msg);
    zmq_msg_close(&msg);
    return *buf ? 0 : -1;
}

/* Drops the remaining frames of a multi-frame message. */
static void drain(void *sock, int more)
{
    while (more) {
        uint8_t *b;
        size_t l;
        if (recv_frame(sock, &b, &l, &more))
            return;
        free(b);
    }
}

static int fail(char *err, size_t err_len, int status, const char *what)
{
    snprintf(err, err_len, "%s", what);
    return status;
}

int te_session_connect(void *zmq_ctx, const char *endpoint, te_engine *e,
                       const te_kv_local *kv, int timeout_ms, te_session_offer *out,
                       char *err, size_t err_len)
{
    memset(out, 0, sizeof *out);
    double deadline = te_now_seconds() + timeout_ms / 1000.0;
    void *sock = zmq_socket(zmq_ctx, ZMQ_DEALER);
    if (!sock) {
        snprintf(err, err_len, "zmq_socket: %s", zmq_strerror(zmq_errno()));
        return TN_ERR_ARG;
    }
    int linger = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
    int rc = TN_OK;
    uint8_t *hello = NULL;
    size_t hello_len = 0;
    Tandem__Transfer__ControlMessage *their_hello = NULL, *request = NULL;
    if (zmq_connect(sock, endpoint) != 0) {
        snprintf(err, err_len, "zmq_connect %s: %s", endpoint, zmq_strerror(zmq_errno()));
        rc = TN_ERR_ARG;
        goto out;
    }
    rc = te_kv_hello_pack(e, kv, &hello, &hello_len);
    if (rc != TN_OK) {
        snprintf(err, err_len, "packing hello: %s", te_engine_error(e));
        goto out;
    }
    if (zmq_send(sock, hello, hello_len, 0) != (int)hello_len) {
        snprintf(err, err_len, "zmq_send hello: %s", zmq_strerror(zmq_errno()));
        rc = TN_ERR_PEER;
        goto out;
    }
    /* Two messages back: the receiver's hello, then its request. */
    while (!their_hello || !request) {
        int r = wait_readable(sock, deadline);
        if (r <= 0) {
            snprintf(err, err_len, "no %s from receiver %s within %d ms",
                     their_hello ? "request" : "hello", endpoint, timeout_ms);
            rc = TN_ERR_TIMEOUT;
            goto out;
        }
        uint8_t *buf;
        size_t len;
        int more;
        if (recv_frame(sock, &buf, &len, &more)) {
            rc = fail(err, err_len, TN_ERR_PEER, "receiving from the receiver failed");
            goto out;
        }
        drain(sock, more);
        Tandem__Transfer__ControlMessage *m = te_control_unpack(buf, len);
        free(buf);
        if (!m) {
            rc = fail(err, err_len, TN_ERR_PROTO, "malformed control message from the receiver");
            goto out;
        }
        if (m->body_case == TANDEM__TRANSFER__CONTROL_MESSAGE__BODY_HELLO && !their_hello) {
            their_hello = m;
        } else if (m->body_case == TANDEM__TRANSFER__CONTROL_MESSAGE__BODY_KV_REQUEST && !request) {
            request = m;
        } else {
            tandem__transfer__control_message__free_unpacked(m, NULL);
            rc = fail(err, err_len, TN_ERR_PROTO, "unexpected control message from the receiver");
            goto out;
        }
    }
    const Tandem__Transfer__KvRequest *kr = request->kv_request;
    if (kr->n_tokens > (uint32_t)INT32_MAX || kr->n_pages > (size_t)INT32_MAX) {
        rc = fail(err, err_len, TN_ERR_PROTO, "request too large");
        goto out;
    }
    out->pages = malloc((kr->n_pages ? kr->n_pages : 1) * sizeof *out->pages);
    if (!out->pages) {
        rc = fail(err, err_len, TN_ERR_NOMEM, "out of memory for the page table");
        goto out;
    }
    if (kr->n_pages)
        memcpy(out->pages, kr->pages, kr->n_pages * sizeof *out->pages);
    out->n_pages = (int)kr->n_pages;
    out->n_tokens = (int)kr->n_tokens;
    out->request_id = kr->request_id;
    int need = out->n_tokens ? (out->n_tokens - 1) / (int)their_hello->hello->shard->page_size + 1 : 0;
    if (their_hello->hello->shard->page_size == 0 || out->n_pages < need) {
        snprintf(err, err_len, "request %llu: %d pages cannot hold %d tokens",
                 (unsigned long long)out->request_id, out->n_pages, out->n_tokens);
        rc = TN_ERR_PROTO;
        goto out;
    }
    rc = te_kv_connect(e, their_hello->hello, &out->remote);
    if (rc != TN_OK)
        snprintf(err, err_len, "connecting to the receiver: %s", te_engine_error(e));
out:
    if (rc != TN_OK) {
        free(out->pages);
        out->pages = NULL;
    }
    if (their_hello)
        tandem__transfer__control_message__free_unpacked(their_hello, NULL);
    if (request)
        tandem__transfer__control_message__free_unpacked(request, NULL);
    free(hello);
    zmq_close(sock);
    return rc;
}

void te_session_offer_free(te_engine *e, te_session_offer *o)
{
    if (o->remote.peer)
        te_kv_disconnect(e, &o->remote);
    free(o->pages);
    o->pages = NULL;
}

int te_session_bind(void *zmq_ctx, void **socket, char *endpoint, size_t endpoint_len,
                    char *err, size_t err_len)
{
    void *sock = zmq_socket(zmq_ctx, ZMQ_ROUTER);
    if (!sock) {
        snprintf(err, err_len, "zmq_socket: %s", zmq_strerror(zmq_errno()));
        return TN_ERR_ARG;
    }
    int linger = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_bind(sock, "tcp://127.0.0.1:*") != 0) {
        snprintf(err, err_len, "zmq_bind tcp://127.0.0.1:*: %s", zmq_strerror(zmq_errno()));
        zmq_close(sock);
        return TN_ERR_ARG;
    }
    size_t len = endpoint_len;
    if (zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, endpoint, &len) != 0) {
        snprintf(err, err_len, "ZMQ_LAST_ENDPOINT: %s", zmq_strerror(zmq_errno()));
        zmq_close(sock);
        return TN_ERR_ARG;
    }
    *socket = sock;
    return TN_OK;
}

static int send_to(void *sock, const uint8_t *id, size_t id_len, const uint8_t *buf, size_t len)
{
    if (zmq_send(sock, id, id_len, ZMQ_SNDMORE) != (int)id_len)
        return -1;
    return zmq_send(sock, buf, len, 0) == (int)len ? 0 : -1;
}

int te_session_accept(void *socket, te_engine *e, const te_kv_local *kv, int n_senders,
                      uint64_t request_id, int n_tokens, const int32_t *pages, int n_pages,
                      int timeout_ms, te_kv_remote *senders, char *err, size_t err_len)
{
    double deadline = te_now_seconds() + timeout_ms / 1000.0;
    uint8_t **ids = calloc((size_t)n_senders, sizeof *ids);
    size_t *id_lens = calloc((size_t)n_senders, sizeof *id_lens);
    uint8_t *hello = NULL, *request = NULL;
    size_t hello_len = 0, request_len = 0;
    int got = 0, rc = TN_OK;
    memset(senders, 0, (size_t)n_senders * sizeof *senders);
    if (!ids || !id_lens) {
        rc = fail(err, err_len, TN_ERR_NOMEM, "out of memory");
        goto out;
    }
    while (got < n_senders) {
        int r = wait_readable(socket, deadline);
        if (r <= 0) {
            snprintf(err, err_len, "only %d of %d sender hellos arrived within %d ms", got,
                     n_senders, timeout_ms);
            rc = TN_ERR_TIMEOUT;
            goto out;
        }
        uint8_t *id, *buf = NULL;
        size_t id_len, len = 0;
        int more;
        if (recv_frame(socket, &id, &id_len, &more)) {
            rc = fail(err, err_len, TN_ERR_PEER, "zmq receive failed");
            goto out;
        }
        int ok = more && recv_frame(socket, &buf, &len, &more) == 0;
        drain(socket, ok ? more : 0);
        Tandem__Transfer__ControlMessage *m = ok ? te_control_unpack(buf, len) : NULL;
        free(buf);
        if (!m || m->body_case != TANDEM__TRANSFER__CONTROL_MESSAGE__BODY_HELLO) {
            /* A stray or broken client must not take the receiver down. */
            te_log(e, "ignored a malformed rendezvous message (%zu bytes)", len);
            if (m)
                tandem__transfer__control_message__free_unpacked(m, NULL);
            free(id);
            continue;
        }
        rc = te_kv_connect(e, m->hello, &senders[got]);
        tandem__transfer__control_message__free_unpacked(m, NULL);
        if (rc != TN_OK) {
            snprintf(err, err_len, "connecting back to sender %d: %s", got, te_engine_error(e));
            free(id);
            goto out;
        }
        ids[got] = id;
        id_lens[got] = id_len;
        got++;
    }
    rc = te_kv_hello_pack(e, kv, &hello, &hello_len);
    if (rc == TN_OK)
        rc = te_kv_request_pack(request_id, n_tokens, pages, n_pages, &request, &request_len);
    if (rc != TN_OK) {
        snprintf(err, err_len, "packing the reply: %s", te_engine_error(e));
        goto out;
    }
    for (int i = 0; i < n_senders; i++)
        if (send_to(socket, ids[i], id_lens[i], hello, hello_len) ||
            send_to(socket, ids[i], id_lens[i], request, request_len)) {
            snprintf(err, err_len, "replying to sender %d: %s", i, zmq_strerror(zmq_errno()));
            rc = TN_ERR_PEER;
            goto out;
        }
out:
    if (rc != TN_OK)
        for (int i = 0; i < got; i++)
            te_kv_disconnect(e, &senders[i]);
    for (int i = 0; ids && i < got; i++)
        free(ids[i]);
    free(ids);
    free(id_lens);
    free(hello);
    free(request);
    return rc;
}
