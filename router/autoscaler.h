/* The router's autoscale loop: a thread that every --autoscale-interval-s
 * observes the cluster (arriving input tokens/s from the router's counter,
 * each prefiller's tokens and busy seconds and each decoder's requests from
 * the registry, requests the router holds), runs the policy
 * (autoscale/autoscale_policy.h, the same code tandem-sim runs) and hands the
 * desired replica counts to the scaler backend (autoscale/scaler.h: local,
 * kubernetes or metrics-only). It publishes what it saw and decided in
 * router_ctx.as_status (under the context lock) for /metrics and the
 * dashboard, and keeps a history of both for the dashboard's charts.
 *
 * Its own thread, because a scaler call may block (the kubernetes scaler
 * talks to the API server); the core thread never waits for it. The local
 * scaler's children are forked from this thread, which lives until they are
 * reaped (PR_SET_PDEATHSIG fires when the forking thread exits). */
#ifndef TANDEM_ROUTER_AUTOSCALER_H
#define TANDEM_ROUTER_AUTOSCALER_H
#include <stddef.h>
#include <stdint.h>
#include "common/options.h"
#include "autoscale/autoscale_policy.h"

typedef struct autoscaler_config {
    char scaler[16];               /* none | local | kubernetes | metrics-only */
    double interval_s;             /* between evaluations */
    autoscale_config policy;
    /* kubernetes: "RESOURCE/NAME" of each pool's workload */
    char k8s_workload[AS_POOL_COUNT][128];
    int k8s_pods_per_replica[AS_POOL_COUNT];
    char k8s_namespace[64];        /* "" = the service account's */
    char k8s_api_url[256];         /* "" = https://$KUBERNETES_SERVICE_HOST:$..._PORT */
    char k8s_sa_dir[OPT_PATH_MAX];        /* "" = /var/run/secrets/kubernetes.io/serviceaccount */
    /* local */
    char local_bin_dir[OPT_PATH_MAX];     /* "" = the router executable's directory */
    char local_model[OPT_PATH_MAX];
    char local_args[AS_POOL_COUNT][1024]; /* extra worker flags, blank separated */
    int local_metrics_port[AS_POOL_COUNT]; /* base; worker i gets base + i; 0 = any free port */
    double local_drain_timeout_s;
    int local_max_workers;
} autoscaler_config;

/* Defaults: scaler none, interval 5 s, the policy's documented defaults,
 * the workload names of deploy/base, local drain timeout 60 s. */
void autoscaler_config_default(autoscaler_config *c);
/* Checks names and ranges (a known scaler, a model for local, ...). */
int autoscaler_config_validate(const autoscaler_config *c, char *err, size_t errlen);

#define AUTOSCALE_HISTORY 720      /* dashboard points kept (1 h at 5 s) */
#define AUTOSCALE_EVENTS 64        /* scaling decisions kept */

/* One evaluation, for the dashboard's charts. */
typedef struct autoscale_sample {
    double t;                      /* seconds since the router started */
    int current[AS_POOL_COUNT], desired[AS_POOL_COUNT], ready[AS_POOL_COUNT];
    int draining[AS_POOL_COUNT], formula[AS_POOL_COUNT];
    double input_tps, served_tps, demand_tps, tps_per_replica;
    long decode_sequences;
    double mean_batch, kv_occupancy; /* over ready decoders */
    int held;                      /* requests the router holds */
} autoscale_sample;

/* A scaling action the policy decided (to >= 0) or a scaler call that
 * failed (to = -1, reason = the error). */
typedef struct autoscale_event {
    double t;
    int pool;
    int from, to;
    char reason[360];
} autoscale_event;

/* What the loop publishes; guarded by the router's context lock. */
typedef struct autoscale_status {
    int enabled;                   /* a scaler is configured */
    int evaluated;                 /* the policy ran at least once */
    char scaler[16];
    int desired[AS_POOL_COUNT], current[AS_POOL_COUNT], formula[AS_POOL_COUNT];
    int scaler_draining[AS_POOL_COUNT]; /* local: told to leave, not reaped; -1 unknown */
    double demand_tps, tps_per_replica;
    long decode_sequences;
    uint64_t actions[AS_POOL_COUNT][2]; /* [pool][0 up, 1 down] */
    uint64_t scaler_errors[AS_POOL_COUNT];
    char reason[AS_POOL_COUNT][320];
    autoscale_sample history[AUTOSCALE_HISTORY];
    int n_history, history_next;   /* ring: next slot to write */
    autoscale_event events[AUTOSCALE_EVENTS];
    int n_events, events_next;
} autoscale_status;

struct router_ctx;

/* Creates the scaler backend and starts the loop's thread (also with scaler
 * none: it still records the history the dashboard shows). The local scaler
 * needs the worker socket bound (its workers are told where it is). */
int autoscaler_start(struct router_ctx *ctx, char *err, size_t errlen);
/* Tells the loop to stop: the local scaler then drains every worker
 * (SIGTERM, up to its drain timeout, then SIGKILL); kubernetes and
 * metrics-only leave the workloads as they are. Does not wait. */
void autoscaler_request_stop(struct router_ctx *ctx);
/* 1 once the loop has stopped (its workers, if any, are gone). The loop
 * signals ctx->wake_fd when it gets there. */
int autoscaler_stopped(struct router_ctx *ctx);
/* Joins the thread and frees the loop. */
void autoscaler_free(struct router_ctx *ctx);

#endif
