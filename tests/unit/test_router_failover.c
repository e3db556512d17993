/* The router's failover rules through its real state machine
 * (dispatch_worker_message, rpc_handle_message, dispatch_check_progress),
 * with workers and an RPC client played by ZeroMQ DEALER sockets on inproc
 * endpoints, so every message the router sends is read back and checked:
 *   - a registration under a known id with a new incarnation re-places the
 *     old process's requests at once, on the new process, under a new wire
 *     id; late messages about the old one are ignored; the replaced
 *     incarnation cannot register again; the accounting follows, so the new
 *     process can drain and deregister once its request finished;
 *   - a request whose worker moves nothing for --progress-timeout-ms is
 *     placed again, and fails with an explicit error after MAX_ATTEMPTS;
 *   - a send that fails (no connection for the worker's id) holds the
 *     request for another worker instead of failing it;
 *   - a router that is shutting down refuses new requests with NO_CAPACITY;
 *   - n > 1: a prompt's choices ride on the first one's placement (one
 *     DecodeAssignment with branch ids, one prefill drawing each branch's
 *     first token with its seed, one StartDecode), then go their own ways;
 *     losing the decoder before the prefill places each on its own.
 * (docs/RELIABILITY.md) */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>
#include <cmocka.h>
#include "common/sys.h"
#include "router/router.h"

#define DEC TANDEM__V1__WORKER_ROLE__WORKER_ROLE_DECODER
#define PRE TANDEM__V1__WORKER_ROLE__WORKER_ROLE_PREFILLER
#define MODEL "m"

typedef struct fixture {
    router_ctx *ctx;
    void *d0, *p0, *c0; /* connected peers */
    char wep[64], rep[64];
} fixture;

static void *bound_router(void *zctx, const char *ep)
{
    void *s = zmq_socket(zctx, ZMQ_ROUTER);
    int one = 1, linger = 0;
    assert_non_null(s);
    zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    assert_int_equal(zmq_bind(s, ep), 0);
    return s;
}

/* A DEALER with this routing id, connected, and known to the router. */
static void *peer(void *zctx, const char *ep, void *router, const char *id)
{
    void *d = zmq_socket(zctx, ZMQ_DEALER);
    int linger = 0;
    assert_non_null(d);
    zmq_setsockopt(d, ZMQ_ROUTING_ID, id, strlen(id));
    zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof linger);
    assert_int_equal(zmq_connect(d, ep), 0);
    assert_int_equal(zmq_send(d, "", 0, 0), 0);
    char buf[64];
    assert_true(zmq_recv(router, buf, sizeof buf, 0) >= 0);
    assert_int_equal(zmq_recv(router, buf, sizeof buf, 0), 0);
    return d;
}

static int setup(void **state)
{
    static int seq;
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    router_ctx *ctx = f->ctx = calloc(1, sizeof *ctx);
    assert_non_null(ctx);
    router_config_default(&ctx->cfg);
    ctx->cfg.progress_timeout_ms = 1000;
    char err[256];
    assert_int_equal(codec_init(&ctx->codec, "none", err, sizeof err), 0);
    pthread_mutex_init(&ctx->lock, NULL);
    metrics_init(&ctx->metrics);
    workers_init(&ctx->workers);
    ctx->next_key = 1;
    ctx->wake_fd = tn_wakefd_open();
    ctx->shutdown_fd = tn_wakefd_open();
    ctx->zctx = zmq_ctx_new();
    assert_non_null(ctx->zctx);
    snprintf(f->wep, sizeof f->wep, "inproc://failover-w-%d", seq);
    snprintf(f->rep, sizeof f->rep, "inproc://failover-r-%d", seq++);
    ctx->worker_sock = bound_router(ctx->zctx, f->wep);
    ctx->rpc_sock = bound_router(ctx->zctx, f->rep);
    f->d0 = peer(ctx->zctx, f->wep, ctx->worker_sock, "d0");
    f->p0 = peer(ctx->zctx, f->wep, ctx->worker_sock, "p0");
    f->c0 = peer(ctx->zctx, f->rep, ctx->rpc_sock, "c0");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    router_ctx *ctx = f->ctx;
    ctx->stopping = ctx->stop_final = 1;
    dispatch_fail_all(ctx, "test over");
    dispatch_retry_held(ctx);
    for (int b = 0; b < ROUTER_HASH_BUCKETS; b++)
        while (ctx->table[b])
            request_table_remove(ctx, ctx->table[b]);
    workers_free(&ctx->workers);
    zmq_close(f->d0);
    zmq_close(f->p0);
    zmq_close(f->c0);
    zmq_close(ctx->worker_sock);
    zmq_close(ctx->rpc_sock);
    zmq_ctx_term(ctx->zctx);
    close(ctx->wake_fd);
    close(ctx->shutdown_fd);
    codec_free(&ctx->codec);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
    free(f);
    return 0;
}

