/* The router's HTTP front end on libmicrohttpd: the OpenAI-compatible API
 * (POST /v1/completions, /v1/chat/completions, GET /v1/models), /healthz and
 * /metrics.
 *
 * One thread per connection, so a handler may block: it validates the
 * request, hands it to the core thread, then waits on the request's eventfd
 * together with the client socket. A client that closes its socket while
 * waiting (or while its SSE stream is open) is noticed at once (POLLRDHUP)
 * and its request is cancelled everywhere. Streaming responses start only
 * after the first token (or a failure), so early failures still get a real
 * HTTP status. */
#include "router/router.h"
#include "common/status.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <malloc.h>
#include <sys/resource.h>
#include "router/api_key.h"
#include "router/http_front.h"
#include "router/logprobs_view.h"
#include "router/schema_grammar.h"
#include "common/sys.h"

#define WHO "router"
#define SSE_BLOCK 16384

/* One choice of a response: a router request of its own (n > 1, best_of
 * and a list of prompts are independent placements, docs/API.md) and its
 * SSE progress. */
typedef struct http_choice {
    router_request *req;    /* a reference */
    int index;              /* "index" in the response: prompt * n + branch */
    int counts_prompt;      /* the first branch of its prompt: its prompt counts in usage */
    int n_sent;             /* tokens already in chunks */
    size_t text_sent;       /* text bytes already in chunks */
    int role_sent;          /* chat: the assistant-role chunk went out */
    size_t reasoning_sent;  /* chat formats: reasoning bytes already in chunks */
    int tools_sent;         /* chat formats: tool calls already in chunks */
    int finish_sent;        /* its finish chunk went out */
    int prompt;             /* which prompt (hc->echo's index) */
    int echo_sent;          /* streaming echo: the prompt's chunk went out */
    long echo_chars;        /* echo with logprobs: characters before the first
                               generated token (its text_offset) */
} http_choice;

typedef struct http_conn {
    router_ctx *ctx;
    int metrics_only;       /* arrived on the --metrics-port listener */
    sbuf body;
    int body_too_large;
    size_t declared;        /* Content-Length, 0 if none (chunked) */
    size_t reserved;        /* bytes held in ctx->http_mem_used for this request */
    size_t body_budget;     /* of which for the body buffer's capacity */
    size_t parse_budget;    /* of which for the parse and tokenization */
    int over_budget;        /* the body did not fit the memory budget: 503 */
    int fd;                 /* the client's socket */
    http_choice *choices;   /* one per prompt and best_of branch, once submitted */
    int n_choices;
    int n_prompts;
    int n_return;           /* choices returned per prompt (n; best_of picks them) */
    api_kind kind;
    char resp_id[40];       /* "cmpl-..." / "chatcmpl-..." */
    sbuf pending;           /* SSE: formatted, not yet handed to MHD */
    int final_sent;         /* every finish chunk (+usage) and [DONE] formatted */
    sbuf *echo;             /* completions with echo: each prompt's text (valid
                               UTF-8), which starts its choices' text */
} http_conn;

/* ------------------------------------------------------------ responses */

/* Every response carries x-request-id: the client's own when it is sane
 * (api_request_id_ok), else 32 random hex digits. */
static void add_request_id(struct MHD_Connection *c, struct MHD_Response *resp)
{
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-request-id");
    char gen[33];
    if (!api_request_id_ok(v)) {
        snprintf(gen, sizeof gen, "%016llx%016llx", (unsigned long long)tn_random_u64(),
                 (unsigned long long)tn_random_u64());
        v = gen;
    }
    MHD_add_response_header(resp, "x-request-id", v);
}

/* One response with a copied body; header/value (or NULL) adds one more
 * header (WWW-Authenticate on a 401, Connection: close on a refusal made
 * before the body was read). */
static enum MHD_Result respond_with(struct MHD_Connection *c, int status,
                                    const char *content_type, const char *body, size_t len,
                                    const char *header, const char *value)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (header)
        MHD_add_response_header(resp, header, value);
    add_request_id(c, resp);
    /* 429 (at the active request limit) and 503 (no worker registered for
     * the model) are temporary: tell clients when to come back instead of
     * letting them retry in a tight loop. One second is about how long a
     * short request holds its slot, and how often workers heartbeat. */
    if (status == 429 || status == 503)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static enum MHD_Result respond(struct MHD_Connection *c, int status,
                               const char *content_type, const char *body, size_t len)
{
    return respond_with(c, status, content_type, body, len, NULL, NULL);
}

/* An OpenAI-style error body (api_error_json), with one more header or none. */
static enum MHD_Result respond_error_with(struct MHD_Connection *c, const api_error *e,
                                          const char *header, const char *value)
{
    char *json = api_error_json(e);
    if (!json)
        return MHD_NO;
    enum MHD_Result rc =
        respond_with(c, e->http_status, "application/json", json, strlen(json), header, value);
    free(json);
    return rc;
}

static enum MHD_Result respond_error(struct MHD_Connection *c, const api_error *e)
{
    return respond_error_with(c, e, NULL, NULL);
}

static enum MHD_Result respond_sb(struct MHD_Connection *c, int status,
                                  const char *type, sbuf *b)
{
    if (b->oom) {
        sb_free(b);
        api_error e;
        api_error_set(&e, 500, "server_error", NULL, NULL, "router out of memory");
        return respond_error(c, &e);
    }
    enum MHD_Result rc = respond(c, status, type, b->p ? b->p : "", b->len);
    sb_free(b);
    return rc;
}

/* ------------------------------------------------------------ memory budget */

/* --http-memory-budget-mb bounds what request bodies and their parse hold,
 * all requests together: a request reserves before it allocates (its body
 * buffer's capacity, then api_parse_cost), and one that does not fit is
 * answered 503 with Retry-After instead of growing the process. */
static int mem_take_locked(http_conn *hc, size_t n)
{
    router_ctx *ctx = hc->ctx;
    size_t budget = (size_t)ctx->cfg.http_memory_budget_mb << 20;
    int ok = ctx->http_mem_used <= budget && n <= budget - ctx->http_mem_used;
    if (ok) {
        ctx->http_mem_used += n;
        hc->reserved += n;
    }
    return ok ? 0 : -1;
}

static int mem_take(http_conn *hc, size_t n)
{
    pthread_mutex_lock(&hc->ctx->lock);
    int rc = mem_take_locked(hc, n);
    pthread_mutex_unlock(&hc->ctx->lock);
    return rc;
}

static void mem_give_back(http_conn *hc, size_t n)
{
    if (n > hc->reserved)
        n = hc->reserved;
    pthread_mutex_lock(&hc->ctx->lock);
    hc->ctx->http_mem_used -= n;
    pthread_mutex_unlock(&hc->ctx->lock);
    hc->reserved -= n;
}

/* The capacity sb_reserve grows a buffer of capacity cap to for need bytes. */
static size_t grown_capacity(size_t cap, size_t need)
{
    cap = cap ? cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    return cap;
}

/* Makes room for n more body bytes within the budget; -1 if it has none. */
static int body_room(http_conn *hc, size_t n)
{
    size_t need = hc->body.len + n + 1;
    if (hc->declared && need <= hc->declared + 1)
        need = hc->declared + 1; /* the whole declared body at once */
    if (need <= hc->body.cap)
        return 0;
    size_t cap = grown_capacity(hc->body.cap, need);
    if (cap > hc->body_budget) {
        if (mem_take(hc, cap - hc->body_budget) != 0)
            return -1;
        hc->body_budget = cap;
    }
    return sb_reserve(&hc->body, need - 1 - hc->body.len) == TN_OK ? 0 : -1;
}

/* A declared body reserves, with the headers, its buffer and what a text
 * prompt of that size takes to parse and tokenize (api_parse_cost: five
 * times the text), so that requests the budget cannot carry are refused
 * before their bodies are read rather than after. */
