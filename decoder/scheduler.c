#include "decoder/scheduler.h"

#include <stdlib.h>
#include <string.h>

static int pages_for_tokens(int tokens, int page_size)
{
    return (tokens + page_size - 1) / page_size;
}

int sched_init(sched *s, int n_pages, int page_size, int max_batch, int max_context)
{
    memset(s, 0, sizeof *s);
    if (n_pages <= 0 || page_size <= 0 || max_batch <= 0 || max_context <= 0)
        return TN_ERR_ARG;
    s->free_pages = malloc((size_t)n_pages * sizeof *s->free_pages);
    s->page_refs = calloc((size_t)n_pages, sizeof *s->page_refs);
    /* at most one copy per batch row, and a row is a sequence holding a page */
    s->copies = malloc(2 * (size_t)n_pages * sizeof *s->copies);
    if (!s->free_pages || !s->page_refs || !s->copies) {
        free(s->free_pages);
        free(s->page_refs);
        free(s->copies);
        memset(s, 0, sizeof *s);
        return TN_ERR_NOMEM;
    }
    /* Pop order 0, 1, 2...: a fresh cache hands pages out in order. */
    for (int i = 0; i < n_pages; i++)
        s->free_pages[i] = n_pages - 1 - i;
    s->n_free = n_pages;
    s->n_pages = n_pages;
    s->page_size = page_size;
    s->max_batch = max_batch;
    s->max_context = max_context;
    return 0;
}

static void seq_free(sched_seq *q)
{
    if (!q)
        return;
    free(q->stop_ids);
    free(q->pages);
    worker_sampling_free(&q->ws);
    free(q);
}

void sched_free(sched *s)
{
    for (int i = 0; i < s->n_seqs; i++)
        seq_free(s->seqs[i]);
    free(s->seqs);
    free(s->free_pages);
    free(s->page_refs);
    free(s->copies);
    memset(s, 0, sizeof *s);
}

sched_seq *sched_find(const sched *s, const char *id)
{
    for (int i = 0; i < s->n_seqs; i++)
        if (!strcmp(s->seqs[i]->id, id))
            return s->seqs[i];
    return NULL;
}

static int admitted_count(const sched *s)
{
    int n = 0;
    for (int i = 0; i < s->n_seqs; i++)
        n += s->seqs[i]->state != SEQ_WAITING;
    return n;
}

int sched_pages_available(const sched *s)
{
    return s->n_free;
}

static int take_page(sched *s, sched_seq *q)
{
    if (q->n_pages >= q->max_pages || s->n_free == 0)
        return -1;
    int32_t p = s->free_pages[--s->n_free];
    s->page_refs[p] = 1;
    q->pages[q->n_pages++] = p;
    return 0;
}

/* Drops q's hold on its pages; a page no other sequence holds is free. */
static void release_pages(sched *s, sched_seq *q)
{
    for (int i = q->n_pages - 1; i >= 0; i--)
        if (--s->page_refs[q->pages[i]] == 0)
            s->free_pages[s->n_free++] = q->pages[i];
    q->n_pages = 0;
}

/* Branch b takes its leader's prompt pages (one more holder each). */
static void share_pages(sched *s, sched_seq *b, const sched_seq *leader)
{
    for (int i = 0; i < leader->n_pages; i++) {
        b->pages[i] = leader->pages[i];
        s->page_refs[b->pages[i]]++;
    }
    b->n_pages = leader->n_pages;
    b->admit_order = ++s->admit_counter;
    b->state = SEQ_RESERVED;
}

static int is_branch_of(const sched_seq *b, const sched_seq *leader)
{
    return b->leader[0] && !strcmp(b->leader, leader->id);
}

int sched_admit_headroom(const sched *s, int admitted)
{
    return admitted + s->n_pages / SCHED_WATERMARK_DIV;
}

/* Allocates q's prompt pages if the admission policy (scheduler.h) lets it
 * in now. */
static int try_admit(sched *s, sched_seq *q)
{
    int admitted = admitted_count(s), group = 1 + q->n_branches;
    int prompt_pages = pages_for_tokens(q->prompt_len, s->page_size);
    if ((admitted > 0 && admitted + group > s->max_batch) || prompt_pages > s->n_free)
        return 0;
    /* Alone, a sequence always fits (sched_submit refused any that cannot);
     * beside others it leaves every admitted sequence a page to grow into. */
    if (admitted > 0 && s->n_free - prompt_pages < sched_admit_headroom(s, admitted + group))
        return 0;
    for (int i = 0; i < prompt_pages; i++)
        take_page(s, q);
    q->admit_order = ++s->admit_counter;
    q->state = SEQ_RESERVED;
    for (int i = 0; i < s->n_seqs; i++)
        if (is_branch_of(s->seqs[i], q) && s->seqs[i]->state == SEQ_WAITING)
            share_pages(s, s->seqs[i], q);
    return 1;
}

