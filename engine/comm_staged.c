/* Staged communicator: the collectives of one kind of memory carried by a
 * communicator of the other kind, through a staging buffer.
 *
 * Device buffers over a host communicator is how ranks that share one GPU
 * communicate: NCCL refuses two ranks on the same device ("Duplicate GPU
 * detected"), and the host communicator already has what a group needs
 * (a dead rank fails the group within milliseconds, a stuck one at the
 * timeout, mismatched calls are caught, every rank gets bitwise the same
 * sum). Each call copies its input device -> host into a pinned staging
 * buffer, runs the host collective there and copies the result back. The
 * copies are synchronous on the backend's stream, so the collective sees
 * everything queued before it and the result is in place when it returns,
 * as with the other implementations.
 *
 * The same code runs the other way round (host buffers over a device
 * communicator): a decoder group spanning pods has no shared memory, so its
 * control-plane collectives (small host arrays) ride the group's NCCL
 * communicator.
 *
 * With the CPU backend both copies are memmoves, which is how the CPU tests
 * run the staging protocol itself (tests/unit/test_comm_staged.c). */
#include "engine/comm.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/comm_internal.h"
#include "common/status.h"

typedef struct staged_impl {
    comm *inner;              /* owned */
    const kn_backend *be;     /* borrowed: does the copies, owns the memory kinds */
    int inner_on_device;      /* inner takes be's device memory (else host memory) */
    void *stage;              /* in inner's memory */
    size_t cap;
} staged_impl;

static const comm_ops staged_ops;

static void stage_release(staged_impl *s)
{
    if (!s->stage)
        return;
    if (s->inner_on_device)
        kn_free(s->be, s->stage);
    else
        kn_host_free(s->be, s->stage);
    s->stage = NULL;
    s->cap = 0;
}

/* The staging buffer holds at least `bytes`. Grows by half again, so the
 * sizes of a forward pass settle after its first step; pinned memory is
 * slow to allocate, so it is never shrunk. */
static int stage_need(comm *c, size_t bytes)
{
    staged_impl *s = c->impl;
    if (bytes <= s->cap && s->stage)
        return TN_OK;
    stage_release(s);
    size_t cap = bytes + bytes / 2;
    if (cap < 4096)
        cap = 4096;
    s->stage = s->inner_on_device ? kn_malloc(s->be, cap) : kn_host_alloc(s->be, cap);
    if (!s->stage) {
        comm_set_error(c, "staged communicator: cannot allocate a %zu-byte staging buffer",
                       cap);
        return TN_ERR_NOMEM;
    }
    s->cap = cap;
    return TN_OK;
}

/* A copy that fails leaves the peers inside the inner collective waiting for
 * this rank: fail the group now instead of at their timeout. */
static int copy_failed(comm *c, const char *what)
{
    staged_impl *s = c->impl;
    comm_set_error(c, "staged communicator: copying %s failed on rank %d", what, c->rank);
    comm_abort(s->inner, c->err);
    return TN_ERR_DEVICE;
}

static int to_stage(comm *c, void *stage, const void *src, size_t bytes)
{
    staged_impl *s = c->impl;
    if (!bytes)
        return TN_OK;
    int rc = s->inner_on_device ? kn_copy_to_backend(s->be, stage, src, bytes)
                                : kn_copy_to_host(s->be, stage, src, bytes);
    return rc ? copy_failed(c, "into the staging buffer") : TN_OK;
}

static int from_stage(comm *c, void *dst, const void *stage, size_t bytes)
{
    staged_impl *s = c->impl;
    if (!bytes)
        return TN_OK;
    int rc = s->inner_on_device ? kn_copy_to_host(s->be, dst, stage, bytes)
                                : kn_copy_to_backend(s->be, dst, stage, bytes);
    return rc ? copy_failed(c, "out of the staging buffer") : TN_OK;
}

/* Passes an inner failure through with its reason. */
static int inner_rc(comm *c, int rc)
{
    staged_impl *s = c->impl;
    if (rc)
        comm_set_error(c, "%s", comm_error(s->inner));
    return rc;
}

/* Offsets inside the staging buffer start on 256 bytes (what device
 * allocations guarantee, so the inner side sees aligned buffers). */
