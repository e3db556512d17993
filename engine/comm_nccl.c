/* NCCL communicator: the same collectives between GPUs, on device buffers
 * and the backend's CUDA stream. Compiled in only with TANDEM_NCCL (the CUDA
 * build with NCCL found); otherwise comm_nccl_init says it is not built in.
 *
 * The NCCL communicator is created non-blocking so that no call can hang:
 * every collective is enqueued, then this rank polls ncclCommGetAsyncError
 * and the stream until the work is done, the communicator reports an error
 * (a peer died: NCCL's own error detection), or the group timeout passes; on
 * an error or a timeout the communicator is aborted and every later call
 * returns TN_ERR_PEER. Collectives return when their result is in place on
 * the device (like the host implementation), which keeps the engine's
 * sequencing identical for both. */
#include "engine/comm.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/comm_internal.h"
#include "common/status.h"

#ifndef TANDEM_NCCL

int comm_nccl_init(comm **out, comm *bootstrap, const kn_backend *be, char *err,
                   size_t errlen)
{
    (void)bootstrap;
    (void)be;
    if (out)
        *out = NULL;
    if (err && errlen)
        snprintf(err, errlen, "comm: NCCL support is not built in (build with CUDA "
                 "and NCCL so that TANDEM_NCCL is defined)");
    return TN_ERR_UNSUPPORTED;
}

int comm_nccl_unique_id(unsigned char id[COMM_NCCL_ID_BYTES], char *err, size_t errlen)
{
    (void)id;
    return tn_fail(err, errlen, TN_ERR_UNSUPPORTED, "comm: NCCL support is not built in "
                   "(build with CUDA and NCCL so that TANDEM_NCCL is defined)");
}

int comm_nccl_init_id(comm **out, const unsigned char id[COMM_NCCL_ID_BYTES], int rank,
                      int size, const kn_backend *be, char *err, size_t errlen)
{
    (void)id;
    (void)rank;
    (void)size;
    return comm_nccl_init(out, NULL, be, err, errlen);
}

#else

#include <cuda_runtime.h>
#include <nccl.h>
#include <time.h>

#define DEFAULT_NCCL_TIMEOUT_MS COMM_DEFAULT_TIMEOUT_MS

typedef struct nccl_impl {
    ncclComm_t nc;
    cudaStream_t stream;
    int device;
    int timeout_ms;     /* 0 = no limit */
    int aborted;
    float *one;         /* device scratch for the barrier */
} nccl_impl;

static const comm_ops nccl_ops;

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int fail_abort(comm *c, const char *what, const char *why)
{
    nccl_impl *n = c->impl;
    comm_set_error(c, "NCCL %s failed on rank %d: %s", what, c->rank, why);
    if (!n->aborted) {
        ncclCommAbort(n->nc);
        n->aborted = 1;
    }
    return TN_ERR_PEER;
}

/* Waits until the enqueued work of `what` has finished on the stream. */
static int finish(comm *c, ncclResult_t enq, const char *what)
{
    nccl_impl *n = c->impl;
    if (enq != ncclSuccess && enq != ncclInProgress)
        return fail_abort(c, what, ncclGetErrorString(enq));
    const long long start = now_ms();
    for (;;) {
        ncclResult_t async = ncclSuccess;
        ncclResult_t rc = ncclCommGetAsyncError(n->nc, &async);
        if (rc != ncclSuccess)
            return fail_abort(c, what, ncclGetErrorString(rc));
        if (async != ncclSuccess && async != ncclInProgress)
            return fail_abort(c, what, ncclGetErrorString(async));
        if (async == ncclSuccess) {
            cudaError_t q = cudaStreamQuery(n->stream);
            if (q == cudaSuccess)
                return TN_OK;
            if (q != cudaErrorNotReady)
                return fail_abort(c, what, cudaGetErrorString(q));
        }
        if (n->timeout_ms && now_ms() - start > n->timeout_ms) {
            char why[96];
            snprintf(why, sizeof(why), "did not complete within %d ms", n->timeout_ms);
            return fail_abort(c, what, why);
        }
        struct timespec nap = {0, 20 * 1000};
        nanosleep(&nap, NULL);
    }
}

