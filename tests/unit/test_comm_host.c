/* The host communicator between real processes: every case forks its ranks,
 * which rendezvous through POSIX shared memory. Results are checked against
 * float64 recomputations (all-reduce) or against the exact bytes each peer
 * must have sent; failure cases kill or stall a real rank and require the
 * others to return TN_ERR_PEER with a message naming the cause, never to
 * hang. After every case /dev/shm must hold no segment of ours. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "engine/comm.h"
#include "engine/comm_launch.h"
#include "common/status.h"
#include "tests/unit/comm_testutil.h"
#include "tests/unit/rank_testutil.h"

#define TAG "ch"

static int join(const rt_rank *r, const comm_options *o, comm **c)
{
    char err[256];
    int rc = comm_host_init(c, r->name, r->rank, r->world, o, err, sizeof(err));
    if (rc)
        fprintf(stderr, "rank %d: comm_host_init: %s\n", r->rank, err);
    return rc;
}

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* ---- all-reduce --------------------------------------------------------- */

typedef struct reduce_case {
    size_t n;
    size_t slot_bytes;
} reduce_case;

static int all_reduce_rank(const rt_rank *r, void *arg)
{
    const reduce_case *rc_ = arg;
    comm_options o = {.slot_bytes = rc_->slot_bytes};
    comm *c;
    if (join(r, &o, &c))
        return E_INIT;
    int code = PASS;
    float *buf = malloc(sizeof(float) * (rc_->n + 1));
    uint64_t *hashes = malloc(sizeof(uint64_t) * (size_t)r->world);
    if (!buf || !hashes) {
        code = E_SETUP;
        goto out;
    }
    for (size_t i = 0; i < rc_->n; i++)
        buf[i] = ct_datum(r->rank, i);
    if (comm_all_reduce_sum(c, buf, rc_->n)) {
        fprintf(stderr, "rank %d: all_reduce: %s\n", r->rank, comm_error(c));
        code = E_CALL;
        goto out;
    }
    for (size_t i = 0; i < rc_->n && code == PASS; i++) {
        double ref = 0, mag = 0;
        for (int q = 0; q < r->world; q++) {
            ref += (double)ct_datum(q, i);
            mag += fabs((double)ct_datum(q, i));
        }
        if (fabs((double)buf[i] - ref) > 1e-6 * mag + 1e-30) {
            fprintf(stderr, "rank %d: element %zu = %.9g, float64 sum %.9g\n", r->rank, i,
                    (double)buf[i], ref);
            code = E_VALUE;
        }
    }
    /* every rank must hold bitwise the same sum */
    uint64_t h = fnv(buf, rc_->n * sizeof(float));
    if (code == PASS && comm_all_gather(c, &h, hashes, sizeof(h)))
        code = E_CALL;
    for (int q = 0; q < r->world && code == PASS; q++)
        if (hashes[q] != h)
            code = E_VALUE;
out:
    free(buf);
    free(hashes);
    comm_free(c);
    return code;
}

static void all_reduce_matches_float64(void **state)
{
    (void)state;
    const reduce_case cases[] = {{1, 0}, {1000, 0}, {100003, 4096}, {0, 0}};
    for (int w = 2; w <= 4; w++)
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
            ct_run_group(w, TAG, all_reduce_rank, (void *)&cases[i], NULL);
}

/* ---- all-gather and broadcast ------------------------------------------ */

static void fill_bytes(unsigned char *p, size_t n, int rank, int salt)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 31u + (unsigned)rank * 7u + (unsigned)salt);
}

