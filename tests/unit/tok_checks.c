#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "tests/unit/tok_checks.h"
#include "tests/unit/tok_test_util.h"
#include "common/utf8.h"
#include "tokenizer/unicode.h"
#include "common/status.h"

int tokcheck_setup(void **state, const char *name, const char *vocab_key, int nfc)
{
    tok_suite *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    s->fixture = toktest_load_fixture();
    s->tok = toktest_load_tokenizer(s->fixture, vocab_key);
    s->name = name;
    s->nfc = nfc;
    *state = s;
    return 0;
}

int tokcheck_teardown(void **state)
{
    tok_suite *s = *state;
    if (s) {
        bpe_tokenizer_free(s->tok);
        cJSON_Delete(s->fixture);
        free(s);
    }
    return 0;
}

static const cJSON *cases(const tok_suite *s, const char *key)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(s->fixture, key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) == 0)
        fail_msg("fixture has no %s cases", key);
    return a;
}

static void decode_all(const bpe_tokenizer *t, const int32_t *ids, size_t n, int flags, sbuf *out)
{
    char err[256];
    if (bpe_decode(t, ids, n, flags, out, err, sizeof(err)) != TN_OK)
        fail_msg("decode failed: %s", err);
}

void tokcheck_encode_matches_reference(void **state)
{
    tok_suite *s = *state;
    int n = 0;
    for (const cJSON *c = cases(s, "texts")->child; c; c = c->next, n++) {
        const char *text = toktest_str(c, "text");
        tok_ids ids;
        tok_ids_init(&ids);
        char err[256], what[128];
        assert_int_equal(bpe_encode(s->tok, text, strlen(text), 0, &ids, err, sizeof(err)), TN_OK);
        snprintf(what, sizeof(what), "%s encode of '%s'", s->name, toktest_str(c, "name"));
        toktest_assert_ids_equal(what, ids.ids, ids.len, cJSON_GetObjectItemCaseSensitive(c, s->name));
        tok_ids_free(&ids);
    }
    assert_true(n >= 19);
}

void tokcheck_decode_round_trips(void **state)
{
    tok_suite *s = *state;
    for (const cJSON *c = cases(s, "texts")->child; c; c = c->next) {
        tok_ids ids;
        tok_ids_init(&ids);
        toktest_ids_from_json(cJSON_GetObjectItemCaseSensitive(c, s->name), &ids);
        sbuf out;
        sb_init(&out);
        decode_all(s->tok, ids.ids, ids.len, 0, &out);
        const char *want = toktest_str(c, s->nfc ? "nfc" : "text");
        assert_int_equal(out.len, strlen(want));
        assert_memory_equal(out.len ? out.p : "", want, out.len);
        sb_free(&out);
        tok_ids_free(&ids);
    }
}

void tokcheck_special_tokens_match_reference(void **state)
{
    tok_suite *s = *state;
    int n = 0;
    for (const cJSON *c = cases(s, "special_texts")->child; c; c = c->next) {
        if (strcmp(toktest_str(c, "tokenizer"), s->name) != 0)
            continue;
        n++;
        const char *text = toktest_str(c, "text");
        tok_ids ids;
        tok_ids_init(&ids);
        char err[256];
        assert_int_equal(
            bpe_encode(s->tok, text, strlen(text), BPE_ENCODE_SPECIAL, &ids, err, sizeof(err)),
            TN_OK);
        toktest_assert_ids_equal(text, ids.ids, ids.len, cJSON_GetObjectItemCaseSensitive(c, "ids"));
        sbuf out;
        sb_init(&out);
        decode_all(s->tok, ids.ids, ids.len, 0, &out);
        assert_string_equal(out.p, text);
        /* Skipping special tokens leaves exactly the non-special text. */
        sb_reset(&out);
        decode_all(s->tok, ids.ids, ids.len, BPE_DECODE_SKIP_SPECIAL, &out);
        size_t kept = 0;
        for (size_t i = 0; i < ids.len; i++)
            if (!bpe_token_is_special(s->tok, ids.ids[i]))
                kept++;
        assert_true(kept < ids.len);
        assert_true(out.len < strlen(text));
        sb_free(&out);
        tok_ids_free(&ids);
    }
    assert_true(n >= 3);
}

