/* The decoder's continuous-batching scheduler: which sequences are in the
 * running batch, and which KV pages each one holds. It knows nothing about
 * the model; decoder_main.c runs the forward pass over the batch it forms.
 *
 * Admission by use. A request is admitted when its prompt's pages are free
 * and, beside the sequences already admitted, at least
 * sched_admit_headroom pages stay free after them: one per admitted
 * sequence (each can take its next page without touching anyone) plus a
 * watermark of n_pages / SCHED_WATERMARK_DIV. Only the prompt's pages are
 * allocated at admission (the prefiller writes the prompt's KV into them);
 * a running sequence takes one more page whenever its next token starts
 * one. Requests that do not fit now wait in FIFO order (the head blocks the
 * rest, so a large request is not starved by small ones); one whose worst
 * case (prompt + max_tokens) is larger than the whole cache is rejected at
 * once, so a sequence alone always fits.
 *
 * Preemption. When a running sequence needs a page and none is free, the
 * running sequence admitted last is preempted: its pages are freed at
 * once and it becomes SEQ_PREEMPTED; the decoder tells the router
 * (Preempted), which places it again with prompt + the tokens streamed so
 * far (re-prefill), then forgets it. The sequence needing the page may be
 * that one itself; it waits a step instead when a sequence admitted after
 * it is still waiting for its KV (that one becomes the victim once it
 * runs). The oldest sequence is never preempted while others run, so the
 * batch always progresses.
 *
 * Branches (n > 1, best_of). A request's other choices join it as branches
 * (sched_add_branch) that share its prompt's pages: pages are reference
 * counted, and a step that writes into a page another sequence also holds
 * gets a private copy of it first (copy-on-write: sched_take_copies lists
 * the copies the caller makes before the step): only the prompt's last,
 * partly filled page is ever copied. The prefill samples every branch's
 * first token from the prompt's logits with the branch's own generator; a
 * branch runs once the leader's KV has arrived and its own first token
 * (sched_start) has. Admission counts a request's branches as sequences;
 * once running every branch is a sequence of its own (finished, cancelled
 * or preempted alone).
 *
 * Life of a sequence: WAITING -> RESERVED (prompt pages allocated, waiting
 * for its KV transfer and the first token) -> RUNNING (in every step's
 * batch) -> FINISHED (stop token or max_tokens) or PREEMPTED (pages gone).
 * sched_remove releases its pages at any point. */
#ifndef TANDEM_DECODER_SCHEDULER_H
#define TANDEM_DECODER_SCHEDULER_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/sampling.h"
#include "common/status.h"
#include "engine/kv_cache.h"
#include "worker/worker_sampling.h"

#define SCHED_MAX_ID 64

typedef enum {
    SEQ_WAITING = 0,
    SEQ_RESERVED = 1,
    SEQ_RUNNING = 2,
    SEQ_FINISHED = 3,
    SEQ_PREEMPTED = 4,        /* its pages were taken; the router re-places it */
} sched_seq_state;

/* The admission watermark: n_pages / SCHED_WATERMARK_DIV pages kept free
 * beyond one per admitted sequence (vLLM keeps 1%; a few percent here,
 * where pools are small). */
#define SCHED_WATERMARK_DIV 32

typedef enum {
    SCHED_FINISH_NONE = 0,
    SCHED_FINISH_LENGTH = 1,  /* generated max_tokens */
    SCHED_FINISH_STOP = 2,    /* generated a stop token id */
} sched_finish;

typedef struct sched_request {
    const char *id;
    int prompt_len;
    int max_tokens;           /* counts the prefiller's first token */
    const int32_t *stop_ids;
    int n_stop_ids;
    worker_sampling *ws;      /* moved into the sequence when sched_submit
                                 succeeds (*ws zeroed); the caller's on error */
    int n_branches;           /* branches that will join it (sched_add_branch) */
} sched_request;

typedef struct sched_seq {
    char id[SCHED_MAX_ID];
    sched_seq_state state;
    int prompt_len, max_tokens;
    int32_t *stop_ids;
    int n_stop_ids;
    worker_sampling ws;       /* sampling, penalties (counting the output), logprobs */
    uint64_t rng;             /* sampler state, continued from the prefiller */
    int kv_arrived;           /* the prompt's KV transfer completed */
    int started;              /* the first token arrived */
    int32_t *pages;           /* page table in sequence order */
    int n_pages;              /* pages allocated */
    int max_pages;            /* worst case (prompt + max_tokens): pages' capacity */
    uint64_t admit_order;     /* admission serial: preemption takes the latest */
    int n_branches;           /* a leader: branches admitted with it */
    char leader[SCHED_MAX_ID];/* a branch before it runs: its leader's id */
    int n_cached;             /* tokens whose K/V are in the cache */
    int32_t next_token;       /* the token the next step feeds */
    int n_generated;          /* tokens produced, the first token included */
    sched_finish finish;
    int cancelled;            /* set by the decoder: cancelled while its KV
                                 transfer may still write into its pages */
    uint64_t release_at_ms;   /* cancelled: when the decoder frees it anyway
                                 (no prefiller writes that late); 0 = never */
    uint64_t lease_until_ms;  /* admitted: the KV lease of its prefill ends
                                 (the decoder frees it unless it runs by then);
                                 0 = not leased yet */
} sched_seq;

