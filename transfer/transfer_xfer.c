/* Sender side of a transfer: validation, puts (or data messages) with a
 * bounded window, flush, notice, ack, timeout and cancel. The state machine
 * advances only from te_engine_progress; UCX callbacks just count
 * completions. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "proto/transfer.pb-c.h"
#include "transfer/transfer_internal.h"

static void set_failure(te_transfer *t, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Remembers the first failure; the transfer ends with it once every request
 * it has in flight has completed (so UCX no longer reads its memory). */
static void set_failure(te_transfer *t, int status, const char *fmt, ...)
{
    if (t->failure)
        return;
    t->failure = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->error, sizeof t->error, fmt, ap);
    va_end(ap);
}

static void finish(te_transfer *t, int status)
{
    t->status = status;
    t->phase = TE_PHASE_DONE;
    if (status == TN_OK)
        t->error[0] = '\0';
    else if (status == TN_ERR_CANCELED && !t->error[0])
        snprintf(t->error, sizeof t->error, "transfer %llu (request %llu) canceled",
                 (unsigned long long)t->id, (unsigned long long)t->request_id);
}

/* Every request callback of a transfer starts with this. */
static void request_done(te_transfer *t)
{
    t->in_flight--;
    t->e->outstanding--;
    if (t->abandoned)
        t->e->abandoned--;
}

/* A send that completed went over connected lanes: the endpoint's wire-up
 * is over (unless a wire-up flush is in flight; its callback decides). */
static void note_connected(te_peer *p)
{
    if (p->wireup == TE_WIREUP_UNKNOWN)
        p->wireup = TE_WIREUP_DONE;
}

static void put_done(void *request, ucs_status_t status, void *user_data)
{
    te_transfer *t = user_data;
    request_done(t);
    t->completed++;
    if (status == UCS_OK)
        note_connected(t->peer);
    else
        set_failure(t, status == UCS_ERR_CANCELED ? TN_ERR_CANCELED : TN_ERR_PEER,
                    "put to peer %016llx failed: %s", (unsigned long long)t->peer->remote_id,
                    ucs_status_string(status));
    ucp_request_free(request);
}

static void flush_done(void *request, ucs_status_t status, void *user_data)
{
    te_transfer *t = user_data;
    request_done(t);
    if (status == UCS_OK) {
        t->flush_done = 1;
        t->peer->wireup = TE_WIREUP_DONE;
    } else
        set_failure(t, TN_ERR_PEER, "flushing puts to peer %016llx failed: %s",
                    (unsigned long long)t->peer->remote_id, ucs_status_string(status));
    ucp_request_free(request);
}

static void notice_sent(void *request, ucs_status_t status, void *user_data)
{
    te_transfer *t = user_data;
    request_done(t);
    if (status == UCS_OK) {
        t->notice_done = 1;
        note_connected(t->peer);
    } else
        set_failure(t, TN_ERR_PEER, "sending the completion notice to peer %016llx failed: %s",
                    (unsigned long long)t->peer->remote_id, ucs_status_string(status));
    ucp_request_free(request);
}

/* Common bookkeeping of a *_nbx call: 1 if a callback will follow. */
static int track(te_transfer *t, ucs_status_ptr_t sp, const char *what)
{
    ucs_status_t st;
    int started = te_request_started(sp, &st);
    if (started == 1) {
        t->in_flight++;
        t->e->outstanding++;
    } else if (started < 0) {
        set_failure(t, TN_ERR_PEER, "%s to peer %016llx failed: %s", what,
                    (unsigned long long)t->peer->remote_id, ucs_status_string(st));
    }
    return started;
}

/* One copy as a TE_AM_DATA message: the receiver's handler copies the
 * payload to the header's address (transfer_engine.c, on_data). Eager
 * only: a rendezvous would make the receiver answer the sender. */
static void post_data_message(te_transfer *t)
{
    const te_copy *c = &t->copies[t->posted];
    te_region *src = t->src[c->src_region];
    te_remote_region *dst = t->dst[c->dst_region];
    te_data_header *h = &t->headers[t->posted];
    h->sender_id = t->e->id;
    h->transfer_id = t->id;
    h->dst_addr = dst->addr + c->dst_offset;
    ucp_request_param_t prm = {0};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    prm.flags = UCP_AM_SEND_FLAG_EAGER;
    prm.cb.send = put_done;
    prm.user_data = t;
    prm.memory_type = src->type == TE_MEM_CUDA ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
    ucs_status_ptr_t sp = ucp_am_send_nbx(t->peer->ep, TE_AM_DATA, h, sizeof *h,
                                          (char *)src->addr + c->src_offset, c->length, &prm);
    t->posted++;
    if (track(t, sp, "data message") == 0) {
        t->completed++;
        note_connected(t->peer);
    }
}

