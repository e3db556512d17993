/* The prefiller's TransferEngine: its pools registered once, one connection
 * per decoder, and the pushes into decoders' reserved pages.
 *
 * Connections are opened when the router introduces a decoder
 * (TransferPeer), and their UCX connection set-up (wire-up) is finished in
 * the background by kv_pusher_progress: UCX 1.13 aborts the process when an
 * endpoint is closed while its wire-up waits for the peer (a decoder that
 * freezes during it keeps it waiting), so a push never starts on a
 * connection still being set up; it waits for it (bounded by the transfer
 * timeout) and fails without sending anything if it does not finish. A
 * connection that fails is reopened when next needed (a push, or the
 * router introducing the decoder again; supervise says why not at once). A
 * decoder the router never introduced (a TP group's ranks other than 0 see
 * no TransferPeer) is connected on first use, with the same wait. */
#include "prefiller/kv_push.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/status.h"
#include "common/sys.h"
#include "transfer/transfer.h"
#include "transfer/transfer_kv.h"
#include "worker/worker_transfer.h"

#define WHO "prefiller"
/* A wire-up flush that fails while the endpoint still looks healthy is
 * posted again up to this many times. */
#define MAX_WIREUP_RETRIES 5
/* After this long without a finished set-up, say so once in the log. */
#define WIREUP_SLOW_S 5.0

typedef struct decoder_peer {
    char id[256];
    uint8_t *hello;           /* the decoder's packed endpoint (ControlMessage{hello}) */
    size_t hello_len;
    te_kv_remote remote;      /* remote.peer NULL: not connected */
    int broken;               /* its connection or a transfer failed: reopened when next needed */
    int busy;                 /* unreleased pushes using it */
    int gone;                 /* the router said it left: closed once not busy */
    double connected_at;      /* te_now_seconds() of the connect */
    int wireup_retries;       /* wire-up flushes posted again */
    int ready_logged, slow_logged;
} decoder_peer;

struct kv_pusher {
    worker_transfer xfer;     /* the engine and the pools registered */
    decoder_peer *peers;
    int n_peers, cap_peers;
    int log_connections;      /* rank 0 logs connection events (others are quiet) */
};

/* A push waits for its connection's set-up before its transfer is
 * submitted; until then t is NULL and the pages are kept here. */
struct kv_push {
    te_transfer *t;
    decoder_peer *peer;
    int32_t *src_pages, *dst_pages;
    int n_tokens;
    uint64_t request_id;
    int timeout_ms;
    double started, deadline;
    int canceled;
    int failed;               /* ended before submitting; why in error */
    char error[400];
};

int kv_pusher_open_rank(tm_kv_cache *kv, int n_kv_heads, int tp, int rank, const char *name,
                        const char *tls, int same_host_shm, tm_kv_path path,
                        kv_pusher **out, char *err, size_t errlen)
{
    *out = NULL;
    kv_pusher *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return TN_ERR_NOMEM;
    }
    p->log_connections = rank == 0;
    if (worker_transfer_open(&p->xfer, kv, n_kv_heads, tp, rank, name, tls, same_host_shm,
                             path, err, errlen) != 0) {
        free(p);
        return TN_ERR_ARG;
    }
    *out = p;
    return 0;
}

const char *kv_pusher_path(const kv_pusher *p)
{
    return p->xfer.staging.how;
}

/* Whether the connection can be closed without waiting: closing one whose
 * set-up is still running would block (te_peer_close waits up to 1 s for
 * it, and a frozen decoder never answers) and then leave it open anyway. */
static int closable_now(const decoder_peer *peer)
{
    return !peer->busy && peer->remote.peer &&
           te_peer_wireup_status(peer->remote.peer) != TN_IN_PROGRESS;
}

