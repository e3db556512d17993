/* kn_kv_append + kn_attention over the paged HND cache, against a float64
 * recomputation from the unpaged K/V/Q (bound TU_FP32_REL_TOL, normwise per
 * output row). Cases cover several sequences of different lengths, page sizes
 * that do not divide them, pages in shuffled physical order, GQA ratios 1, 2
 * and 4, sinks on and off, sliding windows (shorter and longer than the
 * sequences), prefill, chunked prefill with an idle sequence, and decode
 * steps that must reproduce the prefill rows. Pool slots never written hold
 * NaN and unused page-table entries hold -1, so reading either shows up. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "kernels/attention.h"
#include "kernels/backend.h"
#include "common/status.h"
#include "testutil.h"

#define MAX_SEQS 8

typedef struct attn_case {
    const char *name;
    int n_seqs;
    int lens[MAX_SEQS];
    int n_heads, n_kv_heads, head_dim, page_size, window, sinks;
} attn_case;

/* One case's data: every token's q, k, v unpaged, and the page assignment. */
typedef struct attn_world {
    const attn_case *c;
    int tok_off[MAX_SEQS + 1]; /* token t of sequence s is row tok_off[s] + t */
    float *q, *k, *v;          /* [total][heads][head_dim] */
    float *sinks;              /* [n_heads] or NULL */
    float scale;
    int max_pages, n_pages;
    int32_t *page_table;       /* [n_seqs][max_pages], -1 where unused */
    size_t pool_floats;
} attn_world;

static void world_init(attn_world *w, const attn_case *c, tu_rng *rng)
{
    memset(w, 0, sizeof *w);
    w->c = c;
    int used_pages = 0;
    w->max_pages = 1;
    for (int s = 0; s < c->n_seqs; s++) {
        w->tok_off[s + 1] = w->tok_off[s] + c->lens[s];
        int p = (c->lens[s] + c->page_size - 1) / c->page_size;
        used_pages += p;
        if (p + 1 > w->max_pages)
            w->max_pages = p + 1; /* a spare column, left at -1 */
    }
    int total = w->tok_off[c->n_seqs];
    size_t kv_row = (size_t)c->n_kv_heads * c->head_dim, q_row = (size_t)c->n_heads * c->head_dim;
    w->q = tu_xcalloc((size_t)total * q_row, sizeof(float));
    w->k = tu_xcalloc((size_t)total * kv_row, sizeof(float));
    w->v = tu_xcalloc((size_t)total * kv_row, sizeof(float));
    tu_rand_fill(rng, w->q, (size_t)total * q_row, -2.0f, 2.0f);
    tu_rand_fill(rng, w->k, (size_t)total * kv_row, -2.0f, 2.0f);
    tu_rand_fill(rng, w->v, (size_t)total * kv_row, -1.0f, 1.0f);
    if (c->sinks) {
        w->sinks = tu_xcalloc((size_t)c->n_heads, sizeof(float));
        tu_rand_fill(rng, w->sinks, (size_t)c->n_heads, -2.0f, 4.0f);
    }
    w->scale = (float)(1.0 / sqrt((double)c->head_dim));

    /* Physical pages: a shuffled pool with a few pages nobody owns. */
    w->n_pages = used_pages + 3;
    int32_t *perm = tu_xcalloc((size_t)w->n_pages, sizeof *perm);
    for (int i = 0; i < w->n_pages; i++)
        perm[i] = i;
    tu_rand_shuffle_i32(rng, perm, w->n_pages);
    w->page_table = tu_xcalloc((size_t)c->n_seqs * w->max_pages, sizeof(int32_t));
    int next = 0;
    for (int s = 0; s < c->n_seqs; s++)
        for (int i = 0; i < w->max_pages; i++)
            w->page_table[(size_t)s * w->max_pages + i] =
                i * c->page_size < c->lens[s] ? perm[next++] : -1;
    free(perm);
    w->pool_floats = (size_t)w->n_pages * c->n_kv_heads * c->page_size * c->head_dim;
}

static void world_free(attn_world *w)
{
    free(w->q);
    free(w->k);
    free(w->v);
    free(w->sinks);
    free(w->page_table);
}

static float *nan_pool(const attn_world *w)
{
    float *p = tu_xcalloc(w->pool_floats, sizeof *p);
    for (size_t i = 0; i < w->pool_floats; i++)
        p[i] = NAN;
    return p;
}

