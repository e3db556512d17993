/* The ranks of one multi-rank worker (a TP prefiller replica, a DP+EP
 * decoder group): how they were started (engine/comm_launch.h), the world
 * communicator between them and the layout's groups (engine/parallel.h).
 * Executables call rank_group_start first thing in main, before any thread
 * exists, and rank_group_finish last. */
#ifndef TANDEM_ENGINE_RANK_GROUP_H
#define TANDEM_ENGINE_RANK_GROUP_H
#include <stddef.h>
#include "engine/comm.h"
#include "engine/comm_launch.h"
#include "engine/parallel.h"

typedef struct rank_group {
    comm_launch L;
    int forked;        /* the ranks were forked by rank 0 (else orchestrated) */
    int rank, size;
    comm *world;       /* NULL for a single rank */
    tm_groups groups;
} rank_group;

/* Starts rank `rank` of `world` meeting on `name` when world > 0 (an
 * orchestrator started every rank), else forks tp * dp - 1 ranks named after
 * prefix. Then joins the world communicator and builds the layout's groups.
 * A layout of one rank does neither. On failure returns a negative status
 * with the reason in err (forked children are reaped). */
int rank_group_start(rank_group *g, int tp, int ep, int dp, int rank, int world,
                     const char *name, const char *prefix, int timeout_ms,
                     char *err, size_t errlen);

/* Leaves the group. Rank 0 of a forked group then waits for its children
 * (up to timeout_ms) and returns a non-zero status if one failed (reason
 * in err), else `status`. Other ranks return `status`. */
int rank_group_finish(rank_group *g, int status, int timeout_ms, char *err, size_t errlen);

#endif
