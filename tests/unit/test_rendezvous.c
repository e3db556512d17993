/* The TCP rendezvous of a rank group (engine/rendezvous.c): real processes
 * on 127.0.0.1 stand in for the pods of a decoder group. A group that meets
 * must agree on one result and be able to use it (the ranks then join the
 * host communicator it names and sum a value); a joiner started before its
 * leader must wait for it; a missing rank, a rank with another layout, an
 * unreachable leader, ranks on several machines with the CPU backend and
 * a leader without NCCL asked for NCCL must each end every rank's wait
 * with the same clear message, within the timeout. The device ids in the
 * hellos are set by hand: that is how the choice between NCCL and staging
 * is checked here without GPUs. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "engine/comm.h"
#include "engine/rendezvous.h"
#include "common/status.h"
#include "tests/unit/rank_testutil.h"

#define WAIT_MS 30000
#define TAG "rv"

enum { PASS = 0, E_RUN = 10, E_VALUE, E_MESSAGE, E_EXPECTED_FAIL, E_COMM };

/* A port nobody listens on now (bound to 0 and released). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        return -1;
    close(fd);
    return ntohs(a.sin_port);
}

typedef struct rv_case {
    char leader[64];
    int world;             /* what every rank says */
    int absent;            /* this rank never runs (-1: none) */
    int leader_delay_ms;   /* rank 0 starts late */
    int odd_rank, odd_ep;  /* this rank says ep = odd_ep (-1: none) */
    int backend;           /* kn_backend_kind of every rank */
    int want;
    int split_hosts;       /* odd ranks say they are on another host */
    int share_gpu;         /* ranks 0 and 1 report one device id */
    int timeout_ms;
    const char *expect;    /* "" = must succeed; else part of every rank's error */
    const char *late;      /* also accepted from a rank that joins after rank 0 gave up
                              (it finds nobody listening): NULL = none */
    int expect_kind;
    int use_it;            /* on success, join the named host communicator and sum */
} rv_case;

static int rv_rank(const rt_rank *r, void *arg)
{
    const rv_case *c = arg;
    if (r->rank == c->absent)
        return PASS;
    if (r->rank == 0 && c->leader_delay_ms) {
        struct timespec ts = {0, (long)c->leader_delay_ms * 1000000L};
        nanosleep(&ts, NULL);
    }
    rdv_hello me = {.rank = r->rank, .world = c->world, .tp = 1, .ep = c->world,
                    .dp = c->world, .backend = c->backend, .want = c->want};
    if (r->rank == c->odd_rank)
        me.ep = c->odd_ep;
    snprintf(me.host, sizeof me.host, "%s", c->split_hosts && (r->rank & 1) ? "pod-b" : "pod-a");
    if (c->backend == KN_BACKEND_CPU)
        snprintf(me.device, sizeof me.device, "cpu");
    else
        snprintf(me.device, sizeof me.device, "GPU-%d",
                 c->share_gpu && r->rank == 1 ? 0 : r->rank);
    rdv_result res;
    char err[400] = "";
    int rc = rdv_run(c->leader, &me, c->timeout_ms, &res, err, sizeof err);
    if (c->expect[0]) {
        if (rc == TN_OK)
            return E_EXPECTED_FAIL;
        /* a latecomer finds nobody listening, or a connection rank 0
         * closes on its way out */
        const int late = c->late && r->rank != 0 && r->rank != c->odd_rank &&
                         (strstr(err, c->late) || strstr(err, "closed the connection"));
        if (!strstr(err, c->expect) && !late) {
            fprintf(stderr, "rank %d: message '%s' lacks '%s'\n", r->rank, err, c->expect);
            return E_MESSAGE;
        }
        return PASS;
    }
    if (rc) {
        fprintf(stderr, "rank %d: %s\n", r->rank, err);
        return E_RUN;
    }
    if (res.kind != c->expect_kind || res.same_host != !c->split_hosts)
        return E_VALUE;
    if (!c->use_it)
        return PASS;
    comm *w = NULL;
    if (comm_host_init(&w, res.comm_name, r->rank, c->world, NULL, err, sizeof err)) {
        fprintf(stderr, "rank %d: joining %s: %s\n", r->rank, res.comm_name, err);
        return E_COMM;
    }
    float v = (float)(r->rank + 1);
    int code = comm_all_reduce_sum(w, &v, 1) ||
                       v != (float)(c->world * (c->world + 1) / 2) ? E_COMM : PASS;
    comm_free(w);
    return code;
}

static rv_case base_case(int world)
{
    rv_case c;
    memset(&c, 0, sizeof c);
    snprintf(c.leader, sizeof c.leader, "127.0.0.1:%d", free_port());
    c.world = world;
    c.absent = -1;
    c.odd_rank = -1;
    c.backend = KN_BACKEND_CPU;
    c.want = RANK_COMM_AUTO;
    c.timeout_ms = 20000;
    c.expect = "";
    c.expect_kind = RANK_COMM_HOST;
    return c;
}

