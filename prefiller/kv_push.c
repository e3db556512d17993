/* The prefiller's TransferEngine: its pools registered once, one connection
 * per decoder (opened on first use from the endpoint in KvDestination and
 * reopened if that decoder's engine changed or its connection failed). */
#include "prefiller/kv_push.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/status.h"
#include "transfer/transfer.h"
#include "transfer/transfer_kv.h"

typedef struct decoder_peer {
    char id[256];
    te_kv_remote remote;
    int broken;               /* a transfer to it failed: reconnect next time */
    int busy;                 /* unreleased pushes using it */
} decoder_peer;

struct kv_pusher {
    te_engine *e;
    tm_kv_staging staging;    /* the pools registered, or their host mirror */
    te_kv_local local;
    uint8_t *hello;
    size_t hello_len;
    decoder_peer *peers;
    int n_peers, cap_peers;
};

struct kv_push {
    te_transfer *t;
    decoder_peer *peer;
};

int kv_pusher_open_rank(tm_kv_cache *kv, int n_kv_heads, int tp, int rank, const char *name,
                        const char *tls, tm_kv_path path, kv_pusher **out, char *err,
                        size_t errlen)
{
    *out = NULL;
    kv_pusher *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    te_engine_config cfg;
    te_engine_config_default(&cfg);
    cfg.name = name;
    cfg.tls = tls && tls[0] ? tls : NULL;
    if (te_engine_create(&cfg, &p->e, err, errlen) != TE_OK) {
        free(p);
        return -1;
    }
    if (tm_kv_staging_init(&p->staging, kv, path, te_engine_cuda_memory(p->e), err,
                           errlen) != KN_OK) {
        kv_pusher_close(p);
        return -1;
    }
    te_kv_layout l = {.tp = tp, .rank = rank, .n_layers = kv->n_layers, .n_kv_heads = n_kv_heads,
                      .head_dim = kv->head_dim, .elem_bytes = (int)sizeof(float),
                      .page_size = kv->page_size, .n_pages = kv->n_pages};
    if (te_kv_register(p->e, &l, (void *const *)p->staging.k, (void *const *)p->staging.v,
                       p->staging.device_memory ? TE_MEM_CUDA : TE_MEM_HOST,
                       &p->local) != TE_OK ||
        te_kv_hello_pack(p->e, &p->local, &p->hello, &p->hello_len) != TE_OK) {
        snprintf(err, errlen, "%s", te_engine_error(p->e));
        kv_pusher_close(p);
        return -1;
    }
    *out = p;
    return 0;
}

const char *kv_pusher_path(const kv_pusher *p)
{
    return p->staging.how;
}

void kv_pusher_close(kv_pusher *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n_peers; i++)
        te_kv_disconnect(p->e, &p->peers[i].remote);
    free(p->peers);
    te_kv_deregister(p->e, &p->local);
    free(p->hello);
    te_engine_destroy(p->e);
    tm_kv_staging_free(&p->staging);
    free(p);
}

void kv_pusher_endpoint(const kv_pusher *p, const uint8_t **buf, size_t *len)
{
    *buf = p->hello;
    *len = p->hello_len;
}

void kv_pusher_progress(kv_pusher *p)
{
    te_engine_progress(p->e);
}

