/* The decoder's DP+EP mixture-of-experts exchange (internal to the engine).
 *
 * Every rank of the EP group has its own tokens. Per layer, with the routes
 * kept on the device (kernels/ep_exchange.h):
 *   pack      each token goes once to every rank that holds at least one of
 *             its k experts, with all k (expert, weight) pairs, into that
 *             rank's block of `cap` rows;
 *   dispatch  one all-to-all of the packed blocks (fixed size per peer);
 *   compute   a rank runs kn_moe_experts on what it received: routes to
 *             experts it does not hold contribute nothing, so each received
 *             row becomes that rank's weighted share of the token's output,
 *             and padding rows (routed to an expert no rank holds) become zeros;
 *   combine   the shares go back to the origin rank (the reverse
 *             all-to-all, fixed size), which adds them in rank order.
 * cap is the group's largest token count of the step, agreed once per step
 * (at layer 0) by an all-gather of the ranks' counts: the only value read
 * back to the host, one small copy per step and none per layer. The routes
 * never cross to the host, so no count exchange is needed before the
 * payload (padding rows describe themselves). */
#ifndef TANDEM_ENGINE_EP_DISPATCH_H
#define TANDEM_ENGINE_EP_DISPATCH_H
#include <stdint.h>
#include "kernels/backend.h"

struct tm_model;
typedef struct tm_ep_state tm_ep_state;

/* NULL when out of memory. */
tm_ep_state *tm_ep_state_new(void);
void tm_ep_state_free(const kn_backend *be, tm_ep_state *s);

/* out[T][H] = the layer's MoE output for this rank's T tokens, from xn
 * [T][H] and the routes eidx/ew [T][k] (backend buffers). T may be 0 (all
 * four NULL): the rank still serves the others. Every rank calls it for
 * layers 0, 1, ... of each step (layer 0 agrees the step's capacity).
 * Collective over the model's EP group; TN_ERR_PEER when a peer failed. */
int tm_ep_dispatch_moe(struct tm_model *m, int layer, const float *xn,
                       const int32_t *eidx, const float *ew, int T, float *out);

#endif
