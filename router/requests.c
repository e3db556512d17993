/* Requests inside the router: allocation and shared ownership, the core's
 * id table, model-dependent admission checks, and appending output (token
 * ids, their decoded text, stop-string matching). */
#include "router/router.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "engine/kv_cache.h"
#include "router/placement.h"
#include "common/sys.h"

router_request *request_new(router_ctx *ctx, req_origin origin)
{
    router_request *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->notify_fd = -1;
    if (origin == ORIGIN_HTTP) {
        r->notify_fd = tn_wakefd_open();
        if (r->notify_fd < 0) {
            free(r);
            return NULL;
        }
    }
    r->origin = origin;
    r->refs = 1;
    r->repetition_penalty = 1.0f;
    r->logprobs = -1;
    /* Keys start at a random offset so ids do not repeat across restarts. */
    r->key = ctx->next_key++;
    snprintf(r->id, sizeof r->id, "%016" PRIx64, r->key);
    memcpy(r->wid, r->id, sizeof r->wid);
    r->created = (long)time(NULL);
    r->t_start = tn_now_s();
    sb_init(&r->text);
    sb_init(&r->reasoning);
    return r;
}

void request_unref(router_request *r)
{
    if (!r || --r->refs > 0)
        return;
    free(r->prompt);
    free(r->stop_ids);
    for (int i = 0; i < r->n_stop_strs; i++)
        free(r->stop_strs[i]);
    free(r->out);
    free(r->grammar);
    free(r->out_text_end);
    free(r->out_reasoning_end);
    free(r->out_tools_end);
    free(r->out_lp);
    free(r->prompt_lp);
    free(r->bias_tokens);
    free(r->bias_values);
    sb_free(&r->text);
    sb_free(&r->reasoning);
    if (r->parser)
        chat_parser_free(r->parser);
    if (r->notify_fd >= 0)
        close(r->notify_fd);
    free(r->followers);
    router_request *leader = r->leader;
    free(r);
    request_unref(leader); /* a follower never unlinked (refused before the core saw it) */
}

static size_t bucket_of(uint64_t key)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 52) % ROUTER_HASH_BUCKETS;
}

router_request *request_find(const router_ctx *ctx, const char *id)
{
    char *end = NULL;
    if (strlen(id) != 16)
        return NULL;
    uint64_t key = strtoull(id, &end, 16);
    if (!end || *end)
        return NULL;
    for (router_request *r = ctx->table[bucket_of(key)]; r; r = r->hnext)
        if (r->key == key)
            return r;
    return NULL;
}

router_request *request_find_client(const router_ctx *ctx, const char *id)
{
    /* Keys are never reused, so a client id is either its request's
     * current key or belongs to no other request's. */
    router_request *r = request_find(ctx, id);
    if (r)
        return r;
    for (int b = 0; b < ROUTER_HASH_BUCKETS; b++)
        for (r = ctx->table[b]; r; r = r->hnext)
            if (r->attempts && !strcmp(r->id, id))
                return r;
    return NULL;
}

void request_rekey(router_ctx *ctx, router_request *r)
{
    r->refs++; /* the table's reference goes away for a moment */
    request_table_remove(ctx, r);
    r->key = ctx->next_key++;
    snprintf(r->wid, sizeof r->wid, "%016" PRIx64, r->key);
    request_table_add(ctx, r);
    request_unref(r);
}

void request_table_add(router_ctx *ctx, router_request *r)
{
    size_t b = bucket_of(r->key);
    r->hnext = ctx->table[b];
    ctx->table[b] = r;
    r->refs++;
    ctx->n_active++;
}

void request_table_remove(router_ctx *ctx, router_request *r)
{
    router_request **p = &ctx->table[bucket_of(r->key)];
    while (*p && *p != r)
        p = &(*p)->hnext;
    if (!*p)
        return;
    *p = r->hnext;
    r->hnext = NULL;
    ctx->n_active--;
    request_unref(r);
}

void request_queue_cancel(router_ctx *ctx, router_request *r)
{
    if (r->cancel_queued || r->finished)
        return;
    r->cancel_queued = 1;
    r->refs++;
    r->qnext = NULL;
    if (ctx->cancel_tail)
        ctx->cancel_tail->qnext = r;
    else
        ctx->cancel_head = r;
    ctx->cancel_tail = r;
    tn_wakefd_signal(ctx->wake_fd);
}

