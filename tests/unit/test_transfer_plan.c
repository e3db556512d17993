/* The resharding plan against a brute-force reference: every (TP 1/2/4/8 ->
 * TP 1/2/4) pair, equal and mismatched page sizes, random page tables. The
 * plan is applied with memcpy to per-rank pools and the result must equal,
 * byte for byte, destination pools built element by element from the
 * logical [head][token][dim] cache; every destination element must be
 * written exactly once; and no two copies of the plan may be mergeable. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "transfer/transfer_plan.h"

typedef struct rng { uint64_t s; } rng;
static uint64_t rng_next(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A page table for one rank: the n_pages ids shuffled, or 0,1,2,... when
 * identity is set; the request uses a prefix of it. */
static int32_t *make_page_table(rng *r, int n_pages, int identity)
{
    int32_t *all = malloc((size_t)n_pages * sizeof *all);
    assert_non_null(all);
    for (int i = 0; i < n_pages; i++)
        all[i] = i;
    if (!identity)
        for (int i = n_pages - 1; i > 0; i--) {
            int j = (int)(rng_next(r) % (uint64_t)(i + 1));
            int32_t t = all[i];
            all[i] = all[j];
            all[j] = t;
        }
    return all;
}

typedef struct side {
    int tp, page_size, n_pages;
    int32_t **tables;
    uint8_t **pools;
    size_t pool_bytes;
} side;

static void side_init(side *s, rng *r, const te_kv_geometry *g, int tp, int page_size,
                      int n_tokens, int identity)
{
    int pages = (n_tokens + page_size - 1) / page_size;
    int first, heads;
    assert_int_equal(te_kv_rank_heads(g->n_kv_heads, tp, 0, &first, &heads), 0);
    s->tp = tp;
    s->page_size = page_size;
    s->n_pages = pages + 3; /* spare pages the transfer must not touch */
    s->pool_bytes = (size_t)s->n_pages * te_kv_page_bytes(g, heads, page_size);
    s->tables = calloc((size_t)tp, sizeof *s->tables);
    s->pools = calloc((size_t)tp, sizeof *s->pools);
    assert_non_null(s->tables);
    assert_non_null(s->pools);
    for (int rk = 0; rk < tp; rk++) {
        s->tables[rk] = make_page_table(r, s->n_pages, identity);
        s->pools[rk] = malloc(s->pool_bytes);
        assert_non_null(s->pools[rk]);
    }
}

static void side_free(side *s)
{
    for (int rk = 0; rk < s->tp; rk++) {
        free(s->tables[rk]);
        free(s->pools[rk]);
    }
    free(s->tables);
    free(s->pools);
}

static te_kv_sharding side_sharding(const side *s)
{
    te_kv_sharding sh = {s->tp, s->page_size, s->n_pages, (const int32_t *const *)s->tables};
    return sh;
}

/* Byte offset of element (local head, token, dim) on one rank, computed the
 * slow obvious way from the layout comment in kernels/attention.h. */
static size_t element_offset(const te_kv_geometry *g, const side *s, int rank, int local_heads,
                             int local_head, int token, int dim)
{
    size_t page = (size_t)s->tables[rank][token / s->page_size];
    size_t slot = (size_t)(token % s->page_size);
    return (((page * (size_t)local_heads + (size_t)local_head) * (size_t)s->page_size + slot) *
                (size_t)g->head_dim + (size_t)dim) * (size_t)g->elem_bytes;
}

static void check_no_mergeable_pair(const te_reshard_plan *p)
{
    for (size_t i = 0; i < p->n_copies; i++)
        for (size_t j = 0; j < p->n_copies; j++) {
            const te_plan_copy *a = &p->copies[i], *b = &p->copies[j];
            if (i == j || a->src_rank != b->src_rank || a->dst_rank != b->dst_rank)
                continue;
            if (a->src_offset + a->length == b->src_offset &&
                a->dst_offset + a->length == b->dst_offset)
                fail_msg("copies %zu and %zu could be merged", i, j);
        }
}

/* Builds the plan for one configuration, applies it and compares with the
 * element-by-element reference. Returns the number of copies. */
