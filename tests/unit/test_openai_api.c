/* The OpenAI-compatible request validation and response shapes
 * (router/openai_api.c), and the UTF-8 helpers the streaming uses. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "router/openai_api.h"

static int parse(api_kind kind, const char *body, api_request *r, api_error *e)
{
    return api_parse_request(kind, body, strlen(body), r, e);
}

/* Expects a 400 naming param (NULL: JSON null) and code (NULL: null). */
static void expect_400(api_kind kind, const char *body, const char *param, const char *code)
{
    api_request r;
    api_error e;
    memset(&e, 0, sizeof e);
    assert_int_equal(parse(kind, body, &r, &e), -1);
    assert_int_equal(e.http_status, 400);
    assert_string_equal(e.type, "invalid_request_error");
    assert_string_equal(e.param, param ? param : "");
    assert_string_equal(e.code, code ? code : "");
    assert_true(strlen(e.message) > 10);
}

static void malformed_bodies_are_rejected(void **state)
{
    (void)state;
    expect_400(API_COMPLETIONS, "{bad", NULL, NULL);
    expect_400(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[1]} trailing", NULL, NULL);
    expect_400(API_COMPLETIONS, "", NULL, NULL);
    expect_400(API_COMPLETIONS, "[1,2]", NULL, NULL);
    expect_400(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":\"\xff\"}", NULL, NULL);
    api_request r;
    api_error e;
    assert_int_equal(parse(API_COMPLETIONS, "{bad", &r, &e), -1);
    assert_non_null(strstr(e.message, "could not parse the JSON body"));
}

static void required_fields(void **state)
{
    (void)state;
    expect_400(API_COMPLETIONS, "{\"prompt\":[1]}", "model", NULL);
    expect_400(API_COMPLETIONS, "{\"model\":7,\"prompt\":[1]}", "model", "invalid_type");
    expect_400(API_COMPLETIONS, "{\"model\":\"m\"}", "prompt", NULL);
    expect_400(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[]}", "prompt", NULL);
    expect_400(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[1,-2]}", "prompt", "invalid_type");
    expect_400(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[1,2.5]}", "prompt", "invalid_type");
    expect_400(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[\"a\",\"b\"]}", "prompt",
               "unsupported_value");
    expect_400(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":{}}", "prompt", "invalid_type");
    expect_400(API_CHAT, "{\"model\":\"m\"}", "messages", NULL);
    expect_400(API_CHAT, "{\"model\":\"m\",\"messages\":[]}", "messages", "empty_array");
    expect_400(API_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}",
               "messages[0].role", "invalid_value");
    expect_400(API_CHAT,
               "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
               "messages[0].content", "unsupported_value");
}

