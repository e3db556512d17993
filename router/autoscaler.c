/* The router's autoscale loop (router/autoscaler.h). */
#include "router/autoscaler.h"
#include "common/status.h"

#include <errno.h>
#include <limits.h>
#include <libgen.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "router/router.h"
#include "autoscale/scaler.h"
#include "common/sys.h"

#define WHO "autoscaler"
/* How often the local scaler reaps exited workers and enforces drain
 * deadlines between evaluations. */
#define LOCAL_POLL_MS 100

typedef struct autoscaler {
    pthread_t thread;
    int thread_started;
    int stop_fd;                   /* eventfd: stop requested */
    atomic_int stopped;
    int kind;                      /* SCALER_* */
    scaler sc;
    int has_scaler;
    scaler_local *local;           /* owned by sc when kind is local */
    scaler_metrics metrics_only;
    autoscale_policy policy;
    int has_policy;
    char **argv[AS_POOL_COUNT];    /* local command templates */
    uint64_t mark_input_tokens;
    double mark_t;
    int marked;
} autoscaler;

enum { SCALER_NONE, SCALER_LOCAL, SCALER_KUBERNETES, SCALER_METRICS_ONLY };

static int scaler_kind_of(const char *name)
{
    if (!strcmp(name, "none"))
        return SCALER_NONE;
    if (!strcmp(name, "local"))
        return SCALER_LOCAL;
    if (!strcmp(name, "kubernetes"))
        return SCALER_KUBERNETES;
    if (!strcmp(name, "metrics-only"))
        return SCALER_METRICS_ONLY;
    return -1;
}

void autoscaler_config_default(autoscaler_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->scaler, sizeof c->scaler, "none");
    c->interval_s = 5.0;
    autoscale_config_default(&c->policy);
    snprintf(c->k8s_workload[AS_POOL_PREFILL], sizeof c->k8s_workload[0], "deployments/tandem-prefiller");
    snprintf(c->k8s_workload[AS_POOL_DECODE], sizeof c->k8s_workload[0], "statefulsets/tandem-decoder");
    c->k8s_pods_per_replica[AS_POOL_PREFILL] = 1;
    c->k8s_pods_per_replica[AS_POOL_DECODE] = 1;
    c->local_drain_timeout_s = 60.0;
    c->local_max_workers = 16;
}

int autoscaler_config_validate(const autoscaler_config *c, char *err, size_t errlen)
{
    int kind = scaler_kind_of(c->scaler);
    if (kind < 0) {
        snprintf(err, errlen, "--scaler must be none, local, kubernetes or metrics-only, got '%s'",
                 c->scaler);
        return TN_ERR_ARG;
    }
    if (!(c->interval_s > 0) || !isfinite(c->interval_s)) {
        snprintf(err, errlen, "--autoscale-interval-s must be > 0, got %g", c->interval_s);
        return TN_ERR_ARG;
    }
    if (autoscale_config_validate(&c->policy, err, errlen) != 0)
        return TN_ERR_ARG;
    for (int p = 0; p < AS_POOL_COUNT; p++) {
        if (c->k8s_pods_per_replica[p] < 1) {
            snprintf(err, errlen, "--scaler-k8s-%s-pods-per-replica must be >= 1",
                     as_pool_name((as_pool)p));
            return TN_ERR_ARG;
        }
        if (kind == SCALER_KUBERNETES && !strchr(c->k8s_workload[p], '/')) {
            snprintf(err, errlen, "--scaler-k8s-%s must be RESOURCE/NAME (e.g. deployments/x), got '%s'",
                     as_pool_name((as_pool)p), c->k8s_workload[p]);
            return TN_ERR_ARG;
        }
        if (c->local_metrics_port[p] < 0 || c->local_metrics_port[p] > 65535 - 64) {
            snprintf(err, errlen, "--scaler-local-%s-metrics-port must be 0 (any) or a port base",
                     as_pool_name((as_pool)p));
            return TN_ERR_ARG;
        }
    }
    if (kind == SCALER_LOCAL && !c->local_model[0]) {
        snprintf(err, errlen, "--scaler=local needs --scaler-local-model (the workers' model directory)");
        return TN_ERR_ARG;
    }
    if (!(c->local_drain_timeout_s >= 0) || c->local_max_workers < 1 || c->local_max_workers > 64) {
        snprintf(err, errlen, "--scaler-local-drain-timeout-s must be >= 0 and "
                              "--scaler-local-max-workers in 1..64");
        return TN_ERR_ARG;
    }
    return 0;
}