/* ---- the workers' side */

static void from_worker(fixture *f, const char *id, Tandem__V1__WorkerMessage *m)
{
    dispatch_worker_message(f->ctx, id, strlen(id), m);
    dispatch_process_queues(f->ctx);
}

static void register_worker(fixture *f, const char *id, int role, uint64_t incarnation)
{
    Tandem__V1__Register r = TANDEM__V1__REGISTER__INIT;
    r.worker_id = (char *)id;
    r.role = role;
    r.model = MODEL;
    r.vocab_size = 512;
    r.max_context = 1024;
    r.page_size = 16;
    r.kv_pages_total = role == DEC ? 64 : 0;
    r.incarnation = incarnation;
    Tandem__V1__WorkerMessage m = TANDEM__V1__WORKER_MESSAGE__INIT;
    m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_REGISTER;
    m.register_ = &r;
    from_worker(f, id, &m);
}

static void kv_ready(fixture *f, const char *decoder, const char *wid)
{
    int32_t pages[1] = {0};
    Tandem__V1__KvDestination d = TANDEM__V1__KV_DESTINATION__INIT;
    d.decoder_id = (char *)decoder;
    d.page_ids = pages;
    d.n_page_ids = 1;
    d.page_size = 16;
    Tandem__V1__KvReady k = TANDEM__V1__KV_READY__INIT;
    k.request_id = (char *)wid;
    k.destination = &d;
    Tandem__V1__WorkerMessage m = TANDEM__V1__WORKER_MESSAGE__INIT;
    m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_KV_READY;
    m.kv_ready = &k;
    from_worker(f, decoder, &m);
}

/* The next message the router sent to peer s of this kind (others before it
 * are skipped), or NULL when none is waiting. Free with free_unpacked. */
static Tandem__V1__WorkerMessage *next_of(void *s, int body_case)
{
    for (;;) {
        ProtobufCMessage *msg = NULL;
        int rc = wire_recv(s, NULL, 0, NULL, &tandem__v1__worker_message__descriptor, &msg,
                           ZMQ_DONTWAIT);
        if (rc == -1)
            return NULL;
        assert_int_not_equal(rc, -2);
        Tandem__V1__WorkerMessage *m = (Tandem__V1__WorkerMessage *)msg;
        if ((int)m->body_case == body_case)
            return m;
        tandem__v1__worker_message__free_unpacked(m, NULL);
    }
}

/* The wire id of the next DecodeAssignment (or PrefillAssignment) to s. */
static void next_assignment(void *s, int body_case, char *wid, size_t cap)
{
    Tandem__V1__WorkerMessage *m = next_of(s, body_case);
    assert_non_null(m);
    snprintf(wid, cap, "%s", body_case == TANDEM__V1__WORKER_MESSAGE__BODY_DECODE_ASSIGNMENT
                                 ? m->decode_assignment->request_id
                                 : m->prefill_assignment->request_id);
    tandem__v1__worker_message__free_unpacked(m, NULL);
}

/* ---- the RPC client's side */

