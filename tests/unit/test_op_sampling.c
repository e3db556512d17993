/* Sampling: greedy is the argmax (lowest id on ties), seeded draws repeat,
 * top_k = 1 and a tiny top_p reduce to greedy, and the empirical
 * distribution over many seeded draws matches the float64 target
 * (softmax(l / T) restricted by top-k/top-p and renormalised). The
 * statistical bound per token is 5 standard errors of a binomial proportion,
 * sqrt(p (1 - p) / N), plus 1e-4; the seeds are fixed, so the outcome is
 * deterministic, and a correct sampler would fail it with probability
 * under 1e-5 per token for a random seed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "kernels/backend.h"
#include "kernels/sampling.h"
#include "common/status.h"
#include "testutil.h"

static void rng_is_seeded_and_uniform(void **state)
{
    (void)state;
    uint64_t a = kn_rng_seed(42), b = kn_rng_seed(42), c = kn_rng_seed(43);
    assert_true(a == b && a != c);
    double sum = 0.0, sum_sq = 0.0;
    enum { N = 200000 };
    int buckets[10] = { 0 };
    for (int i = 0; i < N; i++) {
        double u = kn_rng_uniform(&a);
        assert_true(u == kn_rng_uniform(&b));
        assert_true(u >= 0.0 && u < 1.0);
        sum += u;
        sum_sq += u * u;
        buckets[(int)(u * 10)]++;
    }
    /* mean 1/2 (sd of the mean sqrt(1/12/N)), second moment 1/3, deciles N/10 */
    assert_true(fabs(sum / N - 0.5) < 5 * sqrt(1.0 / 12 / N));
    assert_true(fabs(sum_sq / N - 1.0 / 3) < 0.005);
    for (int i = 0; i < 10; i++)
        assert_true(fabs(buckets[i] - N / 10.0) < 5 * sqrt(N * 0.1 * 0.9));
}

static void greedy_picks_argmax(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    tu_rng rng;
    tu_rng_init(&rng, 81);
    enum { ROWS = 6, VOCAB = 1000 };
    float *logits = tu_xcalloc((size_t)ROWS * VOCAB, sizeof *logits);
    tu_rand_fill(&rng, logits, (size_t)ROWS * VOCAB, -5.0f, 5.0f);
    logits[0 * VOCAB + 17] = 9.0f;
    logits[1 * VOCAB + 999] = 9.0f;
    logits[2 * VOCAB + 0] = 9.0f;
    logits[3 * VOCAB + 500] = 9.0f;           /* a tie: the lower id wins */
    logits[3 * VOCAB + 300] = 9.0f;
    logits[4 * VOCAB + 42] = 9.0f;            /* -inf elsewhere is allowed */
    logits[4 * VOCAB + 7] = -INFINITY;
    for (int i = 0; i < VOCAB; i++)           /* all equal: id 0 */
        logits[5 * VOCAB + i] = 1.5f;
    const int32_t want[ROWS] = { 17, 999, 0, 300, 42, 0 };
    kn_sampling sp[ROWS];
    uint64_t st[ROWS], st0[ROWS];
    for (int r = 0; r < ROWS; r++) {
        sp[r] = (kn_sampling){ .temperature = 0.0f, .top_p = 1.0f, .top_k = 0 };
        st[r] = st0[r] = kn_rng_seed((uint64_t)r);
    }
    int32_t tok[ROWS];
    assert_int_equal(kn_sample(&be, tok, logits, ROWS, VOCAB, sp, st), TN_OK);
    for (int r = 0; r < ROWS; r++) {
        assert_int_equal(tok[r], want[r]);
        assert_true(st[r] == st0[r]); /* greedy draws nothing */
    }
    free(logits);
    kn_backend_free(&be);
}

/* Draws `steps` tokens for each row, re-seeding from `seed + row`. */
static void draw_sequence(const kn_backend *be, const float *logits, int rows, int vocab,
                          const kn_sampling *sp, uint64_t seed, int steps, int32_t *out)
{
    uint64_t *st = tu_xcalloc((size_t)rows, sizeof *st);
    for (int r = 0; r < rows; r++)
        st[r] = kn_rng_seed(seed + (uint64_t)r);
    for (int i = 0; i < steps; i++)
        assert_int_equal(kn_sample(be, out + (size_t)i * rows, logits, rows, vocab, sp, st), TN_OK);
    free(st);
}

