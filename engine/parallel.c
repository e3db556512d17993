/* Layout planning: the shard of each rank and the TP/EP groups. */
#include "engine/parallel.h"
#include <string.h>
#include "common/file.h"
#include "common/status.h"

void tm_shard_full(const tm_config *c, tm_shard *s)
{
    *s = (tm_shard){
        .tp_rank = 0, .tp_size = 1, .ep_rank = 0, .ep_size = 1,
        .n_heads = c->n_heads, .head0 = 0,
        .n_kv_heads = c->n_kv_heads, .kv_head0 = 0,
        .n_experts = c->n_experts, .expert0 = 0, .o_bias = 1,
    };
}

int tm_shard_plan(const tm_config *c, int tp_rank, int tp_size, int ep_rank, int ep_size,
                  tm_shard *s, char *err, size_t errlen)
{
    if (tp_size < 1 || ep_size < 1 || tp_rank < 0 || tp_rank >= tp_size || ep_rank < 0 ||
        ep_rank >= ep_size) {
        tn_errf(err, errlen, "parallel layout: rank %d of TP %d / rank %d of EP %d is "
                "out of range", tp_rank, tp_size, ep_rank, ep_size);
        return TN_ERR_ARG;
    }
    if (c->n_heads % tp_size != 0) {
        tn_errf(err, errlen, "TP %d does not divide the %d attention heads", tp_size,
                c->n_heads);
        return TN_ERR_ARG;
    }
    if (c->n_kv_heads % tp_size != 0 && tp_size % c->n_kv_heads != 0) {
        tn_errf(err, errlen, "TP %d and the %d KV heads: one must divide the other",
                tp_size, c->n_kv_heads);
        return TN_ERR_ARG;
    }
    if (c->n_experts % ep_size != 0) {
        tn_errf(err, errlen, "EP %d does not divide the %d experts", ep_size, c->n_experts);
        return TN_ERR_ARG;
    }
    tm_shard_full(c, s);
    s->tp_rank = tp_rank;
    s->tp_size = tp_size;
    s->ep_rank = ep_rank;
    s->ep_size = ep_size;
    s->n_heads = c->n_heads / tp_size;
    s->head0 = tp_rank * s->n_heads;
    if (tp_size <= c->n_kv_heads) {
        s->n_kv_heads = c->n_kv_heads / tp_size;
        s->kv_head0 = tp_rank * s->n_kv_heads;
    } else {
        /* More ranks than KV heads: every local query head reads the same KV
         * head (group size n_heads/n_kv_heads is a multiple of the local
         * head count), so the rank keeps that one head: a replica. */
        s->n_kv_heads = 1;
        s->kv_head0 = s->head0 / (c->n_heads / c->n_kv_heads);
    }
    s->n_experts = c->n_experts / ep_size;
    s->expert0 = ep_rank * s->n_experts;
    s->o_bias = tp_rank == 0;
    return TN_OK;
}

void tm_groups_free(tm_groups *g)
{
    if (!g)
        return;
    comm_free(g->ep);
    comm_free(g->tp);
    memset(g, 0, sizeof(*g));
}

int tm_groups_init(tm_groups *g, comm *world, int tp, int ep, int dp, char *err,
                   size_t errlen)
{
    memset(g, 0, sizeof(*g));
    if (!world || tp < 1 || ep < 1 || dp < 1) {
        tn_errf(err, errlen, "parallel layout: tp, ep and dp must be >= 1");
        return TN_ERR_ARG;
    }
    const int W = comm_size(world), r = comm_rank(world);
    if (tp * dp != W) {
        tn_errf(err, errlen, "parallel layout: tp %d x dp %d needs %d ranks, the group "
                "has %d", tp, dp, tp * dp, W);
        return TN_ERR_ARG;
    }
    if (tp > 1 && dp > 1) {
        tn_errf(err, errlen, "parallel layout: TP and DP together are not supported "
                "(prefill uses TP+EP, decode DP+EP)");
        return TN_ERR_ARG;
    }
    int span = tp > 1 ? tp : dp;   /* the ranks EP groups are carved from */
    if (span % ep != 0) {
        tn_errf(err, errlen, "parallel layout: EP %d does not divide the %d %s ranks", ep,
                span, tp > 1 ? "TP" : "DP");
        return TN_ERR_ARG;
    }
    g->tp_size = tp;
    g->ep_size = ep;
    g->dp_size = dp;
    int rc = TN_OK;
    if (tp > 1) {
        rc = comm_split(world, 0, r, &g->tp);
    }
    if (!rc && ep > 1)
        rc = comm_split(world, r / ep, r, &g->ep);
    if (rc) {
        tn_errf(err, errlen, "parallel layout: splitting the groups failed: %s",
                comm_error(world));
        tm_groups_free(g);
        return rc;
    }
    g->par.tp = g->tp;
    g->par.ep = g->ep;
    g->par.ep_mode = ep == 1 ? TM_EP_NONE : tp > 1 ? TM_EP_REPLICATED : TM_EP_DISPATCH;
    return TN_OK;
}
