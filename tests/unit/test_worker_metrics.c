/* Worker metrics (worker/worker_metrics.h): the exposition text follows
 * docs/METRICS.md (names, labels, cumulative buckets, one HELP/TYPE per
 * family however many workers), and the heartbeat's WorkerMetrics carries
 * every number through a real protobuf pack/unpack unchanged. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "worker/worker_metrics.h"

static int count_lines_starting(const char *text, const char *prefix)
{
    int n = 0;
    size_t l = strlen(prefix);
    for (const char *p = text; p && *p;) {
        if (!strncmp(p, prefix, l))
            n++;
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return n;
}

static void has_line(const char *text, const char *line)
{
    char *want = malloc(strlen(line) + 3);
    assert_non_null(want);
    sprintf(want, "\n%s\n", line);
    if (!strstr(text, want))
        print_error("missing line: %s\n", line);
    assert_non_null(strstr(text, want));
    free(want);
}

static void prefiller_series(void **state)
{
    (void)state;
    worker_metrics m;
    worker_metrics_init(&m, WM_PREFILL);
    m.prefill_input_tokens = 4096;
    m.prefill_busy_s = 0.5;
    m.prefill_requests[OUTCOME_OK] = 3;
    m.prefill_requests[OUTCOME_CANCELLED] = 1;
    m.prefill_queue_depth = 2;
    /* Durations on both sides of bucket bounds: 0.01 is in le="0.01"
     * (bounds are inclusive), 0.011 in le="0.025", 40 only in +Inf. */
    histogram_observe(&m.prefill_duration, 0.01);
    histogram_observe(&m.prefill_duration, 0.011);
    histogram_observe(&m.prefill_duration, 40);
    m.kv_transfer_bytes = 12288;
    m.kv_transfers[OUTCOME_OK] = 3;
    histogram_observe(&m.kv_transfer_duration, 0.002);
    m.draining = 1;
    sbuf b;
    sb_init(&b);
    worker_metrics_view v = {"prefill-0", &m};
    worker_metrics_render(&b, &v, 1, "prefiller");
    assert_false(b.oom);
    const char *t = b.p;
    has_line(t, "# TYPE tandem_prefill_input_tokens_total counter");
    has_line(t, "tandem_prefill_input_tokens_total{pool=\"prefill\",worker=\"prefill-0\"} 4096");
    has_line(t, "tandem_prefill_busy_seconds_total{pool=\"prefill\",worker=\"prefill-0\"} 0.5");
    has_line(t, "tandem_prefill_requests_total{pool=\"prefill\",worker=\"prefill-0\",outcome=\"ok\"} 3");
    has_line(t, "tandem_prefill_requests_total{pool=\"prefill\",worker=\"prefill-0\",outcome=\"cancelled\"} 1");
    has_line(t, "tandem_prefill_requests_total{pool=\"prefill\",worker=\"prefill-0\",outcome=\"timeout\"} 0");
    has_line(t, "tandem_prefill_queue_depth{pool=\"prefill\",worker=\"prefill-0\"} 2");
    has_line(t, "tandem_prefill_duration_seconds_bucket{pool=\"prefill\",worker=\"prefill-0\",le=\"0.01\"} 1");
    has_line(t, "tandem_prefill_duration_seconds_bucket{pool=\"prefill\",worker=\"prefill-0\",le=\"0.025\"} 2");
    has_line(t, "tandem_prefill_duration_seconds_bucket{pool=\"prefill\",worker=\"prefill-0\",le=\"30\"} 2");
    has_line(t, "tandem_prefill_duration_seconds_bucket{pool=\"prefill\",worker=\"prefill-0\",le=\"+Inf\"} 3");
    has_line(t, "tandem_prefill_duration_seconds_count{pool=\"prefill\",worker=\"prefill-0\"} 3");
    has_line(t, "tandem_prefill_duration_seconds_sum{pool=\"prefill\",worker=\"prefill-0\"} 40.021");
    has_line(t, "tandem_worker_draining{pool=\"prefill\",worker=\"prefill-0\"} 1");
    has_line(t, "tandem_kv_transfer_bytes_total{pool=\"prefill\",worker=\"prefill-0\",direction=\"send\"} 12288");
    has_line(t, "tandem_kv_transfers_total{pool=\"prefill\",worker=\"prefill-0\",direction=\"send\",outcome=\"ok\"} 3");
    has_line(t, "tandem_kv_transfer_duration_seconds_bucket{pool=\"prefill\",worker=\"prefill-0\",direction=\"send\",le=\"0.0025\"} 1");
    has_line(t, "tandem_build_info{process=\"prefiller\",version=\"0.1\"} 1");
    /* A prefiller exports no decoder family. */
    assert_null(strstr(t, "tandem_decode_"));
    assert_null(strstr(t, "tandem_kv_cache_"));
    /* 11 bounds + Inf buckets. */
    assert_int_equal(count_lines_starting(t, "tandem_prefill_duration_seconds_bucket{"), 12);
    sb_free(&b);
}

