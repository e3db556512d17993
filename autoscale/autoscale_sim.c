/* Scaling simulator (see autoscale_sim.h and docs/AUTOSCALING.md). A plain
 * next-event loop: at each step time jumps to the earliest of the next
 * arrival, prefill completion, decode step end, replica becoming ready and
 * policy evaluation. Replica counts are small (tens), so every step scans
 * them instead of keeping a heap. */
#include "autoscale/autoscale_sim.h"
#include "common/status.h"
#include "common/flag_file.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void sim_config_default(sim_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    autoscale_config_default(&cfg->policy);
    cfg->eval_interval_s = 5.0;
    /* Seed ("GPT-OSS on day 0", H200): GPT-OSS-20B EP4 TP4 prefills 8192
     * tokens in 0.108 s. Replace with the measured rate from docs/PERF.md. */
    cfg->prefill_tps = 8192.0 / 0.108;
    /* Placeholders until docs/PERF.md has measured decode steps: the seed
     * gives decode only as charts. 10 ms + 0.2 ms per sequence keeps a batch
     * of 64 at ~44 tokens/s per request. */
    cfg->decode_step_base_s = 0.010;
    cfg->decode_step_per_seq_s = 0.0002;
    cfg->decode_max_running = 128;
    cfg->startup_s = 30.0;
    cfg->initial[AS_POOL_PREFILL] = 1;
    cfg->initial[AS_POOL_DECODE] = 1;
    cfg->gpu_hour_usd = 3.00; /* seed: nominal H200 market price */
    cfg->gpus_per_replica[AS_POOL_PREFILL] = 4;
    cfg->gpus_per_replica[AS_POOL_DECODE] = 8;
    cfg->max_sim_s = 0.0;
}

#define SF_DOUBLE FLAG_FIELD_DOUBLE
#define SF_INT FLAG_FIELD_INT

#define SIM_OFF(f) offsetof(sim_config, f)
static const flag_field SIM_FLAGS[] = {
    {"eval-interval-s", SF_DOUBLE, SIM_OFF(eval_interval_s), "seconds between policy evaluations"},
    {"prefill-tps", SF_DOUBLE, SIM_OFF(prefill_tps),
     "modelled prefill tokens/s per replica (seed: 8192 / 0.108 s, GPT-OSS-20B TP4 H200)"},
    {"decode-step-base-s", SF_DOUBLE, SIM_OFF(decode_step_base_s), "decode step time at batch 0 (seconds)"},
    {"decode-step-per-seq-s", SF_DOUBLE, SIM_OFF(decode_step_per_seq_s),
     "decode step time added per running sequence (seconds)"},
    {"decode-max-running", SF_INT, SIM_OFF(decode_max_running), "KV capacity: most running sequences per decoder"},
    {"startup-s", SF_DOUBLE, SIM_OFF(startup_s), "seconds from a scale-up decision until the replica serves"},
    {"initial-prefill", SF_INT, SIM_OFF(initial[AS_POOL_PREFILL]), "prefill replicas ready at t = 0"},
    {"initial-decode", SF_INT, SIM_OFF(initial[AS_POOL_DECODE]), "decode replicas ready at t = 0"},
    {"gpu-hour-usd", SF_DOUBLE, SIM_OFF(gpu_hour_usd), "price of one GPU-hour (seed: $3.00 for an H200)"},
    {"prefill-gpus", SF_INT, SIM_OFF(gpus_per_replica[AS_POOL_PREFILL]), "GPUs per prefill replica (TP=4 node)"},
    {"decode-gpus", SF_INT, SIM_OFF(gpus_per_replica[AS_POOL_DECODE]),
     "GPUs per decode replica (DP+EP group, up to 16)"},
    {"max-sim-s", SF_DOUBLE, SIM_OFF(max_sim_s), "fail if requests are still unserved at this time (0: last arrival + 1 day)"},
};
#define N_SIM_FLAGS (sizeof(SIM_FLAGS) / sizeof(SIM_FLAGS[0]))

int sim_config_set_flag(sim_config *cfg, const char *name, const char *value, char *err, size_t errlen)
{
    int rc = autoscale_config_set_flag(&cfg->policy, name, value, err, errlen);
    if (rc != 1)
        return rc;
    return flag_field_set(cfg, SIM_FLAGS, N_SIM_FLAGS, name, value, err, errlen);
}