static int usable(comm *c)
{
    nccl_impl *n = c->impl;
    if (n->aborted) {
        if (!c->err[0])
            comm_set_error(c, "NCCL communicator was aborted after an earlier failure");
        return TN_ERR_PEER;
    }
    return cudaSetDevice(n->device) == cudaSuccess ? TN_OK : TN_ERR_DEVICE;
}

static int nccl_all_reduce_sum(comm *c, float *buf, size_t n)
{
    int rc = usable(c);
    if (rc)
        return rc;
    nccl_impl *m = c->impl;
    return finish(c, ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, m->nc, m->stream),
                  "all_reduce_sum");
}

static int nccl_all_gather(comm *c, const void *send, void *recv, size_t bytes)
{
    int rc = usable(c);
    if (rc)
        return rc;
    nccl_impl *m = c->impl;
    return finish(c, ncclAllGather(send, recv, bytes, ncclChar, m->nc, m->stream),
                  "all_gather");
}

static int nccl_broadcast(comm *c, void *buf, size_t bytes, int root)
{
    int rc = usable(c);
    if (rc)
        return rc;
    nccl_impl *m = c->impl;
    return finish(c, ncclBroadcast(buf, buf, bytes, ncclChar, root, m->nc, m->stream),
                  "broadcast");
}

/* Grouped point-to-point sends and receives. NCCL cannot see a count
 * mismatch between a sender and its receiver, so the counts are first
 * exchanged through an all-gather and compared, like the host version. */
static int nccl_all_to_all_v(comm *c, const void *send, const size_t *send_bytes,
                             void *recv, const size_t *recv_bytes)
{
    int rc = usable(c);
    if (rc)
        return rc;
    nccl_impl *m = c->impl;
    const int W = c->size;
    size_t nbytes = sizeof(uint64_t) * (size_t)W;
    uint64_t *host = malloc(nbytes * (size_t)(W + 1));
    uint64_t *dev = NULL;
    if (!host || cudaMalloc((void **)&dev, nbytes * (size_t)(W + 1)) != cudaSuccess) {
        free(host);
        comm_set_error(c, "all_to_all_v: out of memory");
        return TN_ERR_NOMEM;
    }
    for (int p = 0; p < W; p++)
        host[p] = send_bytes[p];
    rc = cudaMemcpy(dev, host, nbytes, cudaMemcpyHostToDevice) == cudaSuccess ? TN_OK
                                                                              : TN_ERR_DEVICE;
    if (!rc)
        rc = finish(c, ncclAllGather(dev, dev + W, (size_t)W, ncclUint64, m->nc, m->stream),
                    "all_to_all_v counts");
    if (!rc && cudaMemcpy(host + W, dev + W, nbytes * (size_t)W, cudaMemcpyDeviceToHost) !=
                   cudaSuccess)
        rc = TN_ERR_DEVICE;
    for (int s = 0; s < W && !rc; s++) {
        uint64_t to_me = host[W + (size_t)s * W + c->rank];
        if (to_me != recv_bytes[s]) {
            comm_set_error(c, "all_to_all_v mismatch: rank %d sends %llu bytes to rank %d, "
                           "which expects %zu", s, (unsigned long long)to_me, c->rank,
                           recv_bytes[s]);
            rc = TN_ERR_PEER;
        }
    }
    cudaFree(dev);
    free(host);
    if (rc) {
        if (rc == TN_ERR_PEER && !m->aborted) {
            ncclCommAbort(m->nc);   /* the peers would wait for bytes never sent */
            m->aborted = 1;
        }
        return rc;
    }
    size_t so = 0, ro = 0;
    ncclResult_t g = ncclGroupStart();
    for (int p = 0; p < W && g == ncclSuccess; p++) {
        if (send_bytes[p])
            g = ncclSend((const char *)send + so, send_bytes[p], ncclChar, p, m->nc, m->stream);
        if (g == ncclSuccess && recv_bytes[p])
            g = ncclRecv((char *)recv + ro, recv_bytes[p], ncclChar, p, m->nc, m->stream);
        so += send_bytes[p];
        ro += recv_bytes[p];
    }
    ncclResult_t end = ncclGroupEnd();
    return finish(c, g != ncclSuccess ? g : end, "all_to_all_v");
}

static int nccl_barrier(comm *c)
{
    int rc = usable(c);
    if (rc)
        return rc;
    nccl_impl *m = c->impl;
    return finish(c, ncclAllReduce(m->one, m->one, 1, ncclFloat, ncclSum, m->nc, m->stream),
                  "barrier");
}

