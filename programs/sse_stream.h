/* One streaming OpenAI response (Server-Sent Events) read through libcurl's
 * multi interface, the part tandem-loadgen and tandem-servebench share: the
 * POST (JSON headers, a time limit, no proxy), the bytes split into events,
 * and each event's framing checked: it starts with "data: ", nothing comes
 * after [DONE], it is a JSON object, and an error event ({"error": ...}) is
 * told apart. What the chunks carry (tokens, finish reasons, usage) and
 * the request's outcome stay with each program. */
#ifndef TANDEM_PROGRAMS_SSE_STREAM_H
#define TANDEM_PROGRAMS_SSE_STREAM_H
#include <cJSON.h>
#include <curl/curl.h>
#include "common/sbuf.h"

typedef struct sse_stream sse_stream;

/* A chunk: an event that is a JSON object without "error"; now is its
 * arrival (tn_now_s, monotonic seconds). */
typedef void (*sse_chunk_fn)(sse_stream *s, const cJSON *chunk, double now);

struct sse_stream {
    CURL *h;
    sbuf in;            /* bytes not yet split into events; a non-200 answer's whole body */
    long http_code;     /* 0 until the first bytes arrive */
    int done_seen;      /* [DONE] arrived ... */
    double t_done;      /* ... at this time (tn_now_s) */
    int error_seen;     /* an error event arrived (why holds its message) */
    int bad;            /* the stream is malformed (why says how, unless an error
                           event came: its message wins) */
    char why[200];      /* what went wrong */
    sse_chunk_fn on_chunk;
    void *user;         /* the caller's, for on_chunk */
};

/* "Content-Type: application/json" and, when not NULL, auth_header (e.g.
 * "Authorization: Bearer ..."); NULL when out of memory. */
struct curl_slist *sse_json_headers(const char *auth_header);

/* POSTs body to url on multi, taking at most timeout_s; the easy handle's
 * CURLINFO_PRIVATE is s. Returns 0, or -1 when libcurl could not start it
 * (nothing is left to close then). */
int sse_stream_start(sse_stream *s, CURLM *multi, const char *url, const char *body,
                     struct curl_slist *headers, long timeout_s, sse_chunk_fn on_chunk,
                     void *user);
/* Marks the stream malformed; the first reason is kept, and none replaces
 * an error event's message. */
void sse_stream_bad(sse_stream *s, const char *why);

/* After the transfer ended with res: 1 when it failed (connection, time
 * limit), with why set unless an error event came first. */
int sse_stream_failed(sse_stream *s, CURLcode res);
/* For a non-200 answer: 1 when its body is an OpenAI error body; why is
 * "HTTP N: message" (or "... no OpenAI error body"). */
int sse_stream_http_error(sse_stream *s);
/* The end of a 200 stream: marks it malformed when bytes follow the last
 * event or [DONE] never came. Returns s->bad. */
int sse_stream_check_end(sse_stream *s);

/* Removes the transfer from multi and frees what the stream holds. */
void sse_stream_close(sse_stream *s, CURLM *multi);

#endif
