#include "programs/servebench_report.h"
#include <cJSON.h>
#include <errno.h>
#include <string.h>
#include "common/status.h"

static void add_dist(cJSON *o, const char *name, const svb_dist *d)
{
    cJSON *j = cJSON_AddObjectToObject(o, name);
    if (!j)
        return;
    cJSON_AddNumberToObject(j, "n", (double)d->n);
    cJSON_AddNumberToObject(j, "mean", d->mean * 1e3);
    cJSON_AddNumberToObject(j, "p50", d->p50 * 1e3);
    cJSON_AddNumberToObject(j, "p90", d->p90 * 1e3);
    cJSON_AddNumberToObject(j, "p99", d->p99 * 1e3);
    cJSON_AddNumberToObject(j, "max", d->max * 1e3);
}

static void add_str(cJSON *o, const char *name, const char *v)
{
    if (v && v[0])
        cJSON_AddStringToObject(o, name, v);
    else
        cJSON_AddNullToObject(o, name);
}

static cJSON *point_json(const svb_run_info *info, const svb_point *p)
{
    const svb_summary *s = &p->s;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, info->load_kind, p->load);
    cJSON_AddNumberToObject(o, "requests", s->requests);
    cJSON *oc = cJSON_AddObjectToObject(o, "outcomes");
    for (int k = 0; oc && k < SVB_N_OUTCOMES; k++)
        cJSON_AddNumberToObject(oc, svb_outcome_names[k], s->counts[k]);
    cJSON_AddNumberToObject(o, "completed", s->counts[SVB_OK]);
    cJSON_AddNumberToObject(o, "duration_s", s->duration_s);
    cJSON_AddNumberToObject(o, "input_tokens", (double)s->input_tokens);
    cJSON_AddNumberToObject(o, "output_tokens", (double)s->output_tokens);
    cJSON_AddNumberToObject(o, "request_throughput", s->req_per_s);
    cJSON_AddNumberToObject(o, "input_token_throughput", s->input_tok_per_s);
    cJSON_AddNumberToObject(o, "output_token_throughput", s->output_tok_per_s);
    cJSON_AddNumberToObject(o, "total_token_throughput", s->total_tok_per_s);
    cJSON_AddNumberToObject(o, "good_requests", s->good);
    cJSON_AddNumberToObject(o, "request_goodput", s->goodput_req_per_s);
    add_dist(o, "ttft_ms", &s->ttft);
    add_dist(o, "tpot_ms", &s->tpot);
    add_dist(o, "itl_ms", &s->itl);
    add_dist(o, "e2e_ms", &s->e2e);
    add_dist(o, "ttft_streamed_ms", &s->ttft_streamed);
    add_dist(o, "itl_streamed_ms", &s->itl_streamed);
    cJSON_AddNumberToObject(o, "streamed_output_tokens", (double)s->streamed_tokens);
    cJSON_AddNumberToObject(o, "streamed_output_token_throughput", s->streamed_tok_per_s);
    cJSON_AddNumberToObject(o, "gpus", s->gpus);
    cJSON_AddNumberToObject(o, "output_tokens_per_s_per_gpu", s->output_tok_per_s_per_gpu);
    cJSON_AddNumberToObject(o, "total_tokens_per_s_per_gpu", s->total_tok_per_s_per_gpu);
    cJSON_AddNumberToObject(o, "usd_per_gpu_hour", s->usd_per_gpu_hour);
    cJSON_AddNumberToObject(o, "usd_per_million_input_tokens", s->usd_per_m_input);
    cJSON_AddNumberToObject(o, "usd_per_million_output_tokens", s->usd_per_m_output);
    cJSON_AddNumberToObject(o, "usd_per_million_total_tokens", s->usd_per_m_total);
    if (p->have_stages) {
        cJSON *b = cJSON_AddObjectToObject(o, "stages_mean_ms");
        cJSON *c = cJSON_AddObjectToObject(o, "stages_count");
        for (int t = 0; b && c && t < SVB_N_TIMINGS; t++) {
            cJSON_AddNumberToObject(b, svb_timing_names[t], p->stage_mean_s[t] * 1e3);
            cJSON_AddNumberToObject(c, svb_timing_names[t], p->stage_count[t]);
        }
    }
    return o;
}

int svb_write_json(const char *path, const svb_run_info *info, const svb_point *pts, int n,
                   char *err, size_t errlen)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *cfg = cJSON_AddObjectToObject(root, "config");
    cJSON *arr = cJSON_AddArrayToObject(root, "points");
    if (!root || !cfg || !arr) {
        cJSON_Delete(root);
        return tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory for the JSON report");
    }
    cJSON_AddStringToObject(root, "tool", "tandem-servebench");
    add_str(root, "label", info->label);
    add_str(cfg, "url", info->url);
    add_str(cfg, "model", info->model);
    add_str(cfg, "api", info->api);
    add_str(cfg, "prompt", info->prompt);
    add_str(cfg, "input_len", info->lengths_file && info->lengths_file[0] ? NULL : info->input);
    add_str(cfg, "output_len", info->lengths_file && info->lengths_file[0] ? NULL : info->output);
    add_str(cfg, "lengths_file", info->lengths_file);
    add_str(cfg, "load", info->load_kind);
    cJSON_AddNumberToObject(cfg, "max_concurrency", info->concurrency);
    cJSON_AddNumberToObject(cfg, "seed", (double)info->seed);
    cJSON_AddNumberToObject(cfg, "send_for_s", info->send_for_s);
    cJSON_AddNumberToObject(cfg, "point_limit_s", info->point_limit_s);
    cJSON *slo = cJSON_AddObjectToObject(cfg, "slo_ms");
    if (slo) {
        cJSON_AddNumberToObject(slo, "ttft", info->slo.ttft_s * 1e3);
        cJSON_AddNumberToObject(slo, "itl", info->slo.itl_s * 1e3);
        cJSON_AddNumberToObject(slo, "tpot", info->slo.tpot_s * 1e3);
        cJSON_AddNumberToObject(slo, "e2e", info->slo.e2e_s * 1e3);
    }
    for (int i = 0; i < n; i++) {
        cJSON *p = point_json(info, &pts[i]);
        if (!p || !cJSON_AddItemToArray(arr, p)) {
            cJSON_Delete(p);
            cJSON_Delete(root);
            return tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory for the JSON report");
        }
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory for the JSON report");
    FILE *f = fopen(path, "w");
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f) != 0)
        ok = 0;
    cJSON_free(text);
    if (!ok)
        return tn_fail(err, errlen, TN_ERR_SYS, "cannot write %s: %s", path, strerror(errno));
    return TN_OK;
}

