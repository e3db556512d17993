/* Deterministic KV contents for transfer tests, the bench and smoke checks:
 * every byte of element (layer, K/V, head, token, dim) is a hash of those
 * coordinates and a seed, so a receiver can verify what it got without ever
 * seeing the sender's memory, whatever the two shardings are. */
#ifndef TANDEM_TRANSFER_PATTERN_H
#define TANDEM_TRANSFER_PATTERN_H
#include <stddef.h>
#include <stdint.h>
#include "transfer/transfer_kv.h"

/* Writes the request's first n_tokens tokens of this rank's heads into one
 * pool (layer, kv: 0 K, 1 V) at the pages listed in `pages`. */
void te_pattern_fill(const te_kv_layout *l, void *pool, int layer, int kv,
                     const int32_t *pages, int n_tokens, uint64_t seed);

/* Checks a whole receiver pool: bytes of the request's tokens must hold the
 * pattern, every other byte must still be `sentinel`. Returns the number of
 * wrong bytes and describes the first one in `why`. */
size_t te_pattern_verify(const te_kv_layout *l, const void *pool, int layer, int kv,
                         const int32_t *pages, int n_tokens, uint64_t seed, uint8_t sentinel,
                         char *why, size_t why_len);

#endif
