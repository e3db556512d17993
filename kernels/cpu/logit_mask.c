/* Token masks on the CPU (kernels/logit_mask.h); arguments checked by the
 * dispatcher. */
#include <math.h>
#include "common/status.h"
#include "kernels/cpu/cpu_ops.h"

int kn_logit_mask_cpu(float *logits, int n_rows, int vocab, const uint32_t *mask)
{
    const int words = kn_logit_mask_words(vocab);
    for (int r = 0; r < n_rows; r++) {
        float *l = logits + (size_t)r * vocab;
        const uint32_t *m = mask + (size_t)r * words;
        for (int t = 0; t < vocab; t++)
            if (!(m[t >> 5] >> (t & 31) & 1u))
                l[t] = -INFINITY;
    }
    return TN_OK;
}
