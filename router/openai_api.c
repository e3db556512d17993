#include "router/openai_api.h"
#include "common/utf8.h"

#include <cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INVALID "invalid_request_error"

void api_error_set(api_error *e, int http_status, const char *type, const char *param,
                   const char *code, const char *fmt, ...)
{
    memset(e, 0, sizeof *e);
    e->http_status = http_status;
    snprintf(e->type, sizeof e->type, "%s", type ? type : INVALID);
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

static void json_str_or_null(sbuf *b, const char *s)
{
    if (s && s[0])
        sb_json_str(b, s, strlen(s));
    else
        sb_puts(b, "null");
}

static void error_object(sbuf *b, const api_error *e)
{
    sb_puts(b, "{\"error\":{\"message\":");
    sb_json_str(b, e->message, strlen(e->message));
    sb_puts(b, ",\"type\":");
    sb_json_str(b, e->type, strlen(e->type));
    sb_puts(b, ",\"param\":");
    json_str_or_null(b, e->param);
    sb_puts(b, ",\"code\":");
    json_str_or_null(b, e->code);
    sb_puts(b, "}}");
}

char *api_error_json(const api_error *e)
{
    sbuf b;
    sb_init(&b);
    error_object(&b, e);
    return sb_take(&b);
}

void api_request_free(api_request *r)
{
    for (int i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].ids);
        free(r->prompts[i].text);
    }
    free(r->prompts);
    for (int i = 0; i < r->n_messages; i++)
        free(r->messages[i].content);
    free(r->messages);
    for (int i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    cJSON_Delete(r->messages_json);
    cJSON_Delete(r->tools_json);
    cJSON_Delete(r->response_format_json);
    cJSON_Delete(r->tool_choice_json);
    free(r->stop_token_ids);
    free(r->bias_tokens);
    free(r->bias_values);
    memset(r, 0, sizeof *r);
}

/* ------------------------------------------------------------ parsing */

static int bad(api_error *e, const char *param, const char *code, const char *msg)
{
    api_error_set(e, 400, INVALID, param, code, "%s", msg);
    return -1;
}

static const cJSON *field(const cJSON *obj, const char *name)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, name);
    return (f && !cJSON_IsNull(f)) ? f : NULL; /* null means "not given" */
}

/* An integral JSON number within [lo, hi]. */
static int get_int(const cJSON *f, double lo, double hi, long long *out)
{
    if (!cJSON_IsNumber(f))
        return -1;
    double v = f->valuedouble;
    if (!isfinite(v) || v != floor(v) || v < lo || v > hi)
        return -1;
    *out = (long long)v;
    return 0;
}

static int get_bool(const cJSON *obj, const char *name, int *out, api_error *e)
{
    const cJSON *f = field(obj, name);
    if (!f)
        return 0;
    if (!cJSON_IsBool(f)) {
        api_error_set(e, 400, INVALID, name, "invalid_type",
                      "Invalid type for '%s': expected a boolean.", name);
        return -1;
    }
    *out = cJSON_IsTrue(f);
    return 0;
}

static int get_number(const cJSON *obj, const char *name, double *out, api_error *e)
{
    const cJSON *f = field(obj, name);
    if (!f)
        return 0;
    if (!cJSON_IsNumber(f) || !isfinite(f->valuedouble)) {
        api_error_set(e, 400, INVALID, name, "invalid_type",
                      "Invalid type for '%s': expected a finite number.", name);
        return -1;
    }
    *out = f->valuedouble;
    return 0;
}

/* An array of token ids (non-negative int32). */
static int get_token_array(const cJSON *arr, const char *param, int32_t **ids, int *n,
                           api_error *e)
{
    int count = cJSON_GetArraySize(arr);
    *ids = malloc((size_t)(count ? count : 1) * sizeof **ids);
    if (!*ids)
        return bad(e, param, NULL, "out of memory");
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        long long v;
        if (get_int(it, 0, 2147483647.0, &v) != 0) {
            free(*ids);
            *ids = NULL;
            api_error_set(e, 400, INVALID, param, "invalid_type",
                          "Invalid '%s': token ids must be non-negative integers.", param);
            return -1;
        }
        (*ids)[i++] = (int32_t)v;
    }
    *n = count;
    return 0;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d)
        memcpy(d, s, n + 1);
    return d;
}

/* The exact text of string a: a comes from the body with every escaped NUL
 * read as U+0001, b (NULL when the body has none) from the same body with
 * U+0002; where they differ the client wrote a NUL. (cJSON ends a string
 * at a NUL byte, so the body itself cannot tell.) */
static char *exact_text(const cJSON *a, const cJSON *b, size_t *len)
{
    const char *s = a->valuestring, *t = cJSON_IsString(b) ? b->valuestring : NULL;
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (!d)
        return NULL;
    for (size_t i = 0; i <= n; i++)
        d[i] = t && s[i] != t[i] ? '\0' : s[i];
    *len = n;
    return d;
}

/* One prompt: a non-empty string or a non-empty array of token ids. pa:
 * the same prompt in the U+0002 parse (exact_text), or NULL. */
static int parse_one_prompt(const cJSON *p, const cJSON *pa, api_prompt *out, api_error *e)
{
    if (cJSON_IsString(p)) {
        if (!p->valuestring[0])
            return bad(e, "prompt", NULL, "Invalid 'prompt': the prompt must not be empty.");
        out->text = exact_text(p, pa, &out->text_len);
        return out->text ? 0 : bad(e, "prompt", NULL, "out of memory");
    }
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) > 0)
        return get_token_array(p, "prompt", &out->ids, &out->n_ids, e);
    if (cJSON_IsArray(p))
        return bad(e, "prompt", NULL, "Invalid 'prompt': the prompt must not be empty.");
    return bad(e, "prompt", "invalid_type",
               "Invalid type for 'prompt': expected a string, an array of token ids, or an "
               "array of those.");
}

/* prompt: a string, an array of token ids, or a list of prompts (strings
 * or token-id arrays): each gets its own choices. alt: the U+0002 parse of
 * the body, or NULL (exact_text). */
static int parse_prompt(const cJSON *root, const cJSON *alt, api_request *r, api_error *e)
{
    const cJSON *p = field(root, "prompt");
    const cJSON *pa = alt ? field(alt, "prompt") : NULL;
    if (!p)
        return bad(e, "prompt", NULL, "You must provide a 'prompt' parameter.");
    int list = cJSON_IsArray(p) && cJSON_GetArraySize(p) > 0 &&
               !cJSON_IsNumber(cJSON_GetArrayItem(p, 0));
    int n = list ? cJSON_GetArraySize(p) : 1;
    if (n > API_MAX_CHOICES) {
        api_error_set(e, 400, INVALID, "prompt", "invalid_value",
                      "Invalid 'prompt': at most %d prompts per request, got %d.", API_MAX_CHOICES, n);
        return -1;
    }
    r->prompts = calloc((size_t)n, sizeof *r->prompts);
    if (!r->prompts)
        return bad(e, "prompt", NULL, "out of memory");
    r->n_prompts = n;
    if (!list)
        return parse_one_prompt(p, pa, &r->prompts[0], e);
    int i = 0;
    const cJSON *it, *ia = cJSON_IsArray(pa) ? pa->child : NULL;
    cJSON_ArrayForEach(it, p) {
        if (parse_one_prompt(it, ia, &r->prompts[i++], e) != 0)
            return -1;
        ia = ia ? ia->next : NULL;
    }
    return 0;
}

