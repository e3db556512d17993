/* The staged communicator (engine/comm_staged.c) and the choice of a rank
 * group's model communicator (engine/rank_comm.c), on the CPU.
 *
 * The staged communicator's protocol (copy into the staging buffer, the
 * inner collective there, copy back) runs here with the CPU backend, whose
 * copies are memmoves: real ranks (forked processes) over a real host
 * communicator, results checked against float64 sums and the exact bytes
 * each peer sent, and against the host communicator's own result on the
 * same data (bitwise: staging must not change a single bit). A killed rank
 * must fail the staged group with the host communicator's message. The
 * choice of communicator is a pure function of the ranks' device ids; its
 * every branch is checked, and rank_comm_open is run on forked ranks. */
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
#include "engine/rank_comm.h"
#include "kernels/backend.h"
#include "common/status.h"
#include "tests/unit/comm_testutil.h"
#include "tests/unit/rank_testutil.h"

#define TAG "cs"

static unsigned char byte_of(int from, int to, size_t i)
{
    return (unsigned char)(from * 37 + to * 11 + i * 7 + 3);
}

/* A host world and, split from it, a staged communicator over the CPU
 * backend (slot_bytes small, so large messages go through the host
 * communicator's chunking underneath the staging). */
typedef struct ranks {
    comm *host, *staged;
    kn_backend be;
} ranks;

static int open_ranks(const rt_rank *r, ranks *x, size_t slot_bytes)
{
    memset(x, 0, sizeof *x);
    char err[256];
    comm_options o = {.slot_bytes = slot_bytes};
    if (kn_backend_init_cpu(&x->be) ||
        comm_host_init(&x->host, r->name, r->rank, r->world, &o, err, sizeof err)) {
        fprintf(stderr, "rank %d: start: %s\n", r->rank, err);
        return E_INIT;
    }
    comm *dup = NULL;
    if (comm_split(x->host, 0, r->rank, &dup) ||
        comm_staged_init(&x->staged, dup, &x->be, err, sizeof err)) {
        fprintf(stderr, "rank %d: staged: %s\n", r->rank, err);
        return E_INIT;
    }
    if (comm_rank(x->staged) != r->rank || comm_size(x->staged) != r->world ||
        comm_memory(x->staged) != KN_BACKEND_CPU)
        return E_VALUE;
    return PASS;
}

static void close_ranks(ranks *x)
{
    comm_free(x->staged);
    comm_free(x->host);
    kn_backend_free(&x->be);
}

/* ---- every collective through the staging -------------------------------- */