static void same_seed_same_tokens(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    tu_rng rng;
    tu_rng_init(&rng, 82);
    enum { ROWS = 4, VOCAB = 300, STEPS = 40 };
    float *logits = tu_xcalloc((size_t)ROWS * VOCAB, sizeof *logits);
    tu_rand_fill(&rng, logits, (size_t)ROWS * VOCAB, -2.0f, 2.0f);
    kn_sampling sp[ROWS] = { { 1.0f, 1.0f, 0 }, { 0.7f, 0.9f, 0 }, { 1.3f, 1.0f, 50 },
                             { 0.8f, 0.95f, 20 } };
    int32_t a[STEPS * ROWS], b[STEPS * ROWS], c[STEPS * ROWS];
    draw_sequence(&be, logits, ROWS, VOCAB, sp, 1234, STEPS, a);
    draw_sequence(&be, logits, ROWS, VOCAB, sp, 1234, STEPS, b);
    draw_sequence(&be, logits, ROWS, VOCAB, sp, 99, STEPS, c);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
    /* A row's draws do not depend on which other rows share its batch. */
    int32_t solo[STEPS];
    draw_sequence(&be, logits + 2 * VOCAB, 1, VOCAB, &sp[2], 1234 + 2, STEPS, solo);
    for (int i = 0; i < STEPS; i++)
        assert_int_equal(solo[i], a[i * ROWS + 2]);
    free(logits);
    kn_backend_free(&be);
}

static void top_k_one_and_tiny_top_p_are_greedy(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    tu_rng rng;
    tu_rng_init(&rng, 83);
    enum { ROWS = 16, VOCAB = 777 };
    float *logits = tu_xcalloc((size_t)ROWS * VOCAB, sizeof *logits);
    tu_rand_fill(&rng, logits, (size_t)ROWS * VOCAB, -1.0f, 1.0f);
    logits[3 * VOCAB + 10] = logits[3 * VOCAB + 20] = 5.0f; /* tie: id 10 */
    kn_sampling greedy[ROWS], topk1[ROWS], topp[ROWS];
    uint64_t st[ROWS];
    for (int r = 0; r < ROWS; r++) {
        greedy[r] = (kn_sampling){ 0.0f, 1.0f, 0 };
        topk1[r] = (kn_sampling){ 1.5f, 1.0f, 1 };
        topp[r] = (kn_sampling){ 1.0f, 1e-6f, 0 };
        st[r] = kn_rng_seed((uint64_t)r * 7);
    }
    int32_t want[ROWS], got[ROWS];
    assert_int_equal(kn_sample(&be, want, logits, ROWS, VOCAB, greedy, st), TN_OK);
    assert_int_equal(want[3], 10);
    for (int rep = 0; rep < 20; rep++) {
        assert_int_equal(kn_sample(&be, got, logits, ROWS, VOCAB, topk1, st), TN_OK);
        assert_memory_equal(got, want, sizeof want);
        assert_int_equal(kn_sample(&be, got, logits, ROWS, VOCAB, topp, st), TN_OK);
        assert_memory_equal(got, want, sizeof want);
    }
    free(logits);
    kn_backend_free(&be);
}

