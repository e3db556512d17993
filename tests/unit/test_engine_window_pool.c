/* The KV cache's window pool (engine/kv_cache.h): sliding-window layers
 * keeping only their window's pages, on the CPU backend with the GPT-OSS
 * tiny fixture (window 16: layers 0, 2 ... slide, 1, 3 ... are full).
 *
 * References: the same model over a plain cache (every layer every page,
 * what tandem-generate runs), which must give bit-identical logits -- the
 * window layers read the same rows, in the same order, only from other
 * slots -- and HF's float64 golden run (HF_TOL, as test_engine_model).
 * Page size 4, so a 16-token window spans 4-5 pages and most of a long
 * sequence's pages give their window slot back. */
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

#define HF_TOL 1e-3
#define PAGE 4

static et_family gpt_oss = {.dir = ET_GPT_OSS};

static int fixture_window(const tm_config *c)
{
    int w = 0;
    for (int l = 0; l < c->n_layers; l++)
        if (c->layer_window[l] > w)
            w = c->layer_window[l];
    return w;
}

/* A sequence grown one page at a time, as admission by use would: pages
 * taken when a step needs them, window slots given back after each step. */
typedef struct grow_seq {
    int32_t *pages;
    int n_pages, cap;
} grow_seq;

static void grow_to(tm_kv_cache *kv, grow_seq *s, int n_tokens)
{
    int need = tm_kv_pages_for(kv, n_tokens);
    while (s->n_pages < need) {
        assert_true(s->n_pages < s->cap);
        assert_int_equal(tm_kv_alloc_pages(kv, 1, s->pages + s->n_pages), TN_OK);
        s->n_pages++;
    }
}

/* Logits [n][V] of toks[0..n) fed teacher-forced (prompt of T in one
 * prefill, then one token a step) through kv; with trim, the window slots
 * are given back after every step and the held count checked. */
static float *run_forced(et_family *f, tm_kv_cache *kv, const int32_t *toks, int T, int n, int trim)
{
    const int V = f->g.V;
    float *out = calloc((size_t)n * V, sizeof *out);
    grow_seq s = {calloc((size_t)n, sizeof(int32_t)), 0, n};
    assert_true(out && s.pages);
    grow_to(kv, &s, T);
    tm_seq_step st = {toks, T, 0, s.pages, s.n_pages};
    assert_int_equal(tm_forward(f->m, kv, &st, 1, out + (size_t)(T - 1) * V, out), TN_OK);
    for (int p = T; p < n; p++) {
        if (trim) {
            tm_kv_window_trim(kv, s.pages, s.n_pages, p);
            assert_int_equal(kv->n_win_slots - kv->n_win_free, tm_kv_window_pages_for(kv, p));
        }
        grow_to(kv, &s, p + 1);
        st = (tm_seq_step){toks + p, 1, p, s.pages, s.n_pages};
        assert_int_equal(tm_forward(f->m, kv, &st, 1, out + (size_t)p * V, NULL), TN_OK);
    }
    tm_kv_release_pages(kv, s.pages, s.n_pages);
    free(s.pages);
    return out;
}

/* The golden sequence, and past it a greedy continuation long enough that
 * the window has slid over many pages. */
static int32_t *long_sequence(et_family *f, int n)
{
    int32_t *toks = calloc((size_t)n, sizeof *toks);
    assert_non_null(toks);
    const int T = f->g.T;
    assert_int_equal(et_run_greedy(f->m, &f->be, f->g.prompt, T, NULL, toks + T, n - T), TN_OK);
    memcpy(toks, f->g.prompt, sizeof *toks * (size_t)T);
    return toks;
}

/* Teacher-forced logits through a window pool equal the plain cache's bit
 * for bit, the golden part is within HF_TOL of HF, and the pool ends with
 * every slot back. */
