/* The worker side of the control plane against a real ZeroMQ ROUTER socket
 * on 127.0.0.1 (the router's side of the protocol played by the test):
 * registration, acknowledgement, heartbeat clock, re-registration after
 * ERROR_CODE_UNKNOWN_WORKER, none after ERROR_CODE_WORKER_REPLACED, and
 * malformed frames being dropped. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include <zmq.h>
#include "common/status.h"
#include "common/sys.h"
#include "worker/worker_link.h"

typedef struct fake_router {
    void *ctx, *sock;
    char endpoint[64];
} fake_router;

static void router_up(fake_router *r)
{
    r->ctx = zmq_ctx_new();
    r->sock = zmq_socket(r->ctx, ZMQ_ROUTER);
    int linger = 0;
    zmq_setsockopt(r->sock, ZMQ_LINGER, &linger, sizeof linger);
    assert_int_equal(zmq_bind(r->sock, "tcp://127.0.0.1:*"), 0);
    size_t len = sizeof r->endpoint;
    assert_int_equal(zmq_getsockopt(r->sock, ZMQ_LAST_ENDPOINT, r->endpoint, &len), 0);
}

static void router_down(fake_router *r)
{
    zmq_close(r->sock);
    zmq_ctx_term(r->ctx);
}

/* Receives one WorkerMessage (10 s bound) and its sender. */
static Tandem__V1__WorkerMessage *router_recv(fake_router *r, char *rid, size_t *rid_len)
{
    zmq_pollitem_t it = {r->sock, 0, ZMQ_POLLIN, 0};
    assert_int_equal(zmq_poll(&it, 1, 10000), 1);
    ProtobufCMessage *m = NULL;
    assert_int_equal(wire_recv(r->sock, rid, WIRE_MAX_ID, rid_len,
                               &tandem__v1__worker_message__descriptor, &m, 0), 0);
    return (Tandem__V1__WorkerMessage *)m;
}

/* Pumps the link until pred holds (10 s bound). */
static void pump_until(worker_link *l, int (*pred)(worker_link *))
{
    for (int i = 0; i < 1000 && !pred(l); i++) {
        zmq_pollitem_t it = {l->sock, 0, ZMQ_POLLIN, 0};
        zmq_poll(&it, 1, 10);
        Tandem__V1__WorkerMessage *m;
        while (link_recv(l, &m))
            tandem__v1__worker_message__free_unpacked(m, NULL);
    }
    assert_true(pred(l));
}

static int is_registered(worker_link *l) { return l->registered; }
static int is_unregistered(worker_link *l) { return !l->registered; }

static void registers_heartbeats_and_reregisters(void **state)
{
    (void)state;
    fake_router r;
    router_up(&r);
    Tandem__V1__Register reg = TANDEM__V1__REGISTER__INIT;
    reg.worker_id = "dec-7";
    reg.role = TANDEM__V1__WORKER_ROLE__WORKER_ROLE_DECODER;
    reg.model = "m";
    worker_link l;
    char err[200];
    assert_int_equal(link_open(&l, "test", r.endpoint, "dec-7", &reg, err, sizeof err), 0);

    char rid[WIRE_MAX_ID];
    size_t rid_len;
    Tandem__V1__WorkerMessage *m = router_recv(&r, rid, &rid_len);
    assert_int_equal(m->body_case, TANDEM__V1__WORKER_MESSAGE__BODY_REGISTER);
    assert_string_equal(m->register_->worker_id, "dec-7");
    assert_int_equal(rid_len, 5);
    assert_memory_equal(rid, "dec-7", 5); /* routing id = worker id */
    tandem__v1__worker_message__free_unpacked(m, NULL);
    assert_false(l.registered);

    Tandem__V1__RegisterAck ack = TANDEM__V1__REGISTER_ACK__INIT;
    ack.worker_id = "dec-7";
    ack.heartbeat_interval_ms = 250;
    Tandem__V1__WorkerMessage out = TANDEM__V1__WORKER_MESSAGE__INIT;
    out.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_REGISTER_ACK;
    out.register_ack = &ack;
    assert_int_equal(wire_send(r.sock, rid, rid_len, &out.base, ZMQ_DONTWAIT), 0);
    pump_until(&l, is_registered);
    assert_int_equal(l.heartbeat_ms, 250);

    /* The heartbeat clock: due right after registration, not right after a beat. */
    uint64_t now = tn_now_ms();
    assert_int_equal(link_tick(&l, now + 250), 1);
    link_heartbeat_sent(&l, now);
    assert_int_equal(link_tick(&l, now + 100), 0);
    assert_int_equal(link_next_due_ms(&l, now + 100), 150);

    /* A malformed frame from the router is dropped, not returned. */
    assert_true(zmq_send(r.sock, rid, rid_len, ZMQ_SNDMORE) >= 0);
    assert_true(zmq_send(r.sock, "\xff\xff\xff", 3, 0) >= 0);
    /* The router forgot us: the link registers again by itself. */
    Tandem__V1__Error e = TANDEM__V1__ERROR__INIT;
    e.code = TANDEM__V1__ERROR_CODE__ERROR_CODE_UNKNOWN_WORKER;
    e.message = "unknown worker";
    out.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_ERROR;
    out.error = &e;
    assert_int_equal(wire_send(r.sock, rid, rid_len, &out.base, ZMQ_DONTWAIT), 0);
    pump_until(&l, is_unregistered);
    m = router_recv(&r, rid, &rid_len);
    assert_int_equal(m->body_case, TANDEM__V1__WORKER_MESSAGE__BODY_REGISTER);
    tandem__v1__worker_message__free_unpacked(m, NULL);

    /* Other messages reach the caller. */
    Tandem__V1__Cancel c = TANDEM__V1__CANCEL__INIT;
    c.request_id = "0123456789abcdef";
    c.release_kv = 1;
    out.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_CANCEL;
    out.cancel = &c;
    assert_int_equal(wire_send(r.sock, rid, rid_len, &out.base, ZMQ_DONTWAIT), 0);
    Tandem__V1__WorkerMessage *got = NULL;
    for (int i = 0; i < 1000 && !got; i++) {
        zmq_pollitem_t it = {l.sock, 0, ZMQ_POLLIN, 0};
        zmq_poll(&it, 1, 10);
        if (!link_recv(&l, &got))
            got = NULL;
    }
    assert_non_null(got);
    assert_int_equal(got->body_case, TANDEM__V1__WORKER_MESSAGE__BODY_CANCEL);
    assert_string_equal(got->cancel->request_id, "0123456789abcdef");
    assert_true(got->cancel->release_kv);
    tandem__v1__worker_message__free_unpacked(got, NULL);

    link_close(&l);
    router_down(&r);
}

