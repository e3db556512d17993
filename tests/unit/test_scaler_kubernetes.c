/* kubernetes scaler against a real HTTPS server on 127.0.0.1 standing in for
 * the API server (libmicrohttpd with the TLS fixture in
 * tests/fixtures/k8s_api_tls), with a temporary service-account directory.
 * Checks the exact method, path, headers and body the scaler sends, and its
 * errors for 403, 404, 500, a refused connection and an untrusted server. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "common/status.h"
#include "autoscale/scaler.h"

#define TLS_DIR "tests/fixtures/k8s_api_tls"

typedef struct {
    pthread_mutex_t mu;
    /* what the last request carried */
    char method[16];
    char url[256];
    char auth[256];
    char content_type[128];
    char accept[128];
    char body[256];
    int requests;
    /* what to answer */
    unsigned status;
    char reply[512];
} fake_api;

typedef struct {
    char body[256];
    size_t len;
} upload;

static void copy_header(struct MHD_Connection *c, const char *name, char *dst, size_t n)
{
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
    snprintf(dst, n, "%s", v ? v : "");
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *data, size_t *data_size, void **req_cls)
{
    (void)version;
    fake_api *api = cls;
    upload *u = *req_cls;
    if (!u) {
        u = calloc(1, sizeof(*u));
        if (!u)
            return MHD_NO;
        *req_cls = u;
        return MHD_YES;
    }
    if (*data_size) {
        size_t room = sizeof(u->body) - 1 - u->len;
        size_t n = *data_size < room ? *data_size : room;
        memcpy(u->body + u->len, data, n);
        u->len += n;
        *data_size = 0;
        return MHD_YES;
    }
    pthread_mutex_lock(&api->mu);
    snprintf(api->method, sizeof(api->method), "%s", method);
    snprintf(api->url, sizeof(api->url), "%s", url);
    copy_header(c, "Authorization", api->auth, sizeof(api->auth));
    copy_header(c, "Content-Type", api->content_type, sizeof(api->content_type));
    copy_header(c, "Accept", api->accept, sizeof(api->accept));
    snprintf(api->body, sizeof(api->body), "%s", u->body);
    api->requests++;
    unsigned status = api->status;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(api->reply), api->reply, MHD_RESPMEM_MUST_COPY);
    pthread_mutex_unlock(&api->mu);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static void request_done(void *cls, struct MHD_Connection *c, void **req_cls, enum MHD_RequestTerminationCode t)
{
    (void)cls;
    (void)c;
    (void)t;
    free(*req_cls);
    *req_cls = NULL;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *buf = calloc(1, 16384);
    assert_non_null(buf);
    size_t n = fread(buf, 1, 16383, f);
    fclose(f);
    assert_true(n > 0);
    return buf;
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

typedef struct {
    fake_api api;
    struct MHD_Daemon *daemon;
    char *cert, *key, *ca, *other_ca;
    char sa_dir[64];
    char port[16];
} fixture;

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof(*fx));
    if (!fx)
        return -1;
    pthread_mutex_init(&fx->api.mu, NULL);
    fx->cert = slurp(TLS_DIR "/server.crt");
    fx->key = slurp(TLS_DIR "/server.key");
    fx->ca = slurp(TLS_DIR "/ca.crt");
    fx->other_ca = slurp(TLS_DIR "/other-ca.crt");
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = 0; /* ephemeral: several suites may run at once */
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fx->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_TLS, 0, NULL, NULL,
                                  handle, &fx->api, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                                  MHD_OPTION_HTTPS_MEM_KEY, fx->key, MHD_OPTION_HTTPS_MEM_CERT, fx->cert,
                                  MHD_OPTION_NOTIFY_COMPLETED, request_done, NULL, MHD_OPTION_END);
    if (!fx->daemon)
        return -1;
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(fx->daemon, MHD_DAEMON_INFO_BIND_PORT);
    if (!info || !info->port)
        return -1;
    snprintf(fx->port, sizeof(fx->port), "%u", (unsigned)info->port);
    snprintf(fx->sa_dir, sizeof(fx->sa_dir), "/tmp/tandem-sa-XXXXXX");
    if (!mkdtemp(fx->sa_dir))
        return -1;
    write_file(fx->sa_dir, "token", "test-token-123\n");
    write_file(fx->sa_dir, "namespace", "tandem-test");
    write_file(fx->sa_dir, "ca.crt", fx->ca);
    /* The production path: the API server address comes from the pod env. */
    setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", fx->port, 1);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture *fx = *state;
    if (fx->daemon)
        MHD_stop_daemon(fx->daemon);
    const char *files[] = {"token", "namespace", "ca.crt"};
    for (int i = 0; i < 3; i++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", fx->sa_dir, files[i]);
        unlink(path);
    }
    rmdir(fx->sa_dir);
    pthread_mutex_destroy(&fx->api.mu);
    free(fx->cert);
    free(fx->key);
    free(fx->ca);
    free(fx->other_ca);
    free(fx);
    return 0;
}

