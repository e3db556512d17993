/* tandem-servebench: the serving benchmark. Drives an OpenAI-compatible
 * server (a Tandem router, or any server that streams the same way) with
 * streaming requests at a fixed concurrency or a Poisson arrival rate, one
 * point or a sweep of points, and reports TTFT, TPOT, ITL and end-to-end
 * latency percentiles, throughput, goodput under an SLO, tokens/s per GPU
 * and cost per million tokens (docs/PERF.md, "Serving benchmark"): a table
 * on stdout, and on request JSON, an SVG plot of the sweep and a
 * per-request trace.
 *
 * The pieces: servebench_workload (requests), servebench_client (HTTP
 * streaming and per-request timestamps), servebench_stats (the metrics),
 * servebench_metrics (the cluster's stage timings from /metrics),
 * servebench_report (JSON, table, trace), servebench_svg (the plot).
 *
 * Exit status: 0 when every point ran and no request was lost or
 * malformed (with --require-ok: every sent request ok), 1 otherwise, 2 for
 * bad arguments. */
#include <curl/curl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/options.h"
#include "common/status.h"
#include "programs/servebench_client.h"
#include "programs/servebench_metrics.h"
#include "programs/servebench_report.h"
#include "programs/servebench_stats.h"
#include "programs/servebench_svg.h"
#include "programs/servebench_workload.h"

#define PROG "tandem-servebench"
#define MAX_POINTS 64

static const char *const INTRO =
    "Serving benchmark: streaming requests at a fixed concurrency (--concurrency, or a sweep\n"
    "--sweep-concurrency 1,4,16) or a Poisson arrival rate (--rate, --sweep-rate 0.5,1,2;\n"
    "--max-concurrency caps it),\n"
    "input/output lengths fixed (--input-len 1024), uniform (--input-len 100-200) or drawn\n"
    "from a file of length pairs (--lengths-file), token-id or text prompts, completions or\n"
    "chat. Reports TTFT, TPOT, ITL, E2E (p50/p90/p99), throughput, goodput under the\n"
    "--slo-* limits, tokens/s per GPU and $ per million tokens at --usd-per-gpu-hour.\n"
    "Definitions: docs/PERF.md, \"Serving benchmark\".";

typedef struct args {
    char url[512], model[128], api[16], prompt[16], input[32], output[32];
    char lengths_file[OPT_PATH_MAX], sweep_conc[512], sweep_rate[512];
    char json[OPT_PATH_MAX], trace[OPT_PATH_MAX], svg[OPT_PATH_MAX], label[128];
    char metrics_url[512], api_key_file[OPT_PATH_MAX];
    int vocab, requests, per_client, max_requests, concurrency, max_concurrency, timeout_s, seed,
        gpus;
    int require_ok;
    double rate, send_for_s, point_limit_s, settle_s, usd_per_gpu_hour;
    double slo_ttft_ms, slo_itl_ms, slo_tpot_ms, slo_e2e_ms;
} args;

/* "1,4,16" or "0.5,2" into loads[]; every item positive. */
static int parse_loads(const char *s, int integers, double *loads, int *n)
{
    *n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || !(v > 0) || !isfinite(v) || (integers && v != floor(v)) ||
            *n == MAX_POINTS || (*end && *end != ','))
            return -1;
        loads[(*n)++] = v;
        p = *end ? end + 1 : end;
        if (*end == ',' && !*p)
            return -1;
    }
    return *n > 0 ? 0 : -1;
}

static int read_key(const char *path, char *key, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(key, 1, cap - 1, f);
    fclose(f);
    key[n] = '\0';
    while (n > 0 && (key[n - 1] == '\n' || key[n - 1] == '\r' || key[n - 1] == ' '))
        key[--n] = '\0';
    return n > 0 ? 0 : -1;
}

/* Waits (at most settle_s) until the router reports no request in flight,
 * so that a point does not start while the last one's aborted requests are
 * still being cancelled. Returns 0 when settled. */
static int settle(const args *a, const char *auth)
{
    double waited = 0;
    for (;;) {
        char *page = NULL, err[256];
        if (svb_http_get(a->metrics_url, auth, &page, err, sizeof err) == TN_OK) {
            const char *k = strstr(page, "tandem_requests_in_flight{api=\"openai\"} ");
            int idle = k && atof(k + strlen("tandem_requests_in_flight{api=\"openai\"} ")) == 0;
            free(page);
            if (idle)
                return 0;
        }
        if (waited >= a->settle_s)
            return -1;
        usleep(200 * 1000);
        waited += 0.2;
    }
}

