/* Autoscaling policy: formulas, damping and flags. See autoscale_policy.h for
 * the contract and docs/AUTOSCALING.md for the formulas with worked numbers. */
#include "autoscale/autoscale_policy.h"
#include "common/status.h"
#include "common/flag_file.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Replica counts are ints; formulas saturate here instead of overflowing. */
#define AS_REPLICAS_SATURATE (INT_MAX / 2)

const char *as_pool_name(as_pool pool)
{
    switch (pool) {
    case AS_POOL_PREFILL: return "prefill";
    case AS_POOL_DECODE: return "decode";
    default: return NULL;
    }
}

int as_pool_from_name(const char *name, as_pool *out)
{
    if (!name || !out)
        return -1;
    if (strcmp(name, "prefill") == 0) {
        *out = AS_POOL_PREFILL;
        return 0;
    }
    if (strcmp(name, "decode") == 0) {
        *out = AS_POOL_DECODE;
        return 0;
    }
    return -1;
}

void autoscale_config_default(autoscale_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->prefill_target_utilisation = 0.8;
    /* Seed ("GPT-OSS on day 0"), GPT-OSS-20B EP4 TP4 on H200: 8192 tokens in
     * 0.108 s. A production prefiller replica is one 4-GPU TP=4 node, so the
     * prior is that replica's rate; the online estimate replaces it. */
    cfg->prefill_prior_tps = 8192.0 / 0.108;
    cfg->prefill_halflife_busy_s = 30.0;
    cfg->prefill_tps_floor_fraction = 0.1;
    cfg->prefill_backlog_drain_s = 60.0;
    cfg->decode_max_batch = 64.0;
    cfg->decode_headroom = 0.1;
    for (int p = 0; p < AS_POOL_COUNT; p++) {
        autoscale_pool_config *pc = &cfg->pool[p];
        pc->min_replicas = 1;
        pc->max_replicas = p == AS_POOL_PREFILL ? 16 : 8;
        pc->scale_up_window_s = 30.0;
        /* Same default as the Kubernetes HPA's scale-down stabilisation. */
        pc->scale_down_window_s = 300.0;
        /* A new replica loads weights for tens of seconds before it serves;
         * scaling up again before it counts would overshoot. */
        pc->scale_up_cooldown_s = 60.0;
        pc->scale_down_cooldown_s = 120.0;
        pc->max_step_up = 4;
        pc->max_step_down = 1;
    }
}

static int finite_positive(double x) { return isfinite(x) && x > 0.0; }
static int finite_nonneg(double x) { return isfinite(x) && x >= 0.0; }

