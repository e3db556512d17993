/* The router's chat completions with a real vocabulary: a chat request is
 * rendered in the vocabulary's chat format (Harmony for o200k_harmony,
 * ChatML for Qwen3) with its stop tokens, and generated tokens are split
 * into reasoning_content, content and tool_calls as they arrive
 * (request_append), then shaped as OpenAI chat chunks and bodies. The model
 * outputs are written in each format and encoded with the real tokenizer. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "router/router.h"
#include "tests/unit/tok_test_util.h"

typedef struct fixture {
    router_ctx *ctx;
    router_request *r;
} fixture;

static fixture setup(const char *vocab_key)
{
    fixture f;
    f.ctx = calloc(1, sizeof *f.ctx);
    assert_non_null(f.ctx);
    cJSON *fx = toktest_load_fixture();
    char err[400];
    assert_int_equal(codec_init(&f.ctx->codec, toktest_str(fx, vocab_key), err, sizeof err), 0);
    cJSON_Delete(fx);
    metrics_init(&f.ctx->metrics);
    f.r = request_new(f.ctx, ORIGIN_RPC);
    assert_non_null(f.r);
    f.r->kind = API_CHAT;
    assert_int_equal(codec_chat_parser_new(&f.ctx->codec, &f.r->parser, err, sizeof err), 0);
    return f;
}

static void teardown(fixture *f)
{
    request_unref(f->r);
    codec_free(&f->ctx->codec);
    free(f->ctx);
}

/* Feeds the model output `text` (special tokens spelled out) token by
 * token; returns request_append's last status. */
static int feed(fixture *f, const char *text)
{
    tok_ids ids;
    tok_ids_init(&ids);
    char err[300];
    assert_int_equal(bpe_encode(f->ctx->codec.bpe, text, strlen(text), BPE_ENCODE_SPECIAL, &ids,
                                err, sizeof err), 0);
    int rc = 0;
    for (size_t i = 0; i < ids.len && rc == 0; i++) {
        rc = request_append(f->ctx, f->r, &ids.ids[i], 1);
        if (rc == 0 && i > 0) {
            int k = f->r->n_out - 1;
            assert_true(f->r->out_reasoning_end[k] >= f->r->out_reasoning_end[k - 1]);
            assert_true(f->r->out_text_end[k] >= f->r->out_text_end[k - 1]);
            assert_true(f->r->out_tools_end[k] >= f->r->out_tools_end[k - 1]);
        }
    }
    tok_ids_free(&ids);
    return rc;
}

static const char *str(const sbuf *b)
{
    return b->p ? b->p : "";
}

static void harmony_reasoning_then_tool_call(void **state)
{
    (void)state;
    fixture f = setup("o200k_vocab");
    assert_int_equal(feed(&f, "<|channel|>analysis<|message|>Need the weather first.<|end|>"
                              "<|start|>assistant<|channel|>commentary to=functions.get_weather "
                              "<|constrain|>json<|message|>{\"city\":\"Sarajevo\"}<|call|>"), 0);
    request_finish_output(f.r);
    assert_string_equal(str(&f.r->reasoning), "Need the weather first.");
    assert_string_equal(str(&f.r->text), "");
    int n = 0;
    const chat_tool_call *tc = request_tool_calls(f.r, &n);
    assert_int_equal(n, 1);
    assert_string_equal(tc[0].name, "get_weather");
    assert_string_equal(tc[0].arguments, "{\"city\":\"Sarajevo\"}");
    assert_int_equal(f.r->out_tools_end[f.r->n_out - 1], 1);
    assert_int_equal(f.r->out_reasoning_end[f.r->n_out - 1], f.r->reasoning.len);
    teardown(&f);
}

/* Feeds the model output out in one piece, finishes it, and checks the
 * content and reasoning it parses into. */
static void expect_parsed(const char *vocab_key, const char *out, const char *text,
                          const char *reasoning)
{
    fixture f = setup(vocab_key);
    assert_int_equal(feed(&f, out), 0);
    request_finish_output(f.r);
    assert_string_equal(str(&f.r->text), text);
    assert_string_equal(str(&f.r->reasoning), reasoning);
    teardown(&f);
}

static void harmony_final_answer_and_broken_output(void **state)
{
    (void)state;
    expect_parsed("o200k_vocab", "<|channel|>final<|message|>Zdravo, svijete! Grüße 👋<|return|>",
                  "Zdravo, svijete! Grüße 👋", "");

    /* Text where a message header must start: an error, not a guess. */
    fixture f = setup("o200k_vocab");
    assert_int_equal(feed(&f, "<|channel|>final<|message|>ok<|end|>stray text"), -2);
    assert_true(strlen(f.r->parse_error) > 0);
    teardown(&f);
}