static void run_case(const rv_case *c)
{
    rt_group g;
    int status[RT_MAX_RANKS];
    assert_int_equal(rt_start(&g, c->world, TAG, rv_rank, (void *)c), 0);
    rt_wait(&g, WAIT_MS, status);
    for (int r = 0; r < c->world; r++) {
        if (status[r] != PASS)
            print_error("rank %d: status %d\n", r, status[r]);
        assert_int_equal(status[r], PASS);
    }
    assert_int_equal(rt_shm_count_ours(TAG), 0);
}

static void a_group_meets_and_uses_the_result(void **state)
{
    (void)state;
    rv_case c = base_case(4);
    c.use_it = 1;
    run_case(&c);
    /* a joiner that starts first waits for its leader */
    c = base_case(3);
    c.leader_delay_ms = 700;
    c.use_it = 1;
    run_case(&c);
    /* a leader named by host name listens on every interface */
    c = base_case(2);
    snprintf(c.leader, sizeof c.leader, "localhost:%d", free_port());
    c.use_it = 1;
    run_case(&c);
    /* staged on request */
    c = base_case(2);
    c.want = RANK_COMM_STAGED;
    c.expect_kind = RANK_COMM_STAGED;
    run_case(&c);
}

static void the_leader_chooses_by_device_id(void **state)
{
    (void)state;
    /* CUDA ranks on one host, two on one GPU: staged through host memory */
    rv_case c = base_case(3);
    c.backend = KN_BACKEND_CUDA;
    c.share_gpu = 1;
    c.expect_kind = RANK_COMM_STAGED;
    run_case(&c);
    /* asking for NCCL with a shared GPU: refused, naming the ranks */
    c.want = RANK_COMM_NCCL;
    c.expect = "ranks 0 and 1 share the GPU GPU-0";
    run_case(&c);
    /* distinct GPUs on two machines: NCCL, whose id only a build with it
     * can make; without, every rank hears why */
    c = base_case(2);
    c.backend = KN_BACKEND_CUDA;
    c.split_hosts = 1;
#ifdef TANDEM_NCCL
    c.expect_kind = RANK_COMM_NCCL;
#else
    c.expect = "rank 0: comm: NCCL support is not built in";
#endif
    run_case(&c);
    /* the CPU backend cannot span machines */
    c = base_case(2);
    c.split_hosts = 1;
    c.expect = "needs every rank on one machine";
    run_case(&c);
}

static void failures_end_every_wait_with_a_clear_message(void **state)
{
    (void)state;
    rv_case c = base_case(3);
    c.absent = 2;
    c.timeout_ms = 1500;
    c.expect = "rank 2 of 3 did not join rank 0 on port";
    run_case(&c);
    /* rank 1 may join after rank 0 refused rank 2: it finds nobody */
    c = base_case(3);
    c.odd_rank = 2;
    c.odd_ep = 1;
    c.timeout_ms = 3000;
    c.expect = "rank 2 (host pod-a) has ep 1, rank 0 has 3";
    c.late = "cannot reach rank 0";
    run_case(&c);
    c = base_case(2);
    c.absent = 0;
    c.timeout_ms = 800;
    c.expect = "cannot reach rank 0 at 127.0.0.1:";
    run_case(&c);
}

static void addresses_parse(void **state)
{
    (void)state;
    char host[64];
    int port = 0;
    assert_int_equal(rdv_parse_address("tandem-decoder-0.svc:9000", host, sizeof host, &port), 0);
    assert_string_equal(host, "tandem-decoder-0.svc");
    assert_int_equal(port, 9000);
    assert_int_equal(rdv_parse_address("leader", host, sizeof host, &port), 0);
    assert_int_equal(port, RDV_DEFAULT_PORT);
    assert_int_equal(rdv_parse_address("leader:0", host, sizeof host, &port), -1);
    assert_int_equal(rdv_parse_address("leader:x", host, sizeof host, &port), -1);
    assert_int_equal(rdv_parse_address(":80", host, sizeof host, &port), -1);
    rdv_hello me = {.rank = 3, .world = 2};
    rdv_result res;
    char err[200];
    assert_int_equal(rdv_run("127.0.0.1:1", &me, 100, &res, err, sizeof err), TN_ERR_ARG);
    assert_non_null(strstr(err, "out of range"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_group_meets_and_uses_the_result),
        cmocka_unit_test(the_leader_chooses_by_device_id),
        cmocka_unit_test(failures_end_every_wait_with_a_clear_message),
        cmocka_unit_test(addresses_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