/* Looks for a stop string that ends inside the text appended since
 * old_len; returns the earliest match position or -1. */
static long find_stop(const router_request *r, size_t old_len)
{
    long best = -1;
    size_t from = old_len >= r->max_stop_len ? old_len - r->max_stop_len + 1 : 0;
    for (int i = 0; i < r->n_stop_strs; i++) {
        size_t sl = strlen(r->stop_strs[i]);
        if (r->text.len < sl)
            continue;
        for (size_t p = from; p + sl <= r->text.len; p++)
            if (!memcmp(r->text.p + p, r->stop_strs[i], sl)) {
                if (best < 0 || (long)p < best)
                    best = (long)p;
                break;
            }
    }
    return best;
}

static int grow_output(router_request *r, int n)
{
    if (r->n_out + n <= r->cap_out)
        return 0;
    int cap = r->cap_out ? r->cap_out : 16;
    while (cap < r->n_out + n)
        cap *= 2;
    int32_t *o = realloc(r->out, (size_t)cap * sizeof *o);
    if (!o)
        return -1;
    r->out = o;
    size_t *te = realloc(r->out_text_end, (size_t)cap * sizeof *te);
    if (!te)
        return -1;
    r->out_text_end = te;
    size_t *re = realloc(r->out_reasoning_end, (size_t)cap * sizeof *re);
    if (!re)
        return -1;
    r->out_reasoning_end = re;
    int *tc = realloc(r->out_tools_end, (size_t)cap * sizeof *tc);
    if (!tc)
        return -1;
    r->out_tools_end = tc;
    r->cap_out = cap;
    return 0;
}

int request_store_logprobs(router_request *r, Tandem__V1__TokenLogprobs *const *lps,
                           size_t n_lps, int n)
{
    if ((r->logprobs < 0 && !r->score_logprobs) || n <= 0)
        return 0;
    const int shown = r->logprobs > 0 ? r->logprobs : 0;
    if (n_lps != (size_t)n)
        return -1;
    if (r->n_out + n > r->cap_lp) {
        int cap = r->cap_lp ? r->cap_lp : 16;
        while (cap < r->n_out + n)
            cap *= 2;
        tm_token_logprobs *lp = realloc(r->out_lp, (size_t)cap * sizeof *lp);
        if (!lp)
            return -1;
        r->out_lp = lp;
        r->cap_lp = cap;
    }
    for (int i = 0; i < n; i++) {
        const Tandem__V1__TokenLogprobs *w = lps[i];
        tm_token_logprobs *d = &r->out_lp[r->n_out + i];
        size_t k = w ? w->n_top_ids : 0;
        if (!w || k != w->n_top_logprobs || k > KN_LOGPROBS_MAX_TOP || (int)k < shown)
            return -1;
        d->logprob = w->logprob;
        d->n_top = shown;
        for (int j = 0; j < shown; j++) {
            d->top_ids[j] = w->top_ids[j];
            d->top_logprobs[j] = w->top_logprobs[j];
        }
    }
    return 0;
}

int request_store_prompt_logprobs(router_request *r, Tandem__V1__TokenLogprobs *const *lps,
                                  size_t n_lps)
{
    const int need = r->n_prompt - 1;
    if (!r->prompt_logprobs || r->prompt_lp || need <= 0)
        return 0;
    const int shown = r->logprobs > 0 ? r->logprobs : 0;
    if (n_lps < (size_t)need)
        return -1;
    tm_token_logprobs *lp = calloc((size_t)need, sizeof *lp);
    if (!lp)
        return -1;
    for (int i = 0; i < need; i++) {
        const Tandem__V1__TokenLogprobs *w = lps[i];
        size_t k = w ? w->n_top_ids : 0;
        if (!w || k != w->n_top_logprobs || k > KN_LOGPROBS_MAX_TOP || (int)k < shown) {
            free(lp);
            return -1;
        }
        lp[i].logprob = w->logprob;
        lp[i].n_top = shown;
        for (int j = 0; j < shown; j++) {
            lp[i].top_ids[j] = w->top_ids[j];
            lp[i].top_logprobs[j] = w->top_logprobs[j];
        }
    }
    r->prompt_lp = lp;
    r->n_prompt_lp = need;
    return 0;
}