static int gather_bcast_rank(const rt_rank *r, void *arg)
{
    const size_t *sizes = arg;   /* {bytes, slot_bytes} */
    size_t bytes = sizes[0];
    comm_options o = {.slot_bytes = sizes[1]};
    comm *c;
    if (join(r, &o, &c))
        return E_INIT;
    int code = PASS;
    unsigned char *mine = malloc(bytes + 1), *all = malloc(bytes * (size_t)r->world + 1);
    unsigned char *want = malloc(bytes + 1);
    if (!mine || !all || !want) {
        code = E_SETUP;
        goto out;
    }
    fill_bytes(mine, bytes, r->rank, 1);
    if (comm_all_gather(c, mine, all, bytes)) {
        code = E_CALL;
        goto out;
    }
    for (int q = 0; q < r->world && code == PASS; q++) {
        fill_bytes(want, bytes, q, 1);
        if (memcmp(all + (size_t)q * bytes, want, bytes) != 0) {
            fprintf(stderr, "rank %d: all_gather block of rank %d differs\n", r->rank, q);
            code = E_VALUE;
        }
    }
    for (int root = 0; root < r->world && code == PASS; root++) {
        fill_bytes(mine, bytes, r->rank, 2 + root);
        if (comm_broadcast(c, mine, bytes, root)) {
            code = E_CALL;
            break;
        }
        fill_bytes(want, bytes, root, 2 + root);
        if (memcmp(mine, want, bytes) != 0) {
            fprintf(stderr, "rank %d: broadcast from %d differs\n", r->rank, root);
            code = E_VALUE;
        }
    }
    if (code == PASS && comm_barrier(c))
        code = E_CALL;
out:
    if (code == E_CALL)
        fprintf(stderr, "rank %d: %s\n", r->rank, comm_error(c));
    free(mine);
    free(all);
    free(want);
    comm_free(c);
    return code;
}

static void all_gather_and_broadcast_deliver_every_byte(void **state)
{
    (void)state;
    size_t small[2] = {37, 0}, chunked[2] = {10007, 4096};
    for (int w = 2; w <= 4; w++) {
        ct_run_group(w, TAG, gather_bcast_rank, small, NULL);
        ct_run_group(w, TAG, gather_bcast_rank, chunked, NULL);
    }
}

/* ---- all-to-all-v -------------------------------------------------------- */

/* Bytes rank s sends to rank d in round `salt`: some pairs send nothing,
 * some more than a slot holds. */
static size_t a2a_count(int s, int d, int salt)
{
    size_t v = (size_t)((s * 7 + d * 13 + salt * 5) % 9);
    if (v == 0)
        return 0;
    if (v == 8)
        return 9000 + (size_t)s * 11 + (size_t)d;
    return v * 37 + (size_t)s;
}

static unsigned char a2a_byte(int s, int d, size_t i)
{
    return (unsigned char)(i * 13u + (unsigned)s * 101u + (unsigned)d * 29u);
}

static int all_to_all_rank(const rt_rank *r, void *arg)
{
    (void)arg;
    comm_options o = {.slot_bytes = 4096};
    comm *c;
    if (join(r, &o, &c))
        return E_INIT;
    const int W = r->world, me = r->rank;
    int code = PASS;
    for (int salt = 0; salt < 3 && code == PASS; salt++) {
        size_t sc[RT_MAX_RANKS], rcv[RT_MAX_RANKS], st = 0, rt = 0;
        for (int p = 0; p < W; p++) {
            sc[p] = a2a_count(me, p, salt);
            rcv[p] = a2a_count(p, me, salt);
            st += sc[p];
            rt += rcv[p];
        }
        unsigned char *send = malloc(st + 1), *recv = malloc(rt + 1);
        if (!send || !recv) {
            free(send);
            free(recv);
            code = E_SETUP;
            break;
        }
        size_t off = 0;
        for (int p = 0; p < W; p++)
            for (size_t i = 0; i < sc[p]; i++)
                send[off++] = a2a_byte(me, p, i);
        if (comm_all_to_all_v(c, send, sc, recv, rcv)) {
            fprintf(stderr, "rank %d: all_to_all_v: %s\n", me, comm_error(c));
            code = E_CALL;
        }
        off = 0;
        for (int p = 0; p < W && code == PASS; p++)
            for (size_t i = 0; i < rcv[p] && code == PASS; i++, off++)
                if (recv[off] != a2a_byte(p, me, i)) {
                    fprintf(stderr, "rank %d: byte %zu from rank %d wrong\n", me, i, p);
                    code = E_VALUE;
                }
        free(send);
        free(recv);
    }
    comm_free(c);
    return code;
}

