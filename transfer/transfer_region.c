/* Registered local regions, peers (UCX endpoints) and the peers' imported
 * regions (unpacked remote keys). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "transfer/transfer_internal.h"

int te_region_register(te_engine *e, void *addr, size_t len, te_mem_type type, te_region **out)
{
    if (!e || !out)
        return TN_ERR_ARG;
    *out = NULL;
    if (!addr || len == 0)
        return te_fail(e, TN_ERR_ARG, "cannot register region %p of %zu bytes", addr, len);
    ucs_memory_type_t mt = UCS_MEMORY_TYPE_HOST;
    if (type == TE_MEM_CUDA) {
#ifdef TANDEM_CUDA
        mt = UCS_MEMORY_TYPE_CUDA;
#else
        return te_fail(e, TN_ERR_UNSUPPORTED,
                       "CUDA memory region: this build has no CUDA (TANDEM_CUDA undefined)");
#endif
    } else if (type != TE_MEM_HOST) {
        return te_fail(e, TN_ERR_ARG, "unknown memory type %d", (int)type);
    }
    te_region *r = calloc(1, sizeof *r);
    if (!r)
        return te_fail(e, TN_ERR_NOMEM, "out of memory registering a region");
    ucp_mem_map_params_t mp = {0};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    mp.address = addr;
    mp.length = len;
    mp.memory_type = mt;
    ucs_status_t st = ucp_mem_map(e->ctx, &mp, &r->memh);
    if (st != UCS_OK) {
        free(r);
        return te_fail(e, TN_ERR_TRANSPORT, "ucp_mem_map of %zu bytes at %p: %s", len, addr,
                       ucs_status_string(st));
    }
    r->addr = addr;
    r->len = len;
    r->type = type;
    r->next = e->regions;
    e->regions = r;
    *out = r;
    return TN_OK;
}

void te_region_free(te_engine *e, te_region *r)
{
    TE_LIST_UNLINK(te_region, &e->regions, r);
    if (r->rkey_buf)
        ucp_rkey_buffer_release(r->rkey_buf);
    ucp_mem_unmap(e->ctx, r->memh);
    free(r);
}

int te_region_deregister(te_engine *e, te_region *r)
{
    if (!e || !r)
        return TN_ERR_ARG;
    if (r->users)
        return te_fail(e, TN_ERR_BUSY, "region %p is used by %d unreleased transfer(s)",
                       r->addr, r->users);
    te_region_free(e, r);
    return TN_OK;
}

int te_region_rkey(te_engine *e, te_region *r, const void **rkey, size_t *len)
{
    if (!e || !r || !rkey || !len)
        return TN_ERR_ARG;
    if (!r->rkey_buf) {
        ucs_status_t st = ucp_rkey_pack(e->ctx, r->memh, &r->rkey_buf, &r->rkey_len);
        if (st != UCS_OK) {
            r->rkey_buf = NULL;
            return te_fail(e, TN_ERR_TRANSPORT, "ucp_rkey_pack: %s", ucs_status_string(st));
        }
    }
    *rkey = r->rkey_buf;
    *len = r->rkey_len;
    return TN_OK;
}

void *te_region_addr(const te_region *r) { return r->addr; }
size_t te_region_len(const te_region *r) { return r->len; }
te_mem_type te_region_type(const te_region *r) { return r->type; }

void te_peer_mark_failed(te_peer *p, int status, const char *fmt, ...)
{
    if (p->status != TN_OK)
        return; /* keep the first reason: it is the cause, later ones are effects */
    p->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->error, sizeof p->error, fmt, ap);
    va_end(ap);
    te_log(p->e, "peer %016llx: %s", (unsigned long long)p->remote_id, p->error);
}

static void on_peer_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)ep;
    te_peer *p = arg;
    p->ucx_failed = 1;
    te_peer_mark_failed(p, TN_ERR_PEER, "connection failed: %s", ucs_status_string(status));
}

