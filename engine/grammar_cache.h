/* The token masks of grammar states, shared by every sequence of a worker
 * (engine/grammar.h's constraints attach to it with tm_constraint_share).
 *
 * A mask is a function of the vocabulary, the grammar and the state alone
 * (the stop tokens a sequence adds are kept apart: the cache stores
 * whether they belong, not which they are), so requests with the same
 * schema (the common case: one application, one schema) and the steps of
 * one request reuse each other's trie walks. Grammars are interned by
 * their program (a hash, then the words compared), entries keyed by
 * (grammar, state) and evicted least recently used past a byte budget.
 * Thread safe: the sampler computes rows' masks in parallel (lookups copy
 * the mask out under the lock; walks run outside it). */
#ifndef TANDEM_ENGINE_GRAMMAR_CACHE_H
#define TANDEM_ENGINE_GRAMMAR_CACHE_H
#include <stddef.h>
#include <stdint.h>
#include "engine/grammar.h"

typedef struct tm_mask_cache tm_mask_cache;
typedef struct tm_mc_grammar tm_mc_grammar;

typedef struct tm_mask_cache_stats {
    uint64_t hits, misses, evictions;
    int grammars, entries;
    size_t bytes, budget;
} tm_mask_cache_stats;

/* A cache of masks of `words` uint32 words each within budget_bytes
 * (masks and their keys counted; the interned programs are not: they live
 * as long as a constraint or an entry uses them). TN_ERR_ARG (words <= 0, a budget
 * below one mask), TN_ERR_NOMEM. */
int tm_mask_cache_new(tm_mask_cache **out, int words, size_t budget_bytes);
/* Every grammar must have been released. */
void tm_mask_cache_free(tm_mask_cache *c);

/* The interned grammar of a program (a reference the caller releases).
 * TN_ERR_NOMEM. */
int tm_mask_cache_grammar(tm_mask_cache *c, const int32_t *code, int n_code, tm_mc_grammar **out);
void tm_mask_cache_release(tm_mask_cache *c, tm_mc_grammar *g);

/* 1 and the mask (and whether the sequence's stop tokens join it) when
 * the state's mask is cached, else 0. */
int tm_mask_cache_get(tm_mask_cache *c, tm_mc_grammar *g, const tm_gstate *s, uint32_t *mask,
                      int *add_stop);
/* Stores a state's mask (nothing when memory is short or it is there). */
void tm_mask_cache_put(tm_mask_cache *c, tm_mc_grammar *g, const tm_gstate *s,
                       const uint32_t *mask, int add_stop);
void tm_mask_cache_stats_get(tm_mask_cache *c, tm_mask_cache_stats *out);
#endif
