/* libFuzzer target: the router's OpenAI request parser and validator
 * (api_parse_request) on arbitrary bodies, then the response writers fed
 * with what it accepted.
 *
 * data[0] bit 0 picks the endpoint (completions / chat completions); the
 * rest is the HTTP body. Properties: a refusal is an HTTP 400 with a
 * message and an error body that is valid JSON; an accepted request has
 * in-range fields (a non-empty model, temperature in [0, 2], top_p in
 * (0, 1], at most 4 non-empty stop strings, non-negative token ids, a prompt
 * or messages), and the SSE chunks and bodies written with its model name
 * and stop strings are valid JSON, so nothing a client sends can break the
 * framing of what it gets back. */
#include <stdlib.h>
#include <string.h>
#include <cJSON.h>
#include "router/openai_api.h"
#include "common/sbuf.h"
#include "tests/fuzz/harness.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

/* Every "data: " event of an SSE buffer must be JSON (or [DONE]). */
static void check_sse(const sbuf *b)
{
    FZ_CHECK(!b->oom && b->p != NULL);
    const char *p = b->p;
    while (*p) {
        FZ_CHECK(strncmp(p, "data: ", 6) == 0);
        const char *end = strstr(p, "\n\n");
        FZ_CHECK(end != NULL);
        size_t n = (size_t)(end - p) - 6;
        if (!(n == 6 && memcmp(p + 6, "[DONE]", 6) == 0)) {
            cJSON *j = cJSON_ParseWithLength(p + 6, n);
            FZ_CHECK(cJSON_IsObject(j));
            cJSON_Delete(j);
        }
        p = end + 2;
    }
}

static void check_json(const sbuf *b)
{
    FZ_CHECK(!b->oom && b->p != NULL);
    cJSON *j = cJSON_ParseWithLength(b->p, b->len);
    FZ_CHECK(cJSON_IsObject(j));
    cJSON_Delete(j);
}

static void write_responses(const api_request *r)
{
    /* Echo the client's strings back the way the router does: the model
     * name in every chunk, stop strings as (sanitized) generated text. */
    sbuf text;
    sb_init(&text);
    for (int i = 0; i < r->n_stop; i++)
        utf8_sanitize_append(&text, r->stop[i], strlen(r->stop[i]));
    for (int i = 0; i < r->n_prompts; i++)
        if (r->prompts[i].text)
            utf8_sanitize_append(&text, r->prompts[i].text, r->prompts[i].text_len);
    FZ_CHECK(!text.oom);
    api_tool_call call = {"call_0", r->model, text.p ? text.p : ""};
    int32_t ids[2] = {0, 7};
    api_output o = {0};
    o.text = text.p ? text.p : "";
    o.text_len = text.len;
    o.reasoning = o.text;
    o.reasoning_len = o.text_len;
    o.tool_calls = &call;
    o.n_tool_calls = r->kind == API_CHAT;
    o.token_ids = ids;
    o.n_token_ids = 2;
    o.with_token_ids = r->return_token_ids;
    o.finish_reason = r->stream ? NULL : "stop";

    sbuf b;
    sb_init(&b);
    if (r->kind == API_CHAT) {
        api_sse_chat_chunk(&b, "chatcmpl-1", 1, r->model, &o, 1);
        api_sse_chat_chunk(&b, "chatcmpl-1", 1, r->model, &o, 0);
    } else {
        api_sse_completion_chunk(&b, "cmpl-1", 1, r->model, &o);
    }
    api_sse_usage_chunk(&b, r->kind, "x", 1, r->model, "tandem-1-x", 1, 2);
    api_sse_done(&b);
    check_sse(&b);
    sb_reset(&b);
    if (r->kind == API_CHAT)
        api_chat_body(&b, "chatcmpl-1", 1, r->model, &o, 3, 4);
    else
        api_completion_body(&b, "cmpl-1", 1, r->model, &o, 3, 4);
    check_json(&b);
    sb_reset(&b);
    const char *models[1] = {r->model};
    api_models_body(&b, models, 1, 1);
    check_json(&b);
    sb_free(&b);
    sb_free(&text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    api_kind kind = (data[0] & 1) ? API_CHAT : API_COMPLETIONS;
    api_request r;
    api_error e;
    memset(&e, 0, sizeof e);
    if (api_parse_request(kind, (const char *)data + 1, size - 1, &r, &e) != 0) {
        FZ_CHECK(e.http_status == 400 && e.message[0] != '\0');
        char *json = api_error_json(&e);
        FZ_CHECK(json != NULL);
        cJSON *j = cJSON_Parse(json);
        FZ_CHECK(cJSON_IsObject(j) && cJSON_IsObject(cJSON_GetObjectItem(j, "error")));
        cJSON_Delete(j);
        free(json);
        sbuf b;
        sb_init(&b);
        api_sse_error(&b, &e);
        check_sse(&b);
        sb_free(&b);
        return 0;
    }
    FZ_CHECK(r.kind == kind && r.model[0] != '\0');
    FZ_CHECK(r.temperature >= 0 && r.temperature <= 2);
    FZ_CHECK(r.top_p > 0 && r.top_p <= 1);
    FZ_CHECK(r.max_tokens >= 0 && r.top_k >= -1);
    FZ_CHECK(r.n_stop >= 0 && r.n_stop <= API_MAX_STOP);
    for (int i = 0; i < r.n_stop; i++)
        FZ_CHECK(r.stop[i] && r.stop[i][0] != '\0');
    if (kind == API_COMPLETIONS) {
        FZ_CHECK(r.n_prompts >= 1 && r.n_prompts <= API_MAX_CHOICES);
        for (int p = 0; p < r.n_prompts; p++) {
            FZ_CHECK((r.prompts[p].text != NULL) != (r.prompts[p].n_ids > 0));
            for (int i = 0; i < r.prompts[p].n_ids; i++)
                FZ_CHECK(r.prompts[p].ids[i] >= 0);
        }
        FZ_CHECK(r.n >= 1 && r.best_of >= r.n && (long)r.n_prompts * r.best_of <= API_MAX_CHOICES);
    } else {
        FZ_CHECK(r.n_messages > 0 && r.messages_json != NULL);
    }
    for (int i = 0; i < r.n_stop_token_ids; i++)
        FZ_CHECK(r.stop_token_ids[i] >= 0);
    FZ_CHECK(r.include_usage == 0 || r.stream);
    write_responses(&r);
    api_request_free(&r);
    return 0;
}