void svb_print_table(FILE *f, const svb_run_info *info, const svb_point *pts, int n)
{
    fprintf(f, "%-6s %9s %7s %8s %9s %23s %15s %15s %17s %8s %9s %8s %8s\n",
            strcmp(info->load_kind, "rate") == 0 ? "rate" : "conc", "ok/sent", "req/s",
            "out tok/s", "tot tok/s", "TTFT p50/p90/p99 ms", "TPOT p50/p99", "ITL p50/p99",
            "E2E p50/p99 s", "goodput", "tok/s/GPU", "$/M in", "$/M out");
    for (int i = 0; i < n; i++) {
        const svb_summary *s = &pts[i].s;
        char ok[32], ttft[48], tpot[32], itl[32], e2e[32];
        snprintf(ok, sizeof ok, "%d/%d", s->counts[SVB_OK],
                 s->requests - s->counts[SVB_NOT_SENT]);
        snprintf(ttft, sizeof ttft, "%.1f/%.1f/%.1f", s->ttft.p50 * 1e3, s->ttft.p90 * 1e3,
                 s->ttft.p99 * 1e3);
        snprintf(tpot, sizeof tpot, "%.2f/%.2f", s->tpot.p50 * 1e3, s->tpot.p99 * 1e3);
        snprintf(itl, sizeof itl, "%.2f/%.2f", s->itl.p50 * 1e3, s->itl.p99 * 1e3);
        snprintf(e2e, sizeof e2e, "%.2f/%.2f", s->e2e.p50, s->e2e.p99);
        fprintf(f, "%-6g %9s %7.2f %8.1f %9.1f %23s %15s %15s %17s %8.2f %9.1f %8.3f %8.3f\n",
                pts[i].load, ok, s->req_per_s, s->output_tok_per_s, s->total_tok_per_s, ttft,
                tpot, itl, e2e, s->goodput_req_per_s, s->total_tok_per_s_per_gpu,
                s->usd_per_m_input, s->usd_per_m_output);
    }
    int any = 0;
    for (int i = 0; i < n; i++)
        any |= pts[i].have_stages;
    if (!any)
        return;
    fprintf(f, "where the time goes (means per request from the router's /metrics, ms; "
               "router + admission + prefill queue + prefill + KV transfer = router TTFT):\n");
    fprintf(f, "%-6s %11s %11s %9s %9s %9s %9s %9s %9s %9s %9s\n",
            strcmp(info->load_kind, "rate") == 0 ? "rate" : "conc", "client TTFT", "router TTFT",
            "router", "admission", "pf queue", "prefill", "KV xfer", "1st dec", "dec step",
            "rtr ITL");
    for (int i = 0; i < n; i++) {
        const double *m = pts[i].stage_mean_s;
        if (!pts[i].have_stages)
            continue;
        fprintf(f, "%-6g %11.2f %11.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f\n",
                pts[i].load, pts[i].s.ttft.mean * 1e3, m[SVB_T_ROUTER_TTFT] * 1e3,
                m[SVB_T_S_ROUTER] * 1e3, m[SVB_T_S_ADMISSION] * 1e3,
                m[SVB_T_S_PREFILL_QUEUE] * 1e3, m[SVB_T_S_PREFILL] * 1e3,
                m[SVB_T_S_KV_TRANSFER] * 1e3, m[SVB_T_S_FIRST_DECODE] * 1e3,
                m[SVB_T_DECODE_STEP] * 1e3, m[SVB_T_ROUTER_ITL] * 1e3);
    }
}

int svb_write_trace(FILE *f, int k, double load, const svb_record *recs, int n)
{
    for (int i = 0; i < n; i++) {
        const svb_record *r = &recs[i];
        fprintf(f,
                "{\"point\":%d,\"load\":%g,\"request\":%d,\"outcome\":\"%s\",\"input_len\":%d,"
                "\"output_len\":%d,\"prompt_tokens\":%d,\"completion_tokens\":%d,"
                "\"token_ids\":%d,\"t_send\":%.9f,\"t_end\":%.9f,\"chunks\":[",
                k, load, i, svb_outcome_names[r->outcome], r->input_len, r->output_len,
                r->prompt_tokens, r->usage_tokens, r->id_tokens, r->t_send, r->t_end);
        for (int c = 0; c < r->n_chunks; c++)
            fprintf(f, c ? ",%.9f" : "%.9f", r->chunk_t[c]);
        fputs("]}\n", f);
    }
    return ferror(f) ? -1 : 0;
}
