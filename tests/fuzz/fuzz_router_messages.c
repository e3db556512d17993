/* libFuzzer target: the router's protobuf message handlers. The input is a
 * sequence of frames, each decoded with protobuf-c as the socket it claims
 * to arrive on would decode it, then handled exactly as the router's core
 * thread does (dispatch_worker_message / rpc_handle_message, then the
 * queues), against one router context whose state carries from frame to
 * frame within an input: registrations, requests, KV reservations,
 * prefill results, token batches, cancellations, worker expiry.
 *
 * Frame: 1 header byte (bit 0: 0 = worker socket, 1 = RPC socket; bits 1-2:
 * sender index; bit 6: afterwards run the progress check an hour later, as
 * if no worker moved since; bit 7: afterwards expire every worker, as if
 * all stopped heartbeating), a little-endian 16-bit length, the payload. Senders w0,
 * w1, w2 and c0, c1 are connected peers (so the router's replies are
 * delivered and the request state machine can advance); w3 and c2, c3 are
 * unknown to ZeroMQ (sends to them fail, exercising those paths). Request
 * ids are deterministic (keys count from 1) so inputs can name them.
 *
 * The router logs every registration and failure to stderr; the run
 * closes the target's stderr (router_messages.options) and libFuzzer
 * still reports crashes.
 *
 * Properties: no crash, leak or undefined behaviour; after every frame the
 * table count matches the table, every worker's accounting is
 * non-negative, and after the input's teardown (shutdown: fail all) no
 * request is left. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>
#include "common/status.h"
#include "router/router.h"
#include "common/sys.h"
#include "tests/fuzz/harness.h"

/* Set up once; see harness.h. */
static router_ctx *ctx;
static void *peers[2][4]; /* [socket][sender]: connected DEALERs or NULL */

static void *bound_router(const char *ep)
{
    void *s = zmq_socket(ctx->zctx, ZMQ_ROUTER);
    int one = 1, linger = 0;
    FZ_CHECK(s != NULL);
    zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    FZ_CHECK(zmq_bind(s, ep) == 0);
    return s;
}

/* A DEALER with routing id id, connected to ep, whose first message has
 * reached router (so the router can address it at once). */
static void *peer(const char *ep, void *router, const char *id)
{
    void *d = zmq_socket(ctx->zctx, ZMQ_DEALER);
    int linger = 0;
    FZ_CHECK(d != NULL);
    zmq_setsockopt(d, ZMQ_ROUTING_ID, id, strlen(id));
    zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof linger);
    FZ_CHECK(zmq_connect(d, ep) == 0);
    FZ_CHECK(zmq_send(d, "", 0, 0) == 0);
    char buf[64];
    FZ_CHECK(zmq_recv(router, buf, sizeof buf, 0) >= 0); /* routing id */
    FZ_CHECK(zmq_recv(router, buf, sizeof buf, 0) == 0); /* the empty frame */
    return d;
}

static void ctx_reset(void)
{
    ctx->next_key = 1;
    metrics_init(&ctx->metrics);
    workers_init(&ctx->workers);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    ctx = calloc(1, sizeof *ctx);
    FZ_CHECK(ctx != NULL);
    router_config *c = &ctx->cfg;
    snprintf(c->host, sizeof c->host, "127.0.0.1");
    snprintf(c->tokenizer, sizeof c->tokenizer, "none");
    c->heartbeat_ms = 500;
    c->worker_timeout_ms = 5000;
    c->default_max_tokens = 16;
    c->chat_default_max_tokens = 256;
    c->max_body_bytes = 1 << 20;
    c->max_active_requests = 16;
    char err[256];
    FZ_CHECK(codec_init(&ctx->codec, "none", err, sizeof err) == 0);
    pthread_mutex_init(&ctx->lock, NULL);
    ctx->wake_fd = tn_wakefd_open();
    ctx->shutdown_fd = tn_wakefd_open();
    ctx->zctx = zmq_ctx_new();
    FZ_CHECK(ctx->wake_fd >= 0 && ctx->shutdown_fd >= 0 && ctx->zctx != NULL);
    char wep[64], rep[64];
    snprintf(wep, sizeof wep, "inproc://fuzz-workers-%d", (int)getpid());
    snprintf(rep, sizeof rep, "inproc://fuzz-rpc-%d", (int)getpid());
    ctx->worker_sock = bound_router(wep);
    ctx->rpc_sock = bound_router(rep);
    static const char *const wid[4] = {"w0", "w1", "w2", NULL};
    static const char *const cid[4] = {"c0", "c1", NULL, NULL};
    for (int i = 0; i < 4; i++) {
        peers[0][i] = wid[i] ? peer(wep, ctx->worker_sock, wid[i]) : NULL;
        peers[1][i] = cid[i] ? peer(rep, ctx->rpc_sock, cid[i]) : NULL;
    }
    ctx_reset();
    return 0;
}

