/* The backend layer: CPU buffers and copies, the CUDA backend's clear
 * refusal in a CPU-only build, and every op entry point rejecting a NULL or
 * unknown backend. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "kernels/attention.h"
#include "kernels/backend.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/matmul.h"
#include "kernels/moe.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/sampling.h"
#include "common/status.h"

static void cpu_buffers_round_trip(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    assert_int_equal(be.kind, KN_BACKEND_CPU);
    assert_int_equal(kn_backend_sync(&be), TN_OK);

    unsigned char host[1000], back[1000];
    for (int i = 0; i < 1000; i++)
        host[i] = (unsigned char)(i * 7 + 3);
    unsigned char *buf = kn_malloc(&be, sizeof host);
    assert_non_null(buf);
    assert_int_equal((uintptr_t)buf % 64, 0);
    assert_int_equal(kn_copy_to_backend(&be, buf, host, sizeof host), TN_OK);
    memset(back, 0, sizeof back);
    assert_int_equal(kn_copy_to_host(&be, back, buf, sizeof back), TN_OK);
    assert_memory_equal(host, back, sizeof host);
    kn_free(&be, buf);

    void *empty = kn_malloc(&be, 0);
    assert_non_null(empty);
    kn_free(&be, empty);
    kn_free(&be, NULL);
    kn_backend_free(&be);
    kn_backend_free(&be); /* freeing twice is harmless */
    kn_backend_free(NULL);
}

static void copy_rejects_null_pointers(void **state)
{
    (void)state;
    kn_backend be;
    char a[4] = "abc", b[4];
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    assert_int_equal(kn_copy_to_backend(&be, NULL, a, 4), TN_ERR_ARG);
    assert_int_equal(kn_copy_to_backend(&be, b, NULL, 4), TN_ERR_ARG);
    assert_int_equal(kn_copy_to_host(&be, NULL, a, 4), TN_ERR_ARG);
    assert_int_equal(kn_copy_to_host(NULL, b, a, 4), TN_ERR_ARG);
    assert_int_equal(kn_copy_to_host(&be, NULL, NULL, 0), TN_OK);
    assert_null(kn_malloc(NULL, 16));
    assert_int_equal(kn_backend_init_cpu(NULL), TN_ERR_ARG);
    assert_int_equal(kn_backend_sync(NULL), TN_ERR_ARG);
    kn_backend_free(&be);
}

/* The queued copy copies at once on the CPU; graphs are CUDA-only. */
static void cpu_async_copy_and_no_graphs(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    char src[6] = "hello", *dst = kn_malloc(&be, sizeof src);
    assert_non_null(dst);
    assert_int_equal(kn_copy_to_backend_async(&be, dst, src, sizeof src), TN_OK);
    assert_memory_equal(dst, src, sizeof src);
    assert_int_equal(kn_copy_to_backend_async(&be, NULL, src, sizeof src), TN_ERR_ARG);
    assert_int_equal(kn_copy_to_backend_async(NULL, dst, src, sizeof src), TN_ERR_ARG);
    kn_graph *g = (kn_graph *)dst;
    assert_int_equal(kn_graph_begin(&be), TN_ERR_UNSUPPORTED);
    assert_int_equal(kn_graph_end(&be, &g), TN_ERR_UNSUPPORTED);
    assert_null(g);
    assert_int_equal(kn_graph_end(&be, NULL), TN_ERR_ARG);
    assert_int_equal(kn_graph_launch(&be, NULL), TN_ERR_ARG);
    assert_int_equal(kn_graph_begin(NULL), TN_ERR_ARG);
    kn_graph_free(NULL);
    kn_free(&be, dst);
    kn_backend_free(&be);
}