static size_t check_config(int n_kv_heads, int head_dim, int src_tp, int src_ps, int dst_tp,
                           int dst_ps, int n_tokens, int identity, uint64_t seed)
{
    te_kv_geometry g = {n_kv_heads, head_dim, 4};
    rng r = {seed};
    side src, dst;
    side_init(&src, &r, &g, src_tp, src_ps, n_tokens, identity);
    side_init(&dst, &r, &g, dst_tp, dst_ps, n_tokens, identity);

    /* logical cache [head][token][dim] of random 4-byte elements */
    size_t elem = (size_t)g.elem_bytes;
    size_t n_logical = (size_t)n_kv_heads * (size_t)n_tokens * (size_t)head_dim;
    uint8_t *logical = malloc(n_logical * elem + 1);
    assert_non_null(logical);
    for (size_t i = 0; i < n_logical * elem; i++)
        logical[i] = (uint8_t)rng_next(&r);

    /* Sender pools: garbage everywhere, then the logical cache at each
     * rank's heads (replicas hold identical copies, as after a TP prefill). */
    for (int rk = 0; rk < src_tp; rk++) {
        for (size_t i = 0; i < src.pool_bytes; i++)
            src.pools[rk][i] = (uint8_t)rng_next(&r);
        int first, heads;
        te_kv_rank_heads(n_kv_heads, src_tp, rk, &first, &heads);
        for (int lh = 0; lh < heads; lh++)
            for (int t = 0; t < n_tokens; t++)
                for (int d = 0; d < head_dim; d++)
                    memcpy(src.pools[rk] + element_offset(&g, &src, rk, heads, lh, t, d),
                           logical + (((size_t)(first + lh) * (size_t)n_tokens + (size_t)t) *
                                          (size_t)head_dim + (size_t)d) * elem,
                           elem);
    }

    /* Reference receiver pools built element by element. */
    uint8_t **ref = calloc((size_t)dst_tp, sizeof *ref);
    assert_non_null(ref);
    for (int rk = 0; rk < dst_tp; rk++) {
        ref[rk] = malloc(dst.pool_bytes);
        assert_non_null(ref[rk]);
        memset(ref[rk], 0xA5, dst.pool_bytes);
        memset(dst.pools[rk], 0xA5, dst.pool_bytes);
        int first, heads;
        te_kv_rank_heads(n_kv_heads, dst_tp, rk, &first, &heads);
        for (int lh = 0; lh < heads; lh++)
            for (int t = 0; t < n_tokens; t++)
                for (int d = 0; d < head_dim; d++)
                    memcpy(ref[rk] + element_offset(&g, &dst, rk, heads, lh, t, d),
                           logical + (((size_t)(first + lh) * (size_t)n_tokens + (size_t)t) *
                                          (size_t)head_dim + (size_t)d) * elem,
                           elem);
    }

    te_kv_sharding ss = side_sharding(&src), ds = side_sharding(&dst);
    te_reshard_plan plan;
    char err[256] = "";
    int rc = te_reshard_plan_build(&g, n_tokens, &ss, &ds, -1, -1, &plan, err, sizeof err);
    if (rc != 0)
        fail_msg("plan failed: %s", err);

    /* Apply, counting how often each destination byte is written. */
    uint8_t **hits = calloc((size_t)dst_tp, sizeof *hits);
    assert_non_null(hits);
    for (int rk = 0; rk < dst_tp; rk++) {
        hits[rk] = calloc(dst.pool_bytes, 1);
        assert_non_null(hits[rk]);
    }
    uint64_t bytes = 0;
    for (size_t i = 0; i < plan.n_copies; i++) {
        const te_plan_copy *c = &plan.copies[i];
        assert_true(c->src_rank >= 0 && c->src_rank < src_tp);
        assert_true(c->dst_rank >= 0 && c->dst_rank < dst_tp);
        assert_true(c->length > 0);
        assert_true(c->src_offset + c->length <= src.pool_bytes);
        assert_true(c->dst_offset + c->length <= dst.pool_bytes);
        memcpy(dst.pools[c->dst_rank] + c->dst_offset, src.pools[c->src_rank] + c->src_offset,
               c->length);
        for (uint64_t b = 0; b < c->length; b++)
            hits[c->dst_rank][c->dst_offset + b]++;
        bytes += c->length;
    }
    assert_int_equal(bytes, plan.bytes);
    /* Every replica of the receiver gets every token of its heads once. */
    int dst_first, dst_heads;
    te_kv_rank_heads(n_kv_heads, dst_tp, 0, &dst_first, &dst_heads);
    assert_int_equal(bytes, (uint64_t)dst_tp * (uint64_t)dst_heads * (uint64_t)n_tokens *
                                (uint64_t)head_dim * elem);
    for (int rk = 0; rk < dst_tp; rk++) {
        if (memcmp(dst.pools[rk], ref[rk], dst.pool_bytes) != 0)
            fail_msg("TP%d/ps%d -> TP%d/ps%d heads %d: receiver rank %d differs from reference",
                     src_tp, src_ps, dst_tp, dst_ps, n_kv_heads, rk);
        for (size_t b = 0; b < dst.pool_bytes; b++)
            if (hits[rk][b] > 1)
                fail_msg("receiver rank %d byte %zu written %d times", rk, b, hits[rk][b]);
    }
    check_no_mergeable_pair(&plan);

    /* Plans restricted to one sender rank partition the full plan. */
    size_t filtered = 0;
    for (int rk = 0; rk < src_tp; rk++) {
        te_reshard_plan part;
        assert_int_equal(te_reshard_plan_build(&g, n_tokens, &ss, &ds, rk, -1, &part, err,
                                               sizeof err), 0);
        for (size_t i = 0; i < part.n_copies; i++)
            assert_int_equal(part.copies[i].src_rank, rk);
        filtered += part.n_copies;
        te_reshard_plan_free(&part);
    }
    assert_int_equal(filtered, plan.n_copies);

    size_t n_copies = plan.n_copies;
    te_reshard_plan_free(&plan);
    for (int rk = 0; rk < dst_tp; rk++) {
        free(ref[rk]);
        free(hits[rk]);
    }
    free(ref);
    free(hits);
    free(logical);
    side_free(&src);
    side_free(&dst);
    return n_copies;
}