static void window_pool_equals_plain_cache(void **state)
{
    et_family *f = *state;
    const tm_config *c = tm_model_config(f->m);
    const int W = fixture_window(c), T = f->g.T, V = f->g.V;
    assert_true(W > 0);
    const int n = 6 * W + T;   /* the window slides over ~24 pages */
    int32_t *toks = long_sequence(f, n);
    /* what tandem-generate's cache is: every layer every page */
    tm_kv_cache plain, win;
    const int n_pages = (n + PAGE - 1) / PAGE;
    assert_int_equal(tm_kv_cache_init(&plain, &f->be, KN_F32, c->n_layers, c->n_kv_heads, c->head_dim,
                                      PAGE, n_pages), TN_OK);
    /* the window layers: the prompt's pages while it is prefilled, then
     * the window's */
    const int slots = tm_kv_pages_for(&plain, T) + 2;
    const int win_slots = slots > W / PAGE + 2 ? slots : W / PAGE + 2;
    assert_int_equal(tm_kv_cache_init_windowed(&win, &f->be, KN_F32, c->n_layers, c->n_kv_heads,
                                               c->head_dim, PAGE, n_pages, c->layer_window, win_slots),
                     TN_OK);
    assert_int_equal(win.window, W);
    assert_true(win_slots < n_pages);
    float *a = run_forced(f, &plain, toks, T, n, 0);
    float *b = run_forced(f, &win, toks, T, n, 1);
    assert_memory_equal(a, b, sizeof *a * (size_t)n * V);
    /* the golden part against HF float64 */
    const int G = f->g.G;
    float *ref = calloc((size_t)(T + G - 1) * V, sizeof *ref);
    assert_non_null(ref);
    memcpy(ref, f->g.prompt_logits, sizeof *ref * (size_t)(T - 1) * V);
    memcpy(ref + (size_t)(T - 1) * V, f->g.gen_logits, sizeof *ref * (size_t)G * V);
    int32_t *forced = malloc(sizeof *forced * (size_t)(T + G - 1));
    assert_non_null(forced);
    memcpy(forced, f->g.prompt, sizeof *forced * (size_t)T);
    memcpy(forced + T, f->g.gen_ids, sizeof *forced * (size_t)(G - 1));
    float *g = run_forced(f, &win, forced, T, T + G - 1, 1);
    double e = et_rel_err(g, ref, (size_t)(T + G - 1) * V);
    print_message("window pool (window %d, page %d, %d of %d pages per window layer): "
                  "%d tokens bit-equal to the plain cache; golden %d tokens vs HF %.3g\n",
                  W, PAGE, win_slots, n_pages, n, T + G - 1, e);
    assert_true(e <= HF_TOL);
    /* every page and slot back */
    assert_int_equal(win.n_free, win.n_pages);
    assert_int_equal(win.n_win_free, win.n_win_slots);
    free(g), free(forced), free(ref), free(a), free(b), free(toks);
    tm_kv_cache_free(&plain);
    tm_kv_cache_free(&win);
}

/* Free greedy generation, three sequences decoded in one batch, through a
 * window pool sized for their windows only: the same tokens as
 * et_run_greedy's plain cache (tandem-generate's loop). */
