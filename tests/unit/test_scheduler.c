/* The decoder's continuous-batching scheduler: admission by use, paged KV
 * accounting, preemption when the pool runs dry, sequences joining and
 * leaving the batch, stop conditions. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "decoder/scheduler.h"
#include "engine/kv_cache.h"

static sched_request req(const char *id, int prompt, int max_tokens)
{
    sched_request r = {.id = id, .prompt_len = prompt, .max_tokens = max_tokens};
    return r;
}

static void pages_needed_counts_prompt_plus_fed_tokens(void **state)
{
    (void)state;
    /* 10 prompt + 7 outputs: 16 tokens ever cached (the last output is never fed). */
    assert_int_equal(tm_kv_pages_needed(10, 7, 4), 4);
    assert_int_equal(tm_kv_pages_needed(10, 8, 4), 5);
    assert_int_equal(tm_kv_pages_needed(1, 1, 16), 1);
    assert_int_equal(tm_kv_pages_needed(16, 1, 16), 1);
    assert_int_equal(tm_kv_pages_needed(16, 2, 16), 2);
    assert_int_equal(tm_kv_pages_needed(0, 2, 16), 0);
}

static void admission_allocates_only_the_prompt_pages(void **state)
{
    (void)state;
    sched s;
    assert_int_equal(sched_init(&s, 10, 4, 8, 1000), 0);
    sched_request r = req("a", 9, 8); /* 16 tokens -> 4 pages at most, 3 for the prompt */
    sched_seq *q;
    assert_int_equal(sched_submit(&s, &r, &q), SCHED_ADMITTED);
    assert_int_equal(q->state, SEQ_RESERVED);
    assert_int_equal(q->n_pages, 3);
    assert_int_equal(q->max_pages, 4);
    assert_int_equal(q->pages[0], 0);
    assert_int_equal(q->pages[1], 1);
    assert_int_equal(q->pages[2], 2);
    assert_int_equal(s.n_free, 7);
    assert_int_equal(sched_pages_available(&s), 7); /* nothing promised beyond use */
    sched_remove(&s, q);
    assert_int_equal(s.n_free, 10);
    sched_free(&s);
}

static void admission_keeps_a_page_of_headroom_per_sequence(void **state)
{
    (void)state;
    sched s;
    assert_int_equal(sched_init(&s, 64, 4, 64, 100000), 0);
    /* one page per admitted sequence plus the watermark, 64 / 32 = 2 */
    assert_int_equal(sched_admit_headroom(&s, 1), 3);
    assert_int_equal(sched_admit_headroom(&s, 5), 7);
    sched_seq *q;
    char id[16];
    int admitted = 0;
    /* prompts of 7 pages: admitted while free - 7 >= admitted + 1 + 2 */
    for (int i = 0; i < 9; i++) {
        snprintf(id, sizeof id, "s%d", i);
        sched_request r = req(id, 28, 100); /* worst case 32 pages: fits alone */
        int st = sched_submit(&s, &r, &q);
        assert_true(st == SCHED_ADMITTED || st == SCHED_QUEUED);
        admitted += st == SCHED_ADMITTED;
    }
    /* 64 -> 57 -> 50 -> 43 -> 36 -> 29 -> 22 -> 15 (>= 8+2 after 8? 15-7=8 < 10: no) */
    assert_int_equal(admitted, 7);
    assert_int_equal(s.n_free, 64 - 7 * 7);
    assert_int_equal(sched_waiting(&s), 2);
    sched_free(&s);
}

