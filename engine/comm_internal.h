/* The communicator object shared by comm.c (the public entry points) and the
 * implementations (comm_host.c, comm_nccl.c). Each implementation fills an
 * ops table; comm.c checks arguments once and dispatches. */
#ifndef TANDEM_ENGINE_COMM_INTERNAL_H
#define TANDEM_ENGINE_COMM_INTERNAL_H
#include <stddef.h>
#include "engine/comm.h"

typedef struct comm_ops {
    int (*split)(comm *parent, int color, int key, comm **out);
    int (*all_reduce_sum)(comm *c, float *buf, size_t n);
    int (*all_gather)(comm *c, const void *send, void *recv, size_t bytes);
    int (*all_to_all_v)(comm *c, const void *send, const size_t *send_bytes,
                        void *recv, const size_t *recv_bytes);
    int (*broadcast)(comm *c, void *buf, size_t bytes, int root);
    int (*barrier)(comm *c);
    int (*set_timeout)(comm *c, int timeout_ms);
    void (*abort)(comm *c, const char *why);
    int (*poll_peers)(comm *c);
    /* The group-wide failure reason when the group has failed, else NULL. */
    const char *(*group_error)(const comm *c);
    void (*destroy)(comm *c);
} comm_ops;

/* The ops table of an implementation whose functions are all named
 * <prefix>_<op>: `static const comm_ops host_ops = COMM_OPS(host);`. */
#define COMM_OPS(prefix)                                                        \
    {                                                                           \
        .split = prefix##_split, .all_reduce_sum = prefix##_all_reduce_sum,     \
        .all_gather = prefix##_all_gather, .all_to_all_v = prefix##_all_to_all_v, \
        .broadcast = prefix##_broadcast, .barrier = prefix##_barrier,           \
        .set_timeout = prefix##_set_timeout, .abort = prefix##_abort,           \
        .poll_peers = prefix##_poll_peers, .group_error = prefix##_group_error, \
        .destroy = prefix##_destroy,                                            \
    }

struct comm {
    const comm_ops *ops;
    int rank, size;
    kn_backend_kind memory;
    char err[320];     /* this rank's last failure */
    comm_stats stats;  /* completed collectives (comm.c counts them) */
    void *impl;
};

/* snprintf into c->err. */
void comm_set_error(comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