int sim_config_validate(const sim_config *cfg, char *err, size_t errlen)
{
    if (autoscale_config_validate(&cfg->policy, err, errlen) != 0)
        return -1;
    if (!(cfg->eval_interval_s > 0.0 && isfinite(cfg->eval_interval_s)))
        return tn_fail(err, errlen, TN_ERR_ARG, "--eval-interval-s must be > 0");
    if (!(cfg->prefill_tps > 0.0 && isfinite(cfg->prefill_tps)))
        return tn_fail(err, errlen, TN_ERR_ARG, "--prefill-tps must be > 0");
    if (!(cfg->decode_step_base_s >= 0.0 && cfg->decode_step_per_seq_s >= 0.0 &&
          cfg->decode_step_base_s + cfg->decode_step_per_seq_s > 0.0 && isfinite(cfg->decode_step_base_s) &&
          isfinite(cfg->decode_step_per_seq_s)))
        return tn_fail(err, errlen, TN_ERR_ARG, "decode step times must be >= 0 and not both 0");
    if (cfg->decode_max_running < 1)
        return tn_fail(err, errlen, TN_ERR_ARG, "--decode-max-running must be >= 1");
    if (!(cfg->startup_s >= 0.0 && isfinite(cfg->startup_s)))
        return tn_fail(err, errlen, TN_ERR_ARG, "--startup-s must be >= 0");
    if (!(cfg->gpu_hour_usd >= 0.0 && isfinite(cfg->gpu_hour_usd)))
        return tn_fail(err, errlen, TN_ERR_ARG, "--gpu-hour-usd must be >= 0");
    if (!(cfg->max_sim_s >= 0.0 && isfinite(cfg->max_sim_s)))
        return tn_fail(err, errlen, TN_ERR_ARG, "--max-sim-s must be >= 0");
    for (int p = 0; p < AS_POOL_COUNT; p++) {
        const char *pn = as_pool_name((as_pool)p);
        if (cfg->gpus_per_replica[p] < 1)
            return tn_fail(err, errlen, TN_ERR_ARG, "--%s-gpus must be >= 1", pn);
        if (cfg->initial[p] < cfg->policy.pool[p].min_replicas || cfg->initial[p] > cfg->policy.pool[p].max_replicas)
            return tn_fail(err, errlen, TN_ERR_ARG, "--initial-%s (%d) must be within [autoscale-%s-min, autoscale-%s-max]", pn,
                        cfg->initial[p], pn, pn);
    }
    return 0;
}

void sim_config_print_help(FILE *out)
{
    sim_config d;
    sim_config_default(&d);
    fprintf(out, "Simulator model (docs/AUTOSCALING.md, \"Simulator\"):\n");
    flag_field_print_help(out, &d, SIM_FLAGS, N_SIM_FLAGS);
    autoscale_config_print_help(out);
}

/* ---------------------------------------------------------------- trace -- */

static int parse_long(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    while (*end == ' ' || *end == '\t' || *end == '\r')
        end++;
    if (errno || end == s || *end)
        return -1;
    *out = v;
    return 0;
}

