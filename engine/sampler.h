/* One token per sequence from a batch of logits, with what the API adds to
 * plain sampling: the penalties and logit_bias (kernels/logit_adjust.h) and
 * the log-probabilities of the model's own distribution
 * (kernels/logprobs.h). The prefiller (first token) and the decoder (every
 * step) both sample through here, so a request's tokens follow one rule
 * wherever they are drawn.
 *
 * Order per row: the raw logits give the logprobs (before temperature,
 * penalties and biases: what vLLM returns by default); a copy with the
 * row's penalties and biases applied gives the sampled token (kn_sample:
 * temperature, top-k, top-p, the row's generator). A row with a
 * constraint (structured outputs, engine/grammar.h) also gets its token
 * mask there (kn_logit_mask_apply: -inf for every token the grammar does
 * not allow next). Rows without adjustments are sampled from the raw
 * logits, and a batch with none copies nothing. */
#ifndef TANDEM_ENGINE_SAMPLER_H
#define TANDEM_ENGINE_SAMPLER_H
#include <stddef.h>
#include <stdint.h>
#include "engine/grammar.h"
#include "kernels/backend.h"
#include "kernels/logit_adjust.h"
#include "kernels/logit_mask.h"
#include "kernels/logprobs.h"
#include "kernels/sampling.h"

/* A sequence's penalty state: its parameters and the sparse entries (one
 * per token the rules touch, ascending token id) kept current as tokens
 * are added. Inactive (no entries, nothing applied) when presence and
 * frequency are 0, repetition is 1 and there is no bias. */
typedef struct tm_penalties {
    kn_logit_adjust params;
    int active;
    kn_logit_entry *entries;
    int n_entries, cap;
} tm_penalties;

/* Builds the state for a sequence whose prompt is prompt[0..n_prompt), the
 * last n_output_tail of which are earlier output of the same request (a
 * re-placed attempt continues where the first stopped: those count as
 * output for presence and frequency). bias_tokens[i] gets bias[i] (ids in
 * [0, vocab), each once). TN_ERR_ARG for bad values, TN_ERR_NOMEM. */
int tm_penalties_init(tm_penalties *p, float presence, float frequency, float repetition,
                      const int32_t *prompt, int n_prompt, int n_output_tail,
                      const int32_t *bias_tokens, const float *bias, int n_bias, int vocab);
/* Counts one more output token. TN_ERR_NOMEM leaves the state as it was. */
int tm_penalties_add_output(tm_penalties *p, int32_t token);
void tm_penalties_free(tm_penalties *p);

/* The logprobs of one sampled token (top_logprobs[i] belongs to top_ids[i],
 * most likely first). */
typedef struct tm_token_logprobs {
    float logprob;
    int n_top;
    int32_t top_ids[KN_LOGPROBS_MAX_TOP];
    float top_logprobs[KN_LOGPROBS_MAX_TOP];
} tm_token_logprobs;

/* Reusable buffers for tm_sample_rows (grown on demand, freed with
 * tm_sampler_free). */
typedef struct tm_sampler {
    const kn_backend *be;
    float *adjusted;          /* backend: the adjusted copy of the logits */
    size_t adjusted_floats;
    kn_logit_adjust *params;  /* host staging of the rows' adjustments */
    int32_t *row_start;
    kn_logit_entry *entries;
    int params_cap, row_start_cap, entries_cap; /* in elements */
    int32_t *lp_tokens, *lp_ids;               /* host staging of the logprobs */
    float *lp_token, *lp_top;
    int lp_tokens_cap, lp_ids_cap, lp_token_cap, lp_top_cap;
    uint32_t *mask;                            /* host: the rows' token masks */
    size_t mask_words;
    double mask_s;                             /* time spent computing masks (host) */
} tm_sampler;

void tm_sampler_init(tm_sampler *s, const kn_backend *be);
void tm_sampler_free(tm_sampler *s);

/* Samples tokens[i] for rows i < n of logits [n][vocab] (backend memory,
 * left unchanged). params, rngs, tokens: [n]. pen: [n] or NULL (NULL
 * entries: no adjustment). top_logprobs: [n] or NULL: -1 for no logprobs,
 * else the chosen token's logprob and the top k (0..KN_LOGPROBS_MAX_TOP)
 * go to lp[i] (lp may be NULL when no row asks). Status of the first op
 * that failed. con: [n] or NULL (NULL entries: unconstrained); the
 * caller advances each constraint with the sampled token
 * (tm_constraint_accept), as it counts penalties. */
int tm_sample_rows(tm_sampler *s, const float *logits, int n, int vocab,
                   const kn_sampling *params, uint64_t *rngs, const tm_penalties *const *pen,
                   tm_constraint *const *con, const int *top_logprobs, int32_t *tokens,
                   tm_token_logprobs *lp);
#endif
