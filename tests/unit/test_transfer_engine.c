/* TransferEngine in one process: two (or three) real UCX engines talking over
 * loopback tcp or shared memory. Covers the put (or data message)/flush/
 * notice/ack sequence,
 * refusal before any byte moves, timeout, cancel, a peer that goes away,
 * busy resources and the protobuf rendezvous. The multi-process versions
 * are in test_transfer_processes.c. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <time.h>
#include <cmocka.h>
#include "transfer/transfer.h"
#include "transfer/transfer_kv.h"
#include "transfer/transfer_nic.h"
#include "transfer/transfer_pattern.h"

typedef struct pair {
    te_engine *a, *b;      /* a sends, b receives */
    te_peer *a_to_b, *b_to_a;
    FILE *log;
    char *log_text;
    size_t log_size;
} pair;

/* An engine whose transfers move data as `path` says and whose same-host
 * peers get shared-memory endpoints when `same_host_shm` is 1. */
static te_engine *make_engine_opts(const char *name, const char *tls, int window, FILE *log,
                                   te_data_path path, int same_host_shm)
{
    te_engine_config cfg;
    te_engine_config_default(&cfg);
    cfg.name = name;
    cfg.tls = tls;
    cfg.max_puts_in_flight = window;
    cfg.log = log;
    cfg.data_path = path;
    cfg.same_host_shm = same_host_shm;
    te_engine *e = NULL;
    char err[256] = "";
    int rc = te_engine_create(&cfg, &e, err, sizeof err);
    if (rc != TN_OK)
        fail_msg("te_engine_create(%s): %s", tls, err);
    return e;
}

static te_engine *make_engine(const char *name, const char *tls, int window, FILE *log)
{
    return make_engine_opts(name, tls, window, log, TE_DATA_AUTO, 0);
}

static te_engine *make_engine_path(const char *name, const char *tls, int window, FILE *log,
                                   te_data_path path)
{
    return make_engine_opts(name, tls, window, log, path, 0);
}

static te_engine *make_engine_shm(const char *name, const char *tls, int window, FILE *log,
                                  int same_host_shm)
{
    return make_engine_opts(name, tls, window, log, TE_DATA_AUTO, same_host_shm);
}

/* The sender's engine moves data as `path` says. */
static void pair_open_path(pair *p, const char *tls, int window, te_data_path path)
{
    memset(p, 0, sizeof *p);
    p->log = open_memstream(&p->log_text, &p->log_size);
    assert_non_null(p->log);
    p->a = make_engine_path("sender", tls, window, p->log, path);
    p->b = make_engine("receiver", tls, window, p->log);
    const void *addr;
    size_t len;
    te_engine_address(p->b, &addr, &len);
    assert_int_equal(te_peer_connect(p->a, addr, len, te_engine_id(p->b), &p->a_to_b), TN_OK);
    te_engine_address(p->a, &addr, &len);
    assert_int_equal(te_peer_connect(p->b, addr, len, te_engine_id(p->a), &p->b_to_a), TN_OK);
    /* Both endpoints finish their connection set-up first, as the cluster
     * does before any push (an engine never closes an endpoint whose set-up
     * is unfinished: UCX 1.13 aborts then). */
    assert_int_equal(te_peer_wireup_start(p->a, p->a_to_b), TN_OK);
    assert_int_equal(te_peer_wireup_start(p->b, p->b_to_a), TN_OK);
    double deadline = te_now_seconds() + 20;
    while ((te_peer_wireup_status(p->a_to_b) == TN_IN_PROGRESS ||
            te_peer_wireup_status(p->b_to_a) == TN_IN_PROGRESS) && te_now_seconds() < deadline) {
        te_engine_progress(p->a);
        te_engine_progress(p->b);
    }
    assert_int_equal(te_peer_wireup_status(p->a_to_b), TN_OK);
    assert_int_equal(te_peer_wireup_status(p->b_to_a), TN_OK);
}

static void pair_open(pair *p, const char *tls, int window)
{
    pair_open_path(p, tls, window, TE_DATA_AUTO);
}

static void pair_close(pair *p)
{
    te_engine_destroy(p->a);
    te_engine_destroy(p->b);
    fclose(p->log);
    free(p->log_text);
}

/* Progresses both engines until the transfer is finished. */
static int pump(pair *p, te_transfer *t)
{
    while (te_transfer_status(t) == TN_IN_PROGRESS) {
        te_engine_progress(p->a);
        te_engine_progress(p->b);
    }
    /* Let the receiver see everything that was sent. */
    for (int i = 0; i < 100; i++)
        te_engine_progress(p->b);
    return te_transfer_status(t);
}

static void fill_random(uint8_t *buf, size_t n, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = (uint8_t)(s >> 56);
    }
}

/* Registers src (n bytes) with p->a and dst with p->b, and imports dst's
 * region into p->a so that a can write into it. */
static te_remote_region *link_regions(pair *p, void *src, void *dst, size_t n, te_region **rs,
                                      te_region **rd)
{
    assert_int_equal(te_region_register(p->a, src, n, TE_MEM_HOST, rs), TN_OK);
    assert_int_equal(te_region_register(p->b, dst, n, TE_MEM_HOST, rd), TN_OK);
    const void *rkey;
    size_t rkey_len;
    assert_int_equal(te_region_rkey(p->b, *rd, &rkey, &rkey_len), TN_OK);
    te_remote_region *remote;
    assert_int_equal(te_peer_import_region(p->a, p->a_to_b, (uint64_t)(uintptr_t)dst, n,
                                           TE_MEM_HOST, rkey, rkey_len, &remote), TN_OK);
    return remote;
}