static const int src_tps[] = {1, 2, 4, 8};
static const int dst_tps[] = {1, 2, 4};
static const int page_pairs[][2] = {{16, 16}, {16, 64}, {64, 16}, {12, 40}, {7, 5}};

static void plan_matches_reference_for_all_tp_pairs(void **state)
{
    (void)state;
    const int head_counts[] = {8, 4, 2}; /* 4 and 2 exercise replicated heads */
    uint64_t seed = 1;
    for (size_t h = 0; h < sizeof head_counts / sizeof *head_counts; h++)
        for (size_t a = 0; a < sizeof src_tps / sizeof *src_tps; a++)
            for (size_t b = 0; b < sizeof dst_tps / sizeof *dst_tps; b++)
                for (size_t p = 0; p < sizeof page_pairs / sizeof *page_pairs; p++)
                    check_config(head_counts[h], 8, src_tps[a], page_pairs[p][0], dst_tps[b],
                                 page_pairs[p][1], 203, 0, seed++);
}

static void contiguous_pages_merge_into_one_copy_per_rank(void **state)
{
    (void)state;
    /* Same TP, same page size, pages 0,1,2,... on both sides, whole pages:
     * each receiver rank's data is one contiguous block on both sides. */
    for (size_t a = 0; a < 3; a++) {
        int tp = src_tps[a];
        size_t n = check_config(8, 8, tp, 16, tp, 16, 160, 1, 99 + a);
        assert_int_equal(n, (size_t)tp);
    }
    /* One KV head: the token range is contiguous whatever the page sizes. */
    assert_int_equal(check_config(1, 8, 1, 16, 1, 48, 200, 1, 7), 1);
    /* Receiver replicas (1 head, TP=2): one copy for each replica. */
    assert_int_equal(check_config(1, 8, 1, 16, 2, 48, 200, 1, 8), 2);
}