static int nccl_set_timeout(comm *c, int timeout_ms)
{
    ((nccl_impl *)c->impl)->timeout_ms = timeout_ms;
    return TN_OK;
}

static int nccl_poll_peers(comm *c)
{
    nccl_impl *n = c->impl;
    if (n->aborted)
        return usable(c);
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(n->nc, &async) != ncclSuccess ||
        (async != ncclSuccess && async != ncclInProgress))
        return fail_abort(c, "poll_peers", ncclGetErrorString(async));
    return TN_OK;
}

static void nccl_abort(comm *c, const char *why)
{
    nccl_impl *n = c->impl;
    comm_set_error(c, "rank %d aborted: %s", c->rank, why);
    if (!n->aborted) {
        ncclCommAbort(n->nc);   /* peers see an NCCL error or their timeout */
        n->aborted = 1;
    }
}

static const char *nccl_group_error(const comm *c)
{
    const nccl_impl *n = c->impl;
    return n->aborted ? "NCCL communicator aborted" : NULL;
}

static void nccl_destroy(comm *c)
{
    nccl_impl *n = c->impl;
    cudaSetDevice(n->device);
    if (!n->aborted) {
        ncclResult_t rc = ncclCommFinalize(n->nc);
        ncclResult_t async = ncclInProgress;
        const long long start = now_ms();
        while (rc == ncclSuccess || rc == ncclInProgress) {
            if (ncclCommGetAsyncError(n->nc, &async) != ncclSuccess || async != ncclInProgress)
                break;
            if (n->timeout_ms && now_ms() - start > n->timeout_ms)
                break;
            struct timespec nap = {0, 100 * 1000};
            nanosleep(&nap, NULL);
        }
        if (async == ncclSuccess)
            ncclCommDestroy(n->nc);
        else
            ncclCommAbort(n->nc);
    }
    cudaFree(n->one);
    free(n);
    free(c);
}

/* Waits for a non-blocking communicator's initialisation. */
static ncclResult_t init_done(ncclComm_t nc, int timeout_ms)
{
    const long long start = now_ms();
    ncclResult_t async = ncclInProgress;
    for (;;) {
        ncclResult_t rc = ncclCommGetAsyncError(nc, &async);
        if (rc != ncclSuccess)
            return rc;
        if (async != ncclInProgress)
            return async;
        if (timeout_ms && now_ms() - start > timeout_ms)
            return ncclInProgress;
        struct timespec nap = {0, 100 * 1000};
        nanosleep(&nap, NULL);
    }
}

static comm *wrap(ncclComm_t nc, cudaStream_t stream, int device, int rank, int size,
                  int timeout_ms)
{
    comm *c = calloc(1, sizeof(*c));
    nccl_impl *n = calloc(1, sizeof(*n));
    if (!c || !n || cudaMalloc((void **)&n->one, sizeof(float)) != cudaSuccess) {
        free(c);
        free(n);
        return NULL;
    }
    n->nc = nc;
    n->stream = stream;
    n->device = device;
    n->timeout_ms = timeout_ms;
    c->ops = &nccl_ops;
    c->rank = rank;
    c->size = size;
    c->memory = KN_BACKEND_CUDA;
    c->impl = n;
    return c;
}

static int nccl_split(comm *parent, int color, int key, comm **out)
{
    int rc = usable(parent);
    if (rc)
        return rc;
    nccl_impl *p = parent->impl;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t child = NULL;
    ncclResult_t r = ncclCommSplit(p->nc, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child,
                                   &cfg);
    if (r == ncclSuccess || r == ncclInProgress)
        r = init_done(p->nc, p->timeout_ms);
    if (r == ncclSuccess && child)
        r = init_done(child, p->timeout_ms);
    if (r != ncclSuccess) {
        if (child)
            ncclCommAbort(child);
        return fail_abort(parent, "comm_split", ncclGetErrorString(r));
    }
    if (color < 0)
        return TN_OK;
    int crank = 0, csize = 0;
    ncclCommUserRank(child, &crank);
    ncclCommCount(child, &csize);
    *out = wrap(child, p->stream, p->device, crank, csize, p->timeout_ms);
    if (!*out) {
        ncclCommAbort(child);
        comm_set_error(parent, "comm_split: out of memory");
        return TN_ERR_NOMEM;
    }
    return TN_OK;
}

