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
    if (!s->free_pages)
        return TN_ERR_NOMEM;
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
    q->pages[q->n_pages++] = s->free_pages[--s->n_free];
    return 0;
}

int sched_admit_headroom(const sched *s, int admitted)
{
    return admitted + s->n_pages / SCHED_WATERMARK_DIV;
}

/* Allocates q's prompt pages if the admission policy (scheduler.h) lets it
 * in now. */
static int try_admit(sched *s, sched_seq *q)
{
    int admitted = admitted_count(s);
    int prompt_pages = pages_for_tokens(q->prompt_len, s->page_size);
    if (admitted >= s->max_batch || prompt_pages > s->n_free)
        return 0;
    /* Alone, a sequence always fits (sched_submit refused any that cannot);
     * beside others it leaves every admitted sequence a page to grow into. */
    if (admitted > 0 && s->n_free - prompt_pages < sched_admit_headroom(s, admitted + 1))
        return 0;
    for (int i = 0; i < prompt_pages; i++)
        take_page(s, q);
    q->admit_order = ++s->admit_counter;
    q->state = SEQ_RESERVED;
    return 1;
}

static int has_waiting_before(const sched *s, const sched_seq *q)
{
    for (int i = 0; i < s->n_seqs && s->seqs[i] != q; i++)
        if (s->seqs[i]->state == SEQ_WAITING)
            return 1;
    return 0;
}

int sched_submit(sched *s, const sched_request *req, sched_seq **out)
{
    *out = NULL;
    if (!req->id || !req->id[0] || strlen(req->id) >= SCHED_MAX_ID || req->prompt_len <= 0 ||
        req->max_tokens <= 0 || req->n_stop_ids < 0 || (req->n_stop_ids && !req->stop_ids) ||
        sched_find(s, req->id))
        return TN_ERR_ARG;
    if ((long)req->prompt_len + req->max_tokens > s->max_context)
        return TN_ERR_TOO_LONG;
    int need = tm_kv_pages_needed(req->prompt_len, req->max_tokens, s->page_size);
    if (need > s->n_pages)
        return TN_ERR_NEVER_FITS;
    if (s->n_seqs == s->cap_seqs) {
        int cap = s->cap_seqs ? 2 * s->cap_seqs : 16;
        sched_seq **ns = realloc(s->seqs, (size_t)cap * sizeof *ns);
        if (!ns)
            return TN_ERR_NOMEM;
        s->seqs = ns;
        s->cap_seqs = cap;
    }
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
    q->state = SEQ_WAITING;
    s->seqs[s->n_seqs++] = q;
    *out = q;
    /* FIFO: nobody overtakes a request that is already waiting. */
    if (!has_waiting_before(s, q) && try_admit(s, q))
        return SCHED_ADMITTED;
    return SCHED_QUEUED;
}

int sched_admit_waiting(sched *s, sched_seq **admitted, int max)
{
    int n = 0;
    for (int i = 0; i < s->n_seqs && n < max; i++) {
        sched_seq *q = s->seqs[i];
        if (q->state != SEQ_WAITING)
            continue;
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
        check_finish(q, q->next_token);
    }
}

void sched_kv_arrived(sched *s, sched_seq *q)
{
    (void)s;
    if (q->kv_arrived)
        return;
    q->kv_arrived = 1;
    q->n_cached = q->prompt_len;
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
    for (int i = v->n_pages - 1; i >= 0; i--)
        s->free_pages[s->n_free++] = v->pages[i];
    v->n_pages = 0;
    v->state = SEQ_PREEMPTED;
    s->preemptions++;
}

int sched_form_batch(sched *s, sched_seq **batch, int max)
{
    int n = 0;
    for (int i = 0; i < s->n_seqs && n < max; i++) {
        sched_seq *q = s->seqs[i];
        if (q->state != SEQ_RUNNING)
            continue;
        /* The step writes the fed token at position n_cached. */
        int waits = 0;
        while (q->n_pages < pages_for_tokens(q->n_cached + 1, s->page_size) &&
               take_page(s, q) != 0) {
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
    for (int i = q->n_pages - 1; i >= 0; i--)
        s->free_pages[s->n_free++] = q->pages[i];
    /* Keep admission order for FIFO fairness. */
    memmove(&s->seqs[idx], &s->seqs[idx + 1], (size_t)(s->n_seqs - idx - 1) * sizeof *s->seqs);
    s->n_seqs--;
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
