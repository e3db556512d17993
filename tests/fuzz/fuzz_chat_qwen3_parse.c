/* libFuzzer target: the QWEN3 output parser fed token streams
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
    static const char *const specials[] = {"<think>", "</think>", "<tool_call>", "</tool_call>",
                                           "<|im_end|>", "<|endoftext|>", "<|im_start|>",
                                           "<tool_response>", "</tool_response>"};
    tok = fz_load_tokenizer("qwen3");
    fz_token_pool_init(&pool, tok, specials, sizeof(specials) / sizeof(specials[0]));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_parse_input(tok, CHAT_FORMAT_QWEN3, &pool, data, size);
    return 0;
}
