#include "engine/rank_comm.h"
#include <stdio.h>
#include <string.h>
#include "common/status.h"

static const char *const NAMES[] = {"auto", "host", "nccl", "staged"};

int rank_comm_parse(const char *s, rank_comm_kind *out)
{
    for (int k = 0; s && k < (int)(sizeof NAMES / sizeof *NAMES); k++)
        if (strcmp(s, NAMES[k]) == 0) {
            *out = (rank_comm_kind)k;
            return 0;
        }
    return -1;
}

const char *rank_comm_name(rank_comm_kind k)
{
    return (int)k >= 0 && (int)k < (int)(sizeof NAMES / sizeof *NAMES) ? NAMES[k] : "?";
}

/* The first pair of ranks on one device, or 0 when all differ. */
static int shared_device(const char (*ids)[TM_DEVICE_ID_MAX], int n, int *a, int *b)
{
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (strncmp(ids[i], ids[j], TM_DEVICE_ID_MAX) == 0) {
                *a = i;
                *b = j;
                return 1;
            }
    return 0;
}

int rank_comm_choose(kn_backend_kind kind, rank_comm_kind want,
                     const char (*ids)[TM_DEVICE_ID_MAX], int n, int same_host,
                     rank_comm_kind *out, char *err, size_t errlen)
{
    int a = 0, b = 0;
    const int shared = kind == KN_BACKEND_CUDA && shared_device(ids, n, &a, &b);
    if (kind == KN_BACKEND_CPU) {
        if (want == RANK_COMM_NCCL)
            return tn_fail(err, errlen, TN_ERR_ARG, "the nccl rank communicator needs "
                           "--device cuda (the CPU backend uses host or staged)");
        *out = want == RANK_COMM_STAGED ? RANK_COMM_STAGED : RANK_COMM_HOST;
    } else if (want == RANK_COMM_HOST) {
        return tn_fail(err, errlen, TN_ERR_ARG, "the host rank communicator cannot take "
                       "GPU buffers (use auto, nccl or staged)");
    } else if (want == RANK_COMM_NCCL && shared) {
        return tn_fail(err, errlen, TN_ERR_ARG, "ranks %d and %d share the GPU %s and NCCL "
                       "refuses duplicate GPUs in one communicator (use auto or staged)",
                       a, b, ids[a]);
    } else if (want == RANK_COMM_AUTO) {
        *out = shared ? RANK_COMM_STAGED : RANK_COMM_NCCL;
    } else {
        *out = want;
    }
    if (*out != RANK_COMM_NCCL && !same_host)
        return tn_fail(err, errlen, TN_ERR_ARG, "the %s rank communicator needs every rank "
                       "on one machine (shared memory); ranks on several machines need "
                       "one GPU each (nccl)", rank_comm_name(*out));
    return TN_OK;
}

int rank_comm_open(comm *host_world, const kn_backend *be, rank_comm_kind want, comm **out,
                   rank_comm_kind *chosen, char *err, size_t errlen)
{
    *out = NULL;
    if (!host_world || comm_memory(host_world) != KN_BACKEND_CPU || !be)
        return tn_fail(err, errlen, TN_ERR_ARG, "rank_comm_open: needs a host communicator");
    const int W = comm_size(host_world), r = comm_rank(host_world);
    char ids[COMM_MAX_WORLD][TM_DEVICE_ID_MAX];
    char mine[TM_DEVICE_ID_MAX] = "";
    char why[200] = "";
    int local = tm_device_id(be, mine, why, sizeof why);
    /* everyone joins the gather, then everyone sees who failed */
    int rc = comm_all_gather(host_world, mine, ids, sizeof mine);
    if (rc)
        return tn_fail(err, errlen, rc, "sharing device ids: %s", comm_error(host_world));
    /* an empty id says that rank failed; every rank sees it and gives up */
    for (int i = 0; i < W; i++)
        if (!ids[i][0])
            return tn_fail(err, errlen, local ? local : TN_ERR_DEVICE, "rank %d could not "
                           "read its device id%s%s", i, i == r ? ": " : "", i == r ? why : "");
    rank_comm_kind k;
    /* every rank decides from the same ids: they agree without another round */
    rc = rank_comm_choose(be->kind, want, (const char (*)[TM_DEVICE_ID_MAX])ids, W, 1, &k, err,
                          errlen);
    if (rc)
        return rc;
    *chosen = k;
    if (k == RANK_COMM_NCCL)
        return comm_nccl_init(out, host_world, be, err, errlen);
    comm *dup = NULL;
    rc = comm_split(host_world, 0, r, &dup);
    if (rc)
        return tn_fail(err, errlen, rc, "duplicating the host communicator: %s",
                       comm_error(host_world));
    if (k == RANK_COMM_HOST) {
        *out = dup;
        return TN_OK;
    }
    return comm_staged_init(out, dup, be, err, errlen);
}
