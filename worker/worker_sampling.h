/* A request's sampling settings from the wire (SamplingParams) to what
 * engine/sampler.h takes, and sampled tokens' logprobs back to the wire:
 * the one conversion the prefiller (first token) and the decoder (every
 * later token) share. */
#ifndef TANDEM_WORKER_WORKER_SAMPLING_H
#define TANDEM_WORKER_WORKER_SAMPLING_H
#include <stddef.h>
#include <stdint.h>
#include "engine/sampler.h"
#include "kernels/sampling.h"
#include "proto/tandem.pb-c.h"

typedef struct worker_sampling {
    kn_sampling params;
    uint64_t seed;
    tm_penalties pen;     /* inactive unless a penalty or bias is set */
    int top_logprobs;     /* -1: no logprobs; else 0..KN_LOGPROBS_MAX_TOP */
    tm_constraint *con;   /* structured outputs; NULL: unconstrained */
} worker_sampling;

/* Checks sp and builds *out. prompt (n_prompt tokens, already checked
 * against the vocabulary) is what the penalties count: the decoder passes
 * DecodeAssignment.penalty_prompt, the prefiller its prompt. A penalty that
 * needs the prompt when none was sent is an error (the router sends it).
 * Returns TN_OK, or TN_ERR_ARG / TN_ERR_NOMEM with the reason in err. */
int worker_sampling_from_wire(worker_sampling *out, const Tandem__V1__SamplingParams *sp,
                              const int32_t *prompt, int n_prompt, int vocab, char *err,
                              size_t errlen);
void worker_sampling_free(worker_sampling *s);

/* Structured outputs: loads sp->grammar (if any) into s->con for the
 * vocabulary (NULL when the worker has no --tokenizer: a grammar is then
 * refused), with stop as the tokens that end it, and replays
 * sp->grammar_prefix. TN_ERR_ARG / TN_ERR_NOMEM with the reason in err. */
int worker_sampling_constrain(worker_sampling *s, const Tandem__V1__SamplingParams *sp,
                              const tm_vocab_trie *vocab, const int32_t *stop, int n_stop,
                              char *err, size_t errlen);

/* Whether the penalties need the prompt's tokens (repetition, or earlier
 * output inside the prompt). */
int worker_sampling_needs_prompt(const Tandem__V1__SamplingParams *sp);

/* Points out (initialised here) at lp's values; valid while lp lives. */
void worker_logprobs_to_wire(Tandem__V1__TokenLogprobs *out, tm_token_logprobs *lp);
#endif