static void sampling_parameters_are_range_checked(void **state)
{
    (void)state;
    const char *pre = "{\"model\":\"m\",\"prompt\":[1],";
    char b[256];
    struct {
        const char *field;
        const char *param;
        const char *code;
    } bad[] = {
        {"\"temperature\":-0.5}", "temperature", "invalid_value"},
        {"\"temperature\":2.5}", "temperature", "invalid_value"},
        {"\"temperature\":1e999}", "temperature", "invalid_type"},
        {"\"temperature\":\"hot\"}", "temperature", "invalid_type"},
        {"\"top_p\":0}", "top_p", "invalid_value"},
        {"\"top_p\":1.01}", "top_p", "invalid_value"},
        {"\"top_p\":-1}", "top_p", "invalid_value"},
        {"\"max_tokens\":0}", "max_tokens", "integer_below_min_value"},
        {"\"max_tokens\":-3}", "max_tokens", "integer_below_min_value"},
        {"\"max_tokens\":2.5}", "max_tokens", "invalid_type"},
        {"\"max_tokens\":\"9\"}", "max_tokens", "invalid_type"},
        {"\"top_k\":-2}", "top_k", "invalid_value"},
        {"\"seed\":1.5}", "seed", "invalid_type"},
        {"\"n\":2}", "n", "unsupported_value"},
        {"\"stream\":1}", "stream", "invalid_type"},
        {"\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop", "invalid_value"},
        {"\"stop\":\"\"}", "stop", "invalid_value"},
        {"\"logprobs\":3}", "logprobs", "unsupported_value"},
        {"\"presence_penalty\":0.5}", "presence_penalty", "unsupported_value"},
        {"\"stream_options\":{\"include_usage\":true}}", "stream_options", "invalid_value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(b, sizeof b, "%s%s", pre, bad[i].field);
        expect_400(API_COMPLETIONS, b, bad[i].param, bad[i].code);
    }
}

/* Fields outside the endpoint's schema are refused by name (a misspelt
 * parameter must not silently change the request); OpenAI fields Tandem
 * does not implement are refused unless at their default. */
static void unknown_and_unimplemented_fields(void **state)
{
    (void)state;
    expect_400(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[1],\"frobnicate\":1}", "frobnicate",
               "unknown_parameter");
    expect_400(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[1],\"max_token\":5}", "max_token",
               "unknown_parameter");
    expect_400(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[1],\"messages\":[]}", "messages",
               "unknown_parameter");
    expect_400(API_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
               "\"prompt\":\"x\"}", "prompt", "unknown_parameter");
    api_request r;
    api_error e;
    assert_int_equal(parse(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[1],\"temprature\":0}",
                           &r, &e), -1);
    assert_non_null(strstr(e.message, "Unrecognized request argument supplied: temprature"));
    expect_400(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[1],\"suffix\":\"x\"}", "suffix",
               "unsupported_value");
    const char *msgs = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    static const struct {
        const char *extra, *param;
    } chat_bad[] = {
        {"\"top_logprobs\":3", "top_logprobs"},
        {"\"modalities\":[\"text\",\"audio\"]", "modalities"},
        {"\"audio\":{\"voice\":\"x\"}", "audio"},
        {"\"functions\":[]", "functions"},
    };
    char b[512];
    for (size_t i = 0; i < sizeof chat_bad / sizeof *chat_bad; i++) {
        snprintf(b, sizeof b, "{\"model\":\"m\",%s,%s}", msgs, chat_bad[i].extra);
        expect_400(API_CHAT, b, chat_bad[i].param, "unsupported_value");
    }
    snprintf(b, sizeof b, "{\"model\":\"m\",%s,\"tool_choice\":\"auto\",\"response_format\":"
             "{\"type\":\"text\"},\"modalities\":[\"text\"],\"parallel_tool_calls\":true,"
             "\"store\":false,\"top_logprobs\":0,\"audio\":null}", msgs);
    assert_int_equal(parse(API_CHAT, b, &r, &e), 0);
    assert_null(r.response_format_json);
    assert_null(r.tool_choice_json);
    api_request_free(&r);
    /* structured outputs: shapes checked here, schemas by the router */
    static const struct {
        const char *extra, *param;
    } shape_bad[] = {
        {"\"tool_choice\":\"required\"", "tool_choice"}, /* no tools */
        {"\"tool_choice\":{\"type\":\"function\"}", "tool_choice"},
        {"\"tool_choice\":\"sometimes\"", "tool_choice"},
        {"\"response_format\":{\"type\":\"yaml\"}", "response_format"},
        {"\"response_format\":\"json\"", "response_format"},
    };
    for (size_t i = 0; i < sizeof shape_bad / sizeof *shape_bad; i++) {
        snprintf(b, sizeof b, "{\"model\":\"m\",%s,%s}", msgs, shape_bad[i].extra);
        expect_400(API_CHAT, b, shape_bad[i].param, "invalid_value");
    }
    const char *tools = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]";
    snprintf(b, sizeof b, "{\"model\":\"m\",%s,%s,\"tool_choice\":{\"type\":\"function\","
             "\"function\":{\"name\":\"f\"}},\"response_format\":{\"type\":\"json_object\"}}",
             msgs, tools);
    assert_int_equal(parse(API_CHAT, b, &r, &e), 0);
    assert_non_null(r.response_format_json);
    assert_non_null(r.tool_choice_json);
    assert_non_null(r.tools_json);
    api_request_free(&r);
    snprintf(b, sizeof b, "{\"model\":\"m\",%s,%s,\"tool_choice\":\"none\"}", msgs, tools);
    assert_int_equal(parse(API_CHAT, b, &r, &e), 0);
    assert_null(r.tools_json); /* "none": the tools are not rendered */
    assert_null(r.tool_choice_json);
    api_request_free(&r);
}

/* cJSON ends a string at an escaped NUL. In prompt and message text a NUL
 * is a character like any other, read back exactly (next to U+0001 and
 * U+0002, the two stand-ins the parser uses); anywhere else (names, roles,
 * stop strings, keys) it is refused naming the top-level field. */
