/* Whole-model tests against the HF golden outputs (computed in float64 by
 * transformers from the same bf16 weights), and the cache invariants the
 * serving path relies on: decode through the paged cache equals a fresh
 * prefill, chunked prefill equals one prefill, page size does not matter,
 * and batching sequences together does not change any of them. Each test
 * runs for both families. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "kernels/backend.h"
#include "common/status.h"
#include "tests/unit/engine_testutil.h"

#define HF_TOL 1e-3      /* ours (fp32) vs HF float64 */
#define SAME_TOL 1e-5    /* two fp32 computations of the same logits */
#define MAX_SEQ 128

typedef et_family family;

static family gpt_oss = {.dir = ET_GPT_OSS};
static family qwen3 = {.dir = ET_QWEN3};

/* et_family_setup, and the golden's prompt + generation within MAX_SEQ */
static int family_setup(void **state)
{
    if (et_family_setup(state) != 0)
        return -1;
    family *f = *state;
    if (f->g.T + f->g.G > MAX_SEQ) {
        print_error("%s: golden of %d + %d tokens, over %d\n", f->dir, f->g.T, f->g.G, MAX_SEQ);
        et_family_close(f);
        return -1;
    }
    return 0;
}

/* A sequence with its own pages in a cache. */
typedef struct seq {
    int32_t tokens[MAX_SEQ];
    int len;          /* tokens known (cached + pending) */
    int n_cached;
    int32_t pages[MAX_SEQ];
    int n_pages;
} seq;

static void cache_init(family *f, tm_kv_cache *kv, int page_size, int n_pages)
{
    const tm_config *c = tm_model_config(f->m);
    assert_int_equal(tm_kv_cache_init(kv, &f->be, KN_F32, c->n_layers, c->n_kv_heads, c->head_dim,
                                      page_size, n_pages), TN_OK);
}

static void seq_init(seq *s, tm_kv_cache *kv, const int32_t *tokens, int n)
{
    memset(s, 0, sizeof(*s));
    memcpy(s->tokens, tokens, sizeof(int32_t) * (size_t)n);
    s->len = n;
    s->n_pages = tm_kv_pages_for(kv, MAX_SEQ);
    assert_int_equal(tm_kv_alloc_pages(kv, s->n_pages, s->pages), TN_OK);
}

/* The step that feeds s's pending tokens (all of them, or at most `chunk`). */
static tm_seq_step seq_step(const seq *s, int chunk)
{
    int n = s->len - s->n_cached;
    if (chunk > 0 && n > chunk)
        n = chunk;
    return (tm_seq_step){.tokens = s->tokens + s->n_cached, .n_tokens = n,
                         .n_cached = s->n_cached, .pages = s->pages, .n_pages = s->n_pages};
}

static void assert_close(const float *got, const float *ref, size_t n, double tol,
                         const char *what, int index)
{
    double e = et_rel_err(got, ref, n);
    if (!(e <= tol)) {
        print_error("%s[%d]: relative error %.3g above %.3g\n", what, index, e, tol);
        fail();
    }
}

/* Prefills the prompt and decodes n greedy tokens; logits [n][V]. */
static void run_greedy(family *f, int page_size, int n, int32_t *ids, float *logits)
{
    tm_kv_cache kv;
    cache_init(f, &kv, page_size, (MAX_SEQ + page_size - 1) / page_size);
    seq s;
    seq_init(&s, &kv, f->g.prompt, f->g.T);
    const int V = f->g.V;
    for (int i = 0; i < n; i++) {
        tm_seq_step st = seq_step(&s, 0);
        assert_int_equal(tm_forward(f->m, &kv, &st, 1, logits + (size_t)i * V, NULL), TN_OK);
        s.n_cached = s.len;
        ids[i] = et_argmax(logits + (size_t)i * V, V);
        s.tokens[s.len++] = ids[i];
    }
    tm_kv_cache_free(&kv);
}