static void window_pool_batch_greedy(void **state)
{
    et_family *f = *state;
    const tm_config *c = tm_model_config(f->m);
    const int W = fixture_window(c), T = f->g.T, V = f->g.V, N = 5 * W, S = 3;
    int32_t *want = calloc((size_t)N, sizeof *want);
    assert_non_null(want);
    assert_int_equal(et_run_greedy(f->m, &f->be, f->g.prompt, T, NULL, want, N), TN_OK);
    const int n_pages = S * ((T + N + PAGE - 1) / PAGE);
    /* each sequence's window (+ the page being written and one partial),
     * plus one prompt's worth while a sequence is prefilled */
    const int win_slots = S * (W / PAGE + 2) + (T + PAGE - 1) / PAGE;
    tm_kv_cache kv;
    assert_int_equal(tm_kv_cache_init_windowed(&kv, &f->be, KN_F32, c->n_layers, c->n_kv_heads,
                                               c->head_dim, PAGE, n_pages, c->layer_window, win_slots),
                     TN_OK);
    grow_seq s[3];
    int32_t *toks[3], got[3][256];
    int len[3];
    float *logits = calloc((size_t)S * V, sizeof *logits);
    assert_true(N <= 256 && logits);
    for (int i = 0; i < S; i++) {
        s[i] = (grow_seq){calloc((size_t)n_pages, sizeof(int32_t)), 0, n_pages};
        toks[i] = calloc((size_t)(T + N), sizeof(int32_t));
        assert_true(s[i].pages && toks[i]);
        memcpy(toks[i], f->g.prompt, sizeof(int32_t) * (size_t)T);
        /* sequences at different lengths: sequence i prefilled after i steps */
        len[i] = T;
        grow_to(&kv, &s[i], T);
        tm_seq_step st = {toks[i], T, 0, s[i].pages, s[i].n_pages};
        assert_int_equal(tm_forward(f->m, &kv, &st, 1, logits, NULL), TN_OK);
        got[i][0] = et_argmax(logits, V);
        toks[i][len[i]++] = got[i][0];
        tm_kv_window_trim(&kv, s[i].pages, s[i].n_pages, len[i] - 1);
    }
    for (int k = 1; k < N; k++) {
        tm_seq_step st[3];
        for (int i = 0; i < S; i++) {
            grow_to(&kv, &s[i], len[i]);
            st[i] = (tm_seq_step){toks[i] + len[i] - 1, 1, len[i] - 1, s[i].pages, s[i].n_pages};
        }
        assert_int_equal(tm_forward(f->m, &kv, st, S, logits, NULL), TN_OK);
        for (int i = 0; i < S; i++) {
            got[i][k] = et_argmax(logits + (size_t)i * V, V);
            toks[i][len[i]++] = got[i][k];
            tm_kv_window_trim(&kv, s[i].pages, s[i].n_pages, len[i] - 1);
        }
    }
    for (int i = 0; i < S; i++)
        assert_memory_equal(got[i], want, sizeof *want * (size_t)N);
    /* the footprint: each sequence holds its window's slots, not its length */
    int held = 0;
    for (int i = 0; i < S; i++)
        held += tm_kv_window_pages_for(&kv, len[i] - 1);
    assert_int_equal(kv.n_win_slots - kv.n_win_free, held);
    print_message("window pool batch of %d, %d greedy tokens each = the plain cache's; window "
                  "slots held %d (pages held %d)\n", S, N, held, kv.n_pages - kv.n_free);
    assert_true(held < kv.n_pages - kv.n_free);
    for (int i = 0; i < S; i++) {
        tm_kv_release_pages(&kv, s[i].pages, s[i].n_pages);
        free(s[i].pages);
        free(toks[i]);
    }
    assert_int_equal(kv.n_win_free, kv.n_win_slots);
    free(logits);
    free(want);
    tm_kv_cache_free(&kv);
}

/* A step that needs pages whose slots were given back is refused (not
 * read as garbage); allocation fails when the slots run out; a
 * copy-on-write copies the window layers' slot; sizes. */