static void all_to_all_v_delivers_variable_counts(void **state)
{
    (void)state;
    for (int w = 2; w <= 4; w++)
        ct_run_group(w, TAG, all_to_all_rank, NULL, NULL);
}

/* ---- sub-groups ---------------------------------------------------------- */

/* World 4 as a 2x2 grid: "tp" groups {0,1},{2,3} (ranked in reverse by key),
 * "ep" groups {0,2},{1,3}; rank 3 also sits out a third split. Collectives
 * on the groups interleave; each must see only its own members' data. */
static int subgroup_rank(const rt_rank *r, void *arg)
{
    (void)arg;
    comm *w, *tp = NULL, *ep = NULL, *odd = NULL;
    if (join(r, NULL, &w))
        return E_INIT;
    int me = r->rank, code = PASS;
    if (comm_split(w, me / 2, -me, &tp) || comm_split(w, me % 2, me, &ep) ||
        comm_split(w, me == 3 ? -1 : 0, 0, &odd)) {
        fprintf(stderr, "rank %d: split: %s\n", me, comm_error(w));
        code = E_CALL;
        goto out;
    }
    /* tp: keys -me put the higher world rank first */
    int tp_rank_want = me % 2 == 0 ? 1 : 0;
    if (!tp || comm_size(tp) != 2 || comm_rank(tp) != tp_rank_want || !ep ||
        comm_size(ep) != 2 || comm_rank(ep) != me / 2 || (me == 3) != (odd == NULL) ||
        (odd && (comm_size(odd) != 3 || comm_rank(odd) != me))) {
        fprintf(stderr, "rank %d: wrong sub-group shape\n", me);
        code = E_VALUE;
        goto out;
    }
    for (int round = 0; round < 5 && code == PASS; round++) {
        float a = (float)(me + 1) * (float)(round + 1), b = a;
        if (comm_all_reduce_sum(tp, &a, 1) || comm_all_reduce_sum(ep, &b, 1)) {
            code = E_CALL;
            break;
        }
        int t0 = me / 2 * 2, e0 = me % 2;
        float ta = (float)(t0 + 1 + t0 + 2) * (float)(round + 1);
        float eb = (float)(e0 + 1 + e0 + 3) * (float)(round + 1);
        if (a != ta || b != eb)
            code = E_VALUE;
        if (odd) {
            int32_t v = me * 10 + round, got[3];
            if (comm_all_gather(odd, &v, got, sizeof(v)))
                code = E_CALL;
            for (int q = 0; q < 3 && code == PASS; q++)
                if (got[q] != q * 10 + round)
                    code = E_VALUE;
        }
        if (code == PASS && comm_barrier(w))
            code = E_CALL;
    }
out:
    if (code == E_CALL)
        fprintf(stderr, "rank %d: %s\n", me, comm_error(w));
    comm_free(odd);
    comm_free(ep);
    comm_free(tp);
    comm_free(w);
    return code;
}

static void sub_groups_are_independent(void **state)
{
    (void)state;
    ct_run_group(4, TAG, subgroup_rank, NULL, NULL);
}

/* ---- failures ------------------------------------------------------------ */

typedef struct fail_case {
    int victim;          /* the rank that misbehaves */
    const char *expect;  /* substring of the others' comm_error */
    int timeout_ms;
} fail_case;

/* Every rank all-reduces in a loop; the parent SIGKILLs the victim once it
 * is in the loop. The survivors must leave the loop with TN_ERR_PEER. */
