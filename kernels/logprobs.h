/* Log-probabilities of the model's own distribution, for the API's
 * `logprobs` / `top_logprobs`: per row of logits [n_rows][vocab],
 *   logprob(t) = l_t - max l - log(sum_i exp(l_i - max l))
 * computed in double (the softmax of the raw logits: before temperature,
 * penalties and biases, as vLLM reports by default).
 *
 * For each row: the chosen token's logprob (tokens[r] >= 0; NaN written for
 * a row with tokens[r] < 0) and the top_n most likely tokens in the order
 * "higher logit first, then lower id" (the sampler's order, so the greedy
 * token is always first). -inf logits (masked tokens) have logprob -inf
 * and rank last; NaN or +inf anywhere in a row is refused (TN_ERR_ARG).
 * top_n in [0, KN_LOGPROBS_MAX_TOP] and at most vocab.
 *
 * logits is backend memory; tokens, token_logprob [n_rows] and top_ids /
 * top_logprobs [n_rows][top_n] are host arrays (either output may be NULL
 * when not wanted: token_logprob NULL skips the chosen tokens, top_ids and
 * top_logprobs NULL need top_n == 0). */
#ifndef TANDEM_KERNELS_LOGPROBS_H
#define TANDEM_KERNELS_LOGPROBS_H
#include <stdint.h>
#include "kernels/backend.h"

#define KN_LOGPROBS_MAX_TOP 20

int kn_logprobs(const kn_backend *be, const float *logits, int n_rows, int vocab,
                const int32_t *tokens, float *token_logprob, int top_n, int32_t *top_ids,
                float *top_logprobs);
#endif
