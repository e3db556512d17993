/* The decoder's TransferEngine: pools registered as write targets, one
 * connection per prefiller (for the acknowledgements), notices. */
#include "decoder/kv_receive.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/status.h"
#include "common/sys.h"
#include "transfer/transfer.h"
#include "transfer/transfer_kv.h"
#include "worker/worker_transfer.h"

#include "proto/tandem.pb-c.h"

#define MAX_GROUP_RANKS 64

/* A prefiller: one engine, or one per rank of a TP group (each rank pushes
 * its KV heads of a request and sends its own notice). Its endpoint is kept
 * so a connection that fails (the prefiller's side gave us up while we were
 * frozen, or the network broke) is opened again when an ack waits for it
 * (transfer.h: acks stay queued and go out on the new one). */
typedef struct prefiller_peer {
    char id[256];
    te_kv_remote *remotes;
    int n_remotes;
    uint8_t *endpoint;        /* the TransferPeer endpoint, as received */
    size_t endpoint_len;
    uint64_t engine_ids[MAX_GROUP_RANKS]; /* the ranks' engines (senders of notices) */
    int n_engine_ids;
    int reconnects;           /* consecutive reopenings that failed again */
    double reconnect_at;      /* earliest te_now_seconds() of the next one */
    int idle_logged;          /* "reopened when an ack waits" said once */
} prefiller_peer;

/* Reopening a failed connection: only while an ack waits for one of its
 * engines (a notice came in, so the prefiller was alive a moment ago), at
 * once, then backing off up to this long between tries while the prefiller
 * does not answer (the router says when it is gone for good: TransferPeer
 * removed). Not at once on failure: the connection carries nothing but
 * acks, and reopening to a prefiller that was just killed (connect refused
 * during UCX's wire-up) can abort the process inside UCX 1.13 (tcp_ep.c:478,
 * seen from the prefiller's side in session 13). */
#define RECONNECT_MAX_BACKOFF_S 5.0

/* A request whose notices from a TP group's ranks are not all in yet. */
typedef struct pending_notice {
    uint64_t request_id;
    uint64_t group_key;    /* engine id of the group's rank 0 */
    int seen, ok;
    uint64_t bytes;        /* the ranks' bytes so far */
} pending_notice;

struct kv_receiver {
    worker_transfer xfer;      /* the engine and the pools registered */
    prefiller_peer *peers;
    int n_peers, cap_peers;
    pending_notice *pending;
    int n_pending, cap_pending;
};

static void peer_disconnect(kv_receiver *r, prefiller_peer *p)
{
    for (int i = 0; i < p->n_remotes; i++)
        te_kv_disconnect(r->xfer.e, &p->remotes[i]);
    free(p->remotes);
    p->remotes = NULL;
    p->n_remotes = 0;
    free(p->endpoint);
    p->endpoint = NULL;
    p->endpoint_len = 0;
}

int kv_receiver_open(tm_kv_cache *kv, const char *name, const char *tls, int same_host_shm,
                     tm_kv_path path, kv_receiver **out, char *err, size_t errlen)
{
    *out = NULL;
    kv_receiver *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return TN_ERR_NOMEM;
    }
    if (worker_transfer_open(&r->xfer, kv, kv->n_kv_heads, 1, 0, name, tls, same_host_shm,
                             path, err, errlen) != 0) {
        free(r);
        return TN_ERR_ARG;
    }
    *out = r;
    return 0;
}

void kv_receiver_close(kv_receiver *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n_peers; i++)
        peer_disconnect(r, &r->peers[i]);
    free(r->peers);
    free(r->pending);
    worker_transfer_close(&r->xfer);
    free(r);
}

const char *kv_receiver_path(const kv_receiver *r)
{
    return r->xfer.staging.how;
}

int kv_receiver_land(kv_receiver *r, const int32_t *pages, int n_pages, char *err,
                     size_t errlen)
{
    int rc = tm_kv_staging_to_device(&r->xfer.staging, pages, n_pages);
    if (rc != TN_OK) {
        snprintf(err, errlen, "copying %d received KV pages to the device: %s", n_pages,
                 tn_status_str(rc));
        return TN_ERR_ARG;
    }
    return 0;
}