static int loop_until_failure_rank(const rt_rank *r, void *arg)
{
    const fail_case *f = arg;
    comm_options o = {.timeout_ms = f->timeout_ms};
    comm *c;
    if (join(r, &o, &c))
        return E_INIT;
    float buf[256];
    int rc = TN_OK;
    for (long i = 0; rc == TN_OK; i++) {
        for (int j = 0; j < 256; j++)
            buf[j] = (float)(r->rank + j);
        rc = comm_all_reduce_sum(c, buf, 256);
        if (i == 20)
            rt_signal_ready(r);
    }
    int code = ct_expect_peer_error(r, c, rc, f->expect);
    /* the group stays failed: later calls fail at once, never block */
    if (code == PASS && comm_barrier(c) != TN_ERR_PEER)
        code = E_EXPECTED_FAIL;
    comm_free(c);
    return code;
}

static void killed_rank_fails_the_group_mid_collective(void **state)
{
    (void)state;
    for (int w = 2; w <= 4; w++) {
        fail_case f = {.victim = w - 1, .expect = "died", .timeout_ms = 0};
        rt_group g;
        int status[RT_MAX_RANKS];
        assert_int_equal(rt_start(&g, w, TAG, loop_until_failure_rank, &f), 0);
        assert_int_equal(rt_wait_ready(&g, f.victim, CT_WAIT_MS), 0);
        rt_kill(&g, f.victim, SIGKILL);
        rt_wait(&g, CT_WAIT_MS, status);
        for (int r = 0; r < w; r++)
            assert_int_equal(status[r], r == f.victim ? 128 + SIGKILL : PASS);
        assert_int_equal(rt_shm_count_ours(TAG), 0);
    }
}

/* The victim misbehaves instead of joining the next all-reduce. */
static int victim_rank(const rt_rank *r, void *arg)
{
    const fail_case *f = arg;
    comm_options o = {.timeout_ms = f->timeout_ms};
    comm *c;
    if (join(r, &o, &c))
        return E_INIT;
    float v = 1.0f;
    int rc = comm_all_reduce_sum(c, &v, 1);   /* one good round first */
    if (rc || v != (float)r->world) {
        comm_free(c);
        return E_VALUE;
    }
    if (r->rank == f->victim) {
        if (!strcmp(f->expect, "died"))
            raise(SIGKILL);
        if (!strcmp(f->expect, "did not reach")) {
            /* alive but not calling: the others must time out; it learns
             * the outcome from the group's failure record */
            while (!comm_error(c)[0])
                usleep(20000);
            int code = strstr(comm_error(c), f->expect) ? PASS : E_MESSAGE;
            comm_free(c);
            return code;
        }
        if (!strcmp(f->expect, "aborted: disk on fire")) {
            comm_abort(c, "disk on fire");
            int code = comm_barrier(c) == TN_ERR_PEER ? PASS : E_EXPECTED_FAIL;
            comm_free(c);
            return code;
        }
        if (!strcmp(f->expect, "left the group")) {
            comm_free(c);
            return PASS;
        }
        if (!strcmp(f->expect, "collective mismatch")) {
            float two[2] = {0};
            rc = comm_all_gather(c, &v, two, sizeof(v));
            int code = ct_expect_peer_error(r, c, rc, f->expect);
            comm_free(c);
            return code;
        }
        if (!strcmp(f->expect, "all_to_all_v mismatch")) {
            size_t sc[RT_MAX_RANKS] = {0}, rcv[RT_MAX_RANKS] = {0};
            char byte = 1, in[RT_MAX_RANKS];
            sc[0] = 1;   /* sends rank 0 a byte rank 0 does not expect */
            rc = comm_all_to_all_v(c, &byte, sc, in, rcv);
            int code = ct_expect_peer_error(r, c, rc, "mismatch");
            comm_free(c);
            return code;
        }
    }
    if (!strcmp(f->expect, "all_to_all_v mismatch")) {
        size_t sc[RT_MAX_RANKS] = {0}, rcv[RT_MAX_RANKS] = {0};
        char in[RT_MAX_RANKS];
        rc = comm_all_to_all_v(c, in, sc, in, rcv);
    } else {
        rc = comm_all_reduce_sum(c, &v, 1);
    }
    int code = ct_expect_peer_error(r, c, rc, f->expect);
    comm_free(c);
    return code;
}

