/* kubernetes scaler: PATCHes the scale subresource of the prefiller and
 * decoder workloads through the API server, authenticated with the pod's
 * service account (token, ca.crt, namespace under sa_dir), over libcurl.
 * The RBAC it needs is in deploy/base/router-rbac.yaml. */
#include "autoscale/scaler.h"
#include "common/status.h"

#include <curl/curl.h>
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SA_DIR_DEFAULT "/var/run/secrets/kubernetes.io/serviceaccount"
/* A scale object is a few hundred bytes; anything this large is not one. */
#define MAX_RESPONSE_BYTES (1 << 20)
#define MAX_TOKEN_BYTES (64 << 10)

struct scaler_kubernetes {
    char *sa_dir;
    char *api_url;
    char *namespace_name;
    char *resource[AS_POOL_COUNT];
    char *name[AS_POOL_COUNT];
    int pods_per_replica[AS_POOL_COUNT];
    long timeout_ms;
};

/* Reads a small file whole, NUL-terminated, trailing whitespace removed. */
static char *read_trimmed(const char *path, size_t max, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        tn_fail(err, errlen, TN_ERR_SYS, "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = malloc(max + 1);
    if (!buf) {
        fclose(f);
        tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory reading %s", path);
        return NULL;
    }
    size_t n = fread(buf, 1, max + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || n > max) {
        free(buf);
        tn_fail(err, errlen, TN_ERR_SYS, "%s: %s", path, bad ? "read error" : "file too large");
        return NULL;
    }
    while (n > 0 && isspace((unsigned char)buf[n - 1]))
        n--;
    buf[n] = '\0';
    if (n == 0) {
        free(buf);
        tn_fail(err, errlen, TN_ERR_ARG, "%s is empty", path);
        return NULL;
    }
    return buf;
}

/* RFC 1123 label/subdomain characters only: the names go into a URL path. */
static int valid_k8s_name(const char *s)
{
    if (!s || !*s || strlen(s) > 253)
        return 0;
    for (const char *c = s; *c; c++)
        if (!(islower((unsigned char)*c) || isdigit((unsigned char)*c) || *c == '-' || *c == '.'))
            return 0;
    return isalnum((unsigned char)s[0]) && isalnum((unsigned char)s[strlen(s) - 1]);
}

void scaler_kubernetes_destroy(scaler_kubernetes *k)
{
    if (!k)
        return;
    free(k->sa_dir);
    free(k->api_url);
    free(k->namespace_name);
    for (int p = 0; p < AS_POOL_COUNT; p++) {
        free(k->resource[p]);
        free(k->name[p]);
    }
    free(k);
    curl_global_cleanup();
}

static char *path_join(const char *dir, const char *file)
{
    char *out = NULL;
    if (asprintf(&out, "%s/%s", dir, file) < 0)
        return NULL;
    return out;
}

int scaler_kubernetes_create(const scaler_kubernetes_config *cfg, scaler_kubernetes **out, char *err,
                             size_t errlen)
{
    if (!cfg || !out)
        return tn_fail(err, errlen, TN_ERR_ARG, "scaler_kubernetes_create: NULL argument");
    *out = NULL;
    /* Refcounted by libcurl; balanced in destroy. */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return tn_fail(err, errlen, TN_ERR_SYS, "curl_global_init failed");
    scaler_kubernetes *k = calloc(1, sizeof(*k));
    if (!k) {
        curl_global_cleanup();
        return tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory");
    }
    k->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 10000;
    k->sa_dir = strdup(cfg->sa_dir ? cfg->sa_dir : SA_DIR_DEFAULT);
    if (!k->sa_dir)
        goto oom;
    for (int p = 0; p < AS_POOL_COUNT; p++) {
        const char *res = cfg->workload_resource[p], *name = cfg->workload_name[p];
        const char *pn = as_pool_name((as_pool)p);
        if (!res || (strcmp(res, "deployments") != 0 && strcmp(res, "statefulsets") != 0)) {
            tn_fail(err, errlen, TN_ERR_ARG, "kubernetes scaler: %s workload resource must be 'deployments' or 'statefulsets', got '%s'",
                 pn, res ? res : "(none)");
            goto fail_out;
        }
        if (!valid_k8s_name(name)) {
            tn_fail(err, errlen, TN_ERR_ARG, "kubernetes scaler: %s workload name '%s' is not a valid Kubernetes name", pn,
                 name ? name : "(none)");
            goto fail_out;
        }
        if (cfg->pods_per_replica[p] < 0) {
            tn_fail(err, errlen, TN_ERR_ARG, "kubernetes scaler: %s pods per replica must be >= 1", pn);
            goto fail_out;
        }
        k->pods_per_replica[p] = cfg->pods_per_replica[p] ? cfg->pods_per_replica[p] : 1;
        k->resource[p] = strdup(res);
        k->name[p] = strdup(name);
        if (!k->resource[p] || !k->name[p])
            goto oom;
    }
    if (cfg->namespace_name) {
        k->namespace_name = strdup(cfg->namespace_name);
        if (!k->namespace_name)
            goto oom;
    } else {
        char *path = path_join(k->sa_dir, "namespace");
        if (!path)
            goto oom;
        k->namespace_name = read_trimmed(path, 253, err, errlen);
        free(path);
        if (!k->namespace_name)
            goto fail_out;
    }
    if (!valid_k8s_name(k->namespace_name)) {
        tn_fail(err, errlen, TN_ERR_ARG, "kubernetes scaler: namespace '%s' is not a valid Kubernetes name", k->namespace_name);
        goto fail_out;
    }
    if (cfg->api_url) {
        k->api_url = strdup(cfg->api_url);
        if (!k->api_url)
            goto oom;
    } else {
        const char *host = getenv("KUBERNETES_SERVICE_HOST");
        const char *port = getenv("KUBERNETES_SERVICE_PORT");
        if (!host || !*host || !port || !*port) {
            tn_fail(err, errlen, TN_ERR_ARG, "kubernetes scaler: KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set "
                              "(not running in a pod? pass the API server URL explicitly)");
            goto fail_out;
        }
        /* An IPv6 service address needs brackets in a URL. */
        int v6 = strchr(host, ':') != NULL;
        if (asprintf(&k->api_url, v6 ? "https://[%s]:%s" : "https://%s:%s", host, port) < 0) {
            k->api_url = NULL;
            goto oom;
        }
    }
    size_t ul = strlen(k->api_url);
    while (ul > 0 && k->api_url[ul - 1] == '/')
        k->api_url[--ul] = '\0';
    *out = k;
    return 0;
oom:
    tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory");
fail_out:
    scaler_kubernetes_destroy(k);
    return -1;
}

typedef struct {
    char *data;
    size_t len;
    int too_big;
} response_buf;

static size_t collect_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    response_buf *rb = userdata;
    size_t n = size * nmemb;
    if (rb->len + n > MAX_RESPONSE_BYTES) {
        rb->too_big = 1;
        return 0; /* aborts the transfer */
    }
    char *nd = realloc(rb->data, rb->len + n + 1);
    if (!nd)
        return 0;
    rb->data = nd;
    memcpy(rb->data + rb->len, ptr, n);
    rb->len += n;
    rb->data[rb->len] = '\0';
    return n;
}

