/* Scaling simulator: cost and delay arithmetic against hand computations,
 * the seed's cost table, a step load that must scale the prefill pool up and
 * back down only after the scale-down window, and trace parsing errors. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "autoscale/autoscale_sim.h"

/* Both pools pinned to one replica, ready at t = 0. */
static sim_config pinned_config(void)
{
    sim_config c;
    sim_config_default(&c);
    for (int p = 0; p < AS_POOL_COUNT; p++) {
        c.policy.pool[p].min_replicas = 1;
        c.policy.pool[p].max_replicas = 1;
        c.initial[p] = 1;
    }
    c.startup_s = 0.0;
    return c;
}

static void cost_and_delays_match_hand_computation(void **state)
{
    (void)state;
    sim_config c = pinned_config();
    c.prefill_tps = 1000.0;
    c.decode_step_base_s = 0.010;
    c.decode_step_per_seq_s = 0.001;
    c.gpus_per_replica[AS_POOL_PREFILL] = 4;
    c.gpus_per_replica[AS_POOL_DECODE] = 8;
    c.gpu_hour_usd = 3.00;
    /* A: prefill 0 -> 2 s; two decode steps of 0.011 s: done at 2.022.
     * B: waits 1 s behind A, prefill 2 -> 3 s; one output token (made by
     * prefill), so done at 3.0 = the end of the simulation. */
    const sim_request reqs[] = {{0.0, 2000, 3}, {1.0, 1000, 1}};
    sim_result r;
    char err[256];
    assert_int_equal(sim_run(&c, reqs, 2, &r, err, sizeof(err)), 0);
    assert_float_equal(r.end_s, 3.0, 1e-12);
    assert_float_equal(r.input_tokens, 3000.0, 0.0);
    assert_float_equal(r.output_tokens, 4.0, 0.0);
    /* 3 s on 4 GPUs and on 8 GPUs at $3/GPU-hour. */
    assert_float_equal(r.gpu_seconds[AS_POOL_PREFILL], 12.0, 1e-9);
    assert_float_equal(r.gpu_seconds[AS_POOL_DECODE], 24.0, 1e-9);
    assert_float_equal(r.cost_usd[AS_POOL_PREFILL], 0.01, 1e-12);
    assert_float_equal(r.cost_usd[AS_POOL_DECODE], 0.02, 1e-12);
    assert_float_equal(r.usd_per_m_input, 0.01 / 3000.0 * 1e6, 1e-9);  /* $3.3333 */
    assert_float_equal(r.usd_per_m_output, 0.02 / 4.0 * 1e6, 1e-6);    /* $5000 */
    assert_float_equal(r.prefill_wait.max, 1.0, 1e-12);
    assert_float_equal(r.prefill_wait.mean, 0.5, 1e-12);
    assert_float_equal(r.ttft.p50, 2.0, 1e-12);
    assert_float_equal(r.ttft.max, 2.0, 1e-12);
    assert_float_equal(r.decode_wait.max, 0.0, 1e-12);
    assert_float_equal(r.itl.p50, 0.011, 1e-12);
    sim_result_free(&r);
}

/* The seed's prefill table: a busy replica costs gpus * $3/h / tokens/s.
 * GPT-OSS-20B 8192 tokens: EP4 TP4 0.108 s -> $0.044 per million input
 * tokens; EP1 TP1 0.239 s -> $0.024. */