static void generate(fixture *f)
{
    int32_t prompt[4] = {5, 6, 7, 8};
    Tandem__V1__GenerateRequest g = TANDEM__V1__GENERATE_REQUEST__INIT;
    g.model = MODEL;
    g.prompt_tokens = prompt;
    g.n_prompt_tokens = 4;
    g.max_tokens = 4;
    g.ignore_eos = 1;
    g.stream = 1;
    g.client_tag = "t";
    Tandem__V1__ClientMessage m = TANDEM__V1__CLIENT_MESSAGE__INIT;
    m.body_case = TANDEM__V1__CLIENT_MESSAGE__BODY_GENERATE;
    m.generate = &g;
    rpc_handle_message(f->ctx, (const uint8_t *)"c0", 2, &m);
    dispatch_process_queues(f->ctx);
}

/* The client's last message: its final chunk's finish reason and error
 * message, or an Error's code. */
static int client_end(fixture *f, char *msg, size_t cap)
{
    int last = -1;
    msg[0] = '\0';
    for (;;) {
        ProtobufCMessage *pm = NULL;
        if (wire_recv(f->c0, NULL, 0, NULL, &tandem__v1__client_message__descriptor, &pm,
                      ZMQ_DONTWAIT) != 0)
            return last;
        Tandem__V1__ClientMessage *m = (Tandem__V1__ClientMessage *)pm;
        if (m->body_case == TANDEM__V1__CLIENT_MESSAGE__BODY_CHUNK && m->chunk->finish_reason) {
            last = m->chunk->finish_reason;
            if (m->chunk->error)
                snprintf(msg, cap, "%s", m->chunk->error->message);
        } else if (m->body_case == TANDEM__V1__CLIENT_MESSAGE__BODY_ERROR) {
            last = 1000 + (int)m->error->code;
            snprintf(msg, cap, "%s", m->error->message);
        }
        tandem__v1__client_message__free_unpacked(m, NULL);
    }
}

static router_request *only_request(fixture *f)
{
    assert_int_equal(f->ctx->n_active, 1);
    for (int b = 0; b < ROUTER_HASH_BUCKETS; b++)
        if (f->ctx->table[b])
            return f->ctx->table[b];
    return NULL;
}

static router_worker *worker(fixture *f, const char *id)
{
    return workers_find(&f->ctx->workers, id, strlen(id));
}

/* ---- the cases */

