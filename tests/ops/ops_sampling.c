/* Sampling on every backend: greedy is the argmax (lowest id on ties),
 * seeded draws repeat and do not depend on the batch, top_k = 1 and a tiny
 * top_p reduce to greedy, and the empirical distribution over many seeded
 * draws matches the float64 target (softmax(l / T) restricted by
 * top-k/top-p and renormalised). The statistical bound per token is 5
 * standard errors of a binomial proportion, sqrt(p (1 - p) / N), plus 1e-4;
 * the seeds are fixed, so the outcome is deterministic, and a correct
 * sampler would fail it with probability under 1e-5 per token for a random
 * seed. On CUDA also the CPU's tokens and generator states, round after
 * round, and a NaN logit rejected with no generator moved. The generator
 * itself and the argument checks run on the CPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "common/status.h"
#include "kernels/sampling.h"
#include "tests/ops/op_harness.h"

/* A backend copy of n logits (the case frees it). */
static const float *dl(op_env *e, const float *logits, size_t n)
{
    return op_up(e, logits, n * sizeof(float));
}

static void rng_is_seeded_and_uniform(op_env *e, const void *param)
{
    (void)param;
    uint64_t a = kn_rng_seed(42), b = kn_rng_seed(42), c = kn_rng_seed(43);
    OP_TRUE(e, a == b && a != c);
    double sum = 0.0, sum_sq = 0.0;
    enum { N = 200000 };
    int buckets[10] = { 0 };
    for (int i = 0; i < N; i++) {
        double u = kn_rng_uniform(&a);
        OP_TRUE(e, u == kn_rng_uniform(&b));
        OP_TRUE(e, u >= 0.0 && u < 1.0);
        sum += u;
        sum_sq += u * u;
        buckets[(int)(u * 10)]++;
    }
    /* mean 1/2 (sd of the mean sqrt(1/12/N)), second moment 1/3, deciles N/10 */
    OP_TRUE(e, fabs(sum / N - 0.5) < 5 * sqrt(1.0 / 12 / N));
    OP_TRUE(e, fabs(sum_sq / N - 1.0 / 3) < 0.005);
    for (int i = 0; i < 10; i++)
        OP_TRUE(e, fabs(buckets[i] - N / 10.0) < 5 * sqrt(N * 0.1 * 0.9));
}

static void greedy_picks_argmax(op_env *e, const void *param)
{
    (void)param;
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
    OP_INT_EQ(e, kn_sample(e->be, tok, dl(e, logits, (size_t)(ROWS) * (VOCAB)), ROWS, VOCAB, sp, st), TN_OK);
    for (int r = 0; r < ROWS; r++) {
        OP_INT_EQ(e, tok[r], want[r]);
        OP_TRUE(e, st[r] == st0[r]); /* greedy draws nothing */
    }
    free(logits);
}

/* Draws `steps` tokens for each row, re-seeding from `seed + row`. */
static void draw_sequence(op_env *e, const float *logits, int rows, int vocab,
                          const kn_sampling *sp, uint64_t seed, int steps, int32_t *out)
{
    const float *d_logits = op_up(e, logits, (size_t)rows * vocab * sizeof(float));
    uint64_t *st = tu_xcalloc((size_t)rows, sizeof *st);
    for (int r = 0; r < rows; r++)
        st[r] = kn_rng_seed(seed + (uint64_t)r);
    for (int i = 0; i < steps; i++)
        OP_INT_EQ(e, kn_sample(e->be, out + (size_t)i * rows, d_logits, rows, vocab, sp, st), TN_OK);
    free(st);
}

static void same_seed_same_tokens(op_env *e, const void *param)
{
    (void)param;
    tu_rng rng;
    tu_rng_init(&rng, 82);
    enum { ROWS = 4, VOCAB = 300, STEPS = 40 };
    float *logits = tu_xcalloc((size_t)ROWS * VOCAB, sizeof *logits);
    tu_rand_fill(&rng, logits, (size_t)ROWS * VOCAB, -2.0f, 2.0f);
    kn_sampling sp[ROWS] = { { 1.0f, 1.0f, 0 }, { 0.7f, 0.9f, 0 }, { 1.3f, 1.0f, 50 },
                             { 0.8f, 0.95f, 20 } };
    int32_t a[STEPS * ROWS], b[STEPS * ROWS], c[STEPS * ROWS];
    draw_sequence(e, logits, ROWS, VOCAB, sp, 1234, STEPS, a);
    draw_sequence(e, logits, ROWS, VOCAB, sp, 1234, STEPS, b);
    draw_sequence(e, logits, ROWS, VOCAB, sp, 99, STEPS, c);
    OP_MEM_EQ(e, a, b, sizeof a);
    op_check(e, memcmp(a, c, sizeof a) != 0, "draws with another seed are the same");
    /* A row's draws do not depend on which other rows share its batch. */
    int32_t solo[STEPS];
    draw_sequence(e, logits + 2 * VOCAB, 1, VOCAB, &sp[2], 1234 + 2, STEPS, solo);
    for (int i = 0; i < STEPS; i++)
        OP_INT_EQ(e, solo[i], a[i * ROWS + 2]);
    free(logits);
}