/* n copies of chunk bytes, each to the same offset it comes from. */
static te_copy *same_offset_copies(size_t n, size_t chunk)
{
    te_copy *copies = calloc(n, sizeof *copies);
    assert_non_null(copies);
    for (size_t i = 0; i < n; i++) {
        copies[i].src_offset = copies[i].dst_offset = i * chunk;
        copies[i].length = chunk;
    }
    return copies;
}

/* over_messages: whether the transfer must go as data messages. */
static void moves_bytes_exactly(const char *tls, te_data_path path, int over_messages)
{
    pair p;
    pair_open_path(&p, tls, 8, path);
    enum { N = 1 << 20, CHUNK = 4096 };
    uint8_t *src = malloc(N), *dst = malloc(N + 64);
    assert_non_null(src);
    assert_non_null(dst);
    fill_random(src, N, 42);
    memset(dst, 0xA5, N + 64);

    te_region *rs, *rd;
    te_remote_region *remote = link_regions(&p, src, dst, N, &rs, &rd);

    /* Chunks land in reverse order in the destination: a permutation, so
     * a wrong offset anywhere shows up. */
    size_t n = N / CHUNK;
    te_copy *copies = calloc(n, sizeof *copies);
    assert_non_null(copies);
    for (size_t i = 0; i < n; i++) {
        copies[i].src_offset = i * CHUNK;
        copies[i].dst_offset = (n - 1 - i) * CHUNK;
        copies[i].length = CHUNK;
    }
    te_transfer_desc d = {p.a_to_b, 77, &rs, 1, &remote, 1, copies, n, 10000};
    te_transfer *t;
    assert_int_equal(te_transfer_submit(p.a, &d, &t), TN_OK);
    assert_int_equal(te_transfer_over_messages(t), over_messages);
    assert_int_equal(pump(&p, t), TN_OK);
    assert_int_equal(te_transfer_bytes(t), (uint64_t)N);
    size_t posted, completed;
    te_transfer_counts(t, &posted, &completed);
    assert_int_equal(posted, n);
    assert_int_equal(completed, n);
    assert_true(strlen(te_transfer_nic(t)) > 0);
    assert_string_not_equal(te_transfer_nic(t), "unknown");

    te_notice note;
    assert_int_equal(te_engine_next_notice(p.b, &note), 1);
    assert_int_equal(note.request_id, 77);
    assert_int_equal(note.status, TN_OK);
    assert_int_equal(note.sender_id, te_engine_id(p.a));
    assert_int_equal(note.bytes, (uint64_t)N);
    assert_int_equal(te_engine_next_notice(p.b, &note), 0);

    for (size_t i = 0; i < n; i++)
        assert_memory_equal(dst + (n - 1 - i) * CHUNK, src + i * CHUNK, CHUNK);
    for (size_t i = N; i < N + 64; i++)
        assert_int_equal(dst[i], 0xA5);

    te_transfer_release(p.a, t);
    assert_int_equal(te_engine_outstanding(p.a), 0);
    free(copies);
    pair_close(&p);
    free(src);
    free(dst);
}

/* tcp has no RMA lane: UCX would emulate puts, so data goes as messages. */
static void moves_bytes_over_tcp(void **state)
{
    (void)state;
    moves_bytes_exactly("tcp", TE_DATA_AUTO, 1);
}

/* Puts over tcp still work when asked for (the RDMA path's code). */
static void moves_bytes_over_tcp_with_puts(void **state)
{
    (void)state;
    moves_bytes_exactly("tcp", TE_DATA_PUTS, 0);
}

/* Shared memory has RMA lanes (cma, posix): puts. */
static void moves_bytes_over_shared_memory(void **state)
{
    (void)state;
    moves_bytes_exactly("sm", TE_DATA_AUTO, 0);
}

/* te_engine_arm: once armed, the receiver's event descriptor becomes
 * readable when the sender's data arrives, with only the sender running
 * (what lets a worker sleep in zmq_poll without delaying KV), and the
 * transfer then completes byte exact. */
static void armed_descriptor_wakes_on_arrival(const char *tls)
{
    pair p;
    pair_open(&p, tls, 8);
    enum { N = 1 << 20, CHUNK = 4096 };
    uint8_t *src = malloc(N), *dst = malloc(N);
    assert_non_null(src);
    assert_non_null(dst);
    fill_random(src, N, 5);
    memset(dst, 0xA5, N);
    te_region *rs, *rd;
    te_remote_region *remote = link_regions(&p, src, dst, N, &rs, &rd);
    te_copy *copies = same_offset_copies(N / CHUNK, CHUNK);
    double deadline = te_now_seconds() + 20;
    int fd = -1;
    while (te_engine_arm(p.b, &fd) == 1 && te_now_seconds() < deadline)
        te_engine_progress(p.b);
    if (fd < 0)
        fail_msg("UCX_TLS=%s: no event descriptor to wake on", tls);
    te_transfer_desc d = {p.a_to_b, 21, &rs, 1, &remote, 1, copies, N / CHUNK, 10000};
    te_transfer *t;
    assert_int_equal(te_transfer_submit(p.a, &d, &t), TN_OK);
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int woke = 0;
    while (!woke && te_now_seconds() < deadline) {
        te_engine_progress(p.a);
        woke = poll(&pfd, 1, 1) > 0 && (pfd.revents & POLLIN);
    }
    if (!woke)
        fail_msg("UCX_TLS=%s: the armed descriptor never became readable", tls);
    assert_int_equal(pump(&p, t), TN_OK);
    te_notice note;
    assert_int_equal(te_engine_next_notice(p.b, &note), 1);
    assert_int_equal(note.request_id, 21);
    assert_int_equal(note.status, TN_OK);
    assert_memory_equal(dst, src, N);
    te_transfer_release(p.a, t);
    free(copies);
    pair_close(&p);
    free(src);
    free(dst);
}

