#include "router/workers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void forget_lost(worker_registry *r, const char *id);

void workers_init(worker_registry *r)
{
    memset(r, 0, sizeof *r);
}

static void worker_free(router_worker *w)
{
    if (!w)
        return;
    free(w->endpoint);
    free(w);
}

void workers_free(worker_registry *r)
{
    for (int i = 0; i < r->n; i++)
        worker_free(r->w[i]);
    free(r->w);
    memset(r, 0, sizeof *r);
}

router_worker *workers_find(const worker_registry *r, const char *id, size_t id_len)
{
    for (int i = 0; i < r->n; i++)
        if (r->w[i]->id_len == id_len && memcmp(r->w[i]->id, id, id_len) == 0)
            return r->w[i];
    return NULL;
}

static int copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (n >= cap)
        return -1;
    memcpy(dst, src, n + 1);
    return 0;
}

/* 1 (reason in err) when reg's KV cache differs from that of a registered
 * worker (other than itself) serving the same model: the two could be
 * paired, and pages pushed between them would be misread. */
static int kv_conflict(const worker_registry *r, const Tandem__V1__Register *reg, char *err,
                       size_t errlen)
{
    kv_signature mine = kv_signature_of(reg);
    for (int i = 0; i < r->n; i++) {
        const router_worker *o = r->w[i];
        if (!strcmp(o->id, reg->worker_id) || strcmp(o->model, reg->model) ||
            kv_signature_equal(&o->kv, &mine))
            continue;
        char a[96], b[96];
        kv_signature_describe(&mine, a, sizeof a);
        kv_signature_describe(&o->kv, b, sizeof b);
        snprintf(err, errlen, "worker %s: KV cache mismatch for model %s: it holds %s, %s %s "
                 "holds %s; prefillers and decoders of a model must share the KV dtype and "
                 "geometry (--kv-dtype)", reg->worker_id, reg->model, a,
                 o->role == TANDEM__V1__WORKER_ROLE__WORKER_ROLE_PREFILLER ? "prefiller"
                                                                           : "decoder",
                 o->id, b);
        return 1;
    }
    return 0;
}