/* float64 attention for token t of sequence s, all heads: out[n_heads][hd]. */
static void ref_attention_row(const attn_world *w, int s, int t, double *out)
{
    const attn_case *c = w->c;
    int hd = c->head_dim, group = c->n_heads / c->n_kv_heads;
    int first = c->window > 0 ? t - c->window + 1 : 0;
    if (first < 0)
        first = 0;
    double *sc = tu_xcalloc((size_t)t + 1, sizeof *sc);
    for (int h = 0; h < c->n_heads; h++) {
        const float *q = w->q + ((size_t)(w->tok_off[s] + t) * c->n_heads + h) * hd;
        int kvh = h / group;
        double m = c->sinks ? w->sinks[h] : -INFINITY;
        for (int j = first; j <= t; j++) {
            const float *k = w->k + ((size_t)(w->tok_off[s] + j) * c->n_kv_heads + kvh) * hd;
            double dot = 0.0;
            for (int d = 0; d < hd; d++)
                dot += (double)q[d] * k[d];
            sc[j] = dot * w->scale;
            if (sc[j] > m)
                m = sc[j];
        }
        double denom = c->sinks ? exp(w->sinks[h] - m) : 0.0;
        double *o = out + (size_t)h * hd;
        for (int d = 0; d < hd; d++)
            o[d] = 0.0;
        for (int j = first; j <= t; j++) {
            const float *v = w->v + ((size_t)(w->tok_off[s] + j) * c->n_kv_heads + kvh) * hd;
            double p = exp(sc[j] - m);
            denom += p;
            for (int d = 0; d < hd; d++)
                o[d] += p * v[d];
        }
        for (int d = 0; d < hd; d++)
            o[d] /= denom;
    }
    free(sc);
}

/* One step: sequence s brings tokens [start[s], start[s] + n_q[s]). */
typedef struct attn_step {
    int32_t q_offset[MAX_SEQS + 1], kv_len[MAX_SEQS];
    kn_seq_batch b;
    float *q, *k, *v, *out;
} attn_step;

static void step_init(attn_step *st, const attn_world *w, const int *start, const int *n_q)
{
    const attn_case *c = w->c;
    memset(st, 0, sizeof *st);
    int max_q = 0, max_kv = 0;
    for (int s = 0; s < c->n_seqs; s++) {
        st->q_offset[s + 1] = st->q_offset[s] + n_q[s];
        st->kv_len[s] = start[s] + n_q[s];
        if (n_q[s] > max_q)
            max_q = n_q[s];
        if (st->kv_len[s] > max_kv)
            max_kv = st->kv_len[s];
    }
    int rows = st->q_offset[c->n_seqs];
    size_t kv_row = (size_t)c->n_kv_heads * c->head_dim, q_row = (size_t)c->n_heads * c->head_dim;
    st->q = tu_xcalloc((size_t)rows * q_row, sizeof(float));
    st->k = tu_xcalloc((size_t)rows * kv_row, sizeof(float));
    st->v = tu_xcalloc((size_t)rows * kv_row, sizeof(float));
    st->out = tu_xcalloc((size_t)rows * q_row, sizeof(float));
    for (int s = 0; s < c->n_seqs; s++)
        for (int i = 0; i < n_q[s]; i++) {
            size_t src = (size_t)w->tok_off[s] + start[s] + i, dst = (size_t)st->q_offset[s] + i;
            memcpy(st->q + dst * q_row, w->q + src * q_row, q_row * sizeof(float));
            memcpy(st->k + dst * kv_row, w->k + src * kv_row, kv_row * sizeof(float));
            memcpy(st->v + dst * kv_row, w->v + src * kv_row, kv_row * sizeof(float));
        }
    st->b = (kn_seq_batch){ .n_seqs = c->n_seqs, .n_rows = rows, .max_pages = w->max_pages,
                            .max_q_len = max_q, .max_kv_len = max_kv,
                            .q_offset = st->q_offset, .kv_len = st->kv_len,
                            .page_table = w->page_table, .n_pages = w->n_pages };
}

static void step_free(attn_step *st)
{
    free(st->q);
    free(st->k);
    free(st->v);
    free(st->out);
}

