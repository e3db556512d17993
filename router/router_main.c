/* tandem-router: the cluster's front door. Serves the OpenAI-compatible
 * HTTP API and the protobuf RPC API, places each request on a decoder and
 * a prefiller, and relays tokens back. See router/router.h for its threads
 * and docs/ARCHITECTURE.md for the protocol. */
#include "router/router.h"
#include "common/status.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>
#include <zmq.h>
#include "router/api_key.h"
#include "common/options.h"
#include "common/sys.h"

#define WHO "router"

static const char *const INTRO =
    "Runs the Tandem router: the OpenAI-compatible HTTP API (/v1/completions,\n"
    "/v1/chat/completions, /v1/models, /healthz, /metrics, /dashboard), the\n"
    "protobuf RPC API, the socket prefillers and decoders register on, and the\n"
    "autoscaler (--scaler; docs/AUTOSCALING.md). Ports given as 0 are chosen by\n"
    "the system; --port-file records the ports actually bound (http_port=N,\n"
    "worker_port=N, rpc_port=N, metrics_port=N). SIGTERM/SIGINT: new requests\n"
    "get 503 while those in flight finish (up to --drain-timeout-ms), then the\n"
    "router stops (the local scaler first drains its workers); a second one:\n"
    "stop at once.";

/* Loads the API key and the worker secret when configured: CURVE on the
 * sockets (before they bind) with the ZAP handler that checks client keys,
 * and the key's hash for the HTTP bearer check. */
static int setup_auth(router_ctx *ctx, char *err, size_t errlen)
{
    const router_config *c = &ctx->cfg;
    if (c->worker_secret_file[0]) {
        if (sock_auth_load(&ctx->worker_auth, c->worker_secret_file, "workers", err, errlen) != 0)
            return TN_ERR_ARG;
        if (sock_auth_server(ctx->worker_sock, &ctx->worker_auth, "tandem-workers") != 0) {
            snprintf(err, errlen, "cannot enable CURVE: %s", zmq_strerror(errno));
            return TN_ERR_SYS;
        }
    }
    if (c->api_key_file[0]) {
        if (sock_auth_load(&ctx->rpc_auth, c->api_key_file, "rpc", err, errlen) != 0)
            return TN_ERR_ARG;
        if (sock_auth_server(ctx->rpc_sock, &ctx->rpc_auth, "tandem-rpc") != 0) {
            snprintf(err, errlen, "cannot enable CURVE: %s", zmq_strerror(errno));
            return TN_ERR_SYS;
        }
        if (api_key_hash_file(c->api_key_file, ctx->api_key_hash, err, errlen) != 0)
            return TN_ERR_ARG;
        ctx->api_key_set = 1;
    }
    if ((ctx->worker_auth.enabled || ctx->rpc_auth.enabled) &&
        !(ctx->zap = sock_auth_zap_open(ctx->zctx, err, errlen)))
        return TN_ERR_ARG;
    tn_log(WHO, "worker socket: %s; APIs: %s",
           ctx->worker_auth.enabled ? "shared secret (CURVE)" : "unauthenticated",
           ctx->api_key_set ? "API key required" : "open");
    return 0;
}

static void answer_zap(router_ctx *ctx)
{
    const sock_auth *auths[2] = {&ctx->worker_auth, &ctx->rpc_auth};
    static const char *const domains[2] = {"tandem-workers", "tandem-rpc"};
    int refused = sock_auth_zap_handle(ctx->zap, auths, domains, 2);
    if (refused)
        tn_log(WHO, "refused %d connection(s) without the shared secret / API key", refused);
}