int sim_load_trace(const char *path, sim_request **out, size_t *n_out, char *err, size_t errlen)
{
    if (!path || !out || !n_out)
        return tn_fail(err, errlen, TN_ERR_ARG, "sim_load_trace: NULL argument");
    *out = NULL;
    *n_out = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return tn_fail(err, errlen, TN_ERR_ARG, "cannot open trace %s: %s", path, strerror(errno));
    size_t cap = 1024, n = 0;
    sim_request *reqs = malloc(cap * sizeof(*reqs));
    char line[512];
    long lineno = 0;
    int saw_data = 0;
    if (!reqs) {
        fclose(f);
        return tn_fail(err, errlen, TN_ERR_ARG, "out of memory");
    }
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            tn_fail(err, errlen, TN_ERR_ARG, "%s:%ld: line too long", path, lineno);
            goto bad;
        }
        char *s = line;
        while (*s == ' ' || *s == '\t')
            s++;
        if (*s == '\0' || *s == '\n' || *s == '\r' || *s == '#')
            continue;
        if (!saw_data && !(*s >= '0' && *s <= '9') && *s != '.') {
            saw_data = 1; /* a header line */
            continue;
        }
        saw_data = 1;
        s[strcspn(s, "\r\n")] = '\0';
        char *f1 = s, *f2 = strchr(f1, ',');
        char *f3 = f2 ? strchr(f2 + 1, ',') : NULL;
        if (!f2 || !f3 || strchr(f3 + 1, ',')) {
            tn_fail(err, errlen, TN_ERR_ARG, "%s:%ld: expected time_s,input_tokens,output_tokens", path, lineno);
            goto bad;
        }
        *f2++ = '\0';
        *f3++ = '\0';
        char *end;
        errno = 0;
        double t = strtod(f1, &end);
        long in, outt;
        if (errno || end == f1 || *end || !isfinite(t) || t < 0.0 || parse_long(f2, &in) || parse_long(f3, &outt)) {
            tn_fail(err, errlen, TN_ERR_ARG, "%s:%ld: bad number (want time_s >= 0 and integer token counts)", path, lineno);
            goto bad;
        }
        if (in < 1 || outt < 1 || in > 100000000L || outt > 100000000L) {
            tn_fail(err, errlen, TN_ERR_ARG, "%s:%ld: token counts must be in [1, 1e8]", path, lineno);
            goto bad;
        }
        if (n > 0 && t < reqs[n - 1].t) {
            tn_fail(err, errlen, TN_ERR_ARG, "%s:%ld: arrival times must not decrease (%.6f after %.6f)", path, lineno, t,
                 reqs[n - 1].t);
            goto bad;
        }
        if (n == cap) {
            cap *= 2;
            sim_request *nr = realloc(reqs, cap * sizeof(*nr));
            if (!nr) {
                tn_fail(err, errlen, TN_ERR_ARG, "out of memory");
                goto bad;
            }
            reqs = nr;
        }
        reqs[n++] = (sim_request){t, in, outt};
    }
    if (ferror(f)) {
        tn_fail(err, errlen, TN_ERR_ARG, "%s: read error", path);
        goto bad;
    }
    fclose(f);
    if (n == 0) {
        free(reqs);
        return tn_fail(err, errlen, TN_ERR_ARG, "%s: no requests in the trace", path);
    }
    *out = reqs;
    *n_out = n;
    return 0;
bad:
    fclose(f);
    free(reqs);
    return -1;
}

/* ----------------------------------------------------------- percentiles -- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

sim_percentiles sim_percentiles_of(double *v, size_t n)
{
    sim_percentiles p = {0, 0, 0, 0, 0};
    if (n == 0)
        return p;
    qsort(v, n, sizeof(*v), cmp_double);
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
#define RANK(q) v[(size_t)ceil((q) * (double)n) - 1]
    p.p50 = RANK(0.50);
    p.p90 = RANK(0.90);
    p.p99 = RANK(0.99);
#undef RANK
    p.max = v[n - 1];
    p.mean = sum / (double)n;
    return p;
}

/* ----------------------------------------------------------- simulation -- */

typedef enum { R_STARTING, R_READY, R_DRAINING, R_GONE } replica_state;

typedef struct {
    replica_state state;
    double born, ready_at, gone_at;
    /* prefill */
    long req;          /* request being prefilled, -1 when idle */
    double busy_until;
    double iv_tokens, iv_busy; /* completed work since the last evaluation */
    /* decode */
    long *running;     /* request indices, decode_max_running of them */
    int n_running;
    int stepping;
    double step_end, step_start;
} replica;

typedef struct {
    replica *r;
    size_t n, cap;
} replica_list;

typedef struct {
    const sim_config *cfg;
    const sim_request *reqs;
    size_t n;
    replica_list pool[AS_POOL_COUNT];
    long *pq, *dq;     /* FIFO queues of request indices: prefill, decode */
    size_t pq_head, pq_tail, dq_head, dq_tail;
    double pq_tokens;  /* input tokens waiting for a prefiller */
    double *prefill_start, *prefill_end, *admit, *done;
    long *remaining;   /* decode tokens still to generate */
    size_t completed;
} sim_state;