static void request_that_cannot_fit_now_waits_fifo(void **state)
{
    (void)state;
    sched s;
    assert_int_equal(sched_init(&s, 8, 4, 8, 1000), 0);
    sched_seq *a, *b, *c;
    sched_request ra = req("a", 12, 9);  /* 3 prompt pages */
    sched_request rb = req("b", 16, 9);  /* 4 prompt pages: 5 free - 4 < 2 of headroom */
    sched_request rc = req("c", 2, 3);   /* 1 page: would fit, but b is ahead of it */
    assert_int_equal(sched_submit(&s, &ra, &a), SCHED_ADMITTED);
    assert_int_equal(sched_submit(&s, &rb, &b), SCHED_QUEUED);
    assert_int_equal(sched_submit(&s, &rc, &c), SCHED_QUEUED);
    assert_int_equal(sched_waiting(&s), 2);
    sched_seq *adm[4];
    assert_int_equal(sched_admit_waiting(&s, adm, 4), 0); /* head b still blocks */
    sched_remove(&s, a);
    assert_int_equal(sched_admit_waiting(&s, adm, 4), 2);
    assert_ptr_equal(adm[0], b);
    assert_ptr_equal(adm[1], c);
    assert_int_equal(b->state, SEQ_RESERVED);
    assert_int_equal(c->state, SEQ_RESERVED);
    assert_int_equal(sched_pages_available(&s), 8 - 4 - 1);
    sched_remove(&s, c);
    sched_remove(&s, b);
    assert_int_equal(s.n_free, 8);
    sched_free(&s);
}

static void request_larger_than_the_cache_is_rejected(void **state)
{
    (void)state;
    sched s;
    assert_int_equal(sched_init(&s, 4, 4, 8, 1000), 0);
    sched_seq *q = (sched_seq *)1;
    sched_request big = req("big", 16, 2); /* 17 tokens: 5 pages > 4 */
    assert_int_equal(sched_submit(&s, &big, &q), TN_ERR_NEVER_FITS);
    assert_null(q);
    assert_int_equal(s.n_seqs, 0);
    sched_request fits = req("fits", 16, 1);
    assert_int_equal(sched_submit(&s, &fits, &q), SCHED_ADMITTED);
    sched_request toolong = req("long", 900, 200);
    assert_int_equal(sched_submit(&s, &toolong, &q), TN_ERR_TOO_LONG);
    sched_request dup = req("fits", 1, 1);
    assert_int_equal(sched_submit(&s, &dup, &q), TN_ERR_ARG);
    sched_request zero = req("zero", 1, 0);
    assert_int_equal(sched_submit(&s, &zero, &q), TN_ERR_ARG);
    assert_int_equal(s.n_seqs, 1);
    sched_free(&s);
}

static void sequence_runs_once_kv_and_first_token_arrive(void **state)
{
    (void)state;
    sched s;
    assert_int_equal(sched_init(&s, 16, 4, 8, 1000), 0);
    sched_seq *q, *batch[8];
    sched_request r = req("a", 3, 4);
    assert_int_equal(sched_submit(&s, &r, &q), SCHED_ADMITTED);
    assert_int_equal(sched_form_batch(&s, batch, 8), 0);
    sched_start(&s, q, 42, 7);
    assert_int_equal(q->state, SEQ_RESERVED); /* KV not there yet */
    assert_int_equal(sched_form_batch(&s, batch, 8), 0);
    sched_kv_arrived(&s, q);
    assert_int_equal(q->state, SEQ_RUNNING);
    assert_int_equal(q->n_cached, 3);
    assert_int_equal(q->next_token, 42);
    assert_int_equal(q->rng, 7);
    /* step 1 feeds 42 at position 3: still page 0 */
    assert_int_equal(sched_form_batch(&s, batch, 8), 1);
    assert_int_equal(q->n_pages, 1);
    sched_token(&s, q, 43);
    /* step 2 feeds 43 at position 4: needs a second page */
    assert_int_equal(sched_form_batch(&s, batch, 8), 1);
    assert_int_equal(q->n_pages, 2);
    sched_token(&s, q, 44);
    assert_int_equal(q->state, SEQ_RUNNING);
    assert_int_equal(sched_form_batch(&s, batch, 8), 1);
    sched_token(&s, q, 45);
    /* 42 (first), 43, 44, 45 = max_tokens 4 */
    assert_int_equal(q->state, SEQ_FINISHED);
    assert_int_equal(q->finish, SCHED_FINISH_LENGTH);
    assert_int_equal(q->n_generated, 4);
    assert_int_equal(q->n_cached, 6);
    assert_true(q->n_pages <= q->max_pages);
    assert_int_equal(sched_form_batch(&s, batch, 8), 0);
    sched_remove(&s, q);
    assert_int_equal(s.n_free, 16);
    sched_free(&s);
}

