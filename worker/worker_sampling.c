/* SamplingParams <-> engine/sampler.h (worker/worker_sampling.h). */
#include "worker/worker_sampling.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "common/status.h"

int worker_sampling_needs_prompt(const Tandem__V1__SamplingParams *sp)
{
    const int repetition = sp->repetition_penalty != 0.0f && sp->repetition_penalty != 1.0f;
    const int counts_output = sp->presence_penalty != 0.0f || sp->frequency_penalty != 0.0f;
    return repetition || (counts_output && sp->output_in_prompt > 0);
}

int worker_sampling_from_wire(worker_sampling *out, const Tandem__V1__SamplingParams *sp,
                              const int32_t *prompt, int n_prompt, int vocab, char *err,
                              size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->top_logprobs = -1;
    if (!sp || !isfinite(sp->temperature) || sp->temperature < 0 ||
        !(sp->top_p > 0 && sp->top_p <= 1))
        return tn_fail(err, errlen, TN_ERR_ARG,
                       "sampling: temperature >= 0 and top_p in (0, 1] required");
    out->params = (kn_sampling){ .temperature = sp->temperature, .top_p = sp->top_p,
                                 .top_k = sp->top_k };
    out->seed = sp->seed;
    if (sp->logprobs) {
        if (sp->top_logprobs > KN_LOGPROBS_MAX_TOP)
            return tn_fail(err, errlen, TN_ERR_ARG, "sampling: top_logprobs %u is over %d",
                           (unsigned)sp->top_logprobs, KN_LOGPROBS_MAX_TOP);
        out->top_logprobs = (int)sp->top_logprobs;
    }
    const float repetition = sp->repetition_penalty == 0.0f ? 1.0f : sp->repetition_penalty;
    if (worker_sampling_needs_prompt(sp) && n_prompt == 0)
        return tn_fail(err, errlen, TN_ERR_ARG, "sampling: a penalty needs the prompt's tokens");
    if ((int64_t)sp->output_in_prompt > n_prompt)
        return tn_fail(err, errlen, TN_ERR_ARG, "sampling: output_in_prompt %u is over the prompt (%d)",
                       (unsigned)sp->output_in_prompt, n_prompt);
    int32_t *bias_tokens = NULL;
    float *bias = NULL;
    const int n_bias = (int)sp->n_logit_bias;
    if (n_bias > 0) {
        bias_tokens = malloc((size_t)n_bias * sizeof *bias_tokens);
        bias = malloc((size_t)n_bias * sizeof *bias);
        if (!bias_tokens || !bias) {
            free(bias_tokens);
            free(bias);
            return tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory");
        }
        for (int i = 0; i < n_bias; i++) {
            bias_tokens[i] = sp->logit_bias[i]->token;
            bias[i] = sp->logit_bias[i]->bias;
        }
    }
    int rc = tm_penalties_init(&out->pen, sp->presence_penalty, sp->frequency_penalty, repetition,
                               prompt, n_prompt, (int)sp->output_in_prompt, bias_tokens, bias,
                               n_bias, vocab);
    free(bias_tokens);
    free(bias);
    if (rc == TN_ERR_NOMEM)
        return tn_fail(err, errlen, rc, "out of memory");
    if (rc != TN_OK)
        return tn_fail(err, errlen, rc,
                       "sampling: bad penalties or logit_bias (presence %g, frequency %g, "
                       "repetition %g, %d biases: finite values, repetition > 0, each biased "
                       "token once and inside the vocabulary of %d)",
                       (double)sp->presence_penalty, (double)sp->frequency_penalty,
                       (double)repetition, n_bias, vocab);
    return TN_OK;
}

void worker_sampling_free(worker_sampling *s)
{
    tm_penalties_free(&s->pen);
    if (s->con) {
        tm_constraint_free(s->con);
        free(s->con);
        s->con = NULL;
    }
}

int worker_sampling_constrain(worker_sampling *s, const Tandem__V1__SamplingParams *sp,
                              const tm_vocab_trie *vocab, const int32_t *stop, int n_stop,
                              char *err, size_t errlen)
{
    if (!sp || sp->n_grammar == 0) {
        if (sp && sp->n_grammar_prefix)
            return tn_fail(err, errlen, TN_ERR_ARG, "sampling: grammar_prefix without a grammar");
        return TN_OK;
    }
    if (!vocab)
        return tn_fail(err, errlen, TN_ERR_ARG,
                       "structured output needs the vocabulary: start this worker with "
                       "--tokenizer (the router's)");
    if (sp->n_grammar > TM_G_MAX_CODE || sp->n_grammar_prefix > INT32_MAX)
        return tn_fail(err, errlen, TN_ERR_ARG, "sampling: grammar too large");
    tm_constraint *c = calloc(1, sizeof *c);
    if (!c)
        return tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory");
    /* fixed32 words are the program's int32 words */
    int rc = tm_constraint_init(c, (const int32_t *)sp->grammar, (int)sp->n_grammar, vocab, stop,
                                n_stop, err, errlen);
    if (rc != TN_OK) {
        free(c);
        return rc;
    }
    for (size_t i = 0; i < sp->n_grammar_prefix; i++) {
        rc = tm_constraint_accept(c, sp->grammar_prefix[i]);
        if (rc != TN_OK) {
            tm_constraint_free(c);
            free(c);
            return tn_fail(err, errlen, rc, "sampling: grammar_prefix token %zu (%d) breaks the grammar",
                           i, (int)sp->grammar_prefix[i]);
        }
    }
    if (s->con) {
        tm_constraint_free(s->con);
        free(s->con);
    }
    s->con = c;
    return TN_OK;
}

void worker_logprobs_to_wire(Tandem__V1__TokenLogprobs *out, tm_token_logprobs *lp)
{
    tandem__v1__token_logprobs__init(out);
    out->logprob = lp->logprob;
    out->n_top_ids = (size_t)lp->n_top;
    out->top_ids = lp->top_ids;
    out->n_top_logprobs = (size_t)lp->n_top;
    out->top_logprobs = lp->top_logprobs;
}