static const comm_ops nccl_ops = COMM_OPS(nccl);

_Static_assert(sizeof(ncclUniqueId) == COMM_NCCL_ID_BYTES, "NCCL unique id size");

int comm_nccl_unique_id(unsigned char id[COMM_NCCL_ID_BYTES], char *err, size_t errlen)
{
    ncclUniqueId u;
    ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess)
        return tn_fail(err, errlen, TN_ERR_DEVICE, "ncclGetUniqueId failed: %s",
                       ncclGetErrorString(r));
    memcpy(id, &u, sizeof(u));
    return TN_OK;
}

int comm_nccl_init_id(comm **out, const unsigned char id_bytes[COMM_NCCL_ID_BYTES], int rank,
                      int size, const kn_backend *be, char *err, size_t errlen)
{
    if (out)
        *out = NULL;
    if (!out || !id_bytes || !be || be->kind != KN_BACKEND_CUDA || size < 1 || rank < 0 ||
        rank >= size)
        return tn_fail(err, errlen, TN_ERR_ARG, "comm_nccl_init: needs a CUDA backend and "
                       "a rank inside the group");
    ncclUniqueId id;
    memcpy(&id, id_bytes, sizeof(id));
    if (cudaSetDevice(be->device) != cudaSuccess)
        return tn_fail(err, errlen, TN_ERR_DEVICE, "comm_nccl_init: cannot select CUDA "
                       "device %d", be->device);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t nc = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&nc, size, id, rank, &cfg);
    if (r == ncclSuccess || r == ncclInProgress)
        r = init_done(nc, DEFAULT_NCCL_TIMEOUT_MS);
    if (r != ncclSuccess) {
        /* NCCL's own detail ("Duplicate GPU detected : rank 1 and rank 0
         * both on CUDA device ...") says more than the status; read it
         * before the abort frees the communicator */
        const char *last = ncclGetLastError(nc);
        tn_errf(err, errlen, "comm_nccl_init: ncclCommInitRank failed: %s%s%s",
                r == ncclInProgress ? "timed out" : ncclGetErrorString(r),
                last && last[0] ? ": " : "", last && last[0] ? last : "");
        if (nc)
            ncclCommAbort(nc);
        return TN_ERR_PEER;
    }
    *out = wrap(nc, (cudaStream_t)be->stream, be->device, rank, size,
                DEFAULT_NCCL_TIMEOUT_MS);
    if (!*out) {
        ncclCommAbort(nc);
        return tn_fail(err, errlen, TN_ERR_NOMEM, "comm_nccl_init: out of memory");
    }
    return TN_OK;
}

int comm_nccl_init(comm **out, comm *bootstrap, const kn_backend *be, char *err,
                   size_t errlen)
{
    if (out)
        *out = NULL;
    if (!out || !be || be->kind != KN_BACKEND_CUDA ||
        (bootstrap && comm_memory(bootstrap) != KN_BACKEND_CPU)) {
        if (err && errlen)
            snprintf(err, errlen, "comm_nccl_init: needs a CUDA backend and a host "
                     "bootstrap communicator (or none, for one rank)");
        return TN_ERR_ARG;
    }
    const int rank = bootstrap ? comm_rank(bootstrap) : 0;
    const int size = bootstrap ? comm_size(bootstrap) : 1;
    unsigned char id[COMM_NCCL_ID_BYTES];
    memset(id, 0, sizeof(id));
    char why[160] = "";
    int made = rank == 0 ? comm_nccl_unique_id(id, why, sizeof(why)) : TN_OK;
    /* everyone joins the broadcast even if rank 0 failed, then checks */
    int32_t ok = made == TN_OK;
    int rc = bootstrap ? comm_broadcast(bootstrap, &ok, sizeof(ok), 0) : TN_OK;
    if (!rc && ok && bootstrap)
        rc = comm_broadcast(bootstrap, id, sizeof(id), 0);
    if (rc || !ok) {
        if (err && errlen)
            snprintf(err, errlen, "comm_nccl_init: sharing the NCCL id failed: %s",
                     rc && bootstrap ? comm_error(bootstrap)
                                     : why[0] ? why : "rank 0 could not make one");
        return rc ? rc : TN_ERR_DEVICE;
    }
    return comm_nccl_init_id(out, id, rank, size, be, err, errlen);
}

#endif