static void random_pages_merge_only_where_contiguous_in_both(void **state)
{
    (void)state;
    /* 1 head, TP 1 -> 1, whole pages of 16 tokens on both sides: the copy of
     * token page i can be merged with that of token page j exactly when j
     * follows i in both pools (src[j] == src[i] + 1 and dst[j] == dst[i] + 1),
     * whether or not j == i + 1. Count that independently of the planner. */
    te_kv_geometry g = {1, 4, 4};
    int32_t src_pt[10] = {3, 4, 5, 0, 9, 1, 2, 8, 7, 6};
    int32_t dst_pt[10] = {5, 6, 0, 1, 2, 9, 3, 4, 8, 7};
    const int32_t *sp[1] = {src_pt}, *dp[1] = {dst_pt};
    te_kv_sharding s = {1, 16, 10, sp}, d = {1, 16, 10, dp};
    te_reshard_plan plan;
    char err[128];
    assert_int_equal(te_reshard_plan_build(&g, 160, &s, &d, -1, -1, &plan, err, sizeof err), 0);
    int expect = 10;
    for (int i = 0; i < 10; i++)
        for (int j = 0; j < 10; j++)
            if (src_pt[j] == src_pt[i] + 1 && dst_pt[j] == dst_pt[i] + 1)
                expect--;
    assert_true(expect < 10); /* the tables above do contain mergeable pairs */
    assert_int_equal(plan.n_copies, (size_t)expect);
    te_reshard_plan_free(&plan);
}

static void invalid_shardings_are_refused(void **state)
{
    (void)state;
    te_kv_geometry g = {8, 4, 4};
    int32_t pt[4] = {0, 1, 2, 3};
    const int32_t *tables[8] = {pt, pt, pt, pt, pt, pt, pt, pt};
    te_kv_sharding ok = {1, 16, 4, tables};
    te_kv_sharding tp3 = {3, 16, 4, tables};
    te_kv_sharding small = {1, 16, 3, tables};
    te_kv_sharding zero_ps = {1, 0, 4, tables};
    te_reshard_plan plan;
    char err[256];
    assert_int_equal(te_reshard_plan_build(&g, 64, &tp3, &ok, -1, -1, &plan, err, sizeof err), -1);
    assert_non_null(strstr(err, "TP=3"));
    assert_null(plan.copies);
    assert_int_equal(te_reshard_plan_build(&g, 64, &ok, &small, -1, -1, &plan, err, sizeof err), -1);
    assert_non_null(strstr(err, "outside pool"));
    assert_int_equal(te_reshard_plan_build(&g, 64, &zero_ps, &ok, -1, -1, &plan, err, sizeof err), -1);
    assert_int_equal(te_reshard_plan_build(&g, -1, &ok, &ok, -1, -1, &plan, err, sizeof err), -1);
    assert_int_equal(te_reshard_plan_build(&g, 64, &ok, &ok, 1, -1, &plan, err, sizeof err), -1);
    assert_non_null(strstr(err, "rank filter"));
    /* An empty request is a valid, empty plan. */
    assert_int_equal(te_reshard_plan_build(&g, 0, &ok, &ok, -1, -1, &plan, err, sizeof err), 0);
    assert_int_equal(plan.n_copies, 0);
    te_reshard_plan_free(&plan);
}

static void replicated_heads_spread_over_replicas(void **state)
{
    (void)state;
    /* 4 heads on TP=8: ranks 2h and 2h+1 hold head h; a TP=1 receiver reads
     * heads 0..3 from ranks 0, 3, 4, 7 (alternating replicas). */
    assert_int_equal(te_kv_source_rank(4, 8, 0, 0), 0);
    assert_int_equal(te_kv_source_rank(4, 8, 1, 0), 3);
    assert_int_equal(te_kv_source_rank(4, 8, 2, 0), 4);
    assert_int_equal(te_kv_source_rank(4, 8, 3, 0), 7);
    int first, count;
    assert_int_equal(te_kv_rank_heads(4, 8, 5, &first, &count), 0);
    assert_int_equal(first, 2);
    assert_int_equal(count, 1);
    assert_int_equal(te_kv_rank_heads(8, 4, 3, &first, &count), 0);
    assert_int_equal(first, 6);
    assert_int_equal(count, 2);
    assert_int_equal(te_kv_rank_heads(8, 3, 0, &first, &count), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(plan_matches_reference_for_all_tp_pairs),
        cmocka_unit_test(contiguous_pages_merge_into_one_copy_per_rank),
        cmocka_unit_test(random_pages_merge_only_where_contiguous_in_both),
        cmocka_unit_test(invalid_shardings_are_refused),
        cmocka_unit_test(replicated_heads_spread_over_replicas),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