int autoscale_config_validate(const autoscale_config *cfg, char *err, size_t errlen)
{
    if (!cfg)
        return tn_fail(err, errlen, TN_ERR_ARG, "autoscale config is NULL");
    if (!(isfinite(cfg->prefill_target_utilisation) && cfg->prefill_target_utilisation > 0.0 &&
          cfg->prefill_target_utilisation <= 1.0))
        return tn_fail(err, errlen, TN_ERR_ARG, "autoscale-prefill-target-utilisation must be in (0, 1], got %g",
                    cfg->prefill_target_utilisation);
    if (!finite_positive(cfg->prefill_prior_tps))
        return tn_fail(err, errlen, TN_ERR_ARG, "autoscale-prefill-prior-tps must be > 0, got %g", cfg->prefill_prior_tps);
    if (!finite_positive(cfg->prefill_halflife_busy_s))
        return tn_fail(err, errlen, TN_ERR_ARG, "autoscale-prefill-halflife-s must be > 0, got %g",
                    cfg->prefill_halflife_busy_s);
    if (!(finite_positive(cfg->prefill_tps_floor_fraction) && cfg->prefill_tps_floor_fraction <= 1.0))
        return tn_fail(err, errlen, TN_ERR_ARG, "autoscale-prefill-tps-floor must be in (0, 1], got %g",
                    cfg->prefill_tps_floor_fraction);
    if (!finite_nonneg(cfg->prefill_backlog_drain_s))
        return tn_fail(err, errlen, TN_ERR_ARG, "autoscale-prefill-backlog-drain-s must be >= 0, got %g",
                    cfg->prefill_backlog_drain_s);
    if (!finite_positive(cfg->decode_max_batch))
        return tn_fail(err, errlen, TN_ERR_ARG, "autoscale-decode-max-batch must be > 0, got %g", cfg->decode_max_batch);
    if (!finite_nonneg(cfg->decode_headroom))
        return tn_fail(err, errlen, TN_ERR_ARG, "autoscale-decode-headroom must be >= 0, got %g", cfg->decode_headroom);
    for (int p = 0; p < AS_POOL_COUNT; p++) {
        const autoscale_pool_config *pc = &cfg->pool[p];
        const char *n = as_pool_name((as_pool)p);
        if (pc->min_replicas < 0)
            return tn_fail(err, errlen, TN_ERR_ARG, "autoscale-%s-min must be >= 0, got %d", n, pc->min_replicas);
        if (pc->max_replicas < pc->min_replicas || pc->max_replicas < 1)
            return tn_fail(err, errlen, TN_ERR_ARG, "autoscale-%s-max (%d) must be >= 1 and >= autoscale-%s-min (%d)", n,
                        pc->max_replicas, n, pc->min_replicas);
        if (pc->max_replicas > AS_REPLICAS_SATURATE)
            return tn_fail(err, errlen, TN_ERR_ARG, "autoscale-%s-max %d is too large", n, pc->max_replicas);
        if (!finite_nonneg(pc->scale_up_window_s) || !finite_nonneg(pc->scale_down_window_s))
            return tn_fail(err, errlen, TN_ERR_ARG, "autoscale-%s stabilisation windows must be >= 0 seconds", n);
        if (!finite_nonneg(pc->scale_up_cooldown_s) || !finite_nonneg(pc->scale_down_cooldown_s))
            return tn_fail(err, errlen, TN_ERR_ARG, "autoscale-%s cooldowns must be >= 0 seconds", n);
        if (pc->max_step_up < 1 || pc->max_step_down < 1)
            return tn_fail(err, errlen, TN_ERR_ARG, "autoscale-%s-max-step-up/down must be >= 1, got %d/%d", n,
                        pc->max_step_up, pc->max_step_down);
    }
    return 0;
}

/* ---------------------------------------------------------------- flags -- */

/* POOL flags are listed once per pool below; offsets are into autoscale_config. */
#define FLAG_DOUBLE FLAG_FIELD_DOUBLE
#define FLAG_INT FLAG_FIELD_INT

#define CFG_OFF(field) offsetof(autoscale_config, field)
#define POOL_OFF(p, field) (offsetof(autoscale_config, pool) + (p) * sizeof(autoscale_pool_config) + \
                            offsetof(autoscale_pool_config, field))

#define POOL_FLAGS(p, pn)                                                                        \
    {"autoscale-" pn "-min", FLAG_INT, POOL_OFF(p, min_replicas), "lower clamp of the " pn " replica count"}, \
    {"autoscale-" pn "-max", FLAG_INT, POOL_OFF(p, max_replicas), "upper clamp of the " pn " replica count"}, \
    {"autoscale-" pn "-up-window-s", FLAG_DOUBLE, POOL_OFF(p, scale_up_window_s),                \
     "scale up to the MIN of the formula over this many seconds (it must hold that long)"},      \
    {"autoscale-" pn "-down-window-s", FLAG_DOUBLE, POOL_OFF(p, scale_down_window_s),            \
     "scale down to the MAX of the formula over this many seconds (as the Kubernetes HPA)"},     \
    {"autoscale-" pn "-up-cooldown-s", FLAG_DOUBLE, POOL_OFF(p, scale_up_cooldown_s),            \
     "seconds after any " pn " scaling action before a scale-up"},                               \
    {"autoscale-" pn "-down-cooldown-s", FLAG_DOUBLE, POOL_OFF(p, scale_down_cooldown_s),        \
     "seconds after any " pn " scaling action before a scale-down"},                             \
    {"autoscale-" pn "-max-step-up", FLAG_INT, POOL_OFF(p, max_step_up), "most " pn " replicas added per action"}, \
    {"autoscale-" pn "-max-step-down", FLAG_INT, POOL_OFF(p, max_step_down), "most " pn " replicas removed per action"}