/* n (choices per prompt), and for completions best_of (candidates per
 * prompt, the best n returned). */
static int parse_choices(const cJSON *root, api_kind kind, api_request *r, api_error *e)
{
    const cJSON *f;
    long long v;
    r->n = 1;
    if ((f = field(root, "n"))) {
        if (get_int(f, 1, API_MAX_CHOICES, &v) != 0)
            return bad(e, "n", "invalid_value", "Invalid 'n': expected an integer between 1 and 128.");
        r->n = (int)v;
    }
    r->best_of = r->n;
    if (kind == API_COMPLETIONS && (f = field(root, "best_of"))) {
        if (get_int(f, 1, API_MAX_CHOICES, &v) != 0)
            return bad(e, "best_of", "invalid_value",
                       "Invalid 'best_of': expected an integer between 1 and 128.");
        if (v < r->n)
            return bad(e, "best_of", "invalid_value", "Invalid 'best_of': it must be >= n.");
        r->best_of = (int)v;
    }
    if (r->best_of > r->n && r->stream)
        return bad(e, "best_of", "invalid_value",
                   "Invalid 'best_of': best_of > n cannot be streamed (the best choices are "
                   "known only at the end).");
    int prompts = kind == API_COMPLETIONS ? r->n_prompts : 1;
    if ((long)prompts * r->best_of > API_MAX_CHOICES) {
        api_error_set(e, 400, INVALID, r->best_of > r->n ? "best_of" : "n", "invalid_value",
                      "A request may generate at most %d choices; %d prompt(s) x %d is %ld.",
                      API_MAX_CHOICES, prompts, r->best_of, (long)prompts * r->best_of);
        return -1;
    }
    return 0;
}

/* content: a string, or an array of {"type":"text","text":...} parts;
 * ca: the same in the U+0002 parse (exact_text), or NULL. */
static int parse_content(const cJSON *c, const cJSON *ca, int i, api_message *m, api_error *e)
{
    char param[40];
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (!c) {
        m->content = dup_str("");
        return m->content ? 0 : bad(e, param, NULL, "out of memory");
    }
    if (cJSON_IsString(c)) {
        m->content = exact_text(c, ca, &m->content_len);
        return m->content ? 0 : bad(e, param, NULL, "out of memory");
    }
    if (!cJSON_IsArray(c))
        return bad(e, param, "invalid_type",
                   "Invalid type for message content: expected a string or an array of text parts.");
    sbuf b;
    sb_init(&b);
    const cJSON *part, *pa = ca ? ca->child : NULL;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = field(part, "type");
        const cJSON *text = field(part, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text)) {
            sb_free(&b);
            return bad(e, param, "unsupported_value",
                       "Only text content parts ({\"type\":\"text\",\"text\":...}) are supported.");
        }
        size_t n = 0;
        char *t = exact_text(text, pa ? field(pa, "text") : NULL, &n);
        if (t)
            sb_append(&b, t, n);
        else
            b.oom = 1;
        free(t);
        pa = pa ? pa->next : NULL;
    }
    if (!b.p)
        sb_puts(&b, "");
    m->content_len = b.len;
    m->content = sb_take(&b);
    return m->content ? 0 : bad(e, param, NULL, "out of memory");
}

static int parse_messages(const cJSON *root, const cJSON *alt, api_request *r, api_error *e)
{
    const cJSON *m = field(root, "messages");
    const cJSON *am = alt ? field(alt, "messages") : NULL;
    const cJSON *ma = am ? am->child : NULL;
    if (!m)
        return bad(e, "messages", NULL, "You must provide a 'messages' parameter.");
    if (!cJSON_IsArray(m))
        return bad(e, "messages", "invalid_type", "Invalid type for 'messages': expected an array.");
    int n = cJSON_GetArraySize(m);
    if (n == 0)
        return bad(e, "messages", "empty_array",
                   "Invalid 'messages': empty array. Expected an array with minimum length 1.");
    r->messages = calloc((size_t)n, sizeof *r->messages);
    if (!r->messages)
        return bad(e, "messages", NULL, "out of memory");
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, m) {
        char param[40];
        snprintf(param, sizeof param, "messages[%d].role", i);
        const cJSON *role = cJSON_IsObject(it) ? field(it, "role") : NULL;
        int known = 0;
        for (size_t k = 0; role && cJSON_IsString(role) && k < sizeof roles / sizeof *roles; k++)
            known |= !strcmp(role->valuestring, roles[k]);
        if (!known) {
            r->n_messages = i;
            api_error_set(e, 400, INVALID, param, "invalid_value",
                          "Invalid 'messages[%d].role': expected one of system, developer, "
                          "user, assistant, tool.", i);
            return -1;
        }
        snprintf(r->messages[i].role, sizeof r->messages[i].role, "%s", role->valuestring);
        if (parse_content(field(it, "content"), ma ? field(ma, "content") : NULL, i,
                          &r->messages[i], e) != 0) {
            r->n_messages = i;
            return -1;
        }
        if (memchr(r->messages[i].content, 0, r->messages[i].content_len))
            r->content_has_nul = 1;
        ma = ma ? ma->next : NULL;
        i++;
    }
    r->n_messages = n;
    return 0;
}

static int parse_stop(const cJSON *root, api_request *r, api_error *e)
{
    const cJSON *s = field(root, "stop");
    if (!s)
        return 0;
    if (cJSON_IsString(s)) {
        if (!s->valuestring[0])
            return bad(e, "stop", "invalid_value", "Invalid 'stop': stop strings must not be empty.");
        r->stop[0] = dup_str(s->valuestring);
        if (!r->stop[0])
            return bad(e, "stop", NULL, "out of memory");
        r->n_stop = 1;
        return 0;
    }
    if (!cJSON_IsArray(s))
        return bad(e, "stop", "invalid_type",
                   "Invalid type for 'stop': expected a string or an array of strings.");
    if (cJSON_GetArraySize(s) > API_MAX_STOP)
        return bad(e, "stop", "invalid_value", "Invalid 'stop': at most 4 stop strings.");
    const cJSON *it;
    cJSON_ArrayForEach(it, s) {
        if (!cJSON_IsString(it) || !it->valuestring[0])
            return bad(e, "stop", "invalid_value",
                       "Invalid 'stop': stop strings must be non-empty strings.");
        r->stop[r->n_stop] = dup_str(it->valuestring);
        if (!r->stop[r->n_stop])
            return bad(e, "stop", NULL, "out of memory");
        r->n_stop++;
    }
    return 0;
}

/* Chat-only fields the chat formats use: the raw messages and tools (the
 * renderers read tool calls, reasoning and tool results from them),
 * reasoning_effort (Harmony) and chat_template_kwargs.enable_thinking
 * (Qwen3, as vLLM spells it). */
