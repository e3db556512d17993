/* Autoscaling policy for the prefill and decode pools.
 *
 * Pure decision logic: no I/O, no clocks, no threads. The caller (the router's
 * autoscale loop or tandem-sim) gathers an observation, calls
 * autoscale_policy_evaluate() and hands the desired replica counts to a
 * scaler backend (autoscale/scaler.h). Every formula is written out in
 * docs/AUTOSCALING.md; the flag names below are the ones the router and
 * tandem-sim accept (autoscale_config_set_flag).
 *
 * Why the two pools scale on different signals (seed: "Hosting Qwen on
 * Blackwell"): prefill throughput per replica is roughly constant in
 * tokens/s, so the prefiller count follows input tokens/s; decode slows as
 * the batch grows, so the decoder count keeps each decoder's batch under a
 * threshold that holds a minimum per-request decode speed.
 *
 * All functions return 0 on success and -1 on error with a message in err
 * (when err is not NULL). */
#ifndef TANDEM_AUTOSCALE_AUTOSCALE_POLICY_H
#define TANDEM_AUTOSCALE_AUTOSCALE_POLICY_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
    AS_POOL_PREFILL = 0,
    AS_POOL_DECODE = 1,
    AS_POOL_COUNT = 2,
} as_pool;

/* "prefill" / "decode"; NULL for an out-of-range value. */
const char *as_pool_name(as_pool pool);
/* Parses "prefill" or "decode"; -1 for anything else. */
int as_pool_from_name(const char *name, as_pool *out);

/* Limits and damping for one pool. */
typedef struct {
    int min_replicas;            /* --autoscale-POOL-min */
    int max_replicas;            /* --autoscale-POOL-max */
    double scale_up_window_s;    /* --autoscale-POOL-up-window-s: act up on the MIN over this window */
    double scale_down_window_s;  /* --autoscale-POOL-down-window-s: act down on the MAX over this window */
    double scale_up_cooldown_s;  /* --autoscale-POOL-up-cooldown-s: no scale-up sooner after any action */
    double scale_down_cooldown_s;/* --autoscale-POOL-down-cooldown-s: no scale-down sooner after any action */
    int max_step_up;             /* --autoscale-POOL-max-step-up: most replicas added per action */
    int max_step_down;           /* --autoscale-POOL-max-step-down: most replicas removed per action */
} autoscale_pool_config;

typedef struct {
    /* prefill: desired = ceil(demand_tps / (target_utilisation * per_replica_tps)) */
    double prefill_target_utilisation;  /* --autoscale-prefill-target-utilisation, (0, 1] */
    double prefill_prior_tps;           /* --autoscale-prefill-prior-tps: per-replica tokens/s before any measurement */
    double prefill_halflife_busy_s;     /* --autoscale-prefill-halflife-s: busy seconds that halve an old estimate's weight */
    double prefill_tps_floor_fraction;  /* --autoscale-prefill-tps-floor: estimate never below this * prior */
    double prefill_backlog_drain_s;     /* --autoscale-prefill-backlog-drain-s: queued tokens add queued/drain_s to demand; 0 = ignore backlog */
    /* decode: desired = ceil(sequences * (1 + headroom) / max_batch) */
    double decode_max_batch;            /* --autoscale-decode-max-batch: target running sequences per decoder */
    double decode_headroom;             /* --autoscale-decode-headroom: spare fraction, >= 0 */
    autoscale_pool_config pool[AS_POOL_COUNT];
} autoscale_config;

/* Fills the defaults documented in docs/AUTOSCALING.md. */
void autoscale_config_default(autoscale_config *cfg);
/* Checks ranges (min <= max, utilisation in (0,1], positive prior, ...). */
int autoscale_config_validate(const autoscale_config *cfg, char *err, size_t errlen);
/* Sets one flag by its long name without the leading "--" (for example
 * "autoscale-prefill-max", "8"). Returns 0 when set, 1 when the name is not
 * an autoscale flag (so a caller can try its own flags), -1 on a bad value. */