static void nul_is_text_in_prompts_and_refused_in_names(void **state)
{
    (void)state;
    expect_400(API_COMPLETIONS, "{\"model\":\"tiny\\u0000junk\",\"prompt\":[1]}", "model",
               "invalid_value");
    expect_400(API_COMPLETIONS, "{\"model\":\"tiny\",\"prompt\":[1],\"stop\":[\"x\",\"\\u0000\"]}",
               "stop", "invalid_value");
    expect_400(API_COMPLETIONS, "{\"model\":\"tiny\",\"prompt\":[1],\"user\":\"a\\u0000\"}", "user",
               "invalid_value");
    expect_400(API_CHAT,
               "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\\u0000\",\"content\":\"x\"}]}",
               "messages", "invalid_value");
    expect_400(API_CHAT,
               "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
               "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\\u0000g\"}}]}",
               "tools", "invalid_value");
    expect_400(API_CHAT,
               "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":"
               "[{\"type\":\"text\\u0000\",\"text\":\"a\"}]}]}",
               "messages", "invalid_value");
    api_request r;
    api_error e;
    assert_int_equal(parse(API_COMPLETIONS, "{\"model\":\"a\\u0000\",\"prompt\":[1]}", &r, &e), -1);
    assert_string_equal(e.message,
                        "Invalid 'model': NUL (\\u0000) is allowed only in prompt and message text.");

    assert_int_equal(parse(API_COMPLETIONS,
                           "{\"model\":\"tiny\",\"prompt\":\"a\\u0000b\\u0001\\u0002\\u0000\"}", &r,
                           &e), 0);
    assert_int_equal(r.prompt_len, 6);
    assert_memory_equal(r.prompt_text, "a\0b\x01\x02\0", 7);
    api_request_free(&r);
    assert_int_equal(parse(API_COMPLETIONS, "{\"model\":\"tiny\",\"prompt\":[\"\\u0000\"]}", &r, &e), 0);
    assert_int_equal(r.prompt_len, 1);
    assert_int_equal(r.prompt_text[0], 0);
    api_request_free(&r);

    assert_int_equal(parse(API_CHAT,
                           "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
                           "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\\u0000\"},"
                           "{\"type\":\"text\",\"text\":\"\\u0000b\"}]}]}", &r, &e), 0);
    assert_int_equal(r.n_messages, 2);
    assert_false(memchr(r.messages[0].content, 0, r.messages[0].content_len));
    assert_int_equal(r.messages[1].content_len, 4);
    assert_memory_equal(r.messages[1].content, "a\0\0b", 4);
    assert_true(r.content_has_nul);
    api_request_free(&r);
    assert_int_equal(parse(API_CHAT,
                           "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\\u0001\"}]}",
                           &r, &e), 0);
    assert_false(r.content_has_nul);
    assert_int_equal(r.messages[0].content_len, 2);
    api_request_free(&r);

    /* An escaped backslash before u0000, and U+0001, are ordinary text. */
    assert_int_equal(parse(API_COMPLETIONS,
                           "{\"model\":\"tiny\",\"prompt\":\"a\\\\u0000\\u0001\"}", &r, &e), 0);
    assert_string_equal(r.prompt_text, "a\\u0000\x01");
    assert_int_equal(r.prompt_len, 8);
    api_request_free(&r);
}

