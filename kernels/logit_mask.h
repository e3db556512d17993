/* Token masks of constrained decoding (engine/grammar.h), applied to
 * logits in place before sampling: logits[r][t] becomes -inf where bit t of
 * row r's mask is 0 (bit t of a row is word t / 32, bit t % 32 of the row's
 * (vocab + 31) / 32 words). mask is host memory [n_rows][words]; the
 * backend copies it where the logits are. A row whose mask allows no token
 * is refused (every logit -inf samples nothing). */
#ifndef TANDEM_KERNELS_LOGIT_MASK_H
#define TANDEM_KERNELS_LOGIT_MASK_H
#include <stdint.h>
#include "kernels/backend.h"

static inline int kn_logit_mask_words(int vocab)
{
    return (vocab + 31) / 32;
}

int kn_logit_mask_apply(const kn_backend *be, float *logits, int n_rows, int vocab,
                        const uint32_t *mask);
#endif