static void top_k_one_and_tiny_top_p_are_greedy(op_env *e, const void *param)
{
    (void)param;
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
    OP_INT_EQ(e, kn_sample(e->be, want, dl(e, logits, (size_t)(ROWS) * (VOCAB)), ROWS, VOCAB, greedy, st), TN_OK);
    OP_INT_EQ(e, want[3], 10);
    for (int rep = 0; rep < 20; rep++) {
        OP_INT_EQ(e, kn_sample(e->be, got, dl(e, logits, (size_t)(ROWS) * (VOCAB)), ROWS, VOCAB, topk1, st), TN_OK);
        OP_MEM_EQ(e, got, want, sizeof want);
        OP_INT_EQ(e, kn_sample(e->be, got, dl(e, logits, (size_t)(ROWS) * (VOCAB)), ROWS, VOCAB, topp, st), TN_OK);
        OP_MEM_EQ(e, got, want, sizeof want);
    }
    free(logits);
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

static void empirical_distribution_matches(op_env *e, const void *param)
{
    (void)param;
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
            OP_INT_EQ(e, kn_sample(e->be, tok, dl(e, logits, (size_t)(ROWS) * (VOCAB)), ROWS, VOCAB, sp, st), TN_OK);
            for (int r = 0; r < ROWS; r++) {
                OP_TRUE(e, tok[r] >= 0 && tok[r] < VOCAB);
                counts[tok[r]]++;
            }
        }
        double p[VOCAB];
        target_distribution(base, VOCAB, &settings[s], p);
        const double n = (double)ROWS * CALLS;
        for (int i = 0; i < VOCAB; i++) {
            double f = counts[i] / n, bound = 5.0 * sqrt(p[i] * (1.0 - p[i]) / n) + 1e-4;
            if (p[i] == 0.0 && counts[i] != 0)
                op_fail(e, "setting %zu: token %d drawn %ld times but excluded", s, i, counts[i]);
            if (fabs(f - p[i]) > bound)
                op_fail(e, "setting %zu: token %d frequency %g, expected %g (+-%g)", s, i, f, p[i],
                         bound);
        }
    }
    free(logits);
}

static void sampling_rejects_bad_arguments(op_env *e, const void *param)
{
    (void)param;
    float logits[2 * 4] = { 0.1f, 0.2f, 0.3f, 0.4f, 1, 2, 3, 4 };
    int32_t tok[2];
    uint64_t st[2] = { 5, 6 };
    const kn_sampling good = { 1.0f, 1.0f, 0 };
    const kn_sampling bad[] = { { NAN, 1.0f, 0 }, { -1.0f, 1.0f, 0 }, { INFINITY, 1.0f, 0 },
                                { 1.0f, 0.0f, 0 }, { 1.0f, 1.5f, 0 }, { 1.0f, NAN, 0 },
                                { 0.0f, -0.5f, 0 } };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kn_sampling sp[2] = { good, bad[i] };
        OP_INT_EQ(e, kn_sample(e->be, tok, dl(e, logits, (size_t)(2) * (4)), 2, 4, sp, st), TN_ERR_ARG);
        OP_TRUE(e, st[0] == 5 && st[1] == 6); /* no generator advanced */
    }
    kn_sampling sp[2] = { good, good };
    logits[6] = NAN;
    OP_INT_EQ(e, kn_sample(e->be, tok, dl(e, logits, (size_t)(2) * (4)), 2, 4, sp, st), TN_ERR_ARG);
    logits[6] = INFINITY;
    OP_INT_EQ(e, kn_sample(e->be, tok, dl(e, logits, (size_t)(2) * (4)), 2, 4, sp, st), TN_ERR_ARG);
    for (int i = 4; i < 8; i++)
        logits[i] = -INFINITY; /* a row with no finite logit */
    OP_INT_EQ(e, kn_sample(e->be, tok, dl(e, logits, (size_t)(2) * (4)), 2, 4, sp, st), TN_ERR_ARG);
    OP_TRUE(e, st[0] == 5 && st[1] == 6);
    logits[5] = 0.0f;
    OP_INT_EQ(e, kn_sample(e->be, tok, dl(e, logits, (size_t)(2) * (4)), 2, 4, sp, st), TN_OK);
    OP_INT_EQ(e, tok[1], 1); /* the only finite logit */
    OP_INT_EQ(e, kn_sample(e->be, NULL, dl(e, logits, (size_t)(2) * (4)), 2, 4, sp, st), TN_ERR_ARG);
    OP_INT_EQ(e, kn_sample(e->be, tok, NULL, 2, 4, sp, st), TN_ERR_ARG);
    OP_INT_EQ(e, kn_sample(e->be, tok, dl(e, logits, (size_t)(2) * (4)), 2, 4, NULL, st), TN_ERR_ARG);
    OP_INT_EQ(e, kn_sample(e->be, tok, dl(e, logits, (size_t)(2) * (4)), 2, 4, sp, NULL), TN_ERR_ARG);
    OP_INT_EQ(e, kn_sample(e->be, tok, dl(e, logits, 8), 2, 0, sp, st), TN_ERR_ARG);
    OP_INT_EQ(e, kn_sample(e->be, tok, dl(e, logits, 8), -1, 4, sp, st), TN_ERR_ARG);
}