static void post_put(te_transfer *t)
{
    if (t->over_messages) {
        post_data_message(t);
        return;
    }
    const te_copy *c = &t->copies[t->posted];
    te_region *src = t->src[c->src_region];
    te_remote_region *dst = t->dst[c->dst_region];
    ucp_request_param_t prm = {0};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_MEMORY_TYPE | UCP_OP_ATTR_FIELD_MEMH;
    prm.cb.send = put_done;
    prm.user_data = t;
    prm.memory_type = src->type == TE_MEM_CUDA ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
    prm.memh = src->memh;
    ucs_status_ptr_t sp = ucp_put_nbx(t->peer->ep, (char *)src->addr + c->src_offset, c->length,
                                      dst->addr + c->dst_offset, dst->rkey, &prm);
    t->posted++;
    if (track(t, sp, "put") == 0) {
        t->completed++;
        note_connected(t->peer);
    }
}

static void post_flush(te_transfer *t)
{
    ucp_request_param_t prm = {0};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    prm.cb.send = flush_done;
    prm.user_data = t;
    if (track(t, ucp_ep_flush_nbx(t->peer->ep, &prm), "flush") == 0)
        t->flush_done = 1;
}

static void post_notice(te_transfer *t)
{
    Tandem__Transfer__TransferNotice m = TANDEM__TRANSFER__TRANSFER_NOTICE__INIT;
    m.sender_id = t->e->id;
    m.transfer_id = t->id;
    m.request_id = t->request_id;
    /* Cancel only counts if it stopped puts from being posted. */
    t->notice_canceled = t->canceled && t->posted < t->n_copies;
    m.status = t->notice_canceled ? TANDEM__TRANSFER__NOTICE_STATUS__NOTICE_CANCELED
                                  : TANDEM__TRANSFER__NOTICE_STATUS__NOTICE_COMPLETE;
    m.bytes = t->bytes;
    m.copies = (uint32_t)t->n_copies;
    m.data_in_messages = t->over_messages;
    t->notice_len = tandem__transfer__transfer_notice__pack(&m, t->notice_buf);
    ucp_request_param_t prm = {0};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = UCP_AM_SEND_FLAG_EAGER;
    prm.cb.send = notice_sent;
    prm.user_data = t;
    ucs_status_ptr_t sp = ucp_am_send_nbx(t->peer->ep, TE_AM_NOTICE, t->notice_buf,
                                          t->notice_len, NULL, 0, &prm);
    if (track(t, sp, "notice") == 0) {
        t->notice_done = 1;
        note_connected(t->peer);
    }
}

static const char *phase_name(const te_transfer *t)
{
    switch (t->phase) {
    case TE_PHASE_PUT: return "while putting data";
    case TE_PHASE_FLUSH: return "while flushing puts";
    case TE_PHASE_NOTICE:
        return t->notice_done ? "waiting for the receiver's acknowledgement"
                              : "while sending the completion notice";
    default: return "";
    }
}