static void families_once_for_many_workers(void **state)
{
    (void)state;
    worker_metrics d0, d1, p0;
    worker_metrics_init(&d0, WM_DECODE);
    worker_metrics_init(&d1, WM_DECODE);
    worker_metrics_init(&p0, WM_PREFILL);
    d0.decode_batch_size = 5;
    d0.kv_blocks_used = 25;
    d0.kv_blocks_total = 100;
    d1.decode_batch_size = 7;
    histogram_observe(&d1.decode_step_batch, 7);
    histogram_observe(&d1.decode_step_duration, 0.004);
    d1.decode_output_tokens = 70;
    worker_metrics_view v[3] = {{"decode-0", &d0}, {"prefill-0", &p0}, {"de\"co\\de\n1", &d1}};
    sbuf b;
    sb_init(&b);
    worker_metrics_render(&b, v, 3, NULL);
    const char *t = b.p;
    assert_int_equal(count_lines_starting(t, "# TYPE tandem_decode_batch_size "), 1);
    assert_int_equal(count_lines_starting(t, "# TYPE tandem_worker_draining "), 1);
    assert_int_equal(count_lines_starting(t, "tandem_worker_draining{"), 3);
    has_line(t, "tandem_decode_batch_size{pool=\"decode\",worker=\"decode-0\"} 5");
    /* Label values escape quote, backslash and newline. */
    has_line(t, "tandem_decode_batch_size{pool=\"decode\",worker=\"de\\\"co\\\\de\\n1\"} 7");
    has_line(t, "tandem_kv_cache_occupancy_ratio{pool=\"decode\",worker=\"decode-0\"} 0.25");
    has_line(t, "tandem_kv_cache_occupancy_ratio{pool=\"decode\",worker=\"de\\\"co\\\\de\\n1\"} 0");
    has_line(t, "tandem_decode_step_batch_size_bucket{pool=\"decode\",worker=\"de\\\"co\\\\de\\n1\",le=\"4\"} 0");
    has_line(t, "tandem_decode_step_batch_size_bucket{pool=\"decode\",worker=\"de\\\"co\\\\de\\n1\",le=\"8\"} 1");
    has_line(t, "tandem_decode_step_duration_seconds_bucket{pool=\"decode\",worker=\"de\\\"co\\\\de\\n1\",le=\"0.005\"} 1");
    has_line(t, "tandem_kv_transfer_bytes_total{pool=\"decode\",worker=\"decode-0\",direction=\"recv\"} 0");
    /* Decoders do not time transfers (the sender does). */
    assert_int_equal(count_lines_starting(t, "tandem_kv_transfer_duration_seconds_count{"), 1);
    /* No build_info in the router's relay (it would repeat one label set). */
    assert_null(strstr(t, "tandem_build_info"));
    /* Every family's samples follow its header without interleaving: the
     * last TYPE line before each sample names the sample's family. */
    char family[128] = "";
    for (const char *p = t; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = (size_t)(e - p);
        if (!strncmp(p, "# TYPE ", 7)) {
            sscanf(p + 7, "%127s", family);
        } else if (p[0] != '#') {
            assert_true(len > strlen(family) && !strncmp(p, family, strlen(family)));
        }
        p = e + 1;
    }
    sb_free(&b);
}

static void equal_metrics(const worker_metrics *a, const worker_metrics *b)
{
    assert_int_equal(a->prefill_input_tokens, b->prefill_input_tokens);
    assert_true(a->prefill_busy_s == b->prefill_busy_s);
    assert_memory_equal(a->prefill_requests, b->prefill_requests, sizeof a->prefill_requests);
    assert_int_equal(a->prefill_queue_depth, b->prefill_queue_depth);
    const histogram *ha[] = {&a->prefill_duration, &a->decode_step_batch, &a->decode_step_duration,
                             &a->kv_transfer_duration};
    const histogram *hb[] = {&b->prefill_duration, &b->decode_step_batch, &b->decode_step_duration,
                             &b->kv_transfer_duration};
    for (int i = 0; i < 4; i++) {
        assert_memory_equal(ha[i]->counts, hb[i]->counts, sizeof ha[i]->counts);
        assert_true(ha[i]->sum == hb[i]->sum);
        assert_int_equal(ha[i]->count, hb[i]->count);
    }
    assert_int_equal(a->decode_batch_size, b->decode_batch_size);
    assert_int_equal(a->decode_waiting, b->decode_waiting);
    assert_int_equal(a->decode_output_tokens, b->decode_output_tokens);
    assert_memory_equal(a->decode_requests, b->decode_requests, sizeof a->decode_requests);
    assert_int_equal(a->kv_blocks_used, b->kv_blocks_used);
    assert_int_equal(a->kv_blocks_total, b->kv_blocks_total);
    assert_int_equal(a->kv_transfer_bytes, b->kv_transfer_bytes);
    assert_memory_equal(a->kv_transfers, b->kv_transfers, sizeof a->kv_transfers);
}

