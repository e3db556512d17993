/* Autoscale policy: each formula against an independent reference (the
 * smallest replica count whose capacity covers the demand, found by counting
 * up), and the damping rules (windows, cooldowns, clamps, steps) on
 * hand-built time series, including an oscillating load that must not flap. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>
#include "autoscale/autoscale_policy.h"

/* A config whose damping is off unless a test turns it on. */
static autoscale_config bare_config(void)
{
    autoscale_config c;
    autoscale_config_default(&c);
    c.prefill_target_utilisation = 0.5;
    c.prefill_prior_tps = 1000.0;
    c.prefill_backlog_drain_s = 0.0;
    c.decode_max_batch = 10.0;
    c.decode_headroom = 0.0;
    for (int p = 0; p < AS_POOL_COUNT; p++) {
        c.pool[p].min_replicas = 1;
        c.pool[p].max_replicas = 20;
        c.pool[p].scale_up_window_s = 0;
        c.pool[p].scale_down_window_s = 0;
        c.pool[p].scale_up_cooldown_s = 0;
        c.pool[p].scale_down_cooldown_s = 0;
        c.pool[p].max_step_up = 100;
        c.pool[p].max_step_down = 100;
    }
    return c;
}

/* Smallest n with n * u * tps >= demand, counted up in long double. */
static int reference_prefill(double demand, double u, double tps)
{
    int n = 0;
    while ((long double)n * u * tps < (long double)demand * (1.0L - 1e-12L))
        n++;
    return n;
}

static void prefill_formula_matches_reference(void **state)
{
    (void)state;
    const double utils[] = {0.5, 0.8, 1.0};
    const double tps[] = {1000.0, 8192.0 / 0.108, 8192.0 / 0.239};
    for (int u = 0; u < 3; u++)
        for (int t = 0; t < 3; t++)
            for (double demand = 0.0; demand < 400000.0; demand += 7919.0) {
                int got = autoscale_prefill_replicas_for(demand, utils[u], tps[t]);
                assert_int_equal(got, reference_prefill(demand, utils[u], tps[t]));
            }
    /* Exact multiples do not round up an extra replica. */
    assert_int_equal(autoscale_prefill_replicas_for(3 * 0.8 * 1000.0, 0.8, 1000.0), 3);
    assert_int_equal(autoscale_prefill_replicas_for(3 * 0.8 * 1000.0 + 1.0, 0.8, 1000.0), 4);
    assert_int_equal(autoscale_prefill_replicas_for(0.0, 0.8, 1000.0), 0);
    /* Worked example from docs/AUTOSCALING.md: 100k tok/s at 80% of 75852. */
    assert_int_equal(autoscale_prefill_replicas_for(100000.0, 0.8, 8192.0 / 0.108), 2);
    assert_int_equal(autoscale_prefill_replicas_for(-1.0, 0.8, 1000.0), -1);
    assert_int_equal(autoscale_prefill_replicas_for(1.0, 0.0, 1000.0), -1);
    assert_int_equal(autoscale_prefill_replicas_for(1.0, 0.8, 0.0), -1);
    assert_int_equal(autoscale_prefill_replicas_for(NAN, 0.8, 1000.0), -1);
}

static void decode_formula_matches_reference(void **state)
{
    (void)state;
    const double batches[] = {1.0, 16.0, 64.0, 100.0};
    const double headrooms[] = {0.0, 0.1, 0.25};
    for (int b = 0; b < 4; b++)
        for (int h = 0; h < 3; h++)
            for (long seqs = 0; seqs < 1000; seqs += 13) {
                int ref = 0;
                while ((long double)ref * batches[b] < (long double)seqs * (1.0L + headrooms[h]) * (1.0L - 1e-12L))
                    ref++;
                assert_int_equal(autoscale_decode_replicas_for(seqs, batches[b], headrooms[h]), ref);
            }
    assert_int_equal(autoscale_decode_replicas_for(128, 64.0, 0.0), 2);
    assert_int_equal(autoscale_decode_replicas_for(129, 64.0, 0.0), 3);
    assert_int_equal(autoscale_decode_replicas_for(116, 64.0, 0.1), 2); /* 127.6 / 64 */
    assert_int_equal(autoscale_decode_replicas_for(117, 64.0, 0.1), 3); /* 128.7 / 64 */
    assert_int_equal(autoscale_decode_replicas_for(-1, 64.0, 0.1), -1);
    assert_int_equal(autoscale_decode_replicas_for(1, 0.0, 0.1), -1);
}