static void answer(fixture *fx, unsigned status, const char *reply)
{
    pthread_mutex_lock(&fx->api.mu);
    fx->api.status = status;
    snprintf(fx->api.reply, sizeof(fx->api.reply), "%s", reply);
    pthread_mutex_unlock(&fx->api.mu);
}

static scaler_kubernetes_config config_for(const fixture *fx)
{
    scaler_kubernetes_config c;
    memset(&c, 0, sizeof(c));
    c.sa_dir = fx->sa_dir;
    c.workload_resource[AS_POOL_PREFILL] = "deployments";
    c.workload_name[AS_POOL_PREFILL] = "tandem-prefiller";
    c.workload_resource[AS_POOL_DECODE] = "statefulsets";
    c.workload_name[AS_POOL_DECODE] = "tandem-decoder";
    c.pods_per_replica[AS_POOL_DECODE] = 4;
    c.timeout_ms = 5000;
    return c;
}

static void patch_sends_exact_request(void **state)
{
    fixture *fx = *state;
    scaler_kubernetes_config cfg = config_for(fx);
    scaler_kubernetes *k = NULL;
    char err[512] = "";
    assert_int_equal(scaler_kubernetes_create(&cfg, &k, err, sizeof(err)), 0);
    answer(fx, 200, "{\"kind\":\"Scale\",\"apiVersion\":\"autoscaling/v1\",\"spec\":{\"replicas\":3},\"status\":{\"replicas\":1}}");
    int rc = scaler_kubernetes_set_replicas(k, AS_POOL_PREFILL, 3, err, sizeof(err));
    if (rc != 0)
        print_error("%s\n", err);
    assert_int_equal(rc, 0);
    pthread_mutex_lock(&fx->api.mu);
    assert_string_equal(fx->api.method, "PATCH");
    assert_string_equal(fx->api.url, "/apis/apps/v1/namespaces/tandem-test/deployments/tandem-prefiller/scale");
    assert_string_equal(fx->api.auth, "Bearer test-token-123");
    assert_string_equal(fx->api.content_type, "application/merge-patch+json");
    assert_string_equal(fx->api.accept, "application/json");
    assert_string_equal(fx->api.body, "{\"spec\":{\"replicas\":3}}");
    pthread_mutex_unlock(&fx->api.mu);

    /* A decoder group of 4 pods: 2 decoders = 8 StatefulSet replicas. */
    answer(fx, 200, "{\"kind\":\"Scale\",\"spec\":{\"replicas\":8}}");
    assert_int_equal(scaler_kubernetes_set_replicas(k, AS_POOL_DECODE, 2, err, sizeof(err)), 0);
    pthread_mutex_lock(&fx->api.mu);
    assert_string_equal(fx->api.url, "/apis/apps/v1/namespaces/tandem-test/statefulsets/tandem-decoder/scale");
    assert_string_equal(fx->api.body, "{\"spec\":{\"replicas\":8}}");
    pthread_mutex_unlock(&fx->api.mu);

    /* The token is read per request (the kubelet rotates it). */
    write_file(fx->sa_dir, "token", "rotated-token\n");
    answer(fx, 200, "{\"kind\":\"Scale\",\"spec\":{\"replicas\":8,\"selector\":\"x\"},\"status\":{\"replicas\":6}}");
    int n = -1;
    assert_int_equal(scaler_kubernetes_get_replicas(k, AS_POOL_DECODE, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 2);
    pthread_mutex_lock(&fx->api.mu);
    assert_string_equal(fx->api.method, "GET");
    assert_string_equal(fx->api.auth, "Bearer rotated-token");
    assert_string_equal(fx->api.content_type, "");
    assert_string_equal(fx->api.body, "");
    pthread_mutex_unlock(&fx->api.mu);
    write_file(fx->sa_dir, "token", "test-token-123\n");

    /* Through the generic interface too. */
    scaler s = scaler_kubernetes_as_scaler(k);
    assert_string_equal(scaler_kind(&s), "kubernetes");
    answer(fx, 200, "{\"kind\":\"Scale\",\"spec\":{\"replicas\":0}}");
    assert_int_equal(scaler_set_replicas(&s, AS_POOL_PREFILL, 0, err, sizeof(err)), 0);
    pthread_mutex_lock(&fx->api.mu);
    assert_string_equal(fx->api.body, "{\"spec\":{\"replicas\":0}}");
    pthread_mutex_unlock(&fx->api.mu);
    scaler_destroy(&s);
}

static void http_errors_are_explained(void **state)
{
    fixture *fx = *state;
    scaler_kubernetes_config cfg = config_for(fx);
    scaler_kubernetes *k = NULL;
    char err[1024] = "";
    assert_int_equal(scaler_kubernetes_create(&cfg, &k, err, sizeof(err)), 0);

    answer(fx, 403, "{\"kind\":\"Status\",\"status\":\"Failure\",\"message\":\"deployments.apps \\\"tandem-prefiller\\\" "
                    "is forbidden: User cannot patch resource\",\"reason\":\"Forbidden\",\"code\":403}");
    assert_int_equal(scaler_kubernetes_set_replicas(k, AS_POOL_PREFILL, 2, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "HTTP 403"));
    assert_non_null(strstr(err, "is forbidden: User cannot patch resource"));
    assert_non_null(strstr(err, "deployments/scale"));
    assert_non_null(strstr(err, "PATCH https://127.0.0.1:"));

    answer(fx, 404, "{\"kind\":\"Status\",\"message\":\"statefulsets.apps \\\"tandem-decoder\\\" not found\",\"code\":404}");
    assert_int_equal(scaler_kubernetes_set_replicas(k, AS_POOL_DECODE, 1, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "HTTP 404"));
    assert_non_null(strstr(err, "not found"));
    assert_non_null(strstr(err, "statefulsets/tandem-decoder"));

    answer(fx, 500, "internal error, not JSON");
    assert_int_equal(scaler_kubernetes_set_replicas(k, AS_POOL_PREFILL, 2, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "HTTP 500"));

    /* A 2xx answer that is not a Scale object is an error, not a success. */
    answer(fx, 200, "[]");
    assert_int_equal(scaler_kubernetes_set_replicas(k, AS_POOL_PREFILL, 2, err, sizeof(err)), TN_ERR_PEER);
    assert_non_null(strstr(err, "Scale object"));
    scaler_kubernetes_destroy(k);
}

static void connection_refused_is_reported(void **state)
{
    fixture *fx = *state;
    /* A port nobody listens on: bind an ephemeral one and close it. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    socklen_t sl = sizeof(sa);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    close(fd);
    char url[64];
    snprintf(url, sizeof(url), "https://127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));
    scaler_kubernetes_config cfg = config_for(fx);
    cfg.api_url = url;
    scaler_kubernetes *k = NULL;
    char err[1024] = "";
    assert_int_equal(scaler_kubernetes_create(&cfg, &k, err, sizeof(err)), 0);
    int before = fx->api.requests;
    assert_int_equal(scaler_kubernetes_set_replicas(k, AS_POOL_PREFILL, 2, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "Couldn't connect"));
    assert_non_null(strstr(err, url));
    assert_int_equal(fx->api.requests, before);
    scaler_kubernetes_destroy(k);
}

static void untrusted_server_and_missing_token_fail(void **state)
{
    fixture *fx = *state;
    scaler_kubernetes_config cfg = config_for(fx);
    scaler_kubernetes *k = NULL;
    char err[1024] = "";
    assert_int_equal(scaler_kubernetes_create(&cfg, &k, err, sizeof(err)), 0);
    answer(fx, 200, "{\"kind\":\"Scale\",\"spec\":{\"replicas\":2}}");
    /* A ca.crt that did not sign the server's certificate: TLS must fail. */
    write_file(fx->sa_dir, "ca.crt", fx->other_ca);
    int before = fx->api.requests;
    assert_int_equal(scaler_kubernetes_set_replicas(k, AS_POOL_PREFILL, 2, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "kubernetes scaler: PATCH"));
    assert_non_null(strstr(err, "certificate"));
    assert_int_equal(fx->api.requests, before);
    write_file(fx->sa_dir, "ca.crt", fx->ca);

    char path[512];
    snprintf(path, sizeof(path), "%s/token", fx->sa_dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(scaler_kubernetes_set_replicas(k, AS_POOL_PREFILL, 2, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "token"));
    assert_non_null(strstr(err, path));
    write_file(fx->sa_dir, "token", "test-token-123\n");
    assert_int_equal(scaler_kubernetes_set_replicas(k, AS_POOL_PREFILL, 2, err, sizeof(err)), 0);
    scaler_kubernetes_destroy(k);
}

static void bad_configuration_is_rejected(void **state)
{
    fixture *fx = *state;
    scaler_kubernetes *k = NULL;
    char err[512] = "";
    scaler_kubernetes_config cfg = config_for(fx);
    cfg.workload_name[AS_POOL_PREFILL] = "../../secrets";
    assert_int_equal(scaler_kubernetes_create(&cfg, &k, err, sizeof(err)), -1);
    assert_null(k);
    assert_non_null(strstr(err, "not a valid Kubernetes name"));
    cfg = config_for(fx);
    cfg.workload_resource[AS_POOL_DECODE] = "daemonsets";
    assert_int_equal(scaler_kubernetes_create(&cfg, &k, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "statefulsets"));
    cfg = config_for(fx);
    cfg.sa_dir = "/nonexistent-sa-dir";
    assert_int_equal(scaler_kubernetes_create(&cfg, &k, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "/nonexistent-sa-dir/namespace"));
    cfg = config_for(fx);
    unsetenv("KUBERNETES_SERVICE_HOST");
    assert_int_equal(scaler_kubernetes_create(&cfg, &k, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "KUBERNETES_SERVICE_HOST"));
    setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
}

static void metrics_only_publishes_desired(void **state)
{
    (void)state;
    scaler_metrics m;
    scaler_metrics_init(&m);
    char buf[512], err[256];
    assert_true(scaler_metrics_format(&m, buf, sizeof(buf)) > 0);
    assert_null(strstr(buf, "tandem_pool_desired_replicas{"));
    scaler s = scaler_metrics_as_scaler(&m);
    assert_int_equal(scaler_set_replicas(&s, AS_POOL_PREFILL, 3, err, sizeof(err)), 0);
    assert_int_equal(scaler_set_replicas(&s, AS_POOL_DECODE, 2, err, sizeof(err)), 0);
    int len = scaler_metrics_format(&m, buf, sizeof(buf));
    assert_int_equal(len, (int)strlen(buf));
    assert_string_equal(buf,
                        "# HELP tandem_pool_desired_replicas Replicas the autoscaler wants per pool.\n"
                        "# TYPE tandem_pool_desired_replicas gauge\n"
                        "tandem_pool_desired_replicas{pool=\"prefill\"} 3\n"
                        "tandem_pool_desired_replicas{pool=\"decode\"} 2\n");
    assert_int_equal(scaler_metrics_format(&m, buf, 40), -1);
    int n;
    assert_int_equal(scaler_get_replicas(&s, AS_POOL_DECODE, &n, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "metrics-only"));
    assert_int_equal(scaler_set_replicas(&s, AS_POOL_DECODE, -1, err, sizeof(err)), -1);
    scaler_destroy(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(patch_sends_exact_request),
        cmocka_unit_test(http_errors_are_explained),
        cmocka_unit_test(connection_refused_is_reported),
        cmocka_unit_test(untrusted_server_and_missing_token_fail),
        cmocka_unit_test(bad_configuration_is_rejected),
        cmocka_unit_test(metrics_only_publishes_desired),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
