#include "transfer/transfer_kv.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "transfer/transfer_internal.h"

size_t te_kv_pool_bytes(const te_kv_layout *l, char *err, size_t err_len)
{
    int first, heads;
    if (!l || l->n_layers < 1 || l->head_dim < 1 || l->elem_bytes < 1 || l->page_size < 1 ||
        l->n_pages < 1) {
        snprintf(err, err_len, "KV layout needs positive layers, head_dim, elem_bytes, "
                 "page_size and n_pages");
        return 0;
    }
    if (te_kv_rank_heads(l->n_kv_heads, l->tp, l->rank, &first, &heads)) {
        snprintf(err, err_len, "KV layout: TP=%d rank %d cannot hold %d KV heads", l->tp,
                 l->rank, l->n_kv_heads);
        return 0;
    }
    te_kv_geometry g = {l->n_kv_heads, l->head_dim, l->elem_bytes};
    return (size_t)l->n_pages * (size_t)te_kv_page_bytes(&g, heads, l->page_size);
}

void te_kv_deregister(te_engine *e, te_kv_local *kv)
{
    if (!kv || !kv->regions)
        return;
    for (int i = 0; i < kv->n_regions; i++)
        if (kv->regions[i])
            te_region_deregister(e, kv->regions[i]);
    free(kv->regions);
    kv->regions = NULL;
    kv->n_regions = 0;
}

int te_kv_register(te_engine *e, const te_kv_layout *l, void *const *k_pools,
                   void *const *v_pools, te_mem_type type, te_kv_local *out)
{
    if (!e || !l || !k_pools || !v_pools || !out)
        return TN_ERR_ARG;
    memset(out, 0, sizeof *out);
    size_t bytes = te_kv_pool_bytes(l, e->error, sizeof e->error);
    if (!bytes)
        return TN_ERR_ARG;
    out->layout = *l;
    out->n_regions = 2 * l->n_layers;
    out->regions = calloc((size_t)out->n_regions, sizeof *out->regions);
    if (!out->regions)
        return te_fail(e, TN_ERR_NOMEM, "out of memory for %d regions", out->n_regions);
    for (int layer = 0; layer < l->n_layers; layer++)
        for (int kv = 0; kv < 2; kv++) {
            void *pool = kv ? v_pools[layer] : k_pools[layer];
            int rc = te_region_register(e, pool, bytes, type, &out->regions[layer * 2 + kv]);
            if (rc != TN_OK) {
                te_kv_deregister(e, out);
                return rc;
            }
        }
    return TN_OK;
}

static uint8_t *pack_control(const Tandem__Transfer__ControlMessage *m, size_t *len)
{
    *len = tandem__transfer__control_message__get_packed_size(m);
    uint8_t *buf = malloc(*len ? *len : 1);
    if (buf)
        tandem__transfer__control_message__pack(m, buf);
    return buf;
}

int te_kv_hello_pack(te_engine *e, const te_kv_local *kv, uint8_t **buf, size_t *len)
{
    if (!e || !kv || !buf || !len)
        return TN_ERR_ARG;
    *buf = NULL;
    Tandem__Transfer__KvShard shard = TANDEM__TRANSFER__KV_SHARD__INIT;
    shard.tp = (uint32_t)kv->layout.tp;
    shard.rank = (uint32_t)kv->layout.rank;
    shard.n_layers = (uint32_t)kv->layout.n_layers;
    shard.n_kv_heads = (uint32_t)kv->layout.n_kv_heads;
    shard.head_dim = (uint32_t)kv->layout.head_dim;
    shard.page_size = (uint32_t)kv->layout.page_size;
    shard.elem_bytes = (uint32_t)kv->layout.elem_bytes;
    shard.n_pages = (uint32_t)kv->layout.n_pages;

    size_t n = (size_t)kv->n_regions;
    Tandem__Transfer__RegionDescriptor *descs = calloc(n ? n : 1, sizeof *descs);
    Tandem__Transfer__RegionDescriptor **ptrs = calloc(n ? n : 1, sizeof *ptrs);
    if (!descs || !ptrs) {
        free(descs);
        free(ptrs);
        return te_fail(e, TN_ERR_NOMEM, "out of memory packing a hello");
    }
    int rc = TN_OK;
    for (size_t i = 0; i < n && rc == TN_OK; i++) {
        te_region *r = kv->regions[i];
        const void *rkey;
        size_t rkey_len;
        rc = te_region_rkey(e, r, &rkey, &rkey_len);
        tandem__transfer__region_descriptor__init(&descs[i]);
        descs[i].id = (uint32_t)i;
        descs[i].address = (uint64_t)(uintptr_t)r->addr;
        descs[i].length = r->len;
        descs[i].rkey.data = (uint8_t *)rkey;
        descs[i].rkey.len = rkey_len;
        descs[i].memory_type = r->type == TE_MEM_CUDA ? TANDEM__TRANSFER__MEMORY_TYPE__MEMORY_CUDA
                                                      : TANDEM__TRANSFER__MEMORY_TYPE__MEMORY_HOST;
        ptrs[i] = &descs[i];
    }
    if (rc == TN_OK) {
        Tandem__Transfer__PeerHello hello = TANDEM__TRANSFER__PEER_HELLO__INIT;
        hello.engine_id = e->id;
        hello.worker_address.data = (uint8_t *)e->address;
        hello.worker_address.len = e->address_len;
        hello.shard = &shard;
        hello.n_regions = n;
        hello.regions = ptrs;
        hello.nic = e->nic;
        hello.host_key = e->host_key;
        Tandem__Transfer__ControlMessage m = TANDEM__TRANSFER__CONTROL_MESSAGE__INIT;
        m.body_case = TANDEM__TRANSFER__CONTROL_MESSAGE__BODY_HELLO;
        m.hello = &hello;
        *buf = pack_control(&m, len);
        if (!*buf)
            rc = te_fail(e, TN_ERR_NOMEM, "out of memory packing a hello");
    }
    free(descs);
    free(ptrs);
    return rc;
}