void tokcheck_special_strings_stay_text_without_flag(void **state)
{
    tok_suite *s = *state;
    for (const cJSON *c = cases(s, "special_texts")->child; c; c = c->next) {
        if (strcmp(toktest_str(c, "tokenizer"), s->name) != 0)
            continue;
        const char *text = toktest_str(c, "text");
        tok_ids ids;
        tok_ids_init(&ids);
        char err[256];
        assert_int_equal(bpe_encode(s->tok, text, strlen(text), 0, &ids, err, sizeof(err)), TN_OK);
        for (size_t i = 0; i < ids.len; i++)
            assert_false(bpe_token_is_added(s->tok, ids.ids[i]));
        sbuf out;
        sb_init(&out);
        decode_all(s->tok, ids.ids, ids.len, 0, &out);
        assert_string_equal(out.p, text);
        sb_free(&out);
        tok_ids_free(&ids);
    }
}

void tokcheck_lossy_decode_matches_reference(void **state)
{
    tok_suite *s = *state;
    int n = 0;
    for (const cJSON *c = cases(s, "decode")->child; c; c = c->next) {
        if (strcmp(toktest_str(c, "tokenizer"), s->name) != 0)
            continue;
        n++;
        tok_ids ids;
        tok_ids_init(&ids);
        toktest_ids_from_json(cJSON_GetObjectItemCaseSensitive(c, "ids"), &ids);
        sbuf out;
        sb_init(&out);
        decode_all(s->tok, ids.ids, ids.len, 0, &out);
        assert_string_equal(out.p ? out.p : "", toktest_str(c, "text"));
        sb_free(&out);
        tok_ids_free(&ids);
    }
    assert_true(n >= 8);
}

/* Streams ids one at a time: every chunk must be valid UTF-8 and the
 * chunks together must equal the whole decode. */
static void check_stream(const bpe_tokenizer *t, const int32_t *ids, size_t n)
{
    sbuf whole, streamed, chunk;
    sb_init(&whole);
    sb_init(&streamed);
    sb_init(&chunk);
    decode_all(t, ids, n, 0, &whole);
    bpe_stream st;
    bpe_stream_init(&st, 0);
    char err[256];
    for (size_t i = 0; i <= n; i++) {
        sb_reset(&chunk);
        if (i < n)
            assert_int_equal(bpe_stream_push(t, &st, ids[i], &chunk, err, sizeof(err)), TN_OK);
        else
            assert_int_equal(bpe_stream_finish(&st, &chunk), TN_OK);
        assert_true(utf8_valid(chunk.p, chunk.len, NULL));
        assert_int_equal(sb_append(&streamed, chunk.p, chunk.len), TN_OK);
    }
    assert_int_equal(streamed.len, whole.len);
    assert_memory_equal(streamed.len ? streamed.p : "", whole.len ? whole.p : "", whole.len);
    sb_free(&whole);
    sb_free(&streamed);
    sb_free(&chunk);
}

void tokcheck_stream_decode_equals_whole_decode(void **state)
{
    tok_suite *s = *state;
    const char *keys[] = {"texts", "decode"};
    for (int k = 0; k < 2; k++)
        for (const cJSON *c = cases(s, keys[k])->child; c; c = c->next) {
            const cJSON *arr = cJSON_GetObjectItemCaseSensitive(c, k == 0 ? s->name : "ids");
            if (k == 1 && strcmp(toktest_str(c, "tokenizer"), s->name) != 0)
                continue;
            tok_ids ids;
            tok_ids_init(&ids);
            toktest_ids_from_json(arr, &ids);
            check_stream(s->tok, ids.ids, ids.len);
            /* also from every suffix, which starts inside characters */
            for (size_t off = 1; off < ids.len && off < 6; off++)
                check_stream(s->tok, ids.ids + off, ids.len - off);
            tok_ids_free(&ids);
        }
}

/* Deterministic generator: characters drawn from pools that stress the
 * pre-tokenizer classes (letters of several scripts and cases, marks,
 * digits, punctuation, whitespace kinds, emoji, apostrophes). */
static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

