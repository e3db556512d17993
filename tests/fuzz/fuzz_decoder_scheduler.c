/* libFuzzer target: the decoder's continuous-batching scheduler
 * (decoder/scheduler.c) driven by the router's messages as the decoder
 * receives them: DecodeAssignment frames decoded with protobuf-c (then the
 * decoder's own checks: sampling finite, sizes within int32), StartDecode,
 * Cancel (release or not), plus the decoder's own events: a KV transfer
 * arriving, decode steps with arbitrary sampled tokens, admitting waiting
 * requests. A small cache (24 pages of 4 tokens, batch 4, context 64)
 * keeps every path reachable.
 *
 * Frame: 1 op byte (low 3 bits), a little-endian 16-bit length, the
 * payload (a packed message, or bytes the op reads). Properties after every
 * frame: pages are conserved (free + held = total, no page held twice, ids
 * in range), no sequence holds more than its worst case, a step's batch
 * holds every running sequence except those preemption took (pages freed
 * at once, reported and removed as the decoder does) or that wait for a
 * newer one's KV, at most max_batch are admitted, and finished sequences
 * end by max_tokens or a stop id. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "decoder/scheduler.h"
#include "proto/tandem.pb-c.h"
#include "tests/fuzz/harness.h"

#define N_PAGES 24
#define PAGE 4
#define BATCH 4
#define CONTEXT 64

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

static void check(const sched *s)
{
    static int owner[N_PAGES];   /* holders of each page (free: -1) */
    memset(owner, 0, sizeof owner);
    FZ_CHECK(s->n_free >= 0 && s->n_free <= N_PAGES);
    for (int i = 0; i < s->n_free; i++) {
        int p = s->free_pages[i];
        FZ_CHECK(p >= 0 && p < N_PAGES && !owner[p] && s->page_refs[p] == 0);
        owner[p] = -1;
    }
    int held = 0, admitted = 0, running = 0;
    for (int i = 0; i < s->n_seqs; i++) {
        const sched_seq *q = s->seqs[i];
        FZ_CHECK(q->n_pages >= 0 && q->n_pages <= q->max_pages);
        FZ_CHECK(q->state != SEQ_PREEMPTED); /* reported and removed in the step */
        for (int k = 0; k < q->n_pages; k++) {
            int p = q->pages[k];
            FZ_CHECK(p >= 0 && p < N_PAGES && owner[p] >= 0);
            held += owner[p] == 0; /* shared pages (branches) count once */
            owner[p]++;
        }
        if (q->state == SEQ_WAITING) {
            FZ_CHECK(q->n_pages == 0);
        } else {
            admitted++;
        }
        if (q->state == SEQ_RUNNING) {
            running++;
            FZ_CHECK(q->n_cached + 1 <= q->max_pages * PAGE);
            FZ_CHECK(q->n_generated < q->max_tokens);
        }
        if (q->state == SEQ_FINISHED)
            FZ_CHECK(q->finish == SCHED_FINISH_STOP ||
                     (q->finish == SCHED_FINISH_LENGTH && q->n_generated >= q->max_tokens));
    }
    FZ_CHECK(s->n_free + held == N_PAGES);
    for (int p = 0; p < N_PAGES; p++)
        FZ_CHECK(owner[p] < 0 || owner[p] == s->page_refs[p]);
    FZ_CHECK(sched_pages_available(s) == s->n_free);
    FZ_CHECK(admitted <= BATCH && running == sched_running(s));
}

/* The decoder's checks on an assignment before the scheduler sees it. */
/* Token ids the penalties accept (the fuzzed prompts' ids are checked against it). */
#define FUZZ_VOCAB 1000

static void on_assignment(sched *s, const Tandem__V1__DecodeAssignment *a)
{
    if (a->prompt_len > INT32_MAX || a->max_tokens > INT32_MAX ||
        a->n_stop_token_ids > INT32_MAX || a->n_penalty_prompt > INT32_MAX)
        return;
    char err[256];
    worker_sampling ws;
    if (worker_sampling_from_wire(&ws, a->sampling, a->penalty_prompt, (int)a->n_penalty_prompt,
                                  FUZZ_VOCAB, err, sizeof err) != TN_OK)
        return;
    sched_request req = {
        .id = a->request_id,
        .prompt_len = (int)a->prompt_len,
        .max_tokens = (int)a->max_tokens,
        .stop_ids = a->stop_token_ids,
        .n_stop_ids = (int)a->n_stop_token_ids,
        .ws = &ws,
        .n_branches = a->n_branch_ids < BATCH ? (int)a->n_branch_ids : 0,
    };
    int had = sched_find(s, a->request_id) != NULL;
    sched_seq *q = NULL;
    int st = sched_submit(s, &req, &q);
    worker_sampling_free(&ws); /* zeroed when the sequence took it */
    if (had)
        FZ_CHECK(st == TN_ERR_ARG);
    /* n > 1: the other choices join as branches sharing the prompt's pages */
    for (size_t i = 0; q && i < a->n_branch_ids && i < BATCH; i++) {
        worker_sampling bws;
        if (worker_sampling_from_wire(&bws, a->sampling, a->penalty_prompt,
                                      (int)a->n_penalty_prompt, FUZZ_VOCAB, err,
                                      sizeof err) != TN_OK)
            break;
        sched_seq *b = NULL;
        if (sched_add_branch(s, q, a->branch_ids[i], &bws, &b) == 0)
            FZ_CHECK(b && (b->state == SEQ_WAITING || b->n_pages == q->n_pages));
        worker_sampling_free(&bws);
    }
    if (st == SCHED_ADMITTED)
        FZ_CHECK(q && q->state == SEQ_RESERVED && q->n_pages == (req.prompt_len + PAGE - 1) / PAGE);
    else if (st == SCHED_QUEUED)
        FZ_CHECK(q && q->state == SEQ_WAITING);
    else
        FZ_CHECK(q == NULL);
}