void te_transfer_advance(te_transfer *t, double now)
{
    if (t->status != TN_IN_PROGRESS)
        return;
    te_engine *e = t->e;
    te_peer *p = t->peer;
    int late = now >= t->deadline;
    if (p->status != TN_OK)
        set_failure(t, p->status == TN_ERR_TIMEOUT ? TN_ERR_TIMEOUT : TN_ERR_PEER,
                    "peer %016llx: %s", (unsigned long long)p->remote_id, p->error);
    if (late)
        set_failure(t, TN_ERR_TIMEOUT,
                    "transfer %llu (request %llu) to peer %016llx timed out after %d ms %s "
                    "(%zu/%zu copies done)",
                    (unsigned long long)t->id, (unsigned long long)t->request_id,
                    (unsigned long long)p->remote_id, t->timeout_ms, phase_name(t),
                    t->completed, t->n_copies);
    /* A failed transfer normally ends once its requests drain. Requests
     * that cannot drain (the peer stopped answering, or is gone) must be
     * taken back from UCX. */
    if (t->failure && t->in_flight > 0 && (late || p->status != TN_OK)) {
        if (p->ucx_failed) {
            /* UCX failed the endpoint: its force close (te_engine_progress)
             * completes the requests with UCS_ERR_CANCELED. */
        } else {
            /* The peer stopped answering but is not known dead (frozen,
             * stalled, or its wire-up never finished). Closing the endpoint
             * now aborts UCX 1.13 (te_peer_close_safe), and without peer
             * failure handling (shared-memory-only UCX_TLS) UCX cannot
             * close it at all: the transfer ends now, its requests are
             * abandoned to the endpoint, which closes once they complete
             * (the peer answers again) or fail (it dies), or at the
             * engine's destruction. Its source regions stay busy till then. */
            te_peer_mark_failed(p, TN_ERR_TIMEOUT, "stopped answering; %d requests of transfer "
                                "%llu are left to the endpoint until the peer answers or fails",
                                t->in_flight, (unsigned long long)t->id);
            t->abandoned = 1;
            e->abandoned += (size_t)t->in_flight;
            finish(t, t->failure);
            return;
        }
    }
    for (int guard = 0; guard < 4; guard++) {
        if (t->failure) {
            if (t->in_flight == 0)
                finish(t, t->failure);
            return;
        }
        int phase = t->phase;
        switch (t->phase) {
        case TE_PHASE_PUT:
            /* At most one window per round, even when puts complete at
             * once (tcp buffers them): posting then interleaves with
             * progress, the receiver and other transfers. */
            for (int n = 0; n < e->max_in_flight && !t->canceled && !t->failure &&
                            t->posted < t->n_copies && t->in_flight < e->max_in_flight; n++)
                post_put(t);
            if (!t->failure && (t->posted == t->n_copies || t->canceled) && t->in_flight == 0) {
                t->phase = TE_PHASE_FLUSH;
                post_flush(t);
            }
            break;
        case TE_PHASE_FLUSH:
            if (t->flush_done) {
                t->phase = TE_PHASE_NOTICE;
                post_notice(t);
            }
            break;
        case TE_PHASE_NOTICE:
            if (t->notice_done && t->acked)
                finish(t, t->notice_canceled ? TN_ERR_CANCELED : TN_OK);
            break;
        }
        if (t->phase == phase)
            break;
    }
}

void te_transfer_on_ack(te_engine *e, uint64_t transfer_id, int incomplete)
{
    for (te_transfer *t = e->transfers; t; t = t->next)
        if (t->id == transfer_id) {
            t->acked = 1;
            if (incomplete)
                set_failure(t, TN_ERR_PEER, "peer %016llx did not get every data message of "
                            "transfer %llu (request %llu)",
                            (unsigned long long)t->peer->remote_id, (unsigned long long)t->id,
                            (unsigned long long)t->request_id);
            return;
        }
    /* The transfer was released (timed out, canceled) before the ack came. */
}

/* Checks every copy before anything is posted: regions known and owned by
 * this engine/peer, bounds without overflow, no destination byte written
 * twice. */
static int validate(te_engine *e, const te_transfer_desc *d, uint64_t *bytes)
{
    for (size_t i = 0; i < d->n_src; i++) {
        te_region *r;
        for (r = e->regions; r && r != d->src[i]; r = r->next)
            ;
        if (!r)
            return te_fail(e, TN_ERR_REFUSED, "source region %zu is not registered with this engine", i);
    }
    for (size_t i = 0; i < d->n_dst; i++) {
        te_remote_region *r;
        for (r = d->peer->regions; r && r != d->dst[i]; r = r->next)
            ;
        if (!r)
            return te_fail(e, TN_ERR_REFUSED,
                           "destination region %zu was not imported from this peer", i);
    }
    uint64_t total = 0;
    for (size_t i = 0; i < d->n_copies; i++) {
        const te_copy *c = &d->copies[i];
        if (c->src_region >= d->n_src)
            return te_fail(e, TN_ERR_REFUSED, "copy %zu: source region %u is not registered "
                           "(%zu given)", i, c->src_region, d->n_src);
        if (c->dst_region >= d->n_dst)
            return te_fail(e, TN_ERR_REFUSED, "copy %zu: destination region %u is not registered "
                           "on the peer (%zu imported)", i, c->dst_region, d->n_dst);
        const te_region *s = d->src[c->src_region];
        const te_remote_region *r = d->dst[c->dst_region];
        if (c->length == 0)
            return te_fail(e, TN_ERR_REFUSED, "copy %zu has length 0", i);
        if (c->src_offset > s->len || c->length > s->len - c->src_offset)
            return te_fail(e, TN_ERR_REFUSED, "copy %zu: source bytes [%llu, +%llu) exceed "
                           "region %u of %zu bytes", i, (unsigned long long)c->src_offset,
                           (unsigned long long)c->length, c->src_region, s->len);
        if (c->dst_offset > r->len || c->length > r->len - c->dst_offset)
            return te_fail(e, TN_ERR_REFUSED, "copy %zu: destination bytes [%llu, +%llu) exceed "
                           "the peer's region %u of %llu bytes", i,
                           (unsigned long long)c->dst_offset, (unsigned long long)c->length,
                           c->dst_region, (unsigned long long)r->len);
        total += c->length;
    }
    *bytes = total;
    return TN_OK;
}

