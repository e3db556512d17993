/* KV-cache level of the TransferEngine: registers a rank's K/V pools,
 * describes them to peers in protobuf (PeerHello / KvRequest of
 * proto/transfer.proto), and sends a request's pages to a receiver rank
 * with the resharding plan of transfer_plan.h.
 *
 * Regions are numbered layer * 2 + 0 for K and layer * 2 + 1 for V, on both
 * sides, so a plan copy expands to the same offsets in each pool pair. */
#ifndef TANDEM_TRANSFER_KV_H
#define TANDEM_TRANSFER_KV_H
#include <stddef.h>
#include <stdint.h>
#include "proto/transfer.pb-c.h"
#include "transfer/transfer.h"
#include "transfer/transfer_plan.h"

typedef struct te_kv_layout {
    int tp, rank;          /* this rank's place in its side's TP group */
    int n_layers;
    int n_kv_heads;        /* model total */
    int head_dim, elem_bytes;
    int page_size, n_pages;
} te_kv_layout;

/* This rank's pools, registered. */
typedef struct te_kv_local {
    te_kv_layout layout;
    te_region **regions;   /* [2 * n_layers] */
    int n_regions;
} te_kv_local;

/* A peer rank's pools, imported from its hello. */
typedef struct te_kv_remote {
    te_kv_layout layout;
    uint64_t engine_id;
    te_peer *peer;
    te_remote_region **regions; /* [2 * n_layers], by region id */
    int n_regions;
} te_kv_remote;

/* Checks the layout (sharding valid, sizes positive) and returns the bytes of
 * one pool of one layer, or 0 with a message in err. */
size_t te_kv_pool_bytes(const te_kv_layout *l, char *err, size_t err_len);

/* Registers k_pools[layer] and v_pools[layer], each te_kv_pool_bytes long. */
int te_kv_register(te_engine *e, const te_kv_layout *l, void *const *k_pools,
                   void *const *v_pools, te_mem_type type, te_kv_local *out);
void te_kv_deregister(te_engine *e, te_kv_local *kv);

/* Packs a ControlMessage{hello} describing this engine and its pools into a
 * malloc'ed buffer. */
int te_kv_hello_pack(te_engine *e, const te_kv_local *kv, uint8_t **buf, size_t *len);
/* Packs a ControlMessage{kv_request}: the receiver's pages of one request. */
int te_kv_request_pack(uint64_t request_id, int n_tokens, const int32_t *pages, int n_pages,
                       uint8_t **buf, size_t *len);
/* Decodes a control message; NULL when malformed (free with
 * tandem__transfer__control_message__free_unpacked(msg, NULL)). */
Tandem__Transfer__ControlMessage *te_control_unpack(const uint8_t *buf, size_t len);

/* Connects to the engine of a hello and imports its pools' regions. */
int te_kv_connect(te_engine *e, const Tandem__Transfer__PeerHello *hello, te_kv_remote *out);
/* Closes the peer (TN_ERR_BUSY while a transfer to it is unreleased). */
int te_kv_disconnect(te_engine *e, te_kv_remote *r);

/* Sends this rank's share of request `request_id` (its first n_tokens
 * tokens, held in src_pages) into the receiver rank's dst_pages: plans the
 * resharding between the two layouts, expands it over every layer's K and V
 * pool and submits one transfer. A sender rank with nothing to send for this
 * receiver (replicated heads served by another replica) still submits an
 * empty transfer, so the receiver gets one notice from every sender rank. */
int te_kv_send(te_engine *e, const te_kv_local *src, const int32_t *src_pages,
               const te_kv_remote *dst, const int32_t *dst_pages, int n_tokens,
               uint64_t request_id, int timeout_ms, te_transfer **out);

#endif