static int scrape(const args *a, const char *auth, svb_prom *out)
{
    char *page = NULL, err[256];
    if (svb_http_get(a->metrics_url, auth, &page, err, sizeof err) != TN_OK) {
        fprintf(stderr, PROG ": %s (no stage timings for this point)\n", err);
        return -1;
    }
    svb_prom_parse(page, out);
    free(page);
    return 0;
}

/* Reads /metrics until the workers' relayed counters include every
 * completed request of the point (their heartbeats carry them to the
 * router): its prefill and KV push, its prompt tokens prefilled, and every
 * output token but the prefiller's first decoded. At most --settle-s. */
static int caught_up(const args *a, const char *auth, const svb_prom *before,
                     const svb_record *recs, int n, svb_prom *after)
{
    double in = 0, out = 0, ok = 0;
    for (int i = 0; i < n; i++)
        if (recs[i].outcome == SVB_OK) {
            in += svb_input_tokens(&recs[i]);
            out += svb_output_tokens(&recs[i]) - 1;
            ok++;
        }
    for (double waited = 0;; waited += 0.2) {
        if (scrape(a, auth, after) != 0)
            return 0;
        /* a heartbeat can carry a prefill before its KV push ended */
        if (after->prefill_tokens - before->prefill_tokens >= in &&
            after->decode_tokens - before->decode_tokens >= out &&
            after->count[SVB_T_PREFILL] - before->count[SVB_T_PREFILL] >= ok &&
            after->count[SVB_T_KV_TRANSFER] - before->count[SVB_T_KV_TRANSFER] >= ok)
            return 1;
        if (waited >= a->settle_s) {
            fprintf(stderr, PROG ": the workers' metrics did not catch up within %g s: no stage "
                            "timings for this point\n", a->settle_s);
            return 0;
        }
        usleep(200 * 1000);
    }
}

/* One point: make the requests, run them, summarize. */
static int run_point(const args *a, const svb_workload_cfg *wbase, const svb_slo *slo,
                     const char *auth, int rate_mode, double load, int k, FILE *trace,
                     svb_point *pt, int *bad)
{
    svb_workload_cfg w = *wbase;
    int conc = rate_mode ? a->max_concurrency : (int)load;
    w.rate = rate_mode ? load : 0;
    w.n = a->requests > 0 ? a->requests : a->per_client * conc;
    if (a->max_requests > 0 && w.n > a->max_requests)
        w.n = a->max_requests;
    char err[512];
    svb_request *reqs = NULL;
    if (svb_workload_make(&w, &reqs, err, sizeof err) != TN_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        return -1;
    }
    svb_record *recs = calloc((size_t)w.n, sizeof *recs);
    if (!recs) {
        svb_workload_free(reqs, w.n);
        fprintf(stderr, PROG ": out of memory\n");
        return -1;
    }
    if (a->metrics_url[0] && settle(a, auth) != 0)
        fprintf(stderr, PROG ": the router still had requests in flight after %g s\n",
                a->settle_s);
    svb_prom before = {0}, after = {0};
    int have_before = a->metrics_url[0] && scrape(a, auth, &before) == 0;
    svb_client_cfg cc = {
        .url = a->url,
        .api = strcmp(a->api, "chat") == 0 ? SVB_API_CHAT : SVB_API_COMPLETIONS,
        .auth_header = auth,
        .concurrency = conc > 0 ? conc : w.n,
        .send_until_s = a->send_for_s,
        .stop_at_s = a->point_limit_s,
        .timeout_s = a->timeout_s,
    };
    double duration = 0;
    int rc = svb_client_run(&cc, reqs, w.n, recs, &duration, err, sizeof err);
    svb_workload_free(reqs, w.n);
    if (rc == TN_OK)
        rc = svb_summarize(recs, w.n, duration, slo, a->gpus, a->usd_per_gpu_hour, &pt->s, err,
                           sizeof err);
    if (rc != TN_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        svb_records_free(recs, w.n);
        return -1;
    }
    pt->load = load;
    if (have_before && settle(a, auth) == 0 && caught_up(a, auth, &before, recs, w.n, &after)) {
        svb_prom_means(&before, &after, pt->stage_mean_s, pt->stage_count);
        pt->have_stages = 1;
    }
    if (trace && svb_write_trace(trace, k, load, recs, w.n) != 0)
        fprintf(stderr, PROG ": cannot write the trace\n");
    for (int i = 0; i < w.n; i++) {
        svb_outcome o = recs[i].outcome;
        if (o == SVB_LOST || o == SVB_MALFORMED || o == SVB_HTTP_ERROR || o == SVB_STREAM_ERROR)
            fprintf(stderr, "point %d request %d: %s: %s\n", k, i, svb_outcome_names[o],
                    recs[i].why);
        if (o == SVB_LOST || o == SVB_MALFORMED ||
            (a->require_ok && o != SVB_OK && o != SVB_NOT_SENT))
            *bad = 1;
    }
    svb_records_free(recs, w.n);
    return 0;
}