static const flag_field FLAGS[] = {
    {"autoscale-prefill-target-utilisation", FLAG_DOUBLE, CFG_OFF(prefill_target_utilisation),
     "u in prefill = ceil(demand_tps / (u * per_replica_tps))"},
    {"autoscale-prefill-prior-tps", FLAG_DOUBLE, CFG_OFF(prefill_prior_tps),
     "per-replica prefill tokens/s used until measurements arrive (seed: 8192 tokens / 0.108 s, GPT-OSS-20B TP4 H200)"},
    {"autoscale-prefill-halflife-s", FLAG_DOUBLE, CFG_OFF(prefill_halflife_busy_s),
     "busy seconds of measurement after which an older estimate keeps half its weight"},
    {"autoscale-prefill-tps-floor", FLAG_DOUBLE, CFG_OFF(prefill_tps_floor_fraction),
     "the per-replica estimate never drops below this fraction of the prior"},
    {"autoscale-prefill-backlog-drain-s", FLAG_DOUBLE, CFG_OFF(prefill_backlog_drain_s),
     "demand_tps = arriving_tps + queued_tokens / this (0 ignores the backlog)"},
    {"autoscale-decode-max-batch", FLAG_DOUBLE, CFG_OFF(decode_max_batch),
     "B in decode = ceil(sequences * (1 + headroom) / B): running sequences per decoder that keep decode speed"},
    {"autoscale-decode-headroom", FLAG_DOUBLE, CFG_OFF(decode_headroom),
     "spare fraction of decode capacity kept for bursts"},
    POOL_FLAGS(AS_POOL_PREFILL, "prefill"),
    POOL_FLAGS(AS_POOL_DECODE, "decode"),
};
#define N_FLAGS (sizeof(FLAGS) / sizeof(FLAGS[0]))

int autoscale_config_set_flag(autoscale_config *cfg, const char *name, const char *value, char *err,
                              size_t errlen)
{
    if (!cfg || !name)
        return tn_fail(err, errlen, TN_ERR_ARG, "autoscale_config_set_flag: NULL argument");
    return flag_field_set(cfg, FLAGS, N_FLAGS, name, value, err, errlen);
}

void autoscale_config_print_help(FILE *out)
{
    autoscale_config d;
    autoscale_config_default(&d);
    fprintf(out, "Autoscaling policy (formulas in docs/AUTOSCALING.md):\n");
    flag_field_print_help(out, &d, FLAGS, N_FLAGS);
}

/* ------------------------------------------------------------- formulas -- */

static int ceil_to_replicas(double x)
{
    if (!(x > 0.0))
        return 0;
    /* Subtract a hair so that exact multiples (computed with rounding error,
     * e.g. 3 * 0.8 * 1000 / (0.8 * 1000)) do not round up a whole replica. */
    double c = ceil(x - 1e-9);
    if (c >= (double)AS_REPLICAS_SATURATE)
        return AS_REPLICAS_SATURATE;
    return (int)c;
}

int autoscale_prefill_replicas_for(double demand_tps, double utilisation, double per_replica_tps)
{
    if (!isfinite(demand_tps) || demand_tps < 0.0 || !finite_positive(utilisation) ||
        !finite_positive(per_replica_tps))
        return -1;
    return ceil_to_replicas(demand_tps / (utilisation * per_replica_tps));
}