static void stop_ids_end_a_sequence_even_on_the_first_token(void **state)
{
    (void)state;
    sched s;
    assert_int_equal(sched_init(&s, 16, 4, 8, 1000), 0);
    int32_t stops[2] = {2, 99};
    sched_seq *q, *batch[8];
    sched_request r = req("a", 3, 10);
    r.stop_ids = stops;
    r.n_stop_ids = 2;
    assert_int_equal(sched_submit(&s, &r, &q), SCHED_ADMITTED);
    sched_kv_arrived(&s, q);
    sched_start(&s, q, 99, 0);
    assert_int_equal(q->state, SEQ_FINISHED);
    assert_int_equal(q->finish, SCHED_FINISH_STOP);
    assert_int_equal(sched_form_batch(&s, batch, 8), 0);
    sched_remove(&s, q);

    sched_request r2 = req("b", 3, 10);
    r2.stop_ids = stops;
    r2.n_stop_ids = 2;
    assert_int_equal(sched_submit(&s, &r2, &q), SCHED_ADMITTED);
    sched_start(&s, q, 5, 0);
    sched_kv_arrived(&s, q);
    assert_int_equal(sched_form_batch(&s, batch, 8), 1);
    sched_token(&s, q, 7);
    assert_int_equal(q->state, SEQ_RUNNING);
    assert_int_equal(sched_form_batch(&s, batch, 8), 1);
    sched_token(&s, q, 2);
    assert_int_equal(q->finish, SCHED_FINISH_STOP);
    assert_int_equal(q->n_generated, 3);
    sched_remove(&s, q);

    sched_request one = req("c", 3, 1);
    assert_int_equal(sched_submit(&s, &one, &q), SCHED_ADMITTED);
    sched_kv_arrived(&s, q);
    sched_start(&s, q, 5, 0);
    assert_int_equal(q->finish, SCHED_FINISH_LENGTH);
    sched_remove(&s, q);
    assert_int_equal(s.n_free, 16);
    sched_free(&s);
}

/* Sequences of different lengths join and leave; the batch at every step
 * is exactly the set of running sequences, checked against a hand count. */
static void sequences_join_and_leave_every_step(void **state)
{
    (void)state;
    sched s;
    assert_int_equal(sched_init(&s, 64, 2, 8, 1000), 0);
    const int max_tokens[3] = {3, 5, 2};
    const int join_step[3] = {0, 1, 2};
    sched_seq *q[3] = {0}, *batch[8];
    char ids[3][4] = {"s0", "s1", "s2"};
    /* s0 runs steps 0-1 (first token + 2), s1 steps 1-4, s2 step 2 only. */
    int expect_batch[] = {1, 2, 2, 1, 1, 0};
    for (int step = 0; step < 6; step++) {
        for (int i = 0; i < 3; i++)
            if (join_step[i] == step) {
                sched_request r = req(ids[i], 4, max_tokens[i]);
                assert_int_equal(sched_submit(&s, &r, &q[i]), SCHED_ADMITTED);
                sched_kv_arrived(&s, q[i]);
                sched_start(&s, q[i], 100 + i, 0);
            }
        int n = sched_form_batch(&s, batch, 8);
        assert_int_equal(n, expect_batch[step]);
        for (int b = 0; b < n; b++) {
            /* The page table always covers the position being written. */
            assert_true(batch[b]->n_pages * 2 >= batch[b]->n_cached + 1);
            sched_token(&s, batch[b], 7);
        }
        for (int i = 0; i < 3; i++)
            if (q[i] && q[i]->state == SEQ_FINISHED) {
                assert_int_equal(q[i]->n_generated, max_tokens[i]);
                sched_remove(&s, q[i]);
                q[i] = NULL;
            }
    }
    assert_int_equal(s.n_seqs, 0);
    assert_int_equal(s.n_free, 64);
    sched_free(&s);
}