static void restart_places_the_old_processs_requests_at_once(void **state)
{
    fixture *f = *state;
    register_worker(f, "d0", DEC, 1);
    register_worker(f, "p0", PRE, 7);
    generate(f);
    char a[24], b[24], p[24];
    next_assignment(f->d0, TANDEM__V1__WORKER_MESSAGE__BODY_DECODE_ASSIGNMENT, a, sizeof a);
    kv_ready(f, "d0", a);
    next_assignment(f->p0, TANDEM__V1__WORKER_MESSAGE__BODY_PREFILL_ASSIGNMENT, p, sizeof p);
    assert_string_equal(a, p);
    uint64_t old_serial = worker(f, "d0")->serial;

    /* decode-0 restarts: same id, new incarnation, before any heartbeat lapsed. */
    register_worker(f, "d0", DEC, 2);
    router_worker *d = worker(f, "d0");
    assert_non_null(d);
    assert_true(d->serial != old_serial);
    assert_int_equal(d->incarnation, 2);
    router_request *r = only_request(f);
    assert_int_equal(r->attempts, 1);
    assert_int_equal(r->stage, STAGE_RESERVING);
    assert_string_not_equal(r->wid, a);
    next_assignment(f->d0, TANDEM__V1__WORKER_MESSAGE__BODY_DECODE_ASSIGNMENT, b, sizeof b);
    assert_string_equal(b, r->wid);
    /* Counted once, on the new entry; the prefiller's count went with the
     * cancelled prefill, which it is told to drop. */
    assert_int_equal(d->in_flight, 1);
    assert_int_equal(worker(f, "p0")->in_flight, 0);
    Tandem__V1__WorkerMessage *c = next_of(f->p0, TANDEM__V1__WORKER_MESSAGE__BODY_CANCEL);
    assert_non_null(c);
    assert_string_equal(c->cancel->request_id, a);
    tandem__v1__worker_message__free_unpacked(c, NULL);

    /* A late KvReady about the old attempt matches nothing: released. */
    kv_ready(f, "d0", a);
    assert_int_equal(r->stage, STAGE_RESERVING);
    c = next_of(f->d0, TANDEM__V1__WORKER_MESSAGE__BODY_CANCEL);
    assert_non_null(c);
    assert_string_equal(c->cancel->request_id, a);
    assert_true(c->cancel->release_kv);
    tandem__v1__worker_message__free_unpacked(c, NULL);

    /* The replaced process may not come back under the id. */
    register_worker(f, "d0", DEC, 1);
    assert_int_equal(worker(f, "d0")->incarnation, 2);
    Tandem__V1__WorkerMessage *e = next_of(f->d0, TANDEM__V1__WORKER_MESSAGE__BODY_ERROR);
    assert_non_null(e);
    assert_int_equal(e->error->code, TANDEM__V1__ERROR_CODE__ERROR_CODE_WORKER_REPLACED);
    assert_non_null(strstr(e->error->message, "replaced by a newer process"));
    tandem__v1__worker_message__free_unpacked(e, NULL);

    /* The new process runs the request to its end ... */
    kv_ready(f, "d0", b);
    next_assignment(f->p0, TANDEM__V1__WORKER_MESSAGE__BODY_PREFILL_ASSIGNMENT, p, sizeof p);
    Tandem__V1__PrefillResult pr = TANDEM__V1__PREFILL_RESULT__INIT;
    pr.request_id = b;
    pr.first_token = 9;
    pr.transfer = TANDEM__V1__TRANSFER_STATUS__TRANSFER_STATUS_COMPLETE;
    Tandem__V1__WorkerMessage m = TANDEM__V1__WORKER_MESSAGE__INIT;
    m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_PREFILL_RESULT;
    m.prefill_result = &pr;
    from_worker(f, "p0", &m);
    int32_t toks[3] = {10, 11, 12};
    Tandem__V1__TokenChunk ch = TANDEM__V1__TOKEN_CHUNK__INIT;
    ch.request_id = b;
    ch.tokens = toks;
    ch.n_tokens = 3;
    ch.finish_reason = TANDEM__V1__FINISH_REASON__FINISH_REASON_LENGTH;
    Tandem__V1__TokenChunk *chs[1] = {&ch};
    Tandem__V1__TokenBatch tb = TANDEM__V1__TOKEN_BATCH__INIT;
    tb.chunks = chs;
    tb.n_chunks = 1;
    m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_TOKEN_BATCH;
    m.token_batch = &tb;
    from_worker(f, "d0", &m);
    char msg[400];
    assert_int_equal(client_end(f, msg, sizeof msg), TANDEM__V1__FINISH_REASON__FINISH_REASON_LENGTH);
    assert_int_equal(f->ctx->n_active, 0);

    /* ... and, holding nothing in the router's counts, may leave. */
    assert_int_equal(worker(f, "d0")->in_flight, 0);
    assert_int_equal(worker(f, "d0")->pages_committed, 0);
    Tandem__V1__Deregister dr = TANDEM__V1__DEREGISTER__INIT;
    dr.worker_id = "d0";
    m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_DEREGISTER;
    m.deregister = &dr;
    from_worker(f, "d0", &m);
    Tandem__V1__WorkerMessage *ack = next_of(f->d0, TANDEM__V1__WORKER_MESSAGE__BODY_DEREGISTER_ACK);
    assert_non_null(ack);
    assert_true(ack->deregister_ack->accepted);
    tandem__v1__worker_message__free_unpacked(ack, NULL);
    assert_null(worker(f, "d0"));
}