static int collectives_rank(const rt_rank *r, void *arg)
{
    const size_t n = *(const size_t *)arg;
    ranks x;
    int code = open_ranks(r, &x, 4096);
    const int W = r->world, me = r->rank;
    float *a = malloc(sizeof(float) * (n + 1)), *b = malloc(sizeof(float) * (n + 1));
    unsigned char *send = malloc((size_t)W * (n + 1) + 1), *recv = malloc((size_t)W * (n + W) + 1);
    if (!a || !b || !send || !recv)
        code = E_SETUP;
    /* all-reduce: float64 reference, and bitwise the host communicator's */
    for (size_t i = 0; i < n && !code; i++)
        a[i] = b[i] = ct_datum(me, i);
    if (!code && (comm_all_reduce_sum(x.staged, a, n) || comm_all_reduce_sum(x.host, b, n)))
        code = E_CALL;
    for (size_t i = 0; i < n && !code; i++) {
        double ref = 0, mag = 0;
        for (int q = 0; q < W; q++) {
            ref += (double)ct_datum(q, i);
            mag += fabs((double)ct_datum(q, i));
        }
        if (fabs((double)a[i] - ref) > 1e-6 * mag + 1e-30 || memcmp(&a[i], &b[i], 4) != 0) {
            fprintf(stderr, "rank %d: element %zu = %.9g, host %.9g, float64 %.9g\n", me, i,
                    (double)a[i], (double)b[i], ref);
            code = E_VALUE;
        }
    }
    /* all-gather of n bytes */
    for (size_t i = 0; i < n && !code; i++)
        send[i] = byte_of(me, 0, i);
    if (!code && comm_all_gather(x.staged, send, recv, n))
        code = E_CALL;
    for (int q = 0; q < W && !code; q++)
        for (size_t i = 0; i < n && !code; i++)
            if (recv[(size_t)q * n + i] != byte_of(q, 0, i))
                code = E_VALUE;
    /* broadcast from the last rank */
    for (size_t i = 0; i < n && !code; i++)
        send[i] = me == W - 1 ? byte_of(W - 1, 1, i) : 0;
    if (!code && comm_broadcast(x.staged, send, n, W - 1))
        code = E_CALL;
    for (size_t i = 0; i < n && !code; i++)
        if (send[i] != byte_of(W - 1, 1, i))
            code = E_VALUE;
    /* all-to-all-v: rank s sends (n + s + p) % (n + 1) bytes to p, zeros included */
    size_t sb[COMM_MAX_WORLD], rb[COMM_MAX_WORLD], off = 0;
    for (int p = 0; p < W; p++) {
        sb[p] = (n + (size_t)me + (size_t)p) % (n + 1);
        rb[p] = (n + (size_t)p + (size_t)me) % (n + 1);
        for (size_t i = 0; i < sb[p] && !code; i++)
            send[off + i] = byte_of(me, p, i);
        off += sb[p];
    }
    if (!code && comm_all_to_all_v(x.staged, send, sb, recv, rb))
        code = E_CALL;
    off = 0;
    for (int p = 0; p < W && !code; p++) {
        for (size_t i = 0; i < rb[p] && !code; i++)
            if (recv[off + i] != byte_of(p, me, i))
                code = E_VALUE;
        off += rb[p];
    }
    /* a split of the staged communicator is staged too: pairs sum */
    comm *pair = NULL;
    if (!code && (comm_barrier(x.staged) || comm_split(x.staged, me / 2, me, &pair)))
        code = E_CALL;
    float v = (float)(me + 1);
    if (!code && (comm_memory(pair) != KN_BACKEND_CPU || comm_all_reduce_sum(pair, &v, 1)))
        code = E_CALL;
    float want = 0;
    for (int q = (me / 2) * 2; q < W && q < (me / 2) * 2 + 2; q++)
        want += (float)(q + 1);
    if (!code && v != want)
        code = E_VALUE;
    comm_stats st;
    comm_get_stats(x.staged, &st);
    if (!code && (st.calls[COMM_OP_ALL_REDUCE_SUM] != 1 || st.calls[COMM_OP_ALL_TO_ALL_V] != 1 ||
                  st.calls[COMM_OP_BARRIER] != 1))
        code = E_VALUE;
    if (code)
        fprintf(stderr, "rank %d: collectives (n %zu): code %d: %s\n", me, n, code,
                comm_error(x.staged));
    comm_free(pair);
    close_ranks(&x);
    free(a);
    free(b);
    free(send);
    free(recv);
    return code;
}

static void staged_collectives_match_the_host_communicator(void **state)
{
    (void)state;
    const size_t sizes[] = {0, 1, 1000, 70001};
    for (int w = 2; w <= 4; w++)
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
            ct_run_group(w, TAG, collectives_rank, (void *)&sizes[i], NULL);
}

/* ---- a dead rank fails the staged group ---------------------------------- */

static int dying_rank(const rt_rank *r, void *arg)
{
    (void)arg;
    ranks x;
    int code = open_ranks(r, &x, 0);
    if (code)
        return code;
    float v[64] = {0};
    if (comm_all_reduce_sum(x.staged, v, 64))
        return E_CALL;
    if (r->rank == 1)
        raise(SIGKILL);
    comm_set_timeout(x.staged, 20000);
    code = ct_expect_peer_error(r, x.staged, comm_all_reduce_sum(x.staged, v, 64), "rank 1 (pid");
    close_ranks(&x);
    return code;
}

static void a_dead_rank_fails_the_staged_group(void **state)
{
    (void)state;
    const int want[3] = {PASS, 128 + SIGKILL, PASS};
    ct_run_group(3, TAG, dying_rank, NULL, want);
}

/* ---- the choice ------------------------------------------------------------ */

