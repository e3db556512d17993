/* TransferEngine: moves registered memory (a request's KV cache pages) from
 * one process to another with one-sided UCX puts where the transport does
 * RMA (verbs, shared memory), and as active messages where UCX would only
 * emulate puts with them (tcp): see te_data_path.
 *
 * An engine owns one UCX context and worker and is driven by its owner's
 * thread: every call below is non-blocking except the *_wait helpers, and
 * nothing happens unless te_engine_progress (or a wait) runs. Not thread
 * safe; use one engine per thread.
 *
 * A transfer's life on the sender: submit (every copy is checked against
 * the registered regions first, so a bad copy is refused before any byte
 * moves) -> puts, at most max_puts_in_flight outstanding -> endpoint flush
 * (the puts are now in the receiver's memory) -> a TransferNotice active
 * message telling the receiver which request is complete -> the receiver's
 * TransferAck -> done. The receiver sees the notice via te_engine_next_notice
 * and the engine answers it with the ack by itself; both sides must have
 * connected a peer to each other (te_peer_connect) for that.
 *
 * Failures end a transfer with a status and a one-line message
 * (te_transfer_error): the peer's connection failing, the per-transfer
 * timeout (the peer becomes unusable; requests still in flight are left to
 * its endpoint, see te_engine_abandoned), cancellation. See docs/TRANSFER.md.
 *
 * UCX 1.13 aborts the process when an endpoint is closed while its
 * connection set-up (wire-up) waits for the peer, so the engine never does
 * that (an endpoint is left open until its wire-up finished or it failed),
 * and callers should let a new peer's wire-up finish (te_peer_wireup_start,
 * te_peer_wireup_status) before submitting transfers to it. */
#ifndef TANDEM_TRANSFER_H
#define TANDEM_TRANSFER_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "common/status.h"

/* Every call returns a tn_status (common/status.h): TN_OK, TN_IN_PROGRESS
 * for a transfer not finished yet, or a negative error. */

/* Monotonic clock in seconds (what deadlines are measured with). */
double te_now_seconds(void);
/* For callers' own progress loops: call after a round that found nothing to
 * do (reset *idle to 0 after one that did). Spins a little, then sleeps in
 * short steps so an idle process leaves the CPU to its peer. */
void te_idle_backoff(int *idle);

typedef enum te_mem_type { TE_MEM_HOST = 0, TE_MEM_CUDA = 1 } te_mem_type;

typedef struct te_engine te_engine;
typedef struct te_region te_region;               /* local registered memory */
typedef struct te_peer te_peer;                   /* endpoint to another engine */
typedef struct te_remote_region te_remote_region; /* a peer's region, imported */
typedef struct te_transfer te_transfer;

/* How a transfer's data travels.
 * TE_DATA_AUTO: puts where the endpoint has an RMA lane (verbs, shared
 *   memory), else data messages. UCX 1.13 emulates puts over tcp with
 *   active messages whose receiver answers each put with a completion
 *   message, and aborts the receiving process ("Fatal: unexpected error",
 *   ucp_put_handler) when that answer cannot be sent because the sender
 *   just died. Data messages (TE_AM_DATA: a header naming the destination
 *   address, the bytes as payload, copied into the registered region by
 *   the receiver's own handler) need no answer, so a sender that dies
 *   mid-transfer cannot take the receiver down. Destinations in CUDA
 *   memory keep puts (the receiver's handler copies host memory only).
 * TE_DATA_PUTS / TE_DATA_MESSAGES force one way (tests). */
typedef enum te_data_path { TE_DATA_AUTO = 0, TE_DATA_PUTS = 1, TE_DATA_MESSAGES = 2 } te_data_path;