static int parse_chat_options(const cJSON *root, api_request *r, api_error *e)
{
    const cJSON *f;
    r->enable_thinking = -1;
    if ((f = field(root, "tools"))) {
        if (!cJSON_IsArray(f))
            return bad(e, "tools", "invalid_type", "Invalid type for 'tools': expected an array.");
        const cJSON *t;
        cJSON_ArrayForEach(t, f) {
            const cJSON *fn = cJSON_IsObject(t) ? field(t, "function") : NULL;
            const cJSON *name = fn ? field(fn, "name") : NULL;
            if (!cJSON_IsString(name) || !name->valuestring[0])
                return bad(e, "tools", "invalid_value",
                           "Invalid 'tools': each tool needs {\"type\":\"function\",\"function\":{\"name\":...}}.");
        }
        if (cJSON_GetArraySize(f) > 0 && !(r->tools_json = cJSON_Duplicate(f, 1)))
            return bad(e, "tools", NULL, "out of memory");
    }
    if (!(r->messages_json = cJSON_Duplicate(field(root, "messages"), 1)))
        return bad(e, "messages", NULL, "out of memory");
    /* Structured outputs (router/schema_grammar.h compiles them): shapes
     * here, schemas when the router builds the grammar. */
    if ((f = field(root, "tool_choice"))) {
        const cJSON *fn = cJSON_IsObject(f) ? field(f, "function") : NULL;
        const cJSON *ty = cJSON_IsObject(f) ? field(f, "type") : NULL;
        const cJSON *nm = cJSON_IsObject(fn) ? field(fn, "name") : NULL;
        int named = cJSON_IsString(ty) && !strcmp(ty->valuestring, "function") && cJSON_IsString(nm);
        if (!named && !(cJSON_IsString(f) && (!strcmp(f->valuestring, "auto") ||
                                              !strcmp(f->valuestring, "none") ||
                                              !strcmp(f->valuestring, "required"))))
            return bad(e, "tool_choice", "invalid_value",
                       "Invalid 'tool_choice': expected \"none\", \"auto\", \"required\" or "
                       "{\"type\":\"function\",\"function\":{\"name\":...}}.");
        if ((named || !strcmp(f->valuestring, "required")) && !r->tools_json)
            return bad(e, "tool_choice", "invalid_value",
                       "Invalid 'tool_choice': it forces a tool call, but 'tools' is empty.");
        if (!named && !strcmp(f->valuestring, "none")) {
            cJSON_Delete(r->tools_json);
            r->tools_json = NULL;
        } else if (named || !strcmp(f->valuestring, "required")) {
            if (!(r->tool_choice_json = cJSON_Duplicate(f, 1)))
                return bad(e, "tool_choice", NULL, "out of memory");
        }
    }
    if ((f = field(root, "response_format"))) {
        const cJSON *t = cJSON_IsObject(f) ? field(f, "type") : NULL;
        if (!cJSON_IsString(t) || (strcmp(t->valuestring, "text") &&
                                   strcmp(t->valuestring, "json_object") &&
                                   strcmp(t->valuestring, "json_schema")))
            return bad(e, "response_format", "invalid_value",
                       "Invalid 'response_format': expected {\"type\": \"text\"}, "
                       "{\"type\": \"json_object\"} or {\"type\": \"json_schema\", "
                       "\"json_schema\": {...}}.");
        if (strcmp(t->valuestring, "text") && !(r->response_format_json = cJSON_Duplicate(f, 1)))
            return bad(e, "response_format", NULL, "out of memory");
    }
    if ((f = field(root, "reasoning_effort"))) {
        if (!cJSON_IsString(f) || (strcmp(f->valuestring, "low") && strcmp(f->valuestring, "medium") &&
                                   strcmp(f->valuestring, "high")))
            return bad(e, "reasoning_effort", "invalid_value",
                       "Invalid 'reasoning_effort': expected low, medium or high.");
        snprintf(r->reasoning_effort, sizeof r->reasoning_effort, "%s", f->valuestring);
    }
    if ((f = field(root, "chat_template_kwargs"))) {
        if (!cJSON_IsObject(f))
            return bad(e, "chat_template_kwargs", "invalid_type",
                       "Invalid type for 'chat_template_kwargs': expected an object.");
        int v = 1;
        const cJSON *t = field(f, "enable_thinking");
        if (t && get_bool(f, "enable_thinking", &v, e) != 0)
            return -1;
        if (t)
            r->enable_thinking = v;
    }
    return 0;
}

/* Completions' echo: each choice's text starts with its prompt's; with
 * logprobs the prompt's tokens are listed first (the prefiller computes
 * their logprobs). */
static int parse_echo(const cJSON *root, api_kind kind, api_request *r, api_error *e)
{
    if (kind != API_COMPLETIONS)
        return 0;
    if (get_bool(root, "echo", &r->echo, e) != 0)
        return -1;
    return 0;
}

/* A number within [lo, hi] (lo_open: above lo, no upper bound), or absent. */
static int get_ranged(const cJSON *root, const char *name, double lo, double hi, int lo_open,
                      double *out, api_error *e)
{
    if (get_number(root, name, out, e) != 0)
        return -1;
    if (lo_open && !(*out > lo)) {
        api_error_set(e, 400, INVALID, name, "invalid_value",
                      "Invalid '%s': expected a value > %g, but got %g instead.", name, lo, *out);
        return -1;
    }
    if (!lo_open && (*out < lo || *out > hi)) {
        api_error_set(e, 400, INVALID, name, "invalid_value",
                      "Invalid '%s': expected a value between %g and %g, but got %g instead.",
                      name, lo, hi, *out);
        return -1;
    }
    return 0;
}

/* logit_bias: {"<token id>": bias in [-100, 100], ...}; ids checked
 * against the vocabulary by the router (request_admit). */
static int parse_logit_bias(const cJSON *root, api_request *r, api_error *e)
{
    const cJSON *f = field(root, "logit_bias");
    if (!f)
        return 0;
    if (!cJSON_IsObject(f))
        return bad(e, "logit_bias", "invalid_type",
                   "Invalid type for 'logit_bias': expected an object mapping token ids to biases.");
    int n = cJSON_GetArraySize(f);
    if (n > API_MAX_LOGIT_BIAS) {
        api_error_set(e, 400, INVALID, "logit_bias", "invalid_value",
                      "Invalid 'logit_bias': at most %d entries, got %d.", API_MAX_LOGIT_BIAS, n);
        return -1;
    }
    if (n == 0)
        return 0;
    r->bias_tokens = malloc((size_t)n * sizeof *r->bias_tokens);
    r->bias_values = malloc((size_t)n * sizeof *r->bias_values);
    if (!r->bias_tokens || !r->bias_values)
        return bad(e, "logit_bias", NULL, "out of memory");
    const cJSON *it;
    cJSON_ArrayForEach(it, f) {
        const char *k = it->string ? it->string : "";
        char *end = NULL;
        long long id = -1;
        if (k[0] >= '0' && k[0] <= '9' && strlen(k) <= 10)
            id = strtoll(k, &end, 10);
        if (id < 0 || id > 2147483647LL || !end || *end) {
            api_error_set(e, 400, INVALID, "logit_bias", "invalid_value",
                          "Invalid 'logit_bias': key '%.64s' is not a token id (a non-negative "
                          "integer written as a string).", k);
            return -1;
        }
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble < -100 ||
            it->valuedouble > 100) {
            api_error_set(e, 400, INVALID, "logit_bias", "invalid_value",
                          "Invalid 'logit_bias': the bias of token %lld must be a number "
                          "between -100 and 100.", id);
            return -1;
        }
        for (int i = 0; i < r->n_bias; i++)
            if (r->bias_tokens[i] == (int32_t)id) {
                api_error_set(e, 400, INVALID, "logit_bias", "invalid_value",
                              "Invalid 'logit_bias': token %lld is given twice.", id);
                return -1;
            }
        r->bias_tokens[r->n_bias] = (int32_t)id;
        r->bias_values[r->n_bias] = (float)it->valuedouble;
        r->n_bias++;
    }
    return 0;
}

