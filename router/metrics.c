#include "router/metrics.h"

#include <string.h>
#include "proto/tandem.pb-c.h"

/* Buckets exactly as docs/METRICS.md gives them. */
static const double TTFT_BOUNDS[] = {0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double ITL_BOUNDS[] = {0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1};
static const double DURATION_BOUNDS[] = {0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
static const char *const API_NAMES[API_COUNT] = {"openai", "rpc"};
static const char *const OUTCOME_NAMES[OUTCOME_COUNT] = {
    "ok", "client_error", "rejected", "cancelled", "timeout", "error"};

static void histogram_init(histogram *h, const double *bounds, int n)
{
    memset(h, 0, sizeof *h);
    h->bounds = bounds;
    h->n_bounds = n;
}

void metrics_init(router_metrics *m)
{
    memset(m, 0, sizeof *m);
    histogram_init(&m->ttft, TTFT_BOUNDS, (int)(sizeof TTFT_BOUNDS / sizeof *TTFT_BOUNDS));
    histogram_init(&m->itl, ITL_BOUNDS, (int)(sizeof ITL_BOUNDS / sizeof *ITL_BOUNDS));
    histogram_init(&m->duration, DURATION_BOUNDS,
                   (int)(sizeof DURATION_BOUNDS / sizeof *DURATION_BOUNDS));
}

void metrics_observe(histogram *h, double seconds)
{
    int i = 0;
    while (i < h->n_bounds && seconds > h->bounds[i])
        i++;
    h->counts[i]++;
    h->sum += seconds;
    h->count++;
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

static void render_histogram(sbuf *b, const char *name, const char *help, const histogram *h)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        sb_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i], (unsigned long long)cum);
    }
    cum += h->counts[h->n_bounds];
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

static int is_prefiller(const router_worker *w)
{
    return w->role == TANDEM__V1__WORKER_ROLE__WORKER_ROLE_PREFILLER;
}

static void worker_sample(sbuf *b, const char *name, const router_worker *w, double v)
{
    sb_printf(b, "%s{pool=\"%s\",worker=\"", name, is_prefiller(w) ? "prefill" : "decode");
    label_value(b, w->id);
    sb_printf(b, "\"} %.9g\n", v);
}

enum { ROLE_ANY, ROLE_PRE, ROLE_DEC };

typedef struct worker_series {
    const char *name, *type, *help;
    int role;
    int field;
} worker_series;

static double worker_value(const router_worker *w, int field)
{
    double total = w->dload.kv_pages_total ? (double)w->dload.kv_pages_total : (double)w->kv_pages_total;
    double used = total - w->dload.kv_pages_free;
    switch (field) {
    case 0: return 1;
    case 1: return (double)w->pload.queued_requests;
    case 2: return (double)w->pload.input_tokens_total;
    case 3: return (double)w->dload.batch_size;
    case 4: return (double)w->dload.waiting;
    case 5: return (double)w->dload.tokens_total;
    case 6: return used;
    case 7: return total;
    case 8: return total > 0 ? used / total : 0;
    default: return 0;
    }
}

void metrics_render(sbuf *b, const router_metrics *m, const worker_registry *w)
{
    sb_puts(b, "# HELP tandem_requests_total Requests finished, by API and outcome.\n"
               "# TYPE tandem_requests_total counter\n");
    for (int a = 0; a < API_COUNT; a++)
        for (int o = 0; o < OUTCOME_COUNT; o++)
            sb_printf(b, "tandem_requests_total{api=\"%s\",outcome=\"%s\"} %llu\n", API_NAMES[a],
                      OUTCOME_NAMES[o], (unsigned long long)m->requests[a][o]);
    sb_puts(b, "# HELP tandem_requests_in_flight Requests accepted and not finished.\n"
               "# TYPE tandem_requests_in_flight gauge\n");
    for (int a = 0; a < API_COUNT; a++)
        sb_printf(b, "tandem_requests_in_flight{api=\"%s\"} %lld\n", API_NAMES[a],
                  (long long)m->in_flight[a]);
    sb_printf(b, "# HELP tandem_input_tokens_total Prompt tokens of requests arriving at the router.\n"
                 "# TYPE tandem_input_tokens_total counter\ntandem_input_tokens_total %llu\n"
                 "# HELP tandem_output_tokens_total Tokens streamed to clients.\n"
                 "# TYPE tandem_output_tokens_total counter\ntandem_output_tokens_total %llu\n",
              (unsigned long long)m->input_tokens, (unsigned long long)m->output_tokens);
    render_histogram(b, "tandem_time_to_first_token_seconds",
                     "Request arrival to the first token.", &m->ttft);
    render_histogram(b, "tandem_inter_token_latency_seconds",
                     "Gap between consecutive tokens of one request.", &m->itl);
    render_histogram(b, "tandem_request_duration_seconds", "Request arrival to its last token.",
                     &m->duration);
    sb_puts(b, "# HELP tandem_build_info Always 1.\n# TYPE tandem_build_info gauge\n"
               "tandem_build_info{process=\"router\",version=\"0.1\"} 1\n");
    static const worker_series series[] = {
        {"tandem_worker_up", "gauge", "1 while the worker is registered and heartbeating.", ROLE_ANY, 0},
        {"tandem_prefill_queue_depth", "gauge", "Requests queued at this prefiller (heartbeat).", ROLE_PRE, 1},
        {"tandem_prefill_input_tokens_total", "counter", "Prompt tokens prefilled (heartbeat).", ROLE_PRE, 2},
        {"tandem_decode_batch_size", "gauge", "Running sequences (heartbeat).", ROLE_DEC, 3},
        {"tandem_decode_waiting_sequences", "gauge",
         "Requests waiting for KV room (admission) at this decoder (heartbeat).", ROLE_DEC, 4},
        {"tandem_decode_output_tokens_total", "counter", "Tokens generated (heartbeat).", ROLE_DEC, 5},
        {"tandem_kv_cache_blocks_used", "gauge", "KV pages in use or promised (heartbeat).", ROLE_DEC, 6},
        {"tandem_kv_cache_blocks_total", "gauge", "KV pages (heartbeat).", ROLE_DEC, 7},
        {"tandem_kv_cache_occupancy_ratio", "gauge", "Used over total KV pages.", ROLE_DEC, 8},
    };
    for (size_t s = 0; s < sizeof series / sizeof *series; s++) {
        sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", series[s].name, series[s].help, series[s].name,
                  series[s].type);
        for (int i = 0; i < w->n; i++) {
            const router_worker *x = w->w[i];
            if ((series[s].role == ROLE_PRE && !is_prefiller(x)) ||
                (series[s].role == ROLE_DEC && is_prefiller(x)))
                continue;
            worker_sample(b, series[s].name, x, worker_value(x, series[s].field));
        }
    }
}