static int add_replica(sim_state *s, as_pool pool, double t, double ready_at)
{
    replica_list *l = &s->pool[pool];
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        replica *nr = realloc(l->r, cap * sizeof(*nr));
        if (!nr)
            return -1;
        l->r = nr;
        l->cap = cap;
    }
    replica *r = &l->r[l->n];
    memset(r, 0, sizeof(*r));
    r->born = t;
    r->ready_at = ready_at;
    r->state = ready_at <= t ? R_READY : R_STARTING;
    r->req = -1;
    if (pool == AS_POOL_DECODE) {
        r->running = malloc((size_t)s->cfg->decode_max_running * sizeof(long));
        if (!r->running)
            return -1;
    }
    l->n++;
    return 0;
}

static int active_count(const sim_state *s, as_pool pool)
{
    int n = 0;
    for (size_t i = 0; i < s->pool[pool].n; i++)
        n += s->pool[pool].r[i].state == R_STARTING || s->pool[pool].r[i].state == R_READY;
    return n;
}

static int ready_count(const sim_state *s, as_pool pool)
{
    int n = 0;
    for (size_t i = 0; i < s->pool[pool].n; i++)
        n += s->pool[pool].r[i].state == R_READY;
    return n;
}

static void retire(replica *r, double t)
{
    r->state = R_GONE;
    r->gone_at = t;
}

static void finish_request(sim_state *s, long q, double t)
{
    s->done[q] = t;
    s->completed++;
}

/* Scale a pool to `want` active replicas. Removal order: replicas still
 * starting (nothing lost), then idle ones, then busy ones, which drain:
 * a prefiller finishes its request, a decoder its running sequences. */
static int apply_scale(sim_state *s, as_pool pool, int want, double t)
{
    replica_list *l = &s->pool[pool];
    int active = active_count(s, pool);
    for (; active < want; active++)
        if (add_replica(s, pool, t, t + s->cfg->startup_s) != 0)
            return -1;
    for (size_t i = l->n; i-- > 0 && active > want;)
        if (l->r[i].state == R_STARTING) {
            retire(&l->r[i], t);
            active--;
        }
    for (size_t i = l->n; i-- > 0 && active > want;) {
        replica *r = &l->r[i];
        int idle = pool == AS_POOL_PREFILL ? r->req < 0 : (r->n_running == 0 && !r->stepping);
        if (r->state == R_READY && idle) {
            retire(r, t);
            active--;
        }
    }
    while (active > want) {
        replica *pick = NULL;
        for (size_t i = 0; i < l->n; i++) {
            replica *r = &l->r[i];
            if (r->state != R_READY)
                continue;
            /* The decoder with the fewest sequences drains soonest. */
            if (!pick || (pool == AS_POOL_DECODE && r->n_running < pick->n_running))
                pick = r;
        }
        if (!pick)
            break;
        pick->state = R_DRAINING;
        active--;
    }
    return 0;
}

static double decode_step_s(const sim_config *c, int batch)
{
    return c->decode_step_base_s + c->decode_step_per_seq_s * (double)batch;
}

/* Hands queued work to idle capacity at time t. */
static void dispatch(sim_state *s, double t)
{
    const sim_config *c = s->cfg;
    replica_list *pl = &s->pool[AS_POOL_PREFILL];
    for (size_t i = 0; i < pl->n && s->pq_head < s->pq_tail; i++) {
        replica *r = &pl->r[i];
        if (r->state != R_READY || r->req >= 0)
            continue;
        long q = s->pq[s->pq_head++];
        s->pq_tokens -= (double)s->reqs[q].input_tokens;
        r->req = q;
        s->prefill_start[q] = t;
        r->busy_until = t + (double)s->reqs[q].input_tokens / c->prefill_tps;
    }
    replica_list *dl = &s->pool[AS_POOL_DECODE];
    /* Continuous batching admits new sequences at step boundaries, to the
     * least loaded decoder first. */
    while (s->dq_head < s->dq_tail) {
        replica *best = NULL;
        for (size_t i = 0; i < dl->n; i++) {
            replica *r = &dl->r[i];
            if (r->state != R_READY || r->stepping || r->n_running >= c->decode_max_running)
                continue;
            if (!best || r->n_running < best->n_running)
                best = r;
        }
        if (!best)
            break;
        long q = s->dq[s->dq_head++];
        s->admit[q] = t;
        best->running[best->n_running++] = q;
    }
    for (size_t i = 0; i < dl->n; i++) {
        replica *r = &dl->r[i];
        if ((r->state == R_READY || r->state == R_DRAINING) && !r->stepping && r->n_running > 0) {
            r->stepping = 1;
            r->step_start = t;
            r->step_end = t + decode_step_s(c, r->n_running);
        }
    }
}