const chat_tool_call *request_tool_calls(const router_request *r, int *n)
{
    if (!r->parser) {
        *n = 0;
        return NULL;
    }
    const chat_result *res = chat_parser_result(r->parser);
    *n = (int)res->n_tool_calls;
    return res->tool_calls;
}

/* Adds what the chat parser made visible. */
static void apply_delta(router_request *r, const chat_delta *d)
{
    if (d->kind == CHAT_DELTA_CONTENT)
        sb_append(&r->text, d->text, d->len);
    else if (d->kind == CHAT_DELTA_REASONING)
        sb_append(&r->reasoning, d->text, d->len);
}

void request_finish_output(router_request *r)
{
    if (!r->parser)
        return;
    chat_delta d = {0};
    char err[200];
    if (chat_parser_finish(r->parser, &d, err, sizeof err) == 0)
        apply_delta(r, &d);
}

int request_append(router_ctx *ctx, router_request *r, const int32_t *toks, int n)
{
    if (grow_output(r, n) != 0)
        return -1;
    int stopped = 0, n_before = r->n_out;
    for (int i = 0; i < n; i++) {
        size_t old_len = r->text.len;
        if (r->parser) {
            /* The parser sees every token: stop tokens end tool calls. */
            chat_delta d = {0};
            if (chat_parser_push(r->parser, toks[i], &d, r->parse_error,
                                 sizeof r->parse_error) != 0)
                return -2;
            apply_delta(r, &d);
        } else {
            int is_stop_id = 0; /* EOS and stop ids end the output, they are not text */
            for (int k = 0; k < r->n_stop_ids; k++)
                is_stop_id |= r->stop_ids[k] == toks[i];
            if (!is_stop_id)
                codec_decode_token(&ctx->codec, toks[i], &r->text);
        }
        if (r->text.oom || r->reasoning.oom)
            return -1;
        if (r->n_stop_strs) {
            long at = find_stop(r, old_len);
            if (at >= 0) {
                r->text.len = (size_t)at;
                r->text.p[at] = '\0';
                stopped = 1;
            }
        }
        r->out[r->n_out] = toks[i];
        r->out_text_end[r->n_out] = r->text.len;
        r->out_reasoning_end[r->n_out] = r->reasoning.len;
        request_tool_calls(r, &r->out_tools_end[r->n_out]);
        r->n_out++;
        if (stopped)
            break; /* tokens after the stop string are not output */
    }
    double now = tn_now_s();
    int added = r->n_out - n_before;
    if (added > 0 && r->t_first == 0) {
        r->t_first = now;
        metrics_observe(&ctx->metrics.ttft, r->t_first - r->t_start);
    } else if (added > 0) {
        metrics_observe(&ctx->metrics.itl, now - r->t_last);
    }
    for (int i = 1; i < added; i++)
        metrics_observe(&ctx->metrics.itl, 0); /* tokens that arrived together */
    if (added > 0)
        r->t_last = now;
    ctx->metrics.output_tokens += (uint64_t)(added > 0 ? added : 0);
    return stopped;
}

