/* Communicators: the collectives that tensor, expert and data parallelism
 * need between the ranks of one prefiller replica or one decoder group.
 *
 * A communicator is a group of `size` ranks; every member calls the same
 * collectives in the same order with matching sizes (a mismatch is detected
 * and fails the group instead of corrupting data). Sub-groups (the TP group,
 * the EP group, the DP group) come from comm_split on a parent group.
 *
 * Two implementations share this API:
 *   host  (comm_host.c)  processes on one machine through a POSIX
 *                        shared-memory segment; buffers are host memory.
 *   NCCL  (comm_nccl.c)  GPUs; buffers are device memory on the backend's
 *                        stream. Built only with TANDEM_NCCL.
 * and a third wraps either in the other kind of memory:
 *   staged (comm_staged.c) device buffers over a host communicator (ranks
 *                        that share one GPU), or host buffers over NCCL.
 * comm_memory says which kind of buffer a communicator takes.
 *
 * Failure: a rank that dies (any signal, SIGKILL included), leaves (calls
 * comm_free while others still expect it), or does not arrive within the
 * group's timeout fails the whole group: every blocked or later collective on
 * every rank returns TN_ERR_PEER, and comm_error says which rank and why.
 * Nothing blocks forever. A failed group stays failed; free it. */
#ifndef TANDEM_ENGINE_COMM_H
#define TANDEM_ENGINE_COMM_H
#include <stddef.h>
#include "kernels/backend.h"

#define COMM_MAX_WORLD 64
#define COMM_NAME_MAX 48

typedef struct comm comm;

typedef struct comm_options {
    int timeout_ms;     /* longest wait for a peer inside one collective or
                           at start-up; 0 = COMM_DEFAULT_TIMEOUT_MS */
    size_t slot_bytes;  /* host: per-rank staging slot; larger messages go in
                           chunks; 0 = COMM_DEFAULT_SLOT_BYTES */
    int max_groups;     /* host: sub-groups the segment can hold, the world
                           included; 0 = COMM_DEFAULT_MAX_GROUPS */
} comm_options;

#define COMM_DEFAULT_TIMEOUT_MS 60000
#define COMM_DEFAULT_SLOT_BYTES (256u * 1024u)
#define COMM_DEFAULT_MAX_GROUPS 8

/* Joins rank `rank` of a host group of `world` processes that rendezvous on
 * `name` (letters, digits, '-', '_', '.'; at most COMM_NAME_MAX chars). Rank
 * 0 creates the shared segment /dev/shm/tandem-comm-NAME (replacing a stale
 * one), the others open it; the call returns once all `world` ranks have
 * joined, and the name is then unlinked, so a later crash leaks nothing.
 * Must be called from the thread that will outlive the communicator (its
 * liveness is tied to that thread). opt may be NULL. On failure returns a
 * negative status with the reason in err and *out NULL. */
int comm_host_init(comm **out, const char *name, int rank, int world,
                   const comm_options *opt, char *err, size_t errlen);

/* NCCL communicator over the same ranks as `bootstrap` (a host
 * communicator, used to share the NCCL unique id; NULL for a group of one),
 * running on `be`'s CUDA device and stream. Collective over bootstrap.
 * TN_ERR_UNSUPPORTED in builds without TANDEM_NCCL. */
int comm_nccl_init(comm **out, comm *bootstrap, const kn_backend *be,
                   char *err, size_t errlen);

/* The same, for ranks that share no host communicator (a group spanning
 * pods): rank 0 makes the id with comm_nccl_unique_id and hands it to the
 * others itself (engine/rendezvous.h). Collective over the size ranks. */
#define COMM_NCCL_ID_BYTES 128
int comm_nccl_unique_id(unsigned char id[COMM_NCCL_ID_BYTES], char *err, size_t errlen);
int comm_nccl_init_id(comm **out, const unsigned char id[COMM_NCCL_ID_BYTES], int rank,
                      int size, const kn_backend *be, char *err, size_t errlen);

