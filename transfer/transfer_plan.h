/* Resharding planner: which contiguous byte ranges to copy so that a
 * request's KV cache, held by the sender under one sharding, lands in the
 * receiver's pools under another.
 *
 * Both sides store every layer's K and V pool in the HND paged layout of
 * kernels/attention.h: pool[page][local_kv_head][slot][head_dim]. One pool
 * has the same geometry for every layer and for K and V, so the plan is
 * computed for one pool and applied to each (layer, K/V) pool pair; offsets
 * are bytes from the start of a pool.
 *
 * Sharding of the KV heads over TP ranks (n = n_kv_heads):
 *   tp <= n (n % tp == 0): rank r holds heads [r*n/tp, (r+1)*n/tp).
 *   tp >  n (tp % n == 0): heads are replicated; rank r holds the single head
 *                          r / (tp/n). A receiver replica needs its own copy;
 *                          a sender replica set provides each head once.
 *
 * The plan is a pure function of its inputs: no I/O, no UCX. */
#ifndef TANDEM_TRANSFER_PLAN_H
#define TANDEM_TRANSFER_PLAN_H
#include <stddef.h>
#include <stdint.h>

typedef struct te_kv_geometry {
    int n_kv_heads;   /* KV heads of the model (all ranks together) */
    int head_dim;
    int elem_bytes;   /* bytes per element: 4 for float pools, 2 for bf16 */
} te_kv_geometry;

/* One side (sender or receiver) of a transfer. */
typedef struct te_kv_sharding {
    int tp;         /* ranks sharing the KV heads */
    int page_size;  /* tokens per page */
    int n_pages;    /* capacity of each rank's pool, in pages (bounds check) */
    /* page_table[rank] lists the request's pages on that rank in token order:
     * ceil(n_tokens / page_size) ids in [0, n_pages). Ranks a plan is not
     * asked about (see the rank filters) may be NULL. */
    const int32_t *const *page_table;
} te_kv_sharding;

/* One contiguous copy inside a single pool of each side. */
typedef struct te_plan_copy {
    int src_rank, dst_rank;
    uint64_t src_offset, dst_offset, length; /* bytes */
} te_plan_copy;

typedef struct te_reshard_plan {
    te_plan_copy *copies;  /* sorted by (src_rank, dst_rank, src_offset) */
    size_t n_copies;
    uint64_t bytes;        /* sum of lengths */
} te_reshard_plan;

/* Heads rank `rank` holds under `tp`: [*first, *first + *count). Returns 0 or
 * -1 when the sharding is not one of the two forms above. */
int te_kv_rank_heads(int n_kv_heads, int tp, int rank, int *first, int *count);

/* The sender rank that provides KV head `head` to receiver rank `dst_rank`.
 * With replicated sender heads the replicas take turns by (head + dst_rank),
 * so a TP=8 prefiller with 4 KV heads spreads the work over 4 ranks instead
 * of always reading the first replica. */
int te_kv_source_rank(int n_kv_heads, int src_tp, int head, int dst_rank);

/* Bytes of one page of one pool on a rank holding `local_heads` heads. */
uint64_t te_kv_page_bytes(const te_kv_geometry *g, int local_heads, int page_size);

/* Builds the minimal list of contiguous copies moving the first n_tokens
 * tokens of the request from `src` to `dst`: runs are split at every page
 * boundary of either side and then merged wherever they are contiguous in
 * both source and destination, so no two emitted copies could be merged.
 * src_rank_filter / dst_rank_filter (-1 = all) restrict the plan to the
 * copies one sender (or receiver) rank takes part in. On error returns -1,
 * writes a message into err and leaves *plan empty. */
int te_reshard_plan_build(const te_kv_geometry *g, int n_tokens,
                          const te_kv_sharding *src, const te_kv_sharding *dst,
                          int src_rank_filter, int dst_rank_filter,
                          te_reshard_plan *plan, char *err, size_t err_len);
void te_reshard_plan_free(te_reshard_plan *plan);

#endif
