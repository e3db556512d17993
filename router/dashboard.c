/* The router's live dashboard: the page (router/dashboard.html, embedded at
 * build time) and the JSON it polls (GET /dashboard/state). Everything the
 * page shows comes from here: the pools as /metrics reports them, every
 * registered worker's load, and the autoscale loop's history and decisions
 * (router/autoscaler.h). Lock held by the caller. */
#include "router/router.h"

#include <math.h>
#include <string.h>
#include "common/sys.h"

/* router/embed_file.py output (build/gen/router/dashboard_html.c). */
extern const unsigned char tandem_dashboard_html[];
extern const unsigned long tandem_dashboard_html_len;

const char *dashboard_html(size_t *len)
{
    *len = (size_t)tandem_dashboard_html_len;
    return (const char *)tandem_dashboard_html;
}

static void json_num(sbuf *b, double v)
{
    if (isfinite(v))
        sb_printf(b, "%.6g", v);
    else
        sb_puts(b, "null");
}

/* Times (seconds since the router started) go out with microseconds, and
 * ?since= compares with half a microsecond of slack, so a point the page
 * has seen is never sent again because of rounding. */
static void json_time(sbuf *b, double t)
{
    sb_printf(b, "%.6f", t);
}

static int seen(double t, double since_s)
{
    return t <= since_s + 5e-7;
}

static void json_key_str(sbuf *b, const char *key, const char *v)
{
    sb_printf(b, "\"%s\":", key);
    sb_json_str(b, v, strlen(v));
}

static void pair(sbuf *b, const char *key, const int *v)
{
    sb_printf(b, "\"%s\":[%d,%d]", key, v[0], v[1]);
}

static void pools_json(router_ctx *ctx, sbuf *b)
{
    const autoscale_status *as = &ctx->as_status;
    const autoscale_config *pc = &ctx->cfg.as.policy;
    sb_puts(b, "\"pools\":{");
    for (int p = 0; p < AS_POOL_COUNT; p++) {
        int current, ready, draining;
        metrics_pool_sizes(&ctx->workers, as, p, &current, &ready, &draining);
        sb_printf(b, "%s\"%s\":{\"current\":%d,\"ready\":%d,\"draining\":%d,\"held\":%d,", p ? "," : "",
                  as_pool_name((as_pool)p), current, ready, draining, ctx->n_held[p]);
        if (as->enabled && as->evaluated)
            sb_printf(b, "\"desired\":%d,\"formula\":%d,", as->desired[p], as->formula[p]);
        else
            sb_puts(b, "\"desired\":null,\"formula\":null,");
        sb_printf(b, "\"min\":%d,\"max\":%d,\"actions_up\":%llu,\"actions_down\":%llu,"
                     "\"scaler_errors\":%llu,",
                  pc->pool[p].min_replicas, pc->pool[p].max_replicas,
                  (unsigned long long)as->actions[p][0], (unsigned long long)as->actions[p][1],
                  (unsigned long long)as->scaler_errors[p]);
        json_key_str(b, "reason", as->reason[p]);
        sb_puts(b, "}");
    }
    sb_puts(b, "}");
}

static void workers_json(router_ctx *ctx, sbuf *b)
{
    uint64_t now = tn_now_ms();
    sb_puts(b, "\"workers\":[");
    for (int i = 0; i < ctx->workers.n; i++) {
        const router_worker *w = ctx->workers.w[i];
        int pre = w->role == TANDEM__V1__WORKER_ROLE__WORKER_ROLE_PREFILLER;
        const worker_metrics *m = &w->wm;
        sb_puts(b, i ? ",{" : "{");
        json_key_str(b, "id", w->id);
        sb_printf(b, ",\"pool\":\"%s\",\"state\":\"%s\",", pre ? "prefill" : "decode",
                  w->draining ? "draining" : "serving");
        json_key_str(b, "model", w->model);
        sb_printf(b, ",\"in_flight\":%d,\"ms_since_heartbeat\":%llu,", w->in_flight,
                  (unsigned long long)(now > w->last_seen_ms ? now - w->last_seen_ms : 0));
        if (pre) {
            sb_printf(b, "\"queue_depth\":%u,\"queued_tokens\":%llu,\"input_tokens_total\":%llu,"
                         "\"busy_seconds_total\":",
                      m->prefill_queue_depth, (unsigned long long)w->assigned_input_tokens,
                      (unsigned long long)m->prefill_input_tokens);
            json_num(b, m->prefill_busy_s);
            sb_puts(b, ",\"input_tps\":");
            json_num(b, w->pload.input_tokens_per_s);
        } else {
            sb_printf(b, "\"batch\":%u,\"waiting\":%u,\"kv_used\":%u,\"kv_total\":%u,"
                         "\"output_tokens_total\":%llu,\"output_tps\":",
                      m->decode_batch_size, m->decode_waiting, m->kv_blocks_used,
                      m->kv_blocks_total, (unsigned long long)m->decode_output_tokens);
            json_num(b, w->dload.tokens_per_s);
        }
        sb_puts(b, "}");
    }
    sb_puts(b, "]");
}