static void ewma_weights_by_busy_time(void **state)
{
    (void)state;
    /* One half-life of busy time moves the estimate half way. */
    assert_float_equal(autoscale_ewma_update(1000.0, 2000.0, 30.0, 30.0), 1500.0, 1e-9);
    /* Two half-lives: 3/4 of the way; the same as two one-half-life steps. */
    double two = autoscale_ewma_update(1000.0, 2000.0, 60.0, 30.0);
    double step = autoscale_ewma_update(autoscale_ewma_update(1000.0, 2000.0, 30.0, 30.0), 2000.0, 30.0, 30.0);
    assert_float_equal(two, 1750.0, 1e-9);
    assert_float_equal(step, 1750.0, 1e-9);
    /* No busy time: no information, no change. Bad samples are ignored. */
    assert_float_equal(autoscale_ewma_update(1000.0, 5.0, 0.0, 30.0), 1000.0, 0.0);
    assert_float_equal(autoscale_ewma_update(1000.0, NAN, 1.0, 30.0), 1000.0, 0.0);
    assert_float_equal(autoscale_ewma_update(1000.0, -3.0, 1.0, 30.0), 1000.0, 0.0);
}

static autoscale_observation obs_at(double t, double tps, int cur_p, int cur_d)
{
    autoscale_observation o;
    memset(&o, 0, sizeof(o));
    o.now_s = t;
    o.input_tps_arriving = tps;
    o.current[AS_POOL_PREFILL] = cur_p;
    o.current[AS_POOL_DECODE] = cur_d;
    return o;
}

static void cold_start_uses_prior_then_measurements(void **state)
{
    (void)state;
    autoscale_config c = bare_config();
    c.prefill_halflife_busy_s = 10.0;
    autoscale_policy p;
    char err[256];
    assert_int_equal(autoscale_policy_init(&p, &c, err, sizeof(err)), 0);
    autoscale_decision d;
    /* 2500 tok/s at 50% of the 1000 tok/s prior: ceil(5) = 5. */
    autoscale_observation o = obs_at(0.0, 2500.0, 1, 1);
    assert_int_equal(autoscale_policy_evaluate(&p, &o, &d, err, sizeof(err)), 0);
    assert_float_equal(d.prefill_tps_per_replica, 1000.0, 0.0);
    assert_int_equal(d.formula[AS_POOL_PREFILL], 5);
    assert_int_equal(d.desired[AS_POOL_PREFILL], 5);
    assert_non_null(strstr(d.reason[AS_POOL_PREFILL], "scale up"));
    /* Measured replicas run at 2500 tok/s of busy time; 40 busy seconds
     * (4 half-lives) over two replicas move the estimate 15/16 of the way. */
    autoscale_prefill_sample s[2] = {{25000.0, 10.0}, {75000.0, 30.0}};
    o = obs_at(10.0, 2500.0, 5, 1);
    o.prefill_samples = s;
    o.n_prefill_samples = 2;
    assert_int_equal(autoscale_policy_evaluate(&p, &o, &d, err, sizeof(err)), 0);
    assert_float_equal(d.prefill_tps_per_replica, 1000.0 + 1500.0 * 15.0 / 16.0, 1e-6);
    assert_int_equal(d.formula[AS_POOL_PREFILL], 3); /* 2500 / (0.5 * 2406.25) = 2.08 */
    /* A replica that did work but reports zero tokens cannot drive the
     * estimate below the floor (10% of the prior). */
    autoscale_prefill_sample zero = {0.0, 1000.0};
    o = obs_at(20.0, 2500.0, 3, 1);
    o.prefill_samples = &zero;
    o.n_prefill_samples = 1;
    assert_int_equal(autoscale_policy_evaluate(&p, &o, &d, err, sizeof(err)), 0);
    assert_float_equal(d.prefill_tps_per_replica, 100.0, 1e-9);
    assert_int_equal(d.formula[AS_POOL_PREFILL], 20); /* ceil(50) clamped to max 20 */
    autoscale_policy_free(&p);
}