/* Completions: logprobs k (0..20: the sampled token's logprob and the k
 * most likely). Chat: logprobs true, and top_logprobs k (0..20) for the
 * alternatives; top_logprobs needs logprobs true (0 is accepted alone). */
static int parse_logprobs(const cJSON *root, api_kind kind, api_request *r, api_error *e)
{
    r->logprobs = -1;
    const cJSON *f = field(root, "logprobs");
    long long v;
    if (kind == API_COMPLETIONS) {
        if (!f || cJSON_IsFalse(f))
            return 0;
        if (get_int(f, 0, API_MAX_TOP_LOGPROBS, &v) != 0)
            return bad(e, "logprobs", "invalid_value",
                       "Invalid 'logprobs': expected an integer between 0 and 20.");
        r->logprobs = (int)v;
        return 0;
    }
    int on = 0;
    if (get_bool(root, "logprobs", &on, e) != 0)
        return -1;
    const cJSON *t = field(root, "top_logprobs");
    v = 0;
    if (t && get_int(t, 0, API_MAX_TOP_LOGPROBS, &v) != 0)
        return bad(e, "top_logprobs", "invalid_value",
                   "Invalid 'top_logprobs': expected an integer between 0 and 20.");
    if (v > 0 && !on)
        return bad(e, "top_logprobs", "invalid_value",
                   "Invalid 'top_logprobs': 'logprobs' must be set to true when 'top_logprobs' "
                   "is used.");
    r->logprobs = on ? (int)v : -1;
    return 0;
}

/* The penalties, logit_bias and logprobs (engine/sampler.h applies them on
 * the workers). */
static int parse_sampling_extras(const cJSON *root, api_kind kind, api_request *r, api_error *e)
{
    r->repetition_penalty = 1.0;
    if (get_ranged(root, "presence_penalty", -2, 2, 0, &r->presence_penalty, e) != 0 ||
        get_ranged(root, "frequency_penalty", -2, 2, 0, &r->frequency_penalty, e) != 0 ||
        get_ranged(root, "repetition_penalty", 0, 0, 1, &r->repetition_penalty, e) != 0)
        return -1;
    if (parse_logit_bias(root, r, e) != 0)
        return -1;
    return parse_logprobs(root, kind, r, e);
}

/* Every top-level field a request may carry: the OpenAI API's fields for
 * the endpoint (implemented, accepted at their defaults, or plain metadata)
 * and Tandem's extensions. Anything else is refused, as OpenAI does, so a
 * misspelt parameter ("max_token", "temprature") is an error instead of a
 * silently different request. */
static const char *const common_fields[] = {
    "model", "max_tokens", "temperature", "top_p", "top_k", "seed", "stream", "stream_options",
    "stop", "stop_token_ids", "ignore_eos", "return_token_ids", "n", "logprobs",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias", "user", "metadata", "store",
    "service_tier", "prompt_cache_key", "safety_identifier",
};
static const char *const completions_fields[] = {"prompt", "best_of", "echo", "suffix"};
static const char *const chat_fields[] = {
    "messages", "max_completion_tokens", "tools", "tool_choice", "parallel_tool_calls",
    "reasoning_effort", "chat_template_kwargs", "response_format", "top_logprobs",
    "modalities", "audio", "prediction", "web_search_options", "functions", "function_call",
    "verbosity",
};

static int in_list(const char *name, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(name, list[i]))
            return 1;
    return 0;
}

#define N_OF(a) (sizeof(a) / sizeof(a[0]))

static int reject_unknown(const cJSON *root, api_kind kind, api_error *e)
{
    const cJSON *f;
    cJSON_ArrayForEach(f, root) {
        const char *name = f->string ? f->string : "";
        if (in_list(name, common_fields, N_OF(common_fields)) ||
            (kind == API_COMPLETIONS && in_list(name, completions_fields, N_OF(completions_fields))) ||
            (kind == API_CHAT && in_list(name, chat_fields, N_OF(chat_fields))))
            continue;
        char param[40];
        snprintf(param, sizeof param, "%.39s", name);
        api_error_set(e, 400, INVALID, param, "unknown_parameter",
                      "Unrecognized request argument supplied: %.200s", name);
        return -1;
    }
    return 0;
}

/* OpenAI fields Tandem does not implement whose default is "absent":
 * accepted when null (or at the value that means the default), refused
 * otherwise rather than ignored. */
static int reject_unimplemented(const cJSON *root, api_kind kind, api_error *e)
{
    const cJSON *f;
    if (kind == API_COMPLETIONS) {
        if ((f = field(root, "suffix")) && !(cJSON_IsString(f) && !f->valuestring[0]))
            return bad(e, "suffix", "unsupported_value", "Tandem does not support suffix.");
        return 0;
    }
    if ((f = field(root, "modalities"))) {
        const cJSON *m0 = cJSON_GetArrayItem(f, 0);
        if (!cJSON_IsArray(f) || cJSON_GetArraySize(f) != 1 || !cJSON_IsString(m0) ||
            strcmp(m0->valuestring, "text"))
            return bad(e, "modalities", "unsupported_value", "Tandem produces only text.");
    }
    static const char *const absent[] = {"audio", "prediction", "web_search_options",
                                         "verbosity", "functions", "function_call"};
    for (size_t i = 0; i < N_OF(absent); i++)
        if (field(root, absent[i])) {
            api_error_set(e, 400, INVALID, absent[i], "unsupported_value",
                          "Tandem does not support '%s'%s.", absent[i],
                          !strncmp(absent[i], "function", 8) ? " (use tools)" : "");
            return -1;
        }
    return 0;
}