/* Appends the step's K/V and runs attention on it. */
static void step_run(const kn_backend *be, attn_step *st, const attn_world *w,
                     float *k_pool, float *v_pool)
{
    const attn_case *c = w->c;
    assert_int_equal(kn_kv_append(be, k_pool, v_pool, st->k, st->v, &st->b, c->n_kv_heads,
                                  c->head_dim, c->page_size), TN_OK);
    assert_int_equal(kn_attention(be, st->out, st->q, k_pool, v_pool, &st->b, c->n_heads,
                                  c->n_kv_heads, c->head_dim, c->page_size, w->scale,
                                  w->sinks, c->window), TN_OK);
}

/* Checks every row of the step against float64 and, when prefill_out is
 * given (the full prefill's rows, indexed by tok_off), against those too. */
static void step_check(const attn_step *st, const attn_world *w, const int *start,
                       const float *prefill_out, const char *what)
{
    const attn_case *c = w->c;
    size_t q_row = (size_t)c->n_heads * c->head_dim;
    double *ref = tu_xcalloc(q_row, sizeof *ref);
    for (int s = 0; s < c->n_seqs; s++)
        for (int r = st->q_offset[s]; r < st->q_offset[s + 1]; r++) {
            int t = start[s] + (r - st->q_offset[s]);
            const float *got = st->out + (size_t)r * q_row;
            ref_attention_row(w, s, t, ref);
            double err = tu_max_rel_err(got, ref, q_row);
            if (err > TU_FP32_REL_TOL)
                fail_msg("%s %s: seq %d token %d rel err %g", c->name, what, s, t, err);
            if (prefill_out) {
                const float *want = prefill_out + (size_t)(w->tok_off[s] + t) * q_row;
                err = tu_max_rel_err_f32(got, want, q_row);
                if (err > 1e-6)
                    fail_msg("%s %s: seq %d token %d differs from prefill by %g", c->name,
                             what, s, t, err);
            }
        }
    free(ref);
}

static const attn_case cases[] = {
    { "gqa2", 3, { 37, 5, 64 }, 4, 2, 16, 8, 0, 0 },
    { "gqa2-sinks", 3, { 37, 5, 64 }, 4, 2, 16, 8, 0, 1 },
    { "gqa2-sinks-window", 3, { 37, 5, 64 }, 4, 2, 16, 8, 16, 1 },
    { "gqa4-sinks", 4, { 50, 17, 3, 33 }, 8, 2, 32, 16, 0, 1 },
    { "gqa4-window", 4, { 50, 17, 3, 33 }, 8, 2, 32, 5, 7, 0 },
    { "mha-page1-longwindow", 2, { 9, 4 }, 2, 2, 8, 1, 100, 1 },
    { "gqa4-bigpage", 2, { 70, 129 }, 8, 2, 64, 64, 32, 1 },
};
#define N_CASES (sizeof cases / sizeof cases[0])

/* Full prefill: every sequence's whole prompt in one batch. Also checks the
 * pool holds each token's K/V at page_table[t / page_size], slot t % page_size,
 * head-major within the page. */
static void prefill_matches_float64(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    tu_rng rng;
    tu_rng_init(&rng, 61);
    for (size_t ci = 0; ci < N_CASES; ci++) {
        const attn_case *c = &cases[ci];
        attn_world w;
        world_init(&w, c, &rng);
        int start[MAX_SEQS] = { 0 }, n_q[MAX_SEQS];
        for (int s = 0; s < c->n_seqs; s++)
            n_q[s] = c->lens[s];
        float *k_pool = nan_pool(&w), *v_pool = nan_pool(&w);
        attn_step st;
        step_init(&st, &w, start, n_q);
        step_run(&be, &st, &w, k_pool, v_pool);
        step_check(&st, &w, start, NULL, "prefill");

        for (int s = 0; s < c->n_seqs; s++)
            for (int t = 0; t < c->lens[s]; t++)
                for (int h = 0; h < c->n_kv_heads; h++) {
                    size_t page = (size_t)w.page_table[(size_t)s * w.max_pages + t / c->page_size];
                    size_t at = ((page * c->n_kv_heads + h) * c->page_size + t % c->page_size) *
                                c->head_dim;
                    size_t src = ((size_t)(w.tok_off[s] + t) * c->n_kv_heads + h) * c->head_dim;
                    assert_memory_equal(k_pool + at, w.k + src, c->head_dim * sizeof(float));
                    assert_memory_equal(v_pool + at, w.v + src, c->head_dim * sizeof(float));
                }
        step_free(&st);
        free(k_pool);
        free(v_pool);
        world_free(&w);
    }
    kn_backend_free(&be);
}

