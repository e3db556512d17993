/* kn_embedding: rows copied exactly; out-of-range ids rejected with nothing written. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "kernels/backend.h"
#include "kernels/embedding.h"
#include "common/status.h"
#include "testutil.h"

static void embedding_copies_rows(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    tu_rng rng;
    tu_rng_init(&rng, 11);
    const int shapes[][3] = { { 1, 1, 1 }, { 5, 7, 3 }, { 300, 50, 17 }, { 2000, 129, 64 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int n = shapes[s][0], vocab = shapes[s][1], dim = shapes[s][2];
        float *table = tu_xcalloc((size_t)vocab * dim, sizeof *table);
        float *out = tu_xcalloc((size_t)n * dim, sizeof *out);
        int32_t *ids = tu_xcalloc((size_t)n, sizeof *ids);
        tu_rand_fill(&rng, table, (size_t)vocab * dim, -1.0f, 1.0f);
        for (int t = 0; t < n; t++)
            ids[t] = tu_rand_int(&rng, vocab);
        ids[0] = vocab - 1; /* the last row is reachable */
        assert_int_equal(kn_embedding(&be, out, table, ids, n, vocab, dim), TN_OK);
        for (int t = 0; t < n; t++)
            assert_memory_equal(out + (size_t)t * dim, table + (size_t)ids[t] * dim,
                                (size_t)dim * sizeof(float));
        free(table);
        free(out);
        free(ids);
    }
    kn_backend_free(&be);
}

static void embedding_rejects_bad_arguments(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    float table[4 * 2] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    float out[3 * 2];
    int32_t ids[3] = { 0, 3, 1 };
    const int32_t bad_ids[][3] = { { 0, 4, 1 }, { 0, -1, 1 }, { 2, 1, 2147483647 } };
    for (int i = 0; i < 3; i++) {
        memset(out, 0, sizeof out);
        assert_int_equal(kn_embedding(&be, out, table, bad_ids[i], 3, 4, 2), TN_ERR_ARG);
        for (int j = 0; j < 6; j++)
            assert_true(out[j] == 0.0f); /* nothing written */
    }
    assert_int_equal(kn_embedding(&be, NULL, table, ids, 3, 4, 2), TN_ERR_ARG);
    assert_int_equal(kn_embedding(&be, out, NULL, ids, 3, 4, 2), TN_ERR_ARG);
    assert_int_equal(kn_embedding(&be, out, table, NULL, 3, 4, 2), TN_ERR_ARG);
    assert_int_equal(kn_embedding(&be, out, table, ids, -1, 4, 2), TN_ERR_ARG);
    assert_int_equal(kn_embedding(&be, out, table, ids, 3, 0, 2), TN_ERR_ARG);
    assert_int_equal(kn_embedding(&be, out, table, ids, 3, 4, 0), TN_ERR_ARG);
    assert_int_equal(kn_embedding(&be, out, table, ids, 0, 4, 2), TN_OK);
    kn_backend_free(&be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(embedding_copies_rows),
        cmocka_unit_test(embedding_rejects_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