static int has_waiting_before(const sched *s, const sched_seq *q)
{
    for (int i = 0; i < s->n_seqs && s->seqs[i] != q; i++)
        if (s->seqs[i]->state == SEQ_WAITING && !s->seqs[i]->leader[0])
            return 1;
    return 0;
}

static int grow_seqs(sched *s)
{
    if (s->n_seqs < s->cap_seqs)
        return 0;
    int cap = s->cap_seqs ? 2 * s->cap_seqs : 16;
    sched_seq **ns = realloc(s->seqs, (size_t)cap * sizeof *ns);
    if (!ns)
        return -1;
    s->seqs = ns;
    s->cap_seqs = cap;
    return 0;
}

int sched_submit(sched *s, const sched_request *req, sched_seq **out)
{
    *out = NULL;
    if (!req->id || !req->id[0] || strlen(req->id) >= SCHED_MAX_ID || req->prompt_len <= 0 ||
        req->n_branches < 0 || req->n_branches >= s->max_batch ||
        req->max_tokens <= 0 || req->n_stop_ids < 0 || (req->n_stop_ids && !req->stop_ids) ||
        sched_find(s, req->id))
        return TN_ERR_ARG;
    if ((long)req->prompt_len + req->max_tokens > s->max_context)
        return TN_ERR_TOO_LONG;
    int need = tm_kv_pages_needed(req->prompt_len, req->max_tokens, s->page_size);
    if (need > s->n_pages)
        return TN_ERR_NEVER_FITS;
    if (grow_seqs(s) != 0)
        return TN_ERR_NOMEM;
    sched_seq *q = calloc(1, sizeof *q);
    if (!q)
        return TN_ERR_NOMEM;
    q->pages = malloc((size_t)need * sizeof *q->pages);
    q->stop_ids = malloc((size_t)(req->n_stop_ids ? req->n_stop_ids : 1) * sizeof *q->stop_ids);
    if (!q->pages || !q->stop_ids) {
        seq_free(q);
        return TN_ERR_NOMEM;
    }
    strcpy(q->id, req->id);
    q->prompt_len = req->prompt_len;
    q->max_tokens = req->max_tokens;
    q->n_stop_ids = req->n_stop_ids;
    if (req->n_stop_ids)
        memcpy(q->stop_ids, req->stop_ids, (size_t)req->n_stop_ids * sizeof *q->stop_ids);
    if (req->ws) {
        q->ws = *req->ws;
        memset(req->ws, 0, sizeof *req->ws);
        req->ws->top_logprobs = -1;
    } else {
        q->ws.top_logprobs = -1;
        q->ws.params = (kn_sampling){ .temperature = 0.0f, .top_p = 1.0f };
    }
    q->max_pages = need;
    q->n_branches = req->n_branches;
    q->state = SEQ_WAITING;
    s->seqs[s->n_seqs++] = q;
    *out = q;
    /* FIFO: nobody overtakes a request that is already waiting. */
    if (!has_waiting_before(s, q) && try_admit(s, q))
        return SCHED_ADMITTED;
    return SCHED_QUEUED;
}