void kv_receiver_endpoint(const kv_receiver *r, const uint8_t **buf, size_t *len)
{
    *buf = r->xfer.hello;
    *len = r->xfer.hello_len;
}

static prefiller_peer *find(kv_receiver *r, const char *id)
{
    for (int i = 0; i < r->n_peers; i++)
        if (!strcmp(r->peers[i].id, id))
            return &r->peers[i];
    return NULL;
}

void kv_receiver_remove_peer(kv_receiver *r, const char *worker_id)
{
    prefiller_peer *p = find(r, worker_id);
    if (!p)
        return;
    peer_disconnect(r, p);
    *p = r->peers[--r->n_peers];
}

/* The ranks' hellos of an endpoint: a TransferGroupEndpoint's, or the
 * endpoint itself (one rank). Returns the count (0: malformed); parts point
 * into the endpoint or into *group (free it after use). */
static int endpoint_parts(const uint8_t *endpoint, size_t len,
                          Tandem__V1__TransferGroupEndpoint **group,
                          ProtobufCBinaryData *parts, int max)
{
    *group = tandem__v1__transfer_group_endpoint__unpack(NULL, len, endpoint);
    if (*group && (*group)->n_rank_endpoints > 0) {
        if ((*group)->n_rank_endpoints > (size_t)max)
            return 0;
        for (size_t i = 0; i < (*group)->n_rank_endpoints; i++)
            parts[i] = (*group)->rank_endpoints[i];
        return (int)(*group)->n_rank_endpoints;
    }
    parts[0] = (ProtobufCBinaryData){len, (uint8_t *)endpoint};
    return 1;
}

int kv_receiver_add_peer(kv_receiver *r, const char *worker_id, const uint8_t *endpoint,
                         size_t len, char *err, size_t errlen)
{
    Tandem__V1__TransferGroupEndpoint *group = NULL;
    ProtobufCBinaryData parts[MAX_GROUP_RANKS];
    int n = endpoint_parts(endpoint, len, &group, parts, MAX_GROUP_RANKS);
    Tandem__Transfer__ControlMessage *hello[MAX_GROUP_RANKS] = {0};
    int rc = n > 0 ? 0 : -1;
    for (int i = 0; i < n && !rc; i++) {
        hello[i] = te_control_unpack(parts[i].data, parts[i].len);
        if (!hello[i] || hello[i]->body_case != TANDEM__TRANSFER__CONTROL_MESSAGE__BODY_HELLO)
            rc = -1;
    }
    if (rc)
        snprintf(err, errlen, "not a TransferEngine hello (or a TP group of them)");
    prefiller_peer *p = rc ? NULL : find(r, worker_id);
    int same = p && p->n_remotes == n;
    for (int i = 0; same && i < n; i++)
        same = p->remotes[i].engine_id == hello[i]->hello->engine_id && p->remotes[i].peer &&
               te_peer_status(p->remotes[i].peer) == TN_OK;
    if (!rc && !same) {   /* connect (again) to every rank's engine */
        if (p)
            kv_receiver_remove_peer(r, worker_id);
        if (r->n_peers == r->cap_peers) {
            int cap = r->cap_peers ? 2 * r->cap_peers : 8;
            prefiller_peer *np = realloc(r->peers, (size_t)cap * sizeof *np);
            if (np) {
                r->peers = np;
                r->cap_peers = cap;
            }
        }
        te_kv_remote *remotes = calloc((size_t)n, sizeof *remotes);
        uint8_t *copy = malloc(len ? len : 1);
        if (r->n_peers == r->cap_peers || !remotes || !copy) {
            free(remotes);
            free(copy);
            remotes = NULL;
            copy = NULL;
            snprintf(err, errlen, "out of memory");
            rc = -1;
        }
        int connected = 0;
        for (int i = 0; !rc && i < n; i++, connected++) {
            if (te_kv_connect(r->xfer.e, hello[i]->hello, &remotes[i]) != TN_OK) {
                snprintf(err, errlen, "rank %d: %s", i, te_engine_error(r->xfer.e));
                rc = -1;
            } else {
                /* Finish UCX's connection set-up in the background (the
                 * scheduler loop progresses the engine): an endpoint still
                 * setting up cannot be closed safely (transfer.h). */
                te_peer_wireup_start(r->xfer.e, remotes[i].peer);
            }
        }
        if (rc && remotes) {
            for (int i = 0; i < connected; i++)
                te_kv_disconnect(r->xfer.e, &remotes[i]);
            free(remotes);
            free(copy);
        } else if (!rc) {
            p = &r->peers[r->n_peers++];
            memset(p, 0, sizeof *p);
            snprintf(p->id, sizeof p->id, "%s", worker_id);
            p->remotes = remotes;
            p->n_remotes = n;
            memcpy(copy, endpoint, len);
            p->endpoint = copy;
            p->endpoint_len = len;
            for (int i = 0; i < n; i++)
                p->engine_ids[i] = remotes[i].engine_id;
            p->n_engine_ids = n;
        }
    }
    for (int i = 0; i < n; i++)
        if (hello[i])
            tandem__transfer__control_message__free_unpacked(hello[i], NULL);
    if (group)
        tandem__v1__transfer_group_endpoint__free_unpacked(group, NULL);
    return rc;
}