/* Builds an error from a non-2xx answer: the API server sends a Status
 * object whose "message" says what was wrong. */
static void http_error(char *err, size_t errlen, const char *method, const char *url, long status,
                       const char *body, const scaler_kubernetes *k, as_pool pool)
{
    const char *msg = NULL;
    cJSON *j = body ? cJSON_Parse(body) : NULL;
    if (j) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "message");
        if (cJSON_IsString(m))
            msg = m->valuestring;
    }
    const char *hint = "";
    if (status == 401)
        hint = " (the service account token was rejected)";
    else if (status == 403)
        hint = " (the router's ServiceAccount needs get and patch on deployments/scale and statefulsets/scale: "
               "deploy/base/router-rbac.yaml)";
    else if (status == 404)
        hint = " (no such workload in this namespace: check the scaler's workload names)";
    tn_fail(err, errlen, TN_ERR_PEER, "kubernetes scaler: %s %s for %s %s/%s: HTTP %ld%s%s%s", method, url, as_pool_name(pool),
         k->resource[pool], k->name[pool], status, msg ? ": " : "", msg ? msg : "", hint);
    cJSON_Delete(j);
}

/* One authenticated request to the pool's scale subresource. On a 2xx
 * answer *body_out receives the response (caller frees). */
static int scale_request(scaler_kubernetes *k, as_pool pool, const char *method, const char *body,
                         char **body_out, char *err, size_t errlen)
{
    char *url = NULL, *token = NULL, *auth = NULL, *token_path = NULL, *ca_path = NULL;
    struct curl_slist *headers = NULL;
    response_buf rb = {0};
    CURL *c = NULL;
    int rc = -1;
    *body_out = NULL;

    if (asprintf(&url, "%s/apis/apps/v1/namespaces/%s/%s/%s/scale", k->api_url, k->namespace_name,
                 k->resource[pool], k->name[pool]) < 0) {
        url = NULL;
        tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory");
        goto done;
    }
    token_path = path_join(k->sa_dir, "token");
    ca_path = path_join(k->sa_dir, "ca.crt");
    if (!token_path || !ca_path) {
        tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory");
        goto done;
    }
    /* Read per request: projected service account tokens are rotated. */
    char terr[256];
    token = read_trimmed(token_path, MAX_TOKEN_BYTES, terr, sizeof(terr));
    if (!token) {
        tn_fail(err, errlen, TN_ERR_SYS, "kubernetes scaler: service account token: %s", terr);
        goto done;
    }
    if (asprintf(&auth, "Authorization: Bearer %s", token) < 0) {
        auth = NULL;
        tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory");
        goto done;
    }
    struct curl_slist *h;
    const char *fixed[] = {auth, "Accept: application/json",
                           body ? "Content-Type: application/merge-patch+json" : NULL};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
        if (!fixed[i])
            continue;
        h = curl_slist_append(headers, fixed[i]);
        if (!h) {
            tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory");
            goto done;
        }
        headers = h;
    }
    c = curl_easy_init();
    if (!c) {
        tn_fail(err, errlen, TN_ERR_SYS, "curl_easy_init failed");
        goto done;
    }
    char curl_err[CURL_ERROR_SIZE] = "";
    int ok = curl_easy_setopt(c, CURLOPT_URL, url) == CURLE_OK &&
             curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method) == CURLE_OK &&
             curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers) == CURLE_OK &&
             curl_easy_setopt(c, CURLOPT_CAINFO, ca_path) == CURLE_OK &&
             curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, k->timeout_ms) == CURLE_OK &&
             curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
             curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_err) == CURLE_OK &&
             curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect_body) == CURLE_OK &&
             curl_easy_setopt(c, CURLOPT_WRITEDATA, &rb) == CURLE_OK &&
             /* The token must never follow a redirect to another host. */
             curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L) == CURLE_OK;
    if (ok && body)
        ok = curl_easy_setopt(c, CURLOPT_POSTFIELDS, body) == CURLE_OK &&
             curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body)) == CURLE_OK;
    if (!ok) {
        tn_fail(err, errlen, TN_ERR_SYS, "kubernetes scaler: setting up the HTTP request failed");
        goto done;
    }
    CURLcode cr = curl_easy_perform(c);
    if (cr != CURLE_OK) {
        tn_fail(err, errlen, TN_ERR_SYS, "kubernetes scaler: %s %s: %s%s%s", method, url, curl_easy_strerror(cr),
             curl_err[0] ? ": " : "", curl_err[0] ? curl_err : (rb.too_big ? ": response too large" : ""));
        goto done;
    }
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (status < 200 || status > 299) {
        http_error(err, errlen, method, url, status, rb.data, k, pool);
        goto done;
    }
    *body_out = rb.data ? rb.data : strdup("");
    rb.data = NULL;
    if (!*body_out) {
        tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory");
        goto done;
    }
    rc = 0;
