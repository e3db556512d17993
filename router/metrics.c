#include "router/metrics.h"

#include <stdlib.h>
#include <string.h>
#include "proto/tandem.pb-c.h"

/* Buckets exactly as docs/METRICS.md gives them. */
static const double TTFT_BOUNDS[] = {0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double ITL_BOUNDS[] = {0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1};
static const double DURATION_BOUNDS[] = {0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
static const double STAGE_BOUNDS[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1,
                                      0.25,  0.5,   1,    2.5,   10,   60};
static const char *const API_NAMES[API_COUNT] = {"openai", "rpc"};
const char *const metrics_stage_names[STAGE_T_COUNT] = {
    "router", "admission", "prefill_queue", "prefill", "kv_transfer", "first_decode",
};

void metrics_init(router_metrics *m)
{
    memset(m, 0, sizeof *m);
    histogram_init(&m->ttft, TTFT_BOUNDS, (int)(sizeof TTFT_BOUNDS / sizeof *TTFT_BOUNDS));
    histogram_init(&m->itl, ITL_BOUNDS, (int)(sizeof ITL_BOUNDS / sizeof *ITL_BOUNDS));
    histogram_init(&m->duration, DURATION_BOUNDS,
                   (int)(sizeof DURATION_BOUNDS / sizeof *DURATION_BOUNDS));
    for (int s = 0; s < STAGE_T_COUNT; s++)
        histogram_init(&m->stage[s], STAGE_BOUNDS,
                       (int)(sizeof STAGE_BOUNDS / sizeof *STAGE_BOUNDS));
}

void metrics_observe(histogram *h, double seconds)
{
    histogram_observe(h, seconds);
}

void metrics_request_done(router_metrics *m, metrics_api api, metrics_outcome outcome)
{
    if (api >= 0 && api < API_COUNT && outcome >= 0 && outcome < OUTCOME_COUNT)
        m->requests[api][outcome]++;
}

metrics_outcome metrics_outcome_for_status(int http_status)
{
    if (http_status == 429 || http_status == 503)
        return OUTCOME_REJECTED;
    if (http_status == 499)
        return OUTCOME_CANCELLED;
    if (http_status == 504)
        return OUTCOME_TIMEOUT;
    if (http_status >= 400 && http_status < 500)
        return OUTCOME_CLIENT_ERROR;
    return http_status < 400 ? OUTCOME_OK : OUTCOME_ERROR;
}

static int role_of_pool(int pool)
{
    return pool == AS_POOL_PREFILL ? TANDEM__V1__WORKER_ROLE__WORKER_ROLE_PREFILLER
                                   : TANDEM__V1__WORKER_ROLE__WORKER_ROLE_DECODER;
}

void metrics_pool_sizes(const worker_registry *w, const autoscale_status *as, int pool,
                        int *current, int *ready, int *draining)
{
    int registered = 0, serving = 0;
    workers_count(w, role_of_pool(pool), &registered, &serving);
    *ready = serving;
    *current = as->enabled && as->evaluated ? as->current[pool] : serving;
    *draining = as->enabled && as->scaler_draining[pool] >= 0 ? as->scaler_draining[pool]
                                                               : registered - serving;
}

static void pool_gauge(sbuf *b, const char *name, const char *help, const int *v)
{
    prom_family(b, name, "gauge", help);
    for (int p = 0; p < AS_POOL_COUNT; p++)
        sb_printf(b, "%s{pool=\"%s\"} %d\n", name, as_pool_name((as_pool)p), v[p]);
}

static void render_pools(sbuf *b, const worker_registry *w, const autoscale_status *as)
{
    int current[AS_POOL_COUNT], ready[AS_POOL_COUNT], draining[AS_POOL_COUNT];
    for (int p = 0; p < AS_POOL_COUNT; p++)
        metrics_pool_sizes(w, as, p, &current[p], &ready[p], &draining[p]);
    if (as->enabled && as->evaluated) {
        pool_gauge(b, "tandem_pool_desired_replicas",
                   "Replicas the autoscale policy wants (what the scaler sets).", as->desired);
        pool_gauge(b, "tandem_autoscale_formula_replicas",
                   "The policy formula clamped to [min, max], before windows and cooldowns.",
                   as->formula);
        prom_family(b, "tandem_autoscale_demand_tokens_per_second", "gauge",
                    "Prefill demand the policy used: arriving tokens/s plus backlog / drain time.");
        prom_sample(b, "tandem_autoscale_demand_tokens_per_second", "", as->demand_tps);
        prom_family(b, "tandem_autoscale_prefill_tokens_per_second_per_replica", "gauge",
                    "The policy's online estimate of one prefill replica's throughput.");
        prom_sample(b, "tandem_autoscale_prefill_tokens_per_second_per_replica", "",
                    as->tps_per_replica);
        prom_family(b, "tandem_autoscale_decode_sequences", "gauge",
                    "Running plus waiting sequences the decode formula used.");
        prom_sample(b, "tandem_autoscale_decode_sequences", "", (double)as->decode_sequences);
    }
    pool_gauge(b, "tandem_pool_current_replicas",
               "Replicas that exist: starting or serving, not draining.", current);
    pool_gauge(b, "tandem_pool_ready_replicas", "Replicas registered and healthy (not draining).",
               ready);
    pool_gauge(b, "tandem_pool_draining_replicas",
               "Replicas told to leave and still finishing their requests.", draining);
    if (!as->enabled)
        return;
    prom_family(b, "tandem_autoscale_actions_total", "counter",
                "Scaling actions the policy decided.");
    for (int p = 0; p < AS_POOL_COUNT; p++)
        for (int d = 0; d < 2; d++)
            sb_printf(b, "tandem_autoscale_actions_total{pool=\"%s\",direction=\"%s\"} %llu\n",
                      as_pool_name((as_pool)p), d ? "down" : "up",
                      (unsigned long long)as->actions[p][d]);
    prom_family(b, "tandem_scaler_errors_total", "counter", "Scaler calls that failed.");
    for (int p = 0; p < AS_POOL_COUNT; p++)
        sb_printf(b, "tandem_scaler_errors_total{pool=\"%s\",scaler=\"%s\"} %llu\n",
                  as_pool_name((as_pool)p), as->scaler, (unsigned long long)as->scaler_errors[p]);
}

void metrics_render(sbuf *b, const router_metrics *m, const worker_registry *w,
                    const autoscale_status *as, const int *held)
{
    prom_family(b, "tandem_requests_total", "counter", "Requests finished, by API and outcome.");
    for (int a = 0; a < API_COUNT; a++)
        for (int o = 0; o < OUTCOME_COUNT; o++)
            sb_printf(b, "tandem_requests_total{api=\"%s\",outcome=\"%s\"} %llu\n", API_NAMES[a],
                      prom_outcome_name((metrics_outcome)o), (unsigned long long)m->requests[a][o]);
    prom_family(b, "tandem_requests_in_flight", "gauge", "Requests accepted and not finished.");
    for (int a = 0; a < API_COUNT; a++)
        sb_printf(b, "tandem_requests_in_flight{api=\"%s\"} %lld\n", API_NAMES[a],
                  (long long)m->in_flight[a]);
    prom_family(b, "tandem_input_tokens_total", "counter",
                "Prompt tokens of requests arriving at the router.");
    prom_sample_u64(b, "tandem_input_tokens_total", "", m->input_tokens);
    prom_family(b, "tandem_output_tokens_total", "counter", "Tokens streamed to clients.");
    prom_sample_u64(b, "tandem_output_tokens_total", "", m->output_tokens);
    prom_family(b, "tandem_request_preemptions_total", "counter",
                "Requests placed again (re-prefilled with their output so far) after a "
                "decoder preempted them to free KV pages.");
    prom_sample_u64(b, "tandem_request_preemptions_total", "", m->preemptions);
    prom_family(b, "tandem_time_to_first_token_seconds", "histogram",
                "Request arrival to the first token.");
    prom_histogram(b, "tandem_time_to_first_token_seconds", "", &m->ttft);
    prom_family(b, "tandem_inter_token_latency_seconds", "histogram",
                "Gap between consecutive tokens of one request.");
    prom_histogram(b, "tandem_inter_token_latency_seconds", "", &m->itl);
    prom_family(b, "tandem_request_duration_seconds", "histogram",
                "Request arrival to its last token.");
    prom_histogram(b, "tandem_request_duration_seconds", "", &m->duration);
    prom_family(b, "tandem_request_stage_seconds", "histogram",
                "Where a request's time goes up to its second token, by stage.");
    for (int s = 0; s < STAGE_T_COUNT; s++) {
        char label[48];
        snprintf(label, sizeof label, "stage=\"%s\"", metrics_stage_names[s]);
        prom_histogram(b, "tandem_request_stage_seconds", label, &m->stage[s]);
    }
    prom_family(b, "tandem_router_queue_depth", "gauge",
                "Requests the router holds because no worker of that stage can take them yet.");
    for (int p = 0; p < AS_POOL_COUNT; p++)
        sb_printf(b, "tandem_router_queue_depth{stage=\"%s\"} %d\n", as_pool_name((as_pool)p),
                  held[p]);
    render_pools(b, w, as);
    prom_family(b, "tandem_build_info", "gauge", "Always 1.");
    sb_puts(b, "tandem_build_info{process=\"router\",version=\"0.1\"} 1\n");

    prom_family(b, "tandem_worker_up", "gauge",
                "1 while the worker is registered; 0 for a while after it missed heartbeats.");
    for (int i = 0; i < w->n; i++) {
        const router_worker *x = w->w[i];
        sb_printf(b, "tandem_worker_up{pool=\"%s\",worker=\"",
                  x->role == TANDEM__V1__WORKER_ROLE__WORKER_ROLE_PREFILLER ? "prefill" : "decode");
        prom_label_value(b, x->id);
        sb_puts(b, "\"} 1\n");
    }
    for (int i = 0; i < w->n_lost; i++) {
        const lost_worker *x = &w->lost[i];
        sb_printf(b, "tandem_worker_up{pool=\"%s\",worker=\"",
                  x->role == TANDEM__V1__WORKER_ROLE__WORKER_ROLE_PREFILLER ? "prefill" : "decode");
        prom_label_value(b, x->id);
        sb_puts(b, "\"} 0\n");
    }
    /* The cluster view: every worker's own series, as its heartbeat sent them. */
    worker_metrics_view *v = calloc((size_t)(w->n ? w->n : 1), sizeof *v);
    if (!v) {
        b->oom = 1;
        return;
    }
    int n = 0;
    for (int i = 0; i < w->n; i++)
        if (w->w[i]->has_metrics)
            v[n++] = (worker_metrics_view){w->w[i]->id, &w->w[i]->wm};
    worker_metrics_render(b, v, n, NULL);
    free(v);
}