static void sim_state_free(sim_state *s)
{
    for (int p = 0; p < AS_POOL_COUNT; p++) {
        for (size_t i = 0; i < s->pool[p].n; i++)
            free(s->pool[p].r[i].running);
        free(s->pool[p].r);
    }
    free(s->pq);
    free(s->dq);
    free(s->prefill_start);
    free(s->prefill_end);
    free(s->admit);
    free(s->done);
    free(s->remaining);
}

void sim_result_free(sim_result *r)
{
    if (!r)
        return;
    free(r->timeline);
    memset(r, 0, sizeof(*r));
}

static int push_timeline(sim_result *out, size_t *cap, const sim_timeline_point *pt)
{
    if (out->n_timeline == *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        sim_timeline_point *nt = realloc(out->timeline, nc * sizeof(*nt));
        if (!nt)
            return -1;
        out->timeline = nt;
        *cap = nc;
    }
    out->timeline[out->n_timeline++] = *pt;
    return 0;
}

/* Gathers the observation, runs the policy, applies its decision. */
static int evaluate(sim_state *s, autoscale_policy *pol, double t, double since, double arrived_tokens,
                    double served_tokens, sim_result *out, size_t *tl_cap, char *err, size_t errlen)
{
    int rc = -1;
    replica_list *pl = &s->pool[AS_POOL_PREFILL], *dl = &s->pool[AS_POOL_DECODE];
    autoscale_prefill_sample *samples = calloc(pl->n + 1, sizeof(*samples));
    int *running = calloc(dl->n + 1, sizeof(*running));
    if (!samples || !running) {
        tn_fail(err, errlen, TN_ERR_ARG, "out of memory");
        goto done;
    }
    size_t ns = 0, nd = 0;
    for (size_t i = 0; i < pl->n; i++) {
        replica *r = &pl->r[i];
        if (r->iv_busy > 0.0)
            samples[ns++] = (autoscale_prefill_sample){r->iv_tokens, r->iv_busy};
        r->iv_tokens = r->iv_busy = 0.0;
    }
    for (size_t i = 0; i < dl->n; i++)
        if (dl->r[i].state == R_READY)
            running[nd++] = dl->r[i].n_running;
    double dt = t - since;
    autoscale_observation o;
    memset(&o, 0, sizeof(o));
    o.now_s = t;
    o.input_tps_arriving = dt > 0.0 ? arrived_tokens / dt : 0.0;
    o.input_tps_served = dt > 0.0 ? served_tokens / dt : 0.0;
    o.prefill_queued_tokens = s->pq_tokens > 0.0 ? s->pq_tokens : 0.0;
    o.prefill_samples = samples;
    o.n_prefill_samples = ns;
    o.decoder_running = running;
    o.n_decoders = nd;
    o.decode_waiting = (long)(s->dq_tail - s->dq_head);
    for (int p = 0; p < AS_POOL_COUNT; p++)
        o.current[p] = active_count(s, (as_pool)p);
    autoscale_decision d;
    if (autoscale_policy_evaluate(pol, &o, &d, err, errlen) != 0)
        goto done;
    sim_timeline_point pt;
    memset(&pt, 0, sizeof(pt));
    pt.t = t;
    pt.demand_tps = d.prefill_demand_tps;
    pt.decode_sequences = d.decode_sequences;
    for (int p = 0; p < AS_POOL_COUNT; p++) {
        pt.current[p] = o.current[p];
        pt.desired[p] = d.desired[p];
        pt.formula[p] = d.formula[p];
        memcpy(pt.reason[p], d.reason[p], sizeof(pt.reason[p]));
        if (d.action[p] == AS_ACTION_UP)
            out->scale_ups[p]++;
        if (d.action[p] == AS_ACTION_DOWN)
            out->scale_downs[p]++;
        if (apply_scale(s, (as_pool)p, d.desired[p], t) != 0) {
            tn_fail(err, errlen, TN_ERR_ARG, "out of memory");
            goto done;
        }
        pt.ready[p] = ready_count(s, (as_pool)p);
    }
    if (push_timeline(out, tl_cap, &pt) != 0) {
        tn_fail(err, errlen, TN_ERR_ARG, "out of memory");
        goto done;
    }
    rc = 0;
done:
    free(samples);
    free(running);
    return rc;
}