static void a_repeated_registration_keeps_the_work(void **state)
{
    fixture *f = *state;
    register_worker(f, "d0", DEC, 5);
    register_worker(f, "p0", PRE, 6);
    generate(f);
    router_request *r = only_request(f);
    char wid[24];
    snprintf(wid, sizeof wid, "%s", r->wid);
    register_worker(f, "d0", DEC, 5); /* the same process asking again */
    assert_int_equal(r->attempts, 0);
    assert_string_equal(r->wid, wid);
    assert_int_equal(worker(f, "d0")->in_flight, 1);
}

static void no_progress_places_again_then_fails_explicitly(void **state)
{
    fixture *f = *state;
    register_worker(f, "d0", DEC, 1);
    register_worker(f, "p0", PRE, 2);
    generate(f);
    router_request *r = only_request(f);
    double t = tn_now_s();
    /* Within the bound nothing happens. */
    dispatch_check_progress(f->ctx, t + 0.5);
    assert_int_equal(r->attempts, 0);
    for (int attempt = 1; attempt <= 2; attempt++) {
        char before[24];
        snprintf(before, sizeof before, "%s", r->wid);
        t += 1.5;
        dispatch_check_progress(f->ctx, t);
        assert_int_equal(r->attempts, attempt);
        assert_string_not_equal(r->wid, before);
        assert_int_equal(r->stage, STAGE_RESERVING);
        assert_int_equal(worker(f, "d0")->in_flight, 1);
        /* A fresh placement counts as progress: the next check starts from it. */
        r->t_progress = t;
        worker(f, "d0")->last_progress_ms = (uint64_t)(t * 1000);
    }
    t += 1.5;
    dispatch_check_progress(f->ctx, t);
    char msg[400];
    assert_int_equal(client_end(f, msg, sizeof msg), TANDEM__V1__FINISH_REASON__FINISH_REASON_ERROR);
    assert_non_null(strstr(msg, "no progress on its KV reservation by d0"));
    assert_non_null(strstr(msg, "gave up after 3 attempts"));
    assert_int_equal(f->ctx->n_active, 0);
    assert_int_equal(worker(f, "d0")->in_flight, 0);
    assert_int_equal(worker(f, "d0")->pages_committed, 0);
}

static void a_failed_send_waits_for_another_worker(void **state)
{
    fixture *f = *state;
    /* dx is registered but ZeroMQ has no connection for it (its process
     * died): sends to it fail. */
    register_worker(f, "dx", DEC, 3);
    register_worker(f, "p0", PRE, 4);
    generate(f);
    router_request *r = only_request(f);
    assert_int_equal(r->stage, STAGE_HELD);
    assert_int_equal(f->ctx->n_held[AS_POOL_DECODE], 1);
    assert_true(worker(f, "dx")->unreachable);
    assert_int_equal(worker(f, "dx")->in_flight, 0);
    char msg[400];
    assert_int_not_equal(client_end(f, msg, sizeof msg), TANDEM__V1__FINISH_REASON__FINISH_REASON_ERROR);
    /* A decoder that registers takes it at once. */
    register_worker(f, "d0", DEC, 5);
    assert_int_equal(r->stage, STAGE_RESERVING);
    assert_string_equal(r->decoder, "d0");
    char wid[24];
    next_assignment(f->d0, TANDEM__V1__WORKER_MESSAGE__BODY_DECODE_ASSIGNMENT, wid, sizeof wid);
    assert_string_equal(wid, r->wid);
}

static void a_stopping_router_refuses_new_requests(void **state)
{
    fixture *f = *state;
    register_worker(f, "d0", DEC, 1);
    register_worker(f, "p0", PRE, 2);
    f->ctx->stopping = 1;
    generate(f);
    assert_int_equal(f->ctx->n_active, 0);
    char msg[400];
    assert_int_equal(client_end(f, msg, sizeof msg),
                     1000 + TANDEM__V1__ERROR_CODE__ERROR_CODE_NO_CAPACITY);
    assert_non_null(strstr(msg, "shutting down"));
}