int autoscale_config_set_flag(autoscale_config *cfg, const char *name, const char *value,
                              char *err, size_t errlen);
/* Prints every autoscale flag with its formula role and default. */
void autoscale_config_print_help(FILE *out);

/* --- the formulas, exposed so tests can check each one alone --- */

/* ceil(demand_tps / (utilisation * per_replica_tps)); 0 when demand is 0.
 * Returns -1 for non-finite or non-positive divisors. Results above INT_MAX/2
 * saturate there (the caller clamps to max_replicas anyway). */
int autoscale_prefill_replicas_for(double demand_tps, double utilisation, double per_replica_tps);
/* ceil(sequences * (1 + headroom) / max_batch); 0 when sequences is 0. */
int autoscale_decode_replicas_for(long sequences, double max_batch, double headroom);
/* One step of the busy-time-weighted exponential average:
 *   alpha = 1 - 2^(-busy_s / halflife_s);  est' = est + alpha * (sample - est)
 * A sample measured over little busy time moves the estimate little, so an idle
 * replica's noisy measurement cannot swing the prefill count. */
double autoscale_ewma_update(double estimate, double sample_tps, double busy_s, double halflife_s);

/* One prefiller's work since the previous evaluation. */
typedef struct {
    double tokens;  /* input tokens it prefilled */
    double busy_s;  /* seconds it spent computing them (not idle time) */
} autoscale_prefill_sample;

typedef struct {
    double now_s;                   /* monotonic seconds; must not go backwards */
    double input_tps_arriving;      /* input tokens/s reaching the router (demand) */
    double input_tps_served;        /* input tokens/s the prefillers completed (reported only) */
    double prefill_queued_tokens;   /* input tokens waiting for a prefiller */
    const autoscale_prefill_sample *prefill_samples; /* one per prefiller, may be NULL */
    size_t n_prefill_samples;
    const int *decoder_running;     /* running sequences per decoder, may be NULL */
    size_t n_decoders;
    long decode_waiting;            /* sequences prefilled but not yet admitted by a decoder */
    int current[AS_POOL_COUNT];     /* replicas that exist now (starting ones included) */
} autoscale_observation;

typedef enum {
    AS_ACTION_NONE = 0,
    AS_ACTION_UP = 1,
    AS_ACTION_DOWN = 2,
} as_action;

typedef struct {
    int desired[AS_POOL_COUNT];     /* what the scaler should set now */
    int formula[AS_POOL_COUNT];     /* formula output clamped to [min, max], before damping */
    as_action action[AS_POOL_COUNT];
    double prefill_tps_per_replica; /* the estimate the prefill formula used */
    double prefill_demand_tps;
    long decode_sequences;
    char reason[AS_POOL_COUNT][320];/* one line per pool: the numbers and which rule decided */
} autoscale_decision;

typedef struct {
    double t;
    int value;
} autoscale_history_point;

typedef struct {
    autoscale_history_point *points; /* oldest first */
    size_t len, cap;
    double last_action_s;
    int has_acted;
} autoscale_pool_state;

typedef struct {
    autoscale_config cfg;
    double prefill_tps_estimate;
    double last_now_s;
    int has_evaluated;
    autoscale_pool_state pool[AS_POOL_COUNT];
} autoscale_policy;

/* Validates cfg and seeds the prefill estimate with the prior. */
int autoscale_policy_init(autoscale_policy *p, const autoscale_config *cfg, char *err, size_t errlen);
void autoscale_policy_free(autoscale_policy *p);

/* Folds the prefill samples into the throughput estimate, computes both
 * formulas, clamps, applies the stabilisation windows, cooldowns and step
 * limits, and fills *out. When out->desired differs from obs->current the
 * policy records an action at obs->now_s (the cooldown starts); a scaler
 * call that then fails simply leaves current unchanged, and the next
 * evaluation after the cooldown asks again. */
int autoscale_policy_evaluate(autoscale_policy *p, const autoscale_observation *obs,
                              autoscale_decision *out, char *err, size_t errlen);

#endif