int sim_run(const sim_config *cfg, const sim_request *reqs, size_t n, sim_result *out, char *err, size_t errlen)
{
    if (!cfg || !reqs || !out || n == 0)
        return tn_fail(err, errlen, TN_ERR_ARG, "sim_run: empty trace or NULL argument");
    memset(out, 0, sizeof(*out));
    if (sim_config_validate(cfg, err, errlen) != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (reqs[i].input_tokens < 1 || reqs[i].output_tokens < 1 || !(reqs[i].t >= 0.0) ||
            (i > 0 && reqs[i].t < reqs[i - 1].t))
            return tn_fail(err, errlen, TN_ERR_ARG, "request %zu: bad arrival time or token counts", i);

    sim_state s;
    memset(&s, 0, sizeof(s));
    s.cfg = cfg;
    s.reqs = reqs;
    s.n = n;
    autoscale_policy pol;
    if (autoscale_policy_init(&pol, &cfg->policy, err, errlen) != 0)
        return -1;
    int rc = -1;
    size_t tl_cap = 0;
    s.pq = malloc(n * sizeof(long));
    s.dq = malloc(n * sizeof(long));
    s.prefill_start = calloc(n, sizeof(double));
    s.prefill_end = calloc(n, sizeof(double));
    s.admit = calloc(n, sizeof(double));
    s.done = calloc(n, sizeof(double));
    s.remaining = malloc(n * sizeof(long));
    if (!s.pq || !s.dq || !s.prefill_start || !s.prefill_end || !s.admit || !s.done || !s.remaining) {
        tn_fail(err, errlen, TN_ERR_ARG, "out of memory");
        goto done;
    }
    for (int p = 0; p < AS_POOL_COUNT; p++)
        for (int i = 0; i < cfg->initial[p]; i++)
            if (add_replica(&s, (as_pool)p, 0.0, 0.0) != 0) {
                tn_fail(err, errlen, TN_ERR_ARG, "out of memory");
                goto done;
            }
    double limit = cfg->max_sim_s > 0.0 ? cfg->max_sim_s : reqs[n - 1].t + 86400.0;
    double t = 0.0, next_eval = cfg->eval_interval_s, last_eval = 0.0;
    double arrived_iv = 0.0, served_iv = 0.0;
    size_t ai = 0;
    while (s.completed < n) {
        double te = next_eval;
        if (ai < n && reqs[ai].t < te)
            te = reqs[ai].t;
        for (int p = 0; p < AS_POOL_COUNT; p++)
            for (size_t i = 0; i < s.pool[p].n; i++) {
                const replica *r = &s.pool[p].r[i];
                if (r->state == R_STARTING && r->ready_at < te)
                    te = r->ready_at;
                if (p == AS_POOL_PREFILL && r->req >= 0 && r->busy_until < te)
                    te = r->busy_until;
                if (p == AS_POOL_DECODE && r->stepping && r->step_end < te)
                    te = r->step_end;
            }
        t = te;
        if (t > limit) {
            tn_fail(err, errlen, TN_ERR_ARG, "simulation passed %.0f s with %zu of %zu requests unserved (the policy never gave the "
                              "pools capacity: min replicas 0 and no backlog term?)", limit, n - s.completed, n);
            goto done;
        }
        for (; ai < n && reqs[ai].t <= t; ai++) {
            s.pq[s.pq_tail++] = (long)ai;
            s.pq_tokens += (double)reqs[ai].input_tokens;
            arrived_iv += (double)reqs[ai].input_tokens;
        }
        replica_list *pl = &s.pool[AS_POOL_PREFILL], *dl = &s.pool[AS_POOL_DECODE];
        for (size_t i = 0; i < pl->n; i++) {
            replica *r = &pl->r[i];
            if (r->state == R_STARTING && r->ready_at <= t)
                r->state = R_READY;
            if (r->req >= 0 && r->busy_until <= t) {
                long q = r->req;
                double in = (double)reqs[q].input_tokens;
                s.prefill_end[q] = r->busy_until;
                r->iv_tokens += in;
                r->iv_busy += r->busy_until - s.prefill_start[q];
                served_iv += in;
                r->req = -1;
                s.remaining[q] = reqs[q].output_tokens - 1; /* prefill made the first token */
                if (s.remaining[q] == 0)
                    finish_request(&s, q, r->busy_until);
                else
                    s.dq[s.dq_tail++] = q;
                if (r->state == R_DRAINING)
                    retire(r, t);
            }
        }
        for (size_t i = 0; i < dl->n; i++) {
            replica *r = &dl->r[i];
            if (r->state == R_STARTING && r->ready_at <= t)
                r->state = R_READY;
            if (r->stepping && r->step_end <= t) {
                int keep = 0;
                for (int k = 0; k < r->n_running; k++) {
                    long q = r->running[k];
                    if (--s.remaining[q] == 0)
                        finish_request(&s, q, r->step_end);
                    else
                        r->running[keep++] = q;
                }
                r->n_running = keep;
                r->stepping = 0;
            }
            if (r->state == R_DRAINING && r->n_running == 0 && !r->stepping)
                retire(r, t);
        }
        dispatch(&s, t);
        if (t >= next_eval) {
            if (evaluate(&s, &pol, t, last_eval, arrived_iv, served_iv, out, &tl_cap, err, errlen) != 0)
                goto done;
            last_eval = t;
            next_eval = t + cfg->eval_interval_s;
            arrived_iv = served_iv = 0.0;
            dispatch(&s, t);
        }
    }
    out->n_requests = n;
    out->end_s = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (s.done[i] > out->end_s)
            out->end_s = s.done[i];
        out->input_tokens += (double)reqs[i].input_tokens;
        out->output_tokens += (double)reqs[i].output_tokens;
    }
    for (int p = 0; p < AS_POOL_COUNT; p++) {
        double gs = 0.0;
        for (size_t i = 0; i < s.pool[p].n; i++) {
            const replica *r = &s.pool[p].r[i];
            double end = r->state == R_GONE ? r->gone_at : out->end_s;
            if (end > r->born)
                gs += (end - r->born) * (double)cfg->gpus_per_replica[p];
        }
        out->gpu_seconds[p] = gs;
        out->cost_usd[p] = gs / 3600.0 * cfg->gpu_hour_usd;
    }
    out->usd_per_m_input = out->cost_usd[AS_POOL_PREFILL] / out->input_tokens * 1e6;
    out->usd_per_m_output = out->cost_usd[AS_POOL_DECODE] / out->output_tokens * 1e6;
    for (size_t i = 0; i < out->n_timeline; i++)
        for (int p = 0; p < AS_POOL_COUNT; p++)
            if (out->timeline[i].ready[p] > out->max_ready[p])
                out->max_ready[p] = out->timeline[i].ready[p];
    for (int p = 0; p < AS_POOL_COUNT; p++)
        if (cfg->initial[p] > out->max_ready[p])
            out->max_ready[p] = cfg->initial[p];

    /* Delay distributions. */
    double *v = malloc(n * sizeof(double));
    if (!v) {
        tn_fail(err, errlen, TN_ERR_ARG, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        v[i] = s.prefill_start[i] - reqs[i].t;
    out->prefill_wait = sim_percentiles_of(v, n);
    for (size_t i = 0; i < n; i++)
        v[i] = s.prefill_end[i] - reqs[i].t;
    out->ttft = sim_percentiles_of(v, n);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (reqs[i].output_tokens > 1)
            v[m++] = s.admit[i] - s.prefill_end[i];
    out->decode_wait = sim_percentiles_of(v, m);
    m = 0;
    for (size_t i = 0; i < n; i++)
        if (reqs[i].output_tokens > 1)
            v[m++] = (s.done[i] - s.admit[i]) / (double)(reqs[i].output_tokens - 1);
    out->itl = sim_percentiles_of(v, m);
    free(v);
    rc = 0;
done:
    if (rc != 0)
        sim_result_free(out);
    autoscale_policy_free(&pol);
    sim_state_free(&s);
    return rc;
}
