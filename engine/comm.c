/* Public communicator entry points: argument checks shared by every
 * implementation, then dispatch through the ops table. */
#include "engine/comm.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "engine/comm_internal.h"
#include "common/status.h"

void comm_set_error(comm *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
}

int comm_rank(const comm *c)
{
    return c ? c->rank : -1;
}

int comm_size(const comm *c)
{
    return c ? c->size : 0;
}

kn_backend_kind comm_memory(const comm *c)
{
    return c ? c->memory : KN_BACKEND_CPU;
}

const char *comm_error(const comm *c)
{
    if (!c)
        return "no communicator";
    const char *g = c->ops->group_error ? c->ops->group_error(c) : NULL;
    if (c->err[0])
        return c->err;
    return g ? g : "";
}

int comm_split(comm *parent, int color, int key, comm **out)
{
    if (!parent || !out)
        return TN_ERR_ARG;
    *out = NULL;
    return parent->ops->split(parent, color, key, out);
}

void comm_get_stats(const comm *c, comm_stats *out)
{
    if (!out)
        return;
    if (c)
        *out = c->stats;
    else
        memset(out, 0, sizeof(*out));
}

/* Counts a completed collective; passes rc through. */
static int counted(comm *c, int rc, comm_op op, size_t bytes)
{
    if (rc == TN_OK) {
        c->stats.calls[op]++;
        c->stats.bytes[op] += bytes;
    }
    return rc;
}

static int bad(comm *c, const char *what)
{
    if (c)
        comm_set_error(c, "%s: bad argument", what);
    return TN_ERR_ARG;
}

int comm_all_reduce_sum(comm *c, float *buf, size_t n)
{
    if (!c || (n && !buf))
        return bad(c, "comm_all_reduce_sum");
    return counted(c, c->ops->all_reduce_sum(c, buf, n), COMM_OP_ALL_REDUCE_SUM,
                   n * sizeof(float));
}

int comm_all_gather(comm *c, const void *send, void *recv, size_t bytes)
{
    if (!c || (bytes && (!send || !recv)))
        return bad(c, "comm_all_gather");
    return counted(c, c->ops->all_gather(c, send, recv, bytes), COMM_OP_ALL_GATHER, bytes);
}

int comm_all_to_all_v(comm *c, const void *send, const size_t *send_bytes,
                      void *recv, const size_t *recv_bytes)
{
    if (!c || !send_bytes || !recv_bytes)
        return bad(c, "comm_all_to_all_v");
    size_t out = 0, in = 0;
    for (int p = 0; p < c->size; p++) {
        out += send_bytes[p];
        in += recv_bytes[p];
    }
    if ((out && !send) || (in && !recv))
        return bad(c, "comm_all_to_all_v");
    return counted(c, c->ops->all_to_all_v(c, send, send_bytes, recv, recv_bytes),
                   COMM_OP_ALL_TO_ALL_V, out);
}

int comm_broadcast(comm *c, void *buf, size_t bytes, int root)
{
    if (!c || (bytes && !buf) || root < 0 || root >= c->size)
        return bad(c, "comm_broadcast");
    return counted(c, c->ops->broadcast(c, buf, bytes, root), COMM_OP_BROADCAST, bytes);
}

int comm_barrier(comm *c)
{
    if (!c)
        return TN_ERR_ARG;
    return counted(c, c->ops->barrier(c), COMM_OP_BARRIER, 0);
}

int comm_set_timeout(comm *c, int timeout_ms)
{
    if (!c || timeout_ms < 0)
        return TN_ERR_ARG;
    return c->ops->set_timeout(c, timeout_ms);
}

int comm_poll_peers(comm *c)
{
    if (!c)
        return TN_ERR_ARG;
    return c->ops->poll_peers(c);
}

void comm_abort(comm *c, const char *why)
{
    if (c)
        c->ops->abort(c, why ? why : "no reason given");
}

void comm_free(comm *c)
{
    if (c)
        c->ops->destroy(c);
}
