/* The main loop of a worker process, one for the prefiller and the decoder:
 * the signals (the first drains, a second stops at once), the router
 * socket (its messages, registration again after the router forgot us),
 * heartbeats, the TransferEngine's progress, the drain and deregistration,
 * and the publication of the metrics to the worker's HTTP server. What is a
 * role's own (its messages, its load, its unit of work, how long it may
 * sleep, what it holds) comes from its worker_role table of callbacks; each
 * gets the role's context pointer. */
#ifndef TANDEM_WORKER_WORKER_LOOP_H
#define TANDEM_WORKER_WORKER_LOOP_H
#include <stddef.h>
#include <stdint.h>
#include "proto/tandem.pb-c.h"
#include "worker/worker_http.h"
#include "worker/worker_link.h"
#include "worker/worker_metrics.h"
#include "worker/worker_process.h"

/* Room for the role's part of a heartbeat. */
typedef union worker_load {
    Tandem__V1__PrefillerLoad prefiller;
    Tandem__V1__DecoderLoad decoder;
} worker_load;

typedef struct worker_role {
    const char *who;            /* log prefix: "prefiller", "decoder" */
    const char *held_what;      /* what held() counts, for the drain's log line */
    /* The router's messages: a Cancel, a TransferPeer (a worker of the
     * other role to connect to, or one that left), and the role's own
     * (on_message returns 1 when it knows the kind, 0 if not). */
    void (*cancel)(void *ctx, const Tandem__V1__Cancel *c);
    void (*transfer_peer)(void *ctx, const Tandem__V1__TransferPeer *p);
    worker_message_fn on_message;
    /* The router forgot us and we registered again: drop the work of the
     * old session (nobody waits for it any more). */
    void (*new_session)(void *ctx);
    /* How long the loop may wait for the router or a signal, given that
     * the link has something to do in due_ms (capped at 100 ms). */
    int (*poll_timeout)(void *ctx, int due_ms);
    /* Runs the TransferEngine's progress and handles what it reports. */
    void (*progress)(void *ctx);
    /* Optional, before a wait that may sleep: te_engine_arm on the role's
     * engine (returns 1: events pending, do not sleep; else *fd is the
     * descriptor to wake on, or -1), so KV data or a notice arriving ends
     * the wait at once rather than at its timeout. */
    int (*arm)(void *ctx, int *fd);
    /* Requests or sequences the worker holds: the drain ends at 0. */
    int (*held)(void *ctx);
    /* Points hb at the role's load (kept in *room) and fills it. */
    void (*load)(void *ctx, Tandem__V1__Heartbeat *hb, worker_load *room, double tokens_per_s,
                 uint64_t tokens_total);
    /* Brings the role's gauges in wm up to date before a publication. */
    void (*gauges)(void *ctx, worker_metrics *wm);
    /* Optional: the second signal stops the worker now. */
    void (*on_stop)(void *ctx);
    /* Optional, first thing of every round: nonzero leaves the loop. */
    int (*check)(void *ctx);
    /* One unit of work (a prefill job, a decode step): nonzero leaves the
     * loop. */
    int (*step)(void *ctx);
    /* Optional: runs once the loop is over. */
    void (*shutdown)(void *ctx);
} worker_role;

typedef struct worker_loop {
    const worker_role *role;
    void *ctx;
    worker_link link;
    worker_metrics wm;         /* docs/METRICS.md series, sent with heartbeats */
    worker_http *http;
    int sig_fd;                /* -1: not open; -2: this rank takes no signals */
    int lockstep;              /* the ranks of a group step together: a stop or the
                                  end of a drain is agreed by the role's step */
    int stop;                  /* leave the main loop */
    int draining;              /* SIGTERM: take nothing new, finish, deregister */
    int left;                  /* drained and deregistered */
    int replaced;              /* the router refused this process: a newer one serves
                                  under its id (link.replaced says so); the worker
                                  stops and exits 1 */
    int session;               /* link.session the work held came in */
    uint64_t tokens_total;     /* tokens processed since start */
    uint64_t window_tokens;    /* ... since the last heartbeat */
    uint64_t window_start_ms;
} worker_loop;

/* Sets the loop up for role (no signals yet, metrics zeroed for pool). */
void worker_loop_init(worker_loop *wl, const worker_role *role, void *ctx, wm_pool pool);
/* Takes SIGTERM/SIGINT through a signalfd when handle is set (before any
 * thread starts). Returns 0, or -1 when that failed. */
int worker_loop_open_signals(worker_loop *wl, int handle);
/* Registers with the router and starts the metrics server (worker_join).
 * Returns 0, or -1 with the reason in err. */
int worker_loop_join(worker_loop *wl, const worker_options *o, const Tandem__V1__Register *reg,
                     char *err, size_t errlen);
/* Runs until the role's step or check says stop, a second signal, the
 * drain's end, or the router's word that a newer process replaced this one
 * (wl->replaced); then the role's shutdown. */
void worker_loop_run(worker_loop *wl);
/* Inside a unit of work: waits up to timeout_ms (less when the link is
 * due) for the router or a signal, handles them, sends a heartbeat when
 * due and publishes the metrics. */
void worker_loop_service(worker_loop *wl, int timeout_ms);
/* Starts the drain: the router hears it with a heartbeat sent now and
 * places nothing new here. */
void worker_loop_drain(worker_loop *wl);
/* Counts n tokens processed (the heartbeat's rate and total). */
void worker_loop_count_tokens(worker_loop *wl, uint64_t n);
/* Stops the metrics server, closes the link and the signalfd. */
void worker_loop_free(worker_loop *wl);

#endif