static void disconnect(kv_pusher *p, decoder_peer *peer)
{
    if (peer->remote.peer || peer->remote.regions)
        te_kv_disconnect(p->xfer.e, &peer->remote);
    memset(&peer->remote, 0, sizeof peer->remote);
    peer->broken = 0;
    peer->ready_logged = peer->slow_logged = 0;
}

void kv_pusher_close(kv_pusher *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n_peers; i++) {
        disconnect(p, &p->peers[i]);
        free(p->peers[i].hello);
    }
    free(p->peers);
    worker_transfer_close(&p->xfer);
    free(p);
}

void kv_pusher_endpoint(const kv_pusher *p, const uint8_t **buf, size_t *len)
{
    *buf = p->xfer.hello;
    *len = p->xfer.hello_len;
}

static decoder_peer *find_peer(kv_pusher *p, const char *id)
{
    for (int i = 0; i < p->n_peers; i++)
        if (!strcmp(p->peers[i].id, id))
            return &p->peers[i];
    return NULL;
}

static decoder_peer *add_peer(kv_pusher *p, const char *id, char *err, size_t errlen)
{
    if (p->n_peers == p->cap_peers) {
        /* Pushes hold pointers into the array: grow only while none is
         * outstanding (one job at a time makes that the normal case). */
        for (int i = 0; i < p->n_peers; i++)
            if (p->peers[i].busy) {
                snprintf(err, errlen, "cannot add a decoder connection while pushes run");
                return NULL;
            }
        int cap = p->cap_peers ? 2 * p->cap_peers : 8;
        decoder_peer *np = realloc(p->peers, (size_t)cap * sizeof *np);
        if (!np) {
            snprintf(err, errlen, "out of memory");
            return NULL;
        }
        p->peers = np;
        p->cap_peers = cap;
    }
    decoder_peer *peer = &p->peers[p->n_peers++];
    memset(peer, 0, sizeof *peer);
    snprintf(peer->id, sizeof peer->id, "%s", id);
    return peer;
}

/* Opens the connection to peer->hello and starts its wire-up. */
static int connect_peer(kv_pusher *p, decoder_peer *peer, char *err, size_t errlen)
{
    Tandem__Transfer__ControlMessage *m = te_control_unpack(peer->hello, peer->hello_len);
    if (!m || m->body_case != TANDEM__TRANSFER__CONTROL_MESSAGE__BODY_HELLO) {
        snprintf(err, errlen, "decoder %s sent no valid TransferEngine endpoint", peer->id);
        if (m)
            tandem__transfer__control_message__free_unpacked(m, NULL);
        return TN_ERR_ARG;
    }
    int rc = te_kv_connect(p->xfer.e, m->hello, &peer->remote);
    tandem__transfer__control_message__free_unpacked(m, NULL);
    if (rc != TN_OK) {
        snprintf(err, errlen, "cannot connect to decoder %s: %s", peer->id, te_engine_error(p->xfer.e));
        memset(&peer->remote, 0, sizeof peer->remote);
        return TN_ERR_ARG;
    }
    peer->connected_at = te_now_seconds();
    peer->ready_logged = peer->slow_logged = 0;
    if (te_peer_wireup_start(p->xfer.e, peer->remote.peer) != TN_OK) {
        snprintf(err, errlen, "decoder %s: %s", peer->id, te_engine_error(p->xfer.e));
        peer->broken = 1;
        return TN_ERR_ARG;
    }
    return 0;
}

/* Records the decoder's endpoint; returns 1 when it names another engine
 * than the one the peer is connected to (the decoder restarted). */
static int set_hello(decoder_peer *peer, const uint8_t *buf, size_t len, char *err,
                     size_t errlen)
{
    if (peer->hello && peer->hello_len == len && !memcmp(peer->hello, buf, len))
        return 0;
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) {
        snprintf(err, errlen, "out of memory");
        return TN_ERR_NOMEM;
    }
    memcpy(copy, buf, len);
    free(peer->hello);
    peer->hello = copy;
    peer->hello_len = len;
    return 1;
}