static void close_done(void *request, ucs_status_t status, void *user_data)
{
    (void)status;
    te_peer *p = user_data;
    p->e->outstanding--;
    p->close_done = 1;
    ucp_request_free(request);
}

int te_peer_close_safe(const te_engine *e, const te_peer *p)
{
    if (!p->detects_failure || p->ucx_failed)
        return 1;
    if (p->wireup != TE_WIREUP_DONE || p->acks_in_flight > 0)
        return 0;
    for (const te_transfer *t = e->transfers; t; t = t->next)
        if (t->peer == p && t->in_flight > 0)
            return 0;
    return 1;
}

void te_peer_start_close(te_engine *e, te_peer *p)
{
    if (!p->ep || p->close_req)
        return;
    if (!p->detects_failure && p->status != TN_OK)
        return;
    if (!te_peer_close_safe(e, p)) {
        /* Left open; te_peers_close_pending closes it once the wire-up
         * finished and our requests completed (the peer answered), or UCX
         * failed it (the peer died). */
        te_peer_wireup_flush(e, p);
        if (!p->close_deferred_logged) {
            p->close_deferred_logged = 1;
            te_log(e, "peer %016llx: endpoint left open until %s (closing it now would abort "
                   "UCX 1.13)", (unsigned long long)p->remote_id,
                   p->wireup != TE_WIREUP_DONE ? "its connection set-up finishes or fails"
                                               : "its requests complete or the peer fails");
        }
        return;
    }
    ucp_request_param_t prm = {0};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK |
                       UCP_OP_ATTR_FIELD_USER_DATA;
    prm.flags = p->detects_failure ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    prm.cb.send = close_done;
    prm.user_data = p;
    ucs_status_t st;
    int started = te_request_started(ucp_ep_close_nbx(p->ep, &prm), &st);
    if (started < 0) {
        /* UCX kept the endpoint: ucp_worker_destroy will release it. */
        te_log(e, "closing the endpoint to peer %016llx: %s", (unsigned long long)p->remote_id,
               ucs_status_string(st));
        return;
    }
    if (started == 1) {
        e->outstanding++;
        p->close_req = p; /* marks "close in flight"; completion sets close_done */
    } else {
        p->close_done = 1;
    }
    /* The endpoint handle is released by UCX from here on. */
    p->ep = NULL;
}

/* Summarises ucp_ep_print_info's lane table as "tl/dev" pairs, e.g.
 * "tcp/lo" or "cma/memory,posix/memory": the transports the endpoint
 * really uses, which on an RDMA cluster name the NIC. */
static void describe_transports(te_peer *p)
{
    char *text = NULL;
    size_t size = 0;
    snprintf(p->transports, sizeof p->transports, "unknown");
    FILE *f = open_memstream(&text, &size);
    if (!f)
        return;
    ucp_ep_print_info(p->ep, f);
    fclose(f);
    size_t used = 0;
    p->transports[0] = '\0';
    /* UCX lists a "put[LANE]" protocol line for every lane that does RMA;
     * with none, ucp_put_nbx is emulated over the AM lane. */
    p->puts_emulated = strstr(text, " put[") == NULL;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *lane = strstr(line, "lane[");
        if (!lane)
            continue;
        /* "lane[0]:  2:tcp/lo.0 md[1] ...": the token after the index. */
        char *colon = strchr(lane, ':');
        if (!colon)
            continue;
        char tl[64];
        if (sscanf(colon + 1, " %*d:%63s", tl) != 1)
            continue;
        char *dot = strrchr(tl, '.'); /* drop the ".0" path index */
        if (dot && strchr(tl, '/') && dot > strchr(tl, '/'))
            *dot = '\0';
        if (strstr(p->transports, tl))
            continue;
        int w = snprintf(p->transports + used, sizeof p->transports - used, "%s%s",
                         used ? "," : "", tl);
        if (w < 0 || (size_t)w >= sizeof p->transports - used)
            break;
        used += (size_t)w;
    }
    if (!p->transports[0])
        snprintf(p->transports, sizeof p->transports, "unknown");
    free(text);
}