static void full_utilisation_reproduces_seed_cost(void **state)
{
    (void)state;
    enum { N = 200 };
    sim_request reqs[N];
    for (int i = 0; i < N; i++)
        reqs[i] = (sim_request){0.0, 8192, 1};
    sim_config c = pinned_config();
    sim_result r;
    char err[256];
    assert_int_equal(sim_run(&c, reqs, N, &r, err, sizeof(err)), 0); /* defaults: TP4, 4 GPUs */
    assert_float_equal(r.end_s, N * 0.108, 1e-9);
    assert_float_equal(r.usd_per_m_input, 4 * 3.00 / 3600.0 / (8192.0 / 0.108) * 1e6, 1e-9);
    assert_float_equal(r.usd_per_m_input, 0.044, 0.0005);
    sim_result_free(&r);
    c.prefill_tps = 8192.0 / 0.239;
    c.gpus_per_replica[AS_POOL_PREFILL] = 1;
    assert_int_equal(sim_run(&c, reqs, N, &r, err, sizeof(err)), 0);
    assert_float_equal(r.usd_per_m_input, 0.024, 0.0005);
    sim_result_free(&r);
}

/* 8192-token prompts: 1/s for 300 s, 20/s for 300 s, then 1/s again. */
static sim_request *step_trace(size_t *n_out)
{
    size_t cap = 8000, n = 0;
    sim_request *r = malloc(cap * sizeof(*r));
    assert_non_null(r);
    for (double t = 0.0; t < 1500.0 && n < cap;) {
        r[n++] = (sim_request){t, 8192, 20};
        t += (t >= 300.0 && t < 600.0) ? 0.05 : 1.0;
    }
    *n_out = n;
    return r;
}

