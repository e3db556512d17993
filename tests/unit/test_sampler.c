/* engine/sampler.c against dense recomputations: tm_penalties keeps one
 * entry per token the rules touch (the counts and prompt flags a dense
 * per-vocabulary table holds), and tm_sample_rows samples from an adjusted
 * copy (leaving the logits untouched) while its logprobs are those of the
 * raw logits (float64 log-softmax). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "common/status.h"
#include "engine/sampler.h"

#define VOCAB 64

/* A deterministic generator for test data (xorshift). */
static uint32_t next_u32(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)(*s >> 16);
}

typedef struct dense {
    int out_count[VOCAB];
    int in_prompt[VOCAB];
    float bias[VOCAB];
    int has_bias[VOCAB];
} dense;

/* The entries must be exactly the tokens the dense table marks, ascending,
 * with the same counts. */
static void expect_entries_match(const tm_penalties *p, const dense *d, int repetition_on)
{
    int k = 0;
    for (int t = 0; t < VOCAB; t++) {
        int touched = d->out_count[t] > 0 || (repetition_on && d->in_prompt[t]) || d->has_bias[t];
        if (!touched)
            continue;
        assert_true(k < p->n_entries);
        const kn_logit_entry *e = &p->entries[k++];
        assert_int_equal(e->token, t);
        assert_int_equal(e->out_count, d->out_count[t]);
        assert_int_equal(e->in_prompt, repetition_on ? d->in_prompt[t] : 0);
        assert_true(e->bias == (d->has_bias[t] ? d->bias[t] : 0.0f));
    }
    assert_int_equal(k, p->n_entries);
}

static void penalties_match_a_dense_recount(void **state)
{
    (void)state;
    uint64_t rng = 0x1234567;
    for (int trial = 0; trial < 200; trial++) {
        const int repetition_on = trial % 2;
        int32_t prompt[40], bias_tok[6];
        float bias[6];
        int n_prompt = 1 + (int)(next_u32(&rng) % 40);
        int tail = (int)(next_u32(&rng) % (unsigned)(n_prompt + 1));
        dense d;
        memset(&d, 0, sizeof d);
        for (int i = 0; i < n_prompt; i++) {
            prompt[i] = (int32_t)(next_u32(&rng) % VOCAB);
            if (i >= n_prompt - tail)
                d.out_count[prompt[i]]++;
            else
                d.in_prompt[prompt[i]] = 1;
        }
        int n_bias = 0;
        for (int i = 0; i < 6; i++) {
            int32_t t = (int32_t)(next_u32(&rng) % VOCAB);
            if (d.has_bias[t])
                continue;
            d.has_bias[t] = 1;
            d.bias[t] = (float)((int)(next_u32(&rng) % 200) - 100);
            bias_tok[n_bias] = t;
            bias[n_bias++] = d.bias[t];
        }
        tm_penalties p;
        assert_int_equal(tm_penalties_init(&p, 0.5f, 0.25f, repetition_on ? 1.3f : 1.0f, prompt,
                                           n_prompt, tail, bias_tok, bias, n_bias, VOCAB),
                         TN_OK);
        assert_int_equal(p.active, 1);
        for (int i = 0; i < 30; i++) {
            int32_t t = (int32_t)(next_u32(&rng) % VOCAB);
            assert_int_equal(tm_penalties_add_output(&p, t), TN_OK);
            d.out_count[t]++;
        }
        expect_entries_match(&p, &d, repetition_on);
        tm_penalties_free(&p);
    }
}

static void penalties_inactive_or_bias_only(void **state)
{
    (void)state;
    const int32_t prompt[3] = {1, 2, 3};
    tm_penalties p;
    assert_int_equal(tm_penalties_init(&p, 0, 0, 1, prompt, 3, 0, NULL, NULL, 0, VOCAB), TN_OK);
    assert_int_equal(p.active, 0);
    assert_int_equal(p.n_entries, 0);
    assert_int_equal(tm_penalties_add_output(&p, 5), TN_OK);
    assert_int_equal(p.n_entries, 0);
    tm_penalties_free(&p);
    /* Biases only: output does not add entries. */
    const int32_t bt[2] = {9, 4};
    const float bv[2] = {1, -1};
    assert_int_equal(tm_penalties_init(&p, 0, 0, 1, prompt, 3, 1, bt, bv, 2, VOCAB), TN_OK);
    assert_int_equal(p.active, 1);
    assert_int_equal(p.n_entries, 2);
    assert_int_equal(p.entries[0].token, 4);
    assert_int_equal(p.entries[1].token, 9);
    assert_int_equal(tm_penalties_add_output(&p, 5), TN_OK);
    assert_int_equal(p.n_entries, 2);
    tm_penalties_free(&p);
}