int request_admit(router_ctx *ctx, router_request *r, int max_tokens_given,
                  const int32_t *stop_ids, int n_stop_ids, int ignore_eos, api_error *e)
{
    const worker_registry *reg = &ctx->workers;
    if (ctx->stopping) {
        /* SIGTERM: requests in flight finish; new ones go to another
         * router (503 carries Retry-After). */
        api_error_set(e, 503, "server_error", NULL, "no_capacity",
                      "The router is shutting down; retry on another replica.");
        return -1;
    }
    if (reg->n == 0) {
        /* nothing registered yet (a cluster starting: `make run`'s workers
         * load their weights first) or none left: whether the model exists
         * is not known, so 503 with Retry-After, which clients retry,
         * rather than a model_not_found they would not */
        api_error_set(e, 503, "server_error", NULL, "no_capacity",
                      "No worker has registered with the router yet; retry shortly.");
        return -1;
    }
    int have_pre = workers_serve_model(reg, r->model, TANDEM__V1__WORKER_ROLE__WORKER_ROLE_PREFILLER);
    int have_dec = workers_serve_model(reg, r->model, TANDEM__V1__WORKER_ROLE__WORKER_ROLE_DECODER);
    if (!have_pre && !have_dec) {
        api_error_set(e, 400, "invalid_request_error", "model", "model_not_found",
                      "The model '%s' does not exist or no worker serves it.", r->model);
        return -1;
    }
    /* With the router queue on, a request for a model that lacks a prefiller
     * or a decoder right now (one being replaced, or not started yet) is
     * admitted and waits for one (dispatch.c, hold_or_fail). */
    if ((!have_pre || !have_dec) && ctx->cfg.queue_timeout_ms <= 0) {
        api_error_set(e, 503, "server_error", NULL, "no_capacity",
                      "No %s is registered for model '%s'; try again later.",
                      have_pre ? "decoder" : "prefiller", r->model);
        return -1;
    }
    /* The strictest vocabulary and the union of EOS ids over the model's workers. */
    int vocab = 0;
    int eos[WORKER_MAX_EOS * 4];
    int n_eos = 0;
    for (int i = 0; i < reg->n; i++) {
        const router_worker *w = reg->w[i];
        if (strcmp(w->model, r->model))
            continue;
        if (!vocab || w->vocab_size < vocab)
            vocab = w->vocab_size;
        for (int k = 0; k < w->n_eos; k++) {
            int dup = 0;
            for (int j = 0; j < n_eos; j++)
                dup |= eos[j] == w->eos[k];
            if (!dup && n_eos < (int)(sizeof eos / sizeof *eos))
                eos[n_eos++] = w->eos[k];
        }
    }
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= vocab) {
            api_error_set(e, 400, "invalid_request_error", "prompt", "invalid_value",
                          "Invalid prompt: token id %d at position %d is outside the model's "
                          "vocabulary (0..%d).", (int)r->prompt[i], i, vocab - 1);
            return -1;
        }
    for (int i = 0; i < r->n_bias; i++)
        if (r->bias_tokens[i] >= vocab) {
            api_error_set(e, 400, "invalid_request_error", "logit_bias", "invalid_value",
                          "Invalid logit_bias: token %d is outside the model's vocabulary "
                          "(0..%d).", (int)r->bias_tokens[i], vocab - 1);
            return -1;
        }
    for (int i = 0; i < n_stop_ids; i++)
        if (stop_ids[i] < 0 || stop_ids[i] >= vocab) {
            api_error_set(e, 400, "invalid_request_error", "stop_token_ids", "invalid_value",
                          "Invalid stop_token_ids: %d is outside the model's vocabulary (0..%d).",
                          (int)stop_ids[i], vocab - 1);
            return -1;
        }
    int ctx_len = placement_max_context(reg, r->model);
    int prompt_max = 0; /* the longest prompt some prefiller can hold */
    for (int i = 0; i < reg->n; i++)
        if (reg->w[i]->role == TANDEM__V1__WORKER_ROLE__WORKER_ROLE_PREFILLER &&
            !strcmp(reg->w[i]->model, r->model) && reg->w[i]->max_context > prompt_max)
            prompt_max = reg->w[i]->max_context;
    /* A role with no worker registered yet: the other role's limit is the
     * best known one (a decoder that registers later with less room makes
     * placement refuse the request: KV_NEVER_FITS). */
    if (!ctx_len)
        ctx_len = prompt_max;
    if (!prompt_max)
        prompt_max = ctx_len;
    if (r->n_prompt > prompt_max) {
        api_error_set(e, 400, "invalid_request_error", r->kind == API_CHAT ? "messages" : "prompt",
                      "context_length_exceeded",
                      "Your prompt has %d tokens; the longest prompt this deployment can "
                      "prefill is %d tokens. Please reduce the length of the prompt.",
                      r->n_prompt, prompt_max);
        return -1;
    }
    if (r->n_prompt >= ctx_len) {
        api_error_set(e, 400, "invalid_request_error", r->kind == API_CHAT ? "messages" : "prompt",
                      "context_length_exceeded",
                      "This model's maximum context length is %d tokens. However, your prompt "
                      "has %d tokens, which leaves no room for a completion. Please reduce the "
                      "length of the prompt.", ctx_len, r->n_prompt);
        return -1;
    }
    int max_tokens = max_tokens_given;
    if (max_tokens <= 0) {
        /* chat: the rest of the context unless configured (OpenAI's
         * behaviour; the decoders take pages as the output grows) */
        int def = r->kind == API_CHAT ? ctx->cfg.chat_default_max_tokens : ctx->cfg.default_max_tokens;
        int rest = ctx_len - r->n_prompt;
        max_tokens = def <= 0 || rest < def ? rest : def;
    }
    if ((long)r->n_prompt + max_tokens > ctx_len) {
        api_error_set(e, 400, "invalid_request_error", "max_tokens", "context_length_exceeded",
                      "This model's maximum context length is %d tokens. However, you requested "
                      "%ld tokens (%d in the prompt, %d for the completion). Please reduce the "
                      "length of the prompt or completion.", ctx_len,
                      (long)r->n_prompt + max_tokens, r->n_prompt, max_tokens);
        return -1;
    }
    r->max_tokens = max_tokens;
    int n_all = n_stop_ids + (ignore_eos ? 0 : n_eos);
    r->stop_ids = malloc((size_t)(n_all ? n_all : 1) * sizeof *r->stop_ids);
    if (!r->stop_ids) {
        api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    for (int i = 0; i < n_stop_ids; i++)
        r->stop_ids[i] = stop_ids[i];
    for (int i = 0; !ignore_eos && i < n_eos; i++)
        r->stop_ids[n_stop_ids + i] = eos[i];
    r->n_stop_ids = n_all;
    return 0;
}

