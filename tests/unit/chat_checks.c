#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "tests/unit/chat_checks.h"
#include "tests/unit/tok_test_util.h"
#include "common/utf8.h"
#include "common/status.h"

int chatcheck_setup(void **state, const char *vocab_key, chat_format fmt)
{
    chat_suite *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    s->fixture = toktest_load_fixture();
    s->tok = toktest_load_tokenizer(s->fixture, vocab_key);
    s->fmt = fmt;
    assert_int_equal(chat_format_for(s->tok), fmt);
    *state = s;
    return 0;
}

int chatcheck_teardown(void **state)
{
    chat_suite *s = *state;
    if (s) {
        bpe_tokenizer_free(s->tok);
        cJSON_Delete(s->fixture);
        free(s);
    }
    return 0;
}

size_t chatcheck_count(const tok_ids *ids, int32_t id)
{
    size_t n = 0;
    for (size_t i = 0; i < ids->len; i++)
        n += ids->ids[i] == id;
    return n;
}

static void opts_from_case(const cJSON *c, chat_render_opts *o)
{
    chat_render_opts_default(o);
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(c, "enable_thinking")))
        o->enable_thinking = cJSON_IsTrue(v);
    if ((v = cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt")))
        o->add_generation_prompt = cJSON_IsTrue(v);
    const cJSON *opt = cJSON_GetObjectItemCaseSensitive(c, "options");
    if (!opt)
        return;
    if ((v = cJSON_GetObjectItemCaseSensitive(opt, "system_message")))
        o->system_message = cJSON_IsTrue(v);
    if ((v = cJSON_GetObjectItemCaseSensitive(opt, "reasoning_effort")))
        o->reasoning_effort = v->valuestring;
    if ((v = cJSON_GetObjectItemCaseSensitive(opt, "current_date")))
        o->current_date = v->valuestring;
    if ((v = cJSON_GetObjectItemCaseSensitive(opt, "model_identity")))
        o->model_identity = v->valuestring;
}

void chatcheck_check_render_cases(const chat_suite *s, const char *key)
{
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(s->fixture, key);
    assert_true(cJSON_GetArraySize(cases) >= 5);
    for (const cJSON *c = cases->child; c; c = c->next) {
        chat_conversation conv;
        char err[512];
        if (chat_conversation_from_json(cJSON_GetObjectItemCaseSensitive(c, "messages"),
                                        cJSON_GetObjectItemCaseSensitive(c, "tools"), &conv, err,
                                        sizeof(err)) != TN_OK)
            fail_msg("%s: %s", toktest_str(c, "name"), err);
        chat_render_opts o;
        opts_from_case(c, &o);
        tok_ids ids;
        tok_ids_init(&ids);
        sbuf text;
        sb_init(&text);
        if (chat_render(s->tok, s->fmt, &conv, &o, &ids, &text, err, sizeof(err)) != TN_OK)
            fail_msg("%s: render failed: %s", toktest_str(c, "name"), err);
        const char *want = toktest_str(c, "text");
        if (strcmp(text.p ? text.p : "", want) != 0) {
            fprintf(stderr, "# %s rendered:\n%s\n# want:\n%s\n", toktest_str(c, "name"), text.p, want);
            fail_msg("%s: rendered text differs from the reference", toktest_str(c, "name"));
        }
        char what[160];
        snprintf(what, sizeof(what), "render of '%s'", toktest_str(c, "name"));
        toktest_assert_ids_equal(what, ids.ids, ids.len, cJSON_GetObjectItemCaseSensitive(c, "ids"));
        tok_ids_free(&ids);
        sb_free(&text);
        chat_conversation_free(&conv);
    }
}

static void assert_result(const char *name, const chat_result *r, const cJSON *want)
{
    const char *reasoning = toktest_str(want, "reasoning"), *content = toktest_str(want, "content");
    if (strcmp(r->reasoning.p ? r->reasoning.p : "", reasoning) != 0)
        fail_msg("%s: reasoning '%s', want '%s'", name, r->reasoning.p, reasoning);
    if (strcmp(r->content.p ? r->content.p : "", content) != 0)
        fail_msg("%s: content '%s', want '%s'", name, r->content.p, content);
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(want, "tool_calls");
    assert_int_equal(r->n_tool_calls, (size_t)cJSON_GetArraySize(calls));
    size_t k = 0;
    for (const cJSON *c = calls->child; c; c = c->next, k++) {
        assert_string_equal(r->tool_calls[k].name, toktest_str(c, "name"));
        assert_string_equal(r->tool_calls[k].arguments, toktest_str(c, "arguments"));
    }
    assert_int_equal(r->stopped, cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(want, "stop")));
}

