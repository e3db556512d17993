/* The decoder's TransferEngine: pools registered as write targets, one
 * connection per prefiller (for the acknowledgements), notices. */
#include "decoder/kv_receive.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "transfer/transfer.h"
#include "transfer/transfer_kv.h"

typedef struct prefiller_peer {
    char id[256];
    te_kv_remote remote;
} prefiller_peer;

struct kv_receiver {
    te_engine *e;
    te_kv_local local;
    uint8_t *hello;
    size_t hello_len;
    prefiller_peer *peers;
    int n_peers, cap_peers;
};

int kv_receiver_open(tm_kv_cache *kv, const char *name, const char *tls, kv_receiver **out,
                     char *err, size_t errlen)
{
    *out = NULL;
    kv_receiver *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    te_engine_config cfg;
    te_engine_config_default(&cfg);
    cfg.name = name;
    cfg.tls = tls && tls[0] ? tls : NULL;
    if (te_engine_create(&cfg, &r->e, err, errlen) != TE_OK) {
        free(r);
        return -1;
    }
    te_kv_layout l = {.tp = 1, .rank = 0, .n_layers = kv->n_layers, .n_kv_heads = kv->n_kv_heads,
                      .head_dim = kv->head_dim, .elem_bytes = (int)sizeof(float),
                      .page_size = kv->page_size, .n_pages = kv->n_pages};
    if (te_kv_register(r->e, &l, (void *const *)kv->k, (void *const *)kv->v, TE_MEM_HOST,
                       &r->local) != TE_OK ||
        te_kv_hello_pack(r->e, &r->local, &r->hello, &r->hello_len) != TE_OK) {
        snprintf(err, errlen, "%s", te_engine_error(r->e));
        kv_receiver_close(r);
        return -1;
    }
    *out = r;
    return 0;
}

void kv_receiver_close(kv_receiver *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n_peers; i++)
        te_kv_disconnect(r->e, &r->peers[i].remote);
    free(r->peers);
    te_kv_deregister(r->e, &r->local);
    free(r->hello);
    te_engine_destroy(r->e);
    free(r);
}

void kv_receiver_endpoint(const kv_receiver *r, const uint8_t **buf, size_t *len)
{
    *buf = r->hello;
    *len = r->hello_len;
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
    te_kv_disconnect(r->e, &p->remote);
    *p = r->peers[--r->n_peers];
}

int kv_receiver_add_peer(kv_receiver *r, const char *worker_id, const uint8_t *endpoint,
                         size_t len, char *err, size_t errlen)
{
    Tandem__Transfer__ControlMessage *m = te_control_unpack(endpoint, len);
    if (!m || m->body_case != TANDEM__TRANSFER__CONTROL_MESSAGE__BODY_HELLO) {
        snprintf(err, errlen, "not a TransferEngine hello");
        if (m)
            tandem__transfer__control_message__free_unpacked(m, NULL);
        return -1;
    }
    prefiller_peer *p = find(r, worker_id);
    if (p && p->remote.engine_id == m->hello->engine_id && p->remote.peer) {
        tandem__transfer__control_message__free_unpacked(m, NULL);
        return 0; /* already connected to this engine */
    }
    if (p)
        kv_receiver_remove_peer(r, worker_id);
    if (r->n_peers == r->cap_peers) {
        int cap = r->cap_peers ? 2 * r->cap_peers : 8;
        prefiller_peer *np = realloc(r->peers, (size_t)cap * sizeof *np);
        if (!np) {
            tandem__transfer__control_message__free_unpacked(m, NULL);
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        r->peers = np;
        r->cap_peers = cap;
    }
    p = &r->peers[r->n_peers];
    memset(p, 0, sizeof *p);
    snprintf(p->id, sizeof p->id, "%s", worker_id);
    int rc = te_kv_connect(r->e, m->hello, &p->remote);
    tandem__transfer__control_message__free_unpacked(m, NULL);
    if (rc != TE_OK) {
        snprintf(err, errlen, "%s", te_engine_error(r->e));
        return -1;
    }
    r->n_peers++;
    return 0;
}

int kv_receiver_next(kv_receiver *r, uint64_t *request_id, int *complete)
{
    te_engine_progress(r->e);
    te_notice n;
    if (!te_engine_next_notice(r->e, &n))
        return 0;
    *request_id = n.request_id;
    *complete = n.status == TE_OK;
    return 1;
}