static int parse_fields(const cJSON *root, const cJSON *alt, api_kind kind, api_request *r,
                        api_error *e)
{
    if (!cJSON_IsObject(root))
        return bad(e, NULL, NULL, "The request body must be a JSON object.");
    if (reject_unknown(root, kind, e) != 0)
        return -1;
    const cJSON *model = field(root, "model");
    if (!model)
        return bad(e, "model", NULL, "You must provide a model parameter.");
    if (!cJSON_IsString(model) || !model->valuestring[0] ||
        strlen(model->valuestring) >= sizeof r->model)
        return bad(e, "model", "invalid_type", "Invalid 'model': expected a non-empty string.");
    snprintf(r->model, sizeof r->model, "%s", model->valuestring);

    if (kind == API_COMPLETIONS ? parse_prompt(root, alt, r, e) : parse_messages(root, alt, r, e))
        return -1;
    if (kind == API_CHAT && parse_chat_options(root, r, e) != 0)
        return -1;

    const char *mt_name = "max_tokens";
    const cJSON *mt = field(root, "max_tokens");
    if (kind == API_CHAT && field(root, "max_completion_tokens")) {
        mt = field(root, "max_completion_tokens");
        mt_name = "max_completion_tokens";
    }
    if (mt) {
        long long v;
        if (!cJSON_IsNumber(mt) || get_int(mt, -1e18, 1e18, &v) != 0) {
            api_error_set(e, 400, INVALID, mt_name, "invalid_type",
                          "Invalid type for '%s': expected an integer.", mt_name);
            return -1;
        }
        if (v < 1) {
            api_error_set(e, 400, INVALID, mt_name, "integer_below_min_value",
                          "Invalid '%s': integer below minimum value. Expected a value >= 1, "
                          "but got %lld instead.", mt_name, v);
            return -1;
        }
        r->max_tokens = v > 2147483647LL ? 2147483647 : (int)v;
    }

    r->temperature = 1.0;
    r->top_p = 1.0;
    r->top_k = -1;
    if (get_number(root, "temperature", &r->temperature, e) != 0)
        return -1;
    if (r->temperature < 0 || r->temperature > 2) {
        api_error_set(e, 400, INVALID, "temperature", "invalid_value",
                      "Invalid 'temperature': expected a value between 0 and 2, but got %g instead.",
                      r->temperature);
        return -1;
    }
    if (get_number(root, "top_p", &r->top_p, e) != 0)
        return -1;
    if (!(r->top_p > 0 && r->top_p <= 1)) {
        api_error_set(e, 400, INVALID, "top_p", "invalid_value",
                      "Invalid 'top_p': expected a value in (0, 1], but got %g instead.", r->top_p);
        return -1;
    }
    const cJSON *f;
    long long v;
    if ((f = field(root, "top_k"))) {
        if (get_int(f, -1, 2147483647.0, &v) != 0)
            return bad(e, "top_k", "invalid_value",
                       "Invalid 'top_k': expected an integer >= -1 (-1 or 0 disables it).");
        r->top_k = (int)v;
    }
    if ((f = field(root, "seed"))) {
        double d = cJSON_IsNumber(f) ? f->valuedouble : NAN;
        if (!isfinite(d) || d != floor(d) || d < -9223372036854775808.0 ||
            d >= 18446744073709551616.0)
            return bad(e, "seed", "invalid_type", "Invalid type for 'seed': expected an integer.");
        r->has_seed = 1;
        r->seed = d < 0 ? (uint64_t)(long long)d : (uint64_t)d;
    }
    if (get_bool(root, "stream", &r->stream, e) || get_bool(root, "ignore_eos", &r->ignore_eos, e) ||
        get_bool(root, "return_token_ids", &r->return_token_ids, e))
        return -1;
    if ((f = field(root, "stream_options"))) {
        if (!cJSON_IsObject(f))
            return bad(e, "stream_options", "invalid_type",
                       "Invalid type for 'stream_options': expected an object.");
        if (!r->stream)
            return bad(e, "stream_options", "invalid_value",
                       "The 'stream_options' parameter is only allowed when 'stream' is enabled.");
        if (get_bool(f, "include_usage", &r->include_usage, e))
            return -1;
    }
    if (parse_stop(root, r, e) != 0)
        return -1;
    if ((f = field(root, "stop_token_ids"))) {
        if (!cJSON_IsArray(f))
            return bad(e, "stop_token_ids", "invalid_type",
                       "Invalid type for 'stop_token_ids': expected an array of token ids.");
        if (cJSON_GetArraySize(f) > 64)
            return bad(e, "stop_token_ids", "invalid_value",
                       "Invalid 'stop_token_ids': at most 64 token ids.");
        if (get_token_array(f, "stop_token_ids", &r->stop_token_ids, &r->n_stop_token_ids, e))
            return -1;
    }
    if (reject_unimplemented(root, kind, e) != 0)
        return -1;
    if (parse_choices(root, kind, r, e) != 0)
        return -1;
    if (parse_sampling_extras(root, kind, r, e) != 0)
        return -1;
    return parse_echo(root, kind, r, e);
}

/* cJSON decodes the escape \u0000 into a NUL byte and its strings end
 * there, so "gpt_oss_tiny\u0000junk" would read as "gpt_oss_tiny" and a
 * prompt would lose its tail without a word. A body holding such escapes
 * (inside strings) is parsed twice, from one copy: once with each of them
 * turned into \u0001, once into \u0002. Both parses have the same shape and
 * their strings differ exactly where the client wrote a NUL, so text (a
 * prompt, message content) is read back exactly (exact_text), and a NUL
 * anywhere else is refused naming the top-level field. Returns the number
 * of escapes (then *copy is the body with them as \u0001), or -1 on OOM. */
static int nul_escapes(const char *s, size_t len, char **copy)
{
    int n = 0, in_str = 0;
    *copy = NULL;
    for (size_t i = 0; i < len; i++) {
        if (!in_str) {
            in_str = s[i] == '"';
            continue;
        }
        if (s[i] == '"') {
            in_str = 0;
        } else if (s[i] == '\\' && i + 1 < len) {
            if (i + 5 < len && !memcmp(s + i + 1, "u0000", 5)) {
                if (!*copy && !(*copy = malloc(len ? len : 1)))
                    return -1;
                if (!n)
                    memcpy(*copy, s, len);
                (*copy)[i + 5] = '1';
                n++;
            }
            i++; /* the escaped character */
        }
    }
    return n;
}

/* The copy's \u0001 escapes that were \u0000 become \u0002 (same scan). */
static void nul_escapes_as(char *copy, const char *body, size_t len, char digit)
{
    int in_str = 0;
    for (size_t i = 0; i < len; i++) {
        if (!in_str) {
            in_str = body[i] == '"';
            continue;
        }
        if (body[i] == '"') {
            in_str = 0;
        } else if (body[i] == '\\' && i + 1 < len) {
            if (i + 5 < len && !memcmp(body + i + 1, "u0000", 5))
                copy[i + 5] = digit;
            i++;
        }
    }
}

/* 1 if node a and b differ in their key or string value (a NUL there). */
static int node_differs(const cJSON *a, const cJSON *b)
{
    if ((a->string || b->string) && (!a->string || !b->string || strcmp(a->string, b->string)))
        return 1;
    return cJSON_IsString(a) && cJSON_IsString(b) && strcmp(a->valuestring, b->valuestring);
}

/* 1 if any key or string under a (siblings included) differs from b's. */
static int tree_differs(const cJSON *a, const cJSON *b)
{
    for (; a && b; a = a->next, b = b->next)
        if (node_differs(a, b) || tree_differs(a->child, b->child))
            return 1;
    return 0;
}