int autoscale_decode_replicas_for(long sequences, double max_batch, double headroom)
{
    if (sequences < 0 || !finite_positive(max_batch) || !finite_nonneg(headroom))
        return -1;
    return ceil_to_replicas((double)sequences * (1.0 + headroom) / max_batch);
}

double autoscale_ewma_update(double estimate, double sample_tps, double busy_s, double halflife_s)
{
    if (!(busy_s > 0.0) || !isfinite(busy_s) || !isfinite(sample_tps) || sample_tps < 0.0 ||
        !finite_positive(halflife_s))
        return estimate;
    double alpha = 1.0 - exp2(-busy_s / halflife_s);
    return estimate + alpha * (sample_tps - estimate);
}

/* -------------------------------------------------------------- policy -- */

int autoscale_policy_init(autoscale_policy *p, const autoscale_config *cfg, char *err, size_t errlen)
{
    if (!p)
        return tn_fail(err, errlen, TN_ERR_ARG, "autoscale_policy_init: NULL policy");
    memset(p, 0, sizeof(*p));
    if (autoscale_config_validate(cfg, err, errlen) != 0)
        return -1;
    p->cfg = *cfg;
    p->prefill_tps_estimate = cfg->prefill_prior_tps;
    return 0;
}

void autoscale_policy_free(autoscale_policy *p)
{
    if (!p)
        return;
    for (int i = 0; i < AS_POOL_COUNT; i++)
        free(p->pool[i].points);
    memset(p, 0, sizeof(*p));
}

static int history_push(autoscale_pool_state *s, double t, int value)
{
    if (s->len == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        autoscale_history_point *np = realloc(s->points, cap * sizeof(*np));
        if (!np)
            return -1;
        s->points = np;
        s->cap = cap;
    }
    s->points[s->len++] = (autoscale_history_point){t, value};
    return 0;
}

/* Drops points no window can reach: everything before the newest point that
 * is at or before now - keep_s (that one is still in effect at the window's
 * start, so it stays). */
static void history_prune(autoscale_pool_state *s, double now, double keep_s)
{
    size_t first = 0;
    for (size_t i = 0; i < s->len; i++)
        if (s->points[i].t <= now - keep_s)
            first = i;
    if (first > 0) {
        memmove(s->points, s->points + first, (s->len - first) * sizeof(*s->points));
        s->len -= first;
    }
}

/* The formula's values in effect at some time in [now - window, now]: a point
 * at t_i holds until the next point. Returns 0 when the history does not
 * reach back to the window's start (then the window is not yet satisfied). */
static int window_extremes(const autoscale_pool_state *s, double now, double window, int *lo, int *hi)
{
    int covered = 0, have = 0;
    double start = now - window;
    for (size_t i = s->len; i-- > 0;) {
        const autoscale_history_point *pt = &s->points[i];
        if (!have) {
            *lo = *hi = pt->value;
            have = 1;
        } else {
            if (pt->value < *lo) *lo = pt->value;
            if (pt->value > *hi) *hi = pt->value;
        }
        if (pt->t <= start) {
            covered = 1;
            break;
        }
    }
    return covered;
}

