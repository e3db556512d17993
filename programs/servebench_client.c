#include "programs/servebench_client.h"
#include <cJSON.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/sbuf.h"
#include "common/status.h"
#include "common/sys.h"
#include "programs/sse_stream.h"

const char *const svb_outcome_names[SVB_N_OUTCOMES] = {
    "ok", "http_error", "stream_error", "malformed", "lost", "aborted", "not_sent",
};

/* One request in flight. */
typedef struct conn {
    svb_record *rec;
    sse_stream s;
    int n_finish;     /* chunks with a finish_reason */
    double t0;        /* the point's start (monotonic seconds) */
} conn;

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

/* One chunk of the stream (sse_stream.c checked its framing). */
static void on_chunk(sse_stream *s, const cJSON *j, double now)
{
    conn *c = s->user;
    svb_record *r = c->rec;
    double t = now - c->t0;
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(j, "usage");
    if (cJSON_IsObject(usage)) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens");
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens");
        if (!cJSON_IsNumber(p) || !cJSON_IsNumber(o))
            sse_stream_bad(s, "a usage object without prompt_tokens / completion_tokens");
        else {
            r->prompt_tokens = p->valueint;
            r->usage_tokens = o->valueint;
        }
    }
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(j, "choices");
    const cJSON *choice = cJSON_GetArrayItem(choices, 0);
    if (!cJSON_IsArray(choices) || (!choice && !cJSON_IsObject(usage))) {
        sse_stream_bad(s, "a chunk without choices");
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
            sse_stream_bad(s, "token_ids is not an array");
        if (k > 0 || text) {
            if (record_chunk(r, t) != 0)
                sse_stream_bad(s, "out of memory recording chunk times");
            r->id_tokens += k;
            if (k == 0)
                r->text_chunks++;
        }
        if (cJSON_IsString(fin))
            c->n_finish++;
        else if (fin && !cJSON_IsNull(fin))
            sse_stream_bad(s, "finish_reason is neither a string nor null");
    }
}

/* The outcome of a finished transfer. */
static svb_outcome judge(conn *c, CURLcode res, double t)
{
    svb_record *r = c->rec;
    sse_stream *s = &c->s;
    r->t_end = s->done_seen ? s->t_done - c->t0 : t;
    svb_outcome o;
    if (sse_stream_failed(s, res)) {
        o = s->error_seen ? SVB_STREAM_ERROR : SVB_LOST;
    } else if (s->http_code != 200) {
        sse_stream_http_error(s);
        o = SVB_HTTP_ERROR;
    } else if (s->error_seen) {
        o = SVB_STREAM_ERROR;
    } else if (sse_stream_check_end(s)) {
        o = SVB_MALFORMED;
    } else {
        if (c->n_finish != 1)
            sse_stream_bad(s, "not exactly one finish_reason");
        else if (r->usage_tokens < 0)
            sse_stream_bad(s, "no usage chunk (stream_options.include_usage was set)");
        else if (r->text_chunks == 0 && r->id_tokens != r->usage_tokens)
            sse_stream_bad(s, "the chunks' token ids disagree with usage.completion_tokens");
        o = s->bad ? SVB_MALFORMED : SVB_OK;
    }
    snprintf(r->why, sizeof r->why, "%s", s->why);
    return o;
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
    struct curl_slist *headers = sse_json_headers(cfg->auth_header);
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
            conn *c = &conns[next];
            c->rec->t_send = tn_now_s() - t0;
            if (sse_stream_start(&c->s, multi, url, reqs[next].body, headers, (long)cfg->timeout_s,
                                 on_chunk, c) != 0) {
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
            sse_stream *s = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&s);
            conn *c = s->user;
            double te = tn_now_s() - t0;
            c->rec->outcome = judge(c, m->data.result, te);
            if (c->rec->t_end > last_end)
                last_end = c->rec->t_end;
            sse_stream_close(s, multi);
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
        if (conns[i].s.h) {
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
            sse_stream_close(&conns[i].s, multi);
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