static void run_victim_case(int world, fail_case f, int victim_status)
{
    int want[RT_MAX_RANKS] = {PASS};
    want[f.victim] = victim_status;
    ct_run_group(world, TAG, victim_rank, &f, want);
}

static void rank_dying_before_a_collective_fails_it(void **state)
{
    (void)state;
    run_victim_case(3, (fail_case){1, "died", 0}, 128 + SIGKILL);
    run_victim_case(3, (fail_case){0, "died", 0}, 128 + SIGKILL);
}

static void stuck_rank_times_out(void **state)
{
    (void)state;
    run_victim_case(3, (fail_case){2, "did not reach", 300}, 0);
}

static void departed_rank_fails_the_group(void **state)
{
    (void)state;
    run_victim_case(3, (fail_case){1, "left the group", 0}, PASS);
}

/* Outside any collective, comm_poll_peers notices a dead member. */
static int poll_rank(const rt_rank *r, void *arg)
{
    (void)arg;
    comm *c;
    if (join(r, NULL, &c))
        return E_INIT;
    if (comm_barrier(c)) {
        comm_free(c);
        return E_CALL;
    }
    if (r->rank == 1)
        raise(SIGKILL);
    int rc;
    while ((rc = comm_poll_peers(c)) == TN_OK)
        usleep(1000);
    int code = ct_expect_peer_error(r, c, rc, "rank 1");
    if (code == PASS && !strstr(comm_error(c), "died"))
        code = E_MESSAGE;
    comm_free(c);
    return code;
}

static void poll_peers_sees_a_death_outside_collectives(void **state)
{
    (void)state;
    const int want[3] = {PASS, 128 + SIGKILL, PASS};
    ct_run_group(3, TAG, poll_rank, NULL, want);
}

static void aborting_rank_fails_the_group_at_once(void **state)
{
    (void)state;
    /* no timeout: only the abort can end the others' wait */
    run_victim_case(4, (fail_case){3, "aborted: disk on fire", 0}, PASS);
}

static void mismatched_collectives_fail_instead_of_mixing(void **state)
{
    (void)state;
    run_victim_case(3, (fail_case){2, "collective mismatch", 0}, PASS);
    run_victim_case(3, (fail_case){1, "all_to_all_v mismatch", 0}, PASS);
}

/* ---- start-up ------------------------------------------------------------ */

static int missing_peer_rank(const rt_rank *r, void *arg)
{
    (void)arg;
    comm_options o = {.timeout_ms = 300};
    comm *c = NULL;
    char err[256] = "";
    /* two processes started, but the group is declared with three */
    int rc = comm_host_init(&c, r->name, r->rank, 3, &o, err, sizeof(err));
    if (rc == TN_OK || c)
        return E_EXPECTED_FAIL;
    if (!strstr(err, "joined") && !strstr(err, "did not create")) {
        fprintf(stderr, "rank %d: unexpected start-up error: %s\n", r->rank, err);
        return E_MESSAGE;
    }
    return PASS;
}

static void missing_rank_fails_start_up_without_leaking(void **state)
{
    (void)state;
    ct_run_group(2, TAG, missing_peer_rank, NULL, NULL);
}

static int double_rank_rank(const rt_rank *r, void *arg)
{
    (void)arg;
    comm_options o = {.timeout_ms = 2000};
    comm *c = NULL;
    char err[256] = "";
    /* process 2 claims rank 1 too; world 2 is complete without it */
    int rank = r->rank == 2 ? 1 : r->rank;
    int rc = comm_host_init(&c, r->name, rank, 2, &o, err, sizeof(err));
    if (rc == TN_OK) {
        /* keep the group alive until the intruder has been refused or gave up */
        float v = 1;
        rc = comm_all_reduce_sum(c, &v, 1);
        comm_free(c);
        return rc ? E_CALL : PASS;
    }
    return strstr(err, "already taken") || strstr(err, "did not create") ||
                   strstr(err, "joined")
               ? 100
               : E_MESSAGE;
}

