/* Placement: which prefiller and which decoder serve a request.
 *
 * Prefiller: the one with the fewest queued input tokens (prefill time grows
 * with prompt tokens, so tokens, not requests, measure its queue).
 * Decoder: among those with KV room for the request now (its prompt's pages
 * and one to grow into: decoders admit by use, decoder/scheduler.h), the
 * one with the smallest batch (decode speed falls as the batch grows); if
 * none has room now, the one with the most room, where the request waits
 * for admission. A request whose worst case (prompt + max_tokens) exceeds a
 * decoder's whole cache never goes there. Both use the router's own accounting (router_worker.in_flight,
 * assigned_input_tokens, pages_committed), which is exact for this router and
 * never stale, unlike heartbeats. A draining worker (SIGTERM: it finishes
 * what it holds, then deregisters) is never picked, nor one the router just
 * failed to send to (router_worker.unreachable: its connection is gone). */
#ifndef TANDEM_ROUTER_PLACEMENT_H
#define TANDEM_ROUTER_PLACEMENT_H
#include "router/workers.h"

typedef enum {
    PLACE_OK = 0,
    PLACE_NO_WORKER = 1,   /* no worker of that role serves the model (or all drain) */
    PLACE_NEVER_FITS = 2,  /* larger than every decoder's whole KV cache */
} place_status;

place_status placement_pick_prefiller(const worker_registry *r, const char *model,
                                      router_worker **out);

/* prompt_len + max_tokens must already be within the model's context. */
place_status placement_pick_decoder(const worker_registry *r, const char *model,
                                    int prompt_len, int max_tokens, router_worker **out);

/* The pages a decoder's admission takes for a request, as the router counts
 * them (router_worker.pages_committed): its prompt's pages plus the next
 * one, at most its worst case. Decoders take more as sequences grow and
 * preempt when they run dry; the count is placement's estimate, not a
 * promise. */
int placement_pages_at_admission(int prompt_len, int max_tokens, int page_size);

/* The largest max_context among the decoders serving model, or 0. */
int placement_max_context(const worker_registry *r, const char *model);

#endif