static int dst_order(const void *pa, const void *pb)
{
    const te_copy *a = pa, *b = pb;
    if (a->dst_region != b->dst_region)
        return a->dst_region < b->dst_region ? -1 : 1;
    if (a->dst_offset != b->dst_offset)
        return a->dst_offset < b->dst_offset ? -1 : 1;
    return 0;
}

/* Two copies writing the same destination bytes would race on the wire:
 * the result would depend on arrival order. A plan never does this, so it
 * means the caller's copy list is corrupt. */
static int check_overlap(te_engine *e, const te_copy *copies, size_t n)
{
    if (n < 2)
        return TN_OK;
    te_copy *sorted = malloc(n * sizeof *sorted);
    if (!sorted)
        return te_fail(e, TN_ERR_NOMEM, "out of memory checking %zu copies", n);
    memcpy(sorted, copies, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, dst_order);
    int rc = TN_OK;
    for (size_t i = 1; i < n && rc == TN_OK; i++)
        if (sorted[i].dst_region == sorted[i - 1].dst_region &&
            sorted[i - 1].dst_offset + sorted[i - 1].length > sorted[i].dst_offset)
            rc = te_fail(e, TN_ERR_REFUSED, "two copies write destination region %u bytes "
                         "[%llu, %llu)", sorted[i].dst_region,
                         (unsigned long long)sorted[i].dst_offset,
                         (unsigned long long)(sorted[i - 1].dst_offset + sorted[i - 1].length));
    free(sorted);
    return rc;
}

/* te_data_path for this transfer: data messages only into host memory
 * (the receiver's handler copies with memcpy). */
static int choose_data_path(te_engine *e, const te_transfer_desc *d, int *over_messages)
{
    int device = 0;
    for (size_t i = 0; i < d->n_dst; i++)
        device |= d->dst[i]->type == TE_MEM_CUDA;
    switch (e->data_path) {
    case TE_DATA_PUTS:
        *over_messages = 0;
        return TN_OK;
    case TE_DATA_MESSAGES:
        if (device)
            return te_fail(e, TN_ERR_UNSUPPORTED, "data messages cannot write into the peer's "
                           "CUDA memory (te_data_path TE_DATA_MESSAGES)");
        *over_messages = 1;
        return TN_OK;
    default:
        *over_messages = d->peer->puts_emulated && !device;
        return TN_OK;
    }
}

int te_transfer_submit(te_engine *e, const te_transfer_desc *d, te_transfer **out)
{
    if (!e || !out)
        return TN_ERR_ARG;
    *out = NULL;
    if (!d || !d->peer)
        return te_fail(e, TN_ERR_ARG, "transfer has no peer");
    if (d->timeout_ms <= 0)
        return te_fail(e, TN_ERR_ARG, "transfer timeout %d ms: must be > 0", d->timeout_ms);
    if ((d->n_copies && !d->copies) || (d->n_src && !d->src) || (d->n_dst && !d->dst))
        return te_fail(e, TN_ERR_ARG, "transfer arrays are NULL");
    te_peer *p;
    for (p = e->peers; p && p != d->peer; p = p->next)
        ;
    if (!p)
        return te_fail(e, TN_ERR_ARG, "peer is not connected to this engine");
    if (p->status != TN_OK || !p->ep)
        return te_fail(e, TN_ERR_PEER, "peer %016llx is unusable: %s",
                       (unsigned long long)p->remote_id, p->error);
    uint64_t bytes = 0;
    int over_messages = 0;
    int rc = validate(e, d, &bytes);
    if (rc == TN_OK)
        rc = check_overlap(e, d->copies, d->n_copies);
    if (rc == TN_OK)
        rc = choose_data_path(e, d, &over_messages);
    if (rc != TN_OK)
        return rc;

    te_transfer *t = calloc(1, sizeof *t);
    if (!t)
        return te_fail(e, TN_ERR_NOMEM, "out of memory for a transfer");
    t->copies = malloc((d->n_copies ? d->n_copies : 1) * sizeof *t->copies);
    t->src = malloc((d->n_src ? d->n_src : 1) * sizeof *t->src);
    t->dst = malloc((d->n_dst ? d->n_dst : 1) * sizeof *t->dst);
    if (over_messages)
        t->headers = malloc((d->n_copies ? d->n_copies : 1) * sizeof *t->headers);
    if (!t->copies || !t->src || !t->dst || (over_messages && !t->headers)) {
        free(t->copies);
        free(t->src);
        free(t->dst);
        free(t->headers);
        free(t);
        return te_fail(e, TN_ERR_NOMEM, "out of memory for %zu copies", d->n_copies);
    }
    if (d->n_copies)
        memcpy(t->copies, d->copies, d->n_copies * sizeof *t->copies);
    if (d->n_src)
        memcpy(t->src, d->src, d->n_src * sizeof *t->src);
    if (d->n_dst)
        memcpy(t->dst, d->dst, d->n_dst * sizeof *t->dst);
    t->e = e;
    t->peer = p;
    t->id = e->next_transfer_id++;
    t->request_id = d->request_id;
    t->n_copies = d->n_copies;
    t->over_messages = over_messages;
    t->n_src = d->n_src;
    t->n_dst = d->n_dst;
    t->bytes = bytes;
    t->status = TN_IN_PROGRESS;
    t->phase = TE_PHASE_PUT;
    t->timeout_ms = d->timeout_ms;
    t->deadline = te_now_seconds() + d->timeout_ms / 1000.0;
    for (size_t i = 0; i < t->n_src; i++)
        t->src[i]->users++;
    for (size_t i = 0; i < t->n_dst; i++)
        t->dst[i]->users++;
    p->users++;
    t->next = e->transfers;
    if (e->transfers)
        e->transfers->prev = t;
    e->transfers = t;
    te_transfer_advance(t, te_now_seconds());
    *out = t;
    return TN_OK;
}