/* Creates the endpoint; failure_mode says whether it gets UCX peer-failure
 * handling (which, in UCX 1.13, rules out the shared-memory transports). */
static int connect_peer(te_engine *e, const void *addr, size_t len, uint64_t remote_id,
                        int failure_mode, te_peer **out)
{
    if (!e || !out)
        return TN_ERR_ARG;
    *out = NULL;
    if (!addr || len == 0)
        return te_fail(e, TN_ERR_ARG, "peer worker address is empty");
    te_peer *p = calloc(1, sizeof *p);
    if (!p)
        return te_fail(e, TN_ERR_NOMEM, "out of memory connecting a peer");
    p->e = e;
    p->remote_id = remote_id;
    p->status = TN_OK;
    ucp_ep_params_t ep = {0};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = addr;
    ep.err_mode = failure_mode ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    ep.err_handler.cb = on_peer_error;
    ep.err_handler.arg = p;
    p->detects_failure = failure_mode;
    ucs_status_t st = ucp_ep_create(e->worker, &ep, &p->ep);
    if (st != UCS_OK) {
        free(p);
        return te_fail(e, TN_ERR_TRANSPORT, "ucp_ep_create to engine %016llx: %s",
                       (unsigned long long)remote_id, ucs_status_string(st));
    }
    describe_transports(p);
    p->next = e->peers;
    e->peers = p;
    *out = p;
    return TN_OK;
}

int te_peer_connect(te_engine *e, const void *addr, size_t len, uint64_t remote_id,
                    te_peer **out)
{
    return connect_peer(e, addr, len, remote_id, e ? e->peer_failure_mode : 0, out);
}

int te_peer_connect_same_host(te_engine *e, const void *addr, size_t len, uint64_t remote_id,
                              te_peer **out)
{
    return connect_peer(e, addr, len, remote_id, 0, out);
}

te_peer *te_peer_find(te_engine *e, uint64_t remote_id)
{
    for (te_peer *p = e->peers; p; p = p->next)
        if (p->remote_id == remote_id && p->status == TN_OK && !p->detached)
            return p;
    for (te_peer *p = e->peers; p; p = p->next)
        if (p->remote_id == remote_id && !p->detached)
            return p;
    return NULL;
}

int te_peer_status(const te_peer *p) { return p->status; }
const char *te_peer_error(const te_peer *p) { return p->status == TN_OK ? "" : p->error; }
uint64_t te_peer_remote_id(const te_peer *p) { return p->remote_id; }
int te_peer_detects_failure(const te_peer *p) { return p->detects_failure; }
int te_peer_puts_emulated(const te_peer *p) { return p->puts_emulated; }
const char *te_peer_transports(const te_peer *p) { return p->transports; }
uint64_t te_remote_region_len(const te_remote_region *r) { return r->len; }

int te_peer_import_region(te_engine *e, te_peer *p, uint64_t remote_addr, uint64_t len,
                          te_mem_type type, const void *rkey, size_t rkey_len,
                          te_remote_region **out)
{
    if (!e || !p || !out)
        return TN_ERR_ARG;
    *out = NULL;
    if (!rkey || rkey_len == 0 || len == 0)
        return te_fail(e, TN_ERR_ARG, "remote region descriptor is empty (len %llu, rkey %zu bytes)",
                       (unsigned long long)len, rkey_len);
    if (p->status != TN_OK || !p->ep)
        return te_fail(e, TN_ERR_PEER, "peer %016llx is unusable: %s",
                       (unsigned long long)p->remote_id, p->error);
    if (remote_addr + len < remote_addr)
        return te_fail(e, TN_ERR_ARG, "remote region wraps the address space");
    if (type != TE_MEM_HOST && type != TE_MEM_CUDA)
        return te_fail(e, TN_ERR_ARG, "remote region has unknown memory type %d", (int)type);
    te_remote_region *r = calloc(1, sizeof *r);
    if (!r)
        return te_fail(e, TN_ERR_NOMEM, "out of memory importing a region");
    ucs_status_t st = ucp_ep_rkey_unpack(p->ep, rkey, &r->rkey);
    if (st != UCS_OK) {
        free(r);
        return te_fail(e, TN_ERR_PROTO, "ucp_ep_rkey_unpack (%zu bytes): %s", rkey_len,
                       ucs_status_string(st));
    }
    r->peer = p;
    r->addr = remote_addr;
    r->len = len;
    r->type = type;
    r->next = p->regions;
    p->regions = r;
    *out = r;
    return TN_OK;
}

