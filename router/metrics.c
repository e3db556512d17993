#include "router/metrics.h"

#include <string.h>
#include "proto/tandem.pb-c.h"

/* Latency buckets (seconds): from a CPU tiny-model token to a long prefill. */
static const double bucket_bounds[METRICS_BUCKETS] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const int http_codes[METRICS_HTTP_CODES] = {200, 400, 404, 405, 413, 429, 500, 503, 0};
static const char *const finish_names[METRICS_FINISH] = {
    "none", "length", "stop", "stop_string", "cancelled", "error"};

void metrics_init(router_metrics *m)
{
    memset(m, 0, sizeof *m);
}

void metrics_observe(histogram *h, double seconds)
{
    int i = 0;
    while (i < METRICS_BUCKETS && seconds > bucket_bounds[i])
        i++;
    h->counts[i]++;
    h->sum += seconds;
    h->count++;
}

void metrics_http_status(router_metrics *m, int status)
{
    int i = 0;
    while (i < METRICS_HTTP_CODES - 1 && http_codes[i] != status)
        i++;
    m->http_responses[i]++;
}

static void render_histogram(sbuf *b, const char *name, const char *help, const histogram *h)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < METRICS_BUCKETS; i++) {
        cum += h->counts[i];
        sb_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, bucket_bounds[i], (unsigned long long)cum);
    }
    cum += h->counts[METRICS_BUCKETS];
    sb_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name,
              (unsigned long long)cum, name, h->sum, name, (unsigned long long)h->count);
}

static void label_value(sbuf *b, const char *s)
{
    /* Prometheus label values escape backslash, quote and newline. */
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            sb_printf(b, "\\%c", *s);
        else if (*s == '\n')
            sb_puts(b, "\\n");
        else
            sb_append(b, s, 1);
    }
}

static void worker_gauge(sbuf *b, const char *name, const router_worker *w, double v)
{
    sb_printf(b, "%s{worker=\"", name);
    label_value(b, w->id);
    sb_puts(b, "\",model=\"");
    label_value(b, w->model);
    sb_printf(b, "\"} %.9g\n", v);
}

typedef struct gauge_def {
    const char *name, *help;
    int role;
    int field;
} gauge_def;

static double gauge_value(const router_worker *w, int field)
{
    switch (field) {
    case 0: return (double)w->pload.queued_input_tokens;
    case 1: return w->pload.input_tokens_per_s;
    case 2: return (double)w->pload.input_tokens_total;
    case 3: return (double)w->dload.batch_size;
    case 4: return (double)w->dload.waiting;
    case 5: return (double)w->dload.kv_pages_free;
    case 6: return (double)w->dload.kv_pages_total;
    case 7: return w->dload.tokens_per_s;
    case 8: return (double)w->dload.tokens_total;
    case 9: return (double)w->in_flight;
    default: return 0;
    }
}