int te_kv_request_pack(uint64_t request_id, int n_tokens, const int32_t *pages, int n_pages,
                       uint8_t **buf, size_t *len)
{
    if (!buf || !len || n_tokens < 0 || n_pages < 0 || (n_pages && !pages))
        return TN_ERR_ARG;
    Tandem__Transfer__KvRequest req = TANDEM__TRANSFER__KV_REQUEST__INIT;
    req.request_id = request_id;
    req.n_tokens = (uint32_t)n_tokens;
    req.n_pages = (size_t)n_pages;
    req.pages = (int32_t *)pages;
    Tandem__Transfer__ControlMessage m = TANDEM__TRANSFER__CONTROL_MESSAGE__INIT;
    m.body_case = TANDEM__TRANSFER__CONTROL_MESSAGE__BODY_KV_REQUEST;
    m.kv_request = &req;
    *buf = pack_control(&m, len);
    return *buf ? TN_OK : TN_ERR_NOMEM;
}

Tandem__Transfer__ControlMessage *te_control_unpack(const uint8_t *buf, size_t len)
{
    if (!buf)
        return NULL;
    Tandem__Transfer__ControlMessage *m = tandem__transfer__control_message__unpack(NULL, len, buf);
    if (!m)
        return NULL;
    /* Reject bodies the rest of the code would dereference as present. */
    if ((m->body_case == TANDEM__TRANSFER__CONTROL_MESSAGE__BODY_HELLO &&
         (!m->hello || !m->hello->shard)) ||
        m->body_case == TANDEM__TRANSFER__CONTROL_MESSAGE__BODY__NOT_SET) {
        tandem__transfer__control_message__free_unpacked(m, NULL);
        return NULL;
    }
    return m;
}

int te_kv_connect(te_engine *e, const Tandem__Transfer__PeerHello *h, te_kv_remote *out)
{
    if (!e || !h || !out)
        return TN_ERR_ARG;
    memset(out, 0, sizeof *out);
    if (!h->shard)
        return te_fail(e, TN_ERR_PROTO, "hello without a KV shard");
    const Tandem__Transfer__KvShard *s = h->shard;
    te_kv_layout l = {(int)s->tp, (int)s->rank, (int)s->n_layers, (int)s->n_kv_heads,
                      (int)s->head_dim, (int)s->elem_bytes, (int)s->page_size, (int)s->n_pages};
    char why[200];
    size_t pool = te_kv_pool_bytes(&l, why, sizeof why);
    if (!pool || s->tp > 1024 || s->n_layers > 4096)
        return te_fail(e, TN_ERR_PROTO, "hello from engine %016llx: %s",
                       (unsigned long long)h->engine_id, pool ? "absurd layout" : why);
    int n = 2 * l.n_layers;
    if (h->n_regions != (size_t)n)
        return te_fail(e, TN_ERR_PROTO, "hello from engine %016llx has %zu regions, layout "
                       "needs %d", (unsigned long long)h->engine_id, h->n_regions, n);
    out->regions = calloc((size_t)n, sizeof *out->regions);
    if (!out->regions)
        return te_fail(e, TN_ERR_NOMEM, "out of memory importing %d regions", n);
    out->layout = l;
    out->n_regions = n;
    out->engine_id = h->engine_id;
    int rc = te_engine_peer_is_same_host(e, h->host_key)
                 ? te_peer_connect_same_host(e, h->worker_address.data, h->worker_address.len,
                                             h->engine_id, &out->peer)
                 : te_peer_connect(e, h->worker_address.data, h->worker_address.len,
                                   h->engine_id, &out->peer);
    for (size_t i = 0; i < h->n_regions && rc == TN_OK; i++) {
        const Tandem__Transfer__RegionDescriptor *d = h->regions[i];
        if (d->id >= (uint32_t)n || out->regions[d->id]) {
            rc = te_fail(e, TN_ERR_PROTO, "hello region id %u duplicate or out of range", d->id);
            break;
        }
        /* Imported with the length the peer advertised: if that is smaller
         * than its layout implies, te_transfer_submit refuses any copy past
         * it before a byte moves. */
        te_mem_type type = d->memory_type == TANDEM__TRANSFER__MEMORY_TYPE__MEMORY_CUDA
                               ? TE_MEM_CUDA : TE_MEM_HOST;
        rc = te_peer_import_region(e, out->peer, d->address, d->length, type, d->rkey.data,
                                   d->rkey.len, &out->regions[d->id]);
    }
    if (rc != TN_OK) {
        te_kv_disconnect(e, out);
        return rc;
    }
    return TN_OK;
}