static void cuda_backend_absent_without_nvcc(void **state)
{
    (void)state;
#ifdef TANDEM_CUDA
    skip();
#else
    kn_backend be;
    assert_int_equal(kn_backend_init_cuda(&be, 0), TN_ERR_UNSUPPORTED);
    kn_backend_free(&be); /* a failed init leaves a freeable backend */

    /* A backend that claims CUDA anyway gets UNSUPPORTED from ops and buffers. */
    kn_backend fake;
    memset(&fake, 0, sizeof fake);
    fake.kind = KN_BACKEND_CUDA;
    float x[4] = { 1, 2, 3, 4 }, w[4] = { 1, 1, 1, 1 };
    assert_int_equal(kn_rmsnorm(&fake, x, x, w, 1, 4, 1e-5f), TN_ERR_UNSUPPORTED);
    assert_int_equal(kn_add(&fake, x, x, x, 4), TN_ERR_UNSUPPORTED);
    assert_null(kn_malloc(&fake, 16));
    assert_int_equal(kn_backend_sync(&fake), TN_ERR_UNSUPPORTED);
    assert_int_equal(kn_copy_to_host(&fake, x, w, sizeof x), TN_ERR_UNSUPPORTED);
#endif
    assert_int_equal(kn_backend_init_cuda(NULL, 0), TN_ERR_ARG);
}

/* Every op: NULL backend and an unknown kind are TN_ERR_ARG, and nothing is
 * written. Arguments are otherwise valid so only the backend is at fault. */
static void ops_reject_bad_backend(void **state)
{
    (void)state;
    kn_backend unknown;
    memset(&unknown, 0, sizeof unknown);
    unknown.kind = (kn_backend_kind)7;
    const kn_backend *bad[2] = { NULL, &unknown };

    float x[16] = { 0 }, out[16] = { 0 }, w[16] = { 0 }, ew[2] = { 0.5f, 0.5f };
    int32_t ids[2] = { 0, 1 }, pos[2] = { 0, 1 }, eidx[2] = { 0, 1 }, tok[1];
    int32_t q_offset[2] = { 0, 1 }, kv_len[1] = { 1 }, pages[1] = { 0 };
    kn_seq_batch b = { .n_seqs = 1, .n_rows = 1, .max_pages = 1, .max_q_len = 1,
                       .max_kv_len = 1, .q_offset = q_offset, .kv_len = kv_len,
                       .page_table = pages, .n_pages = 1 };
    kn_moe_weights mw = { .n_experts = 2, .dim = 2, .inter = 1, .gate_up = w, .down = w,
                          .act = KN_ACT_SWIGLU };
    kn_sampling sp = { .temperature = 0.0f, .top_p = 1.0f, .top_k = 0 };
    uint64_t rng = 1;
    for (int i = 0; i < 2; i++) {
        const kn_backend *be = bad[i];
        assert_int_equal(kn_embedding(be, out, x, ids, 2, 2, 2), TN_ERR_ARG);
        assert_int_equal(kn_rmsnorm(be, out, x, w, 2, 2, 1e-5f), TN_ERR_ARG);
        assert_int_equal(kn_matmul(be, out, x, w, NULL, 2, 2, 2), TN_ERR_ARG);
        assert_int_equal(kn_add(be, out, x, w, 4), TN_ERR_ARG);
        assert_int_equal(kn_rope(be, x, pos, 2, 1, 2, w, 1.0f), TN_ERR_ARG);
        kn_kv_pools pools = { w, w, KN_F32 };
        assert_int_equal(kn_kv_append(be, &pools, x, x, &b, 1, 2, 1), TN_ERR_ARG);
        assert_int_equal(kn_attention(be, out, x, &pools, &b, 1, 1, 2, 1, 1.0f, NULL, 0),
                         TN_ERR_ARG);
        assert_int_equal(kn_moe_route(be, eidx, ew, x, 1, 2, 2, KN_ROUTE_TOPK_SOFTMAX, 0),
                         TN_ERR_ARG);
        assert_int_equal(kn_moe_experts(be, out, x, eidx, ew, 1, 2, &mw), TN_ERR_ARG);
        assert_int_equal(kn_sample(be, tok, x, 1, 2, &sp, &rng), TN_ERR_ARG);
    }
    for (int i = 0; i < 16; i++)
        assert_true(out[i] == 0.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cpu_buffers_round_trip),
        cmocka_unit_test(copy_rejects_null_pointers),
        cmocka_unit_test(cpu_async_copy_and_no_graphs),
        cmocka_unit_test(cuda_backend_absent_without_nvcc),
        cmocka_unit_test(ops_reject_bad_backend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
