/* kn_add: exact (one float rounding of the double sum, so every backend
 * writes the same bits), out of place, in place on either operand, from
 * pointers off the vector alignment; and its argument checks. */
#include <string.h>
#include "common/status.h"
#include "kernels/elementwise.h"
#include "tests/ops/op_harness.h"

typedef struct add_param {
    size_t n;
    int offset; /* every pointer shifted by this many floats */
} add_param;

static void add_exact(op_env *e, const void *param)
{
    const add_param *p = param;
    size_t n = p->n, m = n + (size_t)p->offset, bytes = m * sizeof(float);
    float *a = op_rand(e, m, -10.f, 10.f), *b = op_rand(e, m, -10.f, 10.f);
    float *want = op_host(e, n * sizeof(float));
    for (size_t i = 0; i < n; i++) /* IEEE add is correctly rounded */
        want[i] = (float)((double)a[p->offset + i] + (double)b[p->offset + i]);
    float *d_a = op_up(e, a, bytes), *d_b = op_up(e, b, bytes), *d_out = op_nan(e, m);
    int o = p->offset;
    if (op_ok(e, kn_add(e->be, d_out + o, d_a + o, d_b + o, n), "kn_add"))
        OP_MEM_EQ(e, op_get(e, d_out, m) + o, want, n * sizeof(float));
    /* residual += b, then b = a + b */
    float *d_a2 = op_up(e, a, bytes);
    if (op_ok(e, kn_add(e->be, d_a2 + o, d_a2 + o, d_b + o, n), "kn_add in place on a"))
        OP_MEM_EQ(e, op_get(e, d_a2, m) + o, want, n * sizeof(float));
    if (op_ok(e, kn_add(e->be, d_b + o, d_a + o, d_b + o, n), "kn_add in place on b"))
        OP_MEM_EQ(e, op_get(e, d_b, m) + o, want, n * sizeof(float));
}

static void add_args(op_env *e, const void *param)
{
    (void)param;
    float *a = op_up(e, (float[8]){ 0 }, 8 * sizeof(float));
    float *b = op_up(e, (float[8]){ 0 }, 8 * sizeof(float)), *out = op_nan(e, 8);
    OP_INT_EQ(e, kn_add(e->be, NULL, a, b, 4), TN_ERR_ARG);
    OP_INT_EQ(e, kn_add(e->be, out, NULL, b, 4), TN_ERR_ARG);
    OP_INT_EQ(e, kn_add(e->be, out, a, NULL, 4), TN_ERR_ARG);
    OP_INT_EQ(e, kn_add(e->be, a + 1, a, b, 4), TN_ERR_ARG); /* shifted overlap */
    OP_INT_EQ(e, kn_add(NULL, out, a, b, 4), TN_ERR_ARG);
}

void ops_register_add(void)
{
    static const add_param cases[] = { { 0, 0 },    { 1, 0 },      { 7, 0 },       { 1000, 0 },
                                       { 4096, 0 }, { 100003, 0 }, { 1000003, 0 }, { 12345, 1 } };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        OP_CASE("add", OP_ALL, add_exact, cases[i], "n=%zu offset=%d", cases[i].n, cases[i].offset);
    OP_CASE("add", OP_ALL, add_args, cases[0], "rejects bad arguments");
}