/* Prefill of all but the last few tokens, then decode steps of one row per
 * sequence: each decode row must equal the full prefill's row for that token
 * (and the float64 reference). */
static void decode_after_prefill_equals_prefill(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    tu_rng rng;
    tu_rng_init(&rng, 62);
    enum { DECODE_STEPS = 3 };
    for (size_t ci = 0; ci < N_CASES; ci++) {
        const attn_case *c = &cases[ci];
        attn_world w;
        world_init(&w, c, &rng);
        int zero[MAX_SEQS] = { 0 }, full[MAX_SEQS], start[MAX_SEQS], n_q[MAX_SEQS];
        for (int s = 0; s < c->n_seqs; s++)
            full[s] = c->lens[s];

        float *k_pool = nan_pool(&w), *v_pool = nan_pool(&w);
        attn_step prefill;
        step_init(&prefill, &w, zero, full);
        step_run(&be, &prefill, &w, k_pool, v_pool);

        float *k2 = nan_pool(&w), *v2 = nan_pool(&w);
        for (int s = 0; s < c->n_seqs; s++) {
            n_q[s] = c->lens[s] - DECODE_STEPS;
            if (n_q[s] < 0)
                n_q[s] = 0; /* shorter sequences join the decode later */
        }
        attn_step st;
        step_init(&st, &w, zero, n_q);
        step_run(&be, &st, &w, k2, v2);
        step_check(&st, &w, zero, prefill.out, "short prefill");
        step_free(&st);
        for (int i = DECODE_STEPS; i > 0; i--) {
            /* Sequences too short to have reached this step sit it out. */
            for (int s = 0; s < c->n_seqs; s++) {
                start[s] = c->lens[s] - i;
                n_q[s] = start[s] >= 0 ? 1 : 0;
                if (start[s] < 0)
                    start[s] = 0;
            }
            step_init(&st, &w, start, n_q);
            step_run(&be, &st, &w, k2, v2);
            step_check(&st, &w, start, prefill.out, "decode");
            step_free(&st);
        }
        step_free(&prefill);
        free(k_pool);
        free(v_pool);
        free(k2);
        free(v2);
        world_free(&w);
    }
    kn_backend_free(&be);
}

/* Chunked prefill: a first chunk of varying length, then the rest, with one
 * sequence idle (no rows, full kv_len) in the second batch. */
static void chunked_prefill_with_idle_sequence(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    tu_rng rng;
    tu_rng_init(&rng, 63);
    for (size_t ci = 0; ci < N_CASES; ci++) {
        const attn_case *c = &cases[ci];
        attn_world w;
        world_init(&w, c, &rng);
        int zero[MAX_SEQS] = { 0 }, first[MAX_SEQS], rest[MAX_SEQS];
        for (int s = 0; s < c->n_seqs; s++) {
            first[s] = s == 1 ? c->lens[s] : tu_rand_int(&rng, c->lens[s] + 1);
            rest[s] = c->lens[s] - first[s];
        }
        float *k_pool = nan_pool(&w), *v_pool = nan_pool(&w);
        attn_step a, b;
        step_init(&a, &w, zero, first);
        step_run(&be, &a, &w, k_pool, v_pool);
        step_check(&a, &w, zero, NULL, "chunk 1");
        step_init(&b, &w, first, rest);
        step_run(&be, &b, &w, k_pool, v_pool);
        step_check(&b, &w, first, NULL, "chunk 2");
        step_free(&a);
        step_free(&b);
        free(k_pool);
        free(v_pool);
        world_free(&w);
    }
    kn_backend_free(&be);
}

