/* tandem-router's settings: defaults, flags, config file, checks. One table,
 * so `--name value`, `--name=value` and a config file's `name = value`
 * (deploy/base/router.conf) accept the same names; the autoscale policy's
 * flags (autoscale_config_set_flag) join through the extra setter. */
#include "router/router.h"
#include "common/status.h"

#include <stdio.h>
#include <string.h>
#include "common/options.h"

void router_config_default(router_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->host, sizeof c->host, "127.0.0.1");
    c->http_port = 8000;
    c->worker_port = 5555;
    c->rpc_port = 5556;
    snprintf(c->tokenizer, sizeof c->tokenizer, "none");
    c->heartbeat_ms = 500;
    c->worker_timeout_ms = 5000;
    c->default_max_tokens = 16;
    c->chat_default_max_tokens = 0; /* the model's remaining context, as OpenAI's */
    c->max_body_bytes = 16 << 20;
    c->max_active_requests = 1024;
    c->metrics_port = -1;
    /* On by default: a request that finds no worker of a role (a replacement
     * still starting, every worker draining) waits for one instead of
     * failing at once. */
    c->queue_timeout_ms = 30000;
    c->progress_timeout_ms = 0;
    c->drain_timeout_ms = 30000;
    c->http_max_connections = 8192;
    c->http_idle_timeout_ms = 60000;
    c->http_request_timeout_ms = 60000;
    c->http_memory_budget_mb = 1024;
    autoscaler_config_default(&c->as);
}

#define MAX_SPECS 48

static int build_specs(router_config *c, opt_spec *s)
{
    autoscaler_config *a = &c->as;
    const opt_spec specs[] = {
        {"host", OPT_STR, c->host, sizeof c->host, "IPv4 address every socket binds"},
        {"http-port", OPT_INT, &c->http_port, 0, "HTTP API port (0: any free port)"},
        {"worker-port", OPT_INT, &c->worker_port, 0, "port workers register on (0: any)"},
        {"rpc-port", OPT_INT, &c->rpc_port, 0, "RPC API port (0: any)"},
        {"metrics-port", OPT_INT, &c->metrics_port, 0,
         "also serve /metrics, /healthz and /dashboard on this port (-1: only on the HTTP port; 0: any)"},
        {"port-file", OPT_STR, c->port_file, sizeof c->port_file,
         "write the bound ports to this file"},
        {"tokenizer", OPT_STR, c->tokenizer, sizeof c->tokenizer,
         "none (token ids only), bytes (UTF-8 bytes as ids), or a vocabulary: tokenizer.json / o200k_base.tiktoken path; see docs/API.md"},
        {"heartbeat-ms", OPT_INT, &c->heartbeat_ms, 0, "heartbeat interval workers are told"},
        {"worker-timeout-ms", OPT_INT, &c->worker_timeout_ms, 0,
         "drop a worker silent this long, failing its requests"},
        {"default-max-tokens", OPT_INT, &c->default_max_tokens, 0,
         "max_tokens of completions that give none"},
        {"chat-default-max-tokens", OPT_INT, &c->chat_default_max_tokens, 0,
         "max_tokens of chat completions that give none (0: the model's context minus the "
         "prompt, as OpenAI does; decoders admit by use, so this reserves nothing)"},
        {"max-body-bytes", OPT_INT, &c->max_body_bytes, 0, "largest accepted HTTP body"},
        {"max-active-requests", OPT_INT, &c->max_active_requests, 0,
         "requests in flight before HTTP 429"},
        {"http-max-connections", OPT_INT, &c->http_max_connections, 0,
         "client connections the API port holds; at the limit a new one closes the one idle the longest"},
        {"http-idle-timeout-ms", OPT_INT, &c->http_idle_timeout_ms, 0,
         "close an API connection with no request in progress after this long without a byte"},
        {"http-request-timeout-ms", OPT_INT, &c->http_request_timeout_ms, 0,
         "close an API connection whose request head and body take longer than this to arrive"},
        {"http-memory-budget-mb", OPT_INT, &c->http_memory_budget_mb, 0,
         "memory for HTTP request bodies and their parse, all requests together; beyond it 503 with Retry-After"},
        {"queue-timeout-ms", OPT_INT, &c->queue_timeout_ms, 0,
         "hold a request no worker can take yet (none registered, all draining) this long before 503 (0: refuse at once)"},
        {"progress-timeout-ms", OPT_INT, &c->progress_timeout_ms, 0,
         "place a request again when its worker moved nothing (no reservation, first token or "
         "token batch from it) this long (0: 2 x --worker-timeout-ms + 30000, the prefillers' "
         "default --transfer-timeout-ms)"},
        {"drain-timeout-ms", OPT_INT, &c->drain_timeout_ms, 0,
         "on SIGTERM, new requests get 503 while those in flight finish for up to this long; "
         "then the rest fail and the workers drop them"},
        {"api-key-file", OPT_STR, c->api_key_file, sizeof c->api_key_file,
         "file with the API key (at least 32 bytes): HTTP /v1/* then needs "
         "'Authorization: Bearer KEY' and RPC clients the same key (CURVE)"},
        {"worker-secret-file", OPT_STR, c->worker_secret_file, sizeof c->worker_secret_file,
         "file with the secret the workers share: only they can connect to the "
         "worker socket, and its traffic is encrypted (CURVE)"},
        {"scaler", OPT_STR, a->scaler, sizeof a->scaler,
         "none, local (start/stop worker processes here), kubernetes (scale subresource) or metrics-only (publish tandem_pool_desired_replicas)"},
        {"autoscale-interval-s", OPT_DOUBLE, &a->interval_s, 0,
         "seconds between autoscale evaluations"},
        {"scaler-k8s-prefill", OPT_STR, a->k8s_workload[AS_POOL_PREFILL],
         sizeof a->k8s_workload[0], "kubernetes: the prefill workload, RESOURCE/NAME"},
        {"scaler-k8s-decode", OPT_STR, a->k8s_workload[AS_POOL_DECODE], sizeof a->k8s_workload[0],
         "kubernetes: the decode workload, RESOURCE/NAME"},
        {"scaler-k8s-prefill-pods-per-replica", OPT_INT, &a->k8s_pods_per_replica[AS_POOL_PREFILL],
         0, "kubernetes: pods per prefiller replica"},
        {"scaler-k8s-decode-pods-per-replica", OPT_INT, &a->k8s_pods_per_replica[AS_POOL_DECODE], 0,
         "kubernetes: pods per decoder replica (a DP+EP group of G pods)"},
        {"scaler-k8s-namespace", OPT_STR, a->k8s_namespace, sizeof a->k8s_namespace,
         "kubernetes: namespace (\"\": the service account's)"},
        {"scaler-k8s-api-url", OPT_STR, a->k8s_api_url, sizeof a->k8s_api_url,
         "kubernetes: API server (\"\": https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)"},
        {"scaler-k8s-sa-dir", OPT_STR, a->k8s_sa_dir, sizeof a->k8s_sa_dir,
         "kubernetes: service account directory (\"\": /var/run/secrets/kubernetes.io/serviceaccount)"},
        {"scaler-local-model", OPT_STR, a->local_model, sizeof a->local_model,
         "local: model directory the workers serve"},
        {"scaler-local-bin-dir", OPT_STR, a->local_bin_dir, sizeof a->local_bin_dir,
         "local: where tandem-prefiller and tandem-decoder are (\"\": next to tandem-router)"},
        {"scaler-local-prefill-args", OPT_STR, a->local_args[AS_POOL_PREFILL],
         sizeof a->local_args[0], "local: extra tandem-prefiller flags, blank separated"},
        {"scaler-local-decode-args", OPT_STR, a->local_args[AS_POOL_DECODE], sizeof a->local_args[0],
         "local: extra tandem-decoder flags, blank separated"},
        {"scaler-local-prefill-metrics-port", OPT_INT, &a->local_metrics_port[AS_POOL_PREFILL], 0,
         "local: prefiller i serves /metrics on this + i (0: any free port)"},
        {"scaler-local-decode-metrics-port", OPT_INT, &a->local_metrics_port[AS_POOL_DECODE], 0,
         "local: decoder i serves /metrics on this + i (0: any free port)"},
        {"scaler-local-drain-timeout-s", OPT_DOUBLE, &a->local_drain_timeout_s, 0,
         "local: SIGKILL a draining worker after this many seconds"},
        {"scaler-local-max-workers", OPT_INT, &a->local_max_workers, 0,
         "local: most workers per pool"},
    };
    int n = (int)(sizeof specs / sizeof *specs);
    _Static_assert(sizeof specs / sizeof *specs <= MAX_SPECS, "raise MAX_SPECS");
    memcpy(s, specs, sizeof specs);
    return n;
}