static void a_rank_cannot_join_twice(void **state)
{
    (void)state;
    rt_group g;
    int status[RT_MAX_RANKS];
    assert_int_equal(rt_start(&g, 3, TAG, double_rank_rank, NULL), 0);
    rt_wait(&g, CT_WAIT_MS, status);
    /* exactly one of the two claimants of rank 1 was refused */
    int refused = (status[1] == 100) + (status[2] == 100);
    assert_int_equal(status[0], PASS);
    assert_int_equal(refused, 1);
    assert_true(status[1] == PASS || status[2] == PASS);
    assert_int_equal(rt_shm_count_ours(TAG), 0);
}

static void bad_arguments_are_rejected(void **state)
{
    (void)state;
    comm *c = (comm *)0x1;
    char err[256];
    assert_int_equal(comm_host_init(&c, "bad/name", 0, 2, NULL, err, sizeof(err)),
                     TN_ERR_ARG);
    assert_null(c);
    assert_non_null(strstr(err, "name"));
    assert_int_equal(comm_host_init(&c, "ok", 2, 2, NULL, err, sizeof(err)), TN_ERR_ARG);
    assert_int_equal(comm_host_init(&c, "ok", 0, COMM_MAX_WORLD + 1, NULL, err, sizeof(err)),
                     TN_ERR_ARG);
    assert_int_equal(comm_all_reduce_sum(NULL, NULL, 0), TN_ERR_ARG);
    assert_int_equal(comm_nccl_init(&c, NULL, NULL, err, sizeof(err)) < 0, 1);
}

static void world_of_one_works_in_process(void **state)
{
    (void)state;
    char name[64], err[256];
    snprintf(name, sizeof(name), "%s-%ld-solo", TAG, (long)getpid());
    comm *c;
    assert_int_equal(comm_host_init(&c, name, 0, 1, NULL, err, sizeof(err)), TN_OK);
    assert_false(rt_shm_exists(name));   /* unlinked once everyone joined */
    float v[3] = {1, 2, 3};
    assert_int_equal(comm_all_reduce_sum(c, v, 3), TN_OK);
    assert_true(v[0] == 1 && v[1] == 2 && v[2] == 3);
    size_t n = 3 * sizeof(float);
    float w[3];
    assert_int_equal(comm_all_to_all_v(c, v, &n, w, &n), TN_OK);
    assert_memory_equal(v, w, n);
    assert_int_equal(comm_memory(c), KN_BACKEND_CPU);
    /* the counters: every completed collective, by kind, with its bytes;
     * a refused call is not counted */
    float g[3];
    assert_int_equal(comm_all_gather(c, v, g, sizeof(g)), TN_OK);
    assert_int_equal(comm_broadcast(c, v, 2 * sizeof(float), 0), TN_OK);
    assert_int_equal(comm_barrier(c), TN_OK);
    assert_int_equal(comm_all_reduce_sum(c, NULL, 1), TN_ERR_ARG);
    comm_stats st;
    comm_get_stats(c, &st);
    assert_int_equal(st.calls[COMM_OP_ALL_REDUCE_SUM], 1);
    assert_int_equal(st.bytes[COMM_OP_ALL_REDUCE_SUM], 3 * sizeof(float));
    assert_int_equal(st.calls[COMM_OP_ALL_TO_ALL_V], 1);
    assert_int_equal(st.bytes[COMM_OP_ALL_TO_ALL_V], n);
    assert_int_equal(st.calls[COMM_OP_ALL_GATHER], 1);
    assert_int_equal(st.bytes[COMM_OP_ALL_GATHER], sizeof(g));
    assert_int_equal(st.calls[COMM_OP_BROADCAST], 1);
    assert_int_equal(st.bytes[COMM_OP_BROADCAST], 2 * sizeof(float));
    assert_int_equal(st.calls[COMM_OP_BARRIER], 1);
    comm_free(c);
    comm_get_stats(NULL, &st);
    assert_int_equal(st.calls[COMM_OP_BARRIER], 0);
}