/* Frees the peer; its endpoint is closed (or was) and nothing is in flight. */
void te_peer_free(te_engine *e, te_peer *p)
{
    TE_LIST_UNLINK(te_peer, &e->peers, p);
    while (p->regions) {
        te_remote_region *r = p->regions;
        p->regions = r->next;
        if (r->rkey)
            ucp_rkey_destroy(r->rkey);
        free(r);
    }
    free(p);
}

static void wireup_flush_done(void *request, ucs_status_t status, void *user_data)
{
    te_peer *p = user_data;
    p->e->outstanding--;
    if (status == UCS_OK) {
        p->wireup = TE_WIREUP_DONE;
    } else {
        p->wireup = TE_WIREUP_UNKNOWN;
        p->wireup_failures++;
    }
    ucp_request_free(request);
}

/* A flush completes only once every lane of the endpoint is connected, so
 * its completion proves the wire-up (in both directions: UCX merges the
 * peer's connection to us into our endpoint to it) is over. */
void te_peer_wireup_flush(te_engine *e, te_peer *p)
{
    if (!p->ep || p->ucx_failed || p->wireup != TE_WIREUP_UNKNOWN)
        return;
    ucp_request_param_t prm = {0};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    prm.cb.send = wireup_flush_done;
    prm.user_data = p;
    ucs_status_t st;
    int started = te_request_started(ucp_ep_flush_nbx(p->ep, &prm), &st);
    if (started == 0) {
        p->wireup = TE_WIREUP_DONE;
    } else if (started == 1) {
        e->outstanding++;
        p->wireup = TE_WIREUP_FLUSHING;
    } else {
        p->wireup_failures++;
    }
}

void te_peer_fail(te_engine *e, te_peer *p, const char *why)
{
    if (!e || !p)
        return;
    te_peer_mark_failed(p, TN_ERR_PEER, "%s", why ? why : "failed by its owner");
    double now = te_now_seconds();
    for (te_transfer *t = e->transfers; t; t = t->next)
        if (t->peer == p)
            te_transfer_advance(t, now);
    te_peers_close_pending(e);
}

int te_peer_wireup_start(te_engine *e, te_peer *p)
{
    if (!e || !p)
        return TN_ERR_ARG;
    if (!p->ep || p->status != TN_OK)
        return te_fail(e, TN_ERR_PEER, "peer %016llx is unusable: %s",
                       (unsigned long long)p->remote_id, p->error);
    te_peer_wireup_flush(e, p);
    return TN_OK;
}

int te_peer_wireup_status(const te_peer *p)
{
    if (p->status != TN_OK)
        return p->status;
    if (!p->detects_failure)
        return TN_OK; /* shared memory: nothing to set up with the peer */
    return p->wireup == TE_WIREUP_DONE ? TN_OK : TN_IN_PROGRESS;
}

int te_peer_wireup_failures(const te_peer *p) { return p->wireup_failures; }

int te_peer_wireup_wait(te_engine *e, te_peer *p, int timeout_ms)
{
    int rc = te_peer_wireup_start(e, p);
    if (rc != TN_OK)
        return rc;
    double deadline = te_now_seconds() + timeout_ms / 1000.0;
    int idle = 0;
    for (;;) {
        int st = te_peer_wireup_status(p);
        if (st == TN_IN_PROGRESS && p->wireup == TE_WIREUP_UNKNOWN)
            te_peer_wireup_flush(e, p); /* the last flush failed: post another */
        if (st != TN_IN_PROGRESS)
            return st == TN_OK ? TN_OK
                               : te_fail(e, st, "peer %016llx: connection set-up failed: %s",
                                         (unsigned long long)p->remote_id, p->error);
        if (te_now_seconds() >= deadline)
            return te_fail(e, TN_ERR_TIMEOUT, "peer %016llx: connection set-up not finished "
                           "within %d ms", (unsigned long long)p->remote_id, timeout_ms);
        if (te_engine_progress(e))
            idle = 0;
        te_idle_backoff(&idle);
    }
}