static void attention_rejects_bad_arguments(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    /* Two sequences, page_size 2: lens 3 and 2, pages {1, 0} and {2}. */
    enum { HD = 2, PS = 2, NP = 3 };
    float pool_k[NP * PS * HD] = { 0 }, pool_v[NP * PS * HD] = { 0 };
    float q[5 * HD] = { 0 }, k[5 * HD] = { 0 }, v[5 * HD] = { 0 }, out[5 * HD];
    int32_t q_offset[3] = { 0, 3, 5 }, kv_len[2] = { 3, 2 };
    int32_t pages[2 * 2] = { 1, 0, 2, -1 };
    kn_seq_batch ok = { .n_seqs = 2, .n_rows = 5, .max_pages = 2, .max_q_len = 3,
                        .max_kv_len = 3, .q_offset = q_offset, .kv_len = kv_len,
                        .page_table = pages, .n_pages = NP };
    assert_int_equal(kn_kv_append(&be, pool_k, pool_v, k, v, &ok, 1, HD, PS), TN_OK);
    assert_int_equal(kn_attention(&be, out, q, pool_k, pool_v, &ok, 1, 1, HD, PS, 1.0f,
                                  NULL, 0), TN_OK);

#define BOTH_REJECT(batch, n_heads, n_kv, page_size, scale, window)                          \
    do {                                                                                     \
        assert_int_equal(kn_kv_append(&be, pool_k, pool_v, k, v, batch, n_kv, HD, page_size), \
                         TN_ERR_ARG);                                                        \
        assert_int_equal(kn_attention(&be, out, q, pool_k, pool_v, batch, n_heads, n_kv, HD,  \
                                      page_size, scale, NULL, window), TN_ERR_ARG);          \
    } while (0)

    BOTH_REJECT(NULL, 1, 1, PS, 1.0f, 0);
    BOTH_REJECT(&ok, 1, 0, PS, 1.0f, 0);
    BOTH_REJECT(&ok, 1, 1, 0, 1.0f, 0);
    kn_seq_batch bad = ok;
    bad.n_pages = 2; /* page 2 is now out of range */
    BOTH_REJECT(&bad, 1, 1, PS, 1.0f, 0);
    bad = ok;
    bad.n_pages = 0;
    BOTH_REJECT(&bad, 1, 1, PS, 1.0f, 0);
    bad = ok;
    bad.n_rows = 4; /* q_offset ends at 5 */
    BOTH_REJECT(&bad, 1, 1, PS, 1.0f, 0);
    bad = ok;
    bad.max_q_len = 2;
    BOTH_REJECT(&bad, 1, 1, PS, 1.0f, 0);
    bad = ok;
    bad.max_kv_len = 2;
    BOTH_REJECT(&bad, 1, 1, PS, 1.0f, 0);
    bad = ok;
    bad.max_pages = 1; /* sequence 0 needs 2 pages */
    BOTH_REJECT(&bad, 1, 1, PS, 1.0f, 0);
    bad = ok;
    bad.page_table = NULL;
    BOTH_REJECT(&bad, 1, 1, PS, 1.0f, 0);

    int32_t neg_pages[4] = { 1, -1, 2, -1 };
    bad = ok;
    bad.page_table = neg_pages; /* sequence 0's second page is missing */
    BOTH_REJECT(&bad, 1, 1, PS, 1.0f, 0);
    int32_t short_kv[2] = { 2, 2 }; /* sequence 0 has 3 rows but 2 tokens */
    bad = ok;
    bad.kv_len = short_kv;
    BOTH_REJECT(&bad, 1, 1, PS, 1.0f, 0);
    int32_t down_offsets[3] = { 0, 4, 3 };
    bad = ok;
    bad.q_offset = down_offsets;
    bad.n_rows = 3;
    BOTH_REJECT(&bad, 1, 1, PS, 1.0f, 0);

    /* Attention-only checks. */
    assert_int_equal(kn_attention(&be, out, q, pool_k, pool_v, &ok, 3, 2, HD, PS, 1.0f, NULL, 0),
                     TN_ERR_ARG); /* 3 heads over 2 KV heads */
    assert_int_equal(kn_attention(&be, out, q, pool_k, pool_v, &ok, 1, 1, HD, PS, 1.0f, NULL, -1),
                     TN_ERR_ARG);
    assert_int_equal(kn_attention(&be, out, q, pool_k, pool_v, &ok, 1, 1, HD, PS, NAN, NULL, 0),
                     TN_ERR_ARG);
    assert_int_equal(kn_attention(&be, NULL, q, pool_k, pool_v, &ok, 1, 1, HD, PS, 1.0f, NULL, 0),
                     TN_ERR_ARG);
    assert_int_equal(kn_attention(&be, out, q, NULL, pool_v, &ok, 1, 1, HD, PS, 1.0f, NULL, 0),
                     TN_ERR_ARG);
    assert_int_equal(kn_kv_append(&be, pool_k, NULL, k, v, &ok, 1, HD, PS), TN_ERR_ARG);
    kn_backend_free(&be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(prefill_matches_float64),
        cmocka_unit_test(decode_after_prefill_equals_prefill),
        cmocka_unit_test(chunked_prefill_with_idle_sequence),
        cmocka_unit_test(attention_rejects_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