/* Appends "name":[...] with one object {"t":...,...} per entry of a ring
 * (cap slots, n held, next the slot written next), oldest first, leaving
 * out those at or before since_s; t(as, i) is slot i's time and
 * members(as, i, b) writes the rest of its members, each after a comma. */
static void ring_json(const autoscale_status *as, sbuf *b, double since_s, const char *name,
                      int n, int next, int cap, double (*t)(const autoscale_status *, int),
                      void (*members)(const autoscale_status *, int, sbuf *))
{
    sb_printf(b, "\"%s\":[", name);
    int first = 1;
    for (int k = 0; k < n; k++) {
        int i = (next - n + k + cap) % cap;
        if (seen(t(as, i), since_s))
            continue;
        sb_puts(b, first ? "{\"t\":" : ",{\"t\":");
        first = 0;
        json_time(b, t(as, i));
        members(as, i, b);
        sb_puts(b, "}");
    }
    sb_puts(b, "]");
}

static double history_t(const autoscale_status *as, int i)
{
    return as->history[i].t;
}

static void history_members(const autoscale_status *as, int i, sbuf *b)
{
    const autoscale_sample *h = &as->history[i];
    sb_puts(b, ",");
    pair(b, "current", h->current);
    sb_puts(b, ",");
    pair(b, "desired", h->desired);
    sb_puts(b, ",");
    pair(b, "ready", h->ready);
    sb_puts(b, ",");
    pair(b, "draining", h->draining);
    sb_puts(b, ",\"input_tps\":");
    json_num(b, h->input_tps);
    sb_puts(b, ",\"served_tps\":");
    json_num(b, h->served_tps);
    sb_puts(b, ",\"demand_tps\":");
    json_num(b, h->demand_tps);
    sb_puts(b, ",\"tps_per_replica\":");
    json_num(b, h->tps_per_replica);
    sb_printf(b, ",\"decode_sequences\":%ld,\"mean_batch\":", h->decode_sequences);
    json_num(b, h->mean_batch);
    sb_puts(b, ",\"kv_occupancy\":");
    json_num(b, h->kv_occupancy);
    sb_printf(b, ",\"held\":%d", h->held);
}

static double event_t(const autoscale_status *as, int i)
{
    return as->events[i].t;
}

static void event_members(const autoscale_status *as, int i, sbuf *b)
{
    const autoscale_event *e = &as->events[i];
    sb_printf(b, ",\"pool\":\"%s\",\"from\":%d,\"to\":%d,", as_pool_name((as_pool)e->pool),
              e->from, e->to);
    json_key_str(b, "reason", e->reason);
}

void dashboard_state_json(router_ctx *ctx, sbuf *b, double since_s)
{
    const autoscale_status *as = &ctx->as_status;
    const router_metrics *m = &ctx->metrics;
    sb_puts(b, "{\"now\":");
    json_time(b, tn_now_s() - ctx->t_start);
    sb_puts(b, ",");
    json_key_str(b, "scaler", ctx->cfg.as.scaler);
    sb_printf(b, ",\"autoscaling\":%s,\"evaluated\":%s,\"interval_s\":",
              as->enabled ? "true" : "false", as->evaluated ? "true" : "false");
    json_num(b, ctx->cfg.as.interval_s);
    sb_printf(b, ",\"stopping\":%s,", ctx->stopping ? "true" : "false");
    pools_json(ctx, b);
    sb_printf(b, ",\"load\":{\"requests_in_flight\":%lld,\"input_tokens_total\":%llu,"
                 "\"output_tokens_total\":%llu,\"demand_tps\":",
              (long long)(m->in_flight[API_OPENAI] + m->in_flight[API_RPC]),
              (unsigned long long)m->input_tokens, (unsigned long long)m->output_tokens);
    json_num(b, as->evaluated ? as->demand_tps : 0);
    sb_puts(b, ",\"tps_per_replica\":");
    json_num(b, as->evaluated ? as->tps_per_replica : 0);
    sb_printf(b, ",\"decode_sequences\":%ld},", as->evaluated ? as->decode_sequences : 0L);
    workers_json(ctx, b);
    sb_puts(b, ",");
    ring_json(as, b, since_s, "history", as->n_history, as->history_next, AUTOSCALE_HISTORY,
              history_t, history_members);
    sb_puts(b, ",");
    ring_json(as, b, since_s, "events", as->n_events, as->events_next, AUTOSCALE_EVENTS,
              event_t, event_members);
    sb_puts(b, "}");
}