static int reserve_declared(http_conn *hc, size_t declared)
{
    hc->declared = declared;
    if (body_room(hc, 0) != 0)
        return -1;
    size_t parse = declared > SIZE_MAX / 8 ? SIZE_MAX / 8 : declared * 5;
    if (mem_take(hc, parse) != 0)
        return -1;
    hc->parse_budget = parse;
    return 0;
}

static void refuse_over_budget(api_error *e, const router_ctx *ctx)
{
    api_error_set(e, 503, "server_error", NULL, "no_capacity",
                  "The router's request memory (--http-memory-budget-mb %d) is in use; retry "
                  "later.", ctx->cfg.http_memory_budget_mb);
}

/* ------------------------------------------------------------ waiting */

/* Waits until the core signals one of hc's requests (they share one
 * eventfd), the client goes away or the router shuts down. Returns 0 on a
 * signal, -1 otherwise. */
static int wait_update(http_conn *hc)
{
    int fd = hc->choices[0].req->notify_fd;
    for (;;) {
        struct pollfd p[3] = {
            {.fd = fd, .events = POLLIN},
            {.fd = hc->fd, .events = POLLRDHUP},
            {.fd = hc->ctx->shutdown_fd, .events = POLLIN},
        };
        int n = poll(p, 3, -1); /* a negative fd (no client socket) is skipped */
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (p[2].revents || (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
            return -1;
        if (p[0].revents) {
            tn_wakefd_drain(fd);
            return 0;
        }
    }
}

/* Cancels every choice still running. Lock held. */
static void cancel_choices(http_conn *hc, const char *why)
{
    for (int i = 0; i < hc->n_choices; i++) {
        router_request *r = hc->choices[i].req;
        if (!r->finished && why)
            tn_log(WHO, "request %s: %s, cancelling", r->id, why);
        request_queue_cancel(hc->ctx, r);
    }
}

static void cancel_request(http_conn *hc)
{
    pthread_mutex_lock(&hc->ctx->lock);
    cancel_choices(hc, "client disconnected");
    pthread_mutex_unlock(&hc->ctx->lock);
}

/* The first choice that failed, or NULL. Lock held. */
static const router_request *failed_choice(const http_conn *hc)
{
    for (int i = 0; i < hc->n_choices; i++) {
        const router_request *r = hc->choices[i].req;
        if (r->finished && r->finish_reason == TANDEM__V1__FINISH_REASON__FINISH_REASON_ERROR)
            return r;
    }
    return NULL;
}

/* Waits until every choice has output (until_finished = 0) or has
 * finished, or one failed. Returns 0, or -1 when the client left (the
 * requests are then cancelled). */
static int wait_for(http_conn *hc, int until_finished)
{
    router_ctx *ctx = hc->ctx;
    for (;;) {
        pthread_mutex_lock(&ctx->lock);
        int ready = failed_choice(hc) != NULL;
        if (!ready) {
            ready = 1;
            for (int i = 0; i < hc->n_choices; i++) {
                const router_request *r = hc->choices[i].req;
                ready &= r->finished || (!until_finished && r->n_out > 0);
            }
        }
        pthread_mutex_unlock(&ctx->lock);
        if (ready)
            return 0;
        if (wait_update(hc) != 0) {
            cancel_request(hc);
            return -1;
        }
    }
}

/* ------------------------------------------------------------ output */

static int with_token_ids(const http_conn *hc, const api_request *ar)
{
    return ar->return_token_ids || !codec_has_text(&hc->ctx->codec);
}

/* Appends sanitized text[from..to) of r to a scratch buffer. */
static void text_slice(sbuf *dst, const router_request *r, size_t from, size_t to)
{
    sb_reset(dst);
    if (to > from)
        utf8_sanitize_append(dst, r->text.p + from, to - from);
}

/* The finish reason a response reports: "tool_calls" when a chat format
 * produced tool calls and a stop token ended the output. */
static const char *response_finish_reason(const router_request *r)
{
    int n_tools = 0;
    request_tool_calls(r, &n_tools);
    if (n_tools && r->finish_reason == TANDEM__V1__FINISH_REASON__FINISH_REASON_STOP)
        return "tool_calls";
    return finish_reason_str(r->finish_reason);
}

/* Tool calls [from, to) of r in the API's shape; ids are generated when
 * the model gave none. ids must hold (to - from) * 48 bytes. */
static void tool_calls_slice(const router_request *r, int from, int to, api_tool_call *out,
                             char *ids)
{
    int n = 0;
    const chat_tool_call *tc = request_tool_calls(r, &n);
    for (int i = from; i < to && i < n; i++) {
        char *id = ids + (size_t)(i - from) * 48;
        if (tc[i].id && tc[i].id[0])
            snprintf(id, 48, "%s", tc[i].id);
        else
            snprintf(id, 48, "call_%s_%d", r->id, i);
        out[i - from] = (api_tool_call){.id = id, .name = tc[i].name ? tc[i].name : "",
                                        .arguments = tc[i].arguments ? tc[i].arguments : ""};
    }
}

/* Sets o's reasoning and tool calls to what c's request produced up to
 * (reasoning byte, tool count) and advances c's cursors. tools/ids:
 * scratch. */
static void chat_parts(http_choice *c, api_output *o, size_t reasoning_end, int tools_end,
                       api_tool_call **tools, char **ids)
{
    router_request *r = c->req;
    o->reasoning = r->reasoning.p ? r->reasoning.p + c->reasoning_sent : "";
    o->reasoning_len = reasoning_end > c->reasoning_sent ? reasoning_end - c->reasoning_sent : 0;
    c->reasoning_sent += o->reasoning_len;
    o->n_tool_calls = 0;
    o->tool_index = c->tools_sent;
    int n = tools_end - c->tools_sent;
    free(*tools);
    free(*ids);
    *tools = NULL;
    *ids = NULL;
    if (n > 0 && (*tools = calloc((size_t)n, sizeof **tools)) && (*ids = calloc((size_t)n, 48))) {
        tool_calls_slice(r, c->tools_sent, tools_end, *tools, *ids);
        o->tool_calls = *tools;
        o->n_tool_calls = n;
        c->tools_sent = tools_end;
    }
}

/* usage over the choices: each prompt once, every generated token (those
 * of best_of candidates not returned too). */
static void usage_counts(const http_conn *hc, int *prompt_tokens, int *completion_tokens)
{
    *prompt_tokens = *completion_tokens = 0;
    for (int i = 0; i < hc->n_choices; i++) {
        const http_choice *c = &hc->choices[i];
        if (c->counts_prompt)
            *prompt_tokens += c->req->n_prompt;
        *completion_tokens += c->req->n_out;
    }
}

/* Formats the SSE events of choice c that its state allows and that are
 * not formatted yet into hc->pending. Lock held. */
static void format_choice_events(http_conn *hc, http_choice *c, const char *fp)
{
    router_request *r = c->req;
    sbuf t;
    sb_init(&t);
    api_tool_call *tools = NULL;
    char *ids = NULL;
    api_output o = {0};
    o.index = c->index;
    o.fingerprint = fp;
    o.usage_null = r->include_usage;
    o.with_token_ids = r->with_token_ids;
    o.omit_empty_content = r->parser != NULL;
    o.with_logprobs = r->logprobs >= 0;
    lp_view lpv;
    lp_view_init(&lpv);
    if (hc->kind == API_CHAT && !c->role_sent) {
        o.text = "";
        api_sse_chat_chunk(&hc->pending, hc->resp_id, r->created, r->model, &o, 1);
        c->role_sent = 1;
    }
    if (hc->echo && !c->echo_sent) {
        /* the prompt's text, as a chunk of its own before the first token's */
        const sbuf *p = &hc->echo[c->prompt];
        o.text = p->p ? p->p : "";
        o.text_len = p->len;
        if (o.with_logprobs) {
            if (lp_view_build_prompt(&lpv, &hc->ctx->codec, r, &c->echo_chars) != 0)
                hc->pending.oom = 1;
            o.logprobs = lpv.tokens;
            o.n_logprobs = lpv.n;
        }
        api_sse_completion_chunk(&hc->pending, hc->resp_id, r->created, r->model, &o);
        o.logprobs = NULL;
        o.n_logprobs = 0;
        c->echo_sent = 1;
    }
    while (c->n_sent < r->n_out) {
        int i = c->n_sent;
        size_t end = r->out_text_end[i] < r->text.len ? r->out_text_end[i] : r->text.len;
        size_t limit = end;
        if (!r->finished) {
            /* Hold back whatever could still become a stop string, then an
             * incomplete UTF-8 character at the cut. */
            if (r->max_stop_len > 1) {
                size_t hold = r->max_stop_len - 1;
                limit = end > hold ? end - hold : 0;
            }
            limit = utf8_stable_prefix(r->text.p ? r->text.p : "", limit);
        }
        if (limit < c->text_sent)
            limit = c->text_sent;
        text_slice(&t, r, c->text_sent, limit);
        c->text_sent = limit;
        o.text = t.p ? t.p : "";
        o.text_len = t.len;
        o.token_ids = &r->out[i];
        o.n_token_ids = 1;
        o.finish_reason = NULL;
        if (r->parser)
            chat_parts(c, &o, r->out_reasoning_end[i], r->out_tools_end[i], &tools, &ids);
        if (lp_view_build(&lpv, &hc->ctx->codec, r, i, i + 1) != 0)
            hc->pending.oom = 1;
        for (int j = 0; j < lpv.n; j++)
            lpv.tokens[j].text_offset += c->echo_chars;
        o.logprobs = lpv.tokens;
        o.n_logprobs = lpv.n;
        c->n_sent++;
        /* With a chat format, tokens that show nothing (channel headers)
         * make no chunk unless the client wants every token id. */
        if (r->parser && !o.text_len && !o.reasoning_len && !o.n_tool_calls && !o.with_token_ids &&
            !o.n_logprobs)
            continue;
        if (hc->kind == API_CHAT)
            api_sse_chat_chunk(&hc->pending, hc->resp_id, r->created, r->model, &o, 0);
        else
            api_sse_completion_chunk(&hc->pending, hc->resp_id, r->created, r->model, &o);
    }
    if (r->finished && !c->finish_sent &&
        r->finish_reason != TANDEM__V1__FINISH_REASON__FINISH_REASON_ERROR) {
        text_slice(&t, r, c->text_sent, r->text.len);
        c->text_sent = r->text.len;
        o.text = t.p ? t.p : "";
        o.text_len = t.len;
        o.token_ids = NULL;
        o.n_token_ids = 0;
        o.n_logprobs = 0;
        o.finish_reason = response_finish_reason(r);
        if (r->parser) {
            int n_tools = 0;
            request_tool_calls(r, &n_tools);
            chat_parts(c, &o, r->reasoning.len, n_tools, &tools, &ids);
        }
        if (hc->kind == API_CHAT)
            api_sse_chat_chunk(&hc->pending, hc->resp_id, r->created, r->model, &o, 0);
        else
            api_sse_completion_chunk(&hc->pending, hc->resp_id, r->created, r->model, &o);
        c->finish_sent = 1;
    }
    sb_free(&t);
    lp_view_free(&lpv);
    free(tools);
    free(ids);
}

/* Formats every SSE event that the choices' state allows: each choice's
 * chunks (its index in each), then, once all finished, the usage chunk and
 * [DONE]. A failed choice ends the stream with its error (and cancels the
 * others). Lock held. */
static void format_events(http_conn *hc)
{
    if (hc->final_sent)
        return;
    const router_request *first = hc->choices[0].req;
    char fp[API_MAX_MODEL + 16];
    api_system_fingerprint(fp, sizeof fp, first->model);
    for (int i = 0; i < hc->n_choices; i++)
        format_choice_events(hc, &hc->choices[i], fp);
    const router_request *failed = failed_choice(hc);
    int all_done = 1;
    for (int i = 0; i < hc->n_choices; i++)
        all_done &= hc->choices[i].finish_sent;
    if (failed) {
        api_sse_error(&hc->pending, &failed->error);
        cancel_choices(hc, NULL);
    } else if (all_done && first->include_usage) {
        int pt, ct;
        usage_counts(hc, &pt, &ct);
        api_sse_usage_chunk(&hc->pending, hc->kind, hc->resp_id, first->created, first->model, fp,
                            pt, ct);
    }
    if (failed || all_done) {
        api_sse_done(&hc->pending);
        hc->final_sent = 1;
    }
}

static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    http_conn *hc = cls;
    router_ctx *ctx = hc->ctx;
    for (;;) {
        pthread_mutex_lock(&ctx->lock);
        if (hc->pending.len == 0)
            format_events(hc);
        if (hc->pending.oom) {
            pthread_mutex_unlock(&ctx->lock);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (hc->pending.len > 0) {
            size_t n = hc->pending.len < max ? hc->pending.len : max;
            memcpy(buf, hc->pending.p, n);
            sb_consume(&hc->pending, n);
            pthread_mutex_unlock(&ctx->lock);
            return (ssize_t)n;
        }
        int done = hc->final_sent;
        pthread_mutex_unlock(&ctx->lock);
        if (done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (wait_update(hc) != 0) {
            cancel_request(hc);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

/* The sum of a finished choice's token logprobs (best_of ranks by it). */
static double cumulative_logprob(const router_request *r)
{
    double sum = 0;
    for (int i = 0; r->out_lp && i < r->n_out; i++)
        sum += r->out_lp[i].logprob;
    return sum;
}

/* best_of > n: keeps, for each prompt, the n candidates with the highest
 * cumulative logprob (ties: the lower branch), indexed prompt * n + rank.
 * order receives the choices to return, in index order. Lock held. */
static int pick_choices(const http_conn *hc, int *order)
{
    int per = hc->n_choices / hc->n_prompts, n = hc->n_return, k = 0;
    for (int p = 0; p < hc->n_prompts; p++) {
        int taken[API_MAX_CHOICES] = {0};
        for (int rank = 0; rank < n; rank++) {
            int best = -1;
            double best_lp = 0;
            for (int b = 0; b < per; b++) {
                int ci = p * per + b;
                double lp = cumulative_logprob(hc->choices[ci].req);
                if (!taken[b] && (best < 0 || lp > best_lp)) {
                    best = b;
                    best_lp = lp;
                }
            }
            taken[best] = 1;
            order[k++] = p * per + best;
        }
    }
    return k;
}

typedef struct choice_body {
    sbuf text;
    api_tool_call *tools;
    char *ids;
    lp_view lpv;
    lp_view prompt_lpv;      /* echo with logprobs: the prompt's tokens */
    api_lp_token *echo_lp;   /* ...followed by the generated ones */
} choice_body;

/* Fills o with what choice c produced (the whole output). Lock held.
 * -1 on OOM. */
static int final_output(http_conn *hc, const http_choice *c, int index, const char *fp,
                        choice_body *cb, api_output *o)
{
    const router_request *r = c->req;
    sb_init(&cb->text);
    lp_view_init(&cb->lpv);
    lp_view_init(&cb->prompt_lpv);
    text_slice(&cb->text, r, 0, r->text.len);
    if (hc->echo) {
        const sbuf *p = &hc->echo[c->prompt];
        sbuf t;
        sb_init(&t);
        sb_append(&t, p->p ? p->p : "", p->len);
        sb_append(&t, cb->text.p ? cb->text.p : "", cb->text.len);
        sb_free(&cb->text);
        cb->text = t;
    }
    int n_tools = 0;
    request_tool_calls(r, &n_tools);
    cb->tools = n_tools ? calloc((size_t)n_tools, sizeof *cb->tools) : NULL;
    cb->ids = n_tools ? calloc((size_t)n_tools, 48) : NULL;
    int failed = n_tools && (!cb->tools || !cb->ids);
    if (n_tools && !failed)
        tool_calls_slice(r, 0, n_tools, cb->tools, cb->ids);
    if (lp_view_build(&cb->lpv, &hc->ctx->codec, r, 0, r->n_out) != 0)
        failed = 1;
    *o = (api_output){
        .index = index,
        .fingerprint = fp,
        .text = cb->text.p ? cb->text.p : "",
        .text_len = cb->text.len,
        .reasoning = r->reasoning.p ? r->reasoning.p : "",
        .reasoning_len = r->reasoning.len,
        .tool_calls = cb->tools,
        .n_tool_calls = failed ? 0 : n_tools,
        .token_ids = r->out,
        .n_token_ids = r->n_out,
        .with_token_ids = r->with_token_ids,
        .finish_reason = response_finish_reason(r),
        .with_logprobs = r->logprobs >= 0,
        .logprobs = cb->lpv.tokens,
        .n_logprobs = cb->lpv.n,
    };
    if (hc->echo && r->logprobs >= 0 && !failed) {
        /* echo: the prompt's tokens first, the generated ones after its text */
        long chars = 0;
        failed = lp_view_build_prompt(&cb->prompt_lpv, &hc->ctx->codec, r, &chars) != 0;
        const int n = cb->prompt_lpv.n + cb->lpv.n;
        if (!failed && n > 0 && !(cb->echo_lp = calloc((size_t)n, sizeof *cb->echo_lp)))
            failed = 1;
        if (!failed && n > 0) {
            for (int i = 0; i < cb->prompt_lpv.n; i++)
                cb->echo_lp[i] = cb->prompt_lpv.tokens[i];
            for (int i = 0; i < cb->lpv.n; i++) {
                cb->echo_lp[cb->prompt_lpv.n + i] = cb->lpv.tokens[i];
                cb->echo_lp[cb->prompt_lpv.n + i].text_offset += chars;
            }
            o->logprobs = cb->echo_lp;
            o->n_logprobs = n;
        }
    }
    return failed || cb->text.oom ? -1 : 0;
}

static enum MHD_Result respond_final(http_conn *hc, struct MHD_Connection *c)
{
    router_ctx *ctx = hc->ctx;
    pthread_mutex_lock(&ctx->lock);
    const router_request *failed = failed_choice(hc);
    if (failed) {
        api_error e = failed->error;
        cancel_choices(hc, NULL);
        pthread_mutex_unlock(&ctx->lock);
        return respond_error(c, &e);
    }
    const router_request *first = hc->choices[0].req;
    int order[API_MAX_CHOICES];
    int n = 0;
    if (hc->n_return * hc->n_prompts < hc->n_choices)
        n = pick_choices(hc, order);
    else
        for (n = 0; n < hc->n_choices; n++)
            order[n] = n;
    choice_body *cb = calloc((size_t)n, sizeof *cb);
    api_output *o = calloc((size_t)n, sizeof *o);
    char fp[API_MAX_MODEL + 16];
    api_system_fingerprint(fp, sizeof fp, first->model);
    sbuf b;
    sb_init(&b);
    int oom = !cb || !o;
    for (int i = 0; !oom && i < n; i++)
        oom = final_output(hc, &hc->choices[order[i]], i, fp, &cb[i], &o[i]) != 0;
    int pt, ct;
    usage_counts(hc, &pt, &ct);
    if (!oom && hc->kind == API_CHAT)
        api_chat_body_n(&b, hc->resp_id, first->created, first->model, o, n, pt, ct);
    else if (!oom)
        api_completion_body_n(&b, hc->resp_id, first->created, first->model, o, n, pt, ct);
    if (oom)
        b.oom = 1;
    pthread_mutex_unlock(&ctx->lock);
    for (int i = 0; cb && i < n; i++) {
        sb_free(&cb[i].text);
        lp_view_free(&cb[i].lpv);
        lp_view_free(&cb[i].prompt_lpv);
        free(cb[i].echo_lp);
        free(cb[i].tools);
        free(cb[i].ids);
    }
    free(cb);
    free(o);
    return respond_sb(c, 200, "application/json", &b);
}

/* ------------------------------------------------------------ generation */

/* The prompts of a request as token ids (chat: the rendered conversation).
 * Returns 0, or -1 with e filled; *prompts (n_prompts entries) is freed by
 * the caller with free_prompts. */
typedef struct prompt_ids {
    int32_t *ids;
    int n;
} prompt_ids;

static void free_prompts(prompt_ids *p, int n)
{
    for (int i = 0; p && i < n; i++)
        free(p[i].ids);
    free(p);
}

static int tokenize_prompts(http_conn *hc, api_request *ar, prompt_ids **out, int *n_out,
                            api_error *e)
{
    router_ctx *ctx = hc->ctx;
    char err[300];
    int n = ar->kind == API_CHAT ? 1 : ar->n_prompts;
    prompt_ids *p = calloc((size_t)n, sizeof *p);
    if (!p) {
        api_error_set(e, 500, "server_error", NULL, NULL, "router out of memory");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        int rc = 0;
        if (ar->kind == API_CHAT) {
            if (codec_render_chat(&ctx->codec, ar, &p[i].ids, &p[i].n, err, sizeof err) != 0) {
                api_error_set(e, 400, "invalid_request_error", "messages", "unsupported_value",
                              "%s", err);
                rc = -1;
            }
        } else if (ar->prompts[i].text) {
            if (codec_encode(&ctx->codec, ar->prompts[i].text, ar->prompts[i].text_len,
                             &p[i].ids, &p[i].n, err, sizeof err) != 0) {
                api_error_set(e, 400, "invalid_request_error", "prompt", "invalid_type", "%s", err);
                rc = -1;
            }
        } else {
            p[i].ids = ar->prompts[i].ids;
            p[i].n = ar->prompts[i].n_ids;
            ar->prompts[i].ids = NULL;
            ar->prompts[i].n_ids = 0;
        }
        if (rc == 0 && p[i].n == 0) {
            api_error_set(e, 400, "invalid_request_error",
                          ar->kind == API_CHAT ? "messages" : "prompt", NULL,
                          "The prompt is empty after tokenization.");
            rc = -1;
        }
        if (rc != 0) {
            free_prompts(p, n);
            return -1;
        }
    }
    *out = p;
    *n_out = n;
    return 0;
}

static void free_echo(http_conn *hc)
{
    for (int i = 0; hc->echo && i < hc->n_prompts; i++)
        sb_free(&hc->echo[i]);
    free(hc->echo);
    hc->echo = NULL;
}

/* echo: each prompt's text, as the client sent it, or its token ids
 * decoded (special tokens leave no text, as in outputs; no text with
 * --tokenizer none); made valid UTF-8. Sets hc->n_prompts. -1 on OOM. */
static int echo_texts(http_conn *hc, const api_request *ar, const prompt_ids *p, int n)
{
    hc->echo = calloc((size_t)n, sizeof *hc->echo);
    if (!hc->echo)
        return -1;
    hc->n_prompts = n;
    int oom = 0;
    sbuf raw;
    sb_init(&raw);
    for (int i = 0; i < n && !oom; i++) {
        sb_init(&hc->echo[i]);
        sb_reset(&raw);
        if (ar->prompts[i].text)
            sb_append(&raw, ar->prompts[i].text, ar->prompts[i].text_len);
        else
            for (int k = 0; k < p[i].n; k++)
                codec_decode_token(&hc->ctx->codec, p[i].ids[k], &raw);
        if (raw.len)
            utf8_sanitize_append(&hc->echo[i], raw.p, raw.len);
        oom = raw.oom || hc->echo[i].oom;
    }
    sb_free(&raw);
    if (oom)
        free_echo(hc);
    return oom ? -1 : 0;
}

static int dup_array(void **dst, const void *src, size_t bytes)
{
    *dst = NULL;
    if (!bytes)
        return 0;
    *dst = malloc(bytes);
    if (!*dst)
        return -1;
    memcpy(*dst, src, bytes);
    return 0;
}

/* One router request: prompt ids (taken), branch (its seed is the request's
 * + branch). Lock held. Returns NULL with e filled. */
static router_request *make_choice(http_conn *hc, const api_request *ar, int32_t *ids, int n_ids,
                                   const int32_t *gcode, int n_gcode, uint64_t seed,
                                   int notify_from, api_error *e)
{
    router_ctx *ctx = hc->ctx;
    char err[300];
    router_request *r = request_new(ctx, ORIGIN_HTTP);
    if (!r) {
        free(ids);
        api_error_set(e, 500, "server_error", NULL, NULL, "router out of memory");
        return NULL;
    }
    r->kind = ar->kind;
    snprintf(r->model, sizeof r->model, "%s", ar->model);
    r->prompt = ids;
    r->n_prompt = n_ids;
    r->grammar = (uint32_t *)gcode;
    r->n_grammar = n_gcode;
    r->temperature = (float)ar->temperature;
    r->top_p = (float)ar->top_p;
    r->top_k = ar->top_k;
    r->seed = seed;
    r->stream = ar->stream;
    r->include_usage = ar->include_usage;
    r->with_token_ids = with_token_ids(hc, ar);
    r->presence_penalty = (float)ar->presence_penalty;
    r->frequency_penalty = (float)ar->frequency_penalty;
    r->repetition_penalty = (float)ar->repetition_penalty;
    r->logprobs = ar->logprobs;
    r->prompt_logprobs = ar->echo && ar->logprobs >= 0;
    /* best_of ranks candidates by their logprobs: the workers send them. */
    r->score_logprobs = ar->best_of > ar->n;
    int oom = 0;
    if (notify_from >= 0) {
        /* Every choice of one HTTP request wakes the same waiter. */
        close(r->notify_fd);
        r->notify_fd = dup(notify_from);
        oom |= r->notify_fd < 0;
    }
    /* structured outputs: every choice holds its own copy of the program */
    oom |= dup_array((void **)&r->grammar, gcode, (size_t)n_gcode * sizeof *gcode) != 0;
    if (!oom)
        r->n_grammar = n_gcode;
    oom |= dup_array((void **)&r->bias_tokens, ar->bias_tokens,
                     (size_t)ar->n_bias * sizeof *ar->bias_tokens) != 0;
    oom |= dup_array((void **)&r->bias_values, ar->bias_values,
                     (size_t)ar->n_bias * sizeof *ar->bias_values) != 0;
    if (!oom)
        r->n_bias = ar->n_bias;
    for (int i = 0; i < ar->n_stop && !oom; i++) {
        size_t l = strlen(ar->stop[i]);
        oom |= dup_array((void **)&r->stop_strs[i], ar->stop[i], l + 1) != 0;
        if (!oom) {
            r->n_stop_strs = i + 1;
            if (l > r->max_stop_len)
                r->max_stop_len = l;
        }
    }
    if (oom) {
        request_unref(r);
        api_error_set(e, 500, "server_error", NULL, NULL, "router out of memory");
        return NULL;
    }
    int rc;
    if (ar->kind == API_CHAT && codec_has_chat_format(&ctx->codec)) {
        /* The chat format's own stop tokens (end of turn, tool call) join
         * the client's, and a parser splits the output into reasoning,
         * content and tool calls. */
        int32_t stops[64 + 8];
        int n = ar->n_stop_token_ids < 64 ? ar->n_stop_token_ids : 64;
        if (n > 0) /* stop_token_ids is NULL when the request has none */
            memcpy(stops, ar->stop_token_ids, (size_t)n * sizeof *stops);
        n += codec_chat_stop_ids(&ctx->codec, stops + n, 8);
        rc = request_admit(ctx, r, ar->max_tokens, stops, n, ar->ignore_eos, e);
        if (rc == 0 && codec_chat_parser_new(&ctx->codec, &r->parser, err, sizeof err) != 0) {
            api_error_set(e, 500, "server_error", NULL, NULL, "%s", err);
            rc = -1;
        }
    } else {
        rc = request_admit(ctx, r, ar->max_tokens, ar->stop_token_ids, ar->n_stop_token_ids,
                           ar->ignore_eos, e);
    }
    if (rc != 0) {
        request_unref(r);
        return NULL;
    }
    return r;
}

/* Turns a parsed API request into router requests, one per choice
 * (prompt x best_of branches; tokenized, admitted), and queues them for
 * the core. Returns 0, or -1 with e filled. */
static int submit(http_conn *hc, api_request *ar, api_error *e)
{
    router_ctx *ctx = hc->ctx;
    if (ar->n_stop && !codec_has_text(&ctx->codec)) {
        api_error_set(e, 400, "invalid_request_error", "stop", "unsupported_value",
                      "Stop strings need a tokenizer; this router runs with --tokenizer none "
                      "(use stop_token_ids).");
        return -1;
    }
    /* Structured outputs: the grammar the workers hold the tokens to. */
    int32_t *gcode = NULL;
    int n_gcode = 0;
    if (ar->kind == API_CHAT && (ar->response_format_json || ar->tool_choice_json)) {
        char err[300];
        if (ar->ignore_eos) {
            api_error_set(e, 400, "invalid_request_error", "ignore_eos", "unsupported_value",
                          "ignore_eos cannot be combined with response_format json or a forced "
                          "tool call (the output ends where the grammar does).");
            return -1;
        }
        sg_request q = { ar->response_format_json, ar->tools_json, ar->tool_choice_json };
        char param[40];
        int rc = sg_build(&q, ctx->codec.kind == CODEC_BPE ? ctx->codec.bpe : NULL, 1, &gcode,
                          &n_gcode, param, sizeof param, err, sizeof err);
        if (rc != TN_OK) {
            api_error_set(e, rc == TN_ERR_NOMEM ? 500 : 400,
                          rc == TN_ERR_NOMEM ? "server_error" : "invalid_request_error", param,
                          rc == TN_ERR_NOMEM ? NULL : "unsupported_value", "%s", err);
            return -1;
        }
    }
    prompt_ids *prompts = NULL;
    int n_prompts = 0;
    if (tokenize_prompts(hc, ar, &prompts, &n_prompts, e) != 0) {
        free(gcode);
        return -1;
    }
    const int per = ar->best_of, n_choices = n_prompts * per;
    if (ar->echo && echo_texts(hc, ar, prompts, n_prompts) != 0) {
        free(gcode);
        free_prompts(prompts, n_prompts);
        api_error_set(e, 500, "server_error", NULL, NULL, "router out of memory");
        return -1;
    }
    hc->choices = calloc((size_t)n_choices, sizeof *hc->choices);
    if (!hc->choices) {
        free_echo(hc);
        free(gcode);
        free_prompts(prompts, n_prompts);
        api_error_set(e, 500, "server_error", NULL, NULL, "router out of memory");
        return -1;
    }
    const uint64_t seed = ar->has_seed ? ar->seed : tn_random_u64();
    pthread_mutex_lock(&ctx->lock);
    int rc = 0;
    if (ctx->n_active + ctx->n_queued + n_choices > ctx->cfg.max_active_requests) {
        api_error_set(e, 429, "server_error", NULL, "rate_limit_exceeded",
                      "The router is at its limit of %d active requests; retry later.",
                      ctx->cfg.max_active_requests);
        rc = -1;
    }
    for (int p = 0; rc == 0 && p < n_prompts; p++)
        for (int b = 0; rc == 0 && b < per; b++) {
            int32_t *ids = prompts[p].ids;
            size_t bytes = (size_t)prompts[p].n * sizeof *ids;
            /* Each further branch's copy of the prompt's ids is reserved
             * like the parse (the budget is given back once the requests
             * own them): best_of multiplies a prompt. */
            if (b + 1 < per && mem_take_locked(hc, bytes) != 0) {
                refuse_over_budget(e, ctx);
                rc = -1;
                break;
            }
            if (b + 1 < per && dup_array((void **)&ids, prompts[p].ids, bytes) != 0) {
                api_error_set(e, 500, "server_error", NULL, NULL, "router out of memory");
                rc = -1;
                break;
            }
            if (b + 1 == per)
                prompts[p].ids = NULL; /* the last branch takes the prompt */
            int notify = hc->n_choices ? hc->choices[0].req->notify_fd : -1;
            router_request *r = make_choice(hc, ar, ids, prompts[p].n, gcode, n_gcode,
                                            seed + (uint64_t)b, notify, e);
            if (!r) {
                rc = -1;
                break;
            }
            http_choice *c = &hc->choices[hc->n_choices++];
            c->req = r;
            c->index = p * per + b;
            c->prompt = p;
            c->counts_prompt = b == 0;
        }
    free_prompts(prompts, n_prompts);
    free(gcode);
    if (rc != 0) {
        for (int i = 0; i < hc->n_choices; i++)
            request_unref(hc->choices[i].req);
        free(hc->choices);
        hc->choices = NULL;
        hc->n_choices = 0;
        free_echo(hc);
        hc->n_prompts = 0;
        pthread_mutex_unlock(&ctx->lock);
        return -1;
    }
    hc->n_prompts = n_prompts;
    hc->n_return = ar->n;
    snprintf(hc->resp_id, sizeof hc->resp_id, "%s-%s",
             ar->kind == API_CHAT ? "chatcmpl" : "cmpl", hc->choices[0].req->id);
    hc->kind = ar->kind;
    ctx->n_http_responses++;
    for (int i = 0; i < hc->n_choices; i++) {
        router_request *r = hc->choices[i].req;
        /* The queue's reference becomes the table's when the core takes it. */
        r->refs++;
        r->qnext = NULL;
        if (ctx->submit_tail)
            ctx->submit_tail->qnext = r;
        else
            ctx->submit_head = r;
        ctx->submit_tail = r;
        ctx->n_queued++; /* counted now so the limit holds before the core runs */
        ctx->metrics.accepted++;
        ctx->metrics.in_flight[API_OPENAI]++;
        ctx->metrics.input_tokens += (uint64_t)r->n_prompt;
    }
    pthread_mutex_unlock(&ctx->lock);
    tn_wakefd_signal(ctx->wake_fd);
    return 0;
}

/* A request refused before it started: counted, then answered. */
static enum MHD_Result refuse(http_conn *hc, struct MHD_Connection *c, const api_error *e)
{
    pthread_mutex_lock(&hc->ctx->lock);
    metrics_request_done(&hc->ctx->metrics, API_OPENAI, metrics_outcome_for_status(e->http_status));
    pthread_mutex_unlock(&hc->ctx->lock);
    return respond_error(c, e);
}

static enum MHD_Result handle_generate(http_conn *hc, struct MHD_Connection *c, api_kind kind)
{
    api_error e;
    if (hc->body_too_large) {
        api_error_set(&e, 413, "invalid_request_error", NULL, "request_too_large",
                      "The request body exceeds %d bytes.", hc->ctx->cfg.max_body_bytes);
        return refuse(hc, c, &e);
    }
    if (hc->over_budget) {
        refuse_over_budget(&e, hc->ctx);
        return refuse(hc, c, &e);
    }
    /* What the parse will take is reserved first. cJSON spends about 80
     * bytes per JSON value, so a body of tiny values ([1,1,1,...]) would
     * cost 40 times its size: beyond 16 times (and 1 MiB) it is refused
     * unparsed. A prompt of token ids written as JSON numbers costs about
     * 12 times its text, a text prompt about 6. */
    const char *body = hc->body.p ? hc->body.p : "";
    size_t cost = api_parse_cost(body, hc->body.len);
    if (cost / 16 > hc->body.len + (1u << 16)) {
        api_error_set(&e, 413, "invalid_request_error", NULL, "request_too_large",
                      "The request body holds too many JSON values for its size: parsing it "
                      "would take %zu MB.", cost >> 20);
        return refuse(hc, c, &e);
    }
    if (cost > hc->parse_budget && mem_take(hc, cost - hc->parse_budget) != 0) {
        refuse_over_budget(&e, hc->ctx);
        return refuse(hc, c, &e);
    }
    if (cost < hc->parse_budget)
        mem_give_back(hc, hc->parse_budget - cost);
    hc->parse_budget = cost;
    api_request ar;
    int parsed = api_parse_request(kind, body, hc->body.len, &ar, &e);
    sb_free(&hc->body);
    mem_give_back(hc, hc->body_budget);
    hc->body_budget = 0;
    if (parsed != 0)
        return refuse(hc, c, &e);
    int rc = submit(hc, &ar, &e);
    int stream = ar.stream;
    api_request_free(&ar);
    mem_give_back(hc, hc->reserved); /* the prompt's ids now belong to the request */
    if (rc != 0)
        return refuse(hc, c, &e);
    /* A stream starts once every choice has a token (or one failed), so
     * failures before it still get a real HTTP status. */
    if (wait_for(hc, !stream) != 0)
        return MHD_NO; /* the client is gone */
    pthread_mutex_lock(&hc->ctx->lock);
    const router_request *failed = failed_choice(hc);
    int failed_early = failed && failed->n_out == 0;
    api_error early;
    if (failed_early) {
        early = failed->error;
        cancel_choices(hc, NULL);
    }
    pthread_mutex_unlock(&hc->ctx->lock);
    if (failed_early)
        return respond_error(c, &early);
    if (!stream)
        return respond_final(hc, c);
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, SSE_BLOCK, sse_reader, hc, NULL);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    add_request_id(c, resp);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ok;
}

/* ------------------------------------------------------------ other routes */

/* GET /v1/models lists the served models; GET /v1/models/{id} (id not
 * NULL) is one of them, or 404 model_not_found. */
static enum MHD_Result handle_models(http_conn *hc, struct MHD_Connection *c, const char *id)
{
    router_ctx *ctx = hc->ctx;
    sbuf b;
    sb_init(&b);
    pthread_mutex_lock(&ctx->lock);
    const worker_registry *w = &ctx->workers;
    const char **names = calloc((size_t)(w->n ? w->n : 1), sizeof *names);
    int n = 0;
    for (int i = 0; names && i < w->n; i++) {
        int dup = 0;
        for (int k = 0; k < n; k++)
            dup |= !strcmp(names[k], w->w[i]->model);
        if (!dup)
            names[n++] = w->w[i]->model;
    }
    int found = 0;
    if (!names)
        b.oom = 1;
    else if (!id)
        api_models_body(&b, names, n, (long)time(NULL));
    else
        for (int k = 0; k < n && !found; k++)
            if (!strcmp(names[k], id)) {
                api_model_body(&b, names[k], (long)time(NULL));
                found = 1;
            }
    pthread_mutex_unlock(&ctx->lock);
    free(names);
    if (id && names && !found) {
        sb_free(&b);
        api_error e;
        api_error_set(&e, 404, "invalid_request_error", NULL, "model_not_found",
                      "The model '%.200s' does not exist.", id);
        return respond_error(c, &e);
    }
    return respond_sb(c, 200, "application/json", &b);
}

/* Liveness and readiness (docs/METRICS.md): 200 while the router runs;
 * with ?ready=1, 503 once it is shutting down. Readiness does not wait for
 * workers: in Kubernetes they reach the router through its Service, which
 * holds only ready endpoints. The body's "ready" says whether a prefiller
 * and a decoder serve (registered, not draining). */
static enum MHD_Result handle_health(http_conn *hc, struct MHD_Connection *c)
{
    router_ctx *ctx = hc->ctx;
    const char *q = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "ready");
    int want_ready = q && strcmp(q, "0") && strcmp(q, "false");
    int pre = 0, dec = 0, pre_serving = 0, dec_serving = 0;
    pthread_mutex_lock(&ctx->lock);
    workers_count(&ctx->workers, TANDEM__V1__WORKER_ROLE__WORKER_ROLE_PREFILLER, &pre, &pre_serving);
    workers_count(&ctx->workers, TANDEM__V1__WORKER_ROLE__WORKER_ROLE_DECODER, &dec, &dec_serving);
    int stopping = ctx->stopping;
    pthread_mutex_unlock(&ctx->lock);
    int ready = pre_serving && dec_serving && !stopping;
    sbuf b;
    sb_init(&b);
    sb_printf(&b, "{\"status\":\"%s\",\"ready\":%s,\"prefillers\":%d,\"decoders\":%d}",
              stopping ? "stopping" : "ok", ready ? "true" : "false", pre, dec);
    return respond_sb(c, want_ready && stopping ? 503 : 200, "application/json", &b);
}

static enum MHD_Result handle_metrics(http_conn *hc, struct MHD_Connection *c)
{
    router_ctx *ctx = hc->ctx;
    sbuf b;
    sb_init(&b);
    pthread_mutex_lock(&ctx->lock);
    metrics_render(&b, &ctx->metrics, &ctx->workers, &ctx->as_status, ctx->n_held);
    pthread_mutex_unlock(&ctx->lock);
    if (b.oom) {
        sb_free(&b);
        return MHD_NO;
    }
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(b.len, b.p, MHD_RESPMEM_MUST_COPY);
    sb_free(&b);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; version=0.0.4");
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return rc;
}

static int authorized(const router_ctx *ctx, struct MHD_Connection *c)
{
    if (!ctx->api_key_set)
        return 1;
    return api_key_check(ctx->api_key_hash,
                         MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_AUTHORIZATION));
}

static enum MHD_Result refuse_unauthorized(struct MHD_Connection *c, const api_error *e)
{
    return respond_error_with(c, e, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
}

static enum MHD_Result handle_dashboard(http_conn *hc, struct MHD_Connection *c, int state)
{
    if (!state) {
        size_t len = 0;
        const char *html = dashboard_html(&len);
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(len, (void *)html, MHD_RESPMEM_PERSISTENT);
        if (!resp)
            return MHD_NO;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        return rc;
    }
    const char *since = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "since");
    char *end = NULL;
    double since_s = since ? strtod(since, &end) : -1;
    if (!since || end == since || *end || !(since_s >= 0))
        since_s = -1;
    sbuf b;
    sb_init(&b);
    pthread_mutex_lock(&hc->ctx->lock);
    dashboard_state_json(hc->ctx, &b, since_s);
    pthread_mutex_unlock(&hc->ctx->lock);
    return respond_sb(c, 200, "application/json", &b);
}

/* Request smuggling: a front proxy and this server must agree on where a
 * request ends. Two Content-Length headers that differ, or Content-Length
 * together with Transfer-Encoding, make that ambiguous (RFC 9112 6.3), and
 * libmicrohttpd 0.9.75 takes the first length or the chunked coding without
 * a word; such a request is refused before its body is read. */
typedef struct framing {
    const char *length; /* the first Content-Length value */
    int lengths_differ;
    int transfer_encoding;
} framing;

static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value)
{
    (void)kind;
    framing *f = cls;
    if (!key || !value)
        return MHD_YES;
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        if (!f->length)
            f->length = value;
        else if (strcmp(f->length, value))
            f->lengths_differ = 1;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        f->transfer_encoding = 1;
    }
    return MHD_YES;
}

/* Refuses a request as soon as its headers are in: the 400 above, or a 413
 * for a declared Content-Length over --max-body-bytes (answered at once
 * instead of after reading, or waiting for, a body that would be dropped).
 * The body was not read, so the connection cannot carry another request. */
/* Only the generation routes read a body: any other's is dropped unbuffered,
 * as is an unauthenticated client's. */
static int keeps_body(const http_conn *hc, struct MHD_Connection *c, const char *url)
{
    return !hc->metrics_only &&
           (!strcmp(url, "/v1/completions") || !strcmp(url, "/v1/chat/completions")) &&
           authorized(hc->ctx, c);
}

static enum MHD_Result refuse_early(http_conn *hc, struct MHD_Connection *c, const char *url)
{
    framing f = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, framing_header, &f);
    api_error e;
    unsigned long long declared = 0;
    if (f.lengths_differ)
        api_error_set(&e, 400, "invalid_request_error", NULL, "invalid_request",
                      "The request has two different Content-Length headers.");
    else if (f.length && f.transfer_encoding)
        api_error_set(&e, 400, "invalid_request_error", NULL, "invalid_request",
                      "The request has both Content-Length and Transfer-Encoding headers.");
    else if (f.length && sscanf(f.length, "%llu", &declared) == 1 &&
             declared > (unsigned long long)hc->ctx->cfg.max_body_bytes)
        api_error_set(&e, 413, "invalid_request_error", NULL, "request_too_large",
                      "The request body exceeds %d bytes.", hc->ctx->cfg.max_body_bytes);
    else if (declared && keeps_body(hc, c, url) && reserve_declared(hc, (size_t)declared) != 0)
        refuse_over_budget(&e, hc->ctx);
    else
        return MHD_YES;
    if (!strcmp(url, "/v1/completions") || !strcmp(url, "/v1/chat/completions")) {
        pthread_mutex_lock(&hc->ctx->lock);
        metrics_request_done(&hc->ctx->metrics, API_OPENAI,
                             metrics_outcome_for_status(e.http_status));
        pthread_mutex_unlock(&hc->ctx->lock);
    }
    return respond_error_with(c, &e, MHD_HTTP_HEADER_CONNECTION, "close");
}

