/* The body of a tokenizer libFuzzer target: encode, guarded encode, decode
 * and streaming decode (properties in tests/fuzz/tok_props.h). A target
 * defines FZ_TOKENIZER (the name fz_load_tokenizer takes) and FZ_TOKENIZER_NFC
 * (1 when the tokenizer normalizes its input to NFC), then includes this
 * file once. */
#ifndef TANDEM_TESTS_FUZZ_TOK_TARGET_H
#define TANDEM_TESTS_FUZZ_TOK_TARGET_H
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
    tok = fz_load_tokenizer(FZ_TOKENIZER);
    vocab = bpe_vocab_size(tok);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_tokenizer_input(tok, vocab, FZ_TOKENIZER_NFC, data, size);
    return 0;
}

#endif