void chatcheck_check_parse_cases(const chat_suite *s, const char *key)
{
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(s->fixture, key);
    assert_true(cJSON_GetArraySize(cases) >= 4);
    for (const cJSON *c = cases->child; c; c = c->next) {
        const char *name = toktest_str(c, "name");
        tok_ids ids;
        tok_ids_init(&ids);
        toktest_ids_from_json(cJSON_GetObjectItemCaseSensitive(c, "ids"), &ids);
        chat_parse_opts po = {0};
        po.start_in_reasoning = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "start_in_reasoning"));
        const cJSON *want = cJSON_GetObjectItemCaseSensitive(c, "expected");
        char err[512];
        /* whole completion, ended by finish */
        chat_parser *p;
        if (chat_parse_completion(s->tok, s->fmt, &po, ids.ids, ids.len, &p, err, sizeof(err)) != TN_OK)
            fail_msg("%s: parse failed: %s", name, err);
        assert_result(name, chat_parser_result(p), want);
        chat_parser_free(p);

        /* streamed: the deltas add up to the same result */
        assert_int_equal(chat_parser_new(s->tok, s->fmt, &po, &p, err, sizeof(err)), TN_OK);
        sbuf reasoning, content;
        sb_init(&reasoning);
        sb_init(&content);
        size_t calls = 0;
        for (size_t i = 0; i <= ids.len; i++) {
            chat_delta d;
            int rc = i < ids.len ? chat_parser_push(p, ids.ids[i], &d, err, sizeof(err))
                                 : chat_parser_finish(p, &d, err, sizeof(err));
            if (rc != TN_OK)
                fail_msg("%s: token %zu: %s", name, i, err);
            if (d.kind == CHAT_DELTA_REASONING)
                assert_int_equal(sb_append(&reasoning, d.text, d.len), TN_OK);
            else if (d.kind == CHAT_DELTA_CONTENT)
                assert_int_equal(sb_append(&content, d.text, d.len), TN_OK);
            else if (d.kind == CHAT_DELTA_TOOL_CALL)
                assert_int_equal(d.tool_index, calls++);
        }
        const chat_result *r = chat_parser_result(p);
        assert_result(name, r, want);
        assert_string_equal(reasoning.p ? reasoning.p : "", r->reasoning.p ? r->reasoning.p : "");
        assert_string_equal(content.p ? content.p : "", r->content.p ? r->content.p : "");
        assert_int_equal(calls, r->n_tool_calls);
        sb_free(&reasoning);
        sb_free(&content);
        chat_parser_free(p);
        tok_ids_free(&ids);
    }
}

int chatcheck_render_json(const chat_suite *s, const char *messages_json, const char *tools_json,
                   const chat_render_opts *o, tok_ids *ids, sbuf *text, char *err, size_t errlen)
{
    cJSON *m = cJSON_Parse(messages_json);
    cJSON *t = tools_json ? cJSON_Parse(tools_json) : NULL;
    assert_non_null(m);
    chat_conversation conv;
    int rc = chat_conversation_from_json(m, t, &conv, err, errlen);
    if (rc == TN_OK) {
        rc = chat_render(s->tok, s->fmt, &conv, o, ids, text, err, errlen);
        chat_conversation_free(&conv);
    }
    cJSON_Delete(m);
    cJSON_Delete(t);
    return rc;
}

void chatcheck_fuzz_parser(const chat_suite *s, const char *const *specials, size_t n_specials)
{
    int32_t pool[64];
    size_t n = 0;
    for (size_t i = 0; i < n_specials; i++) {
        pool[n] = bpe_token_id(s->tok, specials[i]);
        assert_true(pool[n] >= 0);
        n++;
    }
    /* ordinary tokens: words, newlines, and the pieces of an emoji */
    tok_ids ids;
    tok_ids_init(&ids);
    char err[256];
    const char *text = "Hello world\n\n to=functions.f json {\"a\": 1} analysis final commentary assistant";
    assert_int_equal(bpe_encode(s->tok, text, strlen(text), 0, &ids, err, sizeof(err)), TN_OK);
    for (size_t i = 0; i < ids.len && n < 56; i++)
        pool[n++] = ids.ids[i];
    /* single-byte tokens that are halves of a 4-byte character */
    static const char *const halves[] = {"\xF0", "\x9F", "\x98", "\x80"};
    for (size_t i = 0; i < 4; i++) {
        pool[n] = bpe_token_id(s->tok, halves[i]);
        assert_true(pool[n] >= 0);
        n++;
    }
    ids.len = 0;
    uint64_t x = 0x2545F4914F6CDD1DULL;
    for (int iter = 0; iter < 300; iter++) {
        chat_parser *p;
        chat_parse_opts po = {iter % 3 == 0};
        assert_int_equal(chat_parser_new(s->tok, s->fmt, &po, &p, err, sizeof(err)), TN_OK);
        sbuf streamed;
        sb_init(&streamed);
        int failed = 0;
        size_t len = 1 + (size_t)(x % 40);
        for (size_t i = 0; i <= len && !failed; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chat_delta d;
            int rc = i < len ? chat_parser_push(p, pool[x % n], &d, err, sizeof(err))
                             : chat_parser_finish(p, &d, err, sizeof(err));
            if (rc != TN_OK) {
                assert_int_equal(rc, TN_ERR_ARG);
                assert_true(err[0] != '\0');
                failed = 1;
                break;
            }
            if (d.kind == CHAT_DELTA_REASONING || d.kind == CHAT_DELTA_CONTENT) {
                assert_true(d.len > 0 && utf8_valid(d.text, d.len, NULL));
                assert_int_equal(sb_append(&streamed, d.text, d.len), TN_OK);
            }
        }
        if (!failed) {
            const chat_result *r = chat_parser_result(p);
            assert_int_equal(streamed.len, r->reasoning.len + r->content.len);
        }
        sb_free(&streamed);
        chat_parser_free(p);
    }
    tok_ids_free(&ids);
}

void chatcheck_stop_tokens(const chat_suite *s, int32_t first, int32_t second)
{
    int32_t ids[4];
    assert_int_equal(chat_stop_token_ids(s->tok, s->fmt, ids, 4), 2);
    assert_int_equal(ids[0], first);
    assert_int_equal(ids[1], second);
}
