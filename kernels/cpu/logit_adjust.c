/* Penalties and logit_bias on the CPU (kernels/logit_adjust.h). The
 * arguments were checked by the dispatcher; only the entries are touched. */
#include "common/status.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/logit_adjust_rule.h"

int kn_logit_adjust_cpu(float *logits, int n_rows, int vocab, const kn_logit_adjust *params,
                        const int32_t *row_start, const kn_logit_entry *entries)
{
    for (int r = 0; r < n_rows; r++) {
        float *l = logits + (size_t)r * vocab;
        const kn_logit_adjust *p = &params[r];
        for (int32_t k = row_start[r]; k < row_start[r + 1]; k++) {
            const kn_logit_entry *e = &entries[k];
            l[e->token] = kn_logit_adjust_rule(l[e->token], p->presence, p->frequency,
                                               p->repetition, e);
        }
    }
    return TN_OK;
}