/* The connection to decoder id (endpoint buf/len), opened if needed. */
static decoder_peer *peer_for(kv_pusher *p, const char *id, const uint8_t *buf, size_t len,
                              char *err, size_t errlen)
{
    decoder_peer *peer = find_peer(p, id);
    if (!peer && !(peer = add_peer(p, id, err, errlen)))
        return NULL;
    int changed = set_hello(peer, buf, len, err, errlen);
    if (changed < 0)
        return NULL;
    peer->gone = 0;
    if ((changed || peer->broken) && !peer->busy && peer->remote.peer)
        disconnect(p, peer);
    if (peer->remote.peer)
        return peer;
    if (connect_peer(p, peer, err, errlen) != 0)
        return NULL;
    return peer;
}

int kv_pusher_introduce(kv_pusher *p, const char *decoder_id, const uint8_t *endpoint,
                        size_t len, int removed, char *err, size_t errlen)
{
    if (removed) {
        decoder_peer *peer = find_peer(p, decoder_id);
        if (peer) {
            peer->gone = 1; /* closed by kv_pusher_progress once that does not block */
            if (peer->busy && peer->remote.peer) {
                /* A push into it is running: the router dropped the decoder
                 * (dead or frozen) and places the request again, so the
                 * push ends now instead of at its timeout, and the next
                 * job does not wait behind it. */
                te_peer_fail(p->xfer.e, peer->remote.peer,
                             "the router dropped this decoder (stopped responding or left)");
                peer->broken = 1;
            } else if (closable_now(peer)) {
                disconnect(p, peer);
            }
        }
        return 0;
    }
    if (!endpoint || !len) {
        snprintf(err, errlen, "decoder %s has no TransferEngine endpoint", decoder_id);
        return TN_ERR_ARG;
    }
    return peer_for(p, decoder_id, endpoint, len, err, errlen) ? 0 : -1;
}

/* Keeps every connection's set-up moving: posts the wire-up flush again
 * when one failed on a healthy endpoint, marks failed connections to be
 * reopened when next needed, closes connections of decoders that left,
 * and logs when a set-up finishes or is slow. */
static void supervise(kv_pusher *p)
{
    double now = te_now_seconds();
    for (int i = 0; i < p->n_peers; i++) {
        decoder_peer *peer = &p->peers[i];
        if (peer->gone) {
            if (closable_now(peer))
                disconnect(p, peer);
            continue;
        }
        if (!peer->remote.peer) {
            continue;
        }
        te_peer *tp = peer->remote.peer;
        int st = te_peer_wireup_status(tp);
        if (st == TN_OK) {
            if (!peer->ready_logged && p->log_connections)
                tn_log(WHO, "decoder %s: connection ready (UCX set-up took %.0f ms; over %s, "
                       "%s%s)", peer->id, (now - peer->connected_at) * 1e3,
                       te_peer_transports(tp),
                       te_peer_puts_emulated(tp)
                           ? "no RMA lane: KV into host memory goes as data messages"
                           : "KV goes as puts",
                       te_peer_detects_failure(tp) ? "" : ", same host: shared memory");
            peer->ready_logged = 1;
            continue;
        }
        if (st == TN_IN_PROGRESS) {
            if (te_peer_wireup_failures(tp) > peer->wireup_retries &&
                peer->wireup_retries < MAX_WIREUP_RETRIES) {
                peer->wireup_retries++;
                if (p->log_connections)
                    tn_log(WHO, "decoder %s: connection set-up flush failed; retrying (%d of %d)",
                           peer->id, peer->wireup_retries, MAX_WIREUP_RETRIES);
                te_peer_wireup_start(p->xfer.e, tp);
            }
            if (!peer->slow_logged && now - peer->connected_at > WIREUP_SLOW_S) {
                peer->slow_logged = 1;
                if (p->log_connections)
                    tn_log(WHO, "decoder %s: UCX connection set-up not finished after %.0f s "
                           "(decoder frozen or unreachable?); pushes to it wait for it",
                           peer->id, WIREUP_SLOW_S);
            }
            continue;
        }
        /* The connection failed (the decoder died, restarted or froze).
         * It is reopened when next needed -- a push to the decoder, or the
         * router introducing it again -- not here: the router drops a dead
         * decoder within its worker timeout, and an endpoint opened to a
         * dead peer over TCP can abort UCX 1.13 (tcp_ep.c:478, "Assertion
         * `!(ep->flags & UCT_TCP_EP_FLAG_CTX_TYPE_TX)' failed" after the
         * refused connect: the prefiller died with a killed decoder in
         * test_fault_decoder_kill when it reopened at once). */
        if (!peer->broken && !peer->busy) {
            if (p->log_connections)
                tn_log(WHO, "decoder %s: connection failed (%s); reopened when next needed",
                       peer->id, te_peer_error(tp));
            peer->broken = 1;
        }
    }
}