void tokcheck_random_text_round_trips(void **state)
{
    tok_suite *s = *state;
    static const uint32_t pool[] = {
        'a', 'Z', 'q', 'E', '0', '7', ' ', ' ', ' ', '\n', '\r', '\t', '\'', 's', 'L', '.', '/',
        ',', '-', '(', '<', '|', '>', 0xA0, 0x3000, 0x2028, 0x85, 0x10D, 0x107, 0x161, 0x17E,
        0x111, 0x110, 0x301, 0x308, 0x30C, 0x327, 0x1C5, 0x41F, 0x436, 0x4E2D, 0x6587, 0x3042,
        0x30AB, 0xFF76, 0xAC00, 0x1100, 0x1161, 0x11A8, 0x928, 0x94D, 0x93F, 0x661, 0xBD, 0xB2,
        0x1F44D, 0x1F3FD, 0x200D, 0xFE0F, 0x1F1E7, 0x2019, 0x1F600, 0xFFFD,
    };
    const size_t npool = sizeof(pool) / sizeof(pool[0]);
    uint64_t x = 0x9E3779B97F4A7C15ULL;
    sbuf text, out;
    sb_init(&text);
    sb_init(&out);
    tok_ids ids;
    tok_ids_init(&ids);
    int32_t vocab = bpe_vocab_size(s->tok);
    for (int iter = 0; iter < 400; iter++) {
        sb_reset(&text);
        size_t len = rng_next(&x) % 48;
        for (size_t i = 0; i < len; i++) {
            char b[4];
            int k = utf8_encode(pool[rng_next(&x) % npool], b);
            assert_int_equal(sb_append(&text, b, (size_t)k), TN_OK);
        }
        ids.len = 0;
        char err[256];
        assert_int_equal(bpe_encode(s->tok, text.p ? text.p : "", text.len, 0, &ids, err,
                                    sizeof(err)),
                         TN_OK);
        for (size_t i = 0; i < ids.len; i++) {
            assert_true(ids.ids[i] >= 0 && ids.ids[i] < vocab);
            assert_false(bpe_token_is_added(s->tok, ids.ids[i]));
        }
        sb_reset(&out);
        decode_all(s->tok, ids.ids, ids.len, 0, &out);
        if (s->nfc) {
            sbuf nfc;
            sb_init(&nfc);
            assert_int_equal(uc_nfc_append(&nfc, text.p ? text.p : "", text.len), TN_OK);
            assert_int_equal(out.len, nfc.len);
            assert_memory_equal(out.len ? out.p : "", nfc.len ? nfc.p : "", nfc.len);
            sb_free(&nfc);
        } else {
            assert_int_equal(out.len, text.len);
            assert_memory_equal(out.len ? out.p : "", text.len ? text.p : "", text.len);
        }
    }
    tok_ids_free(&ids);
    sb_free(&text);
    sb_free(&out);
}

void tokcheck_long_runs_encode(void **state)
{
    tok_suite *s = *state;
    /* Long single pieces: one 200 kB word, one 100 kB whitespace run and
     * 50k CJK characters. The heap merge keeps these O(n log n). */
    const char *units[] = {"a", " ", "\xe4\xb8\xad"};
    const size_t counts[] = {200000, 100000, 50000};
    for (int u = 0; u < 3; u++) {
        sbuf text, out;
        sb_init(&text);
        sb_init(&out);
        for (size_t i = 0; i < counts[u]; i++)
            assert_int_equal(sb_puts(&text, units[u]), TN_OK);
        tok_ids ids;
        tok_ids_init(&ids);
        char err[256];
        assert_int_equal(bpe_encode(s->tok, text.p, text.len, 0, &ids, err, sizeof(err)), TN_OK);
        assert_true(ids.len > 0 && ids.len <= counts[u]);
        decode_all(s->tok, ids.ids, ids.len, 0, &out);
        assert_int_equal(out.len, text.len);
        assert_memory_equal(out.p, text.p, text.len);
        tok_ids_free(&ids);
        sb_free(&text);
        sb_free(&out);
    }
}

void tokcheck_bad_input_is_rejected(void **state)
{
    tok_suite *s = *state;
    tok_ids ids;
    tok_ids_init(&ids);
    char err[256] = "";
    static const char *bad[] = {"ab\xff", "\xc3", "\xed\xa0\x80", "\xc0\xaf", "ok\xf4\x90\x80\x80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_int_equal(bpe_encode(s->tok, bad[i], strlen(bad[i]), 0, &ids, err, sizeof(err)),
                         TN_ERR_ARG);
        assert_non_null(strstr(err, "UTF-8"));
        assert_int_equal(ids.len, 0);
    }
    sbuf out;
    sb_init(&out);
    int32_t bad_ids[] = {5, -1};
    assert_int_equal(bpe_decode(s->tok, bad_ids, 2, 0, &out, err, sizeof(err)), TN_ERR_ARG);
    assert_non_null(strstr(err, "-1"));
    int32_t too_big = bpe_vocab_size(s->tok);
    assert_int_equal(bpe_decode(s->tok, &too_big, 1, 0, &out, err, sizeof(err)), TN_ERR_ARG);
    bpe_stream st;
    bpe_stream_init(&st, 0);
    assert_int_equal(bpe_stream_push(s->tok, &st, too_big, &out, err, sizeof(err)), TN_ERR_ARG);
    sb_free(&out);
    tok_ids_free(&ids);
}