static void valid_requests_parse_with_defaults(void **state)
{
    (void)state;
    api_request r;
    api_error e;
    assert_int_equal(parse(API_COMPLETIONS,
                           "{\"model\":\"tiny\",\"prompt\":[5,6,7],\"user\":\"u-1\",\"metadata\":{\"x\":\"1\"},"
                           "\"n\":1,\"echo\":false,\"presence_penalty\":0,\"suffix\":null}", &r, &e), 0);
    assert_string_equal(r.model, "tiny");
    assert_int_equal(r.n_prompt_ids, 3);
    assert_int_equal(r.prompt_ids[2], 7);
    assert_null(r.prompt_text);
    assert_int_equal(r.max_tokens, 0);
    assert_true(r.temperature == 1.0 && r.top_p == 1.0 && r.top_k == -1);
    assert_int_equal(r.stream, 0);
    assert_int_equal(r.has_seed, 0);
    api_request_free(&r);

    assert_int_equal(parse(API_COMPLETIONS,
                           "{\"model\":\"tiny\",\"prompt\":\"hi\",\"max_tokens\":9,\"temperature\":0,"
                           "\"top_p\":0.5,\"top_k\":40,\"seed\":-1,\"stream\":true,"
                           "\"stream_options\":{\"include_usage\":true},\"stop\":[\"a\",\"bc\"],"
                           "\"stop_token_ids\":[2,3],\"ignore_eos\":true}", &r, &e), 0);
    assert_string_equal(r.prompt_text, "hi");
    assert_int_equal(r.max_tokens, 9);
    assert_true(r.temperature == 0 && r.top_p == 0.5 && r.top_k == 40);
    assert_int_equal(r.has_seed, 1);
    assert_true(r.seed == UINT64_MAX);
    assert_int_equal(r.stream, 1);
    assert_int_equal(r.include_usage, 1);
    assert_int_equal(r.n_stop, 2);
    assert_string_equal(r.stop[1], "bc");
    assert_int_equal(r.n_stop_token_ids, 2);
    assert_int_equal(r.ignore_eos, 1);
    api_request_free(&r);

    assert_int_equal(parse(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[[4,5]]}", &r, &e), 0);
    assert_int_equal(r.n_prompt_ids, 2);
    api_request_free(&r);

    assert_int_equal(parse(API_CHAT,
                           "{\"model\":\"m\",\"max_completion_tokens\":4,\"messages\":["
                           "{\"role\":\"system\",\"content\":\"be brief\"},"
                           "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                           "{\"type\":\"text\",\"text\":\"b\"}]}]}", &r, &e), 0);
    assert_int_equal(r.n_messages, 2);
    assert_string_equal(r.messages[0].role, "system");
    assert_string_equal(r.messages[1].content, "ab");
    assert_int_equal(r.max_tokens, 4);
    api_request_free(&r);
}

static void error_body_has_openai_shape(void **state)
{
    (void)state;
    api_error e;
    api_error_set(&e, 400, "invalid_request_error", "temperature", "invalid_value",
                  "bad \"t\" %d", 3);
    char *j = api_error_json(&e);
    assert_string_equal(j, "{\"error\":{\"message\":\"bad \\\"t\\\" 3\",\"type\":"
                           "\"invalid_request_error\",\"param\":\"temperature\",\"code\":"
                           "\"invalid_value\"}}");
    free(j);
    api_error_set(&e, 400, "invalid_request_error", NULL, NULL, "x");
    j = api_error_json(&e);
    assert_string_equal(j, "{\"error\":{\"message\":\"x\",\"type\":\"invalid_request_error\","
                           "\"param\":null,\"code\":null}}");
    free(j);
}

static void sse_chunks_have_openai_shape(void **state)
{
    (void)state;
    sbuf b;
    sb_init(&b);
    int32_t ids[1] = {42};
    api_output o = {.text = "h\n\"", .text_len = 3, .token_ids = ids, .n_token_ids = 1};
    api_sse_completion_chunk(&b, "cmpl-1", 1700000000, "tiny", &o);
    assert_string_equal(b.p, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":"
                             "1700000000,\"model\":\"tiny\",\"choices\":[{\"index\":0,\"text\":"
                             "\"h\\n\\\"\",\"logprobs\":null,\"finish_reason\":null}]}\n\n");
    sb_reset(&b);
    o.with_token_ids = 1;
    o.text_len = 0;
    o.finish_reason = "length";
    api_sse_completion_chunk(&b, "cmpl-1", 5, "tiny", &o);
    assert_string_equal(b.p, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":5,"
                             "\"model\":\"tiny\",\"choices\":[{\"index\":0,\"text\":\"\","
                             "\"logprobs\":null,\"finish_reason\":\"length\",\"token_ids\":[42]}]}\n\n");
    sb_reset(&b);
    api_output first = {.text = "", .text_len = 0};
    api_sse_chat_chunk(&b, "chatcmpl-2", 5, "m", &first, 1);
    assert_string_equal(b.p, "data: {\"id\":\"chatcmpl-2\",\"object\":\"chat.completion.chunk\","
                             "\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":"
                             "{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
                             "\"finish_reason\":null}]}\n\n");
    sb_reset(&b);
    api_output last = {.text = "", .text_len = 0, .finish_reason = "stop"};
    api_sse_chat_chunk(&b, "chatcmpl-2", 5, "m", &last, 0);
    assert_string_equal(b.p, "data: {\"id\":\"chatcmpl-2\",\"object\":\"chat.completion.chunk\","
                             "\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},"
                             "\"logprobs\":null,\"finish_reason\":\"stop\"}]}\n\n");
    sb_reset(&b);
    api_sse_usage_chunk(&b, API_COMPLETIONS, "cmpl-1", 5, "tiny", NULL, 3, 4);
    api_sse_done(&b);
    assert_string_equal(b.p, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":5,"
                             "\"model\":\"tiny\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,"
                             "\"completion_tokens\":4,\"total_tokens\":7}}\n\ndata: [DONE]\n\n");
    sb_free(&b);
}

static void final_bodies_have_openai_shape(void **state)
{
    (void)state;
    sbuf b;
    sb_init(&b);
    api_output o = {.text = "ok", .text_len = 2, .finish_reason = "length"};
    api_chat_body(&b, "chatcmpl-9", 7, "m", &o, 5, 2);
    assert_string_equal(b.p, "{\"id\":\"chatcmpl-9\",\"object\":\"chat.completion\",\"created\":7,"
                             "\"model\":\"m\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
                             "\"assistant\",\"content\":\"ok\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":"
                             "\"length\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,"
                             "\"total_tokens\":7}}");
    sb_reset(&b);
    const char *models[2] = {"a", "b"};
    api_models_body(&b, models, 2, 3);
    assert_string_equal(b.p, "{\"object\":\"list\",\"data\":[{\"id\":\"a\",\"object\":\"model\","
                             "\"created\":3,\"owned_by\":\"tandem\"},{\"id\":\"b\",\"object\":"
                             "\"model\",\"created\":3,\"owned_by\":\"tandem\"}]}");
    sb_reset(&b);
    api_model_body(&b, "a", 3);
    assert_string_equal(b.p, "{\"id\":\"a\",\"object\":\"model\",\"created\":3,\"owned_by\":"
                             "\"tandem\"}");
    sb_reset(&b);
    o.fingerprint = "tandem-1-m";
    api_completion_body(&b, "cmpl-9", 7, "m", &o, 5, 2);
    assert_string_equal(b.p, "{\"id\":\"cmpl-9\",\"object\":\"text_completion\",\"created\":7,"
                             "\"model\":\"m\",\"system_fingerprint\":\"tandem-1-m\",\"choices\":"
                             "[{\"index\":0,\"text\":\"ok\",\"logprobs\":null,\"finish_reason\":"
                             "\"length\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,"
                             "\"total_tokens\":7}}");
    sb_reset(&b);
    api_chat_body(&b, "chatcmpl-9", 7, "m", &o, 5, 2);
    assert_string_equal(b.p, "{\"id\":\"chatcmpl-9\",\"object\":\"chat.completion\",\"created\":7,"
                             "\"model\":\"m\",\"system_fingerprint\":\"tandem-1-m\",\"choices\":"
                             "[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"ok\","
                             "\"refusal\":null},\"logprobs\":null,\"finish_reason\":\"length\"}],"
                             "\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,"
                             "\"total_tokens\":7}}");
    sb_free(&b);
}

static void fingerprint_and_usage_null_in_chunks(void **state)
{
    (void)state;
    char fp[API_MAX_MODEL + 16];
    api_system_fingerprint(fp, sizeof fp, "gpt_oss_tiny");
    assert_string_equal(fp, "tandem-1-gpt_oss_tiny");
    sbuf b;
    sb_init(&b);
    api_output o = {.text = "x", .text_len = 1, .fingerprint = fp, .usage_null = 1};
    api_sse_completion_chunk(&b, "cmpl-1", 5, "m", &o);
    assert_string_equal(b.p, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":5,"
                             "\"model\":\"m\",\"system_fingerprint\":\"tandem-1-gpt_oss_tiny\","
                             "\"choices\":[{\"index\":0,\"text\":\"x\",\"logprobs\":null,"
                             "\"finish_reason\":null}],\"usage\":null}\n\n");
    sb_reset(&b);
    api_sse_chat_chunk(&b, "chatcmpl-1", 5, "m", &o, 1);
    assert_string_equal(b.p, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\","
                             "\"created\":5,\"model\":\"m\",\"system_fingerprint\":"
                             "\"tandem-1-gpt_oss_tiny\",\"choices\":[{\"index\":0,\"delta\":"
                             "{\"role\":\"assistant\",\"content\":\"x\"},\"logprobs\":null,"
                             "\"finish_reason\":null}],\"usage\":null}\n\n");
    sb_reset(&b);
    o.usage_null = 0; /* without include_usage: no "usage" in chunks */
    o.finish_reason = "stop";
    api_sse_chat_chunk(&b, "chatcmpl-1", 5, "m", &o, 0);
    assert_string_equal(b.p, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\","
                             "\"created\":5,\"model\":\"m\",\"system_fingerprint\":"
                             "\"tandem-1-gpt_oss_tiny\",\"choices\":[{\"index\":0,\"delta\":"
                             "{\"content\":\"x\"},\"logprobs\":null,\"finish_reason\":\"stop\"}]}\n\n");
    sb_reset(&b);
    api_sse_usage_chunk(&b, API_CHAT, "chatcmpl-1", 5, "m", fp, 3, 4);
    assert_string_equal(b.p, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\","
                             "\"created\":5,\"model\":\"m\",\"system_fingerprint\":"
                             "\"tandem-1-gpt_oss_tiny\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,"
                             "\"completion_tokens\":4,\"total_tokens\":7}}\n\n");
    sb_free(&b);
}

static void request_id_sanity(void **state)
{
    (void)state;
    char max[API_MAX_REQUEST_ID + 2];
    memset(max, 'a', sizeof max);
    max[API_MAX_REQUEST_ID] = 0;
    assert_int_equal(api_request_id_ok(max), 1);
    max[API_MAX_REQUEST_ID] = 'a';
    max[API_MAX_REQUEST_ID + 1] = 0;
    assert_int_equal(api_request_id_ok(max), 0);
    assert_int_equal(api_request_id_ok("req-1 ~!"), 1);
    assert_int_equal(api_request_id_ok(""), 0);
    assert_int_equal(api_request_id_ok(NULL), 0);
    assert_int_equal(api_request_id_ok("a\tb"), 0);
    assert_int_equal(api_request_id_ok("a\x7f"), 0);
    assert_int_equal(api_request_id_ok("caf\xC3\xA9"), 0);
}

static void utf8_streaming_helpers(void **state)
{
    (void)state;
    /* "é" is C3 A9; a lone C3 at the end is held back, an invalid byte is not. */
    assert_int_equal(utf8_stable_prefix("a\xC3", 2), 1);
    assert_int_equal(utf8_stable_prefix("a\xC3\xA9", 3), 3);
    assert_int_equal(utf8_stable_prefix("a\xFF", 2), 2);
    assert_int_equal(utf8_stable_prefix("\xE2\x82", 2), 0);
    sbuf b;
    sb_init(&b);
    utf8_sanitize_append(&b, "a\xFF" "b\xC3\xA9", 5);
    assert_string_equal(b.p, "a\xEF\xBF\xBD" "b\xC3\xA9");
    sb_reset(&b);
    /* E2 82 is one ill-formed subpart (a truncated 3-byte sequence). */
    utf8_sanitize_append(&b, "\xE2\x82" "A\xF0\x9F\x98", 6);
    assert_string_equal(b.p, "\xEF\xBF\xBD" "A\xEF\xBF\xBD");
    sb_reset(&b);
    sb_json_str(&b, "\x01z", 2);
    assert_string_equal(b.p, "\"\\u0001z\"");
    sb_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(malformed_bodies_are_rejected),
        cmocka_unit_test(required_fields),
        cmocka_unit_test(sampling_parameters_are_range_checked),
        cmocka_unit_test(unknown_and_unimplemented_fields),
        cmocka_unit_test(nul_is_text_in_prompts_and_refused_in_names),
        cmocka_unit_test(valid_requests_parse_with_defaults),
        cmocka_unit_test(error_body_has_openai_shape),
        cmocka_unit_test(sse_chunks_have_openai_shape),
        cmocka_unit_test(final_bodies_have_openai_shape),
        cmocka_unit_test(fingerprint_and_usage_null_in_chunks),
        cmocka_unit_test(request_id_sanity),
        cmocka_unit_test(utf8_streaming_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