router_worker *workers_register(worker_registry *r, const char *id, size_t id_len,
                                const Tandem__V1__Register *reg, uint64_t now_ms,
                                char *err, size_t errlen)
{
    if (id_len == 0 || id_len > WIRE_MAX_ID || memchr(id, '\0', id_len)) {
        snprintf(err, errlen, "worker id must be 1..%d bytes of text", WIRE_MAX_ID);
        return NULL;
    }
    if (strlen(reg->worker_id) != id_len || memcmp(reg->worker_id, id, id_len) != 0) {
        snprintf(err, errlen, "Register.worker_id '%s' differs from the socket routing id",
                 reg->worker_id);
        return NULL;
    }
    if (reg->role != TANDEM__V1__WORKER_ROLE__WORKER_ROLE_PREFILLER &&
        reg->role != TANDEM__V1__WORKER_ROLE__WORKER_ROLE_DECODER) {
        snprintf(err, errlen, "worker %s: unknown role %d", reg->worker_id, (int)reg->role);
        return NULL;
    }
    if (!reg->model[0] || strlen(reg->model) >= sizeof(((router_worker *)0)->model)) {
        snprintf(err, errlen, "worker %s: model name must be 1..127 bytes", reg->worker_id);
        return NULL;
    }
    if (reg->vocab_size <= 0 || reg->max_context <= 0 || reg->page_size <= 0 ||
        (reg->role == TANDEM__V1__WORKER_ROLE__WORKER_ROLE_DECODER && reg->kv_pages_total <= 0)) {
        snprintf(err, errlen, "worker %s: vocab_size, max_context, page_size and (decoders) "
                 "kv_pages_total must be positive", reg->worker_id);
        return NULL;
    }
    if (reg->n_eos_token_ids > WORKER_MAX_EOS) {
        snprintf(err, errlen, "worker %s: more than %d EOS ids", reg->worker_id, WORKER_MAX_EOS);
        return NULL;
    }
    if (kv_conflict(r, reg, err, errlen))
        return NULL;
    router_worker *w = workers_find(r, id, id_len);
    int fresh = w == NULL;
    if (fresh) {
        if (r->n == r->cap) {
            int cap = r->cap ? 2 * r->cap : 8;
            router_worker **nw = realloc(r->w, (size_t)cap * sizeof *nw);
            if (!nw) {
                snprintf(err, errlen, "out of memory");
                return NULL;
            }
            r->w = nw;
            r->cap = cap;
        }
        w = calloc(1, sizeof *w);
        if (!w) {
            snprintf(err, errlen, "out of memory");
            return NULL;
        }
        memcpy(w->id, id, id_len);
        w->id[id_len] = '\0';
        w->id_len = id_len;
        w->serial = ++r->next_serial;
        w->last_progress_ms = now_ms;
    }
    uint8_t *ep = NULL;
    if (reg->transfer_endpoint.len) {
        ep = malloc(reg->transfer_endpoint.len);
        if (!ep) {
            if (fresh)
                free(w);
            snprintf(err, errlen, "out of memory");
            return NULL;
        }
        memcpy(ep, reg->transfer_endpoint.data, reg->transfer_endpoint.len);
    }
    free(w->endpoint);
    w->endpoint = ep;
    w->endpoint_len = reg->transfer_endpoint.len;
    if (fresh || w->role != (int)reg->role) {
        worker_metrics_init(&w->wm, reg->role == TANDEM__V1__WORKER_ROLE__WORKER_ROLE_PREFILLER
                                        ? WM_PREFILL : WM_DECODE);
        w->has_metrics = 0;
        w->as_marked = 0;
    }
    w->role = reg->role;
    copy_str(w->model, sizeof w->model, reg->model);
    if (copy_str(w->model_type, sizeof w->model_type, reg->model_type) != 0)
        w->model_type[0] = '\0';
    w->vocab_size = reg->vocab_size;
    w->max_context = reg->max_context;
    w->page_size = reg->page_size;
    w->kv_pages_total = reg->kv_pages_total;
    w->kv = kv_signature_of(reg);
    w->n_eos = (int)reg->n_eos_token_ids;
    for (int i = 0; i < w->n_eos; i++)
        w->eos[i] = reg->eos_token_ids[i];
    if (reg->incarnation)
        w->incarnation = reg->incarnation;
    w->last_seen_ms = now_ms;
    w->unreachable = 0;
    if (fresh) {
        r->w[r->n++] = w;
        forget_lost(r, w->id);
    }
    return w;
}

int workers_is_restart(const worker_registry *r, const char *id, size_t id_len,
                       const Tandem__V1__Register *reg)
{
    const router_worker *w = workers_find(r, id, id_len);
    return w && w->incarnation && reg->incarnation && w->incarnation != reg->incarnation;
}

void workers_retire(worker_registry *r, const router_worker *w)
{
    if (!w->incarnation)
        return;
    retired_incarnation *t = &r->retired[r->next_retired];
    memcpy(t->id, w->id, w->id_len + 1);
    t->incarnation = w->incarnation;
    r->next_retired = (r->next_retired + 1) % WORKERS_MAX_RETIRED;
    if (r->n_retired < WORKERS_MAX_RETIRED)
        r->n_retired++;
}

int workers_is_retired(const worker_registry *r, const char *id, size_t id_len,
                       uint64_t incarnation)
{
    if (!incarnation)
        return 0;
    for (int i = 0; i < r->n_retired; i++)
        if (r->retired[i].incarnation == incarnation && strlen(r->retired[i].id) == id_len &&
            !memcmp(r->retired[i].id, id, id_len))
            return 1;
    return 0;
}

router_worker *workers_find_serial(const worker_registry *r, const char *id, uint64_t serial)
{
    router_worker *w = workers_find(r, id, strlen(id));
    return w && w->serial == serial ? w : NULL;
}