static void window_pool_edges(void **state)
{
    et_family *f = *state;
    const tm_config *c = tm_model_config(f->m);
    const int W = fixture_window(c), T = f->g.T;
    tm_kv_cache kv;
    const int n_pages = 64, slots = 16;
    assert_int_equal(tm_kv_cache_init_windowed(&kv, &f->be, KN_F32, c->n_layers, c->n_kv_heads,
                                               c->head_dim, PAGE, n_pages, c->layer_window, slots),
                     TN_OK);
    int n_win_layers = 0;
    for (int l = 0; l < c->n_layers; l++)
        n_win_layers += c->layer_window[l] > 0;
    assert_true(n_win_layers > 0 && n_win_layers < c->n_layers);
    assert_int_equal(tm_kv_cache_bytes(&kv),
                     2 * tm_kv_page_bytes(&kv) *
                         (size_t)((c->n_layers - n_win_layers) * n_pages + n_win_layers * slots));
    /* slots run out before pages */
    int32_t pages[64];
    assert_int_equal(tm_kv_alloc_pages(&kv, slots + 1, pages), TN_ERR_NOMEM);
    assert_int_equal(kv.n_free, n_pages);
    const int n = W + 3 * PAGE + T;
    int32_t *toks = long_sequence(f, n);
    assert_true(tm_kv_pages_for(&kv, T) <= slots);
    /* fill a sequence to n tokens, trimming as it grows */
    grow_seq s = {pages, 0, 64};
    grow_to(&kv, &s, T);
    tm_seq_step st = {toks, T, 0, s.pages, s.n_pages};
    assert_int_equal(tm_forward(f->m, &kv, &st, 1, NULL, NULL), TN_OK);
    for (int p = T; p < n; p++) {
        tm_kv_window_trim(&kv, s.pages, s.n_pages, p);
        grow_to(&kv, &s, p + 1);
        st = (tm_seq_step){toks + p, 1, p, s.pages, s.n_pages};
        assert_int_equal(tm_forward(f->m, &kv, &st, 1, NULL, NULL), TN_OK);
    }
    tm_kv_window_trim(&kv, s.pages, s.n_pages, n);
    assert_true(kv.win_slot[s.pages[0]] < 0);
    /* re-running a position whose window starts in a given-back page */
    st = (tm_seq_step){toks + PAGE, 1, PAGE, s.pages, s.n_pages};
    assert_int_equal(tm_forward(f->m, &kv, &st, 1, NULL, NULL), TN_ERR_ARG);
    /* copy-on-write: a page with a slot onto a fresh one copies the slot's
     * rows; a page without one onto a page with one copies no window rows */
    int32_t fresh;
    assert_int_equal(tm_kv_alloc_pages(&kv, 1, &fresh), TN_OK);
    const int32_t last = s.pages[s.n_pages - 1];
    assert_int_equal(tm_kv_copy_page(&kv, fresh, last), TN_OK);
    for (int l = 0; l < c->n_layers; l++) {
        const size_t pb = tm_kv_page_bytes(&kv);
        const int32_t d = tm_kv_layer_windowed(&kv, l) ? kv.win_slot[fresh] : fresh;
        const int32_t src = tm_kv_layer_windowed(&kv, l) ? kv.win_slot[last] : last;
        assert_memory_equal((char *)kv.k[l] + (size_t)d * pb, (char *)kv.k[l] + (size_t)src * pb, pb);
        assert_memory_equal((char *)kv.v[l] + (size_t)d * pb, (char *)kv.v[l] + (size_t)src * pb, pb);
    }
    assert_int_equal(tm_kv_copy_page(&kv, fresh, s.pages[0]), TN_OK);
    tm_kv_release_pages(&kv, &fresh, 1);
    tm_kv_release_pages(&kv, s.pages, s.n_pages);
    assert_int_equal(kv.n_free, n_pages);
    assert_int_equal(kv.n_win_free, slots);
    /* without window layers a window pool is none */
    tm_kv_cache plain;
    int no_window[64] = {0};
    assert_int_equal(tm_kv_cache_init_windowed(&plain, &f->be, KN_F32, c->n_layers, c->n_kv_heads,
                                               c->head_dim, PAGE, 4, no_window, 2), TN_OK);
    assert_int_equal(plain.window, 0);
    assert_int_equal(tm_kv_window_trim(&plain, pages, 1, 1000), 0);
    assert_int_equal(tm_kv_window_pages_for(&plain, 9), 3);
    tm_kv_cache_free(&plain);
    assert_int_equal(tm_kv_cache_init_windowed(&plain, &f->be, KN_F32, c->n_layers, c->n_kv_heads,
                                               c->head_dim, PAGE, 4, c->layer_window, -1), TN_ERR_ARG);
    free(toks);
    tm_kv_cache_free(&kv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate_setup_teardown(window_pool_equals_plain_cache, et_family_setup,
                                                 et_family_teardown, &gpt_oss),
        cmocka_unit_test_prestate_setup_teardown(window_pool_batch_greedy, et_family_setup,
                                                 et_family_teardown, &gpt_oss),
        cmocka_unit_test_prestate_setup_teardown(window_pool_edges, et_family_setup, et_family_teardown,
                                                 &gpt_oss),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
