/* Parallel layouts of the model: which part of every weight and of the KV
 * cache a rank holds, and through which communicators the ranks combine.
 *
 * Two layouts, as the seeds run them:
 *   prefill  TP (+EP): every rank of the TP group sees the same tokens.
 *            Attention heads are split across the TP group (o_proj is
 *            row-split and all-reduced); experts are split across an EP
 *            group inside it; each rank computes only its experts' share of
 *            every token and an all-reduce over the EP group combines.
 *   decode   DP + EP: every rank has its own sequences and KV cache; dense
 *            weights are replicated; experts are split across the EP group;
 *            each rank sends its tokens to the ranks holding their experts
 *            (all-to-all dispatch) and gets the weighted results back
 *            (all-to-all combine). A rank without sequences still joins.
 * A model loaded without a layout (tm_model_load) is the single-rank model
 * and never communicates. */
#ifndef TANDEM_ENGINE_PARALLEL_H
#define TANDEM_ENGINE_PARALLEL_H
#include <stddef.h>
#include "engine/comm.h"
#include "engine/config.h"

typedef enum {
    TM_EP_NONE = 0,        /* every expert on every rank */
    TM_EP_REPLICATED = 1,  /* EP ranks share tokens: local experts + all-reduce */
    TM_EP_DISPATCH = 2,    /* EP ranks own tokens: all-to-all dispatch/combine */
} tm_ep_mode;

/* What tm_model_load_parallel needs. The communicators are borrowed: they
 * must outlive the model. NULL or a group of one means "not split" (unless
 * keep_single). */
typedef struct tm_parallel {
    comm *tp;
    comm *ep;
    tm_ep_mode ep_mode;
    /* Tests only: keep groups of one rank and run their collectives anyway
     * (normally a group of one is "not split" and never communicates), so
     * that one GPU can drive every collective of a layout through NCCL at
     * world size 1 (tests/gpu/test_parallel_nccl.c). The results are the
     * single-rank model's. */
    int keep_single;
} tm_parallel;

/* The groups of a layout, split from a world communicator. */
typedef struct tm_groups {
    comm *tp, *ep;         /* owned; NULL when not split */
    tm_parallel par;       /* points at the two above */
    int tp_size, ep_size, dp_size;
} tm_groups;

/* Builds the groups for a layout over `world` (which must have tp * dp
 * ranks): tp > 1 (with dp == 1) is the prefill layout, ranks [i*ep,
 * (i+1)*ep) forming EP group i inside the TP group; dp >= 1 (with tp == 1)
 * is the decode layout, EP groups likewise of consecutive ranks. ep must
 * divide the group it lives in. Collective over world. On failure returns a
 * negative status with the reason in err; nothing is left allocated. */
int tm_groups_init(tm_groups *g, comm *world, int tp, int ep, int dp,
                   char *err, size_t errlen);
void tm_groups_free(tm_groups *g);

/* This rank's slice of the model. */
typedef struct tm_shard {
    int tp_rank, tp_size, ep_rank, ep_size;
    int n_heads, head0;        /* local query heads: [head0, head0 + n_heads) */
    int n_kv_heads, kv_head0;  /* local KV heads (one replica when tp > n_kv_heads) */
    int n_experts, expert0;    /* local experts */
    int o_bias;                /* this rank adds the o_proj bias (TP rank 0) */
} tm_shard;

/* The whole model on one rank. */
void tm_shard_full(const tm_config *c, tm_shard *s);
/* Plans the shard of (tp_rank of tp_size, ep_rank of ep_size). Needs
 * n_heads % tp_size == 0, and n_kv_heads % tp_size == 0 or tp_size %
 * n_kv_heads == 0 (then each KV head is replicated on tp_size / n_kv_heads
 * ranks, those whose query heads read it), and n_experts % ep_size == 0. */
int tm_shard_plan(const tm_config *c, int tp_rank, int tp_size, int ep_rank,
                  int ep_size, tm_shard *s, char *err, size_t errlen);

#endif