static void armed_descriptor_wakes_over_tcp_and_shared_memory(void **state)
{
    (void)state;
    armed_descriptor_wakes_on_arrival("tcp");
    armed_descriptor_wakes_on_arrival("sysv,posix,self");
}

/* Data messages are checked on arrival: bytes for memory the receiver no
 * longer has registered are dropped (a put would write them anyway), and
 * the notice that finds bytes missing fails the transfer on both sides. */
static void data_messages_for_unregistered_memory_fail_the_transfer(void **state)
{
    (void)state;
    pair p;
    pair_open_path(&p, "tcp", 8, TE_DATA_MESSAGES);
    enum { N = 65536 };
    uint8_t *src = malloc(N), *dst = malloc(N);
    assert_non_null(src);
    assert_non_null(dst);
    fill_random(src, N, 3);
    memset(dst, 0xA5, N);
    te_region *rs, *rd;
    te_remote_region *remote = link_regions(&p, src, dst, N, &rs, &rd);
    assert_int_equal(te_region_deregister(p.b, rd), TN_OK);
    te_copy *copies = same_offset_copies(N / 4096, 4096);
    te_transfer_desc d = {p.a_to_b, 9, &rs, 1, &remote, 1, copies, N / 4096, 10000};
    te_transfer *t;
    assert_int_equal(te_transfer_submit(p.a, &d, &t), TN_OK);
    assert_int_equal(pump(&p, t), TN_ERR_PEER);
    assert_non_null(strstr(te_transfer_error(t), "did not get every data message"));
    te_notice note;
    assert_int_equal(te_engine_next_notice(p.b, &note), 1);
    assert_int_equal(note.request_id, 9);
    assert_int_equal(note.status, TN_ERR_CANCELED);
    for (size_t i = 0; i < N; i++)
        assert_int_equal(dst[i], 0xA5);
    fflush(p.log);
    assert_non_null(strstr(p.log_text, "no registered host region holds them"));
    assert_non_null(strstr(p.log_text, "0 of 65536 bytes arrived"));
    te_transfer_release(p.a, t);
    free(copies);
    pair_close(&p);
    free(src);
    free(dst);
}

static void bad_copies_are_refused_before_any_byte_moves(void **state)
{
    (void)state;
    pair p;
    pair_open(&p, "tcp", 8);
    enum { N = 65536 };
    uint8_t *src = malloc(N), *dst = malloc(N), *other = malloc(N);
    assert_non_null(src);
    assert_non_null(dst);
    assert_non_null(other);
    fill_random(src, N, 1);
    memset(dst, 0xA5, N);
    te_region *rs, *rd, *foreign;
    assert_int_equal(te_region_register(p.a, src, N, TE_MEM_HOST, &rs), TN_OK);
    /* The receiver registers only half of its buffer. */
    assert_int_equal(te_region_register(p.b, dst, N / 2, TE_MEM_HOST, &rd), TN_OK);
    /* A region of the receiver's engine is not a source the sender owns. */
    assert_int_equal(te_region_register(p.b, other, N, TE_MEM_HOST, &foreign), TN_OK);
    const void *rkey;
    size_t rkey_len;
    assert_int_equal(te_region_rkey(p.b, rd, &rkey, &rkey_len), TN_OK);
    te_remote_region *remote;
    assert_int_equal(te_peer_import_region(p.a, p.a_to_b, (uint64_t)(uintptr_t)dst, N / 2,
                                           TE_MEM_HOST, rkey, rkey_len, &remote), TN_OK);

    te_transfer *t = (te_transfer *)&p; /* must be reset to NULL on refusal */
    /* 1. too small: the last byte would land past the registered half. */
    te_copy big[2] = {{0, 0, 0, 0, 1024}, {0, 0, 4096, N / 2 - 100, 101}};
    te_transfer_desc d = {p.a_to_b, 1, &rs, 1, &remote, 1, big, 2, 1000};
    assert_int_equal(te_transfer_submit(p.a, &d, &t), TN_ERR_REFUSED);
    assert_null(t);
    assert_non_null(strstr(te_engine_error(p.a), "exceed"));
    /* 2. a destination region index that was never imported. */
    te_copy unreg = {0, 1, 0, 0, 16};
    d.copies = &unreg;
    d.n_copies = 1;
    assert_int_equal(te_transfer_submit(p.a, &d, &t), TN_ERR_REFUSED);
    assert_non_null(strstr(te_engine_error(p.a), "not registered"));
    /* 3. a source region registered with another engine. */
    te_copy ok = {0, 0, 0, 0, 16};
    d.copies = &ok;
    d.src = &foreign;
    assert_int_equal(te_transfer_submit(p.a, &d, &t), TN_ERR_REFUSED);
    assert_non_null(strstr(te_engine_error(p.a), "not registered"));
    /* 4. offsets that overflow 64 bits. */
    te_copy wrap = {0, 0, 8, UINT64_MAX - 4, 16};
    d.src = &rs;
    d.copies = &wrap;
    assert_int_equal(te_transfer_submit(p.a, &d, &t), TN_ERR_REFUSED);
    /* 5. two copies writing the same bytes. */
    te_copy overlap[2] = {{0, 0, 0, 0, 64}, {0, 0, 128, 32, 64}};
    d.copies = overlap;
    d.n_copies = 2;
    assert_int_equal(te_transfer_submit(p.a, &d, &t), TN_ERR_REFUSED);
    assert_non_null(strstr(te_engine_error(p.a), "two copies"));
    /* 6. no timeout. */
    d.copies = &ok;
    d.n_copies = 1;
    d.timeout_ms = 0;
    assert_int_equal(te_transfer_submit(p.a, &d, &t), TN_ERR_ARG);

    /* Nothing moved, nothing is in flight, no notice arrived. */
    for (int i = 0; i < 200; i++) {
        te_engine_progress(p.a);
        te_engine_progress(p.b);
    }
    for (size_t i = 0; i < N; i++)
        assert_int_equal(dst[i], 0xA5);
    assert_int_equal(te_engine_outstanding(p.a), 0);
    te_notice note;
    assert_int_equal(te_engine_next_notice(p.b, &note), 0);

    /* The same connection still works for a valid transfer. */
    d.timeout_ms = 10000;
    assert_int_equal(te_transfer_submit(p.a, &d, &t), TN_OK);
    assert_int_equal(pump(&p, t), TN_OK);
    assert_memory_equal(dst, src, 16);
    assert_int_equal(dst[16], 0xA5);
    te_transfer_release(p.a, t);
    pair_close(&p);
    free(src);
    free(dst);
    free(other);
}