static int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Applies the windows, cooldowns and step limits to one pool. */
static void decide_pool(autoscale_policy *p, as_pool pool, double now, int formula, int current,
                        autoscale_decision *out, const char *formula_text)
{
    const autoscale_pool_config *pc = &p->cfg.pool[pool];
    autoscale_pool_state *s = &p->pool[pool];
    char *reason = out->reason[pool];
    size_t rlen = sizeof(out->reason[pool]);
    int up_lo = formula, up_hi = formula, down_lo = formula, down_hi = formula;
    int up_covered = window_extremes(s, now, pc->scale_up_window_s, &up_lo, &up_hi);
    int down_covered = window_extremes(s, now, pc->scale_down_window_s, &down_lo, &down_hi);
    /* Scale-up target: the smallest value over the up window (it must have
     * held for the whole window). Scale-down target: the largest over the
     * down window, so one quiet sample cannot remove a replica. An uncovered
     * window (just started) votes for the current count. */
    int up_target = up_covered ? up_lo : current;
    int down_target = down_covered ? down_hi : current;
    double since = s->has_acted ? now - s->last_action_s : INFINITY;
    int desired = current;
    as_action act = AS_ACTION_NONE;
    const char *rule;

    /* Out-of-range current counts (set by hand) are pulled back at once. */
    if (current < pc->min_replicas) {
        desired = pc->min_replicas;
        rule = "below min";
    } else if (current > pc->max_replicas) {
        desired = pc->max_replicas;
        rule = "above max";
    } else if (up_target > current) {
        if (since < pc->scale_up_cooldown_s) {
            rule = "scale-up held by cooldown";
        } else {
            desired = up_target - current > pc->max_step_up ? current + pc->max_step_up : up_target;
            rule = desired < up_target ? "scale up (step-limited)" : "scale up";
        }
    } else if (down_target < current) {
        if (since < pc->scale_down_cooldown_s) {
            rule = "scale-down held by cooldown";
        } else {
            desired = current - down_target > pc->max_step_down ? current - pc->max_step_down : down_target;
            rule = desired > down_target ? "scale down (step-limited)" : "scale down";
        }
    } else if (formula > current) {
        rule = up_covered ? "hold: formula above current but not for the whole up window"
                          : "hold: up window not yet observed";
    } else if (formula < current) {
        rule = down_covered ? "hold: down window still has a higher value"
                            : "hold: down window not yet observed";
    } else {
        rule = "steady";
    }
    desired = clamp_int(desired, pc->min_replicas, pc->max_replicas);
    if (desired > current)
        act = AS_ACTION_UP;
    else if (desired < current)
        act = AS_ACTION_DOWN;
    if (act != AS_ACTION_NONE) {
        s->last_action_s = now;
        s->has_acted = 1;
    }
    out->desired[pool] = desired;
    out->action[pool] = act;
    char up_s[24], down_s[24];
    if (up_covered)
        snprintf(up_s, sizeof(up_s), "%d", up_lo);
    else
        snprintf(up_s, sizeof(up_s), "n/a");
    if (down_covered)
        snprintf(down_s, sizeof(down_s), "%d", down_hi);
    else
        snprintf(down_s, sizeof(down_s), "n/a");
    snprintf(reason, rlen, "%s: %s -> %d; up-window min %s, down-window max %s; current %d -> desired %d (%s)",
             as_pool_name(pool), formula_text, formula, up_s, down_s, current, desired, rule);
}

