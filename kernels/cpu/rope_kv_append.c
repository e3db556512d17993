/* kn_rope_kv_append on the CPU: the separate ops it stands for, in order
 * (kernels/rope_kv.h), after the batch and positions are checked so that a
 * bad call changes nothing. */
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/seq_batch.h"
#include "kernels/kn_check.h"
#include "kernels/rope_kv.h"
#include "common/status.h"

int kn_rope_kv_append_cpu(float *q, float *k, const float *v, const kn_kv_pools *pools,
                          const kn_seq_batch *b, int n_heads, int n_kv_heads, int head_dim,
                          int page_size, const kn_qk_rope *r)
{
    static const char op[] = "kn_rope_kv_append";
    int rc = kn_cpu_check_seq_batch(op, b, page_size, 0);
    if (rc != TN_OK)
        return rc;
    const int rows = b->n_rows;
    for (int t = 0; t < rows; t++)
        if (r->pos[t] < 0)
            return kn_arg_error(op, "row %d has negative position %d", t, (int)r->pos[t]);
    if (r->q_norm) {
        rc = kn_rmsnorm_cpu(q, q, r->q_norm, rows * n_heads, head_dim, r->eps);
        if (rc == TN_OK)
            rc = kn_rmsnorm_cpu(k, k, r->k_norm, rows * n_kv_heads, head_dim, r->eps);
    }
    if (rc == TN_OK)
        rc = kn_rope_cpu(q, r->pos, rows, n_heads, head_dim, r->inv_freq, r->attn_scale);
    if (rc == TN_OK)
        rc = kn_rope_cpu(k, r->pos, rows, n_kv_heads, head_dim, r->inv_freq, r->attn_scale);
    if (rc == TN_OK)
        rc = kn_kv_append_cpu(pools, k, v, b, n_kv_heads, head_dim, page_size);
    return rc;
}