/* ------------------------------------------------------------ set-up */

/* argv = bin_dir/tandem-ROLE --router EP --model DIR --worker-id POOL-{index}
 *        --metrics-host HOST --metrics-port PORT --tokenizer T EXTRA...
 * (the router's own --tokenizer: structured outputs mask over it) */
static char **local_argv(const router_ctx *ctx, const char *bin_dir, as_pool pool, char *err,
                         size_t errlen)
{
    const autoscaler_config *c = &ctx->cfg.as;
    const char *host = strcmp(ctx->cfg.host, "0.0.0.0") ? ctx->cfg.host : "127.0.0.1";
    char exe[OPT_PATH_MAX + 32], ep[128], id[32];
    snprintf(exe, sizeof exe, "%s/%s", bin_dir,
             pool == AS_POOL_PREFILL ? "tandem-prefiller" : "tandem-decoder");
    snprintf(ep, sizeof ep, "tcp://%s:%d", host, ctx->worker_port);
    snprintf(id, sizeof id, "%s-{index}", as_pool_name(pool));
    const char *fixed[] = {exe, "--router", ep, "--model", c->local_model, "--worker-id", id,
                           "--metrics-host", host, "--metrics-port",
                           c->local_metrics_port[pool] > 0 ? "{port}" : "0", "--tokenizer",
                           ctx->cfg.tokenizer};
    size_t n_fixed = sizeof fixed / sizeof *fixed;
    char **extra = NULL;
    size_t n_extra = 0;
    if (c->local_args[pool][0] && strspn(c->local_args[pool], " \t") != strlen(c->local_args[pool])) {
        if (scaler_local_split_command(c->local_args[pool], &extra, err, errlen) != 0)
            return NULL;
        while (extra[n_extra])
            n_extra++;
    }
    char **argv = calloc(n_fixed + n_extra + 1, sizeof *argv);
    int bad = argv == NULL;
    for (size_t i = 0; !bad && i < n_fixed; i++)
        bad = !(argv[i] = strdup(fixed[i]));
    for (size_t i = 0; !bad && i < n_extra; i++)
        bad = !(argv[n_fixed + i] = strdup(extra[i]));
    scaler_local_free_argv(extra);
    if (bad) {
        scaler_local_free_argv(argv);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    return argv;
}

/* The directory this executable lives in (the workers are its siblings). */
static int own_dir(char *out, size_t len)
{
    char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0)
        return -1;
    path[n] = '\0';
    snprintf(out, len, "%s", dirname(path));
    return 0;
}

static int make_local(router_ctx *ctx, autoscaler *a, char *err, size_t errlen)
{
    const autoscaler_config *c = &ctx->cfg.as;
    char bin_dir[OPT_PATH_MAX];
    if (c->local_bin_dir[0])
        snprintf(bin_dir, sizeof bin_dir, "%s", c->local_bin_dir);
    else if (own_dir(bin_dir, sizeof bin_dir) != 0) {
        snprintf(err, errlen, "cannot find the router's own directory; give --scaler-local-bin-dir");
        return TN_ERR_ARG;
    }
    scaler_local_config lc;
    memset(&lc, 0, sizeof lc);
    for (int p = 0; p < AS_POOL_COUNT; p++) {
        char exe[OPT_PATH_MAX + 32];
        snprintf(exe, sizeof exe, "%s/%s", bin_dir,
                 p == AS_POOL_PREFILL ? "tandem-prefiller" : "tandem-decoder");
        if (access(exe, X_OK) != 0) {
            snprintf(err, errlen, "local scaler: %s is not an executable (--scaler-local-bin-dir)", exe);
            return TN_ERR_ARG;
        }
        if (!(a->argv[p] = local_argv(ctx, bin_dir, (as_pool)p, err, errlen)))
            return TN_ERR_ARG;
        lc.argv[p] = (const char *const *)a->argv[p];
        lc.base_port[p] = c->local_metrics_port[p];
    }
    lc.drain_timeout_s = c->local_drain_timeout_s;
    lc.max_workers = c->local_max_workers;
    if (scaler_local_create(&lc, &a->local, err, errlen) != 0)
        return TN_ERR_ARG;
    a->sc = scaler_local_as_scaler(a->local);
    a->has_scaler = 1;
    return 0;
}