const char *finish_reason_str(int reason)
{
    switch (reason) {
    case TANDEM__V1__FINISH_REASON__FINISH_REASON_LENGTH:
        return "length";
    case TANDEM__V1__FINISH_REASON__FINISH_REASON_STOP:
    case TANDEM__V1__FINISH_REASON__FINISH_REASON_STOP_STRING:
        return "stop";
    case TANDEM__V1__FINISH_REASON__FINISH_REASON_CANCELLED:
        return "cancelled";
    case TANDEM__V1__FINISH_REASON__FINISH_REASON_ERROR:
        return "error";
    default:
        return NULL;
    }
}

void error_from_code(api_error *e, int code, const char *message)
{
    switch (code) {
    case TANDEM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT:
        api_error_set(e, 400, "invalid_request_error", NULL, "invalid_value", "%s", message);
        break;
    case TANDEM__V1__ERROR_CODE__ERROR_CODE_MODEL_NOT_FOUND:
        api_error_set(e, 400, "invalid_request_error", "model", "model_not_found", "%s", message);
        break;
    case TANDEM__V1__ERROR_CODE__ERROR_CODE_CONTEXT_TOO_LONG:
    case TANDEM__V1__ERROR_CODE__ERROR_CODE_KV_NEVER_FITS:
        api_error_set(e, 400, "invalid_request_error", NULL, "context_length_exceeded", "%s",
                      message);
        break;
    case TANDEM__V1__ERROR_CODE__ERROR_CODE_NO_CAPACITY:
        api_error_set(e, 503, "server_error", NULL, "no_capacity", "%s", message);
        break;
    case TANDEM__V1__ERROR_CODE__ERROR_CODE_CANCELLED:
        api_error_set(e, 499, "invalid_request_error", NULL, "cancelled", "%s", message);
        break;
    default:
        api_error_set(e, 500, "server_error", NULL, "internal_error", "%s", message);
        break;
    }
}

int error_code_from_http(const api_error *e)
{
    if (!strcmp(e->code, "model_not_found"))
        return TANDEM__V1__ERROR_CODE__ERROR_CODE_MODEL_NOT_FOUND;
    if (!strcmp(e->code, "context_length_exceeded"))
        return TANDEM__V1__ERROR_CODE__ERROR_CODE_CONTEXT_TOO_LONG;
    if (e->http_status == 503 || e->http_status == 429)
        return TANDEM__V1__ERROR_CODE__ERROR_CODE_NO_CAPACITY;
    if (e->http_status >= 400 && e->http_status < 500)
        return TANDEM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT;
    return TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL;
}
