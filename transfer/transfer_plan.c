#include "transfer/transfer_plan.h"
#include "common/status.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int te_kv_rank_heads(int n_kv_heads, int tp, int rank, int *first, int *count)
{
    if (n_kv_heads < 1 || tp < 1 || rank < 0 || rank >= tp)
        return -1;
    if (tp <= n_kv_heads) {
        if (n_kv_heads % tp)
            return -1;
        *count = n_kv_heads / tp;
        *first = rank * *count;
    } else {
        if (tp % n_kv_heads)
            return -1;
        *count = 1;
        *first = rank / (tp / n_kv_heads);
    }
    return 0;
}

int te_kv_source_rank(int n_kv_heads, int src_tp, int head, int dst_rank)
{
    if (n_kv_heads < 1 || src_tp < 1 || head < 0 || head >= n_kv_heads || dst_rank < 0)
        return -1;
    if (src_tp <= n_kv_heads) {
        if (n_kv_heads % src_tp)
            return -1;
        return head / (n_kv_heads / src_tp);
    }
    if (src_tp % n_kv_heads)
        return -1;
    int replicas = src_tp / n_kv_heads;
    return head * replicas + (head + dst_rank) % replicas;
}

uint64_t te_kv_page_bytes(const te_kv_geometry *g, int local_heads, int page_size)
{
    return (uint64_t)local_heads * (uint64_t)page_size * (uint64_t)g->head_dim *
           (uint64_t)g->elem_bytes;
}

static int check_side(const char *what, const te_kv_geometry *g, int n_tokens,
                      const te_kv_sharding *s, int rank_filter, char *err, size_t err_len)
{
    int first, count;
    if (s->tp < 1 || te_kv_rank_heads(g->n_kv_heads, s->tp, 0, &first, &count))
        return tn_fail(err, err_len, TN_ERR_ARG,
                          "%s TP=%d cannot shard %d KV heads (need heads %% tp == 0 "
                          "or tp %% heads == 0)", what, s->tp, g->n_kv_heads);
    if (s->page_size < 1 || s->n_pages < 0)
        return tn_fail(err, err_len, TN_ERR_ARG, "%s page_size %d / n_pages %d invalid", what,
                          s->page_size, s->n_pages);
    if (rank_filter < -1 || rank_filter >= s->tp)
        return tn_fail(err, err_len, TN_ERR_ARG, "%s rank filter %d outside TP=%d", what,
                          rank_filter, s->tp);
    if (!s->page_table)
        return tn_fail(err, err_len, TN_ERR_ARG, "%s page table missing", what);
    int pages = (n_tokens + s->page_size - 1) / s->page_size;
    for (int r = 0; r < s->tp; r++) {
        if (rank_filter >= 0 && r != rank_filter)
            continue;
        if (!s->page_table[r])
            return tn_fail(err, err_len, TN_ERR_ARG, "%s rank %d has no page table", what, r);
        for (int i = 0; i < pages; i++) {
            int32_t p = s->page_table[r][i];
            if (p < 0 || p >= s->n_pages)
                return tn_fail(err, err_len, TN_ERR_ARG,
                                  "%s rank %d page_table[%d] = %d outside pool of %d pages",
                                  what, r, i, p, s->n_pages);
        }
    }
    return 0;
}

static int copy_order(const void *pa, const void *pb)
{
    const te_plan_copy *a = pa, *b = pb;
    if (a->src_rank != b->src_rank)
        return a->src_rank < b->src_rank ? -1 : 1;
    if (a->dst_rank != b->dst_rank)
        return a->dst_rank < b->dst_rank ? -1 : 1;
    if (a->src_offset != b->src_offset)
        return a->src_offset < b->src_offset ? -1 : 1;
    return 0;
}

/* Within one (src_rank, dst_rank) pair no source byte is read twice (each
 * destination head of a rank is a different model head), so after sorting by
 * source offset two runs that touch in the source are neighbours: one pass
 * that merges neighbours touching in both source and destination yields
 * maximal runs, i.e. the fewest copies that express the byte mapping. */
static size_t merge_sorted(te_plan_copy *c, size_t n)
{
    if (n == 0)
        return 0;
    size_t out = 0;
    for (size_t i = 1; i < n; i++) {
        te_plan_copy *last = &c[out];
        if (c[i].src_rank == last->src_rank && c[i].dst_rank == last->dst_rank &&
            last->src_offset + last->length == c[i].src_offset &&
            last->dst_offset + last->length == c[i].dst_offset) {
            last->length += c[i].length;
        } else {
            c[++out] = c[i];
        }
    }
    return out + 1;
}