/* Three choices of one prompt as the HTTP front makes them (seeds s, s+1,
 * s+2; the first leads), answered to the RPC client c0, queued for the
 * core and placed. Returns the leader and followers (the table holds them). */
static void submit_group(fixture *f, router_request **g)
{
    router_ctx *ctx = f->ctx;
    for (int b = 0; b < 3; b++) {
        router_request *r = request_new(ctx, ORIGIN_RPC);
        assert_non_null(r);
        snprintf(r->model, sizeof r->model, "%s", MODEL);
        r->prompt = malloc(4 * sizeof *r->prompt);
        assert_non_null(r->prompt);
        for (int i = 0; i < 4; i++)
            r->prompt[i] = 5 + i;
        r->n_prompt = 4;
        r->temperature = 1.0f;
        r->top_p = 1.0f;
        r->seed = 100 + (uint64_t)b;
        memcpy(r->client_rid, "c0", 2);
        r->client_rid_len = 2;
        api_error e;
        assert_int_equal(request_admit(ctx, r, 4, NULL, 0, 1, &e), 0);
        if (b == 0) {
            r->followers = calloc(2, sizeof *r->followers);
            assert_non_null(r->followers);
        } else {
            r->leader = g[0];
            g[0]->refs++;
            g[0]->followers[g[0]->n_followers++] = r;
        }
        g[b] = r;
        ctx->metrics.in_flight[API_RPC]++;
        if (ctx->submit_tail)
            ctx->submit_tail->qnext = r;
        else
            ctx->submit_head = r;
        ctx->submit_tail = r;
        ctx->n_queued++;
    }
    dispatch_process_queues(ctx);
}

static void group_rides_one_prefill_then_goes_alone(void **state)
{
    fixture *f = *state;
    register_worker(f, "d0", DEC, 1);
    register_worker(f, "p0", PRE, 7);
    router_request *g[3];
    submit_group(f, g);
    /* one DecodeAssignment, the other two choices as its branches */
    Tandem__V1__WorkerMessage *m = next_of(f->d0, TANDEM__V1__WORKER_MESSAGE__BODY_DECODE_ASSIGNMENT);
    assert_non_null(m);
    assert_string_equal(m->decode_assignment->request_id, g[0]->wid);
    assert_int_equal(m->decode_assignment->n_branch_ids, 2);
    for (int b = 1; b < 3; b++) {
        int found = 0;
        for (int i = 0; i < 2; i++)
            found |= !strcmp(m->decode_assignment->branch_ids[i], g[b]->wid);
        assert_true(found);
        assert_int_equal(g[b]->stage, STAGE_RIDING);
    }
    tandem__v1__worker_message__free_unpacked(m, NULL);
    assert_null(next_of(f->d0, TANDEM__V1__WORKER_MESSAGE__BODY_DECODE_ASSIGNMENT));
    assert_int_equal(worker(f, "d0")->in_flight, 3);

    /* one prefill, drawing each branch's first token with its own seed */
    kv_ready(f, "d0", g[0]->wid);
    m = next_of(f->p0, TANDEM__V1__WORKER_MESSAGE__BODY_PREFILL_ASSIGNMENT);
    assert_non_null(m);
    const Tandem__V1__PrefillAssignment *pa = m->prefill_assignment;
    assert_int_equal(pa->n_branch_ids, 2);
    assert_int_equal(pa->n_branch_seeds, 2);
    char ids[2][24];
    for (int i = 0; i < 2; i++) {
        snprintf(ids[i], sizeof ids[i], "%s", pa->branch_ids[i]);
        router_request *b = !strcmp(ids[i], g[1]->wid) ? g[1] : g[2];
        assert_int_equal(pa->branch_seeds[i], b->seed);
    }
    tandem__v1__worker_message__free_unpacked(m, NULL);
    assert_null(next_of(f->p0, TANDEM__V1__WORKER_MESSAGE__BODY_PREFILL_ASSIGNMENT));

    char *bid[2] = {ids[0], ids[1]};
    int32_t btok[2] = {21, 22};
    uint64_t brng[2] = {31, 32};
    Tandem__V1__PrefillResult pr = TANDEM__V1__PREFILL_RESULT__INIT;
    pr.request_id = g[0]->wid;
    pr.first_token = 20;
    pr.rng_state = 30;
    pr.transfer = TANDEM__V1__TRANSFER_STATUS__TRANSFER_STATUS_COMPLETE;
    pr.branch_ids = bid;
    pr.n_branch_ids = 2;
    pr.branch_first_tokens = btok;
    pr.n_branch_first_tokens = 2;
    pr.branch_rng_states = brng;
    pr.n_branch_rng_states = 2;
    Tandem__V1__WorkerMessage w = TANDEM__V1__WORKER_MESSAGE__INIT;
    w.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_PREFILL_RESULT;
    w.prefill_result = &pr;
    from_worker(f, "p0", &w);
    /* one StartDecode carries the branches' tokens; each is on its own now */
    m = next_of(f->d0, TANDEM__V1__WORKER_MESSAGE__BODY_START_DECODE);
    assert_non_null(m);
    const Tandem__V1__StartDecode *sd = m->start_decode;
    assert_string_equal(sd->request_id, g[0]->wid);
    assert_int_equal(sd->first_token, 20);
    assert_int_equal(sd->n_branch_ids, 2);
    for (int i = 0; i < 2; i++) {
        int k = !strcmp(sd->branch_ids[i], ids[0]) ? 0 : 1;
        assert_string_equal(sd->branch_ids[i], ids[k]);
        assert_int_equal(sd->branch_first_tokens[i], btok[k]);
        assert_int_equal(sd->branch_rng_states[i], brng[k]);
    }
    tandem__v1__worker_message__free_unpacked(m, NULL);
    for (int b = 0; b < 3; b++) {
        assert_int_equal(g[b]->stage, STAGE_DECODING);
        assert_int_equal(g[b]->n_out, 1);
        assert_null(g[b]->leader);
    }
    assert_int_equal(g[0]->n_followers, 0);
    assert_int_equal(g[0]->out[0], 20);
}

