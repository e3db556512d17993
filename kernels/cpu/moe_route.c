/* MoE routing on the CPU: top-k expert selection and the routing weights.
 *
 * Selection walks the strict order "larger logit first, then lower id"
 * k times, each time taking the best expert after the previous pick: no
 * scratch, O(k * n_experts), and ties resolve to the lower id as torch.topk
 * does. Selecting on logits equals selecting on softmax probabilities
 * because softmax is monotonic. Weights are computed in double and rounded
 * to float once. */
#include <math.h>
#include "kernels/kn_check.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/moe.h"
#include "common/status.h"

/* 1 when expert a (logit va) comes before expert b (logit vb). */
static int route_before(float va, int a, float vb, int b)
{
    return va > vb || (va == vb && a < b);
}

/* Fills idx[k] with the k best experts of one token, best first. */
static void route_topk(const float *logits, int n_experts, int k, int32_t *idx)
{
    for (int i = 0; i < k; i++) {
        int best = -1;
        for (int e = 0; e < n_experts; e++) {
            if (i > 0 && !route_before(logits[idx[i - 1]], idx[i - 1], logits[e], e))
                continue; /* already picked, or ranked before a pick */
            if (best < 0 || route_before(logits[e], e, logits[best], best))
                best = e;
        }
        idx[i] = best;
    }
}

int kn_moe_route_cpu(int32_t *expert_idx, float *expert_w, const float *logits,
                     int n_tokens, int n_experts, int k, kn_route_mode mode,
                     int renormalize)
{
    static const char op[] = "kn_moe_route";
    for (size_t i = 0; i < (size_t)n_tokens * n_experts; i++)
        if (!isfinite(logits[i]))
            return kn_arg_error(op, "token %zu has a non-finite router logit for expert %zu",
                                i / n_experts, i % n_experts);

    #pragma omp parallel for schedule(static) if ((size_t)n_tokens * n_experts * k > 65536)
    for (int t = 0; t < n_tokens; t++) {
        const float *lt = logits + (size_t)t * n_experts;
        int32_t *it = expert_idx + (size_t)t * k;
        float *wt = expert_w + (size_t)t * k;
        route_topk(lt, n_experts, k, it);
        double top = lt[it[0]];
        /* GPT-OSS takes a softmax over the k picks. Qwen3 takes it over all
         * experts, and renormalising its top-k to sum 1 turns it back into a
         * softmax over the k picks. */
        int over_picks = mode == KN_ROUTE_TOPK_SOFTMAX || renormalize;
        double denom = 0.0;
        if (over_picks) {
            for (int i = 0; i < k; i++)
                denom += exp((double)lt[it[i]] - top);
        } else {
            for (int e = 0; e < n_experts; e++)
                denom += exp((double)lt[e] - top);
        }
        for (int i = 0; i < k; i++)
            wt[i] = (float)(exp((double)lt[it[i]] - top) / denom);
    }
    return TN_OK;
}
