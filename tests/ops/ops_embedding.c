/* kn_embedding: rows copied exactly; an out-of-range id anywhere is
 * rejected with nothing written; and the argument checks. kn_gather_rows:
 * the same rows exactly, and zeros (no read outside the table, no error)
 * for a row outside it. */
#include <math.h>
#include <string.h>
#include "common/status.h"
#include "kernels/embedding.h"
#include "tests/ops/op_harness.h"

typedef struct emb_param {
    int n, vocab, dim;
} emb_param;

static int untouched(op_env *e, const float *d_out, size_t n)
{
    float *got = op_get(e, d_out, n);
    for (size_t i = 0; i < n; i++)
        if (!isnan(got[i]))
            return 0;
    return 1;
}

static void embedding_case(op_env *e, const void *param)
{
    const emb_param *p = param;
    size_t nt = (size_t)p->vocab * p->dim, no = (size_t)p->n * p->dim;
    float *table = op_rand(e, nt, -1.f, 1.f);
    int32_t *ids = op_host(e, (size_t)p->n * sizeof(int32_t));
    for (int t = 0; t < p->n; t++)
        ids[t] = tu_rand_int(&e->rng, p->vocab);
    ids[0] = p->vocab - 1; /* the last row is reachable */
    float *d_table = op_up(e, table, nt * sizeof(float)), *d_out = op_nan(e, no);
    int32_t *d_ids = op_up(e, ids, (size_t)p->n * sizeof(int32_t));
    if (op_ok(e, kn_embedding(e->be, d_out, d_table, d_ids, p->n, p->vocab, p->dim), "kn_embedding")) {
        float *got = op_get(e, d_out, no);
        for (int t = 0; t < p->n; t++)
            if (memcmp(got + (size_t)t * p->dim, table + (size_t)ids[t] * p->dim,
                       (size_t)p->dim * sizeof(float)) != 0) {
                op_fail(e, "token %d: not row %d of the table", t, ids[t]);
                break;
            }
    }
    /* a bad id anywhere: TN_ERR_ARG and nothing written */
    if (p->n > 1) {
        ids[p->n / 2] = p->vocab;
        op_put(e, d_ids, ids, (size_t)p->n * sizeof(int32_t));
        op_poison(e, d_out, no);
        OP_INT_EQ(e, kn_embedding(e->be, d_out, d_table, d_ids, p->n, p->vocab, p->dim), TN_ERR_ARG);
        op_check(e, untouched(e, d_out, no), "id %d rejected but the output was written", p->vocab);
    }
}

static void embedding_args(op_env *e, const void *param)
{
    (void)param;
    const kn_backend *be = e->be;
    float *table = op_up(e, (float[8]){ 1, 2, 3, 4, 5, 6, 7, 8 }, 8 * sizeof(float));
    float *out = op_nan(e, 6);
    int32_t *ids = op_up(e, (int32_t[3]){ 0, 3, 1 }, 3 * sizeof(int32_t));
    const int32_t bad_ids[][3] = { { 0, 4, 1 }, { 0, -1, 1 }, { 2, 1, 2147483647 } };
    for (int i = 0; i < 3; i++) {
        int32_t *d_bad = op_up(e, bad_ids[i], sizeof bad_ids[i]);
        op_poison(e, out, 6);
        OP_INT_EQ(e, kn_embedding(be, out, table, d_bad, 3, 4, 2), TN_ERR_ARG);
        op_check(e, untouched(e, out, 6), "bad ids %d: output written", i);
    }
    OP_INT_EQ(e, kn_embedding(be, NULL, table, ids, 3, 4, 2), TN_ERR_ARG);
    OP_INT_EQ(e, kn_embedding(be, out, NULL, ids, 3, 4, 2), TN_ERR_ARG);
    OP_INT_EQ(e, kn_embedding(be, out, table, NULL, 3, 4, 2), TN_ERR_ARG);
    OP_INT_EQ(e, kn_embedding(be, out, table, ids, -1, 4, 2), TN_ERR_ARG);
    OP_INT_EQ(e, kn_embedding(be, out, table, ids, 3, 0, 2), TN_ERR_ARG);
    OP_INT_EQ(e, kn_embedding(be, out, table, ids, 3, 4, 0), TN_ERR_ARG);
    OP_INT_EQ(e, kn_embedding(be, out, table, ids, 0, 4, 2), TN_OK);
}

static void gather_rows_case(op_env *e, const void *param)
{
    const emb_param *p = param;
    size_t nt = (size_t)p->vocab * p->dim, no = (size_t)p->n * p->dim;
    float *table = op_rand(e, nt, -1.f, 1.f);
    int32_t *rows = op_host(e, (size_t)p->n * sizeof(int32_t));
    for (int t = 0; t < p->n; t++)
        rows[t] = tu_rand_int(&e->rng, p->vocab);
    rows[0] = p->vocab - 1;
    if (p->n > 2) { /* outside the table: zeros */
        rows[1] = p->vocab;
        rows[2] = -1;
    }
    float *d_table = op_up(e, table, nt * sizeof(float)), *d_out = op_nan(e, no);
    int32_t *d_rows = op_up(e, rows, (size_t)p->n * sizeof(int32_t));
    if (!op_ok(e, kn_gather_rows(e->be, d_out, d_table, d_rows, p->n, p->vocab, p->dim), "kn_gather_rows"))
        return;
    float *got = op_get(e, d_out, no);
    for (int t = 0; t < p->n; t++) {
        const float *g = got + (size_t)t * p->dim;
        int ok = 1;
        if (rows[t] >= 0 && rows[t] < p->vocab) {
            ok = memcmp(g, table + (size_t)rows[t] * p->dim, (size_t)p->dim * sizeof(float)) == 0;
        } else {
            for (int d = 0; d < p->dim; d++)
                ok = ok && g[d] == 0.f;
        }
        if (!ok) {
            op_fail(e, "row %d (table row %d): wrong contents", t, rows[t]);
            break;
        }
    }
}

void ops_register_embedding(void)
{
    static const emb_param cases[] = { { 1, 1, 1 },     { 5, 7, 3 },      { 300, 50, 17 },
                                       { 2000, 129, 64 }, { 1, 1000, 64 }, { 300, 5000, 2880 },
                                       { 17, 333, 33 } };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        OP_CASE("embedding", OP_ALL, embedding_case, cases[i], "n=%d vocab=%d dim=%d", cases[i].n,
                cases[i].vocab, cases[i].dim);
    OP_CASE("embedding", OP_ALL, embedding_args, cases[0], "rejects bad arguments");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        OP_CASE("embedding", OP_ALL, gather_rows_case, cases[i], "gather rows n=%d rows=%d dim=%d",
                cases[i].n, cases[i].vocab, cases[i].dim);
}
