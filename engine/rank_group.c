#include "engine/rank_group.h"
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "engine/device.h"
#include "engine/rendezvous.h"
#include "common/status.h"

static int rendezvous_mode(const rank_group *g)
{
    return g->leader[0] != '\0';
}

int rank_group_start(rank_group *g, const rank_group_spec *spec, char *err, size_t errlen)
{
    memset(g, 0, sizeof(*g));
    g->spec = *spec;
    snprintf(g->leader, sizeof(g->leader), "%s", spec->leader ? spec->leader : "");
    snprintf(g->name, sizeof(g->name), "%s", spec->name ? spec->name : "");
    g->spec.leader = g->leader;
    g->spec.name = g->name;
    const int tp = spec->tp, ep = spec->ep, dp = spec->dp, world = spec->world;
    g->size = tp * dp;
    if (tp < 1 || dp < 1 || ep < 1 || g->size > COMM_MAX_WORLD)
        return tn_fail(err, errlen, TN_ERR_ARG, "tp, ep and dp must be >= 1 and tp x dp at "
                       "most %d", COMM_MAX_WORLD);
    const int local = spec->local_ranks > 0 ? spec->local_ranks : 1;
    if (rendezvous_mode(g)) {
        if (world != g->size || spec->rank < 0 || spec->rank + local > world || g->size < 2)
            return tn_fail(err, errlen, TN_ERR_ARG, "--rank %d --world %d --local-ranks %d "
                           "do not fit the layout of %d ranks (a group leader needs --world "
                           "= the layout's size, at least 2, and ranks inside it)", spec->rank,
                           world, local, g->size);
        if (local > 1) {
            int rc = comm_launch_fork(&g->L, local, spec->prefix, err, errlen);
            if (rc)
                return rc;
            g->forked = 1;
        } else {
            g->L.world = 1;
        }
        g->local_rank = g->L.rank;
        g->rank = spec->rank + g->L.rank;
        return TN_OK;   /* the rendezvous needs the device: rank_group_layout */
    }
    if (spec->local_ranks > 1)
        return tn_fail(err, errlen, TN_ERR_ARG, "--local-ranks needs --group-leader");
    if (world > 0) {
        if (world != g->size || spec->rank < 0 || spec->rank >= world || !g->name[0])
            return tn_fail(err, errlen, TN_ERR_ARG, "--world %d / --rank %d do not fit the "
                           "layout of %d ranks (and --comm-name is required)", world,
                           spec->rank, g->size);
        g->L.rank = spec->rank;
        g->L.world = world;
        snprintf(g->L.name, sizeof(g->L.name), "%s", g->name);
    } else if (g->size > 1) {
        int rc = comm_launch_fork(&g->L, g->size, spec->prefix, err, errlen);
        if (rc)
            return rc;
        g->forked = 1;
    } else {
        g->L.world = 1;
    }
    g->rank = g->L.rank;
    g->local_rank = g->L.rank;
    if (g->size == 1)
        return TN_OK;
    comm_options o = {.timeout_ms = spec->timeout_ms};
    int rc = comm_host_init(&g->world, g->L.name, g->L.rank, g->L.world, &o, err, errlen);
    if (rc) {
        char ignored[8];
        rank_group_finish(g, 1, 1000, ignored, sizeof(ignored));
    }
    return rc;
}

/* Rendezvous mode: meet rank 0 over TCP, then build what it decided. */
static int layout_rendezvous(rank_group *g, const kn_backend *be, char *err, size_t errlen)
{
    rdv_hello me = {
        .rank = g->rank, .world = g->size, .tp = g->spec.tp, .ep = g->spec.ep,
        .dp = g->spec.dp, .backend = (int)be->kind, .want = (int)g->spec.comm,
    };
    if (gethostname(me.host, sizeof(me.host) - 1) != 0)
        snprintf(me.host, sizeof(me.host), "?");
    int rc = tm_device_id(be, me.device, err, errlen);
    if (rc)
        return rc;
    rdv_result res;
    rc = rdv_run(g->leader, &me, g->spec.join_timeout_ms > 0 ? g->spec.join_timeout_ms
                                                             : COMM_DEFAULT_TIMEOUT_MS,
                 &res, err, errlen);
    if (rc)
        return rc;
    g->comm_kind = (rank_comm_kind)res.kind;
    comm_options o = {.timeout_ms = g->spec.timeout_ms};
    if (res.same_host) {
        rc = comm_host_init(&g->world, res.comm_name, g->rank, g->size, &o, err, errlen);
        if (rc)
            return rc;
        if (g->comm_kind == RANK_COMM_NCCL)
            return comm_nccl_init_id(&g->model, res.nccl_id, g->rank, g->size, be, err,
                                     errlen);
        comm *dup = NULL;
        rc = comm_split(g->world, 0, g->rank, &dup);
        if (rc)
            return tn_fail(err, errlen, rc, "duplicating the host communicator: %s",
                           comm_error(g->world));
        if (g->comm_kind == RANK_COMM_HOST) {
            g->model = dup;
            return TN_OK;
        }
        return comm_staged_init(&g->model, dup, be, err, errlen);
    }
    /* ranks on several machines share no memory: NCCL carries the model's
     * collectives, and (staged into device buffers) the control messages */
    rc = comm_nccl_init_id(&g->model, res.nccl_id, g->rank, g->size, be, err, errlen);
    if (rc)
        return rc;
    comm *ctl = NULL;
    rc = comm_split(g->model, 0, g->rank, &ctl);
    if (rc)
        return tn_fail(err, errlen, rc, "the control communicator over NCCL: %s",
                       comm_error(g->model));
    return comm_staged_init(&g->world, ctl, be, err, errlen);
}

int rank_group_layout(rank_group *g, const kn_backend *be, char *err, size_t errlen)
{
    if (g->size == 1)
        return TN_OK;
    int rc = rendezvous_mode(g)
                 ? layout_rendezvous(g, be, err, errlen)
                 : rank_comm_open(g->world, be, g->spec.comm, &g->model, &g->comm_kind, err,
                                  errlen);
    if (!rc && g->spec.timeout_ms > 0)
        rc = comm_set_timeout(g->model, g->spec.timeout_ms);
    if (!rc)
        rc = tm_groups_init(&g->groups, g->model, g->spec.tp, g->spec.ep, g->spec.dp, err,
                            errlen);
    return rc;
}

int rank_group_finish(rank_group *g, int status, int timeout_ms, char *err, size_t errlen)
{
    tm_groups_free(&g->groups);
    comm_free(g->world);
    g->world = NULL;
    comm_free(g->model);
    g->model = NULL;
    if (g->forked && g->L.rank == 0 &&
        comm_launch_wait(&g->L, timeout_ms, err, errlen) != 0 && status == 0)
        status = 1;
    g->forked = 0;
    return status;
}