/* The connection to the decoder described by dst, opened if needed. */
static decoder_peer *peer_for(kv_pusher *p, const Tandem__V1__KvDestination *dst, char *err,
                              size_t errlen)
{
    Tandem__Transfer__ControlMessage *m =
        te_control_unpack(dst->transfer_endpoint.data, dst->transfer_endpoint.len);
    if (!m || m->body_case != TANDEM__TRANSFER__CONTROL_MESSAGE__BODY_HELLO) {
        snprintf(err, errlen, "decoder %s sent no valid TransferEngine endpoint", dst->decoder_id);
        if (m)
            tandem__transfer__control_message__free_unpacked(m, NULL);
        return NULL;
    }
    const Tandem__Transfer__PeerHello *h = m->hello;
    decoder_peer *peer = NULL;
    for (int i = 0; i < p->n_peers; i++)
        if (!strcmp(p->peers[i].id, dst->decoder_id))
            peer = &p->peers[i];
    if (peer && (peer->broken || peer->remote.engine_id != h->engine_id) && !peer->busy) {
        te_kv_disconnect(p->e, &peer->remote);
        memset(&peer->remote, 0, sizeof peer->remote);
        peer->broken = 0;
    }
    if (peer && peer->remote.peer) {
        tandem__transfer__control_message__free_unpacked(m, NULL);
        return peer;
    }
    if (!peer) {
        if (p->n_peers == p->cap_peers) {
            /* Pushes hold pointers into the array: grow only while none is
             * outstanding (one job at a time makes that the normal case). */
            for (int i = 0; i < p->n_peers; i++)
                if (p->peers[i].busy) {
                    snprintf(err, errlen, "cannot add a decoder connection while pushes run");
                    tandem__transfer__control_message__free_unpacked(m, NULL);
                    return NULL;
                }
            int cap = p->cap_peers ? 2 * p->cap_peers : 8;
            decoder_peer *np = realloc(p->peers, (size_t)cap * sizeof *np);
            if (!np) {
                snprintf(err, errlen, "out of memory");
                tandem__transfer__control_message__free_unpacked(m, NULL);
                return NULL;
            }
            p->peers = np;
            p->cap_peers = cap;
        }
        peer = &p->peers[p->n_peers++];
        memset(peer, 0, sizeof *peer);
        snprintf(peer->id, sizeof peer->id, "%s", dst->decoder_id);
    }
    int rc = te_kv_connect(p->e, h, &peer->remote);
    tandem__transfer__control_message__free_unpacked(m, NULL);
    if (rc != TE_OK) {
        snprintf(err, errlen, "cannot connect to decoder %s: %s", dst->decoder_id,
                 te_engine_error(p->e));
        memset(&peer->remote, 0, sizeof peer->remote);
        return NULL;
    }
    return peer;
}

int kv_push_start(kv_pusher *p, const Tandem__V1__KvDestination *dst, uint64_t request_id,
                  const int32_t *src_pages, int n_tokens, int timeout_ms, kv_push **out,
                  char *err, size_t errlen)
{
    *out = NULL;
    decoder_peer *peer = peer_for(p, dst, err, errlen);
    if (!peer)
        return -1;
    if (peer->remote.layout.page_size != dst->page_size) {
        snprintf(err, errlen, "decoder %s: KvDestination page size %d differs from its "
                 "TransferEngine layout (%d)", dst->decoder_id, dst->page_size,
                 peer->remote.layout.page_size);
        return -1;
    }
    /* staged: the prompt's pages go to the host mirror the puts read */
    int n_pages = (n_tokens + p->staging.kv->page_size - 1) / p->staging.kv->page_size;
    int rc = tm_kv_staging_to_host(&p->staging, src_pages, n_pages);
    if (rc != KN_OK) {
        snprintf(err, errlen, "copying %d KV pages to the host staging buffers: %s", n_pages,
                 kn_status_str(rc));
        return -1;
    }
    kv_push *k = calloc(1, sizeof *k);
    if (!k) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (te_kv_send(p->e, &p->local, src_pages, &peer->remote, dst->page_ids, n_tokens,
                   request_id, timeout_ms, &k->t) != TE_OK) {
        snprintf(err, errlen, "%s", te_engine_error(p->e));
        free(k);
        return -1;
    }
    k->peer = peer;
    peer->busy++;
    *out = k;
    return 0;
}

int kv_push_poll(kv_pusher *p, kv_push *t, int *ok, char *err, size_t errlen)
{
    te_engine_progress(p->e);
    int st = te_transfer_status(t->t);
    if (st == TE_IN_PROGRESS)
        return 0;
    *ok = st == TE_OK;
    if (!*ok) {
        snprintf(err, errlen, "%s (%s)", te_transfer_error(t->t), te_status_str(st));
        if (st == TE_ERR_PEER || st == TE_ERR_TIMEOUT)
            t->peer->broken = 1;
    }
    return 1;
}

void kv_push_cancel(kv_pusher *p, kv_push *t)
{
    te_transfer_cancel(p->e, t->t);
}

void kv_push_release(kv_pusher *p, kv_push *t)
{
    if (!t)
        return;
    te_transfer_release(p->e, t->t);
    t->peer->busy--;
    free(t);
}

uint64_t kv_push_bytes(const kv_push *t)
{
    return t ? te_transfer_bytes(t->t) : 0;
}