int sched_add_branch(sched *s, sched_seq *leader, const char *id, worker_sampling *ws,
                     sched_seq **out)
{
    *out = NULL;
    if (!id || !id[0] || strlen(id) >= SCHED_MAX_ID || sched_find(s, id) || leader->leader[0] ||
        (leader->state != SEQ_WAITING && leader->state != SEQ_RESERVED) || leader->started ||
        leader->kv_arrived || leader->cancelled)
        return TN_ERR_ARG;
    int joined = 0; /* admission counted n_branches of them */
    for (int i = 0; i < s->n_seqs; i++)
        joined += is_branch_of(s->seqs[i], leader);
    if (joined >= leader->n_branches)
        return TN_ERR_ARG;
    if (grow_seqs(s) != 0)
        return TN_ERR_NOMEM;
    sched_seq *b = calloc(1, sizeof *b);
    if (!b)
        return TN_ERR_NOMEM;
    b->pages = malloc((size_t)leader->max_pages * sizeof *b->pages);
    b->stop_ids = malloc((size_t)(leader->n_stop_ids ? leader->n_stop_ids : 1) *
                         sizeof *b->stop_ids);
    if (!b->pages || !b->stop_ids) {
        seq_free(b);
        return TN_ERR_NOMEM;
    }
    strcpy(b->id, id);
    strcpy(b->leader, leader->id);
    b->prompt_len = leader->prompt_len;
    b->max_tokens = leader->max_tokens;
    b->max_pages = leader->max_pages;
    b->n_stop_ids = leader->n_stop_ids;
    if (leader->n_stop_ids)
        memcpy(b->stop_ids, leader->stop_ids, (size_t)leader->n_stop_ids * sizeof *b->stop_ids);
    b->ws = *ws;
    memset(ws, 0, sizeof *ws);
    ws->top_logprobs = -1;
    b->lease_until_ms = leader->lease_until_ms;
    b->state = SEQ_WAITING;
    if (leader->state == SEQ_RESERVED)
        share_pages(s, b, leader);
    s->seqs[s->n_seqs++] = b;
    *out = b;
    return 0;
}

int sched_admit_waiting(sched *s, sched_seq **admitted, int max)
{
    int n = 0;
    for (int i = 0; i < s->n_seqs && n < max; i++) {
        sched_seq *q = s->seqs[i];
        if (q->state != SEQ_WAITING || q->leader[0])
            continue; /* branches are admitted with their leader */
        if (!try_admit(s, q))
            break;
        admitted[n++] = q;
    }
    return n;
}

static int is_stop(const sched_seq *q, int32_t tok)
{
    for (int i = 0; i < q->n_stop_ids; i++)
        if (q->stop_ids[i] == tok)
            return 1;
    return 0;
}

static void check_finish(sched_seq *q, int32_t tok)
{
    if (is_stop(q, tok))
        q->finish = SCHED_FINISH_STOP;
    else if (q->n_generated >= q->max_tokens)
        q->finish = SCHED_FINISH_LENGTH;
    if (q->finish != SCHED_FINISH_NONE)
        q->state = SEQ_FINISHED;
}

static void maybe_run(sched_seq *q)
{
    if (q->state == SEQ_RESERVED && q->kv_arrived && q->started) {
        q->state = SEQ_RUNNING;
        q->leader[0] = '\0'; /* a branch is a sequence of its own from now on */
        check_finish(q, q->next_token);
    }
}

void sched_kv_arrived(sched *s, sched_seq *q)
{
    if (q->kv_arrived)
        return;
    q->kv_arrived = 1;
    q->n_cached = q->prompt_len;
    /* its branches hold the same prompt pages */
    for (int i = 0; i < s->n_seqs; i++) {
        sched_seq *b = s->seqs[i];
        if (b != q && is_branch_of(b, q) && !b->kv_arrived) {
            b->kv_arrived = 1;
            b->n_cached = b->prompt_len;
            maybe_run(b);
        }
    }
    maybe_run(q);
}

void sched_start(sched *s, sched_seq *q, int32_t first_token, uint64_t rng)
{
    (void)s;
    if (q->started)
        return;
    q->started = 1;
    q->next_token = first_token;
    q->rng = rng;
    q->n_generated = 1;
    maybe_run(q);
}

/* The running sequence admitted last: the one preemption takes first. */
static sched_seq *latest_running(const sched *s)
{
    sched_seq *v = NULL;
    for (int i = 0; i < s->n_seqs; i++) {
        sched_seq *q = s->seqs[i];
        if (q->state == SEQ_RUNNING && (!v || q->admit_order > v->admit_order))
            v = q;
    }
    return v;
}

/* A sequence admitted after q still waits for its KV (its pages cannot be
 * taken while a prefiller writes them): once it runs it is the victim. */
static int newer_reserved(const sched *s, const sched_seq *q)
{
    for (int i = 0; i < s->n_seqs; i++)
        if (s->seqs[i]->state == SEQ_RESERVED && s->seqs[i]->admit_order > q->admit_order)
            return 1;
    return 0;
}