static void prefill_matches_hf(void **state)
{
    family *f = *state;
    const int T = f->g.T, V = f->g.V;
    float *all = calloc((size_t)T * V, sizeof(float));
    float *last = calloc((size_t)V, sizeof(float)), *last_only = calloc((size_t)V, sizeof(float));
    assert_true(all && last && last_only);
    tm_kv_cache kv;
    cache_init(f, &kv, 16, 8);
    seq s;
    seq_init(&s, &kv, f->g.prompt, T);
    tm_seq_step st = seq_step(&s, 0);
    assert_int_equal(tm_forward(f->m, &kv, &st, 1, last, all), TN_OK);
    double worst = 0;
    for (int t = 0; t < T; t++) {
        double e = et_rel_err(all + (size_t)t * V, f->g.prompt_logits + (size_t)t * V, V);
        if (e > worst)
            worst = e;
        assert_close(all + (size_t)t * V, f->g.prompt_logits + (size_t)t * V, V, HF_TOL,
                     "prompt logits row", t);
    }
    print_message("# %s: prefill of %d tokens, max row relative error vs HF %.3g\n",
                  f->dir, T, worst);
    assert_close(all, f->g.prompt_logits, (size_t)T * V, HF_TOL, "prompt logits", 0);
    assert_memory_equal(last, all + (size_t)(T - 1) * V, sizeof(float) * (size_t)V);
    /* the serving path computes only the last row's head */
    tm_kv_cache_free(&kv);
    cache_init(f, &kv, 16, 8);
    seq_init(&s, &kv, f->g.prompt, T);
    st = seq_step(&s, 0);
    assert_int_equal(tm_forward(f->m, &kv, &st, 1, last_only, NULL), TN_OK);
    assert_close(last_only, last, V, SAME_TOL, "last-row-only logits", 0);
    tm_kv_cache_free(&kv);
    free(all);
    free(last);
    free(last_only);
}

static void greedy_matches_hf(void **state)
{
    family *f = *state;
    const int G = f->g.G, V = f->g.V;
    int32_t ids[MAX_SEQ];
    float *lg = calloc((size_t)G * V, sizeof(float));
    float *lg4 = calloc((size_t)G * V, sizeof(float));
    float *lg3 = calloc((size_t)G * V, sizeof(float));
    assert_true(lg && lg4 && lg3);
    run_greedy(f, 16, G, ids, lg);
    float min_margin = 1e30f;
    for (int i = 0; i < G; i++) {
        if (f->g.gen_margin[i] < min_margin)
            min_margin = f->g.gen_margin[i];
        assert_int_equal(ids[i], f->g.gen_ids[i]);
        assert_close(lg + (size_t)i * V, f->g.gen_logits + (size_t)i * V, V, HF_TOL,
                     "greedy step logits", i);
    }
    print_message("# %s: %d greedy tokens identical to HF (smallest HF top-2 margin %.3g), "
                  "whole-run relative error %.3g\n", f->dir, G, min_margin,
                  et_rel_err(lg, f->g.gen_logits, (size_t)G * V));
    /* page size is a storage detail: 4 and 3 (which does not divide the
     * sliding window) give the same tokens and logits */
    int32_t ids4[MAX_SEQ], ids3[MAX_SEQ];
    run_greedy(f, 4, G, ids4, lg4);
    run_greedy(f, 3, G, ids3, lg3);
    assert_memory_equal(ids4, ids, sizeof(int32_t) * (size_t)G);
    assert_memory_equal(ids3, ids, sizeof(int32_t) * (size_t)G);
    for (int i = 0; i < G; i++) {
        assert_close(lg4 + (size_t)i * V, lg + (size_t)i * V, V, SAME_TOL, "page 4 step", i);
        assert_close(lg3 + (size_t)i * V, lg + (size_t)i * V, V, SAME_TOL, "page 3 step", i);
    }
    free(lg);
    free(lg4);
    free(lg3);
}

/* Decoding token by token through the cache, and prefilling in chunks,
 * give the logits of one prefill over the whole sequence. */
