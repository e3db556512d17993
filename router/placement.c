#include "router/placement.h"

#include <string.h>
#include "engine/kv_cache.h"
#include "proto/tandem.pb-c.h"

place_status placement_pick_prefiller(const worker_registry *r, const char *model,
                                      router_worker **out)
{
    router_worker *best = NULL;
    for (int i = 0; i < r->n; i++) {
        router_worker *w = r->w[i];
        if (w->role != TANDEM__V1__WORKER_ROLE__WORKER_ROLE_PREFILLER || strcmp(w->model, model) ||
            w->draining || w->unreachable)
            continue;
        if (!best || w->assigned_input_tokens < best->assigned_input_tokens ||
            (w->assigned_input_tokens == best->assigned_input_tokens &&
             w->in_flight < best->in_flight))
            best = w;
    }
    *out = best;
    return best ? PLACE_OK : PLACE_NO_WORKER;
}

place_status placement_pick_decoder(const worker_registry *r, const char *model,
                                    int prompt_len, int max_tokens, router_worker **out)
{
    router_worker *best_fit = NULL, *best_wait = NULL;
    int any = 0;
    for (int i = 0; i < r->n; i++) {
        router_worker *w = r->w[i];
        if (w->role != TANDEM__V1__WORKER_ROLE__WORKER_ROLE_DECODER || strcmp(w->model, model) ||
            w->draining || w->unreachable)
            continue;
        any = 1;
        if (tm_kv_pages_needed(prompt_len, max_tokens, w->page_size) > w->kv_pages_total)
            continue;
        int room = w->kv_pages_total - w->pages_committed;
        if (room >= placement_pages_at_admission(prompt_len, max_tokens, w->page_size)) {
            if (!best_fit || w->in_flight < best_fit->in_flight ||
                (w->in_flight == best_fit->in_flight &&
                 room > best_fit->kv_pages_total - best_fit->pages_committed))
                best_fit = w;
        } else if (!best_wait || room > best_wait->kv_pages_total - best_wait->pages_committed) {
            best_wait = w;
        }
    }
    *out = best_fit ? best_fit : best_wait;
    if (*out)
        return PLACE_OK;
    return any ? PLACE_NEVER_FITS : PLACE_NO_WORKER;
}

int placement_pages_at_admission(int prompt_len, int max_tokens, int page_size)
{
    int worst = tm_kv_pages_needed(prompt_len, max_tokens, page_size);
    int use = tm_kv_pages_needed(prompt_len, 1, page_size) + 1;
    return use < worst ? use : worst;
}

int placement_max_context(const worker_registry *r, const char *model)
{
    int best = 0;
    for (int i = 0; i < r->n; i++) {
        const router_worker *w = r->w[i];
        if (w->role == TANDEM__V1__WORKER_ROLE__WORKER_ROLE_DECODER &&
            !strcmp(w->model, model) && w->max_context > best)
            best = w->max_context;
    }
    return best;
}