static int make_kubernetes(router_ctx *ctx, autoscaler *a, char *err, size_t errlen)
{
    const autoscaler_config *c = &ctx->cfg.as;
    char res[AS_POOL_COUNT][128], name[AS_POOL_COUNT][128];
    scaler_kubernetes_config kc;
    memset(&kc, 0, sizeof kc);
    for (int p = 0; p < AS_POOL_COUNT; p++) {
        const char *slash = strchr(c->k8s_workload[p], '/');
        snprintf(res[p], sizeof res[p], "%.*s", (int)(slash - c->k8s_workload[p]), c->k8s_workload[p]);
        snprintf(name[p], sizeof name[p], "%s", slash + 1);
        kc.workload_resource[p] = res[p];
        kc.workload_name[p] = name[p];
        kc.pods_per_replica[p] = c->k8s_pods_per_replica[p];
    }
    kc.sa_dir = c->k8s_sa_dir[0] ? c->k8s_sa_dir : NULL;
    kc.api_url = c->k8s_api_url[0] ? c->k8s_api_url : NULL;
    kc.namespace_name = c->k8s_namespace[0] ? c->k8s_namespace : NULL;
    scaler_kubernetes *k = NULL;
    if (scaler_kubernetes_create(&kc, &k, err, errlen) != 0)
        return TN_ERR_ARG;
    a->sc = scaler_kubernetes_as_scaler(k);
    a->has_scaler = 1;
    return 0;
}

/* ------------------------------------------------------------ the loop */

static void push_event(autoscale_status *st, double t, int pool, int from, int to, const char *why)
{
    autoscale_event *e = &st->events[st->events_next];
    e->t = t;
    e->pool = pool;
    e->from = from;
    e->to = to;
    snprintf(e->reason, sizeof e->reason, "%.*s", (int)sizeof e->reason - 1, why);
    st->events_next = (st->events_next + 1) % AUTOSCALE_EVENTS;
    if (st->n_events < AUTOSCALE_EVENTS)
        st->n_events++;
}

static int role_of(int pool)
{
    return pool == AS_POOL_PREFILL ? TANDEM__V1__WORKER_ROLE__WORKER_ROLE_PREFILLER
                                   : TANDEM__V1__WORKER_ROLE__WORKER_ROLE_DECODER;
}

/* What one evaluation reads from the router, copied under the lock. */
typedef struct snapshot {
    autoscale_prefill_sample *samples;
    size_t n_samples;
    int *running;
    size_t n_decoders;
    double queued_tokens, served_tokens;
    uint64_t input_tokens;
    int serving[AS_POOL_COUNT], registered[AS_POOL_COUNT];
    long held_total;
    double batch_sum, occupancy_sum;
    int n_batch;
} snapshot;