typedef struct te_engine_config {
    const char *name;          /* prefix of log lines; NULL: "transfer" */
    const char *tls;           /* UCX_TLS for this engine; NULL keeps the environment's */
    const char *net_devices;   /* UCX_NET_DEVICES; NULL: environment, else the NIC chosen
                                  by te_nic_select, else UCX's own choice */
    const char *near_pci_path; /* sysfs path of the GPU the memory lives on (NIC affinity) */
    int numa_node;             /* preferred NIC NUMA node, -1 any */
    int max_puts_in_flight;    /* puts or data messages per transfer; 0: 64 */
    te_data_path data_path;    /* of this engine's transfers (sender side) */
    /* 1: te_kv_connect gives a peer in this engine's shared-memory domain
     * (same boot, IPC and PID namespaces: te_engine_host_key) an endpoint
     * without UCX peer-failure handling, so UCX may move its data over
     * shared memory (sysv/posix, cma) when UCX_TLS allows it; other peers
     * keep the transports UCX_TLS gives with failure handling (verbs, tcp).
     * UCX 1.13 offers shared memory only to endpoints without failure
     * handling, so such a peer's death is noticed by the transfer timeout
     * or te_peer_fail, never by UCX. 0 (default): one mode for all peers. */
    int same_host_shm;
    FILE *log;                 /* NULL: stderr */
} te_engine_config;

/* Fills the defaults (all NULL, numa_node -1, max_puts_in_flight 0). */
void te_engine_config_default(te_engine_config *cfg);

/* Creates the UCX context and worker, discovers RDMA NICs (one log line
 * saying which one is used, or that UCX chooses). On failure returns a
 * status and writes a message into err. */
int te_engine_create(const te_engine_config *cfg, te_engine **out, char *err, size_t err_len);
/* Cancels and force-closes whatever is still open, frees everything. */
void te_engine_destroy(te_engine *e);

uint64_t te_engine_id(const te_engine *e);                 /* random, per engine */
const char *te_engine_nic(const te_engine *e);             /* "mlx5_0:1" or "ucx-default" */
const char *te_engine_error(const te_engine *e);           /* last error message */
/* 1 when this process's UCX can register and move CUDA device memory (its
 * CUDA transports are loaded: cuda_copy, cuda_ipc, GPUDirect RDMA), else 0.
 * Without it, device memory must be staged through host buffers. */
int te_engine_cuda_memory(const te_engine *e);
/* This engine's shared-memory domain: "BOOT_ID/ipc:[N]/pid:[N]" from /proc,
 * "" when any part is unreadable (then no peer counts as same-host). */
const char *te_engine_host_key(const te_engine *e);
/* Whether te_kv_connect would give a peer with this host key a
 * shared-memory endpoint (same_host_shm, equal non-empty keys, and a
 * UCX_TLS that may include shared-memory transports). */
int te_engine_peer_is_same_host(const te_engine *e, const char *host_key);
/* The worker address peers connect to; valid until te_engine_destroy. */
void te_engine_address(const te_engine *e, const void **addr, size_t *len);
/* Runs UCX progress and advances every transfer. Returns the number of UCX
 * events handled (0 when idle). */
int te_engine_progress(te_engine *e);
/* Before sleeping in poll(2)/zmq_poll on other descriptors: drains UCX and
 * arms its event descriptor (ucp_worker_arm), so whatever arrives next
 * (KV data, a notice, an ack) makes *fd readable and ends the sleep at
 * once instead of at the sleep's timeout. Returns 1 when UCX has events
 * pending (do not sleep: progress again), 0 when sleeping is safe; *fd is
 * then the descriptor to add to the poll set, or -1 when the engine has
 * none (UCX refused the wakeup feature: sleep on the timeout only). */
int te_engine_arm(te_engine *e, int *fd);
/* UCX requests still in flight (puts, flushes, notices, acks, closes). */
size_t te_engine_outstanding(const te_engine *e);
/* Of those, requests of timed-out transfers left to their endpoint: the
 * peer stopped answering, and its endpoint cannot be closed safely while
 * they are in flight (or at all over shared memory). They complete when the
 * peer answers again, fail when UCX reports it dead, or are released by
 * te_engine_destroy; the source regions they read stay busy till then. */
size_t te_engine_abandoned(const te_engine *e);

/* --- memory regions ----------------------------------------------------- */

/* Registers [addr, addr + len) for remote writes. CUDA memory needs a build
 * with TANDEM_CUDA (UCS_MEMORY_TYPE_CUDA); otherwise TN_ERR_UNSUPPORTED. */
