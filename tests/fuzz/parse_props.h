/* The properties both chat output-parser fuzz targets check. */
#ifndef TANDEM_TESTS_FUZZ_PARSE_PROPS_H
#define TANDEM_TESTS_FUZZ_PARSE_PROPS_H
#include <stddef.h>
#include <stdint.h>
#include "chat/chat.h"

/* A pool of token ids the input bytes index: the format's special tokens,
 * ordinary tokens of words the formats use (channel names, "to=functions",
 * JSON), and single-byte tokens that are pieces of a 4-byte character. */
typedef struct fz_token_pool {
    int32_t ids[96];
    size_t n;
    int32_t vocab; /* bpe_vocab_size, which scans: computed once */
} fz_token_pool;

/* Fills the pool; exits with a message when a listed token is missing. */
void fz_token_pool_init(fz_token_pool *pool, const bpe_tokenizer *t,
                        const char *const *specials, size_t n_specials);

/* data[0] bit 0 sets start_in_reasoning. Each following byte below 0xC0
 * picks a pool token; a byte from 0xC0 up takes two more bytes for an
 * arbitrary id in the vocabulary. The ids are streamed through one parser
 * (every push succeeds or fails with TN_ERR_ARG and a message, after which
 * feeding stops; deltas are non-empty valid UTF-8; streamed reasoning and
 * content add up to the result; tool calls have names and arguments) and,
 * when the stream succeeded, parsed again whole with
 * chat_parse_completion, which must give the same result. */
void fz_parse_input(const bpe_tokenizer *t, chat_format f, const fz_token_pool *pool,
                    const uint8_t *data, size_t size);

#endif