/* A node whose own string value is text (it may hold a NUL): only its key
 * and what lies under it count. */
static int text_node_differs(const cJSON *a, const cJSON *b)
{
    if ((a->string || b->string) && (!a->string || !b->string || strcmp(a->string, b->string)))
        return 1;
    return tree_differs(a->child, b->child);
}

/* messages[i].content: a string, or parts whose "text" is text. */
static int content_differs(const cJSON *a, const cJSON *b)
{
    if (!cJSON_IsArray(a))
        return cJSON_IsString(a) ? text_node_differs(a, b) : node_differs(a, b) ||
                                                                tree_differs(a->child, b->child);
    if (node_differs(a, b))
        return 1;
    for (const cJSON *p = a->child, *q = b->child; p && q; p = p->next, q = q->next) {
        if (node_differs(p, q))
            return 1;
        for (const cJSON *x = p->child, *y = q->child; x && y; x = x->next, y = y->next) {
            int text = x->string && !strcmp(x->string, "text") && cJSON_IsString(x);
            if (text ? text_node_differs(x, y) : node_differs(x, y) || tree_differs(x->child, y->child))
                return 1;
        }
    }
    return 0;
}

/* The top-level field of root holding a NUL where only text may: NULL if
 * none. alt: the \u0002 parse. */
static const char *nul_field(const cJSON *root, const cJSON *alt, api_kind kind)
{
    for (const cJSON *a = root->child, *b = alt->child; a && b; a = a->next, b = b->next) {
        const char *name = a->string ? a->string : "";
        int d;
        if (node_differs(a, b) && !(cJSON_IsString(a) && kind == API_COMPLETIONS &&
                                    !strcmp(name, "prompt") && !text_node_differs(a, b))) {
            d = 1;
        } else if (kind == API_COMPLETIONS && !strcmp(name, "prompt") && cJSON_IsArray(a)) {
            d = 0;
            for (const cJSON *x = a->child, *y = b->child; x && y && !d; x = x->next, y = y->next)
                d = cJSON_IsString(x) ? text_node_differs(x, y)
                                      : node_differs(x, y) || tree_differs(x->child, y->child);
        } else if (kind == API_CHAT && !strcmp(name, "messages") && cJSON_IsArray(a)) {
            d = 0;
            for (const cJSON *m = a->child, *n = b->child; m && n && !d; m = m->next, n = n->next) {
                if (node_differs(m, n)) {
                    d = 1;
                    break;
                }
                for (const cJSON *x = m->child, *y = n->child; x && y && !d; x = x->next, y = y->next)
                    d = x->string && !strcmp(x->string, "content")
                            ? content_differs(x, y)
                            : node_differs(x, y) || tree_differs(x->child, y->child);
            }
        } else {
            d = tree_differs(a->child, b->child);
        }
        if (d)
            return name;
    }
    return NULL;
}

/* Parses body[0..len) as one JSON value followed by nothing but
 * whitespace; NULL if it is not. */
static cJSON *parse_whole(const char *body, size_t len)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!root)
        return NULL;
    const char *stop = body + len;
    while (end && end < stop && isspace((unsigned char)*end))
        end++;
    if (!end || end != stop) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

int api_parse_request(api_kind kind, const char *body, size_t len, api_request *out,
                      api_error *e)
{
    memset(out, 0, sizeof *out);
    out->kind = kind;
    char *copy = NULL;
    int nuls = 0;
    cJSON *root = NULL, *alt = NULL;
    if (utf8_valid(body, len, NULL)) {
        nuls = nul_escapes(body, len, &copy);
        if (nuls < 0) {
            api_error_set(e, 400, INVALID, NULL, NULL, "out of memory");
            return -1;
        }
        root = parse_whole(nuls ? copy : body, len);
    }
    if (!root) {
        free(copy);
        api_error_set(e, 400, INVALID, NULL, NULL,
                      "We could not parse the JSON body of your request. The OpenAI API expects "
                      "a JSON payload, but what was sent was not valid JSON.");
        return -1;
    }
    if (nuls > 0) {
        nul_escapes_as(copy, body, len, '2');
        alt = parse_whole(copy, len);
        free(copy);
        if (!alt) { /* the copy is as valid as the body: out of memory */
            cJSON_Delete(root);
            api_error_set(e, 400, INVALID, NULL, NULL, "out of memory");
            return -1;
        }
        const char *f = cJSON_IsObject(root) ? nul_field(root, alt, kind) : NULL;
        if (f) {
            char param[40];
            snprintf(param, sizeof param, "%.39s", f);
            api_error_set(e, 400, INVALID, param, "invalid_value",
                          "Invalid '%.200s': NUL (\\u0000) is allowed only in prompt and message "
                          "text.", f);
            cJSON_Delete(alt);
            cJSON_Delete(root);
            return -1;
        }
    }
    int rc = parse_fields(root, alt, kind, out, e);
    cJSON_Delete(alt);
    cJSON_Delete(root);
    if (rc != 0) {
        api_request_free(out);
        return -1;
    }
    return 0;
}

size_t api_parse_cost(const char *s, size_t len)
{
    size_t values = 0, strings = 0, str_bytes = 0, nuls = 0;
    int in_str = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '"') {
                in_str = 0;
            } else {
                str_bytes++;
                if (c == '\\' && i + 1 < len) {
                    nuls += i + 5 < len && !memcmp(s + i + 1, "u0000", 5);
                    i++;
                }
            }
            continue;
        }
        if (c == '"') {
            in_str = 1;
            strings++;
        } else if (c == '{' || c == '[') {
            values++;
        } else if ((c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n') &&
                   (i == 0 || (!isalnum((unsigned char)s[i - 1]) && s[i - 1] != '.' &&
                               s[i - 1] != '-' && s[i - 1] != '+'))) {
            values++; /* a number or literal starts */
        }
    }
    size_t node = 64 + 16, str_header = 32;
    size_t tree = (values + strings) * node + str_bytes + strings * str_header;
    /* While parsing: the tree, the text copied out of it (and with NULs
     * the second tree and the copy of the body). Then, with the tree gone:
     * the text and its ids. */
    size_t parsing = tree + str_bytes + (nuls ? tree + len : 0);
    size_t tokenizing = str_bytes * (1 + 4);
    return parsing > tokenizing ? parsing : tokenizing;
}

/* ------------------------------------------------------------ responses */

static void token_ids_field(sbuf *b, const api_output *o)
{
    if (!o->with_token_ids)
        return;
    sb_puts(b, ",\"token_ids\":[");
    for (int i = 0; i < o->n_token_ids; i++)
        sb_printf(b, i ? ",%d" : "%d", (int)o->token_ids[i]);
    sb_puts(b, "]");
}

static void finish_field(sbuf *b, const api_output *o)
{
    sb_puts(b, ",\"finish_reason\":");
    json_str_or_null(b, o->finish_reason);
}

static void head(sbuf *b, const char *id, const char *object, long created, const char *model)
{
    sb_puts(b, "{\"id\":");
    sb_json_str(b, id, strlen(id));
    sb_printf(b, ",\"object\":\"%s\",\"created\":%ld,\"model\":", object, created);
    sb_json_str(b, model, strlen(model));
}