done:
    if (c)
        curl_easy_cleanup(c);
    curl_slist_free_all(headers);
    if (token) {
        /* Do not leave the credential lying in freed heap memory. */
        memset(token, 0, strlen(token));
        free(token);
    }
    if (auth) {
        memset(auth, 0, strlen(auth));
        free(auth);
    }
    free(token_path);
    free(ca_path);
    free(url);
    free(rb.data);
    return rc;
}

/* spec.replicas (what the workload is asked to run) from a Scale object. */
static int parse_scale_replicas(const char *body, int *replicas)
{
    cJSON *j = cJSON_Parse(body);
    if (!j)
        return -1;
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(j, "spec");
    const cJSON *r = spec ? cJSON_GetObjectItemCaseSensitive(spec, "replicas") : NULL;
    int rc = -1;
    if (cJSON_IsNumber(r) && r->valuedouble >= 0 && r->valuedouble <= 1e9) {
        *replicas = (int)r->valuedouble;
        rc = 0;
    } else if (spec && !r) {
        *replicas = 0; /* replicas: 0 is omitted from the JSON */
        rc = 0;
    }
    cJSON_Delete(j);
    return rc;
}

int scaler_kubernetes_set_replicas(scaler_kubernetes *k, as_pool pool, int n, char *err, size_t errlen)
{
    if (!k || !as_pool_name(pool) || n < 0)
        return tn_fail(err, errlen, TN_ERR_ARG, "scaler_kubernetes_set_replicas: bad argument");
    long pods = (long)n * k->pods_per_replica[pool];
    if (pods > 1000000)
        return tn_fail(err, errlen, TN_ERR_ARG, "kubernetes scaler: %d replicas is too many", n);
    char body[64];
    snprintf(body, sizeof(body), "{\"spec\":{\"replicas\":%ld}}", pods);
    char *resp = NULL;
    if (scale_request(k, pool, "PATCH", body, &resp, err, errlen) != 0)
        return -1;
    int got = -1;
    int prc = parse_scale_replicas(resp, &got);
    free(resp);
    if (prc != 0)
        return tn_fail(err, errlen, TN_ERR_PEER, "kubernetes scaler: PATCH %s/%s answered 2xx without a Scale object",
                    k->resource[pool], k->name[pool]);
    if (got != pods)
        return tn_fail(err, errlen, TN_ERR_PEER, "kubernetes scaler: asked %s/%s for %ld replicas, the API server answered %d",
                    k->resource[pool], k->name[pool], pods, got);
    return 0;
}

