/* GPT-OSS o200k_harmony (ranks from gpt-tokenizer's o200k_base.tiktoken)
 * against reference ids computed by gpt-tokenizer (tests/fixtures/tokref.mjs). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "tests/unit/tok_checks.h"
#include "tests/unit/tok_test_util.h"
#include "common/status.h"

static int setup(void **state)
{
    return tokcheck_setup(state, "o200k_harmony", "o200k_vocab", 0);
}

/* Every special token of the package's o200k_harmony map resolves to the
 * package's id, and all others are <|reserved_ID|>. */
static void specials_match_package(void **state)
{
    tok_suite *s = *state;
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(s->fixture, "o200k_harmony_specials");
    const cJSON *named = cJSON_GetObjectItemCaseSensitive(sp, "named");
    int n_named = 0;
    for (const cJSON *e = named->child; e; e = e->next, n_named++) {
        assert_int_equal(bpe_token_id(s->tok, e->string), (int32_t)e->valuedouble);
        assert_true(bpe_token_is_special(s->tok, (int32_t)e->valuedouble));
    }
    assert_int_equal(n_named, 10);
    int reserved = 0;
    for (int32_t id = 199998; id < 201088; id++) {
        char name[40];
        snprintf(name, sizeof(name), "<|reserved_%d|>", (int)id);
        int32_t got = bpe_token_id(s->tok, name);
        if (got == id)
            reserved++;
        else
            assert_int_equal(got, -1);
    }
    /* reserved_200018 is a second name of <|endofprompt|> */
    assert_int_equal(reserved, cJSON_GetObjectItemCaseSensitive(sp, "reserved_count")->valueint);
    assert_int_equal(bpe_vocab_size(s->tok), 201088);
    assert_int_equal(bpe_tokenizer_kind(s->tok), BPE_KIND_O200K_HARMONY);
    assert_string_equal(bpe_tokenizer_name(s->tok), "o200k_harmony");
    size_t len;
    const char *txt = bpe_token_bytes(s->tok, 200018, &len);
    assert_int_equal(len, 15);
    assert_memory_equal(txt, "<|endofprompt|>", 15);
    assert_null(bpe_token_bytes(s->tok, 201088, &len));
}

/* Where JavaScript's \s and Unicode White_Space disagree (U+0085, U+FEFF)
 * the split follows the Rust regex of tiktoken itself (fixture ids from the
 * tiktoken npm package, the Rust core compiled to WASM). */
static void whitespace_follows_rust_tiktoken(void **state)
{
    tok_suite *s = *state;
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(s->fixture, "o200k_rust_texts");
    assert_true(cJSON_GetArraySize(cases) >= 2);
    for (const cJSON *c = cases->child; c; c = c->next) {
        const char *text = toktest_str(c, "text");
        tok_ids ids;
        tok_ids_init(&ids);
        char err[256];
        assert_int_equal(bpe_encode(s->tok, text, strlen(text), 0, &ids, err, sizeof(err)), TN_OK);
        toktest_assert_ids_equal(toktest_str(c, "name"), ids.ids, ids.len, cJSON_GetObjectItemCaseSensitive(c, "ids"));
        tok_ids_free(&ids);
    }
}

static void truncated_rank_file_is_refused(void **state)
{
    (void)state;
    char path[] = "/tmp/tandem-tok-XXXXXX.tiktoken";
    int fd = mkstemps(path, 9);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs("IQ== 0\nIg== 1\n", f);
    fclose(f);
    bpe_tokenizer *t;
    char err[512];
    assert_int_equal(bpe_tokenizer_load(path, &t, err, sizeof(err)), TN_ERR_ARG);
    assert_non_null(strstr(err, "o200k_base"));
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("IQ== 0\n!!notbase64 1\n", f);
    fclose(f);
    assert_int_equal(bpe_tokenizer_load(path, &t, err, sizeof(err)), TN_ERR_ARG);
    assert_non_null(strstr(err, ":2:"));
    remove(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(specials_match_package),
        cmocka_unit_test(tokcheck_encode_matches_reference),
        cmocka_unit_test(tokcheck_decode_round_trips),
        cmocka_unit_test(tokcheck_special_tokens_match_reference),
        cmocka_unit_test(tokcheck_special_strings_stay_text_without_flag),
        cmocka_unit_test(tokcheck_lossy_decode_matches_reference),
        cmocka_unit_test(tokcheck_stream_decode_equals_whole_decode),
        cmocka_unit_test(tokcheck_random_text_round_trips),
        cmocka_unit_test(tokcheck_long_runs_encode),
        cmocka_unit_test(tokcheck_bad_input_is_rejected),
        cmocka_unit_test(whitespace_follows_rust_tiktoken),
        cmocka_unit_test(truncated_rank_file_is_refused),
    };
    return cmocka_run_group_tests(tests, setup, tokcheck_teardown);
}
