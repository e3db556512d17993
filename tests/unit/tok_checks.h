/* Checks shared by test_tokenizer_qwen3.c and test_tokenizer_o200k.c: the
 * same properties hold for both vocabularies, against the reference ids of
 * the fixture for that tokenizer. */
#ifndef TANDEM_TESTS_TOK_CHECKS_H
#define TANDEM_TESTS_TOK_CHECKS_H
#include <cJSON.h>
#include "tokenizer/tokenizer.h"

typedef struct tok_suite {
    cJSON *fixture;
    bpe_tokenizer *tok;
    const char *name;      /* fixture key: "qwen3" or "o200k_harmony" */
    int nfc;               /* decoded text is the NFC of the input */
} tok_suite;

int tokcheck_setup(void **state, const char *name, const char *vocab_key, int nfc);
int tokcheck_teardown(void **state);

void tokcheck_encode_matches_reference(void **state);
void tokcheck_decode_round_trips(void **state);
void tokcheck_special_tokens_match_reference(void **state);
void tokcheck_special_strings_stay_text_without_flag(void **state);
void tokcheck_lossy_decode_matches_reference(void **state);
void tokcheck_stream_decode_equals_whole_decode(void **state);
void tokcheck_random_text_round_trips(void **state);
void tokcheck_long_runs_encode(void **state);
void tokcheck_bad_input_is_rejected(void **state);

#endif