static void max_batch_bounds_admission(void **state)
{
    (void)state;
    sched s;
    assert_int_equal(sched_init(&s, 100, 4, 2, 1000), 0);
    sched_seq *a, *b, *c, *adm[2];
    sched_request ra = req("a", 1, 1), rb = req("b", 1, 1), rc = req("c", 1, 1);
    assert_int_equal(sched_submit(&s, &ra, &a), SCHED_ADMITTED);
    assert_int_equal(sched_submit(&s, &rb, &b), SCHED_ADMITTED);
    assert_int_equal(sched_submit(&s, &rc, &c), SCHED_QUEUED);
    sched_remove(&s, a);
    assert_int_equal(sched_admit_waiting(&s, adm, 2), 1);
    assert_ptr_equal(adm[0], c);
    sched_free(&s);
}

static void removing_a_waiting_or_reserved_sequence_frees_everything(void **state)
{
    (void)state;
    sched s;
    assert_int_equal(sched_init(&s, 6, 4, 8, 1000), 0);
    sched_seq *a, *b;
    sched_request ra = req("a", 10, 10), rb = req("b", 10, 10);
    assert_int_equal(sched_submit(&s, &ra, &a), SCHED_ADMITTED);
    assert_int_equal(sched_submit(&s, &rb, &b), SCHED_QUEUED);
    sched_remove(&s, b);
    assert_int_equal(sched_waiting(&s), 0);
    sched_remove(&s, a);
    assert_int_equal(s.n_free, 6);
    assert_null(sched_find(&s, "a"));
    sched_free(&s);
}

/* Runs a and b (both admitted, KV and first token in). */
static void start_both(sched *s, sched_seq *a, sched_seq *b)
{
    sched_kv_arrived(s, a);
    sched_start(s, a, 10, 0);
    sched_kv_arrived(s, b);
    sched_start(s, b, 20, 0);
}

/* Pages of 2 tokens, a pool of 4: a and b fit at admission (one page each,
 * two free: one per sequence to grow into) but not as they grow. When a
 * needs its third page, b, admitted later, loses its pages at once and
 * leaves the batch; a runs on alone. */
static void dry_pool_preempts_the_latest_admitted(void **state)
{
    (void)state;
    sched s;
    assert_int_equal(sched_init(&s, 4, 2, 8, 1000), 0);
    sched_seq *a, *b, *batch[8];
    sched_request ra = req("a", 2, 6), rb = req("b", 2, 6); /* worst case 7 tokens: 4 pages */
    assert_int_equal(sched_submit(&s, &ra, &a), SCHED_ADMITTED);
    assert_int_equal(sched_submit(&s, &rb, &b), SCHED_ADMITTED);
    start_both(&s, a, b);
    /* step 1 writes position 2: a new page each; step 2 position 3 */
    for (int step = 0; step < 2; step++) {
        assert_int_equal(sched_form_batch(&s, batch, 8), 2);
        sched_token(&s, a, 11);
        sched_token(&s, b, 21);
    }
    assert_int_equal(s.n_free, 0);
    assert_null(sched_next_preempted(&s));
    /* step 3 writes position 4: a needs a page, none is free */
    assert_int_equal(sched_form_batch(&s, batch, 8), 1);
    assert_ptr_equal(batch[0], a);
    assert_int_equal(a->n_pages, 3);
    assert_int_equal(b->state, SEQ_PREEMPTED);
    assert_int_equal(b->n_pages, 0);
    assert_int_equal(s.preemptions, 1);
    assert_int_equal(s.n_free, 1); /* b's two pages freed, one went to a */
    assert_ptr_equal(sched_next_preempted(&s), b);
    assert_int_equal(b->n_generated, 3); /* what the router has streamed */
    sched_remove(&s, b);
    assert_null(sched_next_preempted(&s));
    /* a alone always fits: it finishes without another preemption */
    while (a->state == SEQ_RUNNING) {
        assert_int_equal(sched_form_batch(&s, batch, 8), 1);
        sched_token(&s, a, 12);
    }
    assert_int_equal(a->finish, SCHED_FINISH_LENGTH);
    assert_int_equal(s.preemptions, 1);
    sched_remove(&s, a);
    assert_int_equal(s.n_free, 4);
    sched_free(&s);
}

