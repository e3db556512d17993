/* The router's registry of workers (prefillers and decoders): who is
 * registered, what they serve, their last reported load, and the router's
 * own exact accounting of the work it has handed each of them. A worker that
 * misses heartbeats for worker_timeout_ms is expired. */
#ifndef TANDEM_ROUTER_WORKERS_H
#define TANDEM_ROUTER_WORKERS_H
#include <stddef.h>
#include <stdint.h>
#include "common/wire.h"
#include "proto/tandem.pb-c.h"
#include "router/kv_compat.h"
#include "worker/worker_metrics.h"

#define WORKER_MAX_EOS 8

typedef struct prefiller_load {
    uint64_t queued_input_tokens;
    uint32_t queued_requests;
    double input_tokens_per_s;
    uint64_t input_tokens_total;
} prefiller_load;

typedef struct decoder_load {
    uint32_t batch_size, waiting, kv_pages_free, kv_pages_total;
    double tokens_per_s;
    uint64_t tokens_total;
} decoder_load;

typedef struct router_worker {
    char id[WIRE_MAX_ID + 1];      /* routing id, NUL-terminated (ids are text) */
    size_t id_len;
    int role;                      /* TANDEM__V1__WORKER_ROLE__* */
    char model[128];
    char model_type[32];
    int vocab_size, max_context, page_size, kv_pages_total;
    kv_signature kv;               /* its KV cache (router/kv_compat.h) */
    int eos[WORKER_MAX_EOS];
    int n_eos;
    uint8_t *endpoint;             /* decoder: opaque TransferEngine endpoint */
    size_t endpoint_len;
    uint64_t incarnation;          /* Register.incarnation: which process (0: unknown) */
    uint64_t serial;               /* unique per registry entry: a request counted on
                                      this entry is released only from it, never from
                                      a later entry under the same id */
    uint64_t last_seen_ms;
    uint64_t last_progress_ms;     /* its latest message about some request (KvReady,
                                      PrefillResult, TokenBatch): a worker that
                                      heartbeats but moves nothing is stuck */
    int unreachable;               /* a send to it failed (ZeroMQ has no connection
                                      for its id): placement skips it until it is
                                      heard from again */
    prefiller_load pload;          /* as last reported */
    decoder_load dload;
    /* The router's own view, updated as it assigns and finishes work, so
     * placement never waits for a heartbeat to see its own decisions. */
    int in_flight;                 /* requests assigned and not yet released */
    uint64_t assigned_input_tokens;/* prefiller: prompt tokens not yet reported done */
    int pages_committed;           /* decoder: worst-case pages of its requests */
    /* Draining (its heartbeat says so): nothing new is placed on it; it
     * deregisters once it holds no request. */
    int draining;
    worker_metrics wm;             /* its series as of the last heartbeat */
    int has_metrics;
    /* The autoscale loop's marks: counters at its previous evaluation. */
    double as_mark_tokens, as_mark_busy_s;
    int as_marked;
} router_worker;

/* A worker the router dropped for missing heartbeats (not one that
 * deregistered): reported as tandem_worker_up 0 for a while, so an alert can
 * see it. */
#define WORKERS_MAX_LOST 64
#define WORKERS_LOST_RETENTION_MS (15 * 60 * 1000)
typedef struct lost_worker {
    char id[WIRE_MAX_ID + 1];
    int role;
    uint64_t since_ms;
} lost_worker;

/* A process replaced by a new incarnation under its id: a registration it
 * sends later (it was frozen, not dead) is refused rather than taken for a
 * third process. */
#define WORKERS_MAX_RETIRED 64
typedef struct retired_incarnation {
    char id[WIRE_MAX_ID + 1];
    uint64_t incarnation;
} retired_incarnation;

typedef struct worker_registry {
    router_worker **w;
    int n, cap;
    lost_worker lost[WORKERS_MAX_LOST]; /* oldest first */
    int n_lost;
    retired_incarnation retired[WORKERS_MAX_RETIRED]; /* a ring */
    int n_retired, next_retired;
    uint64_t next_serial;
} worker_registry;

void workers_init(worker_registry *r);
void workers_free(worker_registry *r);

router_worker *workers_find(const worker_registry *r, const char *id, size_t id_len);

/* Adds or refreshes the worker described by reg (a re-registration keeps
 * the router's accounting). Returns the entry or NULL with a reason in err
 * for an invalid registration (empty id or model, bad role or sizes). */
router_worker *workers_register(worker_registry *r, const char *id, size_t id_len,
                                const Tandem__V1__Register *reg, uint64_t now_ms,
                                char *err, size_t errlen);

/* 1 if reg comes from a new process under a registered worker's id (both
 * incarnations known and different): the caller drops the old entry and its
 * work before registering the new one. */
int workers_is_restart(const worker_registry *r, const char *id, size_t id_len,
                       const Tandem__V1__Register *reg);
/* Remembers w's incarnation as replaced; workers_is_retired then knows it. */
void workers_retire(worker_registry *r, const router_worker *w);
int workers_is_retired(const worker_registry *r, const char *id, size_t id_len,
                       uint64_t incarnation);
/* The entry with this id and serial, or NULL (it left, or was replaced). */
router_worker *workers_find_serial(const worker_registry *r, const char *id, uint64_t serial);

/* Records a heartbeat's load, draining flag and metrics. Returns 1 when the
 * worker just started draining, 0 otherwise, -1 when its metrics were
 * malformed (they are then ignored). */
int workers_heartbeat(router_worker *w, const Tandem__V1__Heartbeat *hb, uint64_t now_ms);

/* Remembers w as lost (it missed heartbeats) at now_ms; a registration
 * under its id, or WORKERS_LOST_RETENTION_MS, forgets it. */
void workers_note_lost(worker_registry *r, const router_worker *w, uint64_t now_ms);
/* Drops lost entries older than the retention. */
void workers_prune_lost(worker_registry *r, uint64_t now_ms);

/* Removes and frees the worker at index i (order is not kept). */
void workers_remove_at(worker_registry *r, int i);

/* Index of the first worker whose last heartbeat is older than timeout_ms,
 * or -1. The caller fails its requests, then removes it. */
int workers_next_expired(const worker_registry *r, uint64_t now_ms, uint64_t timeout_ms);

/* Workers of the role: registered (with draining ones) and serving (not
 * draining). */
void workers_count(const worker_registry *r, int role, int *registered, int *serving);

/* 1 if some worker of that role serves model. */
int workers_serve_model(const worker_registry *r, const char *model, int role);

#endif