static int take_snapshot(router_ctx *ctx, snapshot *s)
{
    memset(s, 0, sizeof *s);
    const worker_registry *w = &ctx->workers;
    size_t n = (size_t)(w->n ? w->n : 1);
    s->samples = calloc(n, sizeof *s->samples);
    s->running = calloc(n, sizeof *s->running);
    if (!s->samples || !s->running)
        return -1;
    s->input_tokens = ctx->metrics.input_tokens;
    for (int i = 0; i < w->n; i++) {
        router_worker *x = w->w[i];
        int pool = x->role == role_of(AS_POOL_PREFILL) ? AS_POOL_PREFILL : AS_POOL_DECODE;
        s->registered[pool]++;
        s->serving[pool] += !x->draining;
        if (pool == AS_POOL_PREFILL) {
            s->queued_tokens += (double)x->assigned_input_tokens;
            if (!x->has_metrics)
                continue;
            double tok = (double)x->wm.prefill_input_tokens, busy = x->wm.prefill_busy_s;
            /* A counter below its mark: the worker restarted under the same id. */
            if (x->as_marked && tok >= x->as_mark_tokens && busy >= x->as_mark_busy_s) {
                s->samples[s->n_samples].tokens = tok - x->as_mark_tokens;
                s->samples[s->n_samples].busy_s = busy - x->as_mark_busy_s;
                s->served_tokens += tok - x->as_mark_tokens;
                s->n_samples++;
            }
            x->as_mark_tokens = tok;
            x->as_mark_busy_s = busy;
            x->as_marked = 1;
        } else if (!x->draining) {
            /* Every request the router placed on it (reserving, prefilling or
             * decoding): exact and current, unlike the heartbeat's batch. */
            s->running[s->n_decoders++] = x->in_flight;
            if (x->has_metrics) {
                s->batch_sum += x->wm.decode_batch_size;
                s->occupancy_sum += x->wm.kv_blocks_total
                                        ? (double)x->wm.kv_blocks_used / x->wm.kv_blocks_total
                                        : 0;
                s->n_batch++;
            }
        }
    }
    for (const router_request *r = ctx->held_head; r; r = r->held_next) {
        s->held_total++;
        if (r->held_for == AS_POOL_PREFILL)
            s->queued_tokens += r->n_prompt;
    }
    return 0;
}

static void evaluate(router_ctx *ctx, autoscaler *a, double now)
{
    char err[512];
    snapshot s;
    pthread_mutex_lock(&ctx->lock);
    int rc = take_snapshot(ctx, &s);
    pthread_mutex_unlock(&ctx->lock);
    if (rc != 0) {
        tn_log(WHO, "out of memory taking an observation");
        free(s.samples);
        free(s.running);
        return;
    }
    double dt = a->marked ? now - a->mark_t : 0;
    double input_tps = dt > 0 ? (double)(s.input_tokens - a->mark_input_tokens) / dt : 0;
    double served_tps = dt > 0 ? s.served_tokens / dt : 0;
    a->mark_input_tokens = s.input_tokens;
    a->mark_t = now;
    a->marked = 1;

    int current[AS_POOL_COUNT], errors[AS_POOL_COUNT] = {0, 0};
    char error_text[AS_POOL_COUNT][360];
    for (int p = 0; p < AS_POOL_COUNT; p++) {
        current[p] = s.serving[p];
        if (a->kind == SCALER_LOCAL || a->kind == SCALER_KUBERNETES) {
            int n = 0;
            if (scaler_get_replicas(&a->sc, (as_pool)p, &n, err, sizeof err) == 0) {
                current[p] = n;
            } else {
                errors[p]++;
                snprintf(error_text[p], sizeof error_text[p], "get replicas: %.300s", err);
                tn_log(WHO, "%s: %s", as_pool_name((as_pool)p), error_text[p]);
            }
        }
    }
    autoscale_decision d;
    memset(&d, 0, sizeof d);
    int decided = 0;
    if (a->has_policy) {
        autoscale_observation obs = {
            .now_s = now,
            .input_tps_arriving = input_tps,
            .input_tps_served = served_tps,
            .prefill_queued_tokens = s.queued_tokens,
            .prefill_samples = s.samples,
            .n_prefill_samples = s.n_samples,
            .decoder_running = s.running,
            .n_decoders = s.n_decoders,
            .decode_waiting = s.held_total,
        };
        memcpy(obs.current, current, sizeof current);
        if (autoscale_policy_evaluate(&a->policy, &obs, &d, err, sizeof err) != 0)
            tn_log(WHO, "policy evaluation failed: %s", err);
        else
            decided = 1;
    }
    free(s.samples);
    free(s.running);
    int after[AS_POOL_COUNT];
    memcpy(after, current, sizeof after);
    for (int p = 0; decided && a->has_scaler && p < AS_POOL_COUNT; p++) {
        if (d.action[p] != AS_ACTION_NONE)
            tn_log(WHO, "%s", d.reason[p]);
        if (scaler_set_replicas(&a->sc, (as_pool)p, d.desired[p], err, sizeof err) != 0) {
            errors[p]++;
            snprintf(error_text[p], sizeof error_text[p], "set replicas to %d: %.300s", d.desired[p],
                     err);
            tn_log(WHO, "%s: %s", as_pool_name((as_pool)p), error_text[p]);
        } else if (a->kind == SCALER_LOCAL) {
            after[p] = scaler_local_get_replicas(a->local, (as_pool)p);
        } else if (a->kind == SCALER_KUBERNETES) {
            after[p] = d.desired[p];
        }
    }

    pthread_mutex_lock(&ctx->lock);
    autoscale_status *st = &ctx->as_status;
    double t = now - ctx->t_start;
    for (int p = 0; p < AS_POOL_COUNT; p++) {
        st->current[p] = after[p];
        if (a->local)
            st->scaler_draining[p] = scaler_local_draining(a->local, (as_pool)p);
        if (errors[p]) {
            st->scaler_errors[p] += (uint64_t)errors[p];
            push_event(st, t, p, current[p], -1, error_text[p]);
        }
        if (!decided)
            continue;
        st->desired[p] = d.desired[p];
        st->formula[p] = d.formula[p];
        snprintf(st->reason[p], sizeof st->reason[p], "%s", d.reason[p]);
        if (d.action[p] != AS_ACTION_NONE) {
            st->actions[p][d.action[p] == AS_ACTION_UP ? 0 : 1]++;
            push_event(st, t, p, current[p], d.desired[p], d.reason[p]);
        }
    }
    if (decided) {
        st->evaluated = 1;
        st->demand_tps = d.prefill_demand_tps;
        st->tps_per_replica = d.prefill_tps_per_replica;
        st->decode_sequences = d.decode_sequences;
    }
    autoscale_sample *h = &st->history[st->history_next];
    memset(h, 0, sizeof *h);
    h->t = t;
    for (int p = 0; p < AS_POOL_COUNT; p++) {
        h->current[p] = after[p];
        h->desired[p] = decided ? d.desired[p] : -1;
        h->formula[p] = decided ? d.formula[p] : -1;
        h->ready[p] = s.serving[p];
        h->draining[p] = a->local ? scaler_local_draining(a->local, (as_pool)p)
                                  : s.registered[p] - s.serving[p];
    }
    h->input_tps = input_tps;
    h->served_tps = served_tps;
    h->demand_tps = decided ? d.prefill_demand_tps : input_tps;
    h->tps_per_replica = decided ? d.prefill_tps_per_replica : 0;
    h->decode_sequences = decided ? d.decode_sequences : 0;
    h->mean_batch = s.n_batch ? s.batch_sum / s.n_batch : 0;
    h->kv_occupancy = s.n_batch ? s.occupancy_sum / s.n_batch : 0;
    h->held = (int)s.held_total;
    st->history_next = (st->history_next + 1) % AUTOSCALE_HISTORY;
    if (st->n_history < AUTOSCALE_HISTORY)
        st->n_history++;
    pthread_mutex_unlock(&ctx->lock);
}