int kv_pusher_progress(kv_pusher *p)
{
    int events = te_engine_progress(p->xfer.e);
    supervise(p);
    return events;
}

te_engine *kv_pusher_engine(kv_pusher *p) { return p->xfer.e; }

static int submit(kv_pusher *p, kv_push *k, int timeout_ms)
{
    if (te_kv_send(p->xfer.e, &p->xfer.local, k->src_pages, &k->peer->remote, k->dst_pages, k->n_tokens,
                   k->request_id, timeout_ms, &k->t) != TN_OK) {
        snprintf(k->error, sizeof k->error, "%s", te_engine_error(p->xfer.e));
        k->t = NULL;
        return -1;
    }
    return 0;
}

static int32_t *copy_pages(const int32_t *pages, int n_tokens, int page_size)
{
    int n = (n_tokens + page_size - 1) / page_size;
    int32_t *c = malloc((size_t)(n ? n : 1) * sizeof *c);
    if (c && n)
        memcpy(c, pages, (size_t)n * sizeof *c);
    return c;
}

int kv_push_start(kv_pusher *p, const Tandem__V1__KvDestination *dst, uint64_t request_id,
                  const int32_t *src_pages, int n_tokens, int timeout_ms, kv_push **out,
                  char *err, size_t errlen)
{
    *out = NULL;
    decoder_peer *peer = peer_for(p, dst->decoder_id, dst->transfer_endpoint.data,
                                  dst->transfer_endpoint.len, err, errlen);
    if (!peer)
        return TN_ERR_ARG;
    if (peer->remote.layout.page_size != dst->page_size) {
        snprintf(err, errlen, "decoder %s: KvDestination page size %d differs from its "
                 "TransferEngine layout (%d)", dst->decoder_id, dst->page_size,
                 peer->remote.layout.page_size);
        return TN_ERR_ARG;
    }
    int need = (n_tokens + dst->page_size - 1) / dst->page_size;
    if (n_tokens <= 0 || dst->n_page_ids < (size_t)need) {
        snprintf(err, errlen, "decoder %s: %zu destination pages for %d tokens", dst->decoder_id,
                 dst->n_page_ids, n_tokens);
        return TN_ERR_ARG;
    }
    /* staged: the prompt's pages go to the host mirror the puts read (the
     * KV is complete now, so the copy need not wait for the set-up) */
    int n_pages = (n_tokens + p->xfer.staging.kv->page_size - 1) / p->xfer.staging.kv->page_size;
    int rc = tm_kv_staging_to_host(&p->xfer.staging, src_pages, n_pages);
    if (rc != TN_OK) {
        snprintf(err, errlen, "copying %d KV pages to the host staging buffers: %s", n_pages,
                 tn_status_str(rc));
        return TN_ERR_ARG;
    }
    kv_push *k = calloc(1, sizeof *k);
    if (k) {
        k->src_pages = copy_pages(src_pages, n_tokens, p->xfer.local.layout.page_size);
        k->dst_pages = copy_pages(dst->page_ids, n_tokens, dst->page_size);
    }
    if (!k || !k->src_pages || !k->dst_pages) {
        if (k) {
            free(k->src_pages);
            free(k->dst_pages);
        }
        free(k);
        snprintf(err, errlen, "out of memory");
        return TN_ERR_NOMEM;
    }
    k->peer = peer;
    k->n_tokens = n_tokens;
    k->request_id = request_id;
    k->timeout_ms = timeout_ms;
    k->started = te_now_seconds();
    k->deadline = k->started + timeout_ms / 1000.0;
    if (te_peer_wireup_status(peer->remote.peer) == TN_OK && submit(p, k, timeout_ms) != 0) {
        snprintf(err, errlen, "%s", k->error);
        free(k->src_pages);
        free(k->dst_pages);
        free(k);
        return TN_ERR_ARG;
    }
    peer->busy++;
    *out = k;
    return 0;
}

