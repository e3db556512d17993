/* Constrained decoding: a context-free grammar over bytes and special
 * tokens, the set of parse stacks it is in after a prefix of output, and
 * the token mask of a state over a vocabulary.
 *
 * The router compiles a request's JSON schema or tool-call format into a
 * grammar (router/schema_grammar.h) and ships it as a flat int32 program
 * (SamplingParams.grammar); the prefiller and the decoder load it once per
 * sequence and, every step, turn the current state into a bitmask over the
 * vocabulary (a walk of the vocabulary's byte trie, pruned where no stack
 * survives; masks are cached per state) that engine/sampler.c applies to
 * the logits with kn_logit_mask_apply.
 *
 * Program layout: rule after rule, rule 0 the root. A rule is its
 * alternatives, each a sequence of elements closed by TM_G_ALT_END, then
 * TM_G_RULE_END. Elements:
 *   TM_G_BYTES  w0..w7   one byte from the 256-bit set w (bit b of w[b/32])
 *   TM_G_RULE   r        rule r
 *   TM_G_TOKEN  id       the (special) token id, as one unit
 * An empty alternative matches the empty string. Rules must not be left
 * recursive (checked at load).
 *
 * A state is a set of stacks (as in llama.cpp's GBNF matcher): each stack
 * lists, outermost first, the position of the next element in every open
 * sequence, its top always a TM_G_BYTES or TM_G_TOKEN element; the empty
 * stack means the whole grammar matched (accepting). Stacks deeper than
 * TM_G_MAX_DEPTH and stacks past TM_G_MAX_STACKS are dropped: the output
 * stays inside the grammar, only nesting deeper is refused. */
#ifndef TANDEM_ENGINE_GRAMMAR_H
#define TANDEM_ENGINE_GRAMMAR_H
#include <stddef.h>
#include <stdint.h>

enum { TM_G_BYTES = 1, TM_G_RULE = 2, TM_G_TOKEN = 3, TM_G_ALT_END = 4, TM_G_RULE_END = 5 };
#define TM_G_MAX_DEPTH 256
#define TM_G_MAX_STACKS 64
#define TM_G_MAX_CODE (1 << 22) /* int32 words of a program */

typedef struct tm_grammar {
    int32_t *code;
    int n_code;
    int n_rules;
    int32_t *alt_first; /* [n_rules + 1]: rule r's alternatives are alts[alt_first[r]..] */
    int32_t *alts;      /* start position of every alternative */
} tm_grammar;

/* Checks and loads a program (copied). Token ids must be in [0, vocab).
 * TN_ERR_ARG with the reason in err (a malformed program, a rule reference
 * out of range, left recursion, a grammar that matches nothing),
 * TN_ERR_NOMEM. */
int tm_grammar_load(tm_grammar *g, const int32_t *code, int n_code, int vocab, char *err,
                    size_t errlen);
void tm_grammar_free(tm_grammar *g);

/* A set of stacks, concatenated as [depth, pos...] each. */
typedef struct tm_gstate {
    int32_t *v;
    int len, cap; /* in int32 */
    int n;        /* stacks */
} tm_gstate;

void tm_gstate_free(tm_gstate *s);
int tm_gstate_copy(tm_gstate *dst, const tm_gstate *src);
int tm_gstate_equal(const tm_gstate *a, const tm_gstate *b);
/* The state before any output. */
int tm_grammar_start(const tm_grammar *g, tm_gstate *out);
/* out = in after one byte / one token (out->n == 0: not allowed). TN_OK or
 * TN_ERR_NOMEM. */
int tm_grammar_advance_byte(const tm_grammar *g, const tm_gstate *in, uint8_t c, tm_gstate *out);
int tm_grammar_advance_token(const tm_grammar *g, const tm_gstate *in, int32_t token,
                             tm_gstate *out);
/* Whether the grammar has matched completely (an empty stack is in s). */
int tm_gstate_accepting(const tm_gstate *s);
/* Whether a byte string is a whole sentence of the grammar (tests). */
int tm_grammar_matches(const tm_grammar *g, const char *s, size_t n);

/* ---- building programs (the router) ---- */

typedef struct tm_gb_rule {
    int32_t *code;
    int n, cap;
} tm_gb_rule;

typedef struct tm_grammar_builder {
    tm_gb_rule *rules;
    int n_rules, cap;
    int failed; /* an allocation failed: tm_gb_finish reports it */
} tm_grammar_builder;

void tm_gb_init(tm_grammar_builder *b);
void tm_gb_free(tm_grammar_builder *b);
/* A new empty rule (its first alternative open); -1 when out of memory. */
int tm_gb_rule_new(tm_grammar_builder *b);
/* Appends to rule r's open alternative. */
void tm_gb_set(tm_grammar_builder *b, int r, const uint32_t set[8]);
void tm_gb_range(tm_grammar_builder *b, int r, unsigned lo, unsigned hi);
void tm_gb_lit(tm_grammar_builder *b, int r, const char *s, size_t n);
void tm_gb_ref(tm_grammar_builder *b, int r, int sub);
void tm_gb_token(tm_grammar_builder *b, int r, int32_t id);
/* Closes rule r's open alternative and opens another. */
void tm_gb_alt(tm_grammar_builder *b, int r);
/* The program (malloc'd) of every rule, rule 0 first. TN_ERR_NOMEM. */
int tm_gb_finish(tm_grammar_builder *b, int32_t **code, int *n_code);