/* Staged communicator (comm_staged.c): the collectives of one kind of
 * memory carried by `inner`, a communicator of the other kind, through a
 * staging buffer and synchronous copies on `be`'s stream:
 *   inner host, be CUDA    device buffers (ranks sharing one GPU, where
 *                          NCCL refuses duplicate devices);
 *   inner device (NCCL)    host buffers (control messages of a group that
 *                          has no shared memory, e.g. across pods);
 *   inner host, be CPU     host buffers, both copies memmoves (the CPU
 *                          tests of the staging protocol).
 * Failure semantics are inner's. Takes ownership of inner, also on failure;
 * be must outlive the communicator and its splits. */
int comm_staged_init(comm **out, comm *inner, const kn_backend *be, char *err,
                     size_t errlen);

int comm_rank(const comm *c);
int comm_size(const comm *c);
/* KN_BACKEND_CPU: buffers are host memory; KN_BACKEND_CUDA: device memory. */
kn_backend_kind comm_memory(const comm *c);

/* Collective over parent: members passing the same color form one new group,
 * ranked by (key, parent rank). color < 0 joins no group (*out = NULL). */
int comm_split(comm *parent, int color, int key, comm **out);

/* buf[0..n) = elementwise sum over the ranks, in place. Every rank receives
 * bitwise the same result (replicated activations must stay identical). */
int comm_all_reduce_sum(comm *c, float *buf, size_t n);
/* recv[r * bytes ..] = rank r's send, for every rank r (recv holds
 * size * bytes). */
int comm_all_gather(comm *c, const void *send, void *recv, size_t bytes);
/* Sends send_bytes[p] bytes to every peer p (send holds those runs back to
 * back in peer order) and receives recv_bytes[p] from each (recv likewise).
 * recv_bytes[p] must equal what p sends here: a mismatch fails the group.
 * Counts may be zero (a rank with nothing to send still joins). */
int comm_all_to_all_v(comm *c, const void *send, const size_t *send_bytes,
                      void *recv, const size_t *recv_bytes);
/* Copies root's buf to every rank's buf. */
int comm_broadcast(comm *c, void *buf, size_t bytes, int root);
/* Returns when every member has arrived. */
int comm_barrier(comm *c);

/* How long this rank waits for peers in later collectives on c; 0 means no
 * limit, for a rank that waits for work (a dead or departed peer still ends
 * the wait at once). */
int comm_set_timeout(comm *c, int timeout_ms);

/* Checks without blocking that every member is still in the group:
 * TN_OK, or TN_ERR_PEER (comm_error says who died or left) once a member is
 * gone or the group failed. For a rank that is not inside a collective
 * (rank 0 of a prefiller waiting for the router) and must still notice. */
int comm_poll_peers(comm *c);

/* Fails the group on purpose: a rank that cannot go on (a local error in the
 * middle of a step the others are running) calls this so that its peers get
 * TN_ERR_PEER with "rank R aborted: why" at once instead of waiting for the
 * timeout. */
void comm_abort(comm *c, const char *why);

/* Collectives this rank completed on c (successful calls through this
 * API, whatever the implementation), by kind, and the bytes of each: the
 * buffer for all-reduce, all-gather and broadcast, the sum of what it sent
 * for all-to-all-v. Tests use them to prove which collectives of a layout
 * ran through which communicator. */
typedef enum comm_op {
    COMM_OP_ALL_REDUCE_SUM = 0,
    COMM_OP_ALL_GATHER,
    COMM_OP_ALL_TO_ALL_V,
    COMM_OP_BROADCAST,
    COMM_OP_BARRIER,
    COMM_OP_COUNT
} comm_op;

typedef struct comm_stats {
    unsigned long long calls[COMM_OP_COUNT];
    unsigned long long bytes[COMM_OP_COUNT];
} comm_stats;

/* A copy of c's counters (zeros for NULL). */
void comm_get_stats(const comm *c, comm_stats *out);

/* Why the last failed call on c (or its group) failed; "" if none did. */
const char *comm_error(const comm *c);
/* Leaves the group. Not collective: peers still waiting for this rank get
 * TN_ERR_PEER ("left"). Free sub-groups before their parent. NULL is fine. */
void comm_free(comm *c);

#endif
