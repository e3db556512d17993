/* The router's text codecs (router/text_codec.c): none, bytes, and the real
 * vocabularies. Streaming text is the per-token bytes concatenated; with a
 * real vocabulary that must give back the exact text that was encoded
 * (multilingual, emoji, whitespace runs), and with bytes the prompt's bytes. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "router/text_codec.h"
#include "tests/unit/tok_test_util.h"

static const char *const TEXTS[] = {
    "Hello, world! Tandem serves GPT-OSS and Qwen3.",
    "Grüße aus Zürich — čćžšđ ČĆŽŠĐ, добрый день, 你好世界, こんにちは 👋🏽",
    "  leading spaces\n\ttabs and\r\nnewlines   ",
    "<|im_start|>user\nnot a special token here<|im_end|>",
};

/* Encodes, then decodes token by token as the router streams. */
static void round_trip(const text_codec *c)
{
    for (size_t i = 0; i < sizeof TEXTS / sizeof *TEXTS; i++) {
        int32_t *ids = NULL;
        int n = 0;
        char err[300];
        assert_int_equal(codec_encode(c, TEXTS[i], strlen(TEXTS[i]), &ids, &n, err, sizeof err), 0);
        assert_true(n > 0);
        sbuf raw, text;
        sb_init(&raw);
        sb_init(&text);
        for (int k = 0; k < n; k++)
            codec_decode_token(c, ids[k], &raw);
        utf8_sanitize_append(&text, raw.p, raw.len);
        assert_string_equal(text.p, TEXTS[i]);
        sb_free(&raw);
        sb_free(&text);
        free(ids);
    }
}

static void vocab_round_trip(const char *key)
{
    cJSON *fx = toktest_load_fixture();
    const char *path = toktest_str(fx, key);
    text_codec c;
    char err[400];
    assert_int_equal(codec_init(&c, path, err, sizeof err), 0);
    assert_int_equal(c.kind, CODEC_BPE);
    assert_true(codec_has_text(&c));
    round_trip(&c);
    assert_true(codec_has_chat_format(&c));
    int32_t stops[8];
    assert_true(codec_chat_stop_ids(&c, stops, 8) >= 2);
    codec_free(&c);
    cJSON_Delete(fx);
}

static void qwen3_vocabulary_round_trips(void **state)
{
    (void)state;
    vocab_round_trip("qwen3_vocab");
}

static void o200k_vocabulary_round_trips(void **state)
{
    (void)state;
    vocab_round_trip("o200k_vocab");
}

static void bytes_codec(void **state)
{
    (void)state;
    text_codec c;
    char err[300];
    assert_int_equal(codec_init(&c, "bytes", err, sizeof err), 0);
    round_trip(&c);
    int32_t *ids = NULL;
    int n = 0;
    assert_int_equal(codec_encode(&c, "A\xC3\xA9", 3, &ids, &n, err, sizeof err), 0);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 65);
    assert_int_equal(ids[1], 0xC3);
    free(ids);
    api_message msgs[2] = {{.role = "system", .content = "s", .content_len = 1},
                           {.role = "user", .content = "u", .content_len = 1}};
    api_request ar = {.kind = API_CHAT, .messages = msgs, .n_messages = 2};
    assert_int_equal(codec_render_chat(&c, &ar, &ids, &n, err, sizeof err), 0);
    const char *want = "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nu<|im_end|>\n"
                       "<|im_start|>assistant\n";
    assert_int_equal(n, (int)strlen(want));
    for (int i = 0; i < n; i++)
        assert_int_equal(ids[i], (unsigned char)want[i]);
    free(ids);
    sbuf b;
    sb_init(&b);
    codec_decode_token(&c, 300, &b); /* not a byte: U+FFFD */
    assert_string_equal(b.p, "\xEF\xBF\xBD");
    sb_free(&b);
    codec_free(&c);
}

static void none_codec_and_bad_names(void **state)
{
    (void)state;
    text_codec c;
    char err[300];
    assert_int_equal(codec_init(&c, "none", err, sizeof err), 0);
    assert_false(codec_has_text(&c));
    int32_t *ids = NULL;
    int n = 0;
    assert_int_equal(codec_encode(&c, "x", 1, &ids, &n, err, sizeof err), -1);
    assert_non_null(strstr(err, "--tokenizer none"));
    sbuf b;
    sb_init(&b);
    codec_decode_token(&c, 65, &b);
    assert_int_equal(b.len, 0);
    sb_free(&b);
    assert_int_equal(codec_init(&c, "gpt2", err, sizeof err), -1);
    assert_non_null(strstr(err, "unknown tokenizer"));
    assert_int_equal(codec_init(&c, "/nonexistent/tokenizer.json", err, sizeof err), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(qwen3_vocabulary_round_trips),
        cmocka_unit_test(o200k_vocabulary_round_trips),
        cmocka_unit_test(bytes_codec),
        cmocka_unit_test(none_codec_and_bad_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