/* ---- masks over a vocabulary ---- */

/* The vocabulary's tokens that are byte strings, in a byte trie laid out in
 * preorder (a node's subtree is the nodes up to skip[i]): the mask walk is
 * one pass over the arrays that jumps over every subtree no stack accepts.
 * Tokens without bytes (special and added tokens) are not in it: only a
 * grammar's TM_G_TOKEN elements and the stop tokens allow them. */
typedef struct tm_vocab_trie {
    int vocab;
    int n_nodes, max_depth;
    uint8_t *byte;
    uint8_t *depth;       /* 1 for the root's children */
    int32_t *skip;
    int32_t *tok_begin;   /* tokens ending at node i: sorted[tok_begin[i]..tok_begin[i+1]) */
    int32_t *sorted;
    int64_t *off;         /* [vocab + 1]: token t's bytes are blob[off[t]..off[t+1]); */
    char *blob;           /* has_bytes[t] says whether t is in the trie */
    uint8_t *has_bytes;
    struct tm_mask_cache *masks; /* masks by (grammar, state) for every constraint
                                    over this vocabulary (NULL: none); owned */
} tm_vocab_trie;

/* bytes[t] (lens[t] bytes) for t < vocab; NULL or length 0: not a byte
 * token. TN_ERR_NOMEM / TN_ERR_ARG. */
int tm_vocab_trie_build(tm_vocab_trie *t, int vocab, const char *const *bytes, const size_t *lens);
void tm_vocab_trie_free(tm_vocab_trie *t);
/* Gives the trie a mask cache of budget_bytes (engine/grammar_cache.h)
 * that every constraint initialized over it afterwards shares; the trie
 * must outlive those constraints. TN_ERR_ARG / TN_ERR_NOMEM. */
#define TM_MASK_CACHE_DEFAULT_MB 256
int tm_vocab_trie_share_masks(tm_vocab_trie *t, size_t budget_bytes);

/* One sequence's constraint: its grammar, current state, stop tokens (the
 * only tokens allowed once the grammar has matched), a small cache of
 * masks by state, and the part of the grammar's byte automaton the trie
 * walks have seen: every state met gets an id and a row of 256
 * transitions filled on first use, so a walk re-derives no state (inside
 * a string most bytes lead back to the same state). Reset before a walk
 * once it holds TM_DFA_MAX_STATES states. */
#define TM_CONSTRAINT_CACHE 16
#define TM_DFA_MAX_STATES 1024
typedef struct tm_constraint {
    tm_grammar g;
    const tm_vocab_trie *trie;
    tm_gstate state;
    int32_t *stop;
    int n_stop;
    int words;
    tm_gstate *levels; /* scratch of the trie walk: [trie->max_depth + 1] */
    tm_gstate tmp;
    struct {
        tm_gstate key;
        uint32_t *mask;
        uint64_t hits;
    } cache[TM_CONSTRAINT_CACHE];
    int n_cached, next_evict;
    uint64_t masks_computed, masks_cached;
    struct {
        tm_gstate *states; /* by id */
        int32_t *trans;    /* [id][256]: next id, -1 unknown, -2 no stack survives */
        int32_t *slots;    /* open addressing over the states' hashes: id + 1, 0 empty */
        uint64_t *hash;    /* by id */
        int n, cap, n_slots;
    } dfa;
    int32_t *level_ids;    /* the walk's state id per trie depth */
    struct tm_mask_cache *shared; /* the worker's masks by (grammar, state), or NULL */
    struct tm_mc_grammar *shared_g;
    uint64_t masks_shared;        /* masks found there */
} tm_constraint;

/* Loads code (tm_grammar_load) for a vocabulary; shares the trie's mask
 * cache when it has one. TN_ERR_ARG / NOMEM. */
int tm_constraint_init(tm_constraint *c, const int32_t *code, int n_code,
                       const tm_vocab_trie *trie, const int32_t *stop, int n_stop, char *err,
                       size_t errlen);
void tm_constraint_free(tm_constraint *c);
/* Looks masks up in (and adds them to) a cache shared with other
 * sequences (engine/grammar_cache.h) besides the constraint's own; the
 * cache must outlive the constraint. TN_ERR_NOMEM. */
int tm_constraint_share(tm_constraint *c, struct tm_mask_cache *cache);
/* The allowed tokens of the current state, kn_logit_mask_words(vocab)
 * words. A state that allows nothing (a dead end) allows the stop tokens,
 * so the sequence ends. TN_ERR_NOMEM. */
int tm_constraint_mask(tm_constraint *c, uint32_t *mask);
/* Moves the state past token. TN_ERR_ARG when the grammar does not allow
 * it (the state is unchanged); a stop token in an accepting state is
 * allowed and changes nothing. */
int tm_constraint_accept(tm_constraint *c, int32_t token);
#endif
