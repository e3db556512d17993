/* libFuzzer target: the HARMONY output parser fed token streams
 * that mix the format's special tokens with ordinary and arbitrary tokens
 * (properties in tests/fuzz/parse_props.h). */
#include <stddef.h>
#include <stdint.h>
#include "tests/fuzz/harness.h"
#include "tests/fuzz/parse_props.h"

/* Loaded once; see harness.h. */
static bpe_tokenizer *tok;
static fz_token_pool pool;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    static const char *const specials[] = {"<|start|>", "<|end|>", "<|message|>", "<|channel|>",
                                           "<|constrain|>", "<|return|>", "<|call|>",
                                           "<|endoftext|>"};
    tok = fz_load_tokenizer("o200k");
    fz_token_pool_init(&pool, tok, specials, sizeof(specials) / sizeof(specials[0]));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_parse_input(tok, CHAT_FORMAT_HARMONY, &pool, data, size);
    return 0;
}