/* Binds a ROUTER socket on host:port and returns the bound port, or -1. */
static int bind_router(void *sock, const char *host, int port, char *err, size_t errlen)
{
    int one = 1, hwm = 100000, linger = 0;
    zmq_setsockopt(sock, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(sock, ZMQ_ROUTER_HANDOVER, &one, sizeof one);
    zmq_setsockopt(sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
    char ep[128];
    if (port)
        snprintf(ep, sizeof ep, "tcp://%s:%d", host, port);
    else
        snprintf(ep, sizeof ep, "tcp://%s:*", host);
    if (zmq_bind(sock, ep) != 0) {
        snprintf(err, errlen, "cannot bind %s: %s", ep, zmq_strerror(errno));
        return TN_ERR_SYS;
    }
    char last[128];
    size_t len = sizeof last;
    if (zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, last, &len) != 0) {
        snprintf(err, errlen, "cannot read the bound endpoint: %s", zmq_strerror(errno));
        return TN_ERR_SYS;
    }
    const char *colon = strrchr(last, ':');
    return colon ? atoi(colon + 1) : -1;
}

typedef void (*message_handler)(router_ctx *ctx, const uint8_t *rid, size_t rid_len,
                                const ProtobufCMessage *msg);

static void on_worker_message(router_ctx *ctx, const uint8_t *rid, size_t rid_len,
                              const ProtobufCMessage *msg)
{
    dispatch_worker_message(ctx, (const char *)rid, rid_len,
                            (const Tandem__V1__WorkerMessage *)msg);
}

static void on_client_message(router_ctx *ctx, const uint8_t *rid, size_t rid_len,
                              const ProtobufCMessage *msg)
{
    rpc_handle_message(ctx, rid, rid_len, (const Tandem__V1__ClientMessage *)msg);
}

/* Handles every message waiting on sock (what names it in the log). */
static void drain(router_ctx *ctx, void *sock, const ProtobufCMessageDescriptor *desc,
                  const char *what, message_handler handle)
{
    for (;;) {
        uint8_t rid[WIRE_MAX_ID];
        size_t rid_len = 0;
        ProtobufCMessage *msg = NULL;
        int rc = wire_recv(sock, rid, sizeof rid, &rid_len, desc, &msg, ZMQ_DONTWAIT);
        if (rc == -1)
            return;
        if (rc == -2) {
            tn_log(WHO, "dropped a malformed message on the %s socket", what);
            continue;
        }
        pthread_mutex_lock(&ctx->lock);
        handle(ctx, rid, rid_len, msg);
        pthread_mutex_unlock(&ctx->lock);
        protobuf_c_message_free_unpacked(msg, NULL);
    }
}

static int write_ports(const router_ctx *ctx)
{
    char text[256];
    int n = snprintf(text, sizeof text, "http_port=%d\nworker_port=%d\nrpc_port=%d\n",
                     ctx->http_port, ctx->worker_port, ctx->rpc_port);
    if (ctx->metrics_httpd && n > 0 && (size_t)n < sizeof text)
        snprintf(text + n, sizeof text - (size_t)n, "metrics_port=%d\n", ctx->metrics_port);
    if (ctx->cfg.port_file[0] && tn_write_file_atomic(ctx->cfg.port_file, text) != 0) {
        tn_log(WHO, "cannot write %s: %s", ctx->cfg.port_file, strerror(errno));
        return -1;
    }
    return 0;
}

/* Requests in the table that have not ended (a zombie has: it only waits
 * for its prefiller's report). */
static int unfinished(const router_ctx *ctx)
{
    int n = 0;
    for (int b = 0; b < ROUTER_HASH_BUCKETS; b++)
        for (const router_request *r = ctx->table[b]; r; r = r->hnext)
            n += !r->finished;
    return n + ctx->n_queued;
}

/* The drain is done when every request ended and every HTTP response
 * carrying one has been written out (stopping the HTTP server earlier
 * would cut the end of a stream that already finished in the router). */
static int drained(const router_ctx *ctx)
{
    return unfinished(ctx) == 0 && ctx->n_http_responses == 0;
}

/* First signal: refuse new requests (503 with Retry-After: a rolling update
 * sends them to another replica) and let those in flight finish, up to
 * --drain-timeout-ms; workers keep being served and replaced meanwhile. */
static void begin_drain(router_ctx *ctx)
{
    pthread_mutex_lock(&ctx->lock);
    ctx->stopping = 1;
    ctx->drain_deadline_s = tn_now_s() + ctx->cfg.drain_timeout_ms / 1000.0;
    tn_log(WHO, "draining: %d requests in flight finish (up to %d ms), new ones get 503",
           unfinished(ctx), ctx->cfg.drain_timeout_ms);
    pthread_mutex_unlock(&ctx->lock);
}

/* The drain is over (nothing left, or the deadline): fail what is left,
 * which tells the workers to drop it, and let the autoscale loop stop (the
 * local scaler drains its workers while this loop keeps answering their
 * deregistrations). Returns the time by which to give up waiting. */
static double end_drain(router_ctx *ctx)
{
    pthread_mutex_lock(&ctx->lock);
    int left = unfinished(ctx);
    if (left)
        tn_log(WHO, "drain timeout: failing the %d requests still in flight", left);
    else
        tn_log(WHO, "drained: every request in flight finished");
    ctx->stop_final = 1;
    dispatch_process_queues(ctx);
    dispatch_fail_all(ctx, "the router is shutting down and the request did not finish "
                           "within its drain timeout");
    dispatch_retry_held(ctx);
    pthread_mutex_unlock(&ctx->lock);
    autoscaler_request_stop(ctx);
    return tn_now_s() + ctx->cfg.as.local_drain_timeout_s + 5.0;
}

static void run_loop(router_ctx *ctx, int sig_fd)
{
    double stop_deadline = 0, first_signal_s = 0;
    for (;;) {
        zmq_pollitem_t items[5] = {
            {ctx->worker_sock, 0, ZMQ_POLLIN, 0},
            {ctx->rpc_sock, 0, ZMQ_POLLIN, 0},
            {NULL, ctx->wake_fd, ZMQ_POLLIN, 0},
            {NULL, sig_fd, ZMQ_POLLIN, 0},
            {ctx->zap, 0, ZMQ_POLLIN, 0},
        };
        int timeout = ctx->cfg.heartbeat_ms > 0 ? ctx->cfg.heartbeat_ms : 500;
        if (ctx->held_head && timeout > 100)
            timeout = 100; /* held requests time out on time */
        if (ctx->stopping && !ctx->stop_final && timeout > 50)
            timeout = 50; /* a drain ends soon after its last response */
        if (zmq_poll(items, ctx->zap ? 5 : 4, timeout) < 0 && errno != EINTR) {
            tn_log(WHO, "zmq_poll failed: %s", zmq_strerror(errno));
            return;
        }
        if (items[3].revents) {
            struct signalfd_siginfo si;
            unsigned sig = read(sig_fd, &si, sizeof si) == (ssize_t)sizeof si ? si.ssi_signo : 0;
            /* A second signal stops at once, unless it is the same stop
             * arriving twice (Ctrl-C reaches a whole process group, and a
             * wrapper script may forward it as SIGTERM). */
            if (!ctx->stopping) {
                tn_log(WHO, "signal %u: shutting down (again to stop at once)", sig);
                begin_drain(ctx);
                first_signal_s = tn_now_s();
            } else if (tn_now_s() - first_signal_s > 1.0) {
                tn_log(WHO, "signal %u: stopping now", sig);
                return;
            }
        }
        if (items[2].revents)
            tn_wakefd_drain(ctx->wake_fd);
        if (ctx->zap && items[4].revents)
            answer_zap(ctx);
        pthread_mutex_lock(&ctx->lock);
        dispatch_process_queues(ctx);
        pthread_mutex_unlock(&ctx->lock);
        drain(ctx, ctx->worker_sock, &tandem__v1__worker_message__descriptor, "worker",
              on_worker_message);
        drain(ctx, ctx->rpc_sock, &tandem__v1__client_message__descriptor, "RPC",
              on_client_message);
        pthread_mutex_lock(&ctx->lock);
        dispatch_process_queues(ctx);
        dispatch_expire_workers(ctx, tn_now_ms());
        dispatch_check_progress(ctx, tn_now_s());
        if (ctx->held_head)
            dispatch_retry_held(ctx);
        int drain_over = ctx->stopping && !ctx->stop_final &&
                         (drained(ctx) || tn_now_s() >= ctx->drain_deadline_s);
        pthread_mutex_unlock(&ctx->lock);
        if (drain_over)
            stop_deadline = end_drain(ctx);
        if (ctx->stop_final && (autoscaler_stopped(ctx) || tn_now_s() > stop_deadline)) {
            if (!autoscaler_stopped(ctx))
                tn_log(WHO, "workers still draining at the deadline: stopping anyway");
            return;
        }
    }
}

static void ctx_free(router_ctx *ctx)
{
    autoscaler_free(ctx);
    http_stop(ctx);
    /* Queues and table are empty after dispatch_fail_all and the HTTP
     * threads ended; free whatever a failed start left. */
    while (ctx->submit_head) {
        router_request *r = ctx->submit_head;
        ctx->submit_head = r->qnext;
        request_unref(r);
    }
    while (ctx->cancel_head) {
        router_request *r = ctx->cancel_head;
        ctx->cancel_head = r->qnext;
        request_unref(r);
    }
    for (int b = 0; b < ROUTER_HASH_BUCKETS; b++)
        while (ctx->table[b])
            request_table_remove(ctx, ctx->table[b]);
    workers_free(&ctx->workers);
    if (ctx->zap)
        zmq_close(ctx->zap);
    sock_auth_wipe(&ctx->worker_auth);
    sock_auth_wipe(&ctx->rpc_auth);
    /* The last messages (RPC clients' final chunks, the workers' Cancels
     * for what the shutdown failed) get a moment to leave. */
    int linger = 500;
    if (ctx->worker_sock) {
        zmq_setsockopt(ctx->worker_sock, ZMQ_LINGER, &linger, sizeof linger);
        zmq_close(ctx->worker_sock);
    }
    if (ctx->rpc_sock) {
        zmq_setsockopt(ctx->rpc_sock, ZMQ_LINGER, &linger, sizeof linger);
        zmq_close(ctx->rpc_sock);
    }
    if (ctx->zctx)
        zmq_ctx_term(ctx->zctx);
    if (ctx->wake_fd >= 0)
        close(ctx->wake_fd);
    if (ctx->shutdown_fd >= 0)
        close(ctx->shutdown_fd);
    codec_free(&ctx->codec);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
}

int main(int argc, char **argv)
{
    router_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        fprintf(stderr, "tandem-router: out of memory\n");
        return 1;
    }
    ctx->wake_fd = ctx->shutdown_fd = -1;
    router_config *c = &ctx->cfg;
    router_config_default(c);
    char err[512];
    int prc = router_config_parse(c, argc, argv, err, sizeof err);
    if (prc == OPTS_HELP) {
        router_config_print_help(stdout, c, INTRO);
        free(ctx);
        return 0;
    }
    if (prc != OPTS_OK || router_config_validate(c, err, sizeof err) != 0) {
        fprintf(stderr, "tandem-router: %s\n", err);
        free(ctx);
        return 2;
    }
    if (codec_init(&ctx->codec, c->tokenizer, err, sizeof err) != 0) {
        fprintf(stderr, "tandem-router: %s\n", err);
        free(ctx);
        return 2;
    }
    /* Signals arrive through a signalfd polled by the core loop; every
     * thread started later inherits the blocked mask. */
    int sig_fd = tn_signalfd_open();
    pthread_mutex_init(&ctx->lock, NULL);
    metrics_init(&ctx->metrics);
    workers_init(&ctx->workers);
    ctx->t_start = tn_now_s();
    ctx->next_key = tn_random_u64() >> 1;
    ctx->wake_fd = tn_wakefd_open();
    ctx->shutdown_fd = tn_wakefd_open();
    ctx->zctx = zmq_ctx_new();
    int rc = 1;
    if (sig_fd < 0 || ctx->wake_fd < 0 || ctx->shutdown_fd < 0 || !ctx->zctx) {
        fprintf(stderr, "tandem-router: cannot create eventfds or the ZeroMQ context\n");
        goto out;
    }
    ctx->worker_sock = zmq_socket(ctx->zctx, ZMQ_ROUTER);
    ctx->rpc_sock = zmq_socket(ctx->zctx, ZMQ_ROUTER);
    if (!ctx->worker_sock || !ctx->rpc_sock) {
        fprintf(stderr, "tandem-router: cannot create sockets: %s\n", zmq_strerror(errno));
        goto out;
    }
    if (setup_auth(ctx, err, sizeof err) != 0) {
        fprintf(stderr, "tandem-router: %s\n", err);
        goto out;
    }
    if ((ctx->worker_port = bind_router(ctx->worker_sock, c->host, c->worker_port, err, sizeof err)) < 0 ||
        (ctx->rpc_port = bind_router(ctx->rpc_sock, c->host, c->rpc_port, err, sizeof err)) < 0 ||
        http_start(ctx, err, sizeof err) != 0) {
        fprintf(stderr, "tandem-router: %s\n", err);
        goto out;
    }
    if (autoscaler_start(ctx, err, sizeof err) != 0) {
        fprintf(stderr, "tandem-router: %s\n", err);
        goto out;
    }
    if (write_ports(ctx) != 0)
        goto out;
    printf("tandem-router: http://%s:%d  workers tcp://%s:%d  rpc tcp://%s:%d  tokenizer %s\n",
           c->host, ctx->http_port, c->host, ctx->worker_port, c->host, ctx->rpc_port,
           codec_name(&ctx->codec));
    fflush(stdout);
    run_loop(ctx, sig_fd);
    pthread_mutex_lock(&ctx->lock);
    ctx->stopping = ctx->stop_final = 1;
    dispatch_fail_all(ctx, "the router is shutting down");
    dispatch_retry_held(ctx);
    pthread_mutex_unlock(&ctx->lock);
    tn_wakefd_signal(ctx->shutdown_fd);
    rc = 0;
out:
    if (sig_fd >= 0)
        close(sig_fd);
    ctx_free(ctx);
    return rc;
}
