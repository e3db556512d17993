#include "engine/rank_group.h"
#include <stdio.h>
#include <string.h>
#include "common/status.h"

int rank_group_start(rank_group *g, int tp, int ep, int dp, int rank, int world,
                     const char *name, const char *prefix, int timeout_ms,
                     char *err, size_t errlen)
{
    memset(g, 0, sizeof(*g));
    g->size = tp * dp;
    if (tp < 1 || dp < 1 || ep < 1 || g->size > COMM_MAX_WORLD) {
        snprintf(err, errlen, "tp, ep and dp must be >= 1 and tp x dp at most %d",
                 COMM_MAX_WORLD);
        return TN_ERR_ARG;
    }
    if (world > 0) {
        if (world != g->size || rank < 0 || rank >= world || !name || !name[0]) {
            snprintf(err, errlen, "--world %d / --rank %d do not fit the layout of %d ranks "
                     "(and --comm-name is required)", world, rank, g->size);
            return TN_ERR_ARG;
        }
        g->L.rank = rank;
        g->L.world = world;
        snprintf(g->L.name, sizeof(g->L.name), "%s", name);
    } else if (g->size > 1) {
        int rc = comm_launch_fork(&g->L, g->size, prefix, err, errlen);
        if (rc)
            return rc;
        g->forked = 1;
    } else {
        g->L.world = 1;
    }
    g->rank = g->L.rank;
    if (g->size == 1)
        return TN_OK;
    comm_options o = {.timeout_ms = timeout_ms};
    int rc = comm_host_init(&g->world, g->L.name, g->L.rank, g->L.world, &o, err, errlen);
    if (!rc)
        rc = tm_groups_init(&g->groups, g->world, tp, ep, dp, err, errlen);
    if (rc) {
        char ignored[8];
        rank_group_finish(g, 1, 1000, ignored, sizeof(ignored));
        return rc;
    }
    return TN_OK;
}

int rank_group_finish(rank_group *g, int status, int timeout_ms, char *err, size_t errlen)
{
    tm_groups_free(&g->groups);
    comm_free(g->world);
    g->world = NULL;
    if (g->forked && g->L.rank == 0 &&
        comm_launch_wait(&g->L, timeout_ms, err, errlen) != 0 && status == 0)
        status = 1;
    g->forked = 0;
    return status;
}
