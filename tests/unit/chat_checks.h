/* Checks shared by test_chat_harmony.c and test_chat_qwen3.c: render the
 * fixture conversations and compare with the reference ids and text; parse
 * the fixture completions, whole and streamed token by token. */
#ifndef TANDEM_TESTS_CHAT_CHECKS_H
#define TANDEM_TESTS_CHAT_CHECKS_H
#include <cJSON.h>
#include "chat/chat.h"

typedef struct chat_suite {
    cJSON *fixture;
    bpe_tokenizer *tok;
    chat_format fmt;
} chat_suite;

int chatcheck_setup(void **state, const char *vocab_key, chat_format fmt);
int chatcheck_teardown(void **state);

/* Renders every case of fixture[key]; options come from the case. */
void chatcheck_check_render_cases(const chat_suite *s, const char *key);
/* Parses every case of fixture[key] against its "expected". */
void chatcheck_check_parse_cases(const chat_suite *s, const char *key);
/* Renders a conversation given as JSON text with default options. */
int chatcheck_render_json(const chat_suite *s, const char *messages_json, const char *tools_json,
                   const chat_render_opts *o, tok_ids *ids, sbuf *text, char *err, size_t errlen);
/* Feeds random mixtures of the format's special tokens and ordinary
 * tokens (including halves of multi-byte characters) to fresh parsers:
 * every push either succeeds or reports an error, deltas are valid UTF-8,
 * and the streamed deltas add up to the result. Catches crashes and leaks
 * under ASan/valgrind rather than checking meaning. */
void chatcheck_fuzz_parser(const chat_suite *s, const char *const *specials, size_t n_specials);
/* The format's stop tokens are exactly first, then second. */
void chatcheck_stop_tokens(const chat_suite *s, int32_t first, int32_t second);
/* Number of occurrences of id in ids. */
size_t chatcheck_count(const tok_ids *ids, int32_t id);

#endif
