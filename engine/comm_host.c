/* Host communicator: the ranks are processes on one machine that share one
 * POSIX shared-memory segment.
 *
 * Segment layout:
 *   seg_header   parameters, failure flag and reason, one rank_info per rank
 *   area[G]      one per group (world = area 0, then one per comm_split
 *                group): arrival epochs, a futex "bell", call descriptors
 *   data[G]      per area [2][world][slot_bytes] staging slots
 *
 * Synchronisation: a rank arrives at a sync point by storing its epoch (the
 * count of syncs it has done in that group) and ringing the bell; it waits
 * until every member's epoch reaches its own, sleeping on the bell with a
 * futex. Each collective is a sequence of phases "write my slot of parity
 * epoch&1, sync, read the peers' slots of that parity": a slot of one parity
 * is rewritten only two syncs later, after every reader has arrived at the
 * sync in between, so one sync per phase is enough.
 *
 * Liveness: every rank holds a robust process-shared mutex (its "life"
 * mutex) for as long as it is in the group. When a process dies, however it
 * dies, the kernel releases its robust mutexes and the next trylock by a
 * waiting peer returns EOWNERDEAD. Waiters probe the ranks they wait for on
 * every wake-up (at least every POLL_MS), so a crash is seen within
 * milliseconds and a rank that is alive but stuck is reported when the
 * timeout expires. The first rank to see a failure records the reason in
 * the header and rings every bell; from then on every collective of every
 * group returns TN_ERR_PEER. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "engine/comm.h"
#include "engine/comm_internal.h"
#include "common/status.h"

#define SEG_MAGIC 0x3143454d444e4154ull   /* "TANDMEC1" */
#define POLL_MS 10                       /* longest sleep between liveness probes */
#define SPIN_YIELDS 16                   /* sched_yield rounds before sleeping */
#define REASON_MAX 256

enum { RANK_ABSENT = 0, RANK_JOINED = 1, RANK_LEFT = 2, RANK_DEAD = 3 };
enum { OP_BARRIER = 1, OP_ALL_REDUCE, OP_ALL_GATHER, OP_ALL_TO_ALL_V, OP_BROADCAST };

static const char *op_name(int op)
{
    switch (op) {
    case OP_BARRIER: return "barrier";
    case OP_ALL_REDUCE: return "all_reduce_sum";
    case OP_ALL_GATHER: return "all_gather";
    case OP_ALL_TO_ALL_V: return "all_to_all_v";
    case OP_BROADCAST: return "broadcast";
    default: return "?";
    }
}

typedef struct rank_info {
    _Alignas(64) pthread_mutex_t life;  /* robust; held while the rank is in */
    _Atomic int32_t state;
    int32_t pid;
} rank_info;

/* What a rank is calling; compared across members at the first sync of
 * every collective so that mismatched calls fail instead of mixing data. */
typedef struct call_desc {
    int32_t op, root;
    uint64_t count;
} call_desc;

typedef struct area {
    _Alignas(64) _Atomic uint32_t bell;
    _Atomic uint32_t waiters;
    int32_t size;
    int32_t members[COMM_MAX_WORLD];       /* global ranks */
    _Alignas(64) _Atomic uint32_t epoch[COMM_MAX_WORLD];
    call_desc desc[2][COMM_MAX_WORLD];
} area;

typedef struct seg_header {
    _Atomic uint64_t magic;                /* stored last by the creator */
    int32_t world, max_groups;
    uint64_t slot_bytes, total_bytes;
    _Atomic uint32_t joined;
    _Atomic uint32_t join_bell;
    _Atomic int32_t failed;                /* 0 ok, 1 reason being written, 2 failed */
    _Atomic uint32_t n_groups;             /* areas handed out */
    char reason[REASON_MAX];
    rank_info ranks[COMM_MAX_WORLD];
} seg_header;

/* One process's mapping of the segment, shared by its world communicator
 * and every sub-group split from it. */
typedef struct host_seg {
    seg_header *h;
    size_t bytes;
    int refs;
    int me;            /* global rank */
    int timeout_ms;
    ino_t ino;         /* identifies our segment when unlinking its name */
    dev_t dev;
    char path[COMM_NAME_MAX + 16];
} host_seg;