/* The sequence needing the page is itself the latest admitted: it is the
 * one preempted, and the older one keeps running. */
static void latest_sequence_needing_a_page_preempts_itself(void **state)
{
    (void)state;
    sched s;
    assert_int_equal(sched_init(&s, 4, 2, 8, 1000), 0);
    sched_seq *a, *b, *batch[8];
    sched_request ra = req("a", 1, 7), rb = req("b", 2, 6);
    assert_int_equal(sched_submit(&s, &ra, &a), SCHED_ADMITTED);
    assert_int_equal(sched_submit(&s, &rb, &b), SCHED_ADMITTED);
    start_both(&s, a, b);
    /* b takes a page at step 1 (position 2), a at step 2 (position 2) */
    for (int step = 0; step < 2; step++) {
        assert_int_equal(sched_form_batch(&s, batch, 8), 2);
        sched_token(&s, a, 11);
        sched_token(&s, b, 21);
    }
    assert_int_equal(s.n_free, 0);
    /* step 3: a writes position 3 (its page), b position 4 (none left) */
    assert_int_equal(sched_form_batch(&s, batch, 8), 1);
    assert_ptr_equal(batch[0], a);
    assert_int_equal(b->state, SEQ_PREEMPTED);
    assert_int_equal(s.n_free, 2);
    sched_remove(&s, b);
    sched_remove(&s, a);
    assert_int_equal(s.n_free, 4);
    sched_free(&s);
}

/* n = 3: two branches share the leader's prompt pages (10 tokens in pages
 * of 4: 3 pages, the last one half full). Each runs once the leader's KV
 * and its own first token (drawn by the prefill) are in. Each writer of the
 * shared last page takes its own copy first (copy-on-write) until one
 * holder is left, which writes in place: the leader and the first branch
 * copy, the second keeps the page. Full pages stay shared. Pages return to
 * the pool only when no sequence holds them. */
static void branches_share_prompt_pages_copy_on_write(void **state)
{
    (void)state;
    sched s;
    assert_int_equal(sched_init(&s, 16, 4, 8, 1000), 0);
    sched_request r = req("lead", 10, 4);
    r.n_branches = 2;
    sched_seq *a, *b1, *b2, *batch[8];
    assert_int_equal(sched_submit(&s, &r, &a), SCHED_ADMITTED);
    worker_sampling ws1 = {.top_logprobs = -1}, ws2 = {.top_logprobs = -1};
    assert_int_equal(sched_add_branch(&s, a, "br1", &ws1, &b1), 0);
    assert_int_equal(sched_add_branch(&s, a, "br2", &ws2, &b2), 0);
    sched_seq *dup = (sched_seq *)1;
    assert_int_equal(sched_add_branch(&s, a, "br1", &ws1, &dup), TN_ERR_ARG);
    assert_null(dup);
    assert_int_equal(s.n_free, 13);             /* 3 pages, held three times */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(b1->pages[i], a->pages[i]);
        assert_int_equal(s.page_refs[a->pages[i]], 3);
    }
    assert_int_equal(b1->state, SEQ_RESERVED);
    sched_start(&s, b1, 60, 111);              /* its first token before the KV */
    assert_int_equal(b1->state, SEQ_RESERVED);
    sched_kv_arrived(&s, a);
    assert_int_equal(b1->state, SEQ_RUNNING);  /* the leader's KV is its KV */
    assert_int_equal(b2->state, SEQ_RESERVED); /* waits for its first token */
    assert_int_equal(b1->n_cached, 10);
    sched_start(&s, a, 50, 9);
    sched_start(&s, b2, 70, 222);
    assert_int_equal(a->state, SEQ_RUNNING);
    assert_int_equal(b2->state, SEQ_RUNNING);
    assert_int_equal(b1->next_token, 60);
    assert_int_equal(b1->n_generated, 1);
    assert_int_equal(b1->rng, 111);
    int32_t shared_last = a->pages[2];
    assert_int_equal(sched_form_batch(&s, batch, 8), 3);
    int n_copies;
    const int32_t *cp = sched_take_copies(&s, &n_copies);
    assert_int_equal(n_copies, 2);
    assert_int_equal(cp[0], shared_last);
    assert_int_equal(cp[1], a->pages[2]);
    assert_int_equal(cp[2], shared_last);
    assert_int_equal(cp[3], b1->pages[2]);
    assert_int_equal(b2->pages[2], shared_last);
    assert_int_equal(s.page_refs[shared_last], 1);
    assert_int_equal(s.page_refs[a->pages[0]], 3); /* full pages stay shared */
    assert_int_equal(s.n_free, 11);
    sched_token(&s, a, 51);
    sched_token(&s, b1, 61);
    sched_token(&s, b2, 71);
    assert_int_equal(b1->n_generated, 2);
    assert_int_equal(b1->n_cached, 11);
    /* the next step: nobody shares a written page any more */
    assert_int_equal(sched_form_batch(&s, batch, 8), 3);
    sched_take_copies(&s, &n_copies);
    assert_int_equal(n_copies, 0);
    sched_remove(&s, a);
    assert_int_equal(s.page_refs[b1->pages[0]], 2);
    sched_remove(&s, b1);
    sched_remove(&s, b2);
    assert_int_equal(s.n_free, 16);
    sched_free(&s);
}