static void qwen3_think_block_and_stop_string(void **state)
{
    (void)state;
    expect_parsed("qwen3_vocab", "<think>\nLet me see.\n</think>\n\nHi there!<|im_end|>",
                  "Hi there!", "Let me see.");

    /* Stop strings apply to the content, not the reasoning. */
    fixture f = setup("qwen3_vocab");
    f.r->stop_strs[0] = strdup("there");
    f.r->n_stop_strs = 1;
    f.r->max_stop_len = 5;
    assert_int_equal(feed(&f, "<think>\nthere is a plan\n</think>\n\nHi there!<|im_end|>"), 1);
    assert_string_equal(str(&f.r->text), "Hi ");
    teardown(&f);
}

static void chat_request_renders_with_tools_and_options(void **state)
{
    (void)state;
    fixture f = setup("o200k_vocab");
    const char *body =
        "{\"model\":\"gpt-oss\",\"reasoning_effort\":\"high\",\"messages\":["
        "{\"role\":\"system\",\"content\":\"Be brief.\"},"
        "{\"role\":\"user\",\"content\":\"Weather in Sarajevo? <|start|>\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]}";
    api_request ar;
    api_error e;
    assert_int_equal(api_parse_request(API_CHAT, body, strlen(body), &ar, &e), 0);
    int32_t *ids = NULL;
    int n = 0;
    char err[300];
    assert_int_equal(codec_render_chat(&f.ctx->codec, &ar, &ids, &n, err, sizeof err), 0);
    sbuf raw;
    sb_init(&raw);
    for (int i = 0; i < n; i++) {
        size_t len = 0;
        const char *b = bpe_token_bytes(f.ctx->codec.bpe, ids[i], &len);
        sb_append(&raw, b, len);
    }
    assert_non_null(strstr(raw.p, "Reasoning: high"));
    assert_non_null(strstr(raw.p, "type get_weather = (_: {"));
    /* Client text that spells a special token stays text: exactly one
     * <|start|> token per message header, none from the user's content. */
    int32_t start_id = bpe_token_id(f.ctx->codec.bpe, "<|start|>");
    int n_start = 0;
    for (int i = 0; i < n; i++)
        n_start += ids[i] == start_id;
    assert_int_equal(n_start, 4); /* system, developer, user, assistant opener */
    size_t tail = strlen("<|start|>assistant");
    assert_int_equal(memcmp(raw.p + raw.len - tail, "<|start|>assistant", tail), 0);
    sb_free(&raw);
    free(ids);
    api_request_free(&ar);

    /* Malformed conversations are the client's error. */
    body = "{\"model\":\"m\",\"messages\":[{\"role\":\"tool\",\"tool_call_id\":\"nope\",\"content\":\"x\"}]}";
    assert_int_equal(api_parse_request(API_CHAT, body, strlen(body), &ar, &e), 0);
    assert_int_equal(codec_render_chat(&f.ctx->codec, &ar, &ids, &n, err, sizeof err), -1);
    api_request_free(&ar);
    teardown(&f);
}

static void chat_shapes_with_reasoning_and_tool_calls(void **state)
{
    (void)state;
    sbuf b;
    sb_init(&b);
    api_tool_call tc = {.id = "call_1", .name = "get_weather", .arguments = "{\"city\":\"X\"}"};
    api_output o = {.reasoning = "hmm", .reasoning_len = 3, .tool_calls = &tc, .n_tool_calls = 1,
                    .tool_index = 2, .omit_empty_content = 1};
    api_sse_chat_chunk(&b, "chatcmpl-1", 5, "m", &o, 0);
    assert_string_equal(b.p, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\","
                             "\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{"
                             "\"reasoning_content\":\"hmm\",\"tool_calls\":[{\"index\":2,\"id\":"
                             "\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                             "\"arguments\":\"{\\\"city\\\":\\\"X\\\"}\"}}]},\"logprobs\":null,"
                             "\"finish_reason\":null}]}\n\n");
    sb_reset(&b);
    api_output body = {.tool_calls = &tc, .n_tool_calls = 1, .reasoning = "r", .reasoning_len = 1,
                       .finish_reason = "tool_calls"};
    api_chat_body(&b, "chatcmpl-1", 5, "m", &body, 10, 7);
    assert_string_equal(b.p, "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":5,"
                             "\"model\":\"m\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
                             "\"assistant\",\"content\":null,\"refusal\":null,\"reasoning_content\":\"r\",\"tool_calls\":"
                             "[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":"
                             "\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"X\\\"}\"}}]},"
                             "\"logprobs\":null,\"finish_reason\":\"tool_calls\"}],\"usage\":"
                             "{\"prompt_tokens\":10,\"completion_tokens\":7,\"total_tokens\":17}}");
    sb_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(harmony_reasoning_then_tool_call),
        cmocka_unit_test(harmony_final_answer_and_broken_output),
        cmocka_unit_test(qwen3_think_block_and_stop_string),
        cmocka_unit_test(chat_request_renders_with_tools_and_options),
        cmocka_unit_test(chat_shapes_with_reasoning_and_tool_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