typedef struct sched {
    int page_size, n_pages, max_batch, max_context;
    int32_t *free_pages;      /* stack of free page ids */
    int n_free;
    int *page_refs;           /* [n_pages]: sequences holding each page */
    int32_t *copies;          /* pending copy-on-write (src, dst) page pairs */
    int n_copies;
    uint64_t admit_counter;
    uint64_t preemptions;     /* sequences preempted so far */
    sched_seq **seqs;         /* every known sequence, admission order */
    int n_seqs, cap_seqs;
} sched;

/* sched_submit's outcomes; its errors are negative tn_status codes:
 * TN_ERR_NEVER_FITS (needs more pages than the whole cache), TN_ERR_TOO_LONG
 * (prompt + max_tokens exceeds max_context), TN_ERR_ARG (bad sizes,
 * duplicate or over-long id), TN_ERR_NOMEM. */
enum sched_outcome {
    SCHED_ADMITTED = 0,       /* prompt pages allocated: send KvReady now */
    SCHED_QUEUED = 1,         /* waits for room: sched_admit_waiting admits it later */
};

/* n_pages pages of page_size tokens, page ids 0..n_pages-1; at most
 * max_batch sequences admitted at once; max_context bounds prompt+output. */
int sched_init(sched *s, int n_pages, int page_size, int max_batch, int max_context);
void sched_free(sched *s);

/* Registers a request. On SCHED_ADMITTED or SCHED_QUEUED *out is the new
 * sequence; errors leave nothing behind. */
int sched_submit(sched *s, const sched_request *req, sched_seq **out);

/* Admits waiting sequences in FIFO order while they fit; writes up to max
 * of them to admitted and returns how many. */
int sched_admit_waiting(sched *s, sched_seq **admitted, int max);

sched_seq *sched_find(const sched *s, const char *id);

/* The prompt's KV is in the sequence's pages. */
void sched_kv_arrived(sched *s, sched_seq *q);

/* The prefiller's first token and the sampler state after it. The sequence
 * runs once its KV has also arrived; the first token may already finish it
 * (a stop token, or max_tokens == 1). */
void sched_start(sched *s, sched_seq *q, int32_t first_token, uint64_t rng);

/* Fills batch with the running sequences (at most max) after giving each the
 * page its next token needs, preempting the latest admitted ones when the
 * pool is dry (see above). Returns the count. */
int sched_form_batch(sched *s, sched_seq **batch, int max);

/* A branch of leader (its other choice) sharing its prompt's pages: runs
 * once the leader's KV and its own first token (sched_start) are in. ws is
 * moved in as by sched_submit. The leader must be WAITING or RESERVED, not
 * a branch, its KV not arrived, and have fewer branches than its request's
 * n_branches. Returns 0, TN_ERR_ARG (bad or duplicate id, leader too far
 * along, one branch too many), TN_ERR_NOMEM. */
int sched_add_branch(sched *s, sched_seq *leader, const char *id, worker_sampling *ws,
                     sched_seq **out);

/* The copy-on-write copies sched_form_batch decided: n pairs (src, dst)
 * of page ids whose contents the caller copies before the step. Valid
 * until the next sched_form_batch. */
const int32_t *sched_take_copies(const sched *s, int *n);

/* A sequence preemption left SEQ_PREEMPTED (the caller tells the router and
 * removes it), or NULL. */
sched_seq *sched_next_preempted(const sched *s);

/* Free pages admission keeps beside `admitted` sequences (see above). */
int sched_admit_headroom(const sched *s, int admitted);

/* Records the token a step sampled for q: the fed token is now cached, tok
 * becomes the next input, and the stop conditions are checked. */
void sched_token(sched *s, sched_seq *q, int32_t tok);

/* Forgets q and drops its holds on pages (a page no one holds is free);
 * a leader's branches that have not run yet go with it. */
void sched_remove(sched *s, sched_seq *q);

/* Counts for heartbeats. */
int sched_running(const sched *s);
int sched_waiting(const sched *s);
/* Pages free now. */
int sched_pages_available(const sched *s);

#endif