static void silent_receiver_times_out_and_leaves_nothing_in_flight(void **state)
{
    (void)state;
    pair p;
    pair_open(&p, "tcp", 4);
    enum { N = 8 << 20 };
    uint8_t *src = calloc(1, N), *dst = calloc(1, N);
    assert_non_null(src);
    assert_non_null(dst);
    te_region *rs, *rd;
    te_remote_region *remote = link_regions(&p, src, dst, N, &rs, &rd);
    te_copy c = {0, 0, 0, 0, N};
    te_transfer_desc d = {p.a_to_b, 5, &rs, 1, &remote, 1, &c, 1, 300};
    te_transfer *t;
    assert_int_equal(te_transfer_submit(p.a, &d, &t), TN_OK);
    /* The receiver never runs progress (a frozen process): over tcp it
     * neither drains the socket nor answers, so only the timeout can end
     * this. The endpoint is not force-closed under the frozen receiver (it
     * would abort in UCX 1.13 when it runs again): what is in flight is
     * left to the endpoint, counted as abandoned. */
    assert_int_equal(te_transfer_wait(p.a, t), TN_ERR_TIMEOUT);
    assert_non_null(strstr(te_transfer_error(t), "timed out after 300 ms"));
    assert_true(te_engine_outstanding(p.a) > 0);
    assert_int_equal(te_engine_outstanding(p.a), te_engine_abandoned(p.a));
    assert_int_not_equal(te_peer_status(p.a_to_b), TN_OK);
    /* A peer that stopped answering refuses new work with a clear error. */
    te_transfer *t2 = NULL;
    assert_int_equal(te_transfer_submit(p.a, &d, &t2), TN_ERR_PEER);
    assert_non_null(strstr(te_engine_error(p.a), "unusable"));
    te_transfer_release(p.a, t);
    assert_int_equal(te_peer_close(p.a, p.a_to_b), TN_OK);
    /* The receiver runs again: the abandoned requests complete, the
     * endpoint closes, and nothing is left in flight. */
    double deadline = te_now_seconds() + 20;
    while (te_engine_outstanding(p.a) > 0 && te_now_seconds() < deadline) {
        te_engine_progress(p.a);
        te_engine_progress(p.b);
    }
    assert_int_equal(te_engine_outstanding(p.a), 0);
    assert_int_equal(te_engine_abandoned(p.a), 0);
    pair_close(&p);
    free(src);
    free(dst);
}

static void cancel_stops_puts_and_tells_the_receiver(void **state)
{
    (void)state;
    pair p;
    pair_open(&p, "tcp", 2);
    enum { N = 1 << 20, CHUNK = 1024 };
    uint8_t *src = malloc(N), *dst = malloc(N);
    assert_non_null(src);
    assert_non_null(dst);
    fill_random(src, N, 3);
    memset(dst, 0xA5, N);
    te_region *rs, *rd;
    te_remote_region *remote = link_regions(&p, src, dst, N, &rs, &rd);
    size_t n = N / CHUNK;
    te_copy *copies = same_offset_copies(n, CHUNK);
    te_transfer_desc d = {p.a_to_b, 9, &rs, 1, &remote, 1, copies, n, 10000};
    te_transfer *t;
    assert_int_equal(te_transfer_submit(p.a, &d, &t), TN_OK);
    assert_int_equal(te_transfer_cancel(p.a, t), TN_OK);
    assert_int_equal(pump(&p, t), TN_ERR_CANCELED);
    size_t posted;
    te_transfer_counts(t, &posted, NULL);
    assert_true(posted < n); /* the window is 2: cancel came long before the end */
    te_notice note;
    assert_int_equal(te_engine_wait_notice(p.b, &note, 5000), 1);
    assert_int_equal(note.request_id, 9);
    assert_int_equal(note.status, TN_ERR_CANCELED);
    /* Whatever was posted landed; nothing after it did. */
    assert_memory_equal(dst, src, posted * CHUNK);
    for (size_t i = posted * CHUNK; i < N; i++)
        assert_int_equal(dst[i], 0xA5);
    assert_int_equal(te_engine_outstanding(p.a), 0);
    te_transfer_release(p.a, t);
    free(copies);
    pair_close(&p);
    free(src);
    free(dst);
}