static void choice_follows_the_devices(void **state)
{
    (void)state;
    const char distinct[3][TM_DEVICE_ID_MAX] = {"GPU-a", "GPU-b", "GPU-c"};
    const char shared[3][TM_DEVICE_ID_MAX] = {"GPU-a", "GPU-b", "GPU-a"};
    const char cpus[2][TM_DEVICE_ID_MAX] = {"cpu", "cpu"};
    char err[300];
    rank_comm_kind k;
    /* CPU: host, staged on request, never NCCL */
    assert_int_equal(rank_comm_choose(KN_BACKEND_CPU, RANK_COMM_AUTO, cpus, 2, 1, &k, err,
                                      sizeof err), TN_OK);
    assert_int_equal(k, RANK_COMM_HOST);
    assert_int_equal(rank_comm_choose(KN_BACKEND_CPU, RANK_COMM_STAGED, cpus, 2, 1, &k, err,
                                      sizeof err), TN_OK);
    assert_int_equal(k, RANK_COMM_STAGED);
    assert_int_equal(rank_comm_choose(KN_BACKEND_CPU, RANK_COMM_NCCL, cpus, 2, 1, &k, err,
                                      sizeof err), TN_ERR_ARG);
    assert_non_null(strstr(err, "--device cuda"));
    /* CUDA: NCCL on distinct GPUs, staged when two share one */
    assert_int_equal(rank_comm_choose(KN_BACKEND_CUDA, RANK_COMM_AUTO, distinct, 3, 1, &k, err,
                                      sizeof err), TN_OK);
    assert_int_equal(k, RANK_COMM_NCCL);
    assert_int_equal(rank_comm_choose(KN_BACKEND_CUDA, RANK_COMM_AUTO, shared, 3, 1, &k, err,
                                      sizeof err), TN_OK);
    assert_int_equal(k, RANK_COMM_STAGED);
    assert_int_equal(rank_comm_choose(KN_BACKEND_CUDA, RANK_COMM_NCCL, shared, 3, 1, &k, err,
                                      sizeof err), TN_ERR_ARG);
    assert_non_null(strstr(err, "ranks 0 and 2 share the GPU GPU-a"));
    assert_int_equal(rank_comm_choose(KN_BACKEND_CUDA, RANK_COMM_STAGED, distinct, 3, 1, &k, err,
                                      sizeof err), TN_OK);
    assert_int_equal(k, RANK_COMM_STAGED);
    assert_int_equal(rank_comm_choose(KN_BACKEND_CUDA, RANK_COMM_HOST, distinct, 3, 1, &k, err,
                                      sizeof err), TN_ERR_ARG);
    assert_non_null(strstr(err, "cannot take GPU buffers"));
    /* several machines: only NCCL works there */
    assert_int_equal(rank_comm_choose(KN_BACKEND_CUDA, RANK_COMM_AUTO, distinct, 3, 0, &k, err,
                                      sizeof err), TN_OK);
    assert_int_equal(k, RANK_COMM_NCCL);
    assert_int_equal(rank_comm_choose(KN_BACKEND_CPU, RANK_COMM_AUTO, cpus, 2, 0, &k, err,
                                      sizeof err), TN_ERR_ARG);
    assert_non_null(strstr(err, "needs every rank on one machine"));
    /* names */
    assert_int_equal(rank_comm_parse("staged", &k), 0);
    assert_int_equal(k, RANK_COMM_STAGED);
    assert_int_equal(rank_comm_parse("mpi", &k), -1);
    assert_string_equal(rank_comm_name(RANK_COMM_NCCL), "nccl");
}

/* rank_comm_open on real ranks: the CPU's host choice and the staged one
 * both carry an all-reduce. */
static int open_rank(const rt_rank *r, void *arg)
{
    const rank_comm_kind want = *(const rank_comm_kind *)arg;
    kn_backend be;
    char err[256];
    comm *world = NULL, *model = NULL;
    rank_comm_kind got = RANK_COMM_AUTO;
    if (kn_backend_init_cpu(&be) ||
        comm_host_init(&world, r->name, r->rank, r->world, NULL, err, sizeof err))
        return E_INIT;
    int code = PASS;
    if (rank_comm_open(world, &be, want, &model, &got, err, sizeof err)) {
        fprintf(stderr, "rank %d: %s\n", r->rank, err);
        code = E_CALL;
    }
    rank_comm_kind expect = want == RANK_COMM_STAGED ? RANK_COMM_STAGED : RANK_COMM_HOST;
    float v = 1.0f;
    if (!code && (got != expect || comm_all_reduce_sum(model, &v, 1) || v != (float)r->world))
        code = E_VALUE;
    comm_free(model);
    comm_free(world);
    kn_backend_free(&be);
    return code;
}

static void open_builds_the_chosen_communicator(void **state)
{
    (void)state;
    rank_comm_kind want = RANK_COMM_AUTO;
    ct_run_group(2, TAG, open_rank, &want, NULL);
    want = RANK_COMM_STAGED;
    ct_run_group(3, TAG, open_rank, &want, NULL);
}

static void staged_init_refuses_bad_arguments(void **state)
{
    (void)state;
    comm *c = (comm *)1;
    char err[200];
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), 0);
    assert_int_equal(comm_staged_init(&c, NULL, &be, err, sizeof err), TN_ERR_ARG);
    assert_null(c);
    assert_non_null(strstr(err, "comm_staged_init"));
    kn_backend_free(&be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(staged_collectives_match_the_host_communicator),
        cmocka_unit_test(a_dead_rank_fails_the_staged_group),
        cmocka_unit_test(choice_follows_the_devices),
        cmocka_unit_test(open_builds_the_chosen_communicator),
        cmocka_unit_test(staged_init_refuses_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