static void losing_the_decoder_before_the_prefill_places_each_choice_alone(void **state)
{
    fixture *f = *state;
    register_worker(f, "d0", DEC, 1);
    register_worker(f, "p0", PRE, 7);
    router_request *g[3];
    submit_group(f, g);
    Tandem__V1__WorkerMessage *m = next_of(f->d0, TANDEM__V1__WORKER_MESSAGE__BODY_DECODE_ASSIGNMENT);
    assert_non_null(m);
    tandem__v1__worker_message__free_unpacked(m, NULL);
    /* d0 restarts: the group's placement is gone; every choice is placed
     * again on its own (no branches), none failed */
    register_worker(f, "d0", DEC, 2);
    int placed = 0;
    while ((m = next_of(f->d0, TANDEM__V1__WORKER_MESSAGE__BODY_DECODE_ASSIGNMENT)) != NULL) {
        assert_int_equal(m->decode_assignment->n_branch_ids, 0);
        placed++;
        tandem__v1__worker_message__free_unpacked(m, NULL);
    }
    assert_int_equal(placed, 3);
    assert_int_equal(f->ctx->n_active, 3);
    for (int b = 0; b < 3; b++) {
        assert_int_equal(g[b]->stage, STAGE_RESERVING);
        assert_false(g[b]->finished);
        assert_null(g[b]->leader);
    }
    assert_int_equal(g[0]->n_followers, 0);
    assert_int_equal(worker(f, "d0")->in_flight, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(restart_places_the_old_processs_requests_at_once, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_repeated_registration_keeps_the_work, setup, teardown),
        cmocka_unit_test_setup_teardown(no_progress_places_again_then_fails_explicitly, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_failed_send_waits_for_another_worker, setup, teardown),
        cmocka_unit_test_setup_teardown(a_stopping_router_refuses_new_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(group_rides_one_prefill_then_goes_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(losing_the_decoder_before_the_prefill_places_each_choice_alone,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