int autoscale_policy_evaluate(autoscale_policy *p, const autoscale_observation *obs, autoscale_decision *out,
                              char *err, size_t errlen)
{
    if (!p || !obs || !out)
        return tn_fail(err, errlen, TN_ERR_ARG, "autoscale_policy_evaluate: NULL argument");
    if (!isfinite(obs->now_s))
        return tn_fail(err, errlen, TN_ERR_ARG, "observation time is not finite");
    if (p->has_evaluated && obs->now_s < p->last_now_s)
        return tn_fail(err, errlen, TN_ERR_ARG, "observation time went backwards (%.3f < %.3f)", obs->now_s, p->last_now_s);
    if (!finite_nonneg(obs->input_tps_arriving) || !finite_nonneg(obs->prefill_queued_tokens))
        return tn_fail(err, errlen, TN_ERR_ARG, "input tokens/s and queued tokens must be finite and >= 0");
    if ((obs->n_prefill_samples && !obs->prefill_samples) || (obs->n_decoders && !obs->decoder_running))
        return tn_fail(err, errlen, TN_ERR_ARG, "observation has a count but no array");
    if (obs->decode_waiting < 0)
        return tn_fail(err, errlen, TN_ERR_ARG, "decode_waiting must be >= 0");
    for (int i = 0; i < AS_POOL_COUNT; i++)
        if (obs->current[i] < 0)
            return tn_fail(err, errlen, TN_ERR_ARG, "current %s replicas must be >= 0", as_pool_name((as_pool)i));

    const autoscale_config *c = &p->cfg;
    memset(out, 0, sizeof(*out));

    /* Per-replica prefill rate: busy-time-weighted average of measured
     * tokens / busy second, seeded with the prior, floored. */
    for (size_t i = 0; i < obs->n_prefill_samples; i++) {
        const autoscale_prefill_sample *smp = &obs->prefill_samples[i];
        if (smp->busy_s > 0.0 && isfinite(smp->busy_s) && isfinite(smp->tokens) && smp->tokens >= 0.0)
            p->prefill_tps_estimate = autoscale_ewma_update(p->prefill_tps_estimate, smp->tokens / smp->busy_s,
                                                            smp->busy_s, c->prefill_halflife_busy_s);
    }
    double floor_tps = c->prefill_tps_floor_fraction * c->prefill_prior_tps;
    if (p->prefill_tps_estimate < floor_tps)
        p->prefill_tps_estimate = floor_tps;

    double demand = obs->input_tps_arriving;
    if (c->prefill_backlog_drain_s > 0.0)
        demand += obs->prefill_queued_tokens / c->prefill_backlog_drain_s;
    long seqs = obs->decode_waiting;
    for (size_t i = 0; i < obs->n_decoders; i++) {
        if (obs->decoder_running[i] < 0)
            return tn_fail(err, errlen, TN_ERR_ARG, "decoder %zu reports a negative batch size", i);
        seqs += obs->decoder_running[i];
    }
    int f[AS_POOL_COUNT];
    f[AS_POOL_PREFILL] = autoscale_prefill_replicas_for(demand, c->prefill_target_utilisation,
                                                        p->prefill_tps_estimate);
    f[AS_POOL_DECODE] = autoscale_decode_replicas_for(seqs, c->decode_max_batch, c->decode_headroom);
    if (f[AS_POOL_PREFILL] < 0 || f[AS_POOL_DECODE] < 0)
        return tn_fail(err, errlen, TN_ERR_ARG, "autoscale formula got invalid inputs");

    out->prefill_tps_per_replica = p->prefill_tps_estimate;
    out->prefill_demand_tps = demand;
    out->decode_sequences = seqs;
    char text[AS_POOL_COUNT][160];
    snprintf(text[AS_POOL_PREFILL], sizeof(text[0]), "ceil(%.0f tok/s / (%.2f * %.0f tok/s))", demand,
             c->prefill_target_utilisation, p->prefill_tps_estimate);
    snprintf(text[AS_POOL_DECODE], sizeof(text[0]), "ceil(%ld seqs * %.2f / %.0f)", seqs, 1.0 + c->decode_headroom,
             c->decode_max_batch);

    for (int i = 0; i < AS_POOL_COUNT; i++) {
        const autoscale_pool_config *pc = &c->pool[i];
        autoscale_pool_state *s = &p->pool[i];
        int clamped = clamp_int(f[i], pc->min_replicas, pc->max_replicas);
        out->formula[i] = clamped;
        if (history_push(s, obs->now_s, clamped) != 0)
            return tn_fail(err, errlen, TN_ERR_ARG, "out of memory for the autoscale history");
        double keep = pc->scale_up_window_s > pc->scale_down_window_s ? pc->scale_up_window_s
                                                                      : pc->scale_down_window_s;
        history_prune(s, obs->now_s, keep);
        decide_pool(p, (as_pool)i, obs->now_s, clamped, obs->current[i], out, text[i]);
    }
    p->last_now_s = obs->now_s;
    p->has_evaluated = 1;
    return 0;
}