static void backlog_adds_to_demand(void **state)
{
    (void)state;
    autoscale_config c = bare_config();
    c.prefill_backlog_drain_s = 10.0;
    autoscale_policy p;
    autoscale_decision d;
    assert_int_equal(autoscale_policy_init(&p, &c, NULL, 0), 0);
    autoscale_observation o = obs_at(0.0, 1000.0, 1, 1);
    o.prefill_queued_tokens = 20000.0; /* + 2000 tok/s */
    assert_int_equal(autoscale_policy_evaluate(&p, &o, &d, NULL, 0), 0);
    assert_float_equal(d.prefill_demand_tps, 3000.0, 1e-9);
    assert_int_equal(d.formula[AS_POOL_PREFILL], 6);
    autoscale_policy_free(&p);
}

static void decode_counts_running_and_waiting(void **state)
{
    (void)state;
    autoscale_config c = bare_config();
    c.decode_headroom = 0.2;
    autoscale_policy p;
    autoscale_decision d;
    assert_int_equal(autoscale_policy_init(&p, &c, NULL, 0), 0);
    int running[3] = {10, 9, 7};
    autoscale_observation o = obs_at(0.0, 0.0, 1, 3);
    o.decoder_running = running;
    o.n_decoders = 3;
    o.decode_waiting = 4; /* 30 seqs * 1.2 / 10 = 3.6 -> 4 */
    assert_int_equal(autoscale_policy_evaluate(&p, &o, &d, NULL, 0), 0);
    assert_int_equal(d.decode_sequences, 30);
    assert_int_equal(d.formula[AS_POOL_DECODE], 4);
    assert_int_equal(d.desired[AS_POOL_DECODE], 4);
    assert_int_equal(d.action[AS_POOL_DECODE], AS_ACTION_UP);
    autoscale_policy_free(&p);
}

static void formula_is_clamped_to_min_and_max(void **state)
{
    (void)state;
    autoscale_config c = bare_config();
    c.pool[AS_POOL_PREFILL].min_replicas = 2;
    c.pool[AS_POOL_PREFILL].max_replicas = 6;
    autoscale_policy p;
    autoscale_decision d;
    assert_int_equal(autoscale_policy_init(&p, &c, NULL, 0), 0);
    autoscale_observation o = obs_at(0.0, 0.0, 2, 1);
    assert_int_equal(autoscale_policy_evaluate(&p, &o, &d, NULL, 0), 0);
    assert_int_equal(d.formula[AS_POOL_PREFILL], 2);
    assert_int_equal(d.desired[AS_POOL_PREFILL], 2);
    o = obs_at(1.0, 1e9, 2, 1);
    assert_int_equal(autoscale_policy_evaluate(&p, &o, &d, NULL, 0), 0);
    assert_int_equal(d.formula[AS_POOL_PREFILL], 6);
    assert_int_equal(d.desired[AS_POOL_PREFILL], 6);
    /* A count set by hand outside [min, max] is pulled back. */
    o = obs_at(2.0, 1e9, 9, 1);
    assert_int_equal(autoscale_policy_evaluate(&p, &o, &d, NULL, 0), 0);
    assert_int_equal(d.desired[AS_POOL_PREFILL], 6);
    autoscale_policy_free(&p);
}