static void preempt(sched *s, sched_seq *v)
{
    /* a copy made for v this step is moot: its page may be free again */
    for (int i = 0; i < s->n_copies; i++)
        for (int k = 0; k < v->n_pages; k++)
            if (s->copies[2 * i + 1] == v->pages[k] && s->page_refs[v->pages[k]] == 1) {
                memmove(&s->copies[2 * i], &s->copies[2 * i + 2],
                        (size_t)(s->n_copies - i - 1) * 2 * sizeof *s->copies);
                s->n_copies--;
                i--;
                break;
            }
    release_pages(s, v);
    v->state = SEQ_PREEMPTED;
    s->preemptions++;
}

/* Whether q's step needs a page: the position it writes starts a new page,
 * or falls in a page another sequence also holds (copy-on-write). */
static int needs_page(const sched *s, const sched_seq *q)
{
    int at = q->n_cached / s->page_size;
    return at >= q->n_pages || s->page_refs[q->pages[at]] > 1;
}

/* Gives q the page needs_page asked for; -1 when none is free. */
static int give_page(sched *s, sched_seq *q)
{
    int at = q->n_cached / s->page_size;
    if (at >= q->n_pages)
        return take_page(s, q);
    if (s->n_free == 0)
        return -1;
    int32_t src = q->pages[at], dst = s->free_pages[--s->n_free];
    s->page_refs[dst] = 1;
    s->page_refs[src]--; /* others still hold it */
    q->pages[at] = dst;
    s->copies[2 * s->n_copies] = src;
    s->copies[2 * s->n_copies + 1] = dst;
    s->n_copies++;
    return 0;
}

int sched_form_batch(sched *s, sched_seq **batch, int max)
{
    int n = 0;
    s->n_copies = 0;
    for (int i = 0; i < s->n_seqs && n < max; i++) {
        sched_seq *q = s->seqs[i];
        if (q->state != SEQ_RUNNING)
            continue;
        /* The step writes the fed token at position n_cached. */
        int waits = 0;
        while (needs_page(s, q) && give_page(s, q) != 0) {
            sched_seq *v = latest_running(s);
            if (v == q && newer_reserved(s, q)) {
                waits = 1;
                break;
            }
            preempt(s, v);
            for (int k = 0; k < n; k++)
                if (batch[k] == v) {
                    memmove(&batch[k], &batch[k + 1], (size_t)(n - k - 1) * sizeof *batch);
                    n--;
                    break;
                }
            if (v == q)
                break;
        }
        if (!waits && q->state == SEQ_RUNNING)
            batch[n++] = q;
    }
    return n;
}

const int32_t *sched_take_copies(const sched *s, int *n)
{
    *n = s->n_copies;
    return s->copies;
}

sched_seq *sched_next_preempted(const sched *s)
{
    for (int i = 0; i < s->n_seqs; i++)
        if (s->seqs[i]->state == SEQ_PREEMPTED)
            return s->seqs[i];
    return NULL;
}

void sched_token(sched *s, sched_seq *q, int32_t tok)
{
    (void)s;
    if (q->state != SEQ_RUNNING)
        return;
    q->n_cached++;
    q->n_generated++;
    q->next_token = tok;
    check_finish(q, tok);
}

void sched_remove(sched *s, sched_seq *q)
{
    int idx = -1;
    for (int i = 0; i < s->n_seqs; i++)
        if (s->seqs[i] == q)
            idx = i;
    if (idx < 0)
        return;
    release_pages(s, q);
    /* Keep admission order for FIFO fairness. */
    memmove(&s->seqs[idx], &s->seqs[idx + 1], (size_t)(s->n_seqs - idx - 1) * sizeof *s->seqs);
    s->n_seqs--;
    /* Branches that have not run yet go with their leader (nothing can
     * start them now); they come after it, so callers walking the list
     * backwards from the leader are not disturbed. */
    for (int i = s->n_seqs - 1; i >= idx; i--)
        if (is_branch_of(s->seqs[i], q)) {
            sched_seq *b = s->seqs[i];
            release_pages(s, b);
            memmove(&s->seqs[i], &s->seqs[i + 1], (size_t)(s->n_seqs - i - 1) * sizeof *s->seqs);
            s->n_seqs--;
            seq_free(b);
        }
    seq_free(q);
}

int sched_running(const sched *s)
{
    int n = 0;
    for (int i = 0; i < s->n_seqs; i++)
        n += s->seqs[i]->state == SEQ_RUNNING;
    return n;
}

int sched_waiting(const sched *s)
{
    int n = 0;
    for (int i = 0; i < s->n_seqs; i++)
        n += s->seqs[i]->state == SEQ_WAITING;
    return n;
}