/* The TP group a sender engine belongs to: its size and rank 0's engine id
 * (0 when the sender is unknown, e.g. already removed). */
static int sender_group(const kv_receiver *r, uint64_t engine_id, uint64_t *key)
{
    for (int i = 0; i < r->n_peers; i++)
        for (int k = 0; k < r->peers[i].n_remotes; k++)
            if (r->peers[i].remotes[k].engine_id == engine_id) {
                *key = r->peers[i].remotes[0].engine_id;
                return r->peers[i].n_remotes;
            }
    *key = 0;
    return 1;
}

/* Counts a TP rank's notice; returns 1 with the request's combined notice
 * once every rank of its group has sent one. */
static int combine(kv_receiver *r, const te_notice *n, int size, uint64_t key,
                   uint64_t *request_id, int *complete, uint64_t *bytes)
{
    pending_notice *p = NULL;
    for (int i = 0; i < r->n_pending; i++)
        if (r->pending[i].request_id == n->request_id && r->pending[i].group_key == key)
            p = &r->pending[i];
    if (!p) {
        if (r->n_pending == r->cap_pending) {
            int cap = r->cap_pending ? 2 * r->cap_pending : 16;
            pending_notice *np = realloc(r->pending, (size_t)cap * sizeof *np);
            if (!np) {   /* cannot wait for the others: report it failed */
                *request_id = n->request_id;
                *complete = 0;
                *bytes = n->bytes;
                return 1;
            }
            r->pending = np;
            r->cap_pending = cap;
        }
        p = &r->pending[r->n_pending++];
        *p = (pending_notice){n->request_id, key, 0, 1, 0};
    }
    p->seen++;
    p->ok = p->ok && n->status == TN_OK;
    p->bytes += n->bytes;
    if (p->seen < size)
        return 0;
    *request_id = p->request_id;
    *complete = p->ok;
    *bytes = p->bytes;
    *p = r->pending[--r->n_pending];
    return 1;
}

/* Whether a connection of p failed (UCX reported it, or the engine gave
 * it up). */
static int peer_failed(const prefiller_peer *p)
{
    if (p->n_remotes == 0)
        return 1;
    for (int i = 0; i < p->n_remotes; i++)
        if (!p->remotes[i].peer || te_peer_status(p->remotes[i].peer) != TN_OK)
            return 1;
    return 0;
}

/* Whether an ack waits for one of p's engines. */
static int peer_acks_wait(const kv_receiver *r, const prefiller_peer *p)
{
    for (int i = 0; i < p->n_engine_ids; i++)
        if (te_engine_acks_waiting(r->xfer.e, p->engine_ids[i]))
            return 1;
    return 0;
}