/* A leader still waiting for room keeps its branches waiting; admission
 * counts the whole group (here 3 sequences of headroom) and admits the
 * branches with it; removed before it runs, it takes them along. */
static void branches_wait_and_are_admitted_with_their_leader(void **state)
{
    (void)state;
    sched s;
    assert_int_equal(sched_init(&s, 8, 4, 8, 1000), 0);
    sched_seq *x, *a, *b, *adm[4];
    sched_request rx = req("x", 16, 4), ra = req("a", 8, 4);
    ra.n_branches = 1;
    assert_int_equal(sched_submit(&s, &rx, &x), SCHED_ADMITTED);  /* 4 free */
    /* a: 2 prompt pages; 4 - 2 = 2 < 3, the headroom for x, a and b (alone,
     * a would have fitted: 2 for x and a) */
    assert_int_equal(sched_admit_headroom(&s, 2), 2);
    assert_int_equal(sched_submit(&s, &ra, &a), SCHED_QUEUED);
    worker_sampling ws = {.top_logprobs = -1};
    assert_int_equal(sched_add_branch(&s, a, "b", &ws, &b), 0);
    assert_int_equal(b->state, SEQ_WAITING);
    assert_int_equal(sched_waiting(&s), 2);
    sched_remove(&s, x);
    assert_int_equal(sched_admit_waiting(&s, adm, 4), 1); /* the leader; b with it */
    assert_ptr_equal(adm[0], a);
    assert_int_equal(b->state, SEQ_RESERVED);
    assert_int_equal(b->pages[1], a->pages[1]);
    /* the leader leaves before it ran: its branch (which nothing can start
     * any more) goes with it */
    sched_remove(&s, a);
    assert_int_equal(s.n_seqs, 0);
    assert_int_equal(s.n_free, 8);
    sched_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pages_needed_counts_prompt_plus_fed_tokens),
        cmocka_unit_test(admission_allocates_only_the_prompt_pages),
        cmocka_unit_test(admission_keeps_a_page_of_headroom_per_sequence),
        cmocka_unit_test(dry_pool_preempts_the_latest_admitted),
        cmocka_unit_test(latest_sequence_needing_a_page_preempts_itself),
        cmocka_unit_test(branches_share_prompt_pages_copy_on_write),
        cmocka_unit_test(branches_wait_and_are_admitted_with_their_leader),
        cmocka_unit_test(request_that_cannot_fit_now_waits_fifo),
        cmocka_unit_test(request_larger_than_the_cache_is_rejected),
        cmocka_unit_test(sequence_runs_once_kv_and_first_token_arrive),
        cmocka_unit_test(stop_ids_end_a_sequence_even_on_the_first_token),
        cmocka_unit_test(sequences_join_and_leave_every_step),
        cmocka_unit_test(max_batch_bounds_admission),
        cmocka_unit_test(removing_a_waiting_or_reserved_sequence_frees_everything),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
