#include "worker/worker_http.h"
#include "common/status.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/sys.h"

struct worker_http {
    struct MHD_Daemon *d;
    int port;
    char process[32];
    char worker_id[256];
    double wedged_after_s;
    pthread_mutex_t lock;
    worker_metrics m;      /* the latest published copy */
    int registered;
    double last_publish_s;
};

static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, const char *type,
                               const char *body, size_t len)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result handle_metrics(worker_http *h, struct MHD_Connection *c)
{
    sbuf b;
    sb_init(&b);
    pthread_mutex_lock(&h->lock);
    worker_metrics_view v = {h->worker_id, &h->m};
    worker_metrics_render(&b, &v, 1, h->process);
    pthread_mutex_unlock(&h->lock);
    if (b.oom) {
        sb_free(&b);
        return respond(c, 500, "text/plain", "out of memory\n", 14);
    }
    enum MHD_Result rc = respond(c, 200, "text/plain; version=0.0.4", b.p ? b.p : "", b.len);
    sb_free(&b);
    return rc;
}

static enum MHD_Result handle_health(worker_http *h, struct MHD_Connection *c)
{
    const char *ready_arg = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "ready");
    int want_ready = ready_arg && strcmp(ready_arg, "0") != 0 && strcmp(ready_arg, "false") != 0;
    pthread_mutex_lock(&h->lock);
    int registered = h->registered, draining = h->m.draining;
    double idle = tn_now_s() - h->last_publish_s;
    pthread_mutex_unlock(&h->lock);
    int wedged = idle > h->wedged_after_s;
    int ready = registered && !draining && !wedged;
    char body[256];
    int n = snprintf(body, sizeof body,
                     "{\"status\":\"%s\",\"ready\":%s,\"registered\":%s,\"draining\":%s}\n",
                     wedged ? "wedged" : "ok", ready ? "true" : "false",
                     registered ? "true" : "false", draining ? "true" : "false");
    unsigned status = wedged ? 500 : want_ready && !ready ? 503 : 200;
    return respond(c, status, "application/json", body, (size_t)n);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version;
    (void)upload_data;
    worker_http *h = cls;
    if (!*con_cls) {
        *con_cls = h; /* first call: headers only */
        return MHD_YES;
    }
    if (*upload_data_size) {
        *upload_data_size = 0; /* nothing here takes a body */
        return MHD_YES;
    }
    int known = !strcmp(url, "/metrics") || !strcmp(url, "/healthz");
    if (!known)
        return respond(c, 404, "text/plain", "not found\n", 10);
    if (strcmp(method, "GET") && strcmp(method, "HEAD"))
        return respond(c, 405, "text/plain", "method not allowed\n", 19);
    return !strcmp(url, "/metrics") ? handle_metrics(h, c) : handle_health(h, c);
}

int worker_http_start(const worker_http_config *cfg, const worker_metrics *initial,
                      worker_http **out, char *err, size_t errlen)
{
    *out = NULL;
    if (cfg->port < 0 || cfg->port > 65535) {
        snprintf(err, errlen, "metrics port %d is not in 0..65535", cfg->port);
        return TN_ERR_ARG;
    }
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)cfg->port);
    if (inet_pton(AF_INET, cfg->host, &addr.sin_addr) != 1) {
        snprintf(err, errlen, "metrics host '%s' is not an IPv4 address", cfg->host);
        return TN_ERR_ARG;
    }
    worker_http *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return TN_ERR_NOMEM;
    }
    snprintf(h->process, sizeof h->process, "%s", cfg->process);
    snprintf(h->worker_id, sizeof h->worker_id, "%s", cfg->worker_id);
    h->wedged_after_s = cfg->wedged_after_s > 0 ? cfg->wedged_after_s : 60;
    h->m = *initial;
    h->last_publish_s = tn_now_s();
    pthread_mutex_init(&h->lock, NULL);
    h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG, 0,
                            NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR,
                            (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_LIMIT, 64u,
                            MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
    if (!h->d) {
        snprintf(err, errlen, "cannot serve /metrics on %s:%d (port in use?)", cfg->host,
                 cfg->port);
        pthread_mutex_destroy(&h->lock);
        free(h);
        return TN_ERR_ARG;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : cfg->port;
    *out = h;
    return 0;
}

int worker_http_port(const worker_http *h)
{
    return h ? h->port : -1;
}

void worker_http_publish(worker_http *h, const worker_metrics *m, int registered)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->lock);
    h->m = *m;
    h->registered = registered;
    h->last_publish_s = tn_now_s();
    pthread_mutex_unlock(&h->lock);
}

int worker_http_serve(const char *host, int port, const char *port_file, const char *process,
                      const char *worker_id, double wedged_after_s, const worker_metrics *initial,
                      worker_http **out, char *err, size_t errlen)
{
    *out = NULL;
    if (port < 0)
        return 0;
    worker_http_config cfg = {.host = host, .port = port, .process = process,
                              .worker_id = worker_id, .wedged_after_s = wedged_after_s};
    if (worker_http_start(&cfg, initial, out, err, errlen) != 0)
        return TN_ERR_ARG;
    tn_log(process, "%s: /metrics and /healthz on http://%s:%d", worker_id, host,
           worker_http_port(*out));
    if (port_file && port_file[0]) {
        char text[64];
        snprintf(text, sizeof text, "metrics_port=%d\n", worker_http_port(*out));
        if (tn_write_file_atomic(port_file, text) != 0) {
            snprintf(err, errlen, "cannot write %s", port_file);
            worker_http_stop(*out);
            *out = NULL;
            return TN_ERR_ARG;
        }
    }
    return 0;
}

void worker_http_stop(worker_http *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->d);
    pthread_mutex_destroy(&h->lock);
    free(h);
}