static void penalties_refuse_bad_values(void **state)
{
    (void)state;
    const int32_t prompt[2] = {1, 2}, bad_prompt[2] = {1, VOCAB};
    const int32_t bt[2] = {3, 3}, out_of_vocab[1] = {VOCAB};
    const float bv[2] = {1, 2}, inf_bias[1] = {INFINITY};
    tm_penalties p;
    assert_int_equal(tm_penalties_init(&p, 0, 0, 0, prompt, 2, 0, NULL, NULL, 0, VOCAB), TN_ERR_ARG);
    assert_int_equal(tm_penalties_init(&p, NAN, 0, 1, prompt, 2, 0, NULL, NULL, 0, VOCAB), TN_ERR_ARG);
    assert_int_equal(tm_penalties_init(&p, 0, 0, 1, prompt, 2, 3, NULL, NULL, 0, VOCAB), TN_ERR_ARG);
    assert_int_equal(tm_penalties_init(&p, 0, 0, 1, prompt, 2, 0, bt, bv, 2, VOCAB), TN_ERR_ARG);
    assert_int_equal(tm_penalties_init(&p, 0, 0, 1, prompt, 2, 0, out_of_vocab, bv, 1, VOCAB),
                     TN_ERR_ARG);
    assert_int_equal(tm_penalties_init(&p, 0, 0, 1, prompt, 2, 0, bt, inf_bias, 1, VOCAB),
                     TN_ERR_ARG);
    assert_int_equal(tm_penalties_init(&p, 0, 0, 1.5f, bad_prompt, 2, 0, NULL, NULL, 0, VOCAB),
                     TN_ERR_ARG);
}

/* The dense reference of kernels/logit_adjust.h's rules, in double. */
static void dense_adjust(double *row, const tm_penalties *p)
{
    for (int i = 0; i < p->n_entries; i++) {
        const kn_logit_entry *e = &p->entries[i];
        double l = row[e->token];
        if ((e->out_count > 0 || e->in_prompt) && p->params.repetition != 1.0f)
            l = l > 0 ? l / p->params.repetition : l * p->params.repetition;
        l -= (double)p->params.frequency * e->out_count + (double)p->params.presence * (e->out_count > 0);
        l += e->bias;
        row[e->token] = l;
    }
}

static int argmax_d(const double *row)
{
    int best = 0;
    for (int t = 1; t < VOCAB; t++)
        if (row[t] > row[best])
            best = t;
    return best;
}

