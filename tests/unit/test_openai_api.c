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
    expect_400(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[\"a\",\"\"]}", "prompt", NULL);
    expect_400(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[\"a\",[]]}", "prompt", NULL);
    expect_400(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[\"a\",7]}", "prompt", "invalid_type");
    /* At most 128 choices: prompts x best_of. */
    expect_400(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[[1],[2]],\"n\":65}", "n", "invalid_value");
    expect_400(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[[1],[2]],\"best_of\":65}", "best_of",
               "invalid_value");
    expect_400(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[[1],[-1]]}", "prompt", "invalid_type");
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
        {"\"n\":0}", "n", "invalid_value"},
        {"\"n\":129}", "n", "invalid_value"},
        {"\"n\":1.5}", "n", "invalid_value"},
        {"\"n\":2,\"best_of\":1}", "best_of", "invalid_value"},
        {"\"best_of\":129}", "best_of", "invalid_value"},
        {"\"best_of\":3,\"stream\":true}", "best_of", "invalid_value"},
        {"\"stream\":1}", "stream", "invalid_type"},
        {"\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop", "invalid_value"},
        {"\"stop\":\"\"}", "stop", "invalid_value"},
        {"\"logprobs\":21}", "logprobs", "invalid_value"},
        {"\"logprobs\":true}", "logprobs", "invalid_value"},
        {"\"logprobs\":-1}", "logprobs", "invalid_value"},
        {"\"presence_penalty\":2.5}", "presence_penalty", "invalid_value"},
        {"\"presence_penalty\":\"x\"}", "presence_penalty", "invalid_type"},
        {"\"frequency_penalty\":-2.01}", "frequency_penalty", "invalid_value"},
        {"\"repetition_penalty\":0}", "repetition_penalty", "invalid_value"},
        {"\"repetition_penalty\":-1}", "repetition_penalty", "invalid_value"},
        {"\"logit_bias\":[1]}", "logit_bias", "invalid_type"},
        {"\"logit_bias\":{\"x\":1}}", "logit_bias", "invalid_value"},
        {"\"logit_bias\":{\"-1\":1}}", "logit_bias", "invalid_value"},
        {"\"logit_bias\":{\"1.5\":1}}", "logit_bias", "invalid_value"},
        {"\"logit_bias\":{\"99999999999\":1}}", "logit_bias", "invalid_value"},
        {"\"logit_bias\":{\"3\":100.5}}", "logit_bias", "invalid_value"},
        {"\"logit_bias\":{\"3\":\"1\"}}", "logit_bias", "invalid_value"},
        {"\"logit_bias\":{\"3\":1,\"03\":2}}", "logit_bias", "invalid_value"},
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
        {"\"modalities\":[\"text\",\"audio\"]", "modalities"},
        {"\"audio\":{\"voice\":\"x\"}", "audio"},
        {"\"functions\":[]", "functions"},
    };
    char b[512];
    for (size_t i = 0; i < sizeof chat_bad / sizeof *chat_bad; i++) {
        snprintf(b, sizeof b, "{\"model\":\"m\",%s,%s}", msgs, chat_bad[i].extra);
        expect_400(API_CHAT, b, chat_bad[i].param, "unsupported_value");
    }
    /* logprobs (chat): a boolean; top_logprobs 0..20 and only with logprobs true. */
    snprintf(b, sizeof b, "{\"model\":\"m\",%s,\"top_logprobs\":3}", msgs);
    expect_400(API_CHAT, b, "top_logprobs", "invalid_value");
    snprintf(b, sizeof b, "{\"model\":\"m\",%s,\"logprobs\":true,\"top_logprobs\":21}", msgs);
    expect_400(API_CHAT, b, "top_logprobs", "invalid_value");
    snprintf(b, sizeof b, "{\"model\":\"m\",%s,\"logprobs\":1}", msgs);
    expect_400(API_CHAT, b, "logprobs", "invalid_type");
    snprintf(b, sizeof b, "{\"model\":\"m\",%s,\"logprobs\":true,\"top_logprobs\":20}", msgs);
    assert_int_equal(parse(API_CHAT, b, &r, &e), 0);
    assert_int_equal(r.logprobs, 20);
    api_request_free(&r);
    snprintf(b, sizeof b, "{\"model\":\"m\",%s,\"logprobs\":true}", msgs);
    assert_int_equal(parse(API_CHAT, b, &r, &e), 0);
    assert_int_equal(r.logprobs, 0);
    api_request_free(&r);
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
    assert_int_equal(r.n_prompts, 1);
    assert_int_equal(r.prompts[0].text_len, 6);
    assert_memory_equal(r.prompts[0].text, "a\0b\x01\x02\0", 7);
    api_request_free(&r);
    assert_int_equal(parse(API_COMPLETIONS, "{\"model\":\"tiny\",\"prompt\":[\"\\u0000\"]}", &r, &e), 0);
    assert_int_equal(r.n_prompts, 1);
    assert_int_equal(r.prompts[0].text_len, 1);
    assert_int_equal(r.prompts[0].text[0], 0);
    api_request_free(&r);
    /* A list of prompts: each text keeps its own NULs and length, an id
     * array between them shifts nothing. */
    assert_int_equal(parse(API_COMPLETIONS,
                           "{\"model\":\"tiny\",\"prompt\":[\"a\\u0000\",[1,2],\"x\","
                           "\"\\u0000\\u0000b\"],\"n\":2}", &r, &e), 0);
    assert_int_equal(r.n_prompts, 4);
    assert_int_equal(r.prompts[0].text_len, 2);
    assert_memory_equal(r.prompts[0].text, "a\0", 3);
    assert_null(r.prompts[1].text);
    assert_int_equal(r.prompts[1].n_ids, 2);
    assert_int_equal(r.prompts[2].text_len, 1);
    assert_string_equal(r.prompts[2].text, "x");
    assert_int_equal(r.prompts[3].text_len, 3);
    assert_memory_equal(r.prompts[3].text, "\0\0b", 4);
    api_request_free(&r);
    /* A NUL in an id array of the list is no text: refused. */
    expect_400(API_COMPLETIONS, "{\"model\":\"tiny\",\"prompt\":[\"a\",[\"\\u0000\"]]}", "prompt",
               "invalid_value");

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
    assert_string_equal(r.prompts[0].text, "a\\u0000\x01");
    assert_int_equal(r.prompts[0].text_len, 8);
    api_request_free(&r);
}

/* echo: completions only, a boolean, with or without logprobs. */
static void echo_is_parsed(void **state)
{
    (void)state;
    api_request r;
    api_error e;
    assert_int_equal(parse(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":\"ab\",\"echo\":true}",
                           &r, &e), 0);
    assert_int_equal(r.echo, 1);
    api_request_free(&r);
    assert_int_equal(parse(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[1]}", &r, &e), 0);
    assert_int_equal(r.echo, 0);
    api_request_free(&r);
    assert_int_equal(parse(API_COMPLETIONS,
                           "{\"model\":\"m\",\"prompt\":[1],\"echo\":true,\"logprobs\":2}", &r, &e),
                     0);
    assert_int_equal(r.echo, 1);
    assert_int_equal(r.logprobs, 2);
    api_request_free(&r);
    assert_int_equal(parse(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[1],\"echo\":1}", &r, &e),
                     -1);
    assert_string_equal(e.param, "echo");
    assert_int_equal(parse(API_CHAT,
                           "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                           "\"echo\":true}", &r, &e), -1);
    assert_string_equal(e.code, "unknown_parameter");
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
    assert_int_equal(r.n_prompts, 1);
    assert_int_equal(r.prompts[0].n_ids, 3);
    assert_int_equal(r.prompts[0].ids[2], 7);
    assert_null(r.prompts[0].text);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.best_of, 1);
    assert_int_equal(r.max_tokens, 0);
    assert_true(r.temperature == 1.0 && r.top_p == 1.0 && r.top_k == -1);
    assert_int_equal(r.stream, 0);
    assert_int_equal(r.has_seed, 0);
    assert_int_equal(r.logprobs, -1);
    assert_true(r.presence_penalty == 0 && r.frequency_penalty == 0 && r.repetition_penalty == 1);
    assert_int_equal(r.n_bias, 0);
    api_request_free(&r);

    /* Penalties, logit_bias and logprobs. */
    assert_int_equal(parse(API_COMPLETIONS,
                           "{\"model\":\"m\",\"prompt\":[1],\"logprobs\":20,\"presence_penalty\":-2,"
                           "\"frequency_penalty\":2,\"repetition_penalty\":1.25,"
                           "\"logit_bias\":{\"7\":-100,\"12\":100,\"0\":0.5}}", &r, &e), 0);
    assert_int_equal(r.logprobs, 20);
    assert_true(r.presence_penalty == -2 && r.frequency_penalty == 2 && r.repetition_penalty == 1.25);
    assert_int_equal(r.n_bias, 3);
    assert_int_equal(r.bias_tokens[0], 7);
    assert_true(r.bias_values[0] == -100.0f);
    assert_int_equal(r.bias_tokens[1], 12);
    assert_int_equal(r.bias_tokens[2], 0);
    assert_true(r.bias_values[2] == 0.5f);
    api_request_free(&r);
    assert_int_equal(parse(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[1],\"logprobs\":0,"
                           "\"logit_bias\":{}}", &r, &e), 0);
    assert_int_equal(r.logprobs, 0);
    api_request_free(&r);

    assert_int_equal(parse(API_COMPLETIONS,
                           "{\"model\":\"tiny\",\"prompt\":\"hi\",\"max_tokens\":9,\"temperature\":0,"
                           "\"top_p\":0.5,\"top_k\":40,\"seed\":-1,\"stream\":true,"
                           "\"stream_options\":{\"include_usage\":true},\"stop\":[\"a\",\"bc\"],"
                           "\"stop_token_ids\":[2,3],\"ignore_eos\":true}", &r, &e), 0);
    assert_string_equal(r.prompts[0].text, "hi");
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
    assert_int_equal(r.n_prompts, 1);
    assert_int_equal(r.prompts[0].n_ids, 2);
    api_request_free(&r);

    /* A list of prompts (strings and id arrays mixed), n and best_of. */
    assert_int_equal(parse(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[\"ab\",[4,5,6],\"c\"],"
                           "\"n\":2,\"best_of\":3}", &r, &e), 0);
    assert_int_equal(r.n_prompts, 3);
    assert_string_equal(r.prompts[0].text, "ab");
    assert_int_equal(r.prompts[1].n_ids, 3);
    assert_int_equal(r.prompts[1].ids[2], 6);
    assert_string_equal(r.prompts[2].text, "c");
    assert_int_equal(r.n, 2);
    assert_int_equal(r.best_of, 3);
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

/* Logprobs in OpenAI's shapes: chat content[] with bytes, completions
 * tokens / token_logprobs / top_logprobs dicts / text_offset; -inf as
 * -9999.0; an incomplete UTF-8 token as U+FFFD text with its exact bytes;
 * a completions dict keeps one key per text (the more likely); without a
 * vocabulary "token_id:N" and "bytes":null. */
static void logprobs_have_openai_shape(void **state)
{
    (void)state;
    sbuf b;
    sb_init(&b);
    const api_lp_entry top0[2] = {{"a", 1, 97, -0.5f}, {"\xE2\x82", 2, 300, -1.0f}};
    const api_lp_entry top1[2] = {{"\xE2", 1, 301, -0.25f}, {"\xE2\x82", 2, 300, -1.5f}};
    const api_lp_token toks[2] = {
        {.tok = {"a", 1, 97, -0.5f}, .top = top0, .n_top = 2, .text_offset = 0},
        {.tok = {"b", 1, 98, -1.0f / 0.0f}, .top = top1, .n_top = 2, .text_offset = 1},
    };
    api_output o = {.text = "ab", .text_len = 2, .finish_reason = "length", .with_logprobs = 1,
                    .logprobs = toks, .n_logprobs = 2};
    api_chat_body(&b, "c", 1, "m", &o, 1, 2);
    assert_non_null(strstr(b.p,
        "\"logprobs\":{\"content\":["
        "{\"token\":\"a\",\"logprob\":-0.5,\"bytes\":[97],\"top_logprobs\":["
        "{\"token\":\"a\",\"logprob\":-0.5,\"bytes\":[97]},"
        "{\"token\":\"\xEF\xBF\xBD\",\"logprob\":-1,\"bytes\":[226,130]}]},"
        "{\"token\":\"b\",\"logprob\":-9999.0,\"bytes\":[98],\"top_logprobs\":["
        "{\"token\":\"\xEF\xBF\xBD\",\"logprob\":-0.25,\"bytes\":[226]},"
        "{\"token\":\"\xEF\xBF\xBD\",\"logprob\":-1.5,\"bytes\":[226,130]}]}],"
        "\"refusal\":null},\"finish_reason\":\"length\""));
    sb_reset(&b);
    api_completion_body(&b, "c", 1, "m", &o, 1, 2);
    assert_non_null(strstr(b.p,
        "\"logprobs\":{\"tokens\":[\"a\",\"b\"],\"token_logprobs\":[-0.5,-9999.0],"
        "\"top_logprobs\":[{\"a\":-0.5,\"\xEF\xBF\xBD\":-1},"
        "{\"\xEF\xBF\xBD\":-0.25,\"b\":-9999.0}],\"text_offset\":[0,1]}"));
    /* Streaming: a chunk without tokens (the finish chunk) has null logprobs. */
    sb_reset(&b);
    o.n_logprobs = 0;
    api_sse_completion_chunk(&b, "c", 1, "m", &o);
    assert_non_null(strstr(b.p, "\"logprobs\":null"));
    sb_reset(&b);
    api_sse_chat_chunk(&b, "c", 1, "m", &o, 0);
    assert_non_null(strstr(b.p, "\"logprobs\":null"));
    /* No vocabulary: ids. */
    const api_lp_entry none_top[1] = {{NULL, 0, 5, -0.1f}};
    const api_lp_token none_tok = {.tok = {NULL, 0, 9, -2.0f}, .top = none_top, .n_top = 1};
    o.logprobs = &none_tok;
    o.n_logprobs = 1;
    o.index = 3;
    sb_reset(&b);
    api_sse_chat_chunk(&b, "c", 1, "m", &o, 0);
    assert_non_null(strstr(b.p, "\"choices\":[{\"index\":3,"));
    assert_non_null(strstr(b.p, "\"logprobs\":{\"content\":[{\"token\":\"token_id:9\",\"logprob\":-2,"
                                "\"bytes\":null,\"top_logprobs\":[{\"token\":\"token_id:5\","
                                "\"logprob\":-0.100000001,\"bytes\":null}]}],\"refusal\":null}"));
    sb_reset(&b);
    api_sse_completion_chunk(&b, "c", 1, "m", &o);
    assert_non_null(strstr(b.p, "\"logprobs\":{\"tokens\":[\"token_id:9\"],\"token_logprobs\":[-2],"
                                "\"top_logprobs\":[{\"token_id:5\":-0.100000001,\"token_id:9\":-2}],"
                                "\"text_offset\":[0]}"));
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
        cmocka_unit_test(logprobs_have_openai_shape),
        cmocka_unit_test(request_id_sanity),
        cmocka_unit_test(echo_is_parsed),
        cmocka_unit_test(utf8_streaming_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
