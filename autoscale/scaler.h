/* Scaler backends: what turns the autoscale policy's desired replica counts
 * into running workers. One interface, three backends:
 *
 *   metrics-only  publishes tandem_pool_desired_replicas for an HPA or KEDA
 *                 to act on (autoscale/scaler_metrics.c)
 *   kubernetes    PATCHes the scale subresource of the prefiller and decoder
 *                 workloads through the API server (autoscale/scaler_kubernetes.c)
 *   local         starts and stops worker processes on this machine
 *                 (autoscale/scaler_local.c; what `make run` uses)
 *
 * The router calls scaler_set_replicas() with the policy's desired count on
 * every evaluation (it is idempotent) and scaler_poll() on every tick.
 * Functions return 0 on success, or a negative tn_status (common/status.h)
 * with a message in err: TN_ERR_ARG for a bad argument or configuration,
 * TN_ERR_NOMEM, TN_ERR_SYS when a system call fails, TN_ERR_PEER when the
 * Kubernetes API server refuses or answers nonsense, TN_ERR_BUSY when no slot
 * is free. */
#ifndef TANDEM_AUTOSCALE_SCALER_H
#define TANDEM_AUTOSCALE_SCALER_H

#include <stddef.h>
#include "autoscale/autoscale_policy.h"

typedef struct {
    const char *kind; /* "metrics-only", "kubernetes" or "local" */
    int (*set_replicas)(void *impl, as_pool pool, int n, char *err, size_t errlen);
    int (*get_replicas)(void *impl, as_pool pool, int *n, char *err, size_t errlen);
    int (*poll)(void *impl, char *err, size_t errlen); /* may be NULL: nothing to do */
    void (*destroy)(void *impl);
} scaler_ops;

typedef struct {
    const scaler_ops *ops;
    void *impl;
} scaler;

/* Defines `scaler FN(TYPE *impl)`, which wraps an implementation in a scaler
 * over a static ops table of the given kind and adapters (poll and destroy
 * may be NULL). */
#define SCALER_DEFINE_AS_SCALER(fn, type, kind_, set, get, poll_, destroy_)          \
    scaler fn(type *impl)                                                            \
    {                                                                                \
        static const scaler_ops ops = {                                              \
            .kind = kind_, .set_replicas = set, .get_replicas = get, .poll = poll_,  \
            .destroy = destroy_,                                                     \
        };                                                                           \
        return (scaler){&ops, impl};                                                 \
    }

/* Sets the pool's replica count (n >= 0). */
int scaler_set_replicas(scaler *s, as_pool pool, int n, char *err, size_t errlen);
/* The pool's replica count as the backend sees it (local: workers started
 * and not draining; kubernetes: spec.replicas of the scale subresource
 * divided by pods per replica). metrics-only fails: it cannot know. */
int scaler_get_replicas(scaler *s, as_pool pool, int *n, char *err, size_t errlen);
/* Housekeeping (local: reap exited workers, kill drains past their deadline). */
int scaler_poll(scaler *s, char *err, size_t errlen);
/* Releases the backend (local: drains and stops every worker). */
void scaler_destroy(scaler *s);
const char *scaler_kind(const scaler *s);

/* ------------------------------------------------------- metrics-only -- */

typedef struct {
    int desired[AS_POOL_COUNT];
    int published[AS_POOL_COUNT]; /* 0 until the first set for that pool */
} scaler_metrics;

void scaler_metrics_init(scaler_metrics *m);
/* Records the desired count for publishing. */
int scaler_metrics_set_replicas(scaler_metrics *m, as_pool pool, int n, char *err, size_t errlen);
/* Writes the Prometheus text exposition (HELP, TYPE and one
 * tandem_pool_desired_replicas{pool="..."} line per published pool) into
 * buf. Returns the length written, or -1 if buf is too small. */
int scaler_metrics_format(const scaler_metrics *m, char *buf, size_t len);
/* A scaler whose impl is m (m must outlive it; destroy does not free m). */
scaler scaler_metrics_as_scaler(scaler_metrics *m);

/* --------------------------------------------------------- kubernetes -- */