int te_kv_disconnect(te_engine *e, te_kv_remote *r)
{
    if (!e || !r)
        return TN_ERR_ARG;
    if (r->peer) {
        int rc = te_peer_close(e, r->peer);
        if (rc != TN_OK)
            return rc;
        r->peer = NULL;
    }
    free(r->regions); /* the region objects belonged to the peer */
    r->regions = NULL;
    r->n_regions = 0;
    return TN_OK;
}

int te_kv_send(te_engine *e, const te_kv_local *src, const int32_t *src_pages,
               const te_kv_remote *dst, const int32_t *dst_pages, int n_tokens,
               uint64_t request_id, int timeout_ms, te_transfer **out)
{
    if (!e || !src || !dst || !out || !src_pages || !dst_pages)
        return TN_ERR_ARG;
    *out = NULL;
    const te_kv_layout *s = &src->layout, *d = &dst->layout;
    if (s->n_layers != d->n_layers || s->n_kv_heads != d->n_kv_heads ||
        s->head_dim != d->head_dim || s->elem_bytes != d->elem_bytes)
        return te_fail(e, TN_ERR_ARG, "KV layouts differ: sender %d layers x %d heads x %d dims "
                       "x %d B, receiver %d x %d x %d x %d B", s->n_layers, s->n_kv_heads,
                       s->head_dim, s->elem_bytes, d->n_layers, d->n_kv_heads, d->head_dim,
                       d->elem_bytes);
    if (s->tp < 1 || s->tp > 1024 || d->tp < 1 || d->tp > 1024)
        return te_fail(e, TN_ERR_ARG, "TP degree out of range");
    const int32_t **src_tables = calloc((size_t)s->tp, sizeof *src_tables);
    const int32_t **dst_tables = calloc((size_t)d->tp, sizeof *dst_tables);
    if (!src_tables || !dst_tables) {
        free(src_tables);
        free(dst_tables);
        return te_fail(e, TN_ERR_NOMEM, "out of memory planning request %llu",
                       (unsigned long long)request_id);
    }
    src_tables[s->rank] = src_pages;
    dst_tables[d->rank] = dst_pages;
    te_kv_geometry g = {s->n_kv_heads, s->head_dim, s->elem_bytes};
    te_kv_sharding ss = {s->tp, s->page_size, s->n_pages, src_tables};
    te_kv_sharding ds = {d->tp, d->page_size, d->n_pages, dst_tables};
    te_reshard_plan plan;
    char why[256];
    int rc = te_reshard_plan_build(&g, n_tokens, &ss, &ds, s->rank, d->rank, &plan, why,
                                   sizeof why);
    free(src_tables);
    free(dst_tables);
    if (rc != 0)
        return te_fail(e, TN_ERR_ARG, "request %llu: %s", (unsigned long long)request_id, why);

    size_t pools = (size_t)src->n_regions;
    size_t n = plan.n_copies * pools;
    te_copy *copies = malloc((n ? n : 1) * sizeof *copies);
    if (!copies) {
        te_reshard_plan_free(&plan);
        return te_fail(e, TN_ERR_NOMEM, "out of memory for %zu copies", n);
    }
    /* Pool-major order: consecutive puts stay within one pool, which keeps
     * the destination writes of a window close together. */
    size_t k = 0;
    for (size_t pool = 0; pool < pools; pool++)
        for (size_t i = 0; i < plan.n_copies; i++) {
            copies[k].src_region = (uint32_t)pool;
            copies[k].dst_region = (uint32_t)pool;
            copies[k].src_offset = plan.copies[i].src_offset;
            copies[k].dst_offset = plan.copies[i].dst_offset;
            copies[k].length = plan.copies[i].length;
            k++;
        }
    te_reshard_plan_free(&plan);
    te_transfer_desc desc = {
        .peer = dst->peer,
        .request_id = request_id,
        .src = src->regions,
        .n_src = (size_t)src->n_regions,
        .dst = dst->regions,
        .n_dst = (size_t)dst->n_regions,
        .copies = copies,
        .n_copies = n,
        .timeout_ms = timeout_ms,
    };
    rc = te_transfer_submit(e, &desc, out);
    free(copies);
    return rc;
}