int te_transfer_status(const te_transfer *t) { return t->status; }
const char *te_transfer_error(const te_transfer *t) { return t->error; }
uint64_t te_transfer_request_id(const te_transfer *t) { return t->request_id; }
uint64_t te_transfer_bytes(const te_transfer *t) { return t->bytes; }

void te_transfer_counts(const te_transfer *t, size_t *posted, size_t *completed)
{
    if (posted)
        *posted = t->posted;
    if (completed)
        *completed = t->completed;
}

size_t te_transfer_n_copies(const te_transfer *t) { return t->n_copies; }
int te_transfer_over_messages(const te_transfer *t) { return t->over_messages; }

const char *te_transfer_nic(const te_transfer *t) { return t->peer->transports; }

int te_transfer_cancel(te_engine *e, te_transfer *t)
{
    if (!e || !t)
        return TN_ERR_ARG;
    if (t->status == TN_IN_PROGRESS)
        t->canceled = 1;
    te_transfer_advance(t, te_now_seconds());
    return TN_OK;
}

int te_transfer_wait(te_engine *e, te_transfer *t)
{
    int idle = 0;
    while (t->status == TN_IN_PROGRESS) {
        if (te_engine_progress(e))
            idle = 0;
        if (t->status != TN_IN_PROGRESS)
            break;
        te_idle_backoff(&idle);
    }
    return t->status;
}

/* Gives back the peer and its regions the transfer held. */
static void drop_peer(te_transfer *t)
{
    if (t->peer_dropped)
        return;
    t->peer_dropped = 1;
    for (size_t i = 0; i < t->n_dst; i++)
        t->dst[i]->users--;
    t->peer->users--;
}

void te_transfer_free(te_engine *e, te_transfer *t)
{
    if (t->prev)
        t->prev->next = t->next;
    else
        e->transfers = t->next;
    if (t->next)
        t->next->prev = t->prev;
    drop_peer(t);
    for (size_t i = 0; i < t->n_src; i++)
        t->src[i]->users--;
    free(t->copies);
    free(t->src);
    free(t->dst);
    free(t->headers);
    free(t);
}

void te_transfer_sweep(te_engine *e)
{
    te_transfer *next;
    for (te_transfer *t = e->transfers; t; t = next) {
        next = t->next;
        if (t->released && t->in_flight == 0)
            te_transfer_free(e, t);
    }
}

void te_transfer_release(te_engine *e, te_transfer *t)
{
    if (!e || !t)
        return;
    if (t->status == TN_IN_PROGRESS) {
        te_transfer_cancel(e, t);
        te_transfer_wait(e, t); /* ends by the transfer's deadline at the latest */
    }
    t->released = 1;
    /* An abandoned transfer still has requests UCX may call back about (and
     * read the source of): its memory stays, and its source regions stay
     * busy, until they complete or the engine is destroyed. The peer no
     * longer counts it, so the peer can be closed (detached). */
    drop_peer(t);
    if (t->in_flight == 0)
        te_transfer_free(e, t);
}