/* Between evaluations the local scaler reaps and enforces drain deadlines;
 * the draining count it reports is published as it changes. */
static void poll_scaler(router_ctx *ctx, autoscaler *a)
{
    char err[256];
    if (!a->has_scaler || scaler_poll(&a->sc, err, sizeof err) != 0 || !a->local)
        return;
    int draining[AS_POOL_COUNT], running[AS_POOL_COUNT];
    for (int p = 0; p < AS_POOL_COUNT; p++) {
        draining[p] = scaler_local_draining(a->local, (as_pool)p);
        running[p] = scaler_local_get_replicas(a->local, (as_pool)p);
    }
    pthread_mutex_lock(&ctx->lock);
    for (int p = 0; p < AS_POOL_COUNT; p++) {
        ctx->as_status.scaler_draining[p] = draining[p];
        if (ctx->as_status.evaluated)
            ctx->as_status.current[p] = running[p];
    }
    pthread_mutex_unlock(&ctx->lock);
}

static void *loop(void *arg)
{
    router_ctx *ctx = arg;
    autoscaler *a = ctx->autoscaler;
    double next_eval = tn_now_s();
    for (;;) {
        double now = tn_now_s();
        if (now >= next_eval) {
            evaluate(ctx, a, now);
            next_eval = now + ctx->cfg.as.interval_s;
        }
        poll_scaler(ctx, a);
        double wait_s = next_eval - tn_now_s();
        int timeout = wait_s > 0 ? (int)ceil(wait_s * 1000.0) : 0;
        if (a->local && timeout > LOCAL_POLL_MS)
            timeout = LOCAL_POLL_MS;
        struct pollfd p = {.fd = a->stop_fd, .events = POLLIN};
        int n = poll(&p, 1, timeout);
        if (n > 0)
            break;
        if (n < 0 && errno != EINTR) {
            tn_log(WHO, "poll failed: %s", strerror(errno));
            break;
        }
    }
    if (a->has_scaler) {
        if (a->local)
            tn_log(WHO, "stopping: draining every local worker");
        scaler_destroy(&a->sc); /* local: SIGTERM, bounded wait, SIGKILL, reap */
        a->has_scaler = 0;
        a->local = NULL;
    }
    atomic_store(&a->stopped, 1);
    tn_wakefd_signal(ctx->wake_fd);
    return NULL;
}

