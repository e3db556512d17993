#include "worker/worker_loop.h"

#include <string.h>
#include <unistd.h>
#include "common/status.h"
#include "common/sys.h"

/* UCX progresses only when asked: the loop never sleeps longer. */
#define MAX_WAIT_MS 100

void worker_loop_init(worker_loop *wl, const worker_role *role, void *ctx, wm_pool pool)
{
    memset(wl, 0, sizeof *wl);
    wl->role = role;
    wl->ctx = ctx;
    wl->sig_fd = -1;
    worker_metrics_init(&wl->wm, pool);
}

int worker_loop_open_signals(worker_loop *wl, int handle)
{
    wl->sig_fd = handle ? tn_signalfd_open() : -2;
    return handle && wl->sig_fd < 0 ? -1 : 0;
}

int worker_loop_join(worker_loop *wl, const worker_options *o, const Tandem__V1__Register *reg,
                     char *err, size_t errlen)
{
    if (worker_join(o, wl->role->who, reg, &wl->link, &wl->wm, &wl->http, err, errlen) != 0)
        return TN_ERR_ARG;
    wl->window_start_ms = tn_now_ms();
    return 0;
}

void worker_loop_count_tokens(worker_loop *wl, uint64_t n)
{
    wl->tokens_total += n;
    wl->window_tokens += n;
}

/* Hands the current numbers to the HTTP server (and marks progress). */
static void publish(worker_loop *wl)
{
    wl->role->gauges(wl->ctx, &wl->wm);
    wl->wm.draining = wl->draining;
    worker_http_publish(wl->http, &wl->wm, wl->link.registered);
}

static void send_heartbeat(worker_loop *wl, uint64_t now)
{
    double secs = (double)(now - wl->window_start_ms) / 1000.0;
    worker_load room;
    Tandem__V1__Heartbeat hb = TANDEM__V1__HEARTBEAT__INIT;
    wl->role->load(wl->ctx, &hb, &room, secs > 0 ? (double)wl->window_tokens / secs : 0,
                   wl->tokens_total);
    hb.draining = wl->draining;
    publish(wl);
    worker_send_heartbeat(&wl->link, &hb, &wl->wm, now);
    wl->window_tokens = 0;
    wl->window_start_ms = now;
}

void worker_loop_drain(worker_loop *wl)
{
    wl->draining = 1;
    link_begin_drain(&wl->link);
    if (wl->link.registered)
        send_heartbeat(wl, tn_now_ms());
}

static int on_message(void *arg, const Tandem__V1__WorkerMessage *m)
{
    worker_loop *wl = arg;
    switch (m->body_case) {
    case TANDEM__V1__WORKER_MESSAGE__BODY_CANCEL:
        if (m->cancel)
            wl->role->cancel(wl->ctx, m->cancel);
        return 1;
    case TANDEM__V1__WORKER_MESSAGE__BODY_TRANSFER_PEER:
        if (m->transfer_peer)
            wl->role->transfer_peer(wl->ctx, m->transfer_peer);
        return 1;
    default:
        return wl->role->on_message(wl->ctx, m);
    }
}

static void new_session(void *arg)
{
    worker_loop *wl = arg;
    wl->role->new_session(wl->ctx);
    wl->session = wl->link.session;
}

/* One round with the outside world: signals, the router's messages, the
 * TransferEngine, the heartbeat. */
static void serve(worker_loop *wl, int timeout_ms)
{
    const worker_role *r = wl->role;
    if (timeout_ms > MAX_WAIT_MS)
        timeout_ms = MAX_WAIT_MS;
    unsigned sig;
    int wake_fd = -1;
    if (timeout_ms > 0 && r->arm && r->arm(wl->ctx, &wake_fd))
        timeout_ms = 0; /* UCX has events waiting: progress first */
    if (worker_wait(&wl->link, wl->sig_fd, wake_fd, timeout_ms, r->who, &sig)) {
        if (!wl->draining) {
            tn_log(r->who, "signal %u: draining (%d %s to finish; again to stop now)", sig,
                   r->held(wl->ctx), r->held_what);
            worker_loop_drain(wl);
        } else {
            tn_log(r->who, "signal %u: stopping now", sig);
            wl->stop = 1;
            if (r->on_stop)
                r->on_stop(wl->ctx);
            if (!wl->lockstep)
                return;
        }
    }
    worker_receive(&wl->link, r->who, &wl->session, on_message, new_session, wl);
    if (wl->link.replaced[0] && !wl->replaced) {
        /* A process that was frozen, not dead, and has been replaced: its
         * requests were placed again elsewhere and its id serves another
         * process, so it leaves (the orchestrator starts a clean one if
         * one is still wanted). */
        tn_log(r->who, "%s: stopping (exit 1)", wl->link.replaced);
        wl->replaced = 1;
        wl->stop = 1;
        if (r->on_stop)
            r->on_stop(wl->ctx);
    }
    r->progress(wl->ctx);
    uint64_t now = tn_now_ms();
    if (wl->link.drain != LINK_LEFT && link_tick(&wl->link, now))
        send_heartbeat(wl, now);
}

void worker_loop_service(worker_loop *wl, int timeout_ms)
{
    int due = link_next_due_ms(&wl->link, tn_now_ms());
    serve(wl, timeout_ms < due ? timeout_ms : due);
    publish(wl);
}

void worker_loop_run(worker_loop *wl)
{
    const worker_role *r = wl->role;
    while (!wl->stop || wl->lockstep) {
        if (r->check && r->check(wl->ctx))
            break;
        serve(wl, r->poll_timeout(wl->ctx, link_next_due_ms(&wl->link, tn_now_ms())));
        if (wl->stop && !wl->lockstep)
            break;
        if (wl->draining && !wl->left &&
            link_drain_step(&wl->link, r->held(wl->ctx) == 0, tn_now_ms())) {
            wl->left = 1;
            if (!wl->lockstep)
                break;
        }
        if (r->step(wl->ctx))
            break;
        publish(wl);
    }
    if (r->shutdown)
        r->shutdown(wl->ctx);
}

void worker_loop_free(worker_loop *wl)
{
    worker_http_stop(wl->http);
    wl->http = NULL;
    link_close(&wl->link);
    if (wl->sig_fd >= 0)
        close(wl->sig_fd);
    wl->sig_fd = -1;
}
