/* The worker side of the router's worker socket, shared by the prefiller
 * and the decoder: a DEALER socket whose routing id is the worker id,
 * registration (repeated until acknowledged, and again whenever the router
 * says it does not know us, e.g. after a router restart, but never after it
 * said a newer process under our id replaced us), and the heartbeat clock. The caller builds heartbeats, since only it knows its
 * load. */
#ifndef TANDEM_WORKER_WORKER_LINK_H
#define TANDEM_WORKER_WORKER_LINK_H
#include <stddef.h>
#include <stdint.h>
#include "common/sock_auth.h"
#include "common/wire.h"
#include "proto/tandem.pb-c.h"

/* Leaving the cluster (SIGTERM): DRAINING while the worker finishes what it
 * holds (its heartbeats say draining, so the router places nothing new),
 * DEREGISTERING once it asked to leave, LEFT when the router agreed (or did
 * not answer in time: it is gone, or will expire the worker anyway). */
typedef enum { LINK_SERVING = 0, LINK_DRAINING, LINK_DEREGISTERING, LINK_LEFT } link_drain_state;

typedef struct worker_link {
    void *zctx;
    void *sock;
    char id[WIRE_MAX_ID + 1];
    const char *who;          /* log prefix */
    uint8_t *register_msg;    /* packed WorkerMessage{register}, resent as needed */
    size_t register_len;
    int registered;
    int session;              /* +1 each time the router forgot us and we registered
                                 again: work given before that is no longer wanted
                                 (the router restarted, or dropped us and placed it
                                 elsewhere); the worker drops it when this changes */
    uint32_t heartbeat_ms;
    uint64_t last_register_ms, last_heartbeat_ms;
    link_drain_state drain;
    uint64_t deregister_sent_ms, next_deregister_ms;
    char replaced[512];       /* the router's ERROR_CODE_WORKER_REPLACED message: a
                                 newer process serves under our id (this one was
                                 frozen, not dead); nothing is sent any more and the
                                 worker must exit */
} worker_link;

/* Connects to endpoint ("tcp://host:port", or "host:port" meaning tcp) as
 * id and sends the registration. Returns 0 or -1 with a reason. */
int link_open(worker_link *l, const char *who, const char *endpoint, const char *id,
              const Tandem__V1__Register *reg, char *err, size_t errlen);
/* The same over an authenticated, encrypted connection when auth is not
 * NULL and enabled (common/sock_auth.h: the router's --worker-secret-file). */
int link_open_auth(worker_link *l, const char *who, const char *endpoint, const char *id,
                   const Tandem__V1__Register *reg, const sock_auth *auth, char *err,
                   size_t errlen);
void link_close(worker_link *l);

int link_send(worker_link *l, const Tandem__V1__WorkerMessage *m);

/* Receives one message without blocking: 1 with *out set (free with
 * tandem__v1__worker_message__free_unpacked), 0 when none is waiting.
 * RegisterAck, ERROR_CODE_UNKNOWN_WORKER and ERROR_CODE_WORKER_REPLACED
 * (which sets l->replaced) are handled here and not returned. */
int link_recv(worker_link *l, Tandem__V1__WorkerMessage **out);

/* Milliseconds until link_tick has something to do. */
int link_next_due_ms(const worker_link *l, uint64_t now_ms);
/* Resends the registration if it is unanswered for a second (never once
 * replaced); returns 1 if a heartbeat is due (the caller sends it with link_send and then calls
 * link_heartbeat_sent). */
int link_tick(worker_link *l, uint64_t now_ms);
void link_heartbeat_sent(worker_link *l, uint64_t now_ms);

/* Starts the drain (the caller then sends a heartbeat at once, with
 * draining set, so the router stops placing on it). */
void link_begin_drain(worker_link *l);
/* Advances the drain; idle says whether the worker holds no request. Sends
 * Deregister when idle (again after a "not yet": assignments that crossed
 * the drain notice reach the worker before that answer). Returns 1 once the
 * worker may exit. */
int link_drain_step(worker_link *l, int idle, uint64_t now_ms);

#endif