static void fingerprint_field(sbuf *b, const char *fp)
{
    if (!fp)
        return;
    sb_puts(b, ",\"system_fingerprint\":");
    sb_json_str(b, fp, strlen(fp));
}

void api_system_fingerprint(char *out, size_t n, const char *model)
{
    snprintf(out, n, "tandem-%s-%s", API_FINGERPRINT_VERSION, model);
}

int api_request_id_ok(const char *v)
{
    if (!v)
        return 0;
    size_t n = strlen(v);
    if (n == 0 || n > API_MAX_REQUEST_ID)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] < 0x20 || (unsigned char)v[i] > 0x7E)
            return 0;
    return 1;
}

static void usage(sbuf *b, int prompt_tokens, int completion_tokens)
{
    sb_printf(b, "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}",
              prompt_tokens, completion_tokens, prompt_tokens + completion_tokens);
}

/* A logprob as OpenAI writes it: -inf (a token that cannot be drawn) is
 * -9999.0. */
static void lp_value(sbuf *b, float v)
{
    if (isinf(v) || v < -9999.0f)
        sb_puts(b, "-9999.0");
    else
        sb_printf(b, "%.9g", (double)v);
}

/* The token's text: its bytes made valid UTF-8 (an incomplete character
 * becomes U+FFFD; "bytes" keeps the exact bytes), or "token_id:<id>"
 * without a vocabulary. */
static void lp_token_str(sbuf *b, const api_lp_entry *t, sbuf *scratch)
{
    if (!t->bytes) {
        char s[32];
        snprintf(s, sizeof s, "token_id:%d", (int)t->id);
        sb_json_str(b, s, strlen(s));
        return;
    }
    sb_reset(scratch);
    utf8_sanitize_append(scratch, t->bytes, t->len);
    sb_json_str(b, scratch->p ? scratch->p : "", scratch->len);
    if (scratch->oom)
        b->oom = 1;
}

static void lp_bytes(sbuf *b, const api_lp_entry *t)
{
    if (!t->bytes) {
        sb_puts(b, "null");
        return;
    }
    sb_puts(b, "[");
    for (size_t i = 0; i < t->len; i++)
        sb_printf(b, i ? ",%u" : "%u", (unsigned)(unsigned char)t->bytes[i]);
    sb_puts(b, "]");
}

static void chat_lp_entry(sbuf *b, const api_lp_entry *t, sbuf *scratch)
{
    sb_puts(b, "{\"token\":");
    lp_token_str(b, t, scratch);
    sb_puts(b, ",\"logprob\":");
    lp_value(b, t->logprob);
    sb_puts(b, ",\"bytes\":");
    lp_bytes(b, t);
}

/* chat: {"content":[{token, logprob, bytes, top_logprobs:[...]}], "refusal":null} */
static void chat_logprobs(sbuf *b, const api_output *o, int streaming)
{
    sb_puts(b, ",\"logprobs\":");
    if (!o->with_logprobs || (streaming && o->n_logprobs == 0)) {
        sb_puts(b, "null");
        return;
    }
    sbuf scratch;
    sb_init(&scratch);
    sb_puts(b, "{\"content\":[");
    for (int i = 0; i < o->n_logprobs; i++) {
        const api_lp_token *t = &o->logprobs[i];
        if (i)
            sb_puts(b, ",");
        chat_lp_entry(b, &t->tok, &scratch);
        sb_puts(b, ",\"top_logprobs\":[");
        for (int k = 0; k < t->n_top; k++) {
            if (k)
                sb_puts(b, ",");
            chat_lp_entry(b, &t->top[k], &scratch);
            sb_puts(b, "}");
        }
        sb_puts(b, "]}");
    }
    sb_puts(b, "],\"refusal\":null}");
    sb_free(&scratch);
}

static const api_lp_entry *lp_alt(const api_lp_token *t, int k)
{
    return k < t->n_top ? &t->top[k] : &t->tok;
}

/* Whether alternative k of t (k == n_top: the sampled token) is written
 * with the same text as an earlier one: a completions top_logprobs dict has
 * one key per text, the most likely entry's. */
static int lp_dup_key(const api_lp_token *t, int k, sbuf *a, sbuf *c)
{
    sbuf tmp;
    sb_init(&tmp);
    sb_reset(a);
    lp_token_str(a, lp_alt(t, k), &tmp);
    int dup = 0;
    for (int j = 0; j < k && j < t->n_top && !dup; j++) {
        sb_reset(c);
        lp_token_str(c, lp_alt(t, j), &tmp);
        dup = a->len == c->len && (a->len == 0 || !memcmp(a->p, c->p, a->len));
    }
    sb_free(&tmp);
    return dup;
}

/* completions: {"tokens":[...], "token_logprobs":[...], "top_logprobs":[{text: lp}],
 * "text_offset":[...]}; each dict holds the k alternatives and, as OpenAI
 * says ("up to logprobs+1 elements"), the sampled token. */
static void completion_logprobs(sbuf *b, const api_output *o, int streaming)
{
    sb_puts(b, ",\"logprobs\":");
    if (!o->with_logprobs || (streaming && o->n_logprobs == 0)) {
        sb_puts(b, "null");
        return;
    }
    sbuf scratch, key, other;
    sb_init(&scratch);
    sb_init(&key);
    sb_init(&other);
    sb_puts(b, "{\"tokens\":[");
    for (int i = 0; i < o->n_logprobs; i++) {
        if (i)
            sb_puts(b, ",");
        lp_token_str(b, &o->logprobs[i].tok, &scratch);
    }
    sb_puts(b, "],\"token_logprobs\":[");
    for (int i = 0; i < o->n_logprobs; i++) {
        if (i)
            sb_puts(b, ",");
        if (o->logprobs[i].no_logprob)
            sb_puts(b, "null");
        else
            lp_value(b, o->logprobs[i].tok.logprob);
    }
    sb_puts(b, "],\"top_logprobs\":[");
    for (int i = 0; i < o->n_logprobs; i++) {
        const api_lp_token *t = &o->logprobs[i];
        if (t->no_logprob) {
            sb_puts(b, i ? ",null" : "null");
            continue;
        }
        sb_puts(b, i ? ",{" : "{");
        int n = 0;
        for (int k = 0; k <= t->n_top; k++) {
            if (lp_dup_key(t, k, &key, &other))
                continue;
            if (n++)
                sb_puts(b, ",");
            sb_append(b, key.p, key.len);
            sb_puts(b, ":");
            lp_value(b, lp_alt(t, k)->logprob);
        }
        sb_puts(b, "}");
    }
    sb_puts(b, "],\"text_offset\":[");
    for (int i = 0; i < o->n_logprobs; i++)
        sb_printf(b, i ? ",%ld" : "%ld", o->logprobs[i].text_offset);
    sb_puts(b, "]}");
    if (key.oom || other.oom)
        b->oom = 1;
    sb_free(&scratch);
    sb_free(&key);
    sb_free(&other);
}