static size_t aligned(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

static int staged_all_reduce_sum(comm *c, float *buf, size_t n)
{
    staged_impl *s = c->impl;
    const size_t bytes = n * sizeof(float);
    int rc = stage_need(c, bytes);
    if (!rc)
        rc = to_stage(c, s->stage, buf, bytes);
    if (!rc)
        rc = inner_rc(c, comm_all_reduce_sum(s->inner, s->stage, n));
    if (!rc)
        rc = from_stage(c, buf, s->stage, bytes);
    return rc;
}

static int staged_all_gather(comm *c, const void *send, void *recv, size_t bytes)
{
    staged_impl *s = c->impl;
    const size_t off = aligned(bytes), total = bytes * (size_t)c->size;
    int rc = stage_need(c, off + total);
    if (!rc)
        rc = to_stage(c, s->stage, send, bytes);
    if (!rc)
        rc = inner_rc(c, comm_all_gather(s->inner, s->stage, (char *)s->stage + off, bytes));
    if (!rc)
        rc = from_stage(c, recv, (char *)s->stage + off, total);
    return rc;
}

static int staged_broadcast(comm *c, void *buf, size_t bytes, int root)
{
    staged_impl *s = c->impl;
    int rc = stage_need(c, bytes);
    if (!rc && c->rank == root)
        rc = to_stage(c, s->stage, buf, bytes);
    if (!rc)
        rc = inner_rc(c, comm_broadcast(s->inner, s->stage, bytes, root));
    if (!rc && c->rank != root)
        rc = from_stage(c, buf, s->stage, bytes);
    return rc;
}

static int staged_all_to_all_v(comm *c, const void *send, const size_t *send_bytes,
                               void *recv, const size_t *recv_bytes)
{
    staged_impl *s = c->impl;
    size_t out = 0, in = 0;
    for (int p = 0; p < c->size; p++) {
        out += send_bytes[p];
        in += recv_bytes[p];
    }
    const size_t off = aligned(out);
    int rc = stage_need(c, off + in);
    if (!rc)
        rc = to_stage(c, s->stage, send, out);
    if (!rc)
        rc = inner_rc(c, comm_all_to_all_v(s->inner, s->stage, send_bytes,
                                           (char *)s->stage + off, recv_bytes));
    if (!rc)
        rc = from_stage(c, recv, (char *)s->stage + off, in);
    return rc;
}

static int staged_barrier(comm *c)
{
    return inner_rc(c, comm_barrier(((staged_impl *)c->impl)->inner));
}

static int staged_set_timeout(comm *c, int timeout_ms)
{
    return comm_set_timeout(((staged_impl *)c->impl)->inner, timeout_ms);
}

static int staged_poll_peers(comm *c)
{
    return inner_rc(c, comm_poll_peers(((staged_impl *)c->impl)->inner));
}

static void staged_abort(comm *c, const char *why)
{
    comm_abort(((staged_impl *)c->impl)->inner, why);
}

static const char *staged_group_error(const comm *c)
{
    const char *e = comm_error(((const staged_impl *)c->impl)->inner);
    return e[0] ? e : NULL;
}

static void staged_destroy(comm *c)
{
    staged_impl *s = c->impl;
    stage_release(s);
    comm_free(s->inner);
    free(s);
    free(c);
}

static int wrap(comm **out, comm *inner, const kn_backend *be, char *err, size_t errlen)
{
    comm *c = calloc(1, sizeof(*c));
    staged_impl *s = calloc(1, sizeof(*s));
    if (!c || !s) {
        free(c);
        free(s);
        comm_free(inner);
        tn_errf(err, errlen, "staged communicator: out of memory");
        return TN_ERR_NOMEM;
    }
    s->inner = inner;
    s->be = be;
    s->inner_on_device = comm_memory(inner) != KN_BACKEND_CPU;
    c->ops = &staged_ops;
    c->rank = comm_rank(inner);
    c->size = comm_size(inner);
    /* the other kind of memory than inner's; on the CPU backend both are host */
    c->memory = s->inner_on_device ? KN_BACKEND_CPU : be->kind;
    c->impl = s;
    *out = c;
    return TN_OK;
}

static int staged_split(comm *parent, int color, int key, comm **out)
{
    staged_impl *s = parent->impl;
    comm *child = NULL;
    int rc = inner_rc(parent, comm_split(s->inner, color, key, &child));
    if (rc || !child)
        return rc;
    char why[96];
    rc = wrap(out, child, s->be, why, sizeof(why));
    if (rc)
        comm_set_error(parent, "comm_split: %s", why);
    return rc;
}

static const comm_ops staged_ops = COMM_OPS(staged);

int comm_staged_init(comm **out, comm *inner, const kn_backend *be, char *err, size_t errlen)
{
    if (out)
        *out = NULL;
    if (!out || !inner || !be ||
        (comm_memory(inner) == KN_BACKEND_CUDA && be->kind != KN_BACKEND_CUDA)) {
        tn_errf(err, errlen, "comm_staged_init: needs a communicator and a backend (a CUDA "
                "backend for a device communicator)");
        comm_free(inner);
        return TN_ERR_ARG;
    }
    return wrap(out, inner, be, err, errlen);
}