static void vanished_receiver_fails_the_transfer(void **state)
{
    (void)state;
    pair p;
    pair_open(&p, "tcp", 4);
    enum { N = 4 << 20, CHUNK = 4096 };
    uint8_t *src = calloc(1, N), *dst = calloc(1, N);
    assert_non_null(src);
    assert_non_null(dst);
    te_region *rs, *rd;
    te_remote_region *remote = link_regions(&p, src, dst, N, &rs, &rd);
    size_t n = N / CHUNK;
    te_copy *copies = same_offset_copies(n, CHUNK);
    te_transfer_desc d = {p.a_to_b, 11, &rs, 1, &remote, 1, copies, n, 5000};
    te_transfer *t;
    assert_int_equal(te_transfer_submit(p.a, &d, &t), TN_OK);
    for (int i = 0; i < 20; i++) {
        te_engine_progress(p.a);
        te_engine_progress(p.b);
    }
    /* The receiver goes away mid-transfer (its endpoints are closed). */
    te_engine_destroy(p.b);
    p.b = NULL;
    int st = te_transfer_wait(p.a, t);
    if (st != TN_ERR_PEER && st != TN_ERR_TIMEOUT)
        fail_msg("status %s: %s", tn_status_str(st), te_transfer_error(t));
    assert_true(strlen(te_transfer_error(t)) > 0);
    assert_int_equal(te_engine_outstanding(p.a), 0);
    te_transfer_release(p.a, t);
    free(copies);
    pair_close(&p);
    free(src);
    free(dst);
}

static void busy_resources_and_unsupported_memory(void **state)
{
    (void)state;
    pair p;
    pair_open(&p, "tcp", 4);
    uint8_t src[256], dst[256];
    te_region *rs, *rd;
    te_remote_region *remote = link_regions(&p, src, dst, sizeof dst, &rs, &rd);
    te_copy c = {0, 0, 0, 0, 128};
    te_transfer_desc d = {p.a_to_b, 1, &rs, 1, &remote, 1, &c, 1, 10000};
    te_transfer *t;
    assert_int_equal(te_transfer_submit(p.a, &d, &t), TN_OK);
    assert_int_equal(pump(&p, t), TN_OK);
    /* Finished but not released: still holds its region and peer. */
    assert_int_equal(te_region_deregister(p.a, rs), TN_ERR_BUSY);
    assert_int_equal(te_peer_close(p.a, p.a_to_b), TN_ERR_BUSY);
    te_transfer_release(p.a, t);
    assert_int_equal(te_region_deregister(p.a, rs), TN_OK);
    assert_int_equal(te_peer_close(p.a, p.a_to_b), TN_OK);

    te_region *r = NULL;
    assert_int_equal(te_region_register(p.a, NULL, 16, TE_MEM_HOST, &r), TN_ERR_ARG);
    assert_int_equal(te_region_register(p.a, src, 0, TE_MEM_HOST, &r), TN_ERR_ARG);
#ifndef TANDEM_CUDA
    assert_int_equal(te_region_register(p.a, src, 16, TE_MEM_CUDA, &r), TN_ERR_UNSUPPORTED);
    assert_non_null(strstr(te_engine_error(p.a), "CUDA"));
#endif
    assert_null(r);
    pair_close(&p);
}

static void no_rdma_device_is_one_clear_log_line(void **state)
{
    (void)state;
    char *text = NULL;
    size_t size = 0;
    FILE *log = open_memstream(&text, &size);
    assert_non_null(log);
    te_engine *e = make_engine("niccheck", "tcp", 0, log);
    fflush(log);
    /* This machine has no RDMA device: exactly one line says so and that
     * UCX picks the transport; the engine still works. */
    int lines = 0;
    for (char *c = text; *c; c++)
        lines += *c == '\n';
    assert_int_equal(lines, 1);
    assert_non_null(strstr(text, "no RDMA device"));
    assert_non_null(strstr(text, "UCX chooses"));
    assert_string_equal(te_engine_nic(e), "ucx-default");
    te_engine_destroy(e);
    fclose(log);
    free(text);
}

static void nic_selection_prefers_active_near_ports(void **state)
{
    (void)state;
    te_nic nics[3];
    memset(nics, 0, sizeof nics);
    snprintf(nics[0].name, sizeof nics[0].name, "mlx5_0");
    nics[0].numa_node = 0;
    snprintf(nics[0].pci_path, sizeof nics[0].pci_path, "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0");
    nics[0].n_ports = 1;
    nics[0].ports[0] = (te_nic_port){1, 1, 1, 4096};
    snprintf(nics[1].name, sizeof nics[1].name, "mlx5_1");
    nics[1].numa_node = 1;
    snprintf(nics[1].pci_path, sizeof nics[1].pci_path, "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0");
    nics[1].n_ports = 2;
    nics[1].ports[0] = (te_nic_port){1, 0, 1, 4096};
    nics[1].ports[1] = (te_nic_port){2, 1, 1, 4096};
    snprintf(nics[2].name, sizeof nics[2].name, "mlx5_2");
    nics[2].numa_node = 1;
    nics[2].n_ports = 1;
    nics[2].ports[0] = (te_nic_port){1, 0, 2, 1024};
    te_nic_list list = {nics, 3, ""};
    int port = 0;
    /* No preference: first active by name. */
    assert_int_equal(te_nic_select(&list, NULL, -1, &port), 0);
    assert_int_equal(port, 1);
    /* NUMA 1: mlx5_1's active port 2 (mlx5_2 is down). */
    assert_int_equal(te_nic_select(&list, NULL, 1, &port), 1);
    assert_int_equal(port, 2);
    /* A GPU under mlx5_1's root port wins over the NUMA hint. */
    assert_int_equal(te_nic_select(&list, "/sys/devices/pci0000:80/0000:80:01.0/0000:82:00.0", 0,
                                   &port), 1);
    /* Nothing active: no choice, UCX decides. */
    te_nic_list down = {&nics[2], 1, ""};
    assert_int_equal(te_nic_select(&down, NULL, -1, &port), -1);
    te_nic_list empty = {NULL, 0, ""};
    assert_int_equal(te_nic_select(&empty, NULL, -1, &port), -1);

    te_nic_list found;
    assert_int_equal(te_nic_discover(&found), 0);
    assert_int_equal(found.n, 0); /* no RDMA hardware in this sandbox */
    assert_non_null(strstr(found.note, "no RDMA device"));
    te_nic_list_free(&found);
}