static void completion_choice(sbuf *b, const api_output *o, int streaming)
{
    sb_printf(b, "{\"index\":%d,\"text\":", o->index);
    sb_json_str(b, o->text ? o->text : "", o->text ? o->text_len : 0);
    completion_logprobs(b, o, streaming);
    finish_field(b, o);
    token_ids_field(b, o);
    sb_puts(b, "}");
}

void api_sse_completion_chunk(sbuf *b, const char *id, long created, const char *model,
                              const api_output *o)
{
    sb_puts(b, "data: ");
    head(b, id, "text_completion", created, model);
    fingerprint_field(b, o->fingerprint);
    sb_puts(b, ",\"choices\":[");
    completion_choice(b, o, 1);
    sb_puts(b, o->usage_null ? "],\"usage\":null}\n\n" : "]}\n\n");
}

static void tool_calls_field(sbuf *b, const api_output *o, int streaming)
{
    sb_puts(b, "\"tool_calls\":[");
    for (int i = 0; i < o->n_tool_calls; i++) {
        const api_tool_call *t = &o->tool_calls[i];
        sb_puts(b, i ? ",{" : "{");
        if (streaming)
            sb_printf(b, "\"index\":%d,", o->tool_index + i);
        sb_puts(b, "\"id\":");
        sb_json_str(b, t->id, strlen(t->id));
        sb_puts(b, ",\"type\":\"function\",\"function\":{\"name\":");
        sb_json_str(b, t->name, strlen(t->name));
        sb_puts(b, ",\"arguments\":");
        sb_json_str(b, t->arguments, strlen(t->arguments));
        sb_puts(b, "}}");
    }
    sb_puts(b, "]");
}

void api_sse_chat_chunk(sbuf *b, const char *id, long created, const char *model,
                        const api_output *o, int first_chunk)
{
    sb_puts(b, "data: ");
    head(b, id, "chat.completion.chunk", created, model);
    fingerprint_field(b, o->fingerprint);
    sb_printf(b, ",\"choices\":[{\"index\":%d,\"delta\":{", o->index);
    int n = 0;
    if (first_chunk) {
        sb_puts(b, "\"role\":\"assistant\",\"content\":");
        sb_json_str(b, o->text ? o->text : "", o->text ? o->text_len : 0);
        n++;
    } else if (o->text_len || (!o->finish_reason && !o->omit_empty_content)) {
        sb_puts(b, "\"content\":");
        sb_json_str(b, o->text ? o->text : "", o->text ? o->text_len : 0);
        n++;
    }
    if (o->reasoning_len) {
        sb_puts(b, n++ ? ",\"reasoning_content\":" : "\"reasoning_content\":");
        sb_json_str(b, o->reasoning, o->reasoning_len);
    }
    if (o->n_tool_calls) {
        if (n++)
            sb_puts(b, ",");
        tool_calls_field(b, o, 1);
    }
    sb_puts(b, "}");
    chat_logprobs(b, o, 1);
    finish_field(b, o);
    token_ids_field(b, o);
    sb_puts(b, o->usage_null ? "}],\"usage\":null}\n\n" : "}]}\n\n");
}

void api_sse_usage_chunk(sbuf *b, api_kind kind, const char *id, long created,
                         const char *model, const char *fingerprint, int prompt_tokens,
                         int completion_tokens)
{
    sb_puts(b, "data: ");
    head(b, id, kind == API_CHAT ? "chat.completion.chunk" : "text_completion", created, model);
    fingerprint_field(b, fingerprint);
    sb_puts(b, ",\"choices\":[],");
    usage(b, prompt_tokens, completion_tokens);
    sb_puts(b, "}\n\n");
}

void api_sse_error(sbuf *b, const api_error *e)
{
    sb_puts(b, "data: ");
    error_object(b, e);
    sb_puts(b, "\n\n");
}

void api_sse_done(sbuf *b)
{
    sb_puts(b, "data: [DONE]\n\n");
}

void api_completion_body_n(sbuf *b, const char *id, long created, const char *model,
                           const api_output *o, int n_choices, int prompt_tokens,
                           int completion_tokens)
{
    head(b, id, "text_completion", created, model);
    fingerprint_field(b, o->fingerprint);
    sb_puts(b, ",\"choices\":[");
    for (int i = 0; i < n_choices; i++) {
        if (i)
            sb_puts(b, ",");
        completion_choice(b, &o[i], 0);
    }
    sb_puts(b, "],");
    usage(b, prompt_tokens, completion_tokens);
    sb_puts(b, "}");
}

void api_completion_body(sbuf *b, const char *id, long created, const char *model,
                         const api_output *o, int prompt_tokens, int completion_tokens)
{
    api_completion_body_n(b, id, created, model, o, 1, prompt_tokens, completion_tokens);
}

static void chat_choice(sbuf *b, const api_output *o)
{
    sb_printf(b, "{\"index\":%d,\"message\":{\"role\":\"assistant\",\"content\":", o->index);
    if (!o->text_len && o->n_tool_calls)
        sb_puts(b, "null"); /* OpenAI: a message with only tool calls has null content */
    else
        sb_json_str(b, o->text ? o->text : "", o->text ? o->text_len : 0);
    sb_puts(b, ",\"refusal\":null");
    if (o->reasoning_len) {
        sb_puts(b, ",\"reasoning_content\":");
        sb_json_str(b, o->reasoning, o->reasoning_len);
    }
    if (o->n_tool_calls) {
        sb_puts(b, ",");
        tool_calls_field(b, o, 0);
    }
    sb_puts(b, "}");
    chat_logprobs(b, o, 0);
    finish_field(b, o);
    token_ids_field(b, o);
    sb_puts(b, "}");
}

void api_chat_body_n(sbuf *b, const char *id, long created, const char *model,
                     const api_output *o, int n_choices, int prompt_tokens, int completion_tokens)
{
    head(b, id, "chat.completion", created, model);
    fingerprint_field(b, o->fingerprint);
    sb_puts(b, ",\"choices\":[");
    for (int i = 0; i < n_choices; i++) {
        if (i)
            sb_puts(b, ",");
        chat_choice(b, &o[i]);
    }
    sb_puts(b, "],");
    usage(b, prompt_tokens, completion_tokens);
    sb_puts(b, "}");
}

void api_chat_body(sbuf *b, const char *id, long created, const char *model,
                   const api_output *o, int prompt_tokens, int completion_tokens)
{
    api_chat_body_n(b, id, created, model, o, 1, prompt_tokens, completion_tokens);
}

void api_model_body(sbuf *b, const char *model, long created)
{
    sb_puts(b, "{\"id\":");
    sb_json_str(b, model, strlen(model));
    sb_printf(b, ",\"object\":\"model\",\"created\":%ld,\"owned_by\":\"tandem\"}", created);
}

void api_models_body(sbuf *b, const char *const *models, int n_models, long created)
{
    sb_puts(b, "{\"object\":\"list\",\"data\":[");
    for (int i = 0; i < n_models; i++) {
        if (i)
            sb_puts(b, ",");
        api_model_body(b, models[i], created);
    }
    sb_puts(b, "]}");
}