int scaler_kubernetes_get_replicas(scaler_kubernetes *k, as_pool pool, int *n, char *err, size_t errlen)
{
    if (!k || !n || !as_pool_name(pool))
        return tn_fail(err, errlen, TN_ERR_ARG, "scaler_kubernetes_get_replicas: bad argument");
    char *resp = NULL;
    if (scale_request(k, pool, "GET", NULL, &resp, err, errlen) != 0)
        return -1;
    int pods = 0;
    int prc = parse_scale_replicas(resp, &pods);
    free(resp);
    if (prc != 0)
        return tn_fail(err, errlen, TN_ERR_PEER, "kubernetes scaler: GET %s/%s/scale did not return a Scale object",
                    k->resource[pool], k->name[pool]);
    /* A partly formed decoder group does not serve: count whole groups. */
    *n = pods / k->pods_per_replica[pool];
    return 0;
}

static int k8s_set(void *impl, as_pool pool, int n, char *err, size_t errlen)
{
    return scaler_kubernetes_set_replicas(impl, pool, n, err, errlen);
}

static int k8s_get(void *impl, as_pool pool, int *n, char *err, size_t errlen)
{
    return scaler_kubernetes_get_replicas(impl, pool, n, err, errlen);
}

static void k8s_destroy(void *impl)
{
    scaler_kubernetes_destroy(impl);
}

SCALER_DEFINE_AS_SCALER(scaler_kubernetes_as_scaler, scaler_kubernetes, "kubernetes",
                        k8s_set, k8s_get, NULL, k8s_destroy)