static sched_seq *nth(const sched *s, uint8_t k)
{
    return s->n_seqs ? s->seqs[k % s->n_seqs] : NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sched s;
    FZ_CHECK(sched_init(&s, N_PAGES, PAGE, BATCH, CONTEXT) == 0);
    const uint8_t *p = data, *end = data + size;
    while (p < end) {
        uint8_t op = *p++ & 7;
        size_t len = fz_take(&p, end, 2);
        if (len > (size_t)(end - p))
            len = (size_t)(end - p);
        const uint8_t *pl = p;
        p += len;
        sched_seq *q;
        switch (op) {
        case 0: {
            Tandem__V1__DecodeAssignment *a = tandem__v1__decode_assignment__unpack(NULL, len, pl);
            if (a) {
                on_assignment(&s, a);
                tandem__v1__decode_assignment__free_unpacked(a, NULL);
            }
            break;
        }
        case 1: { /* StartDecode: a reserved sequence gets its first token */
            Tandem__V1__StartDecode *m = tandem__v1__start_decode__unpack(NULL, len, pl);
            if (m) {
                q = sched_find(&s, m->request_id);
                if (q && !q->cancelled && q->state == SEQ_RESERVED && m->first_token >= 0)
                    sched_start(&s, q, m->first_token, m->rng_state);
                if (q && q->state == SEQ_FINISHED)
                    sched_remove(&s, q);
                tandem__v1__start_decode__free_unpacked(m, NULL);
            }
            break;
        }
        case 2: { /* Cancel, as the decoder handles it */
            Tandem__V1__Cancel *c = tandem__v1__cancel__unpack(NULL, len, pl);
            if (c) {
                q = sched_find(&s, c->request_id);
                if (q && q->state == SEQ_RESERVED && !q->kv_arrived && !c->release_kv)
                    q->cancelled = 1;
                else if (q)
                    sched_remove(&s, q);
                tandem__v1__cancel__free_unpacked(c, NULL);
            }
            break;
        }
        case 3: /* a KV transfer notice: complete, or the end of a cancelled one */
            if (len && (q = nth(&s, pl[0])) && q->state == SEQ_RESERVED) {
                if (q->cancelled) {
                    sched_remove(&s, q);
                } else {
                    sched_kv_arrived(&s, q);
                    if (q->state == SEQ_FINISHED)
                        sched_remove(&s, q);
                }
            }
            break;
        case 4: { /* a decode step with the payload as sampled tokens */
            sched_seq *batch[BATCH];
            int before = sched_running(&s);
            uint64_t preempted = s.preemptions;
            int n = sched_form_batch(&s, batch, BATCH);
            FZ_CHECK(n <= sched_running(&s));
            FZ_CHECK((uint64_t)(before - sched_running(&s)) == s.preemptions - preempted);
            for (int i = 0; i < n; i++)
                FZ_CHECK(batch[i]->state == SEQ_RUNNING &&
                         batch[i]->n_pages * PAGE >= batch[i]->n_cached + 1);
            while ((q = sched_next_preempted(&s)) != NULL) {
                FZ_CHECK(q->n_pages == 0);
                sched_remove(&s, q);
            }
            for (int i = 0; i < n; i++) {
                int32_t tok = len ? (int32_t)pl[i % len] : 0;
                sched_token(&s, batch[i], tok);
            }
            for (int i = 0; i < n; i++)
                if (batch[i]->state == SEQ_FINISHED)
                    sched_remove(&s, batch[i]);
            break;
        }
        case 5: {
            sched_seq *adm[BATCH];
            int n = sched_admit_waiting(&s, adm, BATCH);
            for (int i = 0; i < n; i++)
                FZ_CHECK(adm[i]->state == SEQ_RESERVED);
            break;
        }
        case 6: /* the router forgets the decoder: drop everything not awaiting KV */
            for (int i = s.n_seqs - 1; i >= 0; i--)
                if (!(s.seqs[i]->state == SEQ_RESERVED && !s.seqs[i]->kv_arrived))
                    sched_remove(&s, s.seqs[i]);
            break;
        default:
            if (len && (q = nth(&s, pl[0])))
                sched_remove(&s, q);
            break;
        }
        check(&s);
    }
    sched_free(&s);
    return 0;
}