static int set_autoscale(void *ctx, const char *name, const char *value, char *err, size_t errlen)
{
    return autoscale_config_set_flag(ctx, name, value, err, errlen);
}

int router_config_parse(router_config *c, int argc, char **argv, char *err, size_t errlen)
{
    opt_spec specs[MAX_SPECS];
    int n = build_specs(c, specs);
    return opts_parse_with(specs, n, set_autoscale, &c->as.policy, argc, argv, err, errlen);
}

void router_config_print_help(FILE *out, router_config *c, const char *intro)
{
    opt_spec specs[MAX_SPECS];
    int n = build_specs(c, specs);
    opts_print_help(out, "tandem-router", intro, specs, n);
    fprintf(out, "\n");
    autoscale_config_print_help(out);
}

int router_config_validate(const router_config *c, char *err, size_t errlen)
{
    if (c->heartbeat_ms <= 0 || c->worker_timeout_ms <= c->heartbeat_ms ||
        c->default_max_tokens <= 0 || c->chat_default_max_tokens < 0 || c->max_body_bytes <= 0 ||
        c->max_active_requests <= 0 || c->http_port < 0 || c->worker_port < 0 ||
        c->rpc_port < 0 || c->http_port > 65535 || c->worker_port > 65535 ||
        c->rpc_port > 65535 || c->metrics_port < -1 || c->metrics_port > 65535 ||
        c->queue_timeout_ms < 0 || c->progress_timeout_ms < 0 || c->drain_timeout_ms < 0 ||
        c->http_max_connections <= 0 || c->http_idle_timeout_ms <= 0 ||
        c->http_request_timeout_ms <= 0 || c->http_memory_budget_mb <= 0) {
        snprintf(err, errlen, "ports must be 0..65535 (--metrics-port also -1), limits positive, "
                              "--queue-timeout-ms, --progress-timeout-ms and "
                              "--drain-timeout-ms >= 0, and --worker-timeout-ms larger than "
                              "--heartbeat-ms");
        return TN_ERR_ARG;
    }
    return autoscaler_config_validate(&c->as, err, errlen);
}

/* What a stuck request may wait for: its worker's heartbeats to lapse
 * (--worker-timeout-ms, twice: a slow heartbeat is not a stuck worker) and
 * a KV transfer to time out on the prefiller (its --transfer-timeout-ms,
 * 30 s by default), after which a live worker has always reported. */
int router_progress_timeout_ms(const router_config *c)
{
    if (c->progress_timeout_ms > 0)
        return c->progress_timeout_ms;
    return 2 * c->worker_timeout_ms + 30000;
}