static void decode_and_chunks_match_full_prefill(void **state)
{
    family *f = *state;
    const int T = f->g.T, V = f->g.V, D = 10, N = T + D;
    int32_t full[MAX_SEQ];
    memcpy(full, f->g.prompt, sizeof(int32_t) * (size_t)T);
    memcpy(full + T, f->g.gen_ids, sizeof(int32_t) * (size_t)D);
    float *ref = calloc((size_t)N * V, sizeof(float));
    float *got = calloc((size_t)N * V, sizeof(float));
    assert_true(ref && got);
    tm_kv_cache kv;
    cache_init(f, &kv, 8, 64);
    seq s;
    seq_init(&s, &kv, full, N);
    tm_seq_step st = seq_step(&s, 0);
    assert_int_equal(tm_forward(f->m, &kv, &st, 1, NULL, ref), TN_OK);
    tm_kv_release_pages(&kv, s.pages, s.n_pages);

    /* prompt prefill, then one token per step */
    seq_init(&s, &kv, full, T);
    st = seq_step(&s, 0);
    assert_int_equal(tm_forward(f->m, &kv, &st, 1, got + (size_t)(T - 1) * V, NULL), TN_OK);
    assert_close(got + (size_t)(T - 1) * V, ref + (size_t)(T - 1) * V, V, SAME_TOL,
                 "prefill last row", T - 1);
    for (int i = 0; i < D; i++) {
        s.n_cached = s.len;
        s.tokens[s.len++] = full[T + i];
        st = seq_step(&s, 0);
        assert_int_equal(st.n_tokens, 1);
        assert_int_equal(tm_forward(f->m, &kv, &st, 1, got + (size_t)(T + i) * V, NULL),
                         TN_OK);
        assert_close(got + (size_t)(T + i) * V, ref + (size_t)(T + i) * V, V, SAME_TOL,
                     "decode step vs full prefill", T + i);
    }
    tm_kv_release_pages(&kv, s.pages, s.n_pages);

    /* chunked prefill (chunks of 7 rows, crossing page and window edges) */
    seq_init(&s, &kv, full, N);
    while (s.n_cached < s.len) {
        st = seq_step(&s, 7);
        assert_int_equal(tm_forward(f->m, &kv, &st, 1, NULL, got + (size_t)s.n_cached * V),
                         TN_OK);
        s.n_cached += st.n_tokens;
    }
    for (int t = 0; t < N; t++)
        assert_close(got + (size_t)t * V, ref + (size_t)t * V, V, SAME_TOL,
                     "chunked prefill row", t);
    tm_kv_release_pages(&kv, s.pages, s.n_pages);
    assert_int_equal(kv.n_free, kv.n_pages);
    tm_kv_cache_free(&kv);
    free(ref);
    free(got);
}

/* Several sequences in one forward (decodes, and a prefill mixed with
 * decodes) give each sequence the logits it gets alone. */
static void batched_sequences_match_alone(void **state)
{
    family *f = *state;
    const int V = f->g.V, NS = 4, STEPS = 4;
    const int32_t *p = f->g.prompt;
    /* A..C start decoding from different lengths; D arrives during the
     * first batched step with a whole prompt. */
    const int32_t *starts[4] = {p, p + 3, p + 10, p + 1};
    const int lens[4] = {f->g.T, 23, 17, 30};
    tm_kv_cache alone_kv, batch_kv;
    cache_init(f, &alone_kv, 4, 4 * 32);
    cache_init(f, &batch_kv, 4, 4 * 32);
    seq alone[4], batch[4];
    for (int i = 0; i < NS; i++)
        seq_init(&alone[i], &alone_kv, starts[i], lens[i]);
    /* the batched run takes its pages one at a time in turn, so each
     * sequence's pages are scattered through the pool */
    for (int i = 0; i < NS; i++) {
        memset(&batch[i], 0, sizeof(batch[i]));
        memcpy(batch[i].tokens, starts[i], sizeof(int32_t) * (size_t)lens[i]);
        batch[i].len = lens[i];
        batch[i].n_pages = tm_kv_pages_for(&batch_kv, MAX_SEQ);
    }
    for (int p = 0; p < batch[0].n_pages; p++)
        for (int i = 0; i < NS; i++)
            assert_int_equal(tm_kv_alloc_pages(&batch_kv, 1, &batch[i].pages[p]), TN_OK);
    assert_int_equal(batch[1].pages[0], batch[0].pages[0] + 1);
    float *want = calloc((size_t)STEPS * NS * V, sizeof(float));
    float *got = calloc((size_t)NS * V, sizeof(float));
    assert_true(want && got);
    /* alone: prefill A..C, then each decode step separately; D prefills alone
     * at step 0 */
    for (int i = 0; i < 3; i++) {
        tm_seq_step st = seq_step(&alone[i], 0);
        assert_int_equal(tm_forward(f->m, &alone_kv, &st, 1, got, NULL), TN_OK);
        alone[i].n_cached = alone[i].len;
        alone[i].tokens[alone[i].len++] = et_argmax(got, V);
    }
    for (int step = 0; step < STEPS; step++) {
        for (int i = 0; i < NS; i++) {
            float *w = want + ((size_t)step * NS + i) * V;
            tm_seq_step st = seq_step(&alone[i], 0);
            assert_int_equal(tm_forward(f->m, &alone_kv, &st, 1, w, NULL), TN_OK);
            alone[i].n_cached = alone[i].len;
            alone[i].tokens[alone[i].len++] = et_argmax(w, V);
        }
    }
    /* batched: same prefills of A..C, then every step in one call */
    for (int i = 0; i < 3; i++) {
        tm_seq_step st = seq_step(&batch[i], 0);
        assert_int_equal(tm_forward(f->m, &batch_kv, &st, 1, got, NULL), TN_OK);
        batch[i].n_cached = batch[i].len;
        batch[i].tokens[batch[i].len++] = et_argmax(got, V);
    }
    for (int step = 0; step < STEPS; step++) {
        tm_seq_step sts[4];
        for (int i = 0; i < NS; i++)
            sts[i] = seq_step(&batch[i], 0);
        if (step == 0)
            assert_int_equal(sts[3].n_tokens, lens[3]);   /* D: prefill among decodes */
        assert_int_equal(tm_forward(f->m, &batch_kv, sts, NS, got, NULL), TN_OK);
        for (int i = 0; i < NS; i++) {
            const float *w = want + ((size_t)step * NS + i) * V;
            assert_close(got + (size_t)i * V, w, V, SAME_TOL, "batched sequence", i);
            int n = batch[i].len;   /* feed the token the alone run chose */
            batch[i].n_cached = n;
            batch[i].tokens[n] = alone[i].tokens[n];
            batch[i].len = n + 1;
        }
    }
    print_message("# %s: %d steps of %d batched sequences match each alone\n", f->dir,
                  STEPS, NS);
    tm_kv_cache_free(&alone_kv);
    tm_kv_cache_free(&batch_kv);
    free(want);
    free(got);
}