static void sample_rows_adjusted_copy_and_raw_logprobs(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    tm_sampler s;
    tm_sampler_init(&s, &be);
    enum { N = 4 };
    uint64_t rng = 0xfeed;
    for (int trial = 0; trial < 50; trial++) {
        float host[N * VOCAB], after[N * VOCAB];
        for (int i = 0; i < N * VOCAB; i++)
            host[i] = (float)((int)(next_u32(&rng) % 2001) - 1000) / 250.0f;
        float *logits = kn_malloc(&be, sizeof host);
        assert_non_null(logits);
        assert_int_equal(kn_copy_to_backend(&be, logits, host, sizeof host), TN_OK);
        /* Row 0: +100 bias on a token; row 1: nothing (trial 0: penalties
         * that are active but have no entries yet, a first token); row 2:
         * repetition and presence/frequency over a prompt and output; row
         * 3: -100 on the raw argmax. */
        tm_penalties pen[N];
        const tm_penalties *pp[N] = {&pen[0], trial ? NULL : &pen[1], &pen[2], &pen[3]};
        assert_int_equal(tm_penalties_init(&pen[1], 0.5f, 0.5f, 1, NULL, 0, 0, NULL, NULL, 0, VOCAB),
                         TN_OK);
        assert_true(pen[1].active && pen[1].n_entries == 0);
        int32_t favourite = (int32_t)(next_u32(&rng) % VOCAB);
        float plus = 100, minus = -100;
        assert_int_equal(tm_penalties_init(&pen[0], 0, 0, 1, NULL, 0, 0, &favourite, &plus, 1, VOCAB),
                         TN_OK);
        int32_t prompt[12];
        for (int i = 0; i < 12; i++)
            prompt[i] = (int32_t)(next_u32(&rng) % VOCAB);
        assert_int_equal(tm_penalties_init(&pen[2], 0.7f, 0.4f, 1.8f, prompt, 12, 4, NULL, NULL, 0,
                                           VOCAB), TN_OK);
        for (int i = 0; i < 5; i++)
            assert_int_equal(tm_penalties_add_output(&pen[2], (int32_t)(next_u32(&rng) % VOCAB)), TN_OK);
        double raw3[VOCAB];
        for (int t = 0; t < VOCAB; t++)
            raw3[t] = host[3 * VOCAB + t];
        int32_t banned = (int32_t)argmax_d(raw3);
        assert_int_equal(tm_penalties_init(&pen[3], 0, 0, 1, NULL, 0, 0, &banned, &minus, 1, VOCAB),
                         TN_OK);
        kn_sampling params[N];
        uint64_t rngs[N];
        for (int i = 0; i < N; i++) {
            params[i] = (kn_sampling){ .temperature = 0, .top_p = 1, .top_k = 0 };
            rngs[i] = kn_rng_seed((uint64_t)i);
        }
        const int top[N] = {3, -1, 0, 5};
        int32_t tokens[N];
        tm_token_logprobs lp[N];
        memset(lp, 0, sizeof lp);
        assert_int_equal(tm_sample_rows(&s, logits, N, VOCAB, params, rngs, pp, NULL, top, tokens, lp),
                         TN_OK);
        /* The logits are untouched. */
        assert_int_equal(kn_copy_to_host(&be, after, logits, sizeof after), TN_OK);
        assert_memory_equal(after, host, sizeof host);
        /* Tokens: argmax of the dense adjusted rows. */
        for (int r = 0; r < N; r++) {
            double row[VOCAB];
            for (int t = 0; t < VOCAB; t++)
                row[t] = host[r * VOCAB + t];
            if (pp[r])
                dense_adjust(row, pp[r]);
            assert_int_equal(tokens[r], argmax_d(row));
        }
        assert_int_equal(tokens[0], favourite);
        assert_true(tokens[3] != banned);
        /* Logprobs: float64 log-softmax of the raw rows; top-k raw order. */
        for (int r = 0; r < N; r++) {
            if (top[r] < 0)
                continue;
            const float *row = &host[r * VOCAB];
            double m = row[0], z = 0;
            for (int t = 1; t < VOCAB; t++)
                m = row[t] > m ? row[t] : m;
            for (int t = 0; t < VOCAB; t++)
                z += exp((double)row[t] - m);
            double lz = log(z);
            assert_true(fabs(lp[r].logprob - ((double)row[tokens[r]] - m - lz)) < 1e-5);
            assert_int_equal(lp[r].n_top, top[r]);
            for (int k = 0; k < top[r]; k++) {
                int32_t id = lp[r].top_ids[k];
                assert_true(fabs(lp[r].top_logprobs[k] - ((double)row[id] - m - lz)) < 1e-5);
                if (k > 0) {
                    int32_t prev = lp[r].top_ids[k - 1];
                    assert_true(row[prev] > row[id] || (row[prev] == row[id] && prev < id));
                }
            }
        }
        /* Row 3: the banned token is still the raw distribution's top. */
        assert_int_equal(lp[3].top_ids[0], banned);
        for (int i = 0; i < N; i++)
            tm_penalties_free(&pen[i]);
        kn_free(&be, logits);
    }
    tm_sampler_free(&s);
    kn_backend_free(&be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(penalties_match_a_dense_recount),
        cmocka_unit_test(penalties_inactive_or_bias_only),
        cmocka_unit_test(penalties_refuse_bad_values),
        cmocka_unit_test(sample_rows_adjusted_copy_and_raw_logprobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
