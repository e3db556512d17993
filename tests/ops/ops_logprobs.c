/* Log-probabilities and logit adjustments on every backend.
 *
 * kn_logprobs against a float64 recomputation: the chosen token's and the
 * top_n tokens' log-softmax within 2e-6 * max(1, |ref|) (a float rounding of
 * a double result), and the top_n ids exactly (the float64 reference sorts
 * by the same float logits, higher first then lower id); ties, masked
 * (-inf) tokens and top_n beyond the finite tokens; a NaN, a +inf and an
 * all -inf row refused. kn_logit_adjust_apply against a float64 transcription
 * of vLLM's rules computed from dense per-token histories (the test builds
 * the op's sparse entries from the same histories, as a caller does):
 * adjusted logits within 1e-6 of the size of their terms (|logit| + |penalties|
 * + |bias|, each float intermediate rounds once), every other logit bit-identical, -inf
 * left -inf; bad entries refused with the logits untouched. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "common/status.h"
#include "kernels/logit_adjust.h"
#include "kernels/logprobs.h"
#include "tests/ops/op_harness.h"

typedef struct lp_param {
    int n_rows, vocab, top_n;
} lp_param;

/* Index order for the reference: higher logit first, then lower id. */
static const float *g_sort_logits;
static int rank_cmp(const void *pa, const void *pb)
{
    int a = *(const int *)pa, b = *(const int *)pb;
    float la = g_sort_logits[a], lb = g_sort_logits[b];
    if (la != lb)
        return la > lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

static double lp_tol(double ref)
{
    return 2e-6 * (fabs(ref) > 1.0 ? fabs(ref) : 1.0);
}

/* Checks one row's outputs against the float64 reference. */
static void check_row(op_env *e, const float *l, int vocab, int token, float got_tok, int top_n,
                      const int32_t *ids, const float *lps, int *order)
{
    double mx = -INFINITY;
    for (int i = 0; i < vocab; i++)
        mx = l[i] > mx ? l[i] : mx;
    double sum = 0.0;
    for (int i = 0; i < vocab; i++)
        sum += exp((double)l[i] - mx);
    double log_z = mx + log(sum);
    if (token >= 0) {
        double ref = (double)l[token] - log_z;
        op_check(e, (isinf(ref) && got_tok == (float)ref) || fabs(got_tok - ref) <= lp_tol(ref),
                 "token %d logprob %.9g, want %.9g", token, (double)got_tok, ref);
    } else {
        op_check(e, isnan(got_tok), "token -1 logprob %g, want NaN", (double)got_tok);
    }
    for (int i = 0; i < vocab; i++)
        order[i] = i;
    g_sort_logits = l;
    qsort(order, (size_t)vocab, sizeof *order, rank_cmp);
    for (int j = 0; j < top_n; j++) {
        double ref = (double)l[order[j]] - log_z;
        op_check(e, ids[j] == order[j], "top %d: id %d, want %d", j, (int)ids[j], order[j]);
        op_check(e, (isinf(ref) && lps[j] == (float)ref) || fabs(lps[j] - ref) <= lp_tol(ref),
                 "top %d logprob %.9g, want %.9g", j, (double)lps[j], ref);
    }
}

static void logprobs_match_float64(op_env *e, const void *param)
{
    const lp_param *p = param;
    const int R = p->n_rows, V = p->vocab, N = p->top_n;
    float *l = op_rand(e, (size_t)R * V, -12.0f, 12.0f);
    int32_t *tok = op_host(e, (size_t)R * sizeof *tok);
    for (int r = 0; r < R; r++)
        tok[r] = r == 1 ? -1 : tu_rand_int(&e->rng, V);
    if (R > 2) { /* row 2: masked tokens and ties */
        float *row = l + 2 * (size_t)V;
        for (int i = 0; i < V; i += 3)
            row[i] = -INFINITY;
        for (int i = 1; i < V; i += 7)
            row[i] = 5.25f;
        tok[2] = 0; /* a masked token: logprob -inf */
    }
    if (R > 3) { /* row 3: only 3 finite tokens, fewer than top_n */
        float *row = l + 3 * (size_t)V;
        for (int i = 0; i < V; i++)
            row[i] = -INFINITY;
        row[V - 1] = 1.0f;
        row[V / 2] = 1.0f;
        row[7] = -3.0f;
        tok[3] = V / 2;
    }
    float *tok_lp = op_host(e, (size_t)R * sizeof *tok_lp);
    int32_t *ids = op_host(e, (size_t)R * (N ? N : 1) * sizeof *ids);
    float *lps = op_host(e, (size_t)R * (N ? N : 1) * sizeof *lps);
    const float *d_l = op_up(e, l, (size_t)R * V * sizeof(float));
    if (!op_ok(e, kn_logprobs(e->be, d_l, R, V, tok, tok_lp, N, N ? ids : NULL, N ? lps : NULL),
               "kn_logprobs"))
        return;
    int *order = op_host(e, (size_t)V * sizeof *order);
    for (int r = 0; r < R; r++)
        check_row(e, l + (size_t)r * V, V, tok[r], tok_lp[r], N, ids + (size_t)r * N,
                  lps + (size_t)r * N, order);
}

static void logprobs_refuse_bad_rows(op_env *e, const void *param)
{
    (void)param;
    enum { V = 300 };
    float *l = op_rand(e, V, -1.0f, 1.0f);
    float *d = op_dev(e, V * sizeof(float));
    int32_t tok = 0, ids[4];
    float lp, lps[4];
    const float bad[] = { NAN, INFINITY };
    for (int k = 0; k < 2; k++) {
        float save = l[17];
        l[17] = bad[k];
        op_put(e, d, l, V * sizeof(float));
        OP_INT_EQ(e, kn_logprobs(e->be, d, 1, V, &tok, &lp, 4, ids, lps), TN_ERR_ARG);
        l[17] = save;
    }
    for (int i = 0; i < V; i++)
        l[i] = -INFINITY;
    op_put(e, d, l, V * sizeof(float));
    OP_INT_EQ(e, kn_logprobs(e->be, d, 1, V, &tok, &lp, 4, ids, lps), TN_ERR_ARG);
    /* argument checks (the dispatcher's, the same on every backend) */
    OP_INT_EQ(e, kn_logprobs(e->be, d, 1, V, &tok, &lp, KN_LOGPROBS_MAX_TOP + 1, ids, lps),
              TN_ERR_ARG);
    tok = V;
    OP_INT_EQ(e, kn_logprobs(e->be, d, 1, V, &tok, &lp, 0, NULL, NULL), TN_ERR_ARG);
    OP_INT_EQ(e, kn_logprobs(e->be, d, 1, V, NULL, NULL, 2, NULL, lps), TN_ERR_ARG);
}

/* One row's history: prompt tokens and output tokens (with repeats) and a
 * few biased tokens; the float64 reference applies vLLM's rules to dense
 * counts, the entries are what a caller derives from the same history. */
typedef struct adj_param {
    int n_rows, vocab, history;
} adj_param;

static void logit_adjust_matches_reference(op_env *e, const void *param)
{
    const adj_param *p = param;
    const int R = p->n_rows, V = p->vocab, H = p->history;
    float *l = op_rand(e, (size_t)R * V, -8.0f, 8.0f);
    for (int r = 0; r < R; r++) /* a masked token in every row, often in the history */
        l[(size_t)r * V + 3] = -INFINITY;
    kn_logit_adjust *prm = op_host(e, (size_t)R * sizeof *prm);
    int32_t *row_start = op_host(e, ((size_t)R + 1) * sizeof *row_start);
    kn_logit_entry *ent = op_host(e, (size_t)R * V * sizeof *ent);
    int *out_cnt = op_host(e, (size_t)V * sizeof *out_cnt);
    int *in_prompt = op_host(e, (size_t)V * sizeof *in_prompt);
    float *bias = op_host(e, (size_t)V * sizeof *bias);
    double *ref = op_host(e, (size_t)R * V * sizeof *ref);
    double *scale = op_host(e, (size_t)R * V * sizeof *scale);
    unsigned char *touched = op_host(e, (size_t)R * V);
    int n_ent = 0;
    for (int r = 0; r < R; r++) {
        const float *lr = l + (size_t)r * V;
        memset(out_cnt, 0, (size_t)V * sizeof *out_cnt);
        memset(in_prompt, 0, (size_t)V * sizeof *in_prompt);
        memset(bias, 0, (size_t)V * sizeof *bias);
        /* tokens drawn from a small range so repeats happen */
        int range = V < 64 ? V : 64;
        for (int i = 0; i < H; i++)
            in_prompt[tu_rand_int(&e->rng, range)] = 1;
        for (int i = 0; i < H; i++)
            out_cnt[tu_rand_int(&e->rng, range)]++;
        for (int i = 0; i < 4; i++)
            bias[tu_rand_int(&e->rng, V)] = (float)(tu_rand_uniform(&e->rng) * 200.0 - 100.0);
        prm[r] = (kn_logit_adjust){ .presence = (float)(tu_rand_uniform(&e->rng) * 4 - 2),
                                    .frequency = (float)(tu_rand_uniform(&e->rng) * 4 - 2),
                                    .repetition = r == 0 ? 1.0f
                                                         : (float)(0.5 + tu_rand_uniform(&e->rng)) };
        row_start[r] = n_ent;
        for (int t = 0; t < V; t++) {
            double x = lr[t];
            int special = out_cnt[t] || in_prompt[t] || bias[t] != 0.0f;
            if (special) {
                ent[n_ent++] = (kn_logit_entry){ t, out_cnt[t], in_prompt[t], bias[t] };
                if (!isinf(x)) {
                    double rep = prm[r].repetition;
                    if (out_cnt[t] || in_prompt[t])
                        x = x > 0 ? x / rep : x * rep;
                    double fc = (double)prm[r].frequency * out_cnt[t];
                    double pr = out_cnt[t] ? prm[r].presence : 0.0;
                    /* the float op rounds each intermediate: bound by their sizes */
                    scale[(size_t)r * V + t] = fabs(x) + fabs(fc) + fabs(pr) + fabs(bias[t]);
                    x = x - (fc + pr) + bias[t];
                }
            }
            ref[(size_t)r * V + t] = x;
            touched[(size_t)r * V + t] = (unsigned char)special;
        }
    }
    row_start[R] = n_ent;
    float *d = op_up(e, l, (size_t)R * V * sizeof(float));
    if (!op_ok(e, kn_logit_adjust_apply(e->be, d, R, V, prm, row_start, ent), "kn_logit_adjust_apply"))
        return;
    float *got = op_get(e, d, (size_t)R * V);
    int wrong = 0, changed = 0, inf_lost = 0;
    for (size_t i = 0; i < (size_t)R * V; i++) {
        if (!touched[i]) {
            changed += memcmp(&got[i], &l[i], sizeof(float)) != 0;
        } else if (isinf(ref[i])) {
            inf_lost += got[i] != (float)ref[i];
        } else if (fabs(got[i] - ref[i]) > 1e-6 * (scale[i] > 1 ? scale[i] : 1)) {
            if (wrong++ == 0)
                op_fail(e, "logit %zu: %.9g, want %.9g", i, (double)got[i], ref[i]);
        }
    }
    op_check(e, wrong == 0 && changed == 0 && inf_lost == 0,
             "%d adjusted logits wrong, %d untouched logits changed, %d -inf lost (%d entries)",
             wrong, changed, inf_lost, n_ent);
}

static void logit_adjust_refuses_bad_entries(op_env *e, const void *param)
{
    (void)param;
    enum { V = 50 };
    float *l = op_rand(e, V, -1.0f, 1.0f);
    float *d = op_up(e, l, V * sizeof(float));
    kn_logit_adjust ok = { 0.5f, 0.5f, 1.2f }, bad_rep = { 0.0f, 0.0f, 0.0f },
                    nan_p = { NAN, 0.0f, 1.0f };
    int32_t rs[2] = { 0, 2 };
    kn_logit_entry unordered[2] = { { 9, 1, 0, 0.0f }, { 4, 1, 0, 0.0f } };
    kn_logit_entry dup[2] = { { 4, 1, 0, 0.0f }, { 4, 1, 0, 0.0f } };
    kn_logit_entry range[2] = { { 4, 1, 0, 0.0f }, { V, 1, 0, 0.0f } };
    kn_logit_entry neg[2] = { { 4, -1, 0, 0.0f }, { 5, 1, 0, 0.0f } };
    kn_logit_entry inf_bias[2] = { { 4, 1, 0, INFINITY }, { 5, 1, 0, 0.0f } };
    kn_logit_entry fine[2] = { { 4, 1, 0, 0.0f }, { 5, 1, 1, 2.0f } };
    OP_INT_EQ(e, kn_logit_adjust_apply(e->be, d, 1, V, &ok, rs, unordered), TN_ERR_ARG);
    OP_INT_EQ(e, kn_logit_adjust_apply(e->be, d, 1, V, &ok, rs, dup), TN_ERR_ARG);
    OP_INT_EQ(e, kn_logit_adjust_apply(e->be, d, 1, V, &ok, rs, range), TN_ERR_ARG);
    OP_INT_EQ(e, kn_logit_adjust_apply(e->be, d, 1, V, &ok, rs, neg), TN_ERR_ARG);
    OP_INT_EQ(e, kn_logit_adjust_apply(e->be, d, 1, V, &ok, rs, inf_bias), TN_ERR_ARG);
    OP_INT_EQ(e, kn_logit_adjust_apply(e->be, d, 1, V, &bad_rep, rs, fine), TN_ERR_ARG);
    OP_INT_EQ(e, kn_logit_adjust_apply(e->be, d, 1, V, &nan_p, rs, fine), TN_ERR_ARG);
    int32_t rs_bad[2] = { 1, 2 };
    OP_INT_EQ(e, kn_logit_adjust_apply(e->be, d, 1, V, &ok, rs_bad, fine), TN_ERR_ARG);
    float *got = op_get(e, d, V);
    OP_MEM_EQ(e, got, l, V * sizeof(float));
}

void ops_register_logprobs(void)
{
    static const lp_param lp[] = { { 5, 1000, 5 }, { 6, 1000, 20 }, { 3, 201088, 20 },
                                   { 4, 512, 0 }, { 1, 7, 7 } };
    for (size_t i = 0; i < sizeof lp / sizeof lp[0]; i++)
        OP_CASE("logprobs", OP_ALL, logprobs_match_float64, lp[i], "rows=%d vocab=%d top=%d",
                lp[i].n_rows, lp[i].vocab, lp[i].top_n);
    lp_param none = { 0, 0, 0 };
    OP_CASE("logprobs", OP_ALL, logprobs_refuse_bad_rows, none, "refuses NaN, +inf, all -inf");
    static const adj_param adj[] = { { 4, 1000, 30 }, { 2, 201088, 200 }, { 3, 40, 100 } };
    for (size_t i = 0; i < sizeof adj / sizeof adj[0]; i++)
        OP_CASE("logit_adjust", OP_ALL, logit_adjust_matches_reference, adj[i],
                "rows=%d vocab=%d history=%d", adj[i].n_rows, adj[i].vocab, adj[i].history);
    OP_CASE("logit_adjust", OP_ALL, logit_adjust_refuses_bad_entries, none, "refuses bad entries");
}
