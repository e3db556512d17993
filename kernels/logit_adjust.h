/* Per-sequence logit adjustments applied before sampling, in place on
 * logits [n_rows][vocab]: the OpenAI/vLLM penalties and logit_bias.
 *
 * Each row has parameters (kn_logit_adjust) and a sparse list of entries,
 * one per token the row treats specially, strictly increasing in token id:
 *   out_count  times the token appears in the sequence's output so far
 *   in_prompt  1 when it appears in the prompt
 *   bias       added to its logit (logit_bias; 0 for none)
 * For an entry's token t, in this order (vLLM's):
 *   1. repetition (when out_count > 0 or in_prompt, repetition != 1):
 *      l_t = l_t > 0 ? l_t / repetition : l_t * repetition
 *   2. l_t -= frequency * out_count + presence * (out_count > 0)
 *   3. l_t += bias
 * Tokens without an entry are untouched, so the cost is the entries, not
 * the vocabulary. -inf logits stay -inf (a masked token is not unmasked by
 * a bias).
 *
 * params [n_rows], row_start [n_rows + 1] (entries of row r are
 * entries[row_start[r] .. row_start[r + 1])) and entries are host arrays;
 * logits is backend memory. Refused (TN_ERR_ARG, logits untouched):
 * non-finite parameters, repetition <= 0, token ids out of range or not
 * strictly increasing within a row, negative counts, non-finite biases,
 * row_start not non-decreasing from 0. */
#ifndef TANDEM_KERNELS_LOGIT_ADJUST_H
#define TANDEM_KERNELS_LOGIT_ADJUST_H
#include <stdint.h>
#include "kernels/backend.h"

typedef struct kn_logit_adjust {
    float presence;    /* OpenAI presence_penalty, [-2, 2] at the API */
    float frequency;   /* OpenAI frequency_penalty */
    float repetition;  /* vLLM repetition_penalty, > 0; 1 = none */
} kn_logit_adjust;

typedef struct kn_logit_entry {
    int32_t token;
    int32_t out_count;
    int32_t in_prompt;
    float bias;
} kn_logit_entry;

int kn_logit_adjust_apply(const kn_backend *be, float *logits, int n_rows, int vocab,
                          const kn_logit_adjust *params, const int32_t *row_start,
                          const kn_logit_entry *entries);
#endif
