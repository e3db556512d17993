/* Receiver of data messages (TE_AM_DATA): the payload is copied into the
 * registered host region its header names, and counted per transfer so
 * that the transfer's notice can be checked against what arrived.
 *
 * Why messages and not UCX puts on tcp: UCX 1.13 emulates a put there
 * with an active message whose handler (ucp_put_handler) answers the
 * sender with a completion message, and aborts this process when that
 * answer fails because the sender has just died (ucp_request.inl:
 * "Fatal: unexpected error: Endpoint timeout"). A data message needs no
 * answer, so a prefiller SIGKILLed mid-push cannot take its decoder down. */
#include <stdlib.h>
#include <string.h>
#include "transfer/transfer_internal.h"

/* The host region that holds [addr, addr + len) entirely, or NULL. */
static te_region *host_region_holding(te_engine *e, uint64_t addr, size_t len)
{
    for (te_region *r = e->regions; r; r = r->next) {
        uint64_t base = (uint64_t)(uintptr_t)r->addr;
        if (r->type == TE_MEM_HOST && addr >= base && len <= r->len &&
            addr - base <= r->len - len)
            return r;
    }
    return NULL;
}

static te_receipt *find_receipt(te_engine *e, uint64_t sender_id, uint64_t transfer_id)
{
    for (size_t i = 0; i < e->n_receipts; i++)
        if (e->receipts[i].sender_id == sender_id && e->receipts[i].transfer_id == transfer_id)
            return &e->receipts[i];
    return NULL;
}

static void count_receipt(te_engine *e, const te_data_header *h, size_t len)
{
    te_receipt *r = find_receipt(e, h->sender_id, h->transfer_id);
    if (!r) {
        if (e->n_receipts == e->cap_receipts) {
            size_t cap = e->cap_receipts ? e->cap_receipts * 2 : 16;
            te_receipt *p = realloc(e->receipts, cap * sizeof *p);
            if (!p) {
                /* Not counted: the notice then finds bytes missing and the
                 * transfer fails instead of passing unchecked. */
                te_log(e, "out of memory counting the data of transfer %llu",
                       (unsigned long long)h->transfer_id);
                return;
            }
            e->receipts = p;
            e->cap_receipts = cap;
        }
        r = &e->receipts[e->n_receipts++];
        *r = (te_receipt){h->sender_id, h->transfer_id, 0, te_now_seconds()};
    }
    r->bytes += len;
}

ucs_status_t te_on_data(void *arg, const void *header, size_t header_length, void *data,
                        size_t length, const ucp_am_recv_param_t *param)
{
    te_engine *e = arg;
    te_data_header h;
    if (header_length != sizeof h) {
        te_log(e, "dropped a data message with a %zu-byte header (want %zu)", header_length,
               sizeof h);
        return UCS_OK;
    }
    memcpy(&h, header, sizeof h);
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        /* Senders force eager; a rendezvous would need our answer. */
        te_log(e, "dropped a rendezvous data message of transfer %llu from engine %016llx",
               (unsigned long long)h.transfer_id, (unsigned long long)h.sender_id);
        ucp_am_data_release(e->worker, data);
        return UCS_OK;
    }
    if (!host_region_holding(e, h.dst_addr, length)) {
        te_log(e, "dropped %zu bytes of transfer %llu from engine %016llx for address %#llx: "
               "no registered host region holds them", length,
               (unsigned long long)h.transfer_id, (unsigned long long)h.sender_id,
               (unsigned long long)h.dst_addr);
        return UCS_OK;
    }
    memcpy((void *)(uintptr_t)h.dst_addr, data, length);
    count_receipt(e, &h, length);
    return UCS_OK;
}

uint64_t te_receipt_take(te_engine *e, uint64_t sender_id, uint64_t transfer_id)
{
    te_receipt *r = find_receipt(e, sender_id, transfer_id);
    if (!r)
        return 0;
    uint64_t bytes = r->bytes;
    *r = e->receipts[--e->n_receipts];
    return bytes;
}

void te_receipts_prune(te_engine *e, double now)
{
    for (size_t i = 0; i < e->n_receipts;) {
        if (now - e->receipts[i].first_seen > TE_ACK_RETRY_S)
            e->receipts[i] = e->receipts[--e->n_receipts];
        else
            i++;
    }
}