/* Waits (at most `seconds`) for the endpoint's wire-up to finish, so that
 * the close after it is safe (te_peer_close_safe). A dead or hung peer only
 * delays the close; the flush stays counted in e->outstanding. */
static void finish_wireup(te_engine *e, te_peer *p, double seconds)
{
    if (!p->ep || p->ucx_failed || !p->detects_failure)
        return;
    te_peer_wireup_flush(e, p);
    double deadline = te_now_seconds() + seconds;
    int idle = 0;
    while (p->wireup == TE_WIREUP_FLUSHING && !p->ucx_failed && te_now_seconds() < deadline) {
        if (ucp_worker_progress(e->worker))
            idle = 0;
        te_idle_backoff(&idle);
    }
}

void te_peers_close_pending(te_engine *e)
{
    for (te_peer *p = e->peers; p; p = p->next)
        if (p->ep && !p->close_req && (p->status != TN_OK || p->detached))
            te_peer_start_close(e, p);
}

int te_peer_close(te_engine *e, te_peer *p)
{
    if (!e || !p)
        return TN_ERR_ARG;
    if (p->users)
        return te_fail(e, TN_ERR_BUSY, "peer %016llx is used by %d unreleased transfer(s)",
                       (unsigned long long)p->remote_id, p->users);
    if (p->detached)
        return TN_OK;
    for (te_transfer *t = e->transfers; t; t = t->next)
        if (t->peer == p) {
            /* A released transfer whose requests UCX still holds points at
             * this peer: hand the peer to the engine's destruction. */
            p->detached = 1;
            return TN_OK;
        }
    /* Endpoints with peer failure handling are closed by force: nothing of
     * ours is in flight (no unreleased transfer), and a graceful close would
     * wait for the remote process to take part, which a busy or hung peer
     * may never do; the remote just sees the connection end. Endpoints
     * without it (shared memory only) are flushed, which is local while the
     * peer is alive; a failed one is left to te_engine_destroy. */
    /* Acks still on their way would be cut by a force close, and the
     * sender would fail a transfer whose data all arrived. */
    double deadline = te_now_seconds() + 1.0;
    int idle = 0;
    while (p->acks_in_flight > 0 && p->status == TN_OK && te_now_seconds() < deadline) {
        if (ucp_worker_progress(e->worker))
            idle = 0;
        te_idle_backoff(&idle);
    }
    finish_wireup(e, p, 1.0);
    te_peer_start_close(e, p);
    deadline = te_now_seconds() + 5.0;
    while (p->close_req && !p->close_done && te_now_seconds() < deadline) {
        if (ucp_worker_progress(e->worker))
            idle = 0;
        te_idle_backoff(&idle);
    }
    if (p->ep || (p->close_req && !p->close_done) || p->wireup == TE_WIREUP_FLUSHING) {
        /* UCX still owns something of this peer: keep the object (its
         * callbacks point at it). te_engine_progress closes a live endpoint
         * left open once that is safe; the engine's destruction frees it. */
        p->detached = 1;
        /* (A live endpoint whose close was deferred was logged already.) */
        if (!p->ep || !p->detects_failure)
            te_log(e, "peer %016llx: endpoint left open until the engine is destroyed (%s)",
                   (unsigned long long)p->remote_id,
                   !p->ep ? "close did not finish in 5 s"
                          : "failed endpoint without failure handling");
        return TN_OK;
    }
    te_peer_free(e, p);
    return TN_OK;
}
