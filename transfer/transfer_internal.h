/* Private structures of the TransferEngine, shared by transfer_engine.c,
 * transfer_region.c and transfer_xfer.c. Not for users of transfer.h. */
#ifndef TANDEM_TRANSFER_INTERNAL_H
#define TANDEM_TRANSFER_INTERNAL_H
#include <ucp/api/ucp.h>
#include "transfer/transfer.h"

/* Active message ids of the notice/ack protocol, and of data sent as
 * messages instead of puts (te_transfer.over_messages). */
enum { TE_AM_NOTICE = 0x7e1, TE_AM_ACK = 0x7e2, TE_AM_DATA = 0x7e3 };

/* The header of a TE_AM_DATA message: where its payload goes in the
 * receiver's registered memory, and the transfer it counts towards. */
typedef struct te_data_header {
    uint64_t sender_id, transfer_id, dst_addr;
} te_data_header;

/* Bytes of data messages a receiver got for one transfer, until its
 * notice arrives (or TE_ACK_RETRY_S passed: the sender is gone). */
typedef struct te_receipt {
    uint64_t sender_id, transfer_id, bytes;
    double first_seen;
} te_receipt;

struct te_region {
    te_region *next;
    void *addr;
    size_t len;
    te_mem_type type;
    ucp_mem_h memh;
    void *rkey_buf;     /* packed lazily by te_region_rkey */
    size_t rkey_len;
    int users;          /* unreleased transfers reading from it */
};

struct te_remote_region {
    te_remote_region *next;
    te_peer *peer;
    uint64_t addr, len;
    te_mem_type type;
    ucp_rkey_h rkey;
    int users;          /* unreleased transfers writing into it */
};

struct te_peer {
    te_peer *next;
    te_engine *e;
    ucp_ep_h ep;              /* NULL once closed */
    void *close_req;          /* in-flight ucp_ep_close_nbx */
    int close_done;
    uint64_t remote_id;
    int status;               /* TN_OK or why the peer is unusable */
    char error[256];
    te_remote_region *regions;
    int users;                /* unreleased transfers */
    int detects_failure;      /* endpoint has UCP_ERR_HANDLING_MODE_PEER */
    int detached;             /* closed by the user, left to te_engine_destroy */
    int acks_in_flight;       /* TransferAcks sent to it and not yet completed */
    int wireup;               /* TE_WIREUP_*: has a flush to it completed? */
    int wireup_failures;      /* wire-up flushes that ended with an error */
    int ucx_failed;           /* UCX reported the endpoint failed (error callback) */
    int close_deferred_logged; /* the "left open" line was written */
    int puts_emulated;        /* no lane does RMA: UCX would emulate puts with AMs */
    char transports[160];
};

/* A flush that completes proves the endpoint's wire-up is over. */
enum te_wireup { TE_WIREUP_UNKNOWN = 0, TE_WIREUP_FLUSHING = 1, TE_WIREUP_DONE = 2 };

enum te_phase { TE_PHASE_PUT, TE_PHASE_FLUSH, TE_PHASE_NOTICE, TE_PHASE_DONE };

struct te_transfer {
    te_transfer *next, *prev; /* engine's list of unreleased transfers */
    te_engine *e;
    te_peer *peer;
    uint64_t id, request_id;
    te_copy *copies;
    size_t n_copies, posted, completed;
    te_region **src;
    size_t n_src;
    te_remote_region **dst;
    size_t n_dst;
    uint64_t bytes;
    int phase;
    int in_flight;            /* UCX requests of this transfer not completed */
    int flush_done, notice_done, acked;
    int canceled, notice_canceled;
    int failure;              /* error to report once in_flight drains */
    int abandoned;            /* ended with requests UCX cannot give back */
    int released;             /* te_transfer_release called; freed once in_flight is 0 */
    int peer_dropped;         /* no longer counted in peer->users */
    int over_messages;        /* data goes as TE_AM_DATA messages, not puts */
    te_data_header *headers;  /* over_messages: one per copy, alive until it is sent */
    int status;               /* TN_IN_PROGRESS until final */
    char error[256];
    double deadline;          /* monotonic seconds */
    int timeout_ms;
    uint8_t notice_buf[128];  /* must outlive the AM send */
    size_t notice_len;
};

/* An ack waiting to be sent. One whose sender has no usable endpoint (it
 * failed: the sender thought us dead while we were frozen, or restarted)
 * waits for the owner to connect a fresh one (te_peer_connect) and is sent
 * on it, for at most TE_ACK_RETRY_S after the notice arrived. */
typedef struct te_pending_ack {
    uint64_t sender_id, transfer_id;
    int incomplete;           /* data messages of the transfer are missing */
    double first_tried;       /* te_now_seconds() of the first attempt; 0 before it */
    int logged;               /* "waiting for a new endpoint" was logged */
} te_pending_ack;

/* How long an ack waits for a usable endpoint to its sender: longer than
 * any sender's transfer timeout is useless (the sender gave up by then). */
#define TE_ACK_RETRY_S 60.0

