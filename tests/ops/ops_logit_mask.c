/* kn_logit_mask_apply against a direct reading of the bitmask: masked
 * logits become -inf, every other logit keeps its bits; vocabularies that
 * are and are not multiples of 32, the 201088-token o200k_harmony one; a
 * row that allows nothing is refused and leaves the logits as they were. */
#include <math.h>
#include <string.h>
#include "common/status.h"
#include "kernels/logit_mask.h"
#include "tests/ops/op_harness.h"

typedef struct mask_param {
    int n_rows, vocab, density; /* density: percent of allowed tokens */
} mask_param;

static void logit_mask_matches_bits(op_env *e, const void *param)
{
    const mask_param *p = param;
    const int R = p->n_rows, V = p->vocab, W = kn_logit_mask_words(V);
    float *l = op_rand(e, (size_t)R * V, -8.0f, 8.0f);
    uint32_t *m = op_host(e, (size_t)R * W * sizeof *m);
    memset(m, 0, (size_t)R * W * sizeof *m);
    for (int r = 0; r < R; r++) {
        for (int t = 0; t < V; t++)
            if (tu_rand_int(&e->rng, 100) < p->density)
                m[(size_t)r * W + t / 32] |= 1u << (t % 32);
        m[(size_t)r * W + (V - 1) / 32] |= 1u << ((V - 1) % 32); /* the last token: tail bits */
    }
    float *d = op_up(e, l, (size_t)R * V * sizeof(float));
    if (!op_ok(e, kn_logit_mask_apply(e->be, d, R, V, m), "kn_logit_mask_apply"))
        return;
    float *got = op_get(e, d, (size_t)R * V);
    int wrong = 0;
    for (int r = 0; r < R; r++)
        for (int t = 0; t < V; t++) {
            size_t i = (size_t)r * V + t;
            int allowed = m[(size_t)r * W + t / 32] >> (t % 32) & 1u;
            int ok = allowed ? memcmp(&got[i], &l[i], sizeof(float)) == 0
                             : (isinf(got[i]) && got[i] < 0);
            if (!ok && wrong++ == 0)
                op_fail(e, "row %d token %d (allowed %d): %g from %g", r, t, allowed,
                        (double)got[i], (double)l[i]);
        }
    op_check(e, wrong == 0, "%d logits wrong", wrong);
}

static void logit_mask_refuses_empty_row(op_env *e, const void *param)
{
    (void)param;
    enum { V = 40, W = (V + 31) / 32 };
    float *l = op_rand(e, 2 * V, -1.0f, 1.0f);
    float *d = op_up(e, l, 2 * V * sizeof(float));
    /* row 1 sets only bits past the vocabulary: it allows nothing */
    uint32_t m[2 * W] = { 0xffffffffu, 0xffu, 0, 0xffffff00u };
    OP_INT_EQ(e, kn_logit_mask_apply(e->be, d, 2, V, m), TN_ERR_ARG);
    float *got = op_get(e, d, 2 * V);
    OP_MEM_EQ(e, got, l, 2 * V * sizeof(float));
}

void ops_register_logit_mask(void)
{
    static const mask_param mp[] = { { 3, 512, 50 }, { 5, 1000, 10 }, { 2, 201088, 90 },
                                     { 4, 33, 1 }, { 1, 7, 100 } };
    for (size_t i = 0; i < sizeof mp / sizeof mp[0]; i++)
        OP_CASE("logit_mask", OP_ALL, logit_mask_matches_bits, mp[i], "rows=%d vocab=%d allowed=%d%%",
                mp[i].n_rows, mp[i].vocab, mp[i].density);
    mask_param none = { 0, 0, 0 };
    OP_CASE("logit_mask", OP_ALL, logit_mask_refuses_empty_row, none, "refuses a row allowing nothing");
}