/* Runs one evaluation of the prefill pool and returns desired. */
static int step(autoscale_policy *p, double t, double tps, int current)
{
    autoscale_decision d;
    char err[256];
    autoscale_observation o = obs_at(t, tps, current, 1);
    assert_int_equal(autoscale_policy_evaluate(p, &o, &d, err, sizeof(err)), 0);
    return d.desired[AS_POOL_PREFILL];
}

static void scale_up_waits_for_the_up_window(void **state)
{
    (void)state;
    autoscale_config c = bare_config();
    c.pool[AS_POOL_PREFILL].scale_up_window_s = 30.0;
    autoscale_policy p;
    assert_int_equal(autoscale_policy_init(&p, &c, NULL, 0), 0);
    int cur = 1;
    /* Low load for 100 s, then 4 replicas' worth from t = 100. */
    for (double t = 0.0; t < 100.0; t += 5.0)
        assert_int_equal(step(&p, t, 400.0, cur), 1);
    for (double t = 100.0; t < 130.0; t += 5.0)
        assert_int_equal(step(&p, t, 2000.0, cur), 1);
    /* At t = 130 the value 4 has been in effect for the whole window. */
    assert_int_equal(step(&p, 130.0, 2000.0, cur), 4);
    autoscale_policy_free(&p);

    /* A cold start with high load also waits for the window: the window is
     * not observed until the history reaches back 30 s. */
    assert_int_equal(autoscale_policy_init(&p, &c, NULL, 0), 0);
    assert_int_equal(step(&p, 0.0, 2000.0, 1), 1);
    assert_int_equal(step(&p, 29.0, 2000.0, 1), 1);
    assert_int_equal(step(&p, 30.0, 2000.0, 1), 4);
    autoscale_policy_free(&p);

    /* A dip inside the window restarts the wait: min over the window. */
    assert_int_equal(autoscale_policy_init(&p, &c, NULL, 0), 0);
    assert_int_equal(step(&p, 0.0, 2000.0, 1), 1);
    assert_int_equal(step(&p, 20.0, 400.0, 1), 1);
    assert_int_equal(step(&p, 25.0, 2000.0, 1), 1);
    assert_int_equal(step(&p, 54.0, 2000.0, 1), 1);
    assert_int_equal(step(&p, 55.0, 2000.0, 1), 4);
    autoscale_policy_free(&p);
}

static void scale_down_uses_max_over_the_down_window(void **state)
{
    (void)state;
    autoscale_config c = bare_config();
    c.pool[AS_POOL_PREFILL].scale_down_window_s = 300.0;
    autoscale_policy p;
    assert_int_equal(autoscale_policy_init(&p, &c, NULL, 0), 0);
    int cur = 4;
    for (double t = 0.0; t < 200.0; t += 10.0)
        assert_int_equal(step(&p, t, 2000.0, cur), 4);
    /* Load drops at t = 200, with one busy blip (3 replicas) at t = 350. */
    for (double t = 200.0; t < 500.0; t += 10.0) {
        double tps = t == 350.0 ? 1500.0 : 400.0;
        assert_int_equal(step(&p, t, tps, cur), 4);
    }
    /* t = 500: the window [200, 500] no longer holds a 4, but holds the blip. */
    assert_int_equal(step(&p, 500.0, 400.0, cur), 3);
    cur = 3;
    for (double t = 510.0; t <= 650.0; t += 10.0)
        assert_int_equal(step(&p, t, 400.0, cur), 3);
    /* t = 660: the blip was replaced at 360, so the window is all quiet. */
    assert_int_equal(step(&p, 660.0, 400.0, cur), 1);
    autoscale_policy_free(&p);
}