typedef struct {
    /* Where the pod's service account lives: token, ca.crt, namespace.
     * NULL: /var/run/secrets/kubernetes.io/serviceaccount. */
    const char *sa_dir;
    /* NULL: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT. */
    const char *api_url;
    /* NULL: read from sa_dir/namespace. */
    const char *namespace_name;
    /* "deployments" or "statefulsets", and the workload's name, per pool. */
    const char *workload_resource[AS_POOL_COUNT];
    const char *workload_name[AS_POOL_COUNT];
    /* Pods per replica: a decoder spanning 16 GPUs on 4-GPU nodes is 4 pods
     * of one StatefulSet (rank from the pod ordinal, docs/AUTOSCALING.md), so
     * n decoders = 4n pods. 0 means 1. */
    int pods_per_replica[AS_POOL_COUNT];
    long timeout_ms; /* per request; 0 means 10000 */
} scaler_kubernetes_config;

typedef struct scaler_kubernetes scaler_kubernetes;

/* Validates names, resolves the namespace and API URL. The token is read on
 * every request because the kubelet rotates projected tokens. */
int scaler_kubernetes_create(const scaler_kubernetes_config *cfg, scaler_kubernetes **out, char *err,
                             size_t errlen);
/* PATCH {API}/apis/apps/v1/namespaces/{NS}/{resource}/{name}/scale with the
 * JSON merge patch {"spec":{"replicas":N*pods_per_replica}}. */
int scaler_kubernetes_set_replicas(scaler_kubernetes *k, as_pool pool, int n, char *err, size_t errlen);
/* GET the same scale subresource; *n = spec.replicas / pods_per_replica. */
int scaler_kubernetes_get_replicas(scaler_kubernetes *k, as_pool pool, int *n, char *err, size_t errlen);
void scaler_kubernetes_destroy(scaler_kubernetes *k);
/* A scaler owning k (scaler_destroy frees it). */
scaler scaler_kubernetes_as_scaler(scaler_kubernetes *k);

/* -------------------------------------------------------------- local -- */

typedef struct {
    /* Command template per pool, argv style, NULL-terminated; NULL: the pool
     * is not managed (set_replicas fails). In every argument "{pool}",
     * "{index}" and "{port}" are replaced by the pool name, the worker's slot
     * index (0, 1, ...; the lowest free one is reused) and base_port + index.
     * No shell is involved, so the PID is the worker's own and signals reach
     * it directly. */
    const char *const *argv[AS_POOL_COUNT];
    int base_port[AS_POOL_COUNT];
    /* A worker leaving gets SIGTERM (it stops taking requests and finishes
     * its running ones) and SIGKILL once this many seconds have passed. */
    double drain_timeout_s;
    int max_workers; /* per pool; 0 means 64 */
} scaler_local_config;

typedef struct scaler_local scaler_local;

/* Copies cfg (the strings too). Starts no worker. */
int scaler_local_create(const scaler_local_config *cfg, scaler_local **out, char *err, size_t errlen);
/* Starts workers in the lowest free slots, or sends SIGTERM to the highest
 * running slots (they then count as draining, not as replicas). Does not
 * wait: scaler_local_poll enforces the drain deadline. Fails with the exec
 * error when a worker cannot be started. */
int scaler_local_set_replicas(scaler_local *l, as_pool pool, int n, char *err, size_t errlen);
/* Running (not draining) workers of the pool. */
int scaler_local_get_replicas(const scaler_local *l, as_pool pool);
/* Reaps exited workers and SIGKILLs drains past their deadline. Returns the
 * number of workers reaped. */
int scaler_local_poll(scaler_local *l);
/* Draining workers of the pool (SIGTERM sent, not yet reaped). */
int scaler_local_draining(const scaler_local *l, as_pool pool);
/* Polls until no worker is draining or max_wait_s passes (then still
 * draining ones are killed and reaped). */
void scaler_local_wait_drained(scaler_local *l, double max_wait_s);
/* PIDs of the pool's running workers, by slot order; returns how many. */
size_t scaler_local_pids(const scaler_local *l, as_pool pool, int *pids, size_t max);
/* How many workers were SIGKILLed because their drain took too long. */
int scaler_local_killed_after_timeout(const scaler_local *l);
/* Drains every worker (SIGTERM, bounded wait, SIGKILL), reaps them all and
 * frees l: no child process outlives it. */
void scaler_local_destroy(scaler_local *l);
/* A scaler owning l (scaler_destroy stops the workers and frees it). */
scaler scaler_local_as_scaler(scaler_local *l);

/* Splits a command line on blanks into a NULL-terminated argv (no quoting:
 * a template needing spaces inside one argument is given as an argv).
 * Free with scaler_local_free_argv. */
int scaler_local_split_command(const char *line, char ***argv_out, char *err, size_t errlen);
void scaler_local_free_argv(char **argv);

#endif