static enum MHD_Result on_request_any(router_ctx *ctx, int metrics_only, struct MHD_Connection *c,
                                      const char *url, const char *method,
                                      const char *upload_data, size_t *upload_data_size,
                                      void **con_cls)
{
    http_conn *hc = *con_cls;
    if (!hc) {
        hc = calloc(1, sizeof *hc);
        if (!hc)
            return MHD_NO;
        hc->ctx = ctx;
        hc->metrics_only = metrics_only;
        sb_init(&hc->body);
        sb_init(&hc->pending);
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        hc->fd = ci ? ci->connect_fd : -1;
        *con_cls = hc;
        return refuse_early(hc, c, url);
    }
    if (*upload_data_size) {
        if (!keeps_body(hc, c, url))
            hc->body_too_large = !strncmp(url, "/v1/", 4); /* not buffered */
        else if (hc->body.len + *upload_data_size > (size_t)ctx->cfg.max_body_bytes)
            hc->body_too_large = 1;
        else if (hc->over_budget || body_room(hc, *upload_data_size) != 0)
            hc->over_budget = 1; /* dropped; answered 503 at the end */
        else
            sb_append(&hc->body, upload_data, *upload_data_size);
        if (hc->body_too_large || hc->over_budget) {
            sb_free(&hc->body);
            mem_give_back(hc, hc->body_budget);
            hc->body_budget = 0;
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    /* The front ended this request early: its chunked body declared more
     * than --max-body-bytes (http_front.h). The rest of the body was never
     * read, so the connection closes. */
    if (!hc->metrics_only && http_front_body_refused(ctx->front, hc->fd)) {
        api_error e;
        api_error_set(&e, 413, "invalid_request_error", NULL, "request_too_large",
                      "The request body exceeds %d bytes.", ctx->cfg.max_body_bytes);
        if (!strcmp(url, "/v1/completions") || !strcmp(url, "/v1/chat/completions")) {
            pthread_mutex_lock(&ctx->lock);
            metrics_request_done(&ctx->metrics, API_OPENAI,
                                 metrics_outcome_for_status(e.http_status));
            pthread_mutex_unlock(&ctx->lock);
        }
        return respond_error_with(c, &e, MHD_HTTP_HEADER_CONNECTION, "close");
    }
    /* With an API key, everything under /v1/ needs it; /healthz and
     * /metrics stay open for probes and scrapers (docs/SECURITY.md). The
     * body of a refused request was not kept (see above). */
    if (!strncmp(url, "/v1/", 4) && !authorized(ctx, c)) {
        api_error e;
        api_error_set(&e, 401, "invalid_request_error", NULL, "invalid_api_key",
                      "Incorrect or missing API key: send 'Authorization: Bearer KEY'.");
        return refuse_unauthorized(c, &e);
    }
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    int post = !strcmp(method, "POST");
    struct {
        const char *path;
        int post;
        int on_metrics_port; /* also served by the --metrics-port listener */
    } routes[] = {{"/v1/completions", 1, 0}, {"/v1/chat/completions", 1, 0},
                  {"/v1/models", 0, 0},      {"/healthz", 0, 1},
                  {"/metrics", 0, 1},        {"/dashboard", 0, 1},
                  {"/dashboard/state", 0, 1}};
    int known = -1;
    for (int i = 0; i < (int)(sizeof routes / sizeof *routes); i++)
        if (!strcmp(url, routes[i].path) && (!hc->metrics_only || routes[i].on_metrics_port))
            known = i;
    const char *model_id = NULL; /* GET /v1/models/{id} */
    if (known < 0 && !hc->metrics_only && !strncmp(url, "/v1/models/", 11) && url[11]) {
        known = 2;
        model_id = url + 11;
    }
    api_error e;
    if (known < 0) {
        api_error_set(&e, 404, "invalid_request_error", NULL, "unknown_url",
                      "Unknown request URL: %s %s.", method, url);
        return respond_error(c, &e);
    }
    if ((routes[known].post && !post) || (!routes[known].post && !get)) {
        api_error_set(&e, 405, "invalid_request_error", NULL, "method_not_allowed",
                      "Method %s is not allowed on %s.", method, url);
        return respond_error(c, &e);
    }
    switch (known) {
    case 0:
        return handle_generate(hc, c, API_COMPLETIONS);
    case 1:
        return handle_generate(hc, c, API_CHAT);
    case 2:
        return handle_models(hc, c, model_id);
    case 3:
        return handle_health(hc, c);
    case 4:
        return handle_metrics(hc, c);
    case 5:
        return handle_dashboard(hc, c, 0);
    default:
        return handle_dashboard(hc, c, 1);
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version;
    return on_request_any(cls, 0, c, url, method, upload_data, upload_data_size, con_cls);
}

/* The --metrics-port listener: the same handlers, only the read-only routes. */
static enum MHD_Result on_metrics_request(void *cls, struct MHD_Connection *c, const char *url,
                                          const char *method, const char *version,
                                          const char *upload_data, size_t *upload_data_size,
                                          void **con_cls)
{
    (void)version;
    return on_request_any(cls, 1, c, url, method, upload_data, upload_data_size, con_cls);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)c;
    (void)toe;
    router_ctx *ctx = cls;
    http_conn *hc = *con_cls;
    if (!hc)
        return;
    pthread_mutex_lock(&ctx->lock);
    if (hc->n_choices) {
        cancel_choices(hc, "connection ended early");
        for (int i = 0; i < hc->n_choices; i++)
            request_unref(hc->choices[i].req);
        ctx->n_http_responses--;
    }
    ctx->http_mem_used -= hc->reserved;
    pthread_mutex_unlock(&ctx->lock);
    free(hc->choices);
    free_echo(hc);
    sb_free(&hc->body);
    sb_free(&hc->pending);
    free(hc);
    *con_cls = NULL;
}

/* Client connections need a descriptor each, and three while libmicrohttpd
 * serves them (the client's and the socket pair): the soft limit is raised
 * to the hard one, and --http-max-connections kept within it. */
static int connection_budget(router_ctx *ctx)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return ctx->cfg.http_max_connections;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    long long fds = rl.rlim_cur == RLIM_INFINITY ? 1LL << 30 : (long long)rl.rlim_cur;
    long long spare = fds - 3LL * (ctx->cfg.max_active_requests + 64) - 256;
    if (spare < ctx->cfg.http_max_connections) {
        int n = spare > 64 ? (int)spare : 64;
        tn_log(WHO, "--http-max-connections %d is more than %lld open files allow: using %d",
               ctx->cfg.http_max_connections, fds, n);
        return n;
    }
    return ctx->cfg.http_max_connections;
}

/* libmicrohttpd's messages for the API daemon. Its connections are Unix
 * socket pairs from the front, where TCP_NODELAY / TCP_CORK do not apply
 * (and nothing needs pushing): libmicrohttpd 0.9.75 still tries them for
 * every response and reports the failure, which says nothing here. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    if (strstr(fmt, "TCP_NODELAY") || strstr(fmt, "TCP_CORK") || strstr(fmt, "%s option") ||
        strstr(fmt, "Failed to push the data"))
        return;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = 0;
    tn_log(WHO, "HTTP server: %s", msg);
}

int http_start(router_ctx *ctx, char *err, size_t errlen)
{
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    if (inet_pton(AF_INET, ctx->cfg.host, &addr.sin_addr) != 1) {
        snprintf(err, errlen, "--host '%s' is not an IPv4 address", ctx->cfg.host);
        return TN_ERR_ARG;
    }
    /* Request bodies are large and short-lived: served from mmap and given
     * back at free, instead of staying in a connection thread's arena
     * (glibc would raise this threshold after the first large free). */
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
    /* The API port: connections arrive through the front (http_front.h),
     * which hands each to libmicrohttpd once its first request head is in.
     * libmicrohttpd's limit counts those: requests in progress. */
    unsigned idle_s = (unsigned)((ctx->cfg.http_idle_timeout_ms + 999) / 1000);
    ctx->httpd = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
            MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC,
        0, NULL, NULL, on_request, ctx, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, ctx, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned int)(ctx->cfg.max_active_requests + 64), MHD_OPTION_CONNECTION_TIMEOUT, idle_s,
        MHD_OPTION_END);
    if (!ctx->httpd) {
        snprintf(err, errlen, "cannot start the HTTP server");
        return TN_ERR_SYS;
    }
    http_front_config fc = {
        .host = ctx->cfg.host,
        .port = ctx->cfg.http_port,
        .max_connections = connection_budget(ctx),
        .idle_timeout_ms = ctx->cfg.http_idle_timeout_ms,
        .request_timeout_ms = ctx->cfg.http_request_timeout_ms,
        .max_body_bytes = (uint64_t)ctx->cfg.max_body_bytes,
        .mhd = ctx->httpd,
    };
    int rc = http_front_start(&ctx->front, &fc, err, errlen);
    if (rc != TN_OK)
        return rc;
    ctx->http_port = http_front_port(ctx->front);
    if (ctx->cfg.metrics_port < 0)
        return 0;
    /* Prometheus and the dashboard get their own port (deploy/: 9090), so a
     * scrape never competes with API connections for the connection limit. */
    addr.sin_port = htons((uint16_t)ctx->cfg.metrics_port);
    ctx->metrics_httpd = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG, 0, NULL, NULL,
        on_metrics_request, ctx, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, ctx, MHD_OPTION_CONNECTION_LIMIT, 64u,
        MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_END);
    if (!ctx->metrics_httpd) {
        snprintf(err, errlen, "cannot serve /metrics on %s:%d (port in use?)", ctx->cfg.host,
                 ctx->cfg.metrics_port);
        return TN_ERR_ARG;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(ctx->metrics_httpd, MHD_DAEMON_INFO_BIND_PORT);
    ctx->metrics_port = di ? di->port : ctx->cfg.metrics_port;
    return 0;
}

void http_stop(router_ctx *ctx)
{
    /* The front first: its connections end, so handlers waiting on them
     * return before libmicrohttpd joins their threads. */
    http_front_stop(ctx->front);
    ctx->front = NULL;
    if (ctx->httpd)
        MHD_stop_daemon(ctx->httpd);
    ctx->httpd = NULL;
    if (ctx->metrics_httpd)
        MHD_stop_daemon(ctx->metrics_httpd);
    ctx->metrics_httpd = NULL;
}