static void autoscaler_release(autoscaler *a)
{
    if (!a)
        return;
    if (a->has_scaler)
        scaler_destroy(&a->sc);
    if (a->has_policy)
        autoscale_policy_free(&a->policy);
    for (int p = 0; p < AS_POOL_COUNT; p++)
        scaler_local_free_argv(a->argv[p]);
    if (a->stop_fd >= 0)
        close(a->stop_fd);
    free(a);
}

int autoscaler_start(router_ctx *ctx, char *err, size_t errlen)
{
    const autoscaler_config *c = &ctx->cfg.as;
    autoscaler *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, errlen, "out of memory");
        return TN_ERR_NOMEM;
    }
    a->stop_fd = tn_wakefd_open();
    a->kind = scaler_kind_of(c->scaler);
    autoscale_status *st = &ctx->as_status;
    snprintf(st->scaler, sizeof st->scaler, "%s", c->scaler);
    st->enabled = a->kind != SCALER_NONE;
    for (int p = 0; p < AS_POOL_COUNT; p++)
        st->scaler_draining[p] = -1;
    int rc = a->stop_fd < 0 || a->kind < 0 ? -1 : 0;
    if (rc != 0)
        snprintf(err, errlen, "cannot set up the autoscaler (scaler '%s')", c->scaler);
    if (rc == 0 && a->kind != SCALER_NONE) {
        rc = autoscale_policy_init(&a->policy, &c->policy, err, errlen);
        a->has_policy = rc == 0;
    }
    if (rc == 0 && a->kind == SCALER_LOCAL)
        rc = make_local(ctx, a, err, errlen);
    else if (rc == 0 && a->kind == SCALER_KUBERNETES)
        rc = make_kubernetes(ctx, a, err, errlen);
    else if (rc == 0 && a->kind == SCALER_METRICS_ONLY) {
        scaler_metrics_init(&a->metrics_only);
        a->sc = scaler_metrics_as_scaler(&a->metrics_only);
        a->has_scaler = 1;
    }
    if (rc != 0) {
        autoscaler_release(a);
        return TN_ERR_ARG;
    }
    ctx->autoscaler = a;
    if (pthread_create(&a->thread, NULL, loop, ctx) != 0) {
        snprintf(err, errlen, "cannot start the autoscaler thread");
        ctx->autoscaler = NULL;
        autoscaler_release(a);
        return TN_ERR_ARG;
    }
    a->thread_started = 1;
    tn_log(WHO, "scaler %s, evaluating every %.3g s", c->scaler, c->interval_s);
    return 0;
}

void autoscaler_request_stop(router_ctx *ctx)
{
    if (ctx->autoscaler)
        tn_wakefd_signal(ctx->autoscaler->stop_fd);
}

int autoscaler_stopped(router_ctx *ctx)
{
    return !ctx->autoscaler || atomic_load(&ctx->autoscaler->stopped);
}

void autoscaler_free(router_ctx *ctx)
{
    autoscaler *a = ctx->autoscaler;
    if (!a)
        return;
    if (a->thread_started) {
        tn_wakefd_signal(a->stop_fd);
        pthread_join(a->thread, NULL);
    }
    ctx->autoscaler = NULL;
    autoscaler_release(a);
}