int workers_heartbeat(router_worker *w, const Tandem__V1__Heartbeat *hb, uint64_t now_ms)
{
    w->last_seen_ms = now_ms;
    int started_draining = hb->draining && !w->draining;
    w->draining = hb->draining;
    w->wm.draining = hb->draining;
    int rc = started_draining;
    if (hb->metrics) {
        if (worker_metrics_from_wire(&w->wm, hb->metrics) == 0)
            w->has_metrics = 1;
        else
            rc = -1;
    }
    if (hb->load_case == TANDEM__V1__HEARTBEAT__LOAD_PREFILLER && hb->prefiller) {
        w->pload.queued_input_tokens = hb->prefiller->queued_input_tokens;
        w->pload.queued_requests = hb->prefiller->queued_requests;
        w->pload.input_tokens_per_s = hb->prefiller->input_tokens_per_s;
        w->pload.input_tokens_total = hb->prefiller->input_tokens_total;
    } else if (hb->load_case == TANDEM__V1__HEARTBEAT__LOAD_DECODER && hb->decoder) {
        w->dload.batch_size = hb->decoder->batch_size;
        w->dload.waiting = hb->decoder->waiting;
        w->dload.kv_pages_free = hb->decoder->kv_pages_free;
        w->dload.kv_pages_total = hb->decoder->kv_pages_total;
        w->dload.tokens_per_s = hb->decoder->tokens_per_s;
        w->dload.tokens_total = hb->decoder->tokens_total;
    }
    return rc;
}

void workers_remove_at(worker_registry *r, int i)
{
    if (i < 0 || i >= r->n)
        return;
    worker_free(r->w[i]);
    r->w[i] = r->w[--r->n];
}

int workers_next_expired(const worker_registry *r, uint64_t now_ms, uint64_t timeout_ms)
{
    for (int i = 0; i < r->n; i++)
        if (now_ms > r->w[i]->last_seen_ms && now_ms - r->w[i]->last_seen_ms > timeout_ms)
            return i;
    return -1;
}

void workers_count(const worker_registry *r, int role, int *registered, int *serving)
{
    *registered = *serving = 0;
    for (int i = 0; i < r->n; i++) {
        if (r->w[i]->role != role)
            continue;
        (*registered)++;
        *serving += !r->w[i]->draining;
    }
}

int workers_serve_model(const worker_registry *r, const char *model, int role)
{
    for (int i = 0; i < r->n; i++)
        if (r->w[i]->role == role && !strcmp(r->w[i]->model, model))
            return 1;
    return 0;
}

static void forget_lost(worker_registry *r, const char *id)
{
    for (int i = 0; i < r->n_lost; i++)
        if (!strcmp(r->lost[i].id, id)) {
            memmove(&r->lost[i], &r->lost[i + 1], (size_t)(r->n_lost - i - 1) * sizeof *r->lost);
            r->n_lost--;
            return;
        }
}

void workers_note_lost(worker_registry *r, const router_worker *w, uint64_t now_ms)
{
    forget_lost(r, w->id);
    if (r->n_lost == WORKERS_MAX_LOST) { /* the oldest makes room */
        memmove(&r->lost[0], &r->lost[1], (size_t)(WORKERS_MAX_LOST - 1) * sizeof *r->lost);
        r->n_lost--;
    }
    lost_worker *l = &r->lost[r->n_lost++];
    memcpy(l->id, w->id, w->id_len + 1);
    l->role = w->role;
    l->since_ms = now_ms;
}

void workers_prune_lost(worker_registry *r, uint64_t now_ms)
{
    int k = 0;
    while (k < r->n_lost && now_ms - r->lost[k].since_ms > WORKERS_LOST_RETENTION_MS)
        k++;
    if (k) {
        memmove(&r->lost[0], &r->lost[k], (size_t)(r->n_lost - k) * sizeof *r->lost);
        r->n_lost -= k;
    }
}
