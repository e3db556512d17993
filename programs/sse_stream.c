#include "programs/sse_stream.h"
#include <stdio.h>
#include <string.h>
#include "common/status.h"
#include "common/sys.h"

struct curl_slist *sse_json_headers(const char *auth_header)
{
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (headers && auth_header) {
        struct curl_slist *h = curl_slist_append(headers, auth_header);
        if (!h) {
            curl_slist_free_all(headers);
            return NULL;
        }
        headers = h;
    }
    return headers;
}

void sse_stream_bad(sse_stream *s, const char *why)
{
    if (!s->bad && !s->error_seen)
        snprintf(s->why, sizeof s->why, "%s", why);
    s->bad = 1;
}

/* One event "data: ..." without its blank line. */
static void on_event(sse_stream *s, const char *ev, size_t n, double now)
{
    if (n < 6 || memcmp(ev, "data: ", 6) != 0) {
        sse_stream_bad(s, "an event that does not start with 'data: '");
        return;
    }
    if (s->done_seen) {
        sse_stream_bad(s, "an event after [DONE]");
        return;
    }
    ev += 6;
    n -= 6;
    if (n == 6 && memcmp(ev, "[DONE]", 6) == 0) {
        s->done_seen = 1;
        s->t_done = now;
        return;
    }
    cJSON *j = cJSON_ParseWithLength(ev, n);
    if (!cJSON_IsObject(j)) {
        sse_stream_bad(s, "an event that is not a JSON object");
        cJSON_Delete(j);
        return;
    }
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (e) {
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e, "message");
        if (!s->error_seen)
            snprintf(s->why, sizeof s->why, "stream error: %s",
                     cJSON_IsString(msg) ? msg->valuestring : "(no message)");
        s->error_seen = 1;
    } else {
        s->on_chunk(s, j, now);
    }
    cJSON_Delete(j);
}

static size_t on_data(char *p, size_t size, size_t nmemb, void *ud)
{
    sse_stream *s = ud;
    size_t n = size * nmemb;
    double now = tn_now_s();
    if (sb_append(&s->in, p, n) != TN_OK)
        return 0; /* aborts the transfer: the caller counts it as failed */
    if (s->http_code == 0)
        curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &s->http_code);
    if (s->http_code != 200)
        return n; /* an error body: judged whole at the end */
    size_t start = 0;
    for (;;) {
        char *sep = strstr(s->in.p + start, "\n\n");
        if (!sep)
            break;
        on_event(s, s->in.p + start, (size_t)(sep - (s->in.p + start)), now);
        start = (size_t)(sep - s->in.p) + 2;
    }
    sb_consume(&s->in, start);
    return n;
}

int sse_stream_start(sse_stream *s, CURLM *multi, const char *url, const char *body,
                     struct curl_slist *headers, long timeout_s, sse_chunk_fn on_chunk,
                     void *user)
{
    memset(s, 0, sizeof *s);
    sb_init(&s->in);
    s->on_chunk = on_chunk;
    s->user = user;
    s->h = curl_easy_init();
    if (!s->h)
        return -1;
    curl_easy_setopt(s->h, CURLOPT_URL, url);
    curl_easy_setopt(s->h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(s->h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(s->h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(s->h, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(s->h, CURLOPT_PRIVATE, s);
    curl_easy_setopt(s->h, CURLOPT_TIMEOUT, timeout_s);
    curl_easy_setopt(s->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(s->h, CURLOPT_PROXY, "");
    if (curl_multi_add_handle(multi, s->h) != CURLM_OK) {
        curl_easy_cleanup(s->h);
        s->h = NULL;
        return -1;
    }
    return 0;
}

int sse_stream_failed(sse_stream *s, CURLcode res)
{
    curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &s->http_code);
    if (res == CURLE_OK)
        return 0;
    if (!s->error_seen)
        snprintf(s->why, sizeof s->why, "transfer failed: %s", curl_easy_strerror(res));
    return 1;
}

int sse_stream_http_error(sse_stream *s)
{
    cJSON *j = cJSON_ParseWithLength(s->in.p ? s->in.p : "", s->in.len);
    const cJSON *m =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "error"), "message");
    int openai = cJSON_IsString(m);
    snprintf(s->why, sizeof s->why, "HTTP %ld: %s", s->http_code,
             openai ? m->valuestring : "no OpenAI error body");
    cJSON_Delete(j);
    return openai;
}

int sse_stream_check_end(sse_stream *s)
{
    if (s->in.len != 0)
        sse_stream_bad(s, "bytes after the last event");
    else if (!s->done_seen)
        sse_stream_bad(s, "the stream ended without [DONE]");
    return s->bad;
}

void sse_stream_close(sse_stream *s, CURLM *multi)
{
    if (s->h) {
        curl_multi_remove_handle(multi, s->h);
        curl_easy_cleanup(s->h);
    }
    s->h = NULL;
    sb_free(&s->in);
}
