/* libFuzzer target: the qwen3 tokenizer's encode, guarded encode, decode and
 * streaming decode (properties in tests/fuzz/tok_props.h). */
#include <stddef.h>
#include <stdint.h>
#include "tests/fuzz/harness.h"
#include "tests/fuzz/tok_props.h"

/* Loaded once; see harness.h. */
static bpe_tokenizer *tok;
static int32_t vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    tok = fz_load_tokenizer("qwen3");
    vocab = bpe_vocab_size(tok);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_tokenizer_input(tok, vocab, 1, data, size);
    return 0;
}