int te_region_register(te_engine *e, void *addr, size_t len, te_mem_type type,
                       te_region **out);
/* TN_ERR_BUSY while an unreleased transfer uses it. */
int te_region_deregister(te_engine *e, te_region *r);
/* The packed remote key peers need (ucp_rkey_pack); owned by the region. */
int te_region_rkey(te_engine *e, te_region *r, const void **rkey, size_t *len);
void *te_region_addr(const te_region *r);
size_t te_region_len(const te_region *r);
te_mem_type te_region_type(const te_region *r);

/* --- peers ---------------------------------------------------------------- */

/* Creates an endpoint to the engine at `addr` (its te_engine_address) whose
 * te_engine_id is remote_id. Endpoint failures (peer died, connection reset)
 * are reported through te_peer_status and fail the peer's transfers. */
int te_peer_connect(te_engine *e, const void *addr, size_t len, uint64_t remote_id,
                    te_peer **out);
/* te_peer_connect for a peer in this engine's shared-memory domain: the
 * endpoint has no UCX peer-failure handling, so UCX may choose its
 * shared-memory transports; the peer's failure is then noticed only by
 * transfer timeouts and te_peer_fail (te_peer_detects_failure is 0). */
int te_peer_connect_same_host(te_engine *e, const void *addr, size_t len, uint64_t remote_id,
                              te_peer **out);
/* TN_OK while usable, otherwise why not (te_peer_error has the message). */
int te_peer_status(const te_peer *p);
const char *te_peer_error(const te_peer *p);
uint64_t te_peer_remote_id(const te_peer *p);
/* 1 when UCX reports this peer's failure (UCP_ERR_HANDLING_MODE_PEER: tcp,
 * verbs); 0 for shared-memory-only UCX_TLS, where only timeouts tell. */
int te_peer_detects_failure(const te_peer *p);
/* The UCX transports/devices the endpoint's data lanes use, e.g.
 * "tcp/lo" or "rc_mlx5/mlx5_0:1" (what the transfer really goes through). */
const char *te_peer_transports(const te_peer *p);
/* 1 when UCX has no RMA lane to the peer (tcp): puts would be emulated
 * with active messages, so TE_DATA_AUTO sends data messages. */
int te_peer_puts_emulated(const te_peer *p);
/* Makes a peer's region writable: remote address, length, memory type and
 * packed rkey as received in its RegionDescriptor. The object is owned by
 * the peer. */
int te_peer_import_region(te_engine *e, te_peer *p, uint64_t remote_addr, uint64_t len,
                          te_mem_type type, const void *rkey, size_t rkey_len,
                          te_remote_region **out);
uint64_t te_remote_region_len(const te_remote_region *r);
/* Closes the endpoint and frees the imported regions. TN_ERR_BUSY while an
 * unreleased transfer uses the peer (the peer stays open then). An endpoint
 * whose wire-up does not finish within 1 s (a frozen peer) or that still has
 * requests in flight is left open and closed by te_engine_progress once
 * that is safe (or released by te_engine_destroy); the peer object must not
 * be used after this call either way. */
int te_peer_close(te_engine *e, te_peer *p);
/* The owner knows the peer is gone or not answering (the router dropped
 * it, or it restarted): the peer becomes unusable with `why`, and its
 * transfers end now (TN_ERR_PEER) instead of at their timeouts; requests
 * of theirs still in flight are left to the endpoint (te_engine_abandoned),
 * which closes once that is safe. Connect a new peer to talk to the same
 * engine again. */
void te_peer_fail(te_engine *e, te_peer *p, const char *why);
/* Starts finishing the endpoint's connection set-up (UCX wire-up) in the
 * background: a flush that completes once the peer has answered. Does not
 * wait; te_engine_progress moves it. TN_ERR_PEER for an unusable peer. */
int te_peer_wireup_start(te_engine *e, te_peer *p);
/* TN_OK once the wire-up finished (always for shared-memory-only UCX_TLS),
 * TN_IN_PROGRESS while it runs or was not started (or its flush failed:
 * see te_peer_wireup_failures, start again), else the peer's error. */