int te_reshard_plan_build(const te_kv_geometry *g, int n_tokens,
                          const te_kv_sharding *src, const te_kv_sharding *dst,
                          int src_rank_filter, int dst_rank_filter,
                          te_reshard_plan *plan, char *err, size_t err_len)
{
    if (!plan)
        return tn_fail(err, err_len, TN_ERR_ARG, "plan output is NULL");
    memset(plan, 0, sizeof *plan);
    if (!g || !src || !dst)
        return tn_fail(err, err_len, TN_ERR_ARG, "geometry or sharding is NULL");
    if (g->n_kv_heads < 1 || g->head_dim < 1 || g->elem_bytes < 1)
        return tn_fail(err, err_len, TN_ERR_ARG, "geometry invalid: %d heads, head_dim %d, %d-byte elements",
                          g->n_kv_heads, g->head_dim, g->elem_bytes);
    if (n_tokens < 0)
        return tn_fail(err, err_len, TN_ERR_ARG, "n_tokens %d is negative", n_tokens);
    if (check_side("sender", g, n_tokens, src, src_rank_filter, err, err_len) ||
        check_side("receiver", g, n_tokens, dst, dst_rank_filter, err, err_len))
        return TN_ERR_ARG;
    if (n_tokens == 0)
        return 0;

    const uint64_t token_bytes = (uint64_t)g->head_dim * (uint64_t)g->elem_bytes;
    int src_heads, dst_heads, unused;
    te_kv_rank_heads(g->n_kv_heads, src->tp, 0, &unused, &src_heads);
    te_kv_rank_heads(g->n_kv_heads, dst->tp, 0, &unused, &dst_heads);

    /* Upper bound on runs before merging: each (dst rank, dst head) token
     * range is cut at most at every page boundary of both sides. */
    size_t per_head = (size_t)n_tokens / (size_t)src->page_size +
                      (size_t)n_tokens / (size_t)dst->page_size + 1;
    size_t cap = per_head * (size_t)dst_heads * (size_t)dst->tp;
    te_plan_copy *c = malloc(cap * sizeof *c);
    if (!c)
        return tn_fail(err, err_len, TN_ERR_ARG, "out of memory for %zu plan entries", cap);
    size_t n = 0;

    for (int d = 0; d < dst->tp; d++) {
        if (dst_rank_filter >= 0 && d != dst_rank_filter)
            continue;
        int d_first, d_count;
        te_kv_rank_heads(g->n_kv_heads, dst->tp, d, &d_first, &d_count);
        for (int dh = 0; dh < d_count; dh++) {
            int head = d_first + dh;
            int s = te_kv_source_rank(g->n_kv_heads, src->tp, head, d);
            if (src_rank_filter >= 0 && s != src_rank_filter)
                continue;
            int s_first, s_count;
            te_kv_rank_heads(g->n_kv_heads, src->tp, s, &s_first, &s_count);
            int sh = head - s_first;
            const int32_t *spt = src->page_table[s], *dpt = dst->page_table[d];
            for (int t = 0; t < n_tokens;) {
                int s_slot = t % src->page_size, d_slot = t % dst->page_size;
                int len = src->page_size - s_slot;
                if (dst->page_size - d_slot < len)
                    len = dst->page_size - d_slot;
                if (n_tokens - t < len)
                    len = n_tokens - t;
                uint64_t s_page = (uint64_t)spt[t / src->page_size];
                uint64_t d_page = (uint64_t)dpt[t / dst->page_size];
                c[n].src_rank = s;
                c[n].dst_rank = d;
                c[n].src_offset = ((s_page * (uint64_t)src_heads + (uint64_t)sh) *
                                       (uint64_t)src->page_size + (uint64_t)s_slot) * token_bytes;
                c[n].dst_offset = ((d_page * (uint64_t)dst_heads + (uint64_t)dh) *
                                       (uint64_t)dst->page_size + (uint64_t)d_slot) * token_bytes;
                c[n].length = (uint64_t)len * token_bytes;
                n++;
                t += len;
            }
        }
    }

    qsort(c, n, sizeof *c, copy_order);
    n = merge_sorted(c, n);
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += c[i].length;
    if (n == 0) {
        free(c);
        c = NULL;
    } else {
        te_plan_copy *shrunk = realloc(c, n * sizeof *c);
        if (shrunk)
            c = shrunk;
    }
    plan->copies = c;
    plan->n_copies = n;
    plan->bytes = bytes;
    return 0;
}

void te_reshard_plan_free(te_reshard_plan *plan)
{
    if (!plan)
        return;
    free(plan->copies);
    memset(plan, 0, sizeof *plan);
}
