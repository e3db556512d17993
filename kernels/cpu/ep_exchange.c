/* Expert-parallel exchange on the CPU (kernels/ep_exchange.h). */
#include <string.h>
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ep_exchange.h"
#include "common/status.h"

/* Whether token t has a route to rank p's experts. */
static int goes_to(const int32_t *eidx, int k, int p, int per_rank, int n_experts)
{
    for (int j = 0; j < k; j++) {
        int e = eidx[j];
        if (e >= 0 && e < n_experts && e / per_rank == p)
            return 1;
    }
    return 0;
}

int kn_ep_pack_cpu(void *send, int32_t *slot, const float *x, const int32_t *expert_idx,
                   const float *expert_w, int n_tokens, int k, int dim, int n_ranks,
                   int experts_per_rank, int cap)
{
    const size_t rw = KN_EP_ROW_WORDS(dim, k);
    const int n_experts = n_ranks * experts_per_rank;
    #pragma omp parallel for schedule(static) if ((size_t)n_tokens * dim * n_ranks > 65536)
    for (int p = 0; p < n_ranks; p++) {
        uint32_t *block = (uint32_t *)send + (size_t)p * cap * rw;
        int row = 0;
        for (int t = 0; t < n_tokens; t++) {
            const int32_t *ids = expert_idx + (size_t)t * k;
            if (!goes_to(ids, k, p, experts_per_rank, n_experts)) {
                slot[(size_t)p * n_tokens + t] = -1;
                continue;
            }
            uint32_t *dst = block + (size_t)row * rw;
            memcpy(dst, x + (size_t)t * dim, (size_t)dim * sizeof(float));
            memcpy(dst + dim, ids, (size_t)k * sizeof(int32_t));
            memcpy(dst + dim + k, expert_w + (size_t)t * k, (size_t)k * sizeof(float));
            slot[(size_t)p * n_tokens + t] = row++;
        }
        for (; row < cap; row++) {
            uint32_t *dst = block + (size_t)row * rw;
            for (int j = 0; j < k; j++) {
                int32_t none = n_experts;   /* held by no rank */
                float zero = 0.0f;
                memcpy(dst + dim + j, &none, sizeof(none));
                memcpy(dst + dim + k + j, &zero, sizeof(zero));
            }
        }
    }
    return TN_OK;
}

int kn_ep_unpack_cpu(float *x, int32_t *expert_idx, float *expert_w, const void *recv,
                     int n_rows, int k, int dim)
{
    const size_t rw = KN_EP_ROW_WORDS(dim, k);
    #pragma omp parallel for schedule(static) if ((size_t)n_rows * dim > 65536)
    for (int r = 0; r < n_rows; r++) {
        const uint32_t *src = (const uint32_t *)recv + (size_t)r * rw;
        memcpy(x + (size_t)r * dim, src, (size_t)dim * sizeof(float));
        memcpy(expert_idx + (size_t)r * k, src + dim, (size_t)k * sizeof(int32_t));
        memcpy(expert_w + (size_t)r * k, src + dim + k, (size_t)k * sizeof(float));
    }
    return TN_OK;
}

int kn_ep_combine_cpu(float *out, const float *shares, const int32_t *slot, int n_tokens,
                      int dim, int n_ranks, int cap)
{
    #pragma omp parallel for schedule(static) if ((size_t)n_tokens * dim > 65536)
    for (int t = 0; t < n_tokens; t++) {
        float *o = out + (size_t)t * dim;
        memset(o, 0, (size_t)dim * sizeof(float));
        for (int p = 0; p < n_ranks; p++) {
            int32_t s = slot[(size_t)p * n_tokens + t];
            if (s < 0)
                continue;
            const float *sh = shares + ((size_t)p * cap + (size_t)s) * dim;
            for (int i = 0; i < dim; i++)
                o[i] += sh[i];
        }
    }
    return TN_OK;
}
