#include "programs/servebench_client.h"
#include <cJSON.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/sbuf.h"
#include "common/status.h"
#include "common/sys.h"

const char *const svb_outcome_names[SVB_N_OUTCOMES] = {
    "ok", "http_error", "stream_error", "malformed", "lost", "aborted", "not_sent",
};

/* One request in flight. */
typedef struct conn {
    svb_record *rec;
    CURL *h;
    sbuf in;          /* bytes not yet split into events */
    long http_code;
    int n_finish, done_seen, error_seen, bad;
    double t0;        /* the point's start (monotonic seconds) */
} conn;

static void mark_bad(conn *c, const char *why)
{
    if (!c->bad && !c->error_seen)
        snprintf(c->rec->why, sizeof c->rec->why, "%s", why);
    c->bad = 1;
}

static int record_chunk(svb_record *r, double t)
{
    if (r->n_chunks == r->cap_chunks) {
        int cap = r->cap_chunks ? 2 * r->cap_chunks : 64;
        double *v = realloc(r->chunk_t, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        r->chunk_t = v;
        r->cap_chunks = cap;
    }
    r->chunk_t[r->n_chunks++] = t;
    return 0;
}

static int nonempty_string(const cJSON *j)
{
    return cJSON_IsString(j) && j->valuestring[0] != '\0';
}

/* One SSE event "data: ..." without its blank line. */
static void on_event(conn *c, const char *ev, size_t n, double t)
{
    svb_record *r = c->rec;
    if (n < 6 || memcmp(ev, "data: ", 6) != 0) {
        mark_bad(c, "an event that does not start with 'data: '");
        return;
    }
    if (c->done_seen) {
        mark_bad(c, "an event after [DONE]");
        return;
    }
    ev += 6;
    n -= 6;
    if (n == 6 && memcmp(ev, "[DONE]", 6) == 0) {
        c->done_seen = 1;
        r->t_end = t;
        return;
    }
    cJSON *j = cJSON_ParseWithLength(ev, n);
    if (!cJSON_IsObject(j)) {
        mark_bad(c, "an event that is not a JSON object");
        cJSON_Delete(j);
        return;
    }
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (e) {
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e, "message");
        if (!c->error_seen)
            snprintf(r->why, sizeof r->why, "stream error: %s",
                     cJSON_IsString(msg) ? msg->valuestring : "(no message)");
        c->error_seen = 1;
        cJSON_Delete(j);
        return;
    }
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(j, "usage");
    if (cJSON_IsObject(usage)) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens");
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens");
        if (!cJSON_IsNumber(p) || !cJSON_IsNumber(o))
            mark_bad(c, "a usage object without prompt_tokens / completion_tokens");
        else {
            r->prompt_tokens = p->valueint;
            r->usage_tokens = o->valueint;
        }
    }
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(j, "choices");
    const cJSON *choice = cJSON_GetArrayItem(choices, 0);
    if (!cJSON_IsArray(choices) || (!choice && !cJSON_IsObject(usage))) {
        mark_bad(c, "a chunk without choices");
        cJSON_Delete(j);
        return;
    }
    if (choice) {
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(choice, "token_ids");
        const cJSON *fin = cJSON_GetObjectItemCaseSensitive(choice, "finish_reason");
        const cJSON *delta = cJSON_GetObjectItemCaseSensitive(choice, "delta");
        int k = cJSON_IsArray(ids) ? cJSON_GetArraySize(ids) : 0;
        /* Text without token ids (another server, or no return_token_ids):
         * the chunk still marks a token's arrival for TTFT and ITL. */
        int text = nonempty_string(cJSON_GetObjectItemCaseSensitive(choice, "text")) ||
                   nonempty_string(cJSON_GetObjectItemCaseSensitive(delta, "content")) ||
                   nonempty_string(cJSON_GetObjectItemCaseSensitive(delta, "reasoning_content"));
        if (ids && !cJSON_IsArray(ids))
            mark_bad(c, "token_ids is not an array");
        if (k > 0 || text) {
            if (record_chunk(r, t) != 0)
                mark_bad(c, "out of memory recording chunk times");
            r->id_tokens += k;
            if (k == 0)
                r->text_chunks++;
        }
        if (cJSON_IsString(fin))
            c->n_finish++;
        else if (fin && !cJSON_IsNull(fin))
            mark_bad(c, "finish_reason is neither a string nor null");
    }
    cJSON_Delete(j);
}