typedef struct host_group {
    host_seg *seg;
    area *a;
    uint8_t *data;     /* this area's [2][world][slot_bytes] */
    uint32_t epoch;    /* syncs this rank has done in the group */
    int timeout_ms;    /* 0 = wait without limit */
} host_group;

static const comm_ops host_ops;

static size_t align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

static size_t areas_offset(void)
{
    return align64(sizeof(seg_header));
}

static size_t data_offset(int max_groups)
{
    return areas_offset() + (size_t)max_groups * align64(sizeof(area));
}

static area *seg_area(const seg_header *h, int i)
{
    return (area *)((uint8_t *)h + areas_offset() + (size_t)i * align64(sizeof(area)));
}

static uint8_t *seg_data(const seg_header *h, int i)
{
    return (uint8_t *)h + data_offset(h->max_groups) +
           (size_t)i * 2 * (size_t)h->world * h->slot_bytes;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Shared (not FUTEX_PRIVATE) futex operations: the word lives in a mapping
 * several processes share. */
static void futex_wake_all(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (void *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void futex_wait_ms(_Atomic uint32_t *word, uint32_t seen, int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    syscall(SYS_futex, (void *)word, FUTEX_WAIT, seen, &ts, NULL, 0);
}

static void ring(_Atomic uint32_t *bell)
{
    atomic_fetch_add(bell, 1);
    futex_wake_all(bell);
}

/* Records the first failure of the group and wakes every waiter. Later
 * failures (usually consequences of the first) keep the first reason. */
static void group_fail(seg_header *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void group_fail(seg_header *h, const char *fmt, ...)
{
    int32_t expect = 0;
    if (atomic_compare_exchange_strong(&h->failed, &expect, 1)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(h->reason, sizeof(h->reason), fmt, ap);
        va_end(ap);
        atomic_store(&h->failed, 2);
    }
    uint32_t n = atomic_load(&h->n_groups);
    for (uint32_t i = 0; i < n && i < (uint32_t)h->max_groups; i++)
        ring(&seg_area(h, (int)i)->bell);
    ring(&h->join_bell);
}

static const char *group_reason(const seg_header *h)
{
    int32_t f = atomic_load(&((seg_header *)h)->failed);
    if (f == 0)
        return NULL;
    /* state 1 lasts one vsnprintf; if its writer died there, say so */
    for (int i = 0; i < 1000 && f == 1; i++) {
        sched_yield();
        f = atomic_load(&((seg_header *)h)->failed);
    }
    return f == 2 ? h->reason : "the group failed (a rank died while reporting why)";
}

/* Copies the group's failure into this communicator's error. */
static int failed_call(comm *c)
{
    host_group *g = c->impl;
    comm_set_error(c, "%s", group_reason(g->seg->h));
    return TN_ERR_PEER;
}

/* 1 while rank r may still take part; 0 (and *why) once it died or left. */
static int probe_rank(seg_header *h, int r, const char **why)
{
    rank_info *ri = &h->ranks[r];
    int st = atomic_load(&ri->state);
    if (st == RANK_ABSENT)
        return 1;   /* still starting up; the timeout covers it */
    if (st == RANK_LEFT) {
        *why = "left the group";
        return 0;
    }
    if (st == RANK_DEAD) {
        *why = "died";
        return 0;
    }
    int rc = pthread_mutex_trylock(&ri->life);
    if (rc == EBUSY)
        return 1;
    if (rc == EOWNERDEAD) {
        int32_t joined = RANK_JOINED;
        atomic_compare_exchange_strong(&ri->state, &joined, RANK_DEAD);
        pthread_mutex_consistent(&ri->life);
        pthread_mutex_unlock(&ri->life);
        *why = "died";
        return 0;
    }
    if (rc == 0) {
        /* released without dying: comm_free marks LEFT before unlocking */
        pthread_mutex_unlock(&ri->life);
        *why = atomic_load(&ri->state) == RANK_DEAD ? "died" : "left the group";
        return 0;
    }
    *why = "died";  /* ENOTRECOVERABLE: a dead owner nobody recovered */
    return 0;
}

static int lagging(const area *a, uint32_t target)
{
    for (int i = 0; i < a->size; i++)
        if ((int32_t)(atomic_load(&((area *)a)->epoch[i]) - target) < 0)
            return i;
    return -1;
}

/* Arrives at the group's next sync point and waits for every member. */
static int group_sync(comm *c, const char *what)
{
    host_group *g = c->impl;
    seg_header *h = g->seg->h;
    area *a = g->a;
    uint32_t target = ++g->epoch;
    atomic_store(&a->epoch[c->rank], target);
    atomic_fetch_add(&a->bell, 1);
    if (atomic_load(&a->waiters))
        futex_wake_all(&a->bell);

    const int64_t start = now_ms();
    for (int round = 0;; round++) {
        /* a sync every member reached completes even if the group failed
         * meanwhile elsewhere: its data is whole */
        int lag = lagging(a, target);
        if (lag < 0)
            return TN_OK;
        if (atomic_load(&h->failed))
            return failed_call(c);
        if (round < SPIN_YIELDS) {
            sched_yield();
            continue;
        }
        for (int i = 0; i < a->size; i++) {
            const char *why;
            if ((int32_t)(atomic_load(&a->epoch[i]) - target) < 0 &&
                !probe_rank(h, a->members[i], &why)) {
                group_fail(h, "rank %d (pid %d) %s; rank %d was waiting for it in %s",
                           a->members[i], h->ranks[a->members[i]].pid, why,
                           g->seg->me, what);
                return failed_call(c);
            }
        }
        int64_t left = g->timeout_ms ? start + g->timeout_ms - now_ms() : POLL_MS;
        if (left <= 0) {
            group_fail(h, "rank %d (pid %d) did not reach %s within %d ms; "
                       "rank %d was waiting for it", a->members[lag],
                       h->ranks[a->members[lag]].pid, what, g->timeout_ms,
                       g->seg->me);
            return failed_call(c);
        }
        /* Register as a waiter before sampling the bell: an arrival that
         * rings after the sample sees us and wakes us, one that rang before
         * is visible to the re-check. */
        atomic_fetch_add(&a->waiters, 1);
        uint32_t seen = atomic_load(&a->bell);
        if (lagging(a, target) >= 0 && !atomic_load(&h->failed))
            futex_wait_ms(&a->bell, seen, left < POLL_MS ? (int)left : POLL_MS);
        atomic_fetch_sub(&a->waiters, 1);
    }
}

static uint8_t *slot(const host_group *g, int parity, int member)
{
    const seg_header *h = g->seg->h;
    return g->data + ((size_t)parity * h->world + member) * h->slot_bytes;
}

/* Writes this rank's descriptor for the collective starting now; check_call
 * compares them after the first sync. */
static void post_call(comm *c, int op, uint64_t count, int root)
{
    host_group *g = c->impl;
    g->a->desc[g->epoch & 1][c->rank] = (call_desc){op, root, count};
}

/* A collective started after the group failed fails at once. */
#define FAIL_IF_GROUP_FAILED(c) \
    do { \
        if (atomic_load(&((host_group *)(c)->impl)->seg->h->failed)) \
            return failed_call(c); \
    } while (0)

static int check_call(comm *c)
{
    host_group *g = c->impl;
    const call_desc *d = g->a->desc[(g->epoch - 1) & 1];
    for (int i = 0; i < c->size; i++) {
        if (d[i].op != d[c->rank].op || d[i].count != d[c->rank].count ||
            d[i].root != d[c->rank].root) {
            group_fail(g->seg->h, "collective mismatch: rank %d called %s(count %llu, "
                       "root %d) while rank %d called %s(count %llu, root %d)",
                       g->a->members[c->rank], op_name(d[c->rank].op),
                       (unsigned long long)d[c->rank].count, d[c->rank].root,
                       g->a->members[i], op_name(d[i].op),
                       (unsigned long long)d[i].count, d[i].root);
            return failed_call(c);
        }
    }
    return TN_OK;
}

/* Sync; after the first one of a collective also compare the calls. */
static int phase_sync(comm *c, int first, const char *what)
{
    int rc = group_sync(c, what);
    if (!rc && first)
        rc = check_call(c);
    return rc;
}

static int host_barrier(comm *c)
{
    FAIL_IF_GROUP_FAILED(c);
    post_call(c, OP_BARRIER, 0, 0);
    return phase_sync(c, 1, "barrier");
}

/* Chunks of up to slot_bytes/4 floats. Phase 1: every rank stages its chunk.
 * Phase 2: rank i sums segment i of the chunk over the ranks in rank order
 * and stages the sum (a reduce-scatter). Then every rank copies all sums out
 * (an all-gather). Each element is summed by exactly one rank in one fixed
 * order, so every rank gets the same bits. */
static int host_all_reduce_sum(comm *c, float *buf, size_t n)
{
    FAIL_IF_GROUP_FAILED(c);
    host_group *g = c->impl;
    const size_t chunk = g->seg->h->slot_bytes / sizeof(float);
    const size_t n_chunks = n ? (n + chunk - 1) / chunk : 1;
    const int W = c->size, me = c->rank;
    post_call(c, OP_ALL_REDUCE, n, 0);
    for (size_t ci = 0; ci < n_chunks; ci++) {
        size_t off = ci * chunk, len = n - off < chunk ? n - off : chunk;
        if (!n)
            len = 0;
        int p = (int)(g->epoch & 1);
        if (len)
            memcpy(slot(g, p, me), buf + off, len * sizeof(float));
        int rc = phase_sync(c, ci == 0, "all_reduce_sum");
        if (rc)
            return rc;
        size_t lo = len * (size_t)me / (size_t)W, hi = len * (size_t)(me + 1) / (size_t)W;
        float *sum = (float *)slot(g, p ^ 1, me);
        const float *first = (const float *)slot(g, p, 0);
        for (size_t i = lo; i < hi; i++)
            sum[i] = first[i];
        for (int r = 1; r < W; r++) {
            const float *src = (const float *)slot(g, p, r);
            for (size_t i = lo; i < hi; i++)
                sum[i] += src[i];
        }
        if ((rc = group_sync(c, "all_reduce_sum")) != TN_OK)
            return rc;
        for (int r = 0; r < W; r++) {
            size_t rlo = len * (size_t)r / (size_t)W, rhi = len * (size_t)(r + 1) / (size_t)W;
            memcpy(buf + off + rlo, (const float *)slot(g, p ^ 1, r) + rlo,
                   (rhi - rlo) * sizeof(float));
        }
    }
    return TN_OK;
}

static int host_all_gather(comm *c, const void *send, void *recv, size_t bytes)
{
    FAIL_IF_GROUP_FAILED(c);
    host_group *g = c->impl;
    const size_t chunk = g->seg->h->slot_bytes;
    const size_t n_chunks = bytes ? (bytes + chunk - 1) / chunk : 1;
    post_call(c, OP_ALL_GATHER, bytes, 0);
    for (size_t ci = 0; ci < n_chunks; ci++) {
        size_t off = ci * chunk, len = bytes ? (bytes - off < chunk ? bytes - off : chunk) : 0;
        int p = (int)(g->epoch & 1);
        if (len)
            memcpy(slot(g, p, c->rank), (const uint8_t *)send + off, len);
        int rc = phase_sync(c, ci == 0, "all_gather");
        if (rc)
            return rc;
        for (int r = 0; r < c->size && len; r++)
            memcpy((uint8_t *)recv + (size_t)r * bytes + off, slot(g, p, r), len);
    }
    return TN_OK;
}

static int host_broadcast(comm *c, void *buf, size_t bytes, int root)
{
    FAIL_IF_GROUP_FAILED(c);
    host_group *g = c->impl;
    const size_t chunk = g->seg->h->slot_bytes;
    const size_t n_chunks = bytes ? (bytes + chunk - 1) / chunk : 1;
    post_call(c, OP_BROADCAST, bytes, root);
    for (size_t ci = 0; ci < n_chunks; ci++) {
        size_t off = ci * chunk, len = bytes ? (bytes - off < chunk ? bytes - off : chunk) : 0;
        int p = (int)(g->epoch & 1);
        if (c->rank == root && len)
            memcpy(slot(g, p, root), (uint8_t *)buf + off, len);
        int rc = phase_sync(c, ci == 0, "broadcast");
        if (rc)
            return rc;
        if (c->rank != root && len)
            memcpy((uint8_t *)buf + off, slot(g, p, root), len);
    }
    return TN_OK;
}

static size_t piece(size_t total, size_t round, size_t chunk)
{
    size_t start = round * chunk;
    if (start >= total)
        return 0;
    return total - start < chunk ? total - start : chunk;
}

/* Phase 1 publishes every rank's send counts (a W x W matrix across the
 * slots); each rank checks its column against recv_bytes and everyone
 * derives the same number of rounds from the matrix. Each round moves up to
 * slot_bytes/W bytes per (sender, receiver) pair through the sender's slot. */
static int host_all_to_all_v(comm *c, const void *send, const size_t *send_bytes,
                             void *recv, const size_t *recv_bytes)
{
    FAIL_IF_GROUP_FAILED(c);
    host_group *g = c->impl;
    seg_header *h = g->seg->h;
    const int W = c->size, me = c->rank;
    const size_t chunk = (h->slot_bytes / (size_t)W) & ~(size_t)63;
    int p = (int)(g->epoch & 1);
    uint64_t *mine = (uint64_t *)slot(g, p, me);
    for (int q = 0; q < W; q++)
        mine[q] = send_bytes[q];
    post_call(c, OP_ALL_TO_ALL_V, 0, 0);
    int rc = phase_sync(c, 1, "all_to_all_v");
    if (rc)
        return rc;
    size_t rounds = 0;
    for (int s = 0; s < W; s++) {
        const uint64_t *row = (const uint64_t *)slot(g, p, s);
        if (row[me] != recv_bytes[s]) {
            group_fail(h, "all_to_all_v mismatch: rank %d sends %llu bytes to rank %d, "
                       "which expects %zu", g->a->members[s], (unsigned long long)row[me],
                       g->a->members[me], recv_bytes[s]);
            return failed_call(c);
        }
        for (int d = 0; d < W; d++) {
            size_t r = d == s ? 0 : (size_t)((row[d] + chunk - 1) / chunk);
            if (r > rounds)
                rounds = r;
        }
    }
    size_t soff[COMM_MAX_WORLD], roff[COMM_MAX_WORLD], so = 0, ro = 0;
    for (int q = 0; q < W; q++) {
        soff[q] = so;
        roff[q] = ro;
        so += send_bytes[q];
        ro += recv_bytes[q];
    }
    if (send_bytes[me])
        memcpy((uint8_t *)recv + roff[me], (const uint8_t *)send + soff[me], send_bytes[me]);
    for (size_t i = 0; i < rounds; i++) {
        p = (int)(g->epoch & 1);
        uint8_t *out = slot(g, p, me);
        for (int d = 0; d < W; d++) {
            size_t n = d == me ? 0 : piece(send_bytes[d], i, chunk);
            if (n)
                memcpy(out + (size_t)d * chunk, (const uint8_t *)send + soff[d] + i * chunk, n);
        }
        if ((rc = group_sync(c, "all_to_all_v")) != TN_OK)
            return rc;
        for (int s = 0; s < W; s++) {
            size_t n = s == me ? 0 : piece(recv_bytes[s], i, chunk);
            if (n)
                memcpy((uint8_t *)recv + roff[s] + i * chunk,
                       slot(g, p, s) + (size_t)me * chunk, n);
        }
    }
    return TN_OK;
}

static void seg_release(host_seg *s)
{
    rank_info *ri = &s->h->ranks[s->me];
    int32_t joined = RANK_JOINED;
    atomic_compare_exchange_strong(&ri->state, &joined, RANK_LEFT);
    pthread_mutex_unlock(&ri->life);
    /* a peer blocked on us should notice now rather than at its next poll */
    uint32_t n = atomic_load(&s->h->n_groups);
    for (uint32_t i = 0; i < n && i < (uint32_t)s->h->max_groups; i++)
        ring(&seg_area(s->h, (int)i)->bell);
    munmap(s->h, s->bytes);
    free(s);
}

static comm *group_new(host_seg *s, int area_idx, int rank, int size)
{
    comm *c = calloc(1, sizeof(*c));
    host_group *g = calloc(1, sizeof(*g));
    if (!c || !g) {
        free(c);
        free(g);
        return NULL;
    }
    g->seg = s;
    g->a = seg_area(s->h, area_idx);
    g->data = seg_data(s->h, area_idx);
    g->timeout_ms = s->timeout_ms;
    c->ops = &host_ops;
    c->rank = rank;
    c->size = size;
    c->memory = KN_BACKEND_CPU;
    c->impl = g;
    s->refs++;
    return c;
}

static void host_destroy(comm *c)
{
    host_group *g = c->impl;
    host_seg *s = g->seg;
    free(g);
    free(c);
    if (--s->refs == 0)
        seg_release(s);
}

static int host_set_timeout(comm *c, int timeout_ms)
{
    ((host_group *)c->impl)->timeout_ms = timeout_ms;
    return TN_OK;
}

static int host_poll_peers(comm *c)
{
    host_group *g = c->impl;
    seg_header *h = g->seg->h;
    for (int i = 0; i < c->size && !atomic_load(&h->failed); i++) {
        const char *why;
        if (i != c->rank && !probe_rank(h, g->a->members[i], &why))
            group_fail(h, "rank %d (pid %d) %s", g->a->members[i],
                       h->ranks[g->a->members[i]].pid, why);
    }
    return atomic_load(&h->failed) ? failed_call(c) : TN_OK;
}

static void host_abort(comm *c, const char *why)
{
    host_group *g = c->impl;
    group_fail(g->seg->h, "rank %d aborted: %s", g->seg->me, why);
}

static const char *host_group_error(const comm *c)
{
    const host_group *g = c->impl;
    return group_reason(g->seg->h);
}

/* Members of each color, ordered by (key, parent rank); the member with the
 * lowest parent rank takes a fresh area from the header's counter and tells
 * the others through a second all-gather. */
static int host_split(comm *parent, int color, int key, comm **out)
{
    FAIL_IF_GROUP_FAILED(parent);
    host_group *pg = parent->impl;
    seg_header *h = pg->seg->h;
    const int W = parent->size;
    int32_t mine[2] = {color, key}, all[2 * COMM_MAX_WORLD], order[COMM_MAX_WORLD];
    int rc = host_all_gather(parent, mine, all, sizeof(mine));
    if (rc)
        return rc;
    int n = 0, leader = -1, my_index = -1;
    for (int r = 0; r < W && color >= 0; r++) {
        if (all[2 * r] != color)
            continue;
        if (leader < 0)
            leader = r;
        int j = n++;   /* insertion sort by (key, parent rank) */
        while (j > 0 && all[2 * order[j - 1] + 1] > all[2 * r + 1]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = r;
    }
    for (int i = 0; i < n; i++)
        if (order[i] == parent->rank)
            my_index = i;
    int32_t proposal = -1, proposals[COMM_MAX_WORLD];
    if (color >= 0 && leader == parent->rank) {
        uint32_t idx = atomic_fetch_add(&h->n_groups, 1);
        if (idx < (uint32_t)h->max_groups) {
            area *a = seg_area(h, (int)idx);
            a->size = n;
            for (int i = 0; i < n; i++)
                a->members[i] = pg->a->members[order[i]];
            proposal = (int32_t)idx;
        }
    }
    rc = host_all_gather(parent, &proposal, proposals, sizeof(proposal));
    if (rc || color < 0)
        return rc;
    if (proposals[leader] < 0) {
        comm_set_error(parent, "comm_split: the group segment holds at most %d groups "
                       "(comm_options.max_groups)", h->max_groups);
        return TN_ERR_ARG;
    }
    *out = group_new(pg->seg, proposals[leader], my_index, n);
    if (!*out) {
        comm_set_error(parent, "comm_split: out of memory");
        return TN_ERR_NOMEM;
    }
    return TN_OK;
}

static const comm_ops host_ops = COMM_OPS(host);

/* ---- start-up ---------------------------------------------------------- */

static int valid_name(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > COMM_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
              (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.'))
            return 0;
    }
    return 1;
}

/* Unlinks the name only if it still names our segment (a new run may have
 * replaced it). */
static void unlink_if_ours(const host_seg *s)
{
    int fd = shm_open(s->path, O_RDONLY, 0);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_ino == s->ino && st.st_dev == s->dev)
        shm_unlink(s->path);
    close(fd);
}

static int map_fd(host_seg *s, int fd, size_t bytes)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -1;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return -1;
    s->h = p;
    s->bytes = bytes;
    s->ino = st.st_ino;
    s->dev = st.st_dev;
    return 0;
}

static int create_segment(host_seg *s, int world, size_t slot_bytes, int max_groups,
                          char *err, size_t errlen)
{
    size_t total = data_offset(max_groups) + (size_t)max_groups * 2 * world * slot_bytes;
    shm_unlink(s->path);   /* a segment left by a crashed earlier run */
    int fd = shm_open(s->path, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
        tn_errf(err, errlen, "comm: cannot create shared memory %s: %s", s->path, strerror(errno));
        return TN_ERR_SYS;
    }
    if (ftruncate(fd, (off_t)total) != 0 || map_fd(s, fd, total) != 0) {
        tn_errf(err, errlen, "comm: cannot size or map %s (%zu bytes): %s", s->path, total,
             strerror(errno));
        close(fd);
        shm_unlink(s->path);
        return TN_ERR_SYS;
    }
    close(fd);
    seg_header *h = s->h;
    h->world = world;
    h->max_groups = max_groups;
    h->slot_bytes = slot_bytes;
    h->total_bytes = total;
    pthread_mutexattr_t at;
    int rc = pthread_mutexattr_init(&at);
    if (!rc)
        rc = pthread_mutexattr_setpshared(&at, PTHREAD_PROCESS_SHARED);
    if (!rc)
        rc = pthread_mutexattr_setrobust(&at, PTHREAD_MUTEX_ROBUST);
    for (int r = 0; r < world && !rc; r++)
        rc = pthread_mutex_init(&h->ranks[r].life, &at);
    pthread_mutexattr_destroy(&at);
    if (rc) {
        tn_errf(err, errlen, "comm: cannot initialise robust shared mutexes: %s", strerror(rc));
        munmap(s->h, s->bytes);
        shm_unlink(s->path);
        return TN_ERR_SYS;
    }
    area *a0 = seg_area(h, 0);
    a0->size = world;
    for (int r = 0; r < world; r++)
        a0->members[r] = r;
    atomic_store(&h->n_groups, 1);
    return TN_OK;
}

/* Opens the segment rank 0 created, waiting for it to appear; skips a stale
 * segment whose creator is gone. */
static int open_segment(host_seg *s, int world, size_t slot_bytes, int max_groups,
                        int64_t deadline, char *err, size_t errlen)
{
    for (;;) {
        int fd = shm_open(s->path, O_RDWR, 0);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(seg_header) &&
            map_fd(s, fd, (size_t)st.st_size) == 0) {
            close(fd);
            fd = -1;
            seg_header *h = s->h;
            if (atomic_load(&h->magic) == SEG_MAGIC) {
                const char *why;
                if (!probe_rank(h, 0, &why)) {
                    munmap(s->h, s->bytes);   /* stale: wait for the new one */
                } else if (h->world != world || h->slot_bytes != slot_bytes ||
                           h->max_groups != max_groups || h->total_bytes > s->bytes) {
                    tn_errf(err, errlen, "comm: group %s was created with world %d, slot %llu, "
                         "max_groups %d; this rank asks for world %d, slot %zu, "
                         "max_groups %d", s->path, h->world,
                         (unsigned long long)h->slot_bytes, h->max_groups, world,
                         slot_bytes, max_groups);
                    munmap(s->h, s->bytes);
                    return TN_ERR_ARG;
                } else {
                    return TN_OK;
                }
            } else {
                munmap(s->h, s->bytes);   /* rank 0 is still initialising */
            }
        }
        if (fd >= 0)
            close(fd);
        if (now_ms() >= deadline) {
            tn_errf(err, errlen, "comm: rank 0 did not create group %s within %d ms",
                 s->path, s->timeout_ms);
            return TN_ERR_PEER;
        }
        sleep_ms(5);
    }
}

/* Takes this rank's place: locks its life mutex and marks it joined. */
static int take_place(host_seg *s, char *err, size_t errlen)
{
    rank_info *ri = &s->h->ranks[s->me];
    int rc = pthread_mutex_trylock(&ri->life);
    int32_t absent = RANK_ABSENT;
    if (rc == 0 && !atomic_compare_exchange_strong(&ri->state, &absent, RANK_JOINED)) {
        pthread_mutex_unlock(&ri->life);
        rc = EBUSY;
    }
    if (rc != 0) {
        tn_errf(err, errlen, "comm: rank %d of group %s is already taken by another process",
             s->me, s->path);
        return TN_ERR_ARG;
    }
    ri->pid = (int32_t)getpid();
    return TN_OK;
}

/* Counts this rank in and waits until all ranks are. */
static int wait_joined(host_seg *s, int world, int64_t deadline, char *err, size_t errlen)
{
    seg_header *h = s->h;
    atomic_fetch_add(&h->joined, 1);
    ring(&h->join_bell);
    for (;;) {
        uint32_t seen = atomic_load(&h->join_bell);
        if (atomic_load(&h->failed)) {
            tn_errf(err, errlen, "comm: %s", group_reason(h));
            return TN_ERR_PEER;
        }
        if (atomic_load(&h->joined) >= (uint32_t)world)
            return TN_OK;
        for (int r = 0; r < world; r++) {
            const char *why;
            if (r != s->me && !probe_rank(h, r, &why)) {
                group_fail(h, "rank %d (pid %d) %s while group %s was starting", r,
                           h->ranks[r].pid, why, s->path);
                tn_errf(err, errlen, "comm: %s", group_reason(h));
                return TN_ERR_PEER;
            }
        }
        int64_t left = deadline - now_ms();
        if (left <= 0) {
            group_fail(h, "only %u of %d ranks joined group %s within %d ms",
                       atomic_load(&h->joined), world, s->path, s->timeout_ms);
            tn_errf(err, errlen, "comm: %s", group_reason(h));
            return TN_ERR_PEER;
        }
        futex_wait_ms(&h->join_bell, seen, left < POLL_MS ? (int)left : POLL_MS);
    }
}

int comm_host_init(comm **out, const char *name, int rank, int world,
                   const comm_options *opt, char *err, size_t errlen)
{
    if (out)
        *out = NULL;
    if (!out || !name || !valid_name(name)) {
        tn_errf(err, errlen, "comm: group name must be 1..%d characters of [A-Za-z0-9._-]",
             COMM_NAME_MAX);
        return TN_ERR_ARG;
    }
    if (world < 1 || world > COMM_MAX_WORLD || rank < 0 || rank >= world) {
        tn_errf(err, errlen, "comm: rank %d of world %d is out of range (world 1..%d)", rank,
             world, COMM_MAX_WORLD);
        return TN_ERR_ARG;
    }
    comm_options o = opt ? *opt : (comm_options){0};
    if (o.timeout_ms < 0 || o.max_groups < 0 || o.max_groups > 64) {
        tn_errf(err, errlen, "comm: bad options (timeout_ms %d, max_groups %d)", o.timeout_ms,
             o.max_groups);
        return TN_ERR_ARG;
    }
    int timeout_ms = o.timeout_ms ? o.timeout_ms : COMM_DEFAULT_TIMEOUT_MS;
    int max_groups = o.max_groups ? o.max_groups : COMM_DEFAULT_MAX_GROUPS;
    size_t slot_bytes = o.slot_bytes ? o.slot_bytes : COMM_DEFAULT_SLOT_BYTES;
    size_t min_slot = 64 * (size_t)world > 4096 ? 64 * (size_t)world : 4096;
    if (slot_bytes < min_slot)
        slot_bytes = min_slot;
    slot_bytes = align64(slot_bytes);

    host_seg *s = calloc(1, sizeof(*s));
    if (!s) {
        tn_errf(err, errlen, "comm: out of memory");
        return TN_ERR_NOMEM;
    }
    s->me = rank;
    s->timeout_ms = timeout_ms;
    snprintf(s->path, sizeof(s->path), "/tandem-comm-%s", name);
    const int64_t deadline = now_ms() + timeout_ms;
    int rc = rank == 0 ? create_segment(s, world, slot_bytes, max_groups, err, errlen)
                       : open_segment(s, world, slot_bytes, max_groups, deadline, err, errlen);
    if (rc) {
        free(s);
        return rc;
    }
    int placed = 0;
    rc = take_place(s, err, errlen);
    if (!rc) {
        placed = 1;
        if (rank == 0)   /* joiners treat a segment whose rank 0 is gone as stale */
            atomic_store(&s->h->magic, SEG_MAGIC);
        rc = wait_joined(s, world, deadline, err, errlen);
    }
    /* once everyone is in (or the start failed) the name has done its job */
    if (rank == 0 || rc)
        unlink_if_ours(s);
    comm *c = NULL;
    if (!rc) {
        c = group_new(s, 0, rank, world);
        if (!c) {
            tn_errf(err, errlen, "comm: out of memory");
            rc = TN_ERR_NOMEM;
        }
    }
    if (rc) {
        if (placed) {
            seg_release(s);
        } else {
            munmap(s->h, s->bytes);
            free(s);
        }
        return rc;
    }
    *out = c;
    return TN_OK;
}
