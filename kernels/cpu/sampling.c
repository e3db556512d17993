/* Token sampling on the CPU.
 *
 * Per row, with l the logits, T the temperature and p_i = exp((l_i - max l)/T):
 *  1. the kept set K is the top_k tokens in the order "higher logit first,
 *     then lower id" (all tokens when top_k <= 0 or top_k >= vocab);
 *  2. when top_p < 1, K is sorted in that order and cut to its smallest
 *     prefix whose mass reaches top_p of K's mass (top-k first, then top-p
 *     on what is left, as HF's warpers do);
 *  3. one uniform u from the row's generator picks the first token of K
 *     (sorted order after steps 1-2, else id order) whose running mass
 *     exceeds u * mass(K).
 * Greedy rows (T == 0) take the argmax and leave their generator untouched;
 * every other row advances it exactly once. Ordering by logits rather than
 * by p keeps top_k = 1 identical to greedy even when p rounds to a tie. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include "kernels/kn_check.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/sampling.h"
#include "common/status.h"

typedef struct candidate {
    double p;     /* unnormalised probability */
    float logit;
    int32_t id;
} candidate;

/* 1 when a ranks before b. */
static int ranks_before(const candidate *a, const candidate *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int candidate_cmp(const void *pa, const void *pb)
{
    const candidate *a = pa, *b = pb;
    return ranks_before(a, b) ? -1 : ranks_before(b, a) ? 1 : 0;
}

/* Min-heap on rank: heap[0] is the worst of the kept candidates. */
static void heap_sift_down(candidate *heap, int n, int i)
{
    for (;;) {
        int worst = i, l = 2 * i + 1, r = l + 1;
        if (l < n && ranks_before(&heap[worst], &heap[l]))
            worst = l;
        if (r < n && ranks_before(&heap[worst], &heap[r]))
            worst = r;
        if (worst == i)
            return;
        candidate tmp = heap[i];
        heap[i] = heap[worst];
        heap[worst] = tmp;
        i = worst;
    }
}

static void heap_sift_up(candidate *heap, int i)
{
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!ranks_before(&heap[parent], &heap[i]))
            return;
        candidate tmp = heap[i];
        heap[i] = heap[parent];
        heap[parent] = tmp;
        i = parent;
    }
}

/* Checks one row's parameters and logits; on success *argmax is the greedy
 * token. Rejects NaN or +inf logits and rows with no finite logit. */
static int check_row(int row, const float *l, int vocab, const kn_sampling *sp, int *argmax)
{
    static const char op[] = "kn_sample";
    if (!(sp->temperature >= 0.0f) || isinf(sp->temperature))
        return kn_arg_error(op, "row %d: temperature %g must be finite and >= 0", row,
                            (double)sp->temperature);
    if (!(sp->top_p > 0.0f && sp->top_p <= 1.0f))
        return kn_arg_error(op, "row %d: top_p %g must be in (0, 1]", row, (double)sp->top_p);
    int best = -1;
    for (int i = 0; i < vocab; i++) {
        if (isnan(l[i]) || l[i] == INFINITY)
            return kn_arg_error(op, "row %d: logit %d is %g", row, i, (double)l[i]);
        if (l[i] != -INFINITY && (best < 0 || l[i] > l[best]))
            best = i;
    }
    if (best < 0)
        return kn_arg_error(op, "row %d: no finite logit", row);
    *argmax = best;
    return TN_OK;
}

/* Draws one token for a non-greedy row; cand has room for vocab entries. */
static int32_t sample_row(const float *l, int vocab, const kn_sampling *sp, int argmax,
                          uint64_t *rng, candidate *cand)
{
    double max_logit = l[argmax], inv_t = 1.0 / sp->temperature;
    int top_k = sp->top_k > 0 && sp->top_k < vocab ? sp->top_k : 0;
    int n = 0;
    double mass = 0.0;
    for (int i = 0; i < vocab; i++) {
        double p = exp(((double)l[i] - max_logit) * inv_t);
        if (p <= 0.0)
            continue; /* can never be drawn */
        candidate c = { p, l[i], i };
        if (!top_k || n < top_k) {
            cand[n] = c;
            if (top_k)
                heap_sift_up(cand, n);
            n++;
        } else if (ranks_before(&c, &cand[0])) {
            cand[0] = c;
            heap_sift_down(cand, n, 0);
        }
    }
    for (int i = 0; i < n; i++)
        mass += cand[i].p;

    if (sp->top_p < 1.0f) {
        double target = sp->top_p * mass;
        if (!top_k) {
            /* Tokens below (1 - top_p) * mass / n jointly hold less than
             * (1 - top_p) of the mass, so the prefix never reaches them:
             * drop them before sorting. They rank below every kept one. */
            double cut = (1.0 - sp->top_p) * mass / n;
            int kept = 0;
            for (int i = 0; i < n; i++)
                if (cand[i].p >= cut)
                    cand[kept++] = cand[i];
            n = kept;
        }
        qsort(cand, (size_t)n, sizeof *cand, candidate_cmp);
        double run = 0.0;
        for (int i = 0; i < n; i++) {
            run += cand[i].p;
            if (run >= target) {
                n = i + 1;
                break;
            }
        }
        mass = 0.0;
        for (int i = 0; i < n; i++)
            mass += cand[i].p;
    } else if (top_k) {
        qsort(cand, (size_t)n, sizeof *cand, candidate_cmp);
    }

    double u = kn_rng_uniform(rng) * mass, run = 0.0;
    for (int i = 0; i < n; i++) {
        run += cand[i].p;
        if (run > u)
            return cand[i].id;
    }
    return cand[n - 1].id; /* u rounded up to the full mass */
}

int kn_sample_cpu(int32_t *tokens, const float *logits, int n_rows, int vocab,
                  const kn_sampling *params, uint64_t *rng_state)
{
    /* Check every row before drawing any, so a bad batch advances no generator. */
    int any_random = 0;
    for (int r = 0; r < n_rows; r++) {
        int argmax = 0;
        int rc = check_row(r, logits + (size_t)r * vocab, vocab, &params[r], &argmax);
        if (rc != TN_OK)
            return rc;
        tokens[r] = argmax;
        any_random |= params[r].temperature > 0.0f;
    }
    if (!any_random)
        return TN_OK;

    int n_threads = omp_get_max_threads();
    if (n_threads > n_rows)
        n_threads = n_rows;
    candidate *cand = malloc((size_t)n_threads * vocab * sizeof *cand);
    if (!cand)
        return TN_ERR_NOMEM;
    #pragma omp parallel for num_threads(n_threads) schedule(dynamic) if ((size_t)n_rows * vocab > 262144)
    for (int r = 0; r < n_rows; r++) {
        if (params[r].temperature == 0.0f)
            continue;
        candidate *mine = cand + (size_t)omp_get_thread_num() * vocab;
        tokens[r] = sample_row(logits + (size_t)r * vocab, vocab, &params[r], tokens[r],
                               &rng_state[r], mine);
    }
    free(cand);
    return TN_OK;
}