static void hello_round_trips_through_protobuf(void **state)
{
    (void)state;
    te_engine *e = make_engine("hello", "tcp", 0, NULL);
    te_engine *f = make_engine("peer", "tcp", 0, NULL);
    te_kv_layout l = {2, 1, 2, 4, 8, 4, 16, 10};
    char why[128];
    size_t bytes = te_kv_pool_bytes(&l, why, sizeof why);
    assert_int_equal(bytes, 10u * 2 * 16 * 8 * 4);
    void *k[2], *v[2];
    for (int i = 0; i < 2; i++) {
        k[i] = calloc(1, bytes);
        v[i] = calloc(1, bytes);
        assert_non_null(k[i]);
        assert_non_null(v[i]);
    }
    te_kv_local kv;
    assert_int_equal(te_kv_register(e, &l, k, v, TE_MEM_HOST, &kv), TN_OK);
    uint8_t *buf;
    size_t len;
    assert_int_equal(te_kv_hello_pack(e, &kv, &buf, &len), TN_OK);
    Tandem__Transfer__ControlMessage *m = te_control_unpack(buf, len);
    assert_non_null(m);
    assert_int_equal(m->body_case, TANDEM__TRANSFER__CONTROL_MESSAGE__BODY_HELLO);
    assert_int_equal(m->hello->engine_id, te_engine_id(e));
    assert_int_equal(m->hello->shard->tp, 2);
    assert_int_equal(m->hello->shard->rank, 1);
    assert_int_equal(m->hello->n_regions, 4);
    assert_int_equal(m->hello->regions[3]->address, (uint64_t)(uintptr_t)v[1]);
    assert_int_equal(m->hello->regions[3]->length, bytes);
    te_kv_remote remote;
    assert_int_equal(te_kv_connect(f, m->hello, &remote), TN_OK);
    /* The connection's set-up finishes (e answers) before it is closed. */
    assert_int_equal(te_peer_wireup_start(f, remote.peer), TN_OK);
    for (double end = te_now_seconds() + 20;
         te_peer_wireup_status(remote.peer) == TN_IN_PROGRESS && te_now_seconds() < end;) {
        te_engine_progress(e);
        te_engine_progress(f);
    }
    assert_int_equal(te_peer_wireup_status(remote.peer), TN_OK);
    assert_int_equal(remote.layout.rank, 1);
    assert_int_equal(remote.n_regions, 4);
    assert_int_equal(te_remote_region_len(remote.regions[2]), bytes);
    assert_int_equal(te_kv_disconnect(f, &remote), TN_OK);
    tandem__transfer__control_message__free_unpacked(m, NULL);
    /* Garbage and truncated messages are rejected, not crashed on. */
    uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
    assert_null(te_control_unpack(junk, sizeof junk));
    assert_null(te_control_unpack(buf, len / 2));
    free(buf);

    int32_t pages[3] = {7, 2, 9};
    assert_int_equal(te_kv_request_pack(5, 40, pages, 3, &buf, &len), TN_OK);
    m = te_control_unpack(buf, len);
    assert_non_null(m);
    assert_int_equal(m->body_case, TANDEM__TRANSFER__CONTROL_MESSAGE__BODY_KV_REQUEST);
    assert_int_equal(m->kv_request->n_tokens, 40);
    assert_int_equal(m->kv_request->n_pages, 3);
    assert_int_equal(m->kv_request->pages[2], 9);
    tandem__transfer__control_message__free_unpacked(m, NULL);
    free(buf);
    te_kv_deregister(e, &kv);
    for (int i = 0; i < 2; i++) {
        free(k[i]);
        free(v[i]);
    }
    te_engine_destroy(e);
    te_engine_destroy(f);
}

/* Two sender ranks (TP=2, page 16) into one receiver (TP=1, page 24), all
 * engines in this process, via te_kv_send and the hellos, over tls;
 * same_host_shm as te_engine_config's. Each sender's endpoint must detect
 * failures (UCX peer-failure handling) exactly when want_failure_mode, and
 * its transports must include want_transport. */