typedef struct vs_cpu_param {
    int n_rows, vocab, rounds;
} vs_cpu_param;

/* CUDA: the same tokens and generator states as the CPU. */
static void sample_vs_cpu(op_env *e, const void *param)
{
    const vs_cpu_param *p = param;
    static const kn_sampling settings[] = {
        { 0.0f, 1.0f, 0 },   { 0.7f, 1.0f, 0 },  { 1.0f, 1.0f, 50 }, { 0.8f, 0.9f, 0 },
        { 1.0f, 0.95f, 40 }, { 1.5f, 0.5f, 0 },  { 0.6f, 1.0f, 1 },  { 2.0f, 0.999f, 0 },
    };
    const int n_settings = (int)(sizeof settings / sizeof settings[0]), n_rows = p->n_rows, vocab = p->vocab;
    kn_sampling *params = op_host(e, (size_t)n_rows * sizeof *params);
    uint64_t *st_cpu = op_host(e, (size_t)n_rows * 8), *st_gpu = op_host(e, (size_t)n_rows * 8);
    int32_t *tok_cpu = op_host(e, (size_t)n_rows * 4), *tok_gpu = op_host(e, (size_t)n_rows * 4);
    size_t nl = (size_t)n_rows * vocab;
    float *logits = op_host(e, nl * sizeof(float)), *d_l = op_dev(e, nl * sizeof(float));
    for (int r = 0; r < n_rows; r++) {
        params[r] = settings[r % n_settings];
        st_cpu[r] = st_gpu[r] = kn_rng_seed(tu_rand_u64(&e->rng));
    }
    int mismatches = 0, state_mismatch = 0, failures = 0;
    for (int round = 0; round < p->rounds; round++) {
        for (size_t i = 0; i < nl; i++)
            logits[i] = (float)(3.0 * op_normal(e));
        /* exact ties with the row max, and a -inf logit */
        for (int r = 0; r < n_rows; r++) {
            float *lr = logits + (size_t)r * vocab;
            int a = tu_rand_int(&e->rng, vocab), b = tu_rand_int(&e->rng, vocab);
            lr[a] = lr[b] = 12.0f;
            lr[tu_rand_int(&e->rng, vocab)] = -INFINITY;
        }
        op_put(e, d_l, logits, nl * sizeof(float));
        for (int r = 0; r < n_rows; r++)
            tok_gpu[r] = -1;
        int rg = kn_sample(e->be, tok_gpu, d_l, n_rows, vocab, params, st_gpu);
        int rcpu = kn_sample(e->cpu, tok_cpu, logits, n_rows, vocab, params, st_cpu);
        if (rg != TN_OK || rcpu != TN_OK) {
            failures++;
            continue;
        }
        for (int r = 0; r < n_rows; r++) {
            mismatches += tok_gpu[r] != tok_cpu[r];
            state_mismatch += st_gpu[r] != st_cpu[r];
        }
    }
    op_check(e, failures == 0 && mismatches == 0 && state_mismatch == 0,
             "tokens vs CPU: %d mismatches, %d generator mismatches, %d failed calls", mismatches,
             state_mismatch, failures);
    /* a NaN logit: TN_ERR_ARG and no generator moves */
    logits[(size_t)(n_rows - 1) * vocab + 5] = NAN;
    op_put(e, d_l, logits, nl * sizeof(float));
    uint64_t before = st_gpu[1];
    int rg = kn_sample(e->be, tok_gpu, d_l, n_rows, vocab, params, st_gpu);
    op_check(e, rg == TN_ERR_ARG && st_gpu[1] == before, "NaN logit: %d, generator moved %d", rg,
             st_gpu[1] != before);
}

void ops_register_sampling(void)
{
    vs_cpu_param none = { 0, 0, 0 };
    OP_CASE("sampling", OP_CPU, rng_is_seeded_and_uniform, none, "generator seeded and uniform");
    OP_CASE("sampling", OP_ALL, greedy_picks_argmax, none, "greedy picks the argmax");
    OP_CASE("sampling", OP_ALL, same_seed_same_tokens, none, "same seed same tokens");
    OP_CASE("sampling", OP_ALL, top_k_one_and_tiny_top_p_are_greedy, none, "top_k 1 and tiny top_p are greedy");
    OP_CASE("sampling", OP_ALL, empirical_distribution_matches, none, "empirical distribution matches float64");
    OP_CASE("sampling", OP_CPU, sampling_rejects_bad_arguments, none, "rejects bad arguments");
    static const vs_cpu_param vs[] = { { 16, 1000, 20 }, { 8, 201088, 3 } };
    for (size_t i = 0; i < 2; i++)
        OP_CASE("sampling", OP_CUDA, sample_vs_cpu, vs[i], "rows=%d vocab=%d x %d rounds vs CPU", vs[i].n_rows,
                vs[i].vocab, vs[i].rounds);
}
