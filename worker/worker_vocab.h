/* The vocabulary's token bytes on a worker (--tokenizer, the same value as
 * the router's): what structured outputs mask the logits over
 * (engine/grammar.h). The workers load it themselves rather than receive
 * grammars lowered to token level: a token-level automaton of a schema
 * over a 201k vocabulary is far larger than the grammar, while the trie is
 * built once per process (well under a second) and serves every request.
 *
 *   none   no vocabulary: requests with a grammar are refused
 *   bytes  the router's bytes codec: token t < 256 is the byte t, others
 *          have no bytes
 *   PATH   tokenizer.json / o200k_base.tiktoken (tokenizer/tokenizer.h):
 *          every token that is not an added/special token, by its bytes;
 *          the added ones only where a grammar names them
 *
 * The trie carries the worker's mask cache (TM_MASK_CACHE_DEFAULT_MB,
 * engine/grammar_cache.h): every request's constraint shares it, so a
 * schema's states are walked once per worker, not once per request. */
#ifndef TANDEM_WORKER_WORKER_VOCAB_H
#define TANDEM_WORKER_WORKER_VOCAB_H
#include <stddef.h>
#include "engine/grammar.h"

/* Builds *out for a model of vocab tokens; *loaded = 0 for "none".
 * TN_ERR_ARG (an unreadable vocabulary, one larger than the model's) or
 * TN_ERR_NOMEM with the reason in err. */
int worker_vocab_load(const char *spec, int vocab, tm_vocab_trie *out, int *loaded, char *err,
                      size_t errlen);
#endif