/* ---- launcher ------------------------------------------------------------ */

static void fork_launcher_runs_and_supervises_ranks(void **state)
{
    (void)state;
    for (int fail = 0; fail < 2; fail++) {
        comm_launch L;
        char err[256] = "";
        assert_int_equal(comm_launch_fork(&L, 3, TAG, err, sizeof(err)), TN_OK);
        comm *c;
        int rc = comm_host_init(&c, L.name, L.rank, L.world, NULL, err, sizeof(err));
        float v = (float)L.rank;
        if (!rc)
            rc = comm_all_reduce_sum(c, &v, 1);
        if (!rc)
            comm_free(c);
        if (L.rank != 0)
            exit(rc || v != 3.0f ? 1 : (fail && L.rank == 2) ? 3 : 0);
        assert_int_equal(rc, TN_OK);
        assert_true(v == 3.0f);
        int wrc = comm_launch_wait(&L, CT_WAIT_MS, err, sizeof(err));
        if (fail) {
            assert_int_equal(wrc, -1);
            assert_non_null(strstr(err, "rank 2 exited with status 3"));
        } else {
            assert_int_equal(wrc, 0);
        }
    }
    assert_int_equal(rt_shm_count_ours(TAG), 0);
}

static void launch_flags_parse(void **state)
{
    (void)state;
    comm_launch L;
    char err[256];
    char *ok[] = {"x", "--model", "m", "--rank", "2", "--world", "4", "--comm-name", "g1"};
    assert_int_equal(comm_launch_parse_args(&L, 9, ok, err, sizeof(err)), 1);
    assert_int_equal(L.rank, 2);
    assert_int_equal(L.world, 4);
    assert_string_equal(L.name, "g1");
    char *none[] = {"x", "--model", "m"};
    assert_int_equal(comm_launch_parse_args(&L, 3, none, err, sizeof(err)), 0);
    char *partial[] = {"x", "--rank", "1"};
    assert_int_equal(comm_launch_parse_args(&L, 3, partial, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "--world"));
    char *big[] = {"x", "--rank", "4", "--world", "4", "--comm-name", "g"};
    assert_int_equal(comm_launch_parse_args(&L, 7, big, err, sizeof(err)), -1);
    char *junk[] = {"x", "--rank", "one", "--world", "4", "--comm-name", "g"};
    assert_int_equal(comm_launch_parse_args(&L, 7, junk, err, sizeof(err)), -1);
    char *dangling[] = {"x", "--world"};
    assert_int_equal(comm_launch_parse_args(&L, 2, dangling, err, sizeof(err)), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bad_arguments_are_rejected),
        cmocka_unit_test(world_of_one_works_in_process),
        cmocka_unit_test(all_reduce_matches_float64),
        cmocka_unit_test(all_gather_and_broadcast_deliver_every_byte),
        cmocka_unit_test(all_to_all_v_delivers_variable_counts),
        cmocka_unit_test(sub_groups_are_independent),
        cmocka_unit_test(killed_rank_fails_the_group_mid_collective),
        cmocka_unit_test(rank_dying_before_a_collective_fails_it),
        cmocka_unit_test(stuck_rank_times_out),
        cmocka_unit_test(departed_rank_fails_the_group),
        cmocka_unit_test(aborting_rank_fails_the_group_at_once),
        cmocka_unit_test(poll_peers_sees_a_death_outside_collectives),
        cmocka_unit_test(mismatched_collectives_fail_instead_of_mixing),
        cmocka_unit_test(missing_rank_fails_start_up_without_leaking),
        cmocka_unit_test(a_rank_cannot_join_twice),
        cmocka_unit_test(fork_launcher_runs_and_supervises_ranks),
        cmocka_unit_test(launch_flags_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