static void cooldown_blocks_the_next_action(void **state)
{
    (void)state;
    autoscale_config c = bare_config();
    c.pool[AS_POOL_PREFILL].scale_up_cooldown_s = 60.0;
    c.pool[AS_POOL_PREFILL].scale_down_cooldown_s = 100.0;
    autoscale_policy p;
    assert_int_equal(autoscale_policy_init(&p, &c, NULL, 0), 0);
    assert_int_equal(step(&p, 0.0, 1000.0, 1), 2);  /* acts at 0 */
    assert_int_equal(step(&p, 10.0, 3000.0, 2), 2); /* held: up cooldown */
    assert_int_equal(step(&p, 59.0, 3000.0, 2), 2);
    assert_int_equal(step(&p, 60.0, 3000.0, 2), 6); /* acts at 60 */
    assert_int_equal(step(&p, 61.0, 400.0, 6), 6);  /* held: down cooldown */
    assert_int_equal(step(&p, 159.0, 400.0, 6), 6);
    assert_int_equal(step(&p, 160.0, 400.0, 6), 1);
    autoscale_policy_free(&p);
}

static void step_size_is_limited(void **state)
{
    (void)state;
    autoscale_config c = bare_config();
    c.pool[AS_POOL_PREFILL].max_step_up = 4;
    c.pool[AS_POOL_PREFILL].max_step_down = 1;
    autoscale_policy p;
    autoscale_decision d;
    assert_int_equal(autoscale_policy_init(&p, &c, NULL, 0), 0);
    autoscale_observation o = obs_at(0.0, 5000.0, 1, 1); /* formula 10 */
    assert_int_equal(autoscale_policy_evaluate(&p, &o, &d, NULL, 0), 0);
    assert_int_equal(d.desired[AS_POOL_PREFILL], 5);
    assert_non_null(strstr(d.reason[AS_POOL_PREFILL], "step-limited"));
    assert_int_equal(step(&p, 1.0, 5000.0, 5), 9);
    assert_int_equal(step(&p, 2.0, 5000.0, 9), 10);
    assert_int_equal(step(&p, 3.0, 0.0, 10), 9);
    assert_int_equal(step(&p, 4.0, 0.0, 9), 8);
    autoscale_policy_free(&p);
}

/* Square wave between 1 and 6 replicas' worth of load. With the default-like
 * windows the count must change at most once up and never back down while
 * the wave continues: no flapping. */
static void oscillating_load_does_not_flap(void **state)
{
    (void)state;
    autoscale_config c = bare_config();
    c.pool[AS_POOL_PREFILL].scale_up_window_s = 30.0;
    c.pool[AS_POOL_PREFILL].scale_down_window_s = 300.0;
    c.pool[AS_POOL_PREFILL].scale_up_cooldown_s = 60.0;
    c.pool[AS_POOL_PREFILL].scale_down_cooldown_s = 120.0;
    c.pool[AS_POOL_PREFILL].max_step_up = 100;

    /* Fast wave (10 s high / 10 s low): never high for a whole up window. */
    autoscale_policy p;
    assert_int_equal(autoscale_policy_init(&p, &c, NULL, 0), 0);
    int cur = 1, changes = 0;
    for (int i = 0; i < 2000; i++) {
        double t = i * 1.0;
        double tps = ((int)(t / 10.0) % 2) ? 3000.0 : 500.0;
        int want = step(&p, t, tps, cur);
        if (want != cur) {
            changes++;
            cur = want;
        }
    }
    assert_int_equal(changes, 0);
    assert_int_equal(cur, 1);
    autoscale_policy_free(&p);

    /* Slow wave (50 s high / 50 s low): scales up once, then the 300 s
     * down window always contains a high phase, so it never scales down. */
    assert_int_equal(autoscale_policy_init(&p, &c, NULL, 0), 0);
    cur = 1;
    int ups = 0, downs = 0;
    for (int i = 0; i < 2000; i++) {
        double t = i * 1.0;
        double tps = ((int)(t / 50.0) % 2) ? 3000.0 : 500.0;
        int want = step(&p, t, tps, cur);
        if (want > cur)
            ups++;
        if (want < cur)
            downs++;
        cur = want;
    }
    assert_int_equal(ups, 1);
    assert_int_equal(downs, 0);
    assert_int_equal(cur, 6);
    /* When the wave stops, it scales down after the window. */
    int down_at = -1;
    for (int i = 2000; i < 2600; i++) {
        int want = step(&p, i * 1.0, 500.0, cur);
        if (want < cur && down_at < 0)
            down_at = i;
        cur = want;
    }
    /* The last high phase was [1950, 2000); the formula was 6 until 2000,
     * so the down window (300 s) is all-low from 2300. */
    assert_int_equal(down_at, 2300);
    assert_int_equal(cur, 1);
    autoscale_policy_free(&p);
}