void metrics_render(sbuf *b, const router_metrics *m, const worker_registry *w,
                    int active_requests)
{
    sb_printf(b, "# HELP tandem_requests_total Requests accepted by the router.\n"
                 "# TYPE tandem_requests_total counter\ntandem_requests_total %llu\n",
              (unsigned long long)m->requests_total);
    sb_puts(b, "# HELP tandem_requests_finished_total Requests finished, by reason.\n"
               "# TYPE tandem_requests_finished_total counter\n");
    for (int i = 1; i < METRICS_FINISH; i++)
        sb_printf(b, "tandem_requests_finished_total{reason=\"%s\"} %llu\n", finish_names[i],
                  (unsigned long long)m->finished[i]);
    sb_printf(b, "# HELP tandem_requests_active Requests in flight.\n"
                 "# TYPE tandem_requests_active gauge\ntandem_requests_active %d\n",
              active_requests);
    sb_puts(b, "# HELP tandem_http_responses_total HTTP responses, by status code.\n"
               "# TYPE tandem_http_responses_total counter\n");
    for (int i = 0; i < METRICS_HTTP_CODES; i++) {
        if (http_codes[i])
            sb_printf(b, "tandem_http_responses_total{code=\"%d\"} %llu\n", http_codes[i],
                      (unsigned long long)m->http_responses[i]);
        else
            sb_printf(b, "tandem_http_responses_total{code=\"other\"} %llu\n",
                      (unsigned long long)m->http_responses[i]);
    }
    sb_printf(b, "# HELP tandem_prompt_tokens_total Prompt tokens of accepted requests.\n"
                 "# TYPE tandem_prompt_tokens_total counter\ntandem_prompt_tokens_total %llu\n"
                 "# HELP tandem_generation_tokens_total Tokens generated.\n"
                 "# TYPE tandem_generation_tokens_total counter\ntandem_generation_tokens_total %llu\n"
                 "# HELP tandem_workers_expired_total Workers dropped after missing heartbeats.\n"
                 "# TYPE tandem_workers_expired_total counter\ntandem_workers_expired_total %llu\n",
              (unsigned long long)m->prompt_tokens, (unsigned long long)m->generated_tokens,
              (unsigned long long)m->workers_expired);
    render_histogram(b, "tandem_time_to_first_token_seconds",
                     "Seconds from acceptance to the first token.", &m->ttft);
    render_histogram(b, "tandem_request_duration_seconds",
                     "Seconds from acceptance to the end of the request.", &m->e2e);

    int n_pre = 0, n_dec = 0;
    for (int i = 0; i < w->n; i++) {
        n_pre += w->w[i]->role == TANDEM__V1__WORKER_ROLE__WORKER_ROLE_PREFILLER;
        n_dec += w->w[i]->role == TANDEM__V1__WORKER_ROLE__WORKER_ROLE_DECODER;
    }
    sb_printf(b, "# HELP tandem_workers Registered workers, by role.\n# TYPE tandem_workers gauge\n"
                 "tandem_workers{role=\"prefiller\"} %d\ntandem_workers{role=\"decoder\"} %d\n",
              n_pre, n_dec);
    const int P = TANDEM__V1__WORKER_ROLE__WORKER_ROLE_PREFILLER;
    const int D = TANDEM__V1__WORKER_ROLE__WORKER_ROLE_DECODER;
    static const gauge_def defs[] = {
        {"tandem_prefiller_queued_input_tokens", "Prompt tokens queued at the prefiller.", 1, 0},
        {"tandem_prefiller_input_tokens_per_second", "Prefill throughput over the last heartbeat.", 1, 1},
        {"tandem_prefiller_input_tokens", "Prompt tokens prefilled since start.", 1, 2},
        {"tandem_decoder_batch_size", "Sequences in the decoder's running batch.", 2, 3},
        {"tandem_decoder_waiting_requests", "Requests waiting for KV room.", 2, 4},
        {"tandem_decoder_kv_pages_free", "Free KV pages.", 2, 5},
        {"tandem_decoder_kv_pages_total", "KV pages.", 2, 6},
        {"tandem_decoder_tokens_per_second", "Decode throughput over the last heartbeat.", 2, 7},
        {"tandem_decoder_tokens", "Tokens generated since start.", 2, 8},
        {"tandem_worker_requests_in_flight", "Requests the router has placed on the worker.", 0, 9},
    };
    for (size_t d = 0; d < sizeof defs / sizeof *defs; d++) {
        sb_printf(b, "# HELP %s %s\n# TYPE %s gauge\n", defs[d].name, defs[d].help, defs[d].name);
        for (int i = 0; i < w->n; i++) {
            const router_worker *x = w->w[i];
            if ((defs[d].role == 1 && x->role != P) || (defs[d].role == 2 && x->role != D))
                continue;
            worker_gauge(b, defs[d].name, x, gauge_value(x, defs[d].field));
        }
    }
}
