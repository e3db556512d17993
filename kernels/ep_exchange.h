/* Expert-parallel exchange: the device side of the DP+EP decoder's MoE
 * dispatch and combine (engine/ep_dispatch.c), so that the routes never
 * leave the device.
 *
 * Fixed capacity: every rank sends every peer exactly `cap` packed rows per
 * layer (cap >= each rank's token count, agreed by the group once per
 * step), so the communicator's sizes are known on the host without reading
 * the routes back. A row that carries no token routes nowhere (every expert
 * id is n_ranks * experts_per_rank, an expert no rank holds), so the
 * receiver needs no count: kn_moe_experts gives such rows zero.
 *
 * A packed row is KN_EP_ROW_WORDS(dim, k) 32-bit words: the token's
 * activations (dim floats), its k expert ids (int32), its k weights
 * (float). */
#ifndef TANDEM_KERNELS_EP_EXCHANGE_H
#define TANDEM_KERNELS_EP_EXCHANGE_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/backend.h"

#define KN_EP_ROW_WORDS(dim, k) ((size_t)(dim) + 2 * (size_t)(k))

/* send [n_ranks][cap] packed rows. For each rank p, the tokens t (in
 * ascending order) with at least one route to an expert of p (expert e
 * belongs to rank e / experts_per_rank) fill rows 0, 1, ... of p's block,
 * and slot[p * n_tokens + t] is that row, -1 for a token that does not go
 * to p. The rows after the last get expert ids n_ranks * experts_per_rank
 * (held nowhere) and weights 0; their activations are not written. A route to an expert outside
 * [0, n_ranks * experts_per_rank) goes nowhere. n_tokens <= cap; with
 * n_tokens == 0, x, expert_idx, expert_w and slot may be NULL. */
int kn_ep_pack(const kn_backend *be, void *send, int32_t *slot, const float *x,
               const int32_t *expert_idx, const float *expert_w, int n_tokens, int k,
               int dim, int n_ranks, int experts_per_rank, int cap);

/* Splits n_rows packed rows into x [n_rows][dim] and expert_idx, expert_w
 * [n_rows][k] (the arrays kn_moe_experts takes). */
int kn_ep_unpack(const kn_backend *be, float *x, int32_t *expert_idx, float *expert_w,
                 const void *recv, int n_rows, int k, int dim);

/* out[t] = the sum, over p = 0 .. n_ranks-1 in that order, of
 * shares[p * cap + slot[p * n_tokens + t]] for the p with slot >= 0 (a zero
 * row when there is none). shares [n_ranks * cap][dim]: what each rank sent
 * back for the rows this rank packed. */
int kn_ep_combine(const kn_backend *be, float *out, const float *shares, const int32_t *slot,
                  int n_tokens, int dim, int n_ranks, int cap);

#endif