/* A push still waiting for its connection's set-up: submits it once the
 * set-up finished; fails it (nothing sent) when the connection failed, the
 * push was cancelled, or the transfer timeout passed first. */
static void advance_waiting(kv_pusher *p, kv_push *k)
{
    int st = te_peer_wireup_status(k->peer->remote.peer);
    double now = te_now_seconds();
    if (k->canceled) {
        snprintf(k->error, sizeof k->error, "cancelled before the transfer started");
        k->failed = TN_ERR_CANCELED;
    } else if (st == TN_OK) {
        int left_ms = (int)((k->deadline - now) * 1e3);
        if (submit(p, k, left_ms > 0 ? left_ms : 1) != 0)
            k->failed = TN_ERR_REFUSED;
    } else if (st != TN_IN_PROGRESS) {
        snprintf(k->error, sizeof k->error, "connection to decoder %s failed during its set-up: "
                 "%s; nothing was sent", k->peer->id, te_peer_error(k->peer->remote.peer));
        k->failed = st;
    } else if (now >= k->deadline) {
        snprintf(k->error, sizeof k->error, "the UCX connection set-up to decoder %s did not "
                 "finish within %d ms (decoder frozen or unreachable?); nothing was sent",
                 k->peer->id, k->timeout_ms);
        k->failed = TN_ERR_TIMEOUT;
    }
}

int kv_push_poll(kv_pusher *p, kv_push *t, int *ok, int *events, char *err, size_t errlen)
{
    *events = kv_pusher_progress(p);
    if (!t->t && !t->failed)
        advance_waiting(p, t);
    if (t->failed) {
        *ok = 0;
        snprintf(err, errlen, "%s (%s)", t->error, tn_status_str(t->failed));
        return 1;
    }
    if (!t->t)
        return 0;
    int st = te_transfer_status(t->t);
    if (st == TN_IN_PROGRESS)
        return 0;
    *ok = st == TN_OK;
    if (!*ok) {
        snprintf(err, errlen, "%s (%s)", te_transfer_error(t->t), tn_status_str(st));
        if (st == TN_ERR_PEER || st == TN_ERR_TIMEOUT)
            t->peer->broken = 1;
    }
    return 1;
}

void kv_push_cancel(kv_pusher *p, kv_push *t)
{
    t->canceled = 1;
    if (t->t)
        te_transfer_cancel(p->xfer.e, t->t);
}

void kv_push_release(kv_pusher *p, kv_push *t)
{
    if (!t)
        return;
    if (t->t)
        te_transfer_release(p->xfer.e, t->t);
    t->peer->busy--;
    free(t->src_pages);
    free(t->dst_pages);
    free(t);
}

uint64_t kv_push_bytes(const kv_push *t)
{
    return t && t->t ? te_transfer_bytes(t->t) : 0;
}