static void step_load_scales_up_then_down_after_window(void **state)
{
    (void)state;
    sim_config c;
    sim_config_default(&c);
    c.startup_s = 30.0;
    const autoscale_pool_config *pc = &c.policy.pool[AS_POOL_PREFILL];
    size_t n;
    sim_request *reqs = step_trace(&n);
    sim_result r;
    char err[256];
    assert_int_equal(sim_run(&c, reqs, n, &r, err, sizeof(err)), 0);

    double first_up = -1, first_down = -1;
    for (size_t i = 0; i < r.n_timeline; i++) {
        const sim_timeline_point *p = &r.timeline[i];
        if (first_up < 0 && p->desired[AS_POOL_PREFILL] > p->current[AS_POOL_PREFILL])
            first_up = p->t;
        if (first_down < 0 && p->desired[AS_POOL_PREFILL] < p->current[AS_POOL_PREFILL])
            first_down = p->t;
        /* Every scale-down: no evaluation inside the down window before it
         * asked for more than the new count. */
        if (p->desired[AS_POOL_PREFILL] < p->current[AS_POOL_PREFILL]) {
            assert_true(p->t - r.timeline[0].t >= pc->scale_down_window_s);
            for (size_t j = 0; j <= i; j++)
                if (r.timeline[j].t >= p->t - pc->scale_down_window_s)
                    assert_true(r.timeline[j].formula[AS_POOL_PREFILL] <= p->desired[AS_POOL_PREFILL]);
        }
    }
    /* 1/s of 8192 tokens is 8192 tok/s: one replica. 20/s is 163840 tok/s:
     * ceil(163840 / (0.8 * 75852)) = 3 replicas, more while a backlog drains.
     * Up once the load has held for the up window. */
    assert_true(first_up >= 300.0 + pc->scale_up_window_s);
    assert_true(first_up <= 300.0 + pc->scale_up_window_s + c.eval_interval_s);
    assert_true(r.max_ready[AS_POOL_PREFILL] >= 3);
    /* Nothing is removed while the step load lasts. */
    assert_true(first_down > 600.0);
    assert_int_equal(r.timeline[r.n_timeline - 1].current[AS_POOL_PREFILL], 1);
    assert_true(r.scale_downs[AS_POOL_PREFILL] >= 2);
    /* No flapping: every scale-up comes before every scale-down. */
    int seen_down = 0;
    for (size_t i = 0; i < r.n_timeline; i++) {
        const sim_timeline_point *p = &r.timeline[i];
        if (p->desired[AS_POOL_PREFILL] < p->current[AS_POOL_PREFILL])
            seen_down = 1;
        if (p->desired[AS_POOL_PREFILL] > p->current[AS_POOL_PREFILL])
            assert_false(seen_down);
    }
    assert_true(r.n_requests == n);
    sim_result_free(&r);
    free(reqs);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void trace_parsing(void **state)
{
    (void)state;
    char path[] = "/tmp/tandem-trace-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    sim_request *reqs = NULL;
    size_t n = 0;
    char err[512];
    write_text(path, "time_s,input_tokens,output_tokens\n# a comment\n0.5,100,10\n\n1.25, 200 ,20\n");
    assert_int_equal(sim_load_trace(path, &reqs, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 2);
    assert_float_equal(reqs[1].t, 1.25, 0.0);
    assert_int_equal(reqs[1].input_tokens, 200);
    assert_int_equal(reqs[1].output_tokens, 20);
    free(reqs);
    write_text(path, "1.0,100,10\n0.5,100,10\n");
    assert_int_equal(sim_load_trace(path, &reqs, &n, err, sizeof(err)), -1);
    assert_non_null(strstr(err, ":2: arrival times must not decrease"));
    write_text(path, "1.0,100\n");
    assert_int_equal(sim_load_trace(path, &reqs, &n, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "expected time_s,input_tokens,output_tokens"));
    write_text(path, "1.0,abc,10\n");
    assert_int_equal(sim_load_trace(path, &reqs, &n, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "bad number"));
    write_text(path, "1.0,0,10\n");
    assert_int_equal(sim_load_trace(path, &reqs, &n, err, sizeof(err)), -1);
    write_text(path, "time_s,input_tokens,output_tokens\n");
    assert_int_equal(sim_load_trace(path, &reqs, &n, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "no requests"));
    unlink(path);
    assert_int_equal(sim_load_trace(path, &reqs, &n, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "cannot open trace"));
}

static void percentiles_are_nearest_rank(void **state)
{
    (void)state;
    double v[100];
    for (int i = 0; i < 100; i++)
        v[i] = 100 - i; /* 100 .. 1, unsorted */
    sim_percentiles p = sim_percentiles_of(v, 100);
    assert_float_equal(p.p50, 50.0, 0.0);
    assert_float_equal(p.p90, 90.0, 0.0);
    assert_float_equal(p.p99, 99.0, 0.0);
    assert_float_equal(p.max, 100.0, 0.0);
    assert_float_equal(p.mean, 50.5, 1e-12);
    double one = 7.0;
    p = sim_percentiles_of(&one, 1);
    assert_float_equal(p.p50, 7.0, 0.0);
    assert_float_equal(p.p99, 7.0, 0.0);
}

static void bad_config_is_rejected(void **state)
{
    (void)state;
    sim_config c;
    char err[256];
    sim_config_default(&c);
    assert_int_equal(sim_config_set_flag(&c, "prefill-gpus", "0", err, sizeof(err)), 0);
    assert_int_equal(sim_config_validate(&c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "prefill-gpus"));
    sim_config_default(&c);
    assert_int_equal(sim_config_set_flag(&c, "gpu-hour-usd", "2.5", err, sizeof(err)), 0);
    assert_float_equal(c.gpu_hour_usd, 2.5, 0.0);
    assert_int_equal(sim_config_set_flag(&c, "autoscale-decode-max-batch", "32", err, sizeof(err)), 0);
    assert_float_equal(c.policy.decode_max_batch, 32.0, 0.0);
    assert_int_equal(sim_config_set_flag(&c, "no-such-flag", "1", err, sizeof(err)), 1);
    assert_int_equal(sim_config_set_flag(&c, "startup-s", "soon", err, sizeof(err)), -1);
    c.initial[AS_POOL_DECODE] = 99;
    assert_int_equal(sim_config_validate(&c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "initial-decode"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cost_and_delays_match_hand_computation),
        cmocka_unit_test(full_utilisation_reproduces_seed_cost),
        cmocka_unit_test(step_load_scales_up_then_down_after_window),
        cmocka_unit_test(trace_parsing),
        cmocka_unit_test(percentiles_are_nearest_rank),
        cmocka_unit_test(bad_config_is_rejected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