/* float64 target distribution of one row under sp. */
static void target_distribution(const float *l, int vocab, const kn_sampling *sp, double *p)
{
    int *order = tu_xcalloc((size_t)vocab, sizeof *order);
    double mx = -INFINITY, z = 0.0;
    for (int i = 0; i < vocab; i++)
        if (l[i] > mx)
            mx = l[i];
    for (int i = 0; i < vocab; i++) {
        p[i] = exp((l[i] - mx) / sp->temperature);
        order[i] = i;
    }
    /* insertion sort by probability, ties to the lower id (vocab is small) */
    for (int i = 1; i < vocab; i++)
        for (int j = i; j > 0 && (p[order[j]] > p[order[j - 1]] ||
                                  (p[order[j]] == p[order[j - 1]] && order[j] < order[j - 1]));
             j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int keep = sp->top_k > 0 && sp->top_k < vocab ? sp->top_k : vocab;
    for (int i = 0; i < keep; i++)
        z += p[order[i]];
    if (sp->top_p < 1.0f) {
        double run = 0.0;
        for (int i = 0; i < keep; i++) {
            run += p[order[i]];
            if (run >= sp->top_p * z) {
                keep = i + 1;
                break;
            }
        }
    }
    z = 0.0;
    for (int i = 0; i < keep; i++)
        z += p[order[i]];
    double *q = tu_xcalloc((size_t)vocab, sizeof *q);
    for (int i = 0; i < keep; i++)
        q[order[i]] = p[order[i]] / z;
    memcpy(p, q, (size_t)vocab * sizeof *p);
    free(q);
    free(order);
}

static void empirical_distribution_matches(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    enum { VOCAB = 12, ROWS = 500, CALLS = 200 }; /* N = 100000 draws per setting */
    const float base[VOCAB] = { 1.0f, 2.5f, -0.5f, 2.0f, 0.0f, 1.7f, -INFINITY, 0.3f,
                                2.2f, -1.0f, 1.9f, 0.9f };
    const kn_sampling settings[] = { { 1.0f, 1.0f, 0 }, { 0.6f, 1.0f, 0 }, { 1.4f, 1.0f, 4 },
                                     { 1.0f, 0.7f, 0 }, { 0.9f, 0.8f, 5 } };
    float *logits = tu_xcalloc((size_t)ROWS * VOCAB, sizeof *logits);
    for (int r = 0; r < ROWS; r++)
        memcpy(logits + (size_t)r * VOCAB, base, sizeof base);
    kn_sampling sp[ROWS];
    uint64_t st[ROWS];
    int32_t tok[ROWS];
    for (size_t s = 0; s < sizeof settings / sizeof settings[0]; s++) {
        long counts[VOCAB] = { 0 };
        for (int r = 0; r < ROWS; r++) {
            sp[r] = settings[s];
            st[r] = kn_rng_seed(1000 * s + (uint64_t)r);
        }
        for (int c = 0; c < CALLS; c++) {
            assert_int_equal(kn_sample(&be, tok, logits, ROWS, VOCAB, sp, st), TN_OK);
            for (int r = 0; r < ROWS; r++) {
                assert_true(tok[r] >= 0 && tok[r] < VOCAB);
                counts[tok[r]]++;
            }
        }
        double p[VOCAB];
        target_distribution(base, VOCAB, &settings[s], p);
        const double n = (double)ROWS * CALLS;
        for (int i = 0; i < VOCAB; i++) {
            double f = counts[i] / n, bound = 5.0 * sqrt(p[i] * (1.0 - p[i]) / n) + 1e-4;
            if (p[i] == 0.0 && counts[i] != 0)
                fail_msg("setting %zu: token %d drawn %ld times but excluded", s, i, counts[i]);
            if (fabs(f - p[i]) > bound)
                fail_msg("setting %zu: token %d frequency %g, expected %g (+-%g)", s, i, f, p[i],
                         bound);
        }
    }
    free(logits);
    kn_backend_free(&be);
}

static void sampling_rejects_bad_arguments(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    float logits[2 * 4] = { 0.1f, 0.2f, 0.3f, 0.4f, 1, 2, 3, 4 };
    int32_t tok[2];
    uint64_t st[2] = { 5, 6 };
    const kn_sampling good = { 1.0f, 1.0f, 0 };
    const kn_sampling bad[] = { { NAN, 1.0f, 0 }, { -1.0f, 1.0f, 0 }, { INFINITY, 1.0f, 0 },
                                { 1.0f, 0.0f, 0 }, { 1.0f, 1.5f, 0 }, { 1.0f, NAN, 0 },
                                { 0.0f, -0.5f, 0 } };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kn_sampling sp[2] = { good, bad[i] };
        assert_int_equal(kn_sample(&be, tok, logits, 2, 4, sp, st), TN_ERR_ARG);
        assert_true(st[0] == 5 && st[1] == 6); /* no generator advanced */
    }
    kn_sampling sp[2] = { good, good };
    logits[6] = NAN;
    assert_int_equal(kn_sample(&be, tok, logits, 2, 4, sp, st), TN_ERR_ARG);
    logits[6] = INFINITY;
    assert_int_equal(kn_sample(&be, tok, logits, 2, 4, sp, st), TN_ERR_ARG);
    for (int i = 4; i < 8; i++)
        logits[i] = -INFINITY; /* a row with no finite logit */
    assert_int_equal(kn_sample(&be, tok, logits, 2, 4, sp, st), TN_ERR_ARG);
    assert_true(st[0] == 5 && st[1] == 6);
    logits[5] = 0.0f;
    assert_int_equal(kn_sample(&be, tok, logits, 2, 4, sp, st), TN_OK);
    assert_int_equal(tok[1], 1); /* the only finite logit */
    assert_int_equal(kn_sample(&be, NULL, logits, 2, 4, sp, st), TN_ERR_ARG);
    assert_int_equal(kn_sample(&be, tok, NULL, 2, 4, sp, st), TN_ERR_ARG);
    assert_int_equal(kn_sample(&be, tok, logits, 2, 4, NULL, st), TN_ERR_ARG);
    assert_int_equal(kn_sample(&be, tok, logits, 2, 4, sp, NULL), TN_ERR_ARG);
    assert_int_equal(kn_sample(&be, tok, logits, 2, 0, sp, st), TN_ERR_ARG);
    assert_int_equal(kn_sample(&be, tok, logits, -1, 4, sp, st), TN_ERR_ARG);
    kn_backend_free(&be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rng_is_seeded_and_uniform),
        cmocka_unit_test(greedy_picks_argmax),
        cmocka_unit_test(same_seed_same_tokens),
        cmocka_unit_test(top_k_one_and_tiny_top_p_are_greedy),
        cmocka_unit_test(empirical_distribution_matches),
        cmocka_unit_test(sampling_rejects_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
