/* A worker's own small HTTP server (libmicrohttpd, one internal thread):
 * GET /metrics (its docs/METRICS.md series, Prometheus text) and
 * GET /healthz (liveness: 200 while the main loop makes progress, also while
 * draining; 500 when it has not published for wedged_after_s) and
 * GET /healthz?ready=1 (readiness: 200 only while registered and not
 * draining, else 503). Kubernetes probes these (deploy/); Prometheus scrapes
 * the router's cluster view instead, so this /metrics is for debugging.
 *
 * The worker's main loop owns its worker_metrics and publishes a copy here
 * (under the server's lock) as it goes; the server thread never touches the
 * worker's state. */
#ifndef TANDEM_WORKER_WORKER_HTTP_H
#define TANDEM_WORKER_WORKER_HTTP_H
#include <stddef.h>
#include "worker/worker_metrics.h"

typedef struct worker_http worker_http;

typedef struct worker_http_config {
    const char *host;        /* IPv4 address to bind */
    int port;                /* 0: any free port (worker_http_port says which) */
    const char *process;     /* "prefiller" or "decoder" (tandem_build_info) */
    const char *worker_id;   /* the worker label */
    double wedged_after_s;   /* liveness fails after this long without a publish */
} worker_http_config;

/* Starts the server. Returns 0, or -1 with a reason (port in use, bad host). */
int worker_http_start(const worker_http_config *cfg, const worker_metrics *initial,
                      worker_http **out, char *err, size_t errlen);
/* The bound port. */
int worker_http_port(const worker_http *h);
/* Copies m and the registration state for the handlers and marks progress. */
void worker_http_publish(worker_http *h, const worker_metrics *m, int registered);
/* What a worker's main does: no server when port is -1 (*out = NULL);
 * otherwise starts it, logs the URL and writes "metrics_port=N" to
 * port_file (when not ""), since port 0 picks a free port. */
int worker_http_serve(const char *host, int port, const char *port_file, const char *process,
                      const char *worker_id, double wedged_after_s, const worker_metrics *initial,
                      worker_http **out, char *err, size_t errlen);
/* Stops the server and frees h (NULL is fine). */
void worker_http_stop(worker_http *h);

#endif