int te_peer_wireup_status(const te_peer *p);
/* Wire-up flushes of this peer that ended with an error. */
int te_peer_wireup_failures(const te_peer *p);
/* te_peer_wireup_start, then progresses the engine until the wire-up
 * finished (TN_OK), the peer failed, or timeout_ms passed (TN_ERR_TIMEOUT);
 * a failed flush is posted again. */
int te_peer_wireup_wait(te_engine *e, te_peer *p, int timeout_ms);

/* --- transfers ------------------------------------------------------------ */

/* One contiguous copy: src[src_region] + src_offset -> dst[dst_region] +
 * dst_offset, length bytes. Indices refer to the arrays of te_transfer_desc. */
typedef struct te_copy {
    uint32_t src_region, dst_region;
    uint64_t src_offset, dst_offset, length;
} te_copy;

typedef struct te_transfer_desc {
    te_peer *peer;
    uint64_t request_id;               /* echoed in the receiver's notice */
    te_region *const *src;             /* local regions, indexed by te_copy.src_region */
    size_t n_src;
    te_remote_region *const *dst;      /* the peer's regions, indexed by dst_region */
    size_t n_dst;
    const te_copy *copies;             /* copied by submit; may be empty */
    size_t n_copies;
    int timeout_ms;                    /* > 0: from submit to the receiver's ack */
} te_transfer_desc;

/* Validates every copy (regions registered/imported for this peer, bounds,
 * no two copies writing the same destination bytes) and starts the puts.
 * On TN_ERR_REFUSED / TN_ERR_ARG nothing was sent and *out is NULL; the
 * message is in te_engine_error. */
int te_transfer_submit(te_engine *e, const te_transfer_desc *d, te_transfer **out);
/* TN_IN_PROGRESS, TN_OK, or the failure status. */
int te_transfer_status(const te_transfer *t);
const char *te_transfer_error(const te_transfer *t);
uint64_t te_transfer_request_id(const te_transfer *t);
uint64_t te_transfer_bytes(const te_transfer *t);
/* Copies whose puts were posted / completed locally so far. */
void te_transfer_counts(const te_transfer *t, size_t *posted, size_t *completed);
/* The NIC / transports the transfer uses ("ucx-default" NIC: UCX chose). */
const char *te_transfer_nic(const te_transfer *t);
/* Stops posting puts; already posted ones drain, the endpoint is flushed and
 * the receiver gets a CANCELED notice (so it knows no more writes follow).
 * The transfer then ends with TN_ERR_CANCELED. */
int te_transfer_cancel(te_engine *e, te_transfer *t);
/* Progresses until the transfer is finished; returns its status. Bounded by
 * the transfer's timeout. */
int te_transfer_wait(te_engine *e, te_transfer *t);
/* Frees a transfer; an unfinished one is canceled and waited for first. */
void te_transfer_release(te_engine *e, te_transfer *t);

/* Copies of the transfer in total. */
size_t te_transfer_n_copies(const te_transfer *t);
/* 1 when the transfer's data goes as messages, 0 as puts (te_data_path). */
int te_transfer_over_messages(const te_transfer *t);

/* --- receiver side -------------------------------------------------------- */

typedef struct te_notice {
    uint64_t sender_id;   /* te_engine_id of the sender */
    uint64_t request_id;
    int status;           /* TN_OK: all bytes landed; TN_ERR_CANCELED: partial, no more writes
                             (the sender canceled, or data messages of it never arrived) */
    uint64_t bytes;
    uint32_t copies;
} te_notice;

/* Acks of received notices from engine sender_id not sent yet (its peer has
 * no usable endpoint): the owner reconnects to it while this is non-zero. */
size_t te_engine_acks_waiting(const te_engine *e, uint64_t sender_id);

/* Pops the oldest received notice: 1 when one was returned, 0 when none. */
int te_engine_next_notice(te_engine *e, te_notice *out);
/* Progresses until a notice arrives (1) or timeout_ms passes (0). */
int te_engine_wait_notice(te_engine *e, te_notice *out, int timeout_ms);

#endif