/* to_wire -> pack -> unpack -> from_wire gives the same numbers. */
static void roundtrip(const worker_metrics *m)
{
    worker_metrics_wire st;
    Tandem__V1__Heartbeat hb = TANDEM__V1__HEARTBEAT__INIT;
    hb.draining = 1;
    hb.metrics = worker_metrics_to_wire(m, &st);
    size_t n = tandem__v1__heartbeat__get_packed_size(&hb);
    uint8_t *buf = malloc(n);
    assert_non_null(buf);
    tandem__v1__heartbeat__pack(&hb, buf);
    Tandem__V1__Heartbeat *got = tandem__v1__heartbeat__unpack(NULL, n, buf);
    assert_non_null(got);
    assert_true(got->draining);
    worker_metrics back;
    worker_metrics_init(&back, m->pool);
    assert_int_equal(worker_metrics_from_wire(&back, got->metrics), 0);
    equal_metrics(m, &back);
    tandem__v1__heartbeat__free_unpacked(got, NULL);
    free(buf);
}

static void wire_roundtrip(void **state)
{
    (void)state;
    worker_metrics p, d;
    worker_metrics_init(&p, WM_PREFILL);
    worker_metrics_init(&d, WM_DECODE);
    p.prefill_input_tokens = 123456789012ull;
    p.prefill_busy_s = 12.345678901;
    p.prefill_requests[OUTCOME_ERROR] = 4;
    p.prefill_queue_depth = 9;
    for (int i = 0; i < 50; i++)
        histogram_observe(&p.prefill_duration, 0.003 * i * i);
    histogram_observe(&p.kv_transfer_duration, 0.3);
    p.kv_transfer_bytes = 1ull << 40;
    p.kv_transfers[OUTCOME_CANCELLED] = 2;
    roundtrip(&p);
    d.decode_batch_size = 64;
    d.decode_waiting = 3;
    for (int i = 1; i < 300; i += 7) {
        histogram_observe(&d.decode_step_batch, i);
        histogram_observe(&d.decode_step_duration, i * 0.001);
    }
    d.decode_output_tokens = 999;
    d.decode_requests[OUTCOME_OK] = 10;
    d.decode_requests[OUTCOME_CLIENT_ERROR] = 1;
    d.kv_blocks_used = 512;
    d.kv_blocks_total = 1024;
    d.kv_transfer_bytes = 4096;
    d.kv_transfers[OUTCOME_OK] = 10;
    roundtrip(&d);
}

static void malformed_wire_is_refused(void **state)
{
    (void)state;
    worker_metrics m, before;
    worker_metrics_init(&m, WM_DECODE);
    m.decode_batch_size = 4;
    before = m;
    uint64_t buckets[3] = {1, 2, 3};
    Tandem__V1__HistogramData h = TANDEM__V1__HISTOGRAM_DATA__INIT;
    h.bucket_counts = buckets;
    h.n_bucket_counts = 3; /* step batch has 11 bounds: 12 buckets */
    Tandem__V1__WorkerMetrics w = TANDEM__V1__WORKER_METRICS__INIT;
    w.decode_batch_size = 99;
    w.decode_step_batch_size = &h;
    assert_int_equal(worker_metrics_from_wire(&m, &w), -1);
    assert_int_equal(m.decode_batch_size, before.decode_batch_size);
    uint64_t outcomes[2] = {1, 2};
    Tandem__V1__WorkerMetrics w2 = TANDEM__V1__WORKER_METRICS__INIT;
    w2.decode_requests_by_outcome = outcomes;
    w2.n_decode_requests_by_outcome = 2;
    assert_int_equal(worker_metrics_from_wire(&m, &w2), -1);
    /* Absent parts (another role's) are zeros, not errors. */
    Tandem__V1__WorkerMetrics w3 = TANDEM__V1__WORKER_METRICS__INIT;
    w3.decode_batch_size = 5;
    assert_int_equal(worker_metrics_from_wire(&m, &w3), 0);
    assert_int_equal(m.decode_batch_size, 5);
    assert_int_equal(m.decode_step_batch.count, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(prefiller_series),
        cmocka_unit_test(families_once_for_many_workers),
        cmocka_unit_test(wire_roundtrip),
        cmocka_unit_test(malformed_wire_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
