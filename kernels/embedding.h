/* Token embedding lookup: out[t] = table[ids[t]].
 * Returns TN_ERR_ARG (and writes nothing) if any id is outside [0, vocab). */
#ifndef TANDEM_KERNELS_EMBEDDING_H
#define TANDEM_KERNELS_EMBEDDING_H
#include <stdint.h>
#include "kernels/backend.h"

int kn_embedding(const kn_backend *be, float *out, const float *table,
                 const int32_t *ids, int n_tokens, int vocab, int dim);
#endif