static int is_replaced(worker_link *l) { return l->replaced[0] != 0; }

/* Nothing from the worker reaches the router within wait_ms. */
static void router_hears_nothing(fake_router *r, int wait_ms)
{
    zmq_pollitem_t it = {r->sock, 0, ZMQ_POLLIN, 0};
    assert_int_equal(zmq_poll(&it, 1, wait_ms), 0);
}

/* A process the router says a newer one under its id replaced (it was
 * frozen, not dead) stops registering: not on its retry clock, not when the
 * router later says it does not know the id. */
static void a_replaced_incarnation_stops_registering(void **state)
{
    (void)state;
    fake_router r;
    router_up(&r);
    Tandem__V1__Register reg = TANDEM__V1__REGISTER__INIT;
    reg.worker_id = "dec-8";
    reg.role = TANDEM__V1__WORKER_ROLE__WORKER_ROLE_DECODER;
    reg.incarnation = 7;
    worker_link l;
    char err[200];
    assert_int_equal(link_open(&l, "test", r.endpoint, "dec-8", &reg, err, sizeof err), 0);
    char rid[WIRE_MAX_ID];
    size_t rid_len;
    Tandem__V1__WorkerMessage *m = router_recv(&r, rid, &rid_len);
    assert_int_equal(m->body_case, TANDEM__V1__WORKER_MESSAGE__BODY_REGISTER);
    tandem__v1__worker_message__free_unpacked(m, NULL);

    Tandem__V1__Error e = TANDEM__V1__ERROR__INIT;
    e.code = TANDEM__V1__ERROR_CODE__ERROR_CODE_WORKER_REPLACED;
    e.message = "worker dec-8 incarnation 0000000000000007 was replaced by a newer process";
    Tandem__V1__WorkerMessage out = TANDEM__V1__WORKER_MESSAGE__INIT;
    out.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_ERROR;
    out.error = &e;
    assert_int_equal(wire_send(r.sock, rid, rid_len, &out.base, ZMQ_DONTWAIT), 0);
    pump_until(&l, is_replaced);
    assert_non_null(strstr(l.replaced, "refused our registration"));
    assert_non_null(strstr(l.replaced, "replaced by a newer process"));
    assert_false(l.registered);

    /* Long past the retry interval: no Register, no heartbeat. */
    uint64_t later = tn_now_ms() + 60000;
    assert_int_equal(link_tick(&l, later), 0);
    assert_true(link_next_due_ms(&l, later) > 0);
    /* "Unknown worker" does not bring it back either. */
    e.code = TANDEM__V1__ERROR_CODE__ERROR_CODE_UNKNOWN_WORKER;
    e.message = "unknown worker: register first";
    assert_int_equal(wire_send(r.sock, rid, rid_len, &out.base, ZMQ_DONTWAIT), 0);
    Tandem__V1__WorkerMessage *got = NULL;
    for (int i = 0; i < 50; i++) {
        zmq_pollitem_t it = {l.sock, 0, ZMQ_POLLIN, 0};
        zmq_poll(&it, 1, 10);
        assert_int_equal(link_recv(&l, &got), 0);
    }
    assert_int_equal(link_tick(&l, later + 60000), 0);
    router_hears_nothing(&r, 300);
    assert_non_null(strstr(l.replaced, "replaced by a newer process"));

    link_close(&l);
    router_down(&r);
}

static void bad_endpoint_or_id_is_refused(void **state)
{
    (void)state;
    Tandem__V1__Register reg = TANDEM__V1__REGISTER__INIT;
    worker_link l;
    char err[200];
    assert_int_equal(link_open(&l, "test", "nonsense://x", "w", &reg, err, sizeof err), TN_ERR_SYS);
    assert_non_null(strstr(err, "cannot connect"));
    assert_int_equal(link_open(&l, "test", "tcp://127.0.0.1:1", "", &reg, err, sizeof err), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(registers_heartbeats_and_reregisters),
        cmocka_unit_test(a_replaced_incarnation_stops_registering),
        cmocka_unit_test(bad_endpoint_or_id_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
