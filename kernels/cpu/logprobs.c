/* Log-probabilities on the CPU (kernels/logprobs.h): per row one pass for
 * the max and the bad values, one for sum exp(l - max) in double, one that
 * keeps the top_n candidates in a small sorted array. */
#include <math.h>
#include "common/status.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/kn_check.h"
#include "kernels/logprobs.h"

/* 1 when logit a (id ia) ranks before b (id ib): higher first, then lower id. */
static int ranks_before(float a, int ia, float b, int ib)
{
    return a > b || (a == b && ia < ib);
}

int kn_logprobs_cpu(const float *logits, int n_rows, int vocab, const int32_t *tokens,
                    float *token_logprob, int top_n, int32_t *top_ids, float *top_logprobs)
{
    static const char op[] = "kn_logprobs";
    for (int r = 0; r < n_rows; r++) {
        const float *l = logits + (size_t)r * vocab;
        float mx = -INFINITY;
        for (int i = 0; i < vocab; i++) {
            if (isnan(l[i]) || l[i] == INFINITY)
                return kn_arg_error(op, "row %d: logit %d is %g", r, i, (double)l[i]);
            if (l[i] > mx)
                mx = l[i];
        }
        if (mx == -INFINITY)
            return kn_arg_error(op, "row %d: every logit is -inf", r);
        double sum = 0.0;
        for (int i = 0; i < vocab; i++)
            sum += exp((double)l[i] - (double)mx);
        const double log_z = (double)mx + log(sum);
        if (token_logprob)
            token_logprob[r] = tokens[r] >= 0 ? (float)((double)l[tokens[r]] - log_z) : NAN;
        if (top_n == 0)
            continue;
        int32_t *ids = top_ids + (size_t)r * top_n;
        float *lps = top_logprobs + (size_t)r * top_n;
        int kept = 0;
        for (int i = 0; i < vocab; i++) {
            if (kept == top_n && !ranks_before(l[i], i, l[ids[kept - 1]], ids[kept - 1]))
                continue;
            int at = kept < top_n ? kept++ : top_n - 1;
            while (at > 0 && ranks_before(l[i], i, l[ids[at - 1]], ids[at - 1])) {
                ids[at] = ids[at - 1];
                at--;
            }
            ids[at] = i;
        }
        for (int j = 0; j < top_n; j++)
            lps[j] = (float)((double)l[ids[j]] - log_z);
    }
    return TN_OK;
}