struct te_engine {
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_address_t *address;
    size_t address_len;
    uint64_t id;
    char name[32];
    FILE *log;
    int max_in_flight;
    size_t max_am_header;
    int peer_failure_mode;    /* create endpoints with UCP_ERR_HANDLING_MODE_PEER */
    int same_host_shm;        /* te_engine_config.same_host_shm */
    int tls_allows_shm;       /* UCX_TLS may include a shared-memory transport */
    char host_key[128];       /* te_engine_host_key */
    char nic[96];
    te_region *regions;
    te_peer *peers;
    te_transfer *transfers;
    uint64_t next_transfer_id;
    size_t outstanding;
    size_t abandoned;         /* outstanding requests of abandoned transfers */
    te_notice *notices;       /* FIFO */
    size_t n_notices, cap_notices;
    te_pending_ack *acks;
    size_t n_acks, cap_acks;
    te_receipt *receipts;
    size_t n_receipts, cap_receipts;
    int data_path;            /* te_data_path */
    int event_fd;             /* ucp_worker_get_efd (UCP_FEATURE_WAKEUP), or -1 */
    char error[256];
};

/* Removes node from the singly linked list of TYPEs at *head (linked
 * through next); nothing when it is not there. */
#define TE_LIST_UNLINK(type, head, node)                         \
    do {                                                         \
        for (type **pp_ = (head); *pp_; pp_ = &(*pp_)->next)     \
            if (*pp_ == (node)) {                                \
                *pp_ = (node)->next;                             \
                break;                                           \
            }                                                    \
    } while (0)

/* Records the engine's last error and returns status. */
int te_fail(te_engine *e, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void te_log(te_engine *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Peers (transfer_region.c). */
void te_peer_mark_failed(te_peer *p, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Starts closing the endpoint: by force where the endpoint has peer failure
 * handling (UCX completes its requests with UCS_ERR_CANCELED), else with a
 * flush. A failed endpoint without failure handling cannot be closed (UCX
 * refuses FORCE for it and a flush would never end): it is left to
 * ucp_worker_destroy. */
void te_peer_start_close(te_engine *e, te_peer *p);
/* Whether ucp_ep_close_nbx may run on the endpoint now. UCX 1.13 aborts
 * (ucp_request.c:684, ucp_request_send_state_ff: "got REP message") when a
 * close, or ucp_worker_destroy, purges a tcp lane that still queues
 * wire-up messages, which it does while the peer has not answered the
 * connection set-up (a frozen or stalled peer keeps it so indefinitely);
 * a close during wire-up can also abort the *remote* process (wireup_ep.c:
 * "pending_count == 0"); and a peer that stops answering while our puts
 * are in flight aborts when it runs again and answers puts of an endpoint
 * we force-closed (ucp_put_handler: "unexpected error"). So a live endpoint
 * is closed only once a flush (or a completed send) proved its wire-up
 * over and nothing of ours is in flight on it; one that UCX failed (the
 * peer died) must be force-closed and always may. */
int te_peer_close_safe(const te_engine *e, const te_peer *p);
/* Posts a flush that completes once the endpoint's wire-up is over (no
 * waiting); nothing when one is in flight or done. */
void te_peer_wireup_flush(te_engine *e, te_peer *p);
/* Closes peers that were left open (failed, timed out or closed by the user
 * while unsafe to close) as soon as te_peer_close_safe allows. */
void te_peers_close_pending(te_engine *e);
void te_peer_free(te_engine *e, te_peer *p);
te_peer *te_peer_find(te_engine *e, uint64_t remote_id);
void te_region_free(te_engine *e, te_region *r);

/* Shared-memory domain (transfer_host.c). */
/* Writes this process's host key ("" when /proc does not tell). */
void te_host_key_fill(char *key, size_t len);
/* Whether a UCX_TLS value (NULL: UCX's default) may include shared memory. */
int te_tls_allows_shm(const char *tls);

/* Transfers (transfer_xfer.c). */
void te_transfer_advance(te_transfer *t, double now);
/* The receiver acknowledged the transfer; `incomplete`: it found data
 * messages of it missing, and the transfer fails. */
void te_transfer_on_ack(te_engine *e, uint64_t transfer_id, int incomplete);
void te_transfer_free(te_engine *e, te_transfer *t);
/* Frees released transfers whose last request has completed. */
void te_transfer_sweep(te_engine *e);

/* Data messages (transfer_data.c). */
ucs_status_t te_on_data(void *arg, const void *header, size_t header_length, void *data,
                        size_t length, const ucp_am_recv_param_t *param);
/* Bytes of data messages received for the transfer; forgets it. */
uint64_t te_receipt_take(te_engine *e, uint64_t sender_id, uint64_t transfer_id);
/* Forgets counts older than TE_ACK_RETRY_S (their sender is gone). */
void te_receipts_prune(te_engine *e, double now);

/* Classifies a ucs_status_ptr_t from a *_nbx call: 0 done now, 1 in flight
 * (the callback will run), -1 failed (status in *st). */
int te_request_started(ucs_status_ptr_t sp, ucs_status_t *st);

#endif
