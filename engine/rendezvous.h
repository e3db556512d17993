/* The TCP rendezvous of a rank group whose ranks share no memory (a decoder
 * group spanning pods: deploy/, port 8092 of the headless service).
 *
 * Rank 0 (the leader) listens on the port; every other rank connects to
 * it (retrying while the leader is not up yet or its name does not resolve)
 * and says who it is: rank, world, layout, backend, requested communicator,
 * host name and device id. Once all world - 1 ranks have joined, the leader
 * checks that they agree, chooses the model's communicator from every
 * rank's device (engine/rank_comm.h), and publishes the result to all of
 * them: the choice, whether every rank is on one machine (then the host
 * communicator's name to meet on), and for NCCL the unique id it made. A
 * missing rank, a late leader or a disagreement ends the rendezvous on
 * every rank with the same clear message; nothing waits past the timeout.
 *
 * The wire format is fixed-size frames of big-endian 32-bit fields and
 * NUL-padded strings, magic "TNRV" and a version, so a stray client or a
 * different build is refused, not misread. */
#ifndef TANDEM_ENGINE_RENDEZVOUS_H
#define TANDEM_ENGINE_RENDEZVOUS_H
#include <stddef.h>
#include "engine/comm.h"
#include "engine/device.h"
#include "engine/rank_comm.h"

#define RDV_HOST_MAX 64
#define RDV_DEFAULT_PORT 8092

typedef struct rdv_hello {
    int rank, world;
    int tp, ep, dp;
    int backend;                     /* kn_backend_kind */
    int want;                        /* rank_comm_kind asked for */
    char host[RDV_HOST_MAX];         /* gethostname(): one machine = shared memory */
    char device[TM_DEVICE_ID_MAX];   /* tm_device_id */
} rdv_hello;

typedef struct rdv_result {
    int kind;                        /* rank_comm_kind chosen */
    int same_host;                   /* every rank on one machine */
    char comm_name[COMM_NAME_MAX + 1]; /* host communicator to join when same_host */
    unsigned char nccl_id[COMM_NCCL_ID_BYTES]; /* kind nccl */
} rdv_result;

/* Splits "HOST:PORT" (or "HOST", port RDV_DEFAULT_PORT). 0, or -1 when
 * malformed. */
int rdv_parse_address(const char *addr, char *host, size_t host_len, int *port);

/* Runs this rank's side. leader is "HOST:PORT"; rank 0 listens on PORT (on
 * HOST when it is a numeric address, else on every interface). timeout_ms
 * bounds the whole rendezvous. Returns 0 with *out filled, or a negative
 * status with the reason in err (the leader's reason on every rank when it
 * refused the group). */
int rdv_run(const char *leader, const rdv_hello *me, int timeout_ms, rdv_result *out,
            char *err, size_t errlen);

#endif