static size_t on_data(char *p, size_t size, size_t nmemb, void *ud)
{
    conn *c = ud;
    size_t n = size * nmemb;
    double t = tn_now_s() - c->t0;
    if (sb_append(&c->in, p, n) != TN_OK)
        return 0; /* aborts the transfer: counted as lost */
    if (c->http_code == 0)
        curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &c->http_code);
    if (c->http_code != 200)
        return n; /* an error body: judged whole at the end */
    size_t start = 0;
    for (;;) {
        char *sep = strstr(c->in.p + start, "\n\n");
        if (!sep)
            break;
        on_event(c, c->in.p + start, (size_t)(sep - (c->in.p + start)), t);
        start = (size_t)(sep - c->in.p) + 2;
    }
    sb_consume(&c->in, start);
    return n;
}

/* The outcome of a finished transfer. */
static svb_outcome judge(conn *c, CURLcode res, double t)
{
    svb_record *r = c->rec;
    curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &c->http_code);
    if (!c->done_seen)
        r->t_end = t;
    if (res != CURLE_OK) {
        if (!c->error_seen)
            snprintf(r->why, sizeof r->why, "transfer failed: %s", curl_easy_strerror(res));
        return c->error_seen ? SVB_STREAM_ERROR : SVB_LOST;
    }
    if (c->http_code != 200) {
        cJSON *j = cJSON_ParseWithLength(c->in.p ? c->in.p : "", c->in.len);
        const cJSON *m =
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "error"), "message");
        snprintf(r->why, sizeof r->why, "HTTP %ld: %s", c->http_code,
                 cJSON_IsString(m) ? m->valuestring : "no OpenAI error body");
        cJSON_Delete(j);
        return SVB_HTTP_ERROR;
    }
    if (c->error_seen)
        return SVB_STREAM_ERROR;
    if (c->in.len != 0)
        mark_bad(c, "bytes after the last event");
    else if (!c->done_seen)
        mark_bad(c, "the stream ended without [DONE]");
    else if (c->n_finish != 1)
        mark_bad(c, "not exactly one finish_reason");
    else if (r->usage_tokens < 0)
        mark_bad(c, "no usage chunk (stream_options.include_usage was set)");
    else if (r->text_chunks == 0 && r->id_tokens != r->usage_tokens)
        mark_bad(c, "the chunks' token ids disagree with usage.completion_tokens");
    return c->bad ? SVB_MALFORMED : SVB_OK;
}

static void conn_close(CURLM *multi, conn *c)
{
    if (c->h) {
        curl_multi_remove_handle(multi, c->h);
        curl_easy_cleanup(c->h);
    }
    c->h = NULL;
    sb_free(&c->in);
}

static int conn_start(CURLM *multi, conn *c, const svb_client_cfg *cfg, const char *url,
                      struct curl_slist *headers, const svb_request *req)
{
    c->h = curl_easy_init();
    if (!c->h)
        return -1;
    sb_init(&c->in);
    curl_easy_setopt(c->h, CURLOPT_URL, url);
    curl_easy_setopt(c->h, CURLOPT_POSTFIELDS, req->body);
    curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c->h, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(c->h, CURLOPT_PRIVATE, c);
    curl_easy_setopt(c->h, CURLOPT_TIMEOUT, (long)cfg->timeout_s);
    curl_easy_setopt(c->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->h, CURLOPT_PROXY, "");
    c->rec->t_send = tn_now_s() - c->t0;
    if (curl_multi_add_handle(multi, c->h) != CURLM_OK) {
        curl_easy_cleanup(c->h);
        c->h = NULL;
        return -1;
    }
    return 0;
}

void svb_records_free(svb_record *recs, int n)
{
    if (!recs)
        return;
    for (int i = 0; i < n; i++)
        free(recs[i].chunk_t);
    free(recs);
}