int main(int argc, char **argv)
{
    args *a = calloc(1, sizeof *a);
    if (!a) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    snprintf(a->url, sizeof a->url, "http://127.0.0.1:8000");
    snprintf(a->api, sizeof a->api, "completions");
    snprintf(a->prompt, sizeof a->prompt, "ids");
    snprintf(a->input, sizeof a->input, "1024");
    snprintf(a->output, sizeof a->output, "128");
    a->vocab = 32000;
    a->per_client = 4;
    a->concurrency = 1;
    a->timeout_s = 600;
    a->seed = 1;
    a->gpus = 1;
    a->usd_per_gpu_hour = 3;
    a->settle_s = 30;
    const opt_spec specs[] = {
        {"url", OPT_STR, a->url, sizeof a->url, "the server's HTTP base URL"},
        {"model", OPT_STR, a->model, sizeof a->model, "model name; required"},
        {"api", OPT_STR, a->api, sizeof a->api, "completions or chat"},
        {"prompt", OPT_STR, a->prompt, sizeof a->prompt,
         "ids (random token ids; completions only) or text (random words)"},
        {"input-len", OPT_STR, a->input, sizeof a->input,
         "prompt length: N, or LO-HI (uniform); tokens for ids, words for text"},
        {"output-len", OPT_STR, a->output, sizeof a->output,
         "max_tokens: N or LO-HI (ignore_eos is set, so also the output length)"},
        {"lengths-file", OPT_STR, a->lengths_file, sizeof a->lengths_file,
         "draw (input, output) pairs from this file instead: 'INPUT OUTPUT' per line"},
        {"vocab", OPT_INT, &a->vocab, 0, "token-id prompts draw ids below this"},
        {"concurrency", OPT_INT, &a->concurrency, 0,
         "the load: this many requests in flight, a new one as soon as one ends"},
        {"rate", OPT_DOUBLE, &a->rate, 0,
         "the load instead: Poisson arrivals at this many requests/s (0: off)"},
        {"max-concurrency", OPT_INT, &a->max_concurrency, 0,
         "with a rate: requests in flight at most; later arrivals wait (0: no cap)"},
        {"sweep-concurrency", OPT_STR, a->sweep_conc, sizeof a->sweep_conc,
         "one point per concurrency in this list, e.g. 1,4,16,64"},
        {"sweep-rate", OPT_STR, a->sweep_rate, sizeof a->sweep_rate,
         "one point per request rate in this list, e.g. 0.5,1,2"},
        {"requests", OPT_INT, &a->requests, 0,
         "requests per point (0: --per-client x concurrency; required with a rate)"},
        {"per-client", OPT_INT, &a->per_client, 0, "requests per unit of concurrency"},
        {"max-requests", OPT_INT, &a->max_requests, 0, "cap on requests per point (0: none)"},
        {"send-for-s", OPT_DOUBLE, &a->send_for_s, 0,
         "start no request after this many seconds of a point (0: no bound)"},
        {"point-limit-s", OPT_DOUBLE, &a->point_limit_s, 0,
         "close what still runs after this many seconds of a point; those are 'aborted' "
         "and left out of the metrics (0: no bound)"},
        {"timeout-s", OPT_INT, &a->timeout_s, 0, "longest one request may take"},
        {"slo-ttft-ms", OPT_DOUBLE, &a->slo_ttft_ms, 0, "goodput: TTFT limit (0: none)"},
        {"slo-itl-ms", OPT_DOUBLE, &a->slo_itl_ms, 0,
         "goodput: limit on every inter-token gap of a request (0: none)"},
        {"slo-tpot-ms", OPT_DOUBLE, &a->slo_tpot_ms, 0, "goodput: TPOT limit (0: none)"},
        {"slo-e2e-ms", OPT_DOUBLE, &a->slo_e2e_ms, 0, "goodput: end-to-end limit (0: none)"},
        {"gpus", OPT_INT, &a->gpus, 0, "GPUs the server uses (tokens/s per GPU, cost)"},
        {"usd-per-gpu-hour", OPT_DOUBLE, &a->usd_per_gpu_hour, 0, "price of one GPU-hour"},
        {"json", OPT_STR, a->json, sizeof a->json, "write the JSON report here"},
        {"svg", OPT_STR, a->svg, sizeof a->svg, "write the plot of the points here"},
        {"trace", OPT_STR, a->trace, sizeof a->trace,
         "write one JSON line per request (timestamps, token counts) here"},
        {"label", OPT_STR, a->label, sizeof a->label, "a name for the run (report, plot)"},
        {"metrics-url", OPT_STR, a->metrics_url, sizeof a->metrics_url,
         "the router's /metrics: stage timings per point, and wait for an idle router "
         "between points"},
        {"settle-s", OPT_DOUBLE, &a->settle_s, 0,
         "longest wait for the router to be idle before a point (with --metrics-url)"},
        {"seed", OPT_INT, &a->seed, 0, "seed of the requests (lengths, prompts, arrivals)"},
        {"api-key-file", OPT_STR, a->api_key_file, sizeof a->api_key_file,
         "send 'Authorization: Bearer' with the key in this file"},
        {"require-ok", OPT_BOOL, &a->require_ok, 0, "fail unless every sent request is ok"},
    };
    const int n_specs = (int)(sizeof specs / sizeof *specs);
    opts_cli cli = {specs, n_specs, NULL, NULL, "option"};
    char err[512];
    int prc = opts_parse_cli(&cli, argc, argv, err, sizeof err);
    if (prc == OPTS_HELP) {
        opts_print_help(stdout, PROG, INTRO, specs, n_specs);
        free(a);
        return 0;
    }
    int rc = 2;
    svb_lengths lengths = {0};
    svb_range in_r = {0, 0}, out_r = {0, 0};
    double loads[MAX_POINTS];
    int n_loads = 1, rate_mode = a->rate > 0 || a->sweep_rate[0];
    if (prc != OPTS_OK) {
        rc = opts_usage_error(PROG, "%s", err);
        goto done;
    }
    if (!a->model[0]) {
        rc = opts_usage_error(PROG, "--model is required");
        goto done;
    }
    if (strcmp(a->api, "completions") != 0 && strcmp(a->api, "chat") != 0) {
        rc = opts_usage_error(PROG, "--api must be completions or chat");
        goto done;
    }
    if (strcmp(a->prompt, "ids") != 0 && strcmp(a->prompt, "text") != 0) {
        rc = opts_usage_error(PROG, "--prompt must be ids or text");
        goto done;
    }
    if (strcmp(a->api, "chat") == 0 && strcmp(a->prompt, "ids") == 0) {
        rc = opts_usage_error(PROG, "chat requests take text prompts: add --prompt text");
        goto done;
    }
    if (svb_range_parse(a->input, &in_r) != 0 || svb_range_parse(a->output, &out_r) != 0) {
        rc = opts_usage_error(PROG, "--input-len and --output-len take N or LO-HI (positive)");
        goto done;
    }
    if (a->sweep_conc[0] && (a->sweep_rate[0] || a->rate > 0)) {
        rc = opts_usage_error(PROG, "sweep either concurrency or rate, not both");
        goto done;
    }
    if (a->sweep_conc[0] && parse_loads(a->sweep_conc, 1, loads, &n_loads) != 0) {
        rc = opts_usage_error(PROG, "--sweep-concurrency takes up to %d positive integers, "
                                    "e.g. 1,4,16", MAX_POINTS);
        goto done;
    }
    if (a->sweep_rate[0] && parse_loads(a->sweep_rate, 0, loads, &n_loads) != 0) {
        rc = opts_usage_error(PROG, "--sweep-rate takes up to %d positive numbers, e.g. 0.5,1,2",
                              MAX_POINTS);
        goto done;
    }
    if (!a->sweep_conc[0] && !a->sweep_rate[0])
        loads[0] = rate_mode ? a->rate : a->concurrency;
    if (a->vocab < 1 || a->requests < 0 || a->per_client < 1 || a->max_requests < 0 ||
        a->max_concurrency < 0 || (!rate_mode && !a->sweep_conc[0] && a->concurrency < 1) ||
        a->rate < 0 || a->timeout_s < 1 || a->gpus < 1 || !(a->usd_per_gpu_hour >= 0) ||
        a->send_for_s < 0 || a->point_limit_s < 0 || a->settle_s < 0 || a->slo_ttft_ms < 0 ||
        a->slo_itl_ms < 0 || a->slo_tpot_ms < 0 || a->slo_e2e_ms < 0) {
        rc = opts_usage_error(PROG, "counts, limits and prices must be positive (or 0 where "
                                    "--help says 0 turns a bound off)");
        goto done;
    }
    if (rate_mode && a->requests == 0) {
        rc = opts_usage_error(PROG, "with a request rate, give --requests per point");
        goto done;
    }
    char key[512], auth[600];
    if (a->api_key_file[0]) {
        if (read_key(a->api_key_file, key, sizeof key) != 0) {
            rc = opts_usage_error(PROG, "cannot read a key from %s", a->api_key_file);
            goto done;
        }
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
    }
    if (a->lengths_file[0] && svb_lengths_load(a->lengths_file, &lengths, err, sizeof err) != 0) {
        rc = opts_usage_error(PROG, "%s", err);
        goto done;
    }
    rc = 1;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, PROG ": cannot initialise libcurl\n");
        goto done;
    }
    FILE *trace = NULL;
    if (a->trace[0] && !(trace = fopen(a->trace, "w"))) {
        fprintf(stderr, PROG ": cannot write %s\n", a->trace);
        curl_global_cleanup();
        goto done;
    }
    svb_workload_cfg w = {
        .model = a->model,
        .api = strcmp(a->api, "chat") == 0 ? SVB_API_CHAT : SVB_API_COMPLETIONS,
        .prompt = strcmp(a->prompt, "text") == 0 ? SVB_PROMPT_TEXT : SVB_PROMPT_IDS,
        .input = in_r,
        .output = out_r,
        .lengths = a->lengths_file[0] ? &lengths : NULL,
        .vocab = a->vocab,
        .seed = (uint64_t)a->seed,
    };
    svb_slo slo = {a->slo_ttft_ms / 1e3, a->slo_itl_ms / 1e3, a->slo_tpot_ms / 1e3,
                   a->slo_e2e_ms / 1e3};
    svb_run_info info = {
        .label = a->label, .url = a->url, .model = a->model, .api = a->api,
        .prompt = a->prompt, .input = a->input, .output = a->output,
        .lengths_file = a->lengths_file, .load_kind = rate_mode ? "rate" : "concurrency",
        .concurrency = rate_mode ? a->max_concurrency : 0, .seed = (unsigned long long)a->seed,
        .slo = slo, .send_for_s = a->send_for_s, .point_limit_s = a->point_limit_s,
    };
    const char *auth_hdr = a->api_key_file[0] ? auth : NULL;
    svb_point pts[MAX_POINTS];
    memset(pts, 0, sizeof pts);
    int bad = 0, ran = 0;
    for (int k = 0; k < n_loads; k++) {
        if (run_point(a, &w, &slo, auth_hdr, rate_mode, loads[k], k, trace, &pts[k], &bad) != 0)
            break;
        ran++;
        const svb_summary *s = &pts[k].s;
        fprintf(stderr, PROG ": %s %g: %d of %d ok (%d aborted, %d not sent), %.1f s\n",
                info.load_kind, loads[k], s->counts[SVB_OK], s->requests, s->counts[SVB_ABORTED],
                s->counts[SVB_NOT_SENT], s->duration_s);
    }
    if (trace && fclose(trace) != 0) {
        fprintf(stderr, PROG ": cannot write %s\n", a->trace);
        bad = 1;
    }
    curl_global_cleanup();
    printf("%s: %s %s, %s prompts, input %s, output %s, %d GPU(s) at $%g/h%s%s\n", PROG,
           a->model, a->api, a->prompt, a->lengths_file[0] ? "(file)" : a->input,
           a->lengths_file[0] ? "(file)" : a->output, a->gpus, a->usd_per_gpu_hour,
           a->label[0] ? ", " : "", a->label);
    svb_print_table(stdout, &info, pts, ran);
    int wrote = 0;
    if (a->json[0] && svb_write_json(a->json, &info, pts, ran, err, sizeof err) != TN_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        wrote = -1;
    }
    if (a->svg[0] && svb_write_svg(a->svg, &info, pts, ran, err, sizeof err) != TN_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        wrote = -1;
    }
    rc = ran == n_loads && !bad && wrote == 0 ? 0 : 1;
done:
    svb_lengths_free(&lengths);
    free(a);
    return rc;
}
