/* One-shot rendezvous over ZeroMQ (the control plane) for a KV transfer:
 *
 *   receiver (ROUTER, bound)              sender rank (DEALER)
 *        <------------- ControlMessage{hello}   (engine, worker address, pools)
 *   connects a peer back (for acks)
 *        ------------> ControlMessage{hello}    (its engine and pools)
 *        ------------> ControlMessage{kv_request} (request id, tokens, pages)
 *   sender connects, te_kv_send, waits for the ack
 *
 * The receiver waits for every sender rank's hello before answering any,
 * so it knows all of them when the notices arrive. All calls are bounded
 * by a timeout and say what they were waiting for when it expires. */
#ifndef TANDEM_TRANSFER_SESSION_H
#define TANDEM_TRANSFER_SESSION_H
#include <stddef.h>
#include <stdint.h>
#include "transfer/transfer_kv.h"

/* What a sender learns from the receiver. */
typedef struct te_session_offer {
    te_kv_remote remote;      /* connected receiver rank */
    uint64_t request_id;
    int n_tokens;
    int32_t *pages;           /* receiver's page table, malloc'ed */
    int n_pages;
} te_session_offer;

/* Sender: hello -> receiver at `endpoint`, then its hello and request.
 * `zmq_ctx` is the caller's ZeroMQ context. */
int te_session_connect(void *zmq_ctx, const char *endpoint, te_engine *e,
                       const te_kv_local *kv, int timeout_ms, te_session_offer *out,
                       char *err, size_t err_len);
/* Disconnects the receiver peer and frees the page table. */
void te_session_offer_free(te_engine *e, te_session_offer *o);

/* Receiver: binds a ROUTER on tcp://127.0.0.1 with an ephemeral port;
 * *socket and the endpoint string (for the senders) are returned. */
int te_session_bind(void *zmq_ctx, void **socket, char *endpoint, size_t endpoint_len,
                    char *err, size_t err_len);
/* Receiver: collects n_senders hellos, connects a peer to each (senders[i],
 * in arrival order), then answers each with this side's hello and request. */
int te_session_accept(void *socket, te_engine *e, const te_kv_local *kv, int n_senders,
                      uint64_t request_id, int n_tokens, const int32_t *pages, int n_pages,
                      int timeout_ms, te_kv_remote *senders, char *err, size_t err_len);

#endif
