/* The decoder's TransferEngine: pools registered as write targets, one
 * connection per prefiller (for the acknowledgements), notices. */
#include "decoder/kv_receive.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/status.h"
#include "transfer/transfer.h"
#include "transfer/transfer_kv.h"
#include "worker/worker_transfer.h"

#include "proto/tandem.pb-c.h"

/* A prefiller: one engine, or one per rank of a TP group (each rank pushes
 * its KV heads of a request and sends its own notice). */
typedef struct prefiller_peer {
    char id[256];
    te_kv_remote *remotes;
    int n_remotes;
} prefiller_peer;

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
}

int kv_receiver_open(tm_kv_cache *kv, const char *name, const char *tls, tm_kv_path path,
                     kv_receiver **out, char *err, size_t errlen)
{
    *out = NULL;
    kv_receiver *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return TN_ERR_NOMEM;
    }
    if (worker_transfer_open(&r->xfer, kv, kv->n_kv_heads, 1, 0, name, tls, path, err,
                             errlen) != 0) {
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

#define MAX_GROUP_RANKS 64

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
        same = p->remotes[i].engine_id == hello[i]->hello->engine_id && p->remotes[i].peer;
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
        if (r->n_peers == r->cap_peers || !remotes) {
            free(remotes);
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
        } else if (!rc) {
            p = &r->peers[r->n_peers++];
            memset(p, 0, sizeof *p);
            snprintf(p->id, sizeof p->id, "%s", worker_id);
            p->remotes = remotes;
            p->n_remotes = n;
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

int kv_receiver_next(kv_receiver *r, uint64_t *request_id, int *complete, uint64_t *bytes)
{
    te_engine_progress(r->xfer.e);
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