/* What the router sent the peers: read and dropped. */
static void drain_peers(void)
{
    char buf[4096];
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 4; i++)
            while (peers[s][i] && zmq_recv(peers[s][i], buf, sizeof buf, ZMQ_DONTWAIT) >= 0)
                ;
}

static void check_invariants(void)
{
    int n = 0;
    for (int b = 0; b < ROUTER_HASH_BUCKETS; b++)
        for (const router_request *r = ctx->table[b]; r; r = r->hnext)
            n++;
    FZ_CHECK(n == ctx->n_active);
    FZ_CHECK(ctx->n_queued == 0 && !ctx->submit_head && !ctx->cancel_head);
    for (int i = 0; i < ctx->workers.n; i++) {
        const router_worker *w = ctx->workers.w[i];
        FZ_CHECK(w->in_flight >= 0 && w->pages_committed >= 0);
        FZ_CHECK(w->assigned_input_tokens < (1ull << 62));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *p = data, *end = data + size;
    while (p < end) {
        uint8_t hdr = *p++;
        size_t len = fz_take(&p, end, 2);
        if (len > (size_t)(end - p))
            len = (size_t)(end - p);
        int on_rpc = hdr & 1, who = (hdr >> 1) & 3;
        char rid[8];
        snprintf(rid, sizeof rid, "%c%d", on_rpc ? 'c' : 'w', who);
        pthread_mutex_lock(&ctx->lock);
        if (!on_rpc) {
            Tandem__V1__WorkerMessage *m = tandem__v1__worker_message__unpack(NULL, len, p);
            if (m) {
                dispatch_worker_message(ctx, rid, strlen(rid), m);
                tandem__v1__worker_message__free_unpacked(m, NULL);
            }
        } else {
            Tandem__V1__ClientMessage *m = tandem__v1__client_message__unpack(NULL, len, p);
            if (m) {
                rpc_handle_message(ctx, (const uint8_t *)rid, strlen(rid), m);
                tandem__v1__client_message__free_unpacked(m, NULL);
            }
        }
        dispatch_process_queues(ctx);
        if (hdr & 0x40) {
            dispatch_check_progress(ctx, tn_now_s() + 3600);
            ctx->next_progress_check_s = 0;
            dispatch_process_queues(ctx);
        }
        if (hdr & 0x80) {
            dispatch_expire_workers(ctx, tn_now_ms() + 3600 * 1000);
            dispatch_process_queues(ctx);
        }
        check_invariants();
        pthread_mutex_unlock(&ctx->lock);
        p += len;
        drain_peers();
    }
    /* Teardown as at router shutdown, then a fresh registry. */
    pthread_mutex_lock(&ctx->lock);
    dispatch_fail_all(ctx, "fuzz input done");
    dispatch_process_queues(ctx);
    for (int b = 0; b < ROUTER_HASH_BUCKETS; b++)
        while (ctx->table[b])
            request_table_remove(ctx, ctx->table[b]);
    FZ_CHECK(ctx->n_active == 0);
    workers_free(&ctx->workers);
    ctx_reset();
    pthread_mutex_unlock(&ctx->lock);
    drain_peers();
    return 0;
}