static void reshard_case(const char *tls, int same_host_shm, int want_failure_mode,
                         const char *want_transport)
{
    enum { LAYERS = 2, HEADS = 4, DIM = 8, TOKENS = 100, SEED = 1234 };
    te_engine *snd[2] = {make_engine_shm("rank0", tls, 16, NULL, same_host_shm),
                         make_engine_shm("rank1", tls, 16, NULL, same_host_shm)};
    te_engine *rcv = make_engine_shm("decoder", tls, 16, NULL, same_host_shm);
    te_kv_layout dl = {1, 0, LAYERS, HEADS, DIM, 4, 24, 12};
    char why[256];
    size_t dbytes = te_kv_pool_bytes(&dl, why, sizeof why);
    void *dk[LAYERS], *dv[LAYERS];
    for (int i = 0; i < LAYERS; i++) {
        dk[i] = malloc(dbytes);
        dv[i] = malloc(dbytes);
        assert_non_null(dk[i]);
        assert_non_null(dv[i]);
        memset(dk[i], 0x5A, dbytes);
        memset(dv[i], 0x5A, dbytes);
    }
    int32_t dpages[5] = {11, 3, 7, 0, 5};
    te_kv_local dkv;
    assert_int_equal(te_kv_register(rcv, &dl, dk, dv, TE_MEM_HOST, &dkv), TN_OK);
    uint8_t *hello;
    size_t hello_len;
    assert_int_equal(te_kv_hello_pack(rcv, &dkv, &hello, &hello_len), TN_OK);
    Tandem__Transfer__ControlMessage *dm = te_control_unpack(hello, hello_len);
    assert_non_null(dm);

    te_kv_local skv[2];
    te_kv_remote to_rcv[2], from_snd[2];
    void *sk[2][LAYERS], *sv[2][LAYERS];
    int32_t spages[2][7] = {{6, 0, 2, 4, 1, 3, 5}, {1, 2, 3, 4, 5, 6, 0}};
    te_transfer *t[2];
    for (int r = 0; r < 2; r++) {
        te_kv_layout sl = {2, r, LAYERS, HEADS, DIM, 4, 16, 8};
        size_t sbytes = te_kv_pool_bytes(&sl, why, sizeof why);
        for (int i = 0; i < LAYERS; i++) {
            sk[r][i] = calloc(1, sbytes);
            sv[r][i] = calloc(1, sbytes);
            assert_non_null(sk[r][i]);
            assert_non_null(sv[r][i]);
            te_pattern_fill(&sl, sk[r][i], i, 0, spages[r], TOKENS, SEED);
            te_pattern_fill(&sl, sv[r][i], i, 1, spages[r], TOKENS, SEED);
        }
        assert_int_equal(te_kv_register(snd[r], &sl, sk[r], sv[r], TE_MEM_HOST, &skv[r]), TN_OK);
        uint8_t *sh;
        size_t sh_len;
        assert_int_equal(te_kv_hello_pack(snd[r], &skv[r], &sh, &sh_len), TN_OK);
        Tandem__Transfer__ControlMessage *sm = te_control_unpack(sh, sh_len);
        assert_non_null(sm);
        assert_int_equal(te_kv_connect(rcv, sm->hello, &from_snd[r]), TN_OK);
        tandem__transfer__control_message__free_unpacked(sm, NULL);
        free(sh);
        assert_int_equal(te_kv_connect(snd[r], dm->hello, &to_rcv[r]), TN_OK);
        assert_int_equal(te_peer_detects_failure(to_rcv[r].peer), want_failure_mode);
        assert_int_equal(te_peer_detects_failure(from_snd[r].peer), want_failure_mode);
        if (!strstr(te_peer_transports(to_rcv[r].peer), want_transport))
            fail_msg("UCX_TLS=%s same_host_shm %d: endpoint uses %s, expected %s", tls,
                     same_host_shm, te_peer_transports(to_rcv[r].peer), want_transport);
        assert_int_equal(te_kv_send(snd[r], &skv[r], spages[r], &to_rcv[r], dpages, TOKENS, 31,
                                    10000, &t[r]), TN_OK);
    }
    int notices = 0;
    while (te_transfer_status(t[0]) == TN_IN_PROGRESS || te_transfer_status(t[1]) == TN_IN_PROGRESS ||
           notices < 2) {
        te_engine_progress(snd[0]);
        te_engine_progress(snd[1]);
        te_engine_progress(rcv);
        te_notice note;
        while (te_engine_next_notice(rcv, &note)) {
            assert_int_equal(note.request_id, 31);
            assert_int_equal(note.status, TN_OK);
            notices++;
        }
    }
    assert_int_equal(te_transfer_status(t[0]), TN_OK);
    assert_int_equal(te_transfer_status(t[1]), TN_OK);
    for (int i = 0; i < LAYERS; i++) {
        assert_int_equal(te_pattern_verify(&dl, dk[i], i, 0, dpages, TOKENS, SEED, 0x5A, why,
                                           sizeof why), 0);
        assert_int_equal(te_pattern_verify(&dl, dv[i], i, 1, dpages, TOKENS, SEED, 0x5A, why,
                                           sizeof why), 0);
    }
    /* The check itself catches a wrong seed. */
    assert_true(te_pattern_verify(&dl, dk[0], 0, 0, dpages, TOKENS, SEED + 1, 0x5A, why,
                                  sizeof why) > 0);
    for (int r = 0; r < 2; r++) {
        te_transfer_release(snd[r], t[r]);
        assert_int_equal(te_kv_disconnect(snd[r], &to_rcv[r]), TN_OK);
        assert_int_equal(te_kv_disconnect(rcv, &from_snd[r]), TN_OK);
        te_kv_deregister(snd[r], &skv[r]);
        te_engine_destroy(snd[r]);
        for (int i = 0; i < LAYERS; i++) {
            free(sk[r][i]);
            free(sv[r][i]);
        }
    }
    tandem__transfer__control_message__free_unpacked(dm, NULL);
    free(hello);
    te_kv_deregister(rcv, &dkv);
    te_engine_destroy(rcv);
    for (int i = 0; i < LAYERS; i++) {
        free(dk[i]);
        free(dv[i]);
    }
}

static void resharded_kv_lands_byte_exact(void **state)
{
    (void)state;
    reshard_case("tcp", 0, 1, "tcp");
}

/* With same_host_shm, engines of one shared-memory domain (here one
 * process) connect without UCX failure handling, so UCX moves the KV over
 * shared memory although UCX_TLS also offers tcp; without it, or when
 * UCX_TLS has no shared-memory transport, the endpoint keeps tcp and
 * failure detection. Either way the bytes land exactly. */
static void same_host_peers_use_shared_memory(void **state)
{
    (void)state;
    reshard_case("tcp,sm,self", 1, 0, "sysv");
    reshard_case("tcp,sm,self", 0, 1, "tcp");
    reshard_case("tcp,self", 1, 1, "tcp");
}

/* The policy behind it: equal non-empty host keys, the option on, and a
 * UCX_TLS that may hold shared memory. */