static void forward_rejects_bad_batches(void **state)
{
    family *f = *state;
    const tm_config *c = tm_model_config(f->m);
    const int V = f->g.V;
    float *lg = calloc((size_t)V, sizeof(float));
    assert_non_null(lg);
    tm_kv_cache kv;
    cache_init(f, &kv, 4, 8);
    int32_t pages[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    int32_t toks[5] = {1, 2, 3, 4, 5};
    tm_seq_step ok = {.tokens = toks, .n_tokens = 5, .n_cached = 0, .pages = pages,
                      .n_pages = 2};
    tm_seq_step bad = ok;
    bad.n_pages = 1;                                   /* 5 tokens need 2 pages of 4 */
    assert_int_equal(tm_forward(f->m, &kv, &bad, 1, lg, NULL), TN_ERR_ARG);
    int32_t wild[2] = {0, 8};
    bad = ok;
    bad.pages = wild;                                  /* page id past the cache */
    assert_int_equal(tm_forward(f->m, &kv, &bad, 1, lg, NULL), TN_ERR_ARG);
    int32_t oov[5] = {1, 2, V, 4, 5};
    bad = ok;
    bad.tokens = oov;                                  /* token id outside the vocab */
    assert_int_equal(tm_forward(f->m, &kv, &bad, 1, lg, NULL), TN_ERR_ARG);
    bad = ok;
    bad.n_tokens = 0;
    assert_int_equal(tm_forward(f->m, &kv, &bad, 1, lg, NULL), TN_ERR_ARG);
    bad = ok;
    bad.n_cached = -1;
    assert_int_equal(tm_forward(f->m, &kv, &bad, 1, lg, NULL), TN_ERR_ARG);
    assert_int_equal(tm_forward(f->m, &kv, &ok, 0, lg, NULL), TN_ERR_ARG);
    assert_int_equal(tm_forward(NULL, &kv, &ok, 1, lg, NULL), TN_ERR_ARG);
    /* a cache shaped for another model */
    tm_kv_cache other;
    assert_int_equal(tm_kv_cache_init(&other, &f->be, KN_F32, c->n_layers, c->n_kv_heads,
                                      c->head_dim * 2, 4, 8), TN_OK);
    assert_int_equal(tm_forward(f->m, &other, &ok, 1, lg, NULL), TN_ERR_ARG);
    tm_kv_cache_free(&other);
    /* the model still works after the rejections */
    assert_int_equal(tm_forward(f->m, &kv, &ok, 1, lg, NULL), TN_OK);
    tm_kv_cache_free(&kv);
    free(lg);
}

static void kv_cache_pages(void **state)
{
    family *f = *state;
    tm_kv_cache kv;
    cache_init(f, &kv, 4, 5);
    const tm_config *c = tm_model_config(f->m);
    assert_int_equal(tm_kv_page_bytes(&kv),
                     (size_t)c->n_kv_heads * 4 * c->head_dim * sizeof(float));
    assert_int_equal(tm_kv_pages_for(&kv, 0), 0);
    assert_int_equal(tm_kv_pages_for(&kv, 4), 1);
    assert_int_equal(tm_kv_pages_for(&kv, 5), 2);
    int32_t a[5], b[5];
    assert_int_equal(tm_kv_alloc_pages(&kv, 3, a), TN_OK);
    assert_int_equal(kv.n_free, 2);
    assert_int_equal(tm_kv_alloc_pages(&kv, 3, b), TN_ERR_NOMEM);   /* takes none */
    assert_int_equal(kv.n_free, 2);
    tm_kv_release_pages(&kv, a, 3);
    tm_kv_release_pages(&kv, a, 3);                                  /* double release */
    assert_int_equal(kv.n_free, 5);
    assert_int_equal(tm_kv_alloc_pages(&kv, 5, b), TN_OK);
    for (int i = 0; i < 5; i++)                                      /* all distinct */
        for (int j = 0; j < i; j++)
            assert_int_not_equal(b[i], b[j]);
    tm_kv_cache_free(&kv);
    tm_kv_cache_free(&kv);                                           /* idempotent */
    assert_int_equal(tm_kv_cache_init(&kv, &f->be, KN_F32, 1, 1, 16, 0, 4), TN_ERR_ARG);
}

/* Each test once per family, named after both. */
#define FAMILY_TESTS(fn)                                                       \
    {"gpt_oss " #fn, fn, family_setup, et_family_teardown, &gpt_oss},         \
    {"qwen3_moe " #fn, fn, family_setup, et_family_teardown, &qwen3}

/* The CUDA-graph switch parses on/off only and leaves the CPU backend's
 * steps as they were: the same greedy logits with it on, off and eager,
 * and no graph counted. */
static void cuda_graphs_switch_leaves_cpu_alone(void **state)
{
    family *f = *state;
    tm_cuda_graphs mode = TM_CUDA_GRAPHS_EAGER;
    assert_int_equal(tm_cuda_graphs_parse("on", &mode), 0);
    assert_int_equal(mode, TM_CUDA_GRAPHS_ON);
    assert_int_equal(tm_cuda_graphs_parse("off", &mode), 0);
    assert_int_equal(mode, TM_CUDA_GRAPHS_OFF);
    assert_int_equal(tm_cuda_graphs_parse("yes", &mode), -1);
    assert_int_equal(tm_cuda_graphs_parse(NULL, &mode), -1);
    const int n = 4, V = f->g.V;
    float *ref = calloc((size_t)n * V, sizeof(float)), *got = calloc((size_t)n * V, sizeof(float));
    int32_t ids_ref[4], ids[4];
    assert_non_null(ref);
    assert_non_null(got);
    tm_model_set_cuda_graphs(f->m, TM_CUDA_GRAPHS_OFF);
    run_greedy(f, 4, n, ids_ref, ref);
    static const tm_cuda_graphs modes[] = {TM_CUDA_GRAPHS_ON, TM_CUDA_GRAPHS_EAGER};
    for (int k = 0; k < 2; k++) {
        tm_model_set_cuda_graphs(f->m, modes[k]);
        run_greedy(f, 4, n, ids, got);
        assert_memory_equal(got, ref, (size_t)n * V * sizeof(float));
        assert_memory_equal(ids, ids_ref, sizeof ids);
    }
    tm_graph_stats gs = tm_model_graph_stats(f->m);
    assert_true(gs.captures == 0 && gs.replays == 0 && gs.eager_steps == 0 && gs.capture_failures == 0);
    tm_model_set_cuda_graphs(f->m, TM_CUDA_GRAPHS_OFF);
    free(ref);
    free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        FAMILY_TESTS(prefill_matches_hf),
        FAMILY_TESTS(greedy_matches_hf),
        FAMILY_TESTS(decode_and_chunks_match_full_prefill),
        FAMILY_TESTS(batched_sequences_match_alone),
        FAMILY_TESTS(forward_rejects_bad_batches),
        FAMILY_TESTS(kv_cache_pages),
        FAMILY_TESTS(cuda_graphs_switch_leaves_cpu_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
