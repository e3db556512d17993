/* Token embedding lookup: out[t] = table[ids[t]].
 * Returns TN_ERR_ARG (and writes nothing) if any id is outside [0, vocab). */
#ifndef TANDEM_KERNELS_EMBEDDING_H
#define TANDEM_KERNELS_EMBEDDING_H
#include <stdint.h>
#include "kernels/backend.h"

int kn_embedding(const kn_backend *be, float *out, const float *table,
                 const int32_t *ids, int n_tokens, int vocab, int dim);

/* out[i] = table[rows[i]] for rows the caller has already checked to lie
 * in [0, n_table_rows) (the engine checks token ids on the host before
 * they are uploaded): no verdict comes back, so on CUDA nothing waits for
 * the host and the call can be captured in a graph. A row outside the
 * table still never reads outside it: its output row is zeros. */
int kn_gather_rows(const kn_backend *be, float *out, const float *table,
                   const int32_t *rows, int n, int n_table_rows, int dim);
#endif
