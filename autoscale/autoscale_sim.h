/* Scaling simulator: replays request arrivals through the autoscale policy
 * (the same autoscale_policy_evaluate the router runs) against a simple
 * discrete-event model of the two pools, and adds up queueing delays and GPU
 * cost. The model, its defaults and where they come from are in
 * docs/AUTOSCALING.md ("Simulator"). tandem-sim (programs/sim_main.c) is the
 * command-line front end. Functions return 0 or -1 with a message in err. */
#ifndef TANDEM_AUTOSCALE_AUTOSCALE_SIM_H
#define TANDEM_AUTOSCALE_AUTOSCALE_SIM_H

#include <stddef.h>
#include <stdio.h>
#include "autoscale/autoscale_policy.h"

typedef struct {
    double t;          /* arrival, seconds from the trace start */
    long input_tokens; /* prompt length, >= 1 */
    long output_tokens;/* generated tokens including the first (made by prefill), >= 1 */
} sim_request;

typedef struct {
    autoscale_config policy;
    double eval_interval_s;        /* --eval-interval-s: policy evaluations */
    /* prefill: one request at a time per replica (batch 1, as the seed
     * found best), service time = input_tokens / prefill_tps */
    double prefill_tps;            /* --prefill-tps */
    /* decode: continuous batching; one step gives every running sequence a
     * token and takes decode_step_base_s + decode_step_per_seq_s * batch */
    double decode_step_base_s;     /* --decode-step-base-s */
    double decode_step_per_seq_s;  /* --decode-step-per-seq-s */
    int decode_max_running;        /* --decode-max-running: KV capacity in sequences per decoder */
    double startup_s;              /* --startup-s: a new replica costs from the decision, serves after this */
    int initial[AS_POOL_COUNT];    /* --initial-prefill/--initial-decode: replicas ready at t = 0 */
    double gpu_hour_usd;           /* --gpu-hour-usd */
    int gpus_per_replica[AS_POOL_COUNT]; /* --prefill-gpus, --decode-gpus */
    double max_sim_s;              /* give up (error) past this; 0 = last arrival + 1 day */
} sim_config;

/* Defaults as documented (prefill 8192/0.108 tok/s, 4 and 8 GPUs, $3.00). */
void sim_config_default(sim_config *cfg);
/* Sets a simulator or autoscale flag by name without "--"; returns 1 for an
 * unknown name, -1 for a bad value. */
int sim_config_set_flag(sim_config *cfg, const char *name, const char *value, char *err, size_t errlen);
int sim_config_validate(const sim_config *cfg, char *err, size_t errlen);
void sim_config_print_help(FILE *out);

/* Reads a trace CSV: "time_s,input_tokens,output_tokens" per line, an
 * optional header line, '#' comments; times must not decrease. */
int sim_load_trace(const char *path, sim_request **out, size_t *n_out, char *err, size_t errlen);

typedef struct {
    double t;
    int current[AS_POOL_COUNT];   /* replicas starting or ready (not draining) before the decision */
    int desired[AS_POOL_COUNT];
    int formula[AS_POOL_COUNT];   /* the policy's formula, clamped, before damping */
    int ready[AS_POOL_COUNT];     /* replicas serving after the decision */
    double demand_tps;
    long decode_sequences;
    char reason[AS_POOL_COUNT][320];
} sim_timeline_point;

typedef struct {
    double p50, p90, p99, max, mean;
} sim_percentiles;

typedef struct {
    size_t n_requests;
    double end_s;                 /* when the last request finished */
    double input_tokens, output_tokens;
    double gpu_seconds[AS_POOL_COUNT];
    double cost_usd[AS_POOL_COUNT];
    double usd_per_m_input;       /* prefill pool cost / input tokens * 1e6 */
    double usd_per_m_output;      /* decode pool cost / output tokens * 1e6 */
    sim_percentiles prefill_wait; /* arrival -> prefill start */
    sim_percentiles ttft;         /* arrival -> first token (prefill end) */
    sim_percentiles decode_wait;  /* first token -> admitted by a decoder */
    sim_percentiles itl;          /* per request: mean time between its decode tokens */
    int max_ready[AS_POOL_COUNT];
    int scale_ups[AS_POOL_COUNT], scale_downs[AS_POOL_COUNT];
    sim_timeline_point *timeline; /* one per evaluation */
    size_t n_timeline;
} sim_result;

int sim_run(const sim_config *cfg, const sim_request *reqs, size_t n, sim_result *out, char *err, size_t errlen);
void sim_result_free(sim_result *r);
/* Nearest-rank percentiles (the ceil(p*n)-th smallest) of v; sorts v. */
sim_percentiles sim_percentiles_of(double *v, size_t n);

#endif