static void flags_and_validation(void **state)
{
    (void)state;
    autoscale_config c;
    char err[256];
    autoscale_config_default(&c);
    assert_int_equal(autoscale_config_validate(&c, err, sizeof(err)), 0);
    assert_int_equal(autoscale_config_set_flag(&c, "autoscale-prefill-max", "12", err, sizeof(err)), 0);
    assert_int_equal(c.pool[AS_POOL_PREFILL].max_replicas, 12);
    assert_int_equal(autoscale_config_set_flag(&c, "autoscale-decode-down-window-s", "42.5", err, sizeof(err)), 0);
    assert_float_equal(c.pool[AS_POOL_DECODE].scale_down_window_s, 42.5, 0.0);
    assert_int_equal(autoscale_config_set_flag(&c, "autoscale-decode-max-batch", "96", err, sizeof(err)), 0);
    assert_float_equal(c.decode_max_batch, 96.0, 0.0);
    assert_int_equal(autoscale_config_set_flag(&c, "not-an-autoscale-flag", "1", err, sizeof(err)), 1);
    assert_int_equal(autoscale_config_set_flag(&c, "autoscale-prefill-max", "lots", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "autoscale-prefill-max"));
    assert_int_equal(autoscale_config_set_flag(&c, "autoscale-prefill-min", "13", err, sizeof(err)), 0);
    assert_int_equal(autoscale_config_validate(&c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "autoscale-prefill-min"));
    autoscale_config_default(&c);
    c.prefill_target_utilisation = 1.5;
    assert_int_equal(autoscale_config_validate(&c, err, sizeof(err)), -1);
    autoscale_policy p;
    assert_int_equal(autoscale_policy_init(&p, &c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "utilisation"));
}

static void bad_observations_are_rejected(void **state)
{
    (void)state;
    autoscale_config c = bare_config();
    autoscale_policy p;
    autoscale_decision d;
    char err[256];
    assert_int_equal(autoscale_policy_init(&p, &c, NULL, 0), 0);
    autoscale_observation o = obs_at(10.0, 100.0, 1, 1);
    assert_int_equal(autoscale_policy_evaluate(&p, &o, &d, err, sizeof(err)), 0);
    o.now_s = 5.0;
    assert_int_equal(autoscale_policy_evaluate(&p, &o, &d, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "backwards"));
    o = obs_at(11.0, -1.0, 1, 1);
    assert_int_equal(autoscale_policy_evaluate(&p, &o, &d, err, sizeof(err)), -1);
    o = obs_at(11.0, 1.0, 1, 1);
    o.n_decoders = 2;
    assert_int_equal(autoscale_policy_evaluate(&p, &o, &d, err, sizeof(err)), -1);
    autoscale_policy_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(prefill_formula_matches_reference),
        cmocka_unit_test(decode_formula_matches_reference),
        cmocka_unit_test(ewma_weights_by_busy_time),
        cmocka_unit_test(cold_start_uses_prior_then_measurements),
        cmocka_unit_test(backlog_adds_to_demand),
        cmocka_unit_test(decode_counts_running_and_waiting),
        cmocka_unit_test(formula_is_clamped_to_min_and_max),
        cmocka_unit_test(scale_up_waits_for_the_up_window),
        cmocka_unit_test(scale_down_uses_max_over_the_down_window),
        cmocka_unit_test(cooldown_blocks_the_next_action),
        cmocka_unit_test(step_size_is_limited),
        cmocka_unit_test(oscillating_load_does_not_flap),
        cmocka_unit_test(flags_and_validation),
        cmocka_unit_test(bad_observations_are_rejected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