static void same_host_policy(void **state)
{
    (void)state;
    te_engine *on = make_engine_shm("on", "tcp,sm,self", 0, NULL, 1);
    const char *key = te_engine_host_key(on);
    /* boot id / ipc namespace / pid namespace, all readable here */
    assert_non_null(strstr(key, "ipc:["));
    assert_non_null(strstr(key, "pid:["));
    assert_int_equal(te_engine_peer_is_same_host(on, key), 1);
    assert_int_equal(te_engine_peer_is_same_host(on, ""), 0);
    assert_int_equal(te_engine_peer_is_same_host(on, NULL), 0);
    char other[160];
    snprintf(other, sizeof other, "x%s", key);
    assert_int_equal(te_engine_peer_is_same_host(on, other), 0);
    te_engine *off = make_engine_shm("off", "tcp,sm,self", 0, NULL, 0);
    assert_int_equal(te_engine_peer_is_same_host(off, key), 0);
    static const struct {
        const char *tls;
        int same;
    } cases[] = {{"tcp,self", 0}, {"tcp,posix,self", 1}, {"tcp,sysv,self", 1},
                 {"^sm", 0}, {"^posix", 1}, {"sm,self", 0} /* already shared memory only */};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        te_engine *e = make_engine_shm("tls", cases[i].tls, 0, NULL, 1);
        if (te_engine_peer_is_same_host(e, key) != cases[i].same)
            fail_msg("UCX_TLS=%s: same host %d, expected %d", cases[i].tls,
                     te_engine_peer_is_same_host(e, key), cases[i].same);
        te_engine_destroy(e);
    }
    te_engine_destroy(on);
    te_engine_destroy(off);
}

/* The receiver's endpoint to the sender fails (it was frozen and the
 * sender gave the connection up, or the network broke) while a transfer
 * comes in: its ack cannot go out, so it waits in the engine; once the
 * receiver's owner connects a fresh endpoint to the sender, the ack goes
 * out on it and the sender's transfer completes. */
static void ack_waits_for_a_new_endpoint_and_goes_out_on_it(void **state)
{
    (void)state;
    pair p;
    pair_open(&p, "tcp", 4);
    enum { N = 64 << 10, CHUNK = 4096 };
    uint8_t *src = malloc(N), *dst = calloc(1, N);
    assert_non_null(src);
    assert_non_null(dst);
    fill_random(src, N, 21);
    te_region *rs, *rd;
    te_remote_region *remote = link_regions(&p, src, dst, N, &rs, &rd);
    size_t n = N / CHUNK;
    te_copy *copies = same_offset_copies(n, CHUNK);
    te_peer_fail(p.b, p.b_to_a, "test: the endpoint to the sender failed");
    assert_int_equal(te_peer_status(p.b_to_a), TN_ERR_PEER);
    te_transfer_desc d = {p.a_to_b, 17, &rs, 1, &remote, 1, copies, n, 20000};
    te_transfer *t;
    assert_int_equal(te_transfer_submit(p.a, &d, &t), TN_OK);
    te_notice note;
    int got = 0;
    double deadline = te_now_seconds() + 10;
    while (!got && te_now_seconds() < deadline) {
        te_engine_progress(p.a);
        got = te_engine_next_notice(p.b, &note);
        te_engine_progress(p.b);
    }
    assert_int_equal(got, 1);
    assert_int_equal(note.request_id, 17);
    assert_int_equal(note.status, TN_OK);
    assert_memory_equal(dst, src, N);
    for (int i = 0; i < 200; i++) {
        te_engine_progress(p.a);
        te_engine_progress(p.b);
    }
    /* No usable endpoint: the ack waits, the sender is still waiting too. */
    assert_int_equal(te_transfer_status(t), TN_IN_PROGRESS);
    fflush(p.log);
    assert_non_null(strstr(p.log_text, "waiting for a new endpoint"));
    /* What the decoder asks before reopening: one ack waits for a, none for
     * an engine it never heard from. */
    assert_int_equal(te_engine_acks_waiting(p.b, te_engine_id(p.a)), 1);
    assert_int_equal(te_engine_acks_waiting(p.b, te_engine_id(p.b)), 0);
    const void *addr;
    size_t len;
    te_engine_address(p.a, &addr, &len);
    te_peer *fresh;
    assert_int_equal(te_peer_connect(p.b, addr, len, te_engine_id(p.a), &fresh), TN_OK);
    assert_int_equal(te_peer_wireup_start(p.b, fresh), TN_OK);
    assert_int_equal(pump(&p, t), TN_OK);
    fflush(p.log);
    assert_non_null(strstr(p.log_text, "on a new endpoint"));
    assert_int_equal(te_engine_acks_waiting(p.b, te_engine_id(p.a)), 0);
    te_transfer_release(p.a, t);
    free(copies);
    pair_close(&p);
    free(src);
    free(dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(moves_bytes_over_tcp),
        cmocka_unit_test(moves_bytes_over_tcp_with_puts),
        cmocka_unit_test(moves_bytes_over_shared_memory),
        cmocka_unit_test(armed_descriptor_wakes_over_tcp_and_shared_memory),
        cmocka_unit_test(data_messages_for_unregistered_memory_fail_the_transfer),
        cmocka_unit_test(bad_copies_are_refused_before_any_byte_moves),
        cmocka_unit_test(silent_receiver_times_out_and_leaves_nothing_in_flight),
        cmocka_unit_test(cancel_stops_puts_and_tells_the_receiver),
        cmocka_unit_test(vanished_receiver_fails_the_transfer),
        cmocka_unit_test(ack_waits_for_a_new_endpoint_and_goes_out_on_it),
        cmocka_unit_test(busy_resources_and_unsupported_memory),
        cmocka_unit_test(no_rdma_device_is_one_clear_log_line),
        cmocka_unit_test(nic_selection_prefers_active_near_ports),
        cmocka_unit_test(hello_round_trips_through_protobuf),
        cmocka_unit_test(resharded_kv_lands_byte_exact),
        cmocka_unit_test(same_host_peers_use_shared_memory),
        cmocka_unit_test(same_host_policy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