/* Opens failed prefiller connections again from their endpoints while acks
 * wait for them: the failed endpoint is handed to the engine to close once
 * safe, a new one is connected and its set-up started off the request path,
 * and the waiting acks go out on it. Backs off while the prefiller does not
 * answer. */
static void supervise(kv_receiver *r)
{
    double now = te_now_seconds();
    for (int i = 0; i < r->n_peers; i++) {
        prefiller_peer *p = &r->peers[i];
        if (!peer_failed(p) || now < p->reconnect_at || !p->endpoint)
            continue;
        if (!peer_acks_wait(r, p)) {
            if (!p->idle_logged && p->n_remotes && p->remotes[0].peer)
                tn_log("decoder", "prefiller %s: connection failed (%s); reopened when an "
                       "ack waits for it", p->id, te_peer_error(p->remotes[0].peer));
            p->idle_logged = 1;
            continue;
        }
        char id[256], why[300], err[300];
        snprintf(id, sizeof id, "%s", p->id);
        snprintf(why, sizeof why, "%s",
                 p->n_remotes && p->remotes[0].peer ? te_peer_error(p->remotes[0].peer) : "");
        uint8_t *ep = p->endpoint;
        size_t len = p->endpoint_len;
        int tries = p->reconnects;
        uint64_t engine_ids[MAX_GROUP_RANKS];
        int n_engine_ids = p->n_engine_ids;
        memcpy(engine_ids, p->engine_ids, sizeof engine_ids);
        p->endpoint = NULL;   /* kept across the removal below */
        kv_receiver_remove_peer(r, id);
        int rc = kv_receiver_add_peer(r, id, ep, len, err, sizeof err);
        prefiller_peer *np = find(r, id);
        if (np) {
            double backoff = 0.25 * (1 << (tries < 5 ? tries : 5));
            np->reconnects = tries + 1;
            np->reconnect_at = now + (backoff < RECONNECT_MAX_BACKOFF_S ? backoff
                                                                         : RECONNECT_MAX_BACKOFF_S);
        }
        if (tries == 0 || (rc != 0 && tries % 10 == 1))
            tn_log("decoder", "prefiller %s: connection failed%s%s%s; %s%s", id,
                   why[0] ? " (" : "", why, why[0] ? ")" : "",
                   rc ? "reconnecting failed: " : "reconnected (waiting acks go out on it)",
                   rc ? err : "");
        if (rc != 0) {
            /* Keep the endpoint (and the engines whose acks wait) to try
             * again later. */
            if (r->n_peers == r->cap_peers) {
                free(ep);
                continue;
            }
            prefiller_peer *q = &r->peers[r->n_peers++];
            memset(q, 0, sizeof *q);
            snprintf(q->id, sizeof q->id, "%s", id);
            q->endpoint = ep;
            q->endpoint_len = len;
            memcpy(q->engine_ids, engine_ids, sizeof engine_ids);
            q->n_engine_ids = n_engine_ids;
            q->reconnects = tries + 1;
            q->reconnect_at = now + RECONNECT_MAX_BACKOFF_S;
            continue;
        }
        free(ep);
        i = -1; /* the array changed: look again (peers already fine are skipped) */
    }
    /* Connections that are healthy again reset their back-off. */
    for (int i = 0; i < r->n_peers; i++)
        if (r->peers[i].reconnects && !peer_failed(&r->peers[i]) &&
            te_peer_wireup_status(r->peers[i].remotes[0].peer) == TN_OK)
            r->peers[i].reconnects = 0;
}

int kv_receiver_next(kv_receiver *r, uint64_t *request_id, int *complete, uint64_t *bytes)
{
    te_engine_progress(r->xfer.e);
    supervise(r);
    te_notice n;
    while (te_engine_next_notice(r->xfer.e, &n)) {
        uint64_t key;
        int size = sender_group(r, n.sender_id, &key);
        if (size <= 1) {
            *request_id = n.request_id;
            *complete = n.status == TN_OK;
            *bytes = n.bytes;
            return 1;
        }
        if (combine(r, &n, size, key, request_id, complete, bytes))
            return 1;
    }
    return 0;
}

te_engine *kv_receiver_engine(kv_receiver *r) { return r->xfer.e; }
