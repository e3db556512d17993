/* The ranks of one multi-rank worker (a TP prefiller replica, a DP+EP
 * decoder group): how they were started (engine/comm_launch.h), the control
 * communicator between them, the model's communicator in the backend's
 * memory (engine/rank_comm.h) and the layout's groups split from it
 * (engine/parallel.h). Three ways to start:
 *
 *   forked        one process given the group size forks the other ranks;
 *   orchestrated  --rank R --world W --comm-name NAME: one process per rank,
 *                 on one machine (shared memory);
 *   rendezvous    --rank R --world W --group-leader HOST:PORT [--local-ranks
 *                 L]: each process runs ranks R..R+L-1 (forking L - 1) and
 *                 every rank meets rank 0 over TCP (engine/rendezvous.h),
 *                 possibly from other machines (pods).
 *
 * Executables call rank_group_start first thing in main, before any thread
 * exists; rank_group_layout once the rank's device is open (the choice of
 * communicator reads the GPU's UUID), before the model is loaded; and
 * rank_group_finish last. */
#ifndef TANDEM_ENGINE_RANK_GROUP_H
#define TANDEM_ENGINE_RANK_GROUP_H
#include <stddef.h>
#include "engine/comm.h"
#include "engine/comm_launch.h"
#include "engine/parallel.h"
#include "engine/rank_comm.h"

typedef struct rank_group_spec {
    int tp, ep, dp;
    int rank, world;         /* orchestrated / rendezvous: this process's first rank;
                                world 0 = fork the whole group here */
    const char *name;        /* orchestrated: the shared-memory rendezvous name */
    const char *leader;      /* rendezvous: rank 0's HOST:PORT ("" or NULL = none) */
    int local_ranks;         /* rendezvous: ranks this process runs (0 = 1) */
    const char *prefix;      /* forked: the group name's prefix */
    int timeout_ms;          /* longest wait for a peer inside a collective */
    int join_timeout_ms;     /* rendezvous: longest wait for the whole group */
    rank_comm_kind comm;     /* the model's communicator (auto: by device) */
} rank_group_spec;

typedef struct rank_group {
    comm_launch L;
    int forked;        /* this process forked ranks (it is their parent) */
    int rank, size;
    int local_rank;    /* rank among this process's ranks: picks the default GPU */
    rank_group_spec spec;
    char leader[256], name[COMM_NAME_MAX + 1];
    comm *world;       /* control, host memory; NULL for a single rank */
    comm *model;       /* the model's collectives, in the backend's memory; owned */
    rank_comm_kind comm_kind;  /* what the model's communicator is */
    tm_groups groups;
} rank_group;

/* Starts this process's ranks (forks) and, except in rendezvous mode,
 * joins the control communicator. A layout of one rank does neither. On
 * failure returns a negative status with the reason in err (forked children
 * are reaped). */
int rank_group_start(rank_group *g, const rank_group_spec *spec, char *err, size_t errlen);

/* With the rank's device open on be: the rendezvous (if any), the control
 * communicator, the model's communicator and the layout's groups
 * (g->groups.par is what tm_model_load_parallel takes). Collective over the
 * group. A layout of one rank does nothing. */
int rank_group_layout(rank_group *g, const kn_backend *be, char *err, size_t errlen);

/* Leaves the group. A process that forked ranks then waits for its
 * children (up to timeout_ms) and returns a non-zero status if one failed
 * (reason in err), else `status`. Other ranks return `status`. */
int rank_group_finish(rank_group *g, int status, int timeout_ms, char *err, size_t errlen);

#endif