int svb_client_run(const svb_client_cfg *cfg, const svb_request *reqs, int n, svb_record *recs,
                  double *duration_s, char *err, size_t errlen)
{
    *duration_s = 0;
    char url[1024];
    snprintf(url, sizeof url, "%s%s", cfg->url,
             cfg->api == SVB_API_CHAT ? "/v1/chat/completions" : "/v1/completions");
    for (int i = 0; i < n; i++) {
        memset(&recs[i], 0, sizeof recs[i]);
        recs[i].outcome = SVB_NOT_SENT;
        recs[i].input_len = reqs[i].input_len;
        recs[i].output_len = reqs[i].output_len;
        recs[i].prompt_tokens = recs[i].usage_tokens = -1;
    }
    conn *conns = calloc((size_t)n, sizeof *conns);
    CURLM *multi = curl_multi_init();
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (headers && cfg->auth_header) {
        struct curl_slist *h = curl_slist_append(headers, cfg->auth_header);
        if (!h) {
            curl_slist_free_all(headers);
            headers = NULL;
        } else {
            headers = h;
        }
    }
    int rc = TN_OK;
    if (!conns || !multi || !headers) {
        rc = tn_fail(err, errlen, TN_ERR_NOMEM, "cannot set up the HTTP client");
        goto out;
    }
    curl_multi_setopt(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)cfg->concurrency);
    double t0 = tn_now_s(), last_end = 0;
    int next = 0, running = 0, finished = 0;
    for (int i = 0; i < n; i++) {
        conns[i].rec = &recs[i];
        conns[i].t0 = t0;
    }
    while (finished < n) {
        double t = tn_now_s() - t0;
        if (cfg->stop_at_s > 0 && t >= cfg->stop_at_s)
            break;
        int sending = !(cfg->send_until_s > 0 && t >= cfg->send_until_s);
        if (!sending && next < n) {
            finished += n - next; /* the rest stays SVB_NOT_SENT */
            next = n;
        }
        while (next < n && running < cfg->concurrency && reqs[next].arrival_s <= t) {
            if (conn_start(multi, &conns[next], cfg, url, headers, &reqs[next]) != 0) {
                rc = tn_fail(err, errlen, TN_ERR_SYS, "cannot start an HTTP transfer");
                goto out;
            }
            next++;
            running++;
        }
        int still = 0;
        curl_multi_perform(multi, &still);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(multi, &left))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            conn *c = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&c);
            double te = tn_now_s() - t0;
            c->rec->outcome = judge(c, m->data.result, te);
            if (c->rec->t_end > last_end)
                last_end = c->rec->t_end;
            conn_close(multi, c);
            running--;
            finished++;
        }
        if (finished >= n)
            break;
        /* Sleep until the next event: data, the next arrival, or a bound. */
        double wait = 0.05;
        t = tn_now_s() - t0;
        if (next < n && running < cfg->concurrency && reqs[next].arrival_s - t < wait)
            wait = reqs[next].arrival_s - t;
        if (cfg->stop_at_s > 0 && cfg->stop_at_s - t < wait)
            wait = cfg->stop_at_s - t;
        if (cfg->send_until_s > 0 && next < n && cfg->send_until_s - t < wait)
            wait = cfg->send_until_s - t;
        if (wait > 0)
            curl_multi_poll(multi, NULL, 0, (int)(wait * 1000) + 1, NULL);
    }
    /* The time bound: what still runs is closed, which cancels it at the
     * server; its partial record stays for the trace. */
    double t_stop = tn_now_s() - t0;
    for (int i = 0; i < n; i++) {
        if (conns[i].h) {
            recs[i].outcome = SVB_ABORTED;
            recs[i].t_end = t_stop;
            snprintf(recs[i].why, sizeof recs[i].why, "still running at the time bound");
            last_end = t_stop;
        }
    }
    *duration_s = last_end;
out:
    if (conns) {
        for (int i = 0; i < n; i++)
            conn_close(multi, &conns[i]);
        free(conns);
    }
    curl_slist_free_all(headers);
    if (multi)
        curl_multi_cleanup(multi);
    return rc;
}

static size_t collect(char *p, size_t size, size_t nmemb, void *ud)
{
    return sb_append(ud, p, size * nmemb) == TN_OK ? size * nmemb : 0;
}

int svb_http_get(const char *url, const char *auth_header, char **body, char *err, size_t errlen)
{
    *body = NULL;
    CURL *h = curl_easy_init();
    struct curl_slist *headers = auth_header ? curl_slist_append(NULL, auth_header) : NULL;
    sbuf b;
    sb_init(&b);
    if (!h || (auth_header && !headers)) {
        curl_easy_cleanup(h);
        curl_slist_free_all(headers);
        return tn_fail(err, errlen, TN_ERR_NOMEM, "cannot set up the HTTP client");
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROXY, "");
    if (headers)
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    CURLcode res = curl_easy_perform(h);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    curl_slist_free_all(headers);
    if (res != CURLE_OK || code != 200) {
        sb_free(&b);
        return tn_fail(err, errlen, TN_ERR_PEER, "GET %s: %s", url,
                       res != CURLE_OK ? curl_easy_strerror(res) : "not HTTP 200");
    }
    if (!(*body = sb_take(&b)))
        return tn_fail(err, errlen, TN_ERR_NOMEM, "GET %s: out of memory", url);
    return TN_OK;
}
