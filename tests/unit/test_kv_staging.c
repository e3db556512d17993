/* The KV path choice and the host mirror (engine/kv_staging.h) on the CPU
 * backend: which pools get registered, and that page copies move exactly
 * the named pages of every layer's K and V pools, runs or not. The CUDA
 * copies are the same calls on the GPU (tests/gpu/run.sh cluster). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "engine/kv_cache.h"
#include "engine/kv_staging.h"
#include "common/status.h"

enum { LAYERS = 3, HEADS = 2, HEAD_DIM = 4, PAGE = 5, PAGES = 9 };

/* A value that names layer, K/V, page and position inside the page. */
static float tag(int layer, int v, int page, size_t i)
{
    return (float)(layer * 100000 + v * 50000 + page * 1000) + (float)i;
}

static size_t page_floats(const tm_kv_cache *kv)
{
    return tm_kv_page_bytes(kv) / sizeof(float);
}

static void fill(void **pk, void **pv, const tm_kv_cache *kv, int offset)
{
    float **pools_k = (float **)pk, **pools_v = (float **)pv;
    const size_t pf = page_floats(kv);
    for (int l = 0; l < LAYERS; l++)
        for (int p = 0; p < PAGES; p++)
            for (size_t i = 0; i < pf; i++) {
                pools_k[l][(size_t)p * pf + i] = tag(l, 0, p, i) + (float)offset;
                pools_v[l][(size_t)p * pf + i] = tag(l, 1, p, i) + (float)offset;
            }
}

/* 1 when page p of every layer's K and V in `pools` holds the tag (+offset). */
static int page_is(void **pk, void **pv, const tm_kv_cache *kv, int p, int offset)
{
    float **pools_k = (float **)pk, **pools_v = (float **)pv;
    const size_t pf = page_floats(kv);
    for (int l = 0; l < LAYERS; l++)
        for (size_t i = 0; i < pf; i++)
            if (pools_k[l][(size_t)p * pf + i] != tag(l, 0, p, i) + (float)offset ||
                pools_v[l][(size_t)p * pf + i] != tag(l, 1, p, i) + (float)offset)
                return 0;
    return 1;
}

static void path_names_parse(void **state)
{
    (void)state;
    tm_kv_path p;
    assert_int_equal(tm_kv_path_parse("auto", &p), 0);
    assert_int_equal(p, TM_KV_PATH_AUTO);
    assert_int_equal(tm_kv_path_parse("direct", &p), 0);
    assert_int_equal(p, TM_KV_PATH_DIRECT);
    assert_int_equal(tm_kv_path_parse("staged", &p), 0);
    assert_int_equal(p, TM_KV_PATH_STAGED);
    assert_int_equal(tm_kv_path_parse("rdma", &p), -1);
    assert_int_equal(tm_kv_path_parse(NULL, &p), -1);
}

static void host_pools_go_direct(void **state)
{
    (void)state;
    kn_backend be;
    kn_backend_init_cpu(&be);
    tm_kv_cache kv;
    assert_int_equal(tm_kv_cache_init(&kv, &be, KN_F32, LAYERS, HEADS, HEAD_DIM, PAGE, PAGES), TN_OK);
    char err[200];
    for (int transport_device = 0; transport_device < 2; transport_device++)
        for (tm_kv_path path = TM_KV_PATH_AUTO; path <= TM_KV_PATH_DIRECT; path++) {
            tm_kv_staging s;
            assert_int_equal(tm_kv_staging_init(&s, &kv, path, transport_device, err, sizeof err),
                             TN_OK);
            assert_false(s.staged);
            assert_false(s.device_memory);
            assert_ptr_equal(s.k, kv.k);
            assert_ptr_equal(s.v, kv.v);
            assert_non_null(strstr(s.how, "direct from host memory"));
            int32_t pages[] = {1, 2};
            assert_int_equal(tm_kv_staging_to_host(&s, pages, 2), TN_OK);   /* no-ops */
            assert_int_equal(tm_kv_staging_to_device(&s, pages, 2), TN_OK);
            tm_kv_staging_free(&s);
        }
    tm_kv_cache_free(&kv);
    kn_backend_free(&be);
}

static void direct_device_pools_need_a_cuda_transport(void **state)
{
    (void)state;
    /* The choice looks at where the pools live, nothing else: a cache
     * claiming device pools, without allocating any. */
    void *dummy[LAYERS] = {0};
    kn_backend be = {.kind = KN_BACKEND_CUDA};
    tm_kv_cache kv = {.be = &be, .n_layers = LAYERS, .n_kv_heads = HEADS, .head_dim = HEAD_DIM,
                      .page_size = PAGE, .n_pages = PAGES, .k = dummy, .v = dummy};
    char err[200] = "";
    tm_kv_staging s;
    assert_int_equal(tm_kv_staging_init(&s, &kv, TM_KV_PATH_DIRECT, 0, err, sizeof err),
                     TN_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "no CUDA memory support"));
    tm_kv_staging_free(&s);
    for (tm_kv_path path = TM_KV_PATH_AUTO; path <= TM_KV_PATH_DIRECT; path++) {
        assert_int_equal(tm_kv_staging_init(&s, &kv, path, 1, err, sizeof err), TN_OK);
        assert_false(s.staged);
        assert_true(s.device_memory);
        assert_non_null(strstr(s.how, "direct from GPU memory"));
        tm_kv_staging_free(&s);
    }
}

static void staged_copies_move_exactly_the_named_pages(void **state)
{
    (void)state;
    kn_backend be;
    kn_backend_init_cpu(&be);
    tm_kv_cache kv;
    assert_int_equal(tm_kv_cache_init(&kv, &be, KN_F32, LAYERS, HEADS, HEAD_DIM, PAGE, PAGES), TN_OK);
    char err[200];
    tm_kv_staging s;
    assert_int_equal(tm_kv_staging_init(&s, &kv, TM_KV_PATH_STAGED, 0, err, sizeof err), TN_OK);
    assert_true(s.staged);
    assert_false(s.device_memory);
    assert_ptr_equal(s.k, s.mirror_k);
    assert_true(s.k != kv.k && s.k[0] != kv.k[0]);
    assert_non_null(strstr(s.how, "staged through plain host buffers"));

    /* cache -> mirror: pages 2,3,4 (one run), 7 and 0 (out of order) */
    fill(kv.k, kv.v, &kv, 0);
    int32_t out[] = {2, 3, 4, 7, 0};
    assert_int_equal(tm_kv_staging_to_host(&s, out, 5), TN_OK);
    for (int p = 0; p < PAGES; p++) {
        int named = p == 0 || p == 2 || p == 3 || p == 4 || p == 7;
        assert_int_equal(page_is(s.mirror_k, s.mirror_v, &kv, p, 0), named);
    }

    /* mirror -> cache: pages 5, 6 and 1 only */
    fill(s.mirror_k, s.mirror_v, &kv, 7);
    int32_t in[] = {5, 6, 1};
    assert_int_equal(tm_kv_staging_to_device(&s, in, 3), TN_OK);
    for (int p = 0; p < PAGES; p++) {
        int named = p == 1 || p == 5 || p == 6;
        assert_int_equal(page_is(kv.k, kv.v, &kv, p, named ? 7 : 0), 1);
    }

    /* a page outside the cache is refused before anything moves */
    int32_t bad[] = {8, PAGES};
    fill(kv.k, kv.v, &kv, 0);
    assert_int_equal(tm_kv_staging_to_device(&s, bad, 2), TN_ERR_ARG);
    assert_int_equal(page_is(kv.k, kv.v, &kv, 8, 0), 1);
    int32_t neg[] = {-1};
    assert_int_equal(tm_kv_staging_to_host(&s, neg, 1), TN_ERR_ARG);
    assert_int_equal(tm_kv_staging_to_host(&s, NULL, 0), TN_OK);

    tm_kv_staging_free(&s);
    tm_kv_staging_free(&s);   /* twice is harmless */
    tm_kv_cache_free(&kv);
    kn_backend_free(&be);
}

/* A bf16 cache's pages are half an f32 cache's bytes, and the staged copy
 * moves a page's bf16 bytes exactly (no conversion on the way). */
static void bf16_pages_move_their_native_bytes(void **state)
{
    (void)state;
    kn_backend be;
    kn_backend_init_cpu(&be);
    tm_kv_cache f32, bf;
    assert_int_equal(tm_kv_cache_init(&f32, &be, KN_F32, LAYERS, HEADS, HEAD_DIM, PAGE, PAGES), TN_OK);
    assert_int_equal(tm_kv_cache_init(&bf, &be, KN_BF16, LAYERS, HEADS, HEAD_DIM, PAGE, PAGES), TN_OK);
    assert_int_equal(tm_kv_page_bytes(&bf) * 2, tm_kv_page_bytes(&f32));
    assert_int_equal(tm_kv_page_bytes(&bf), (size_t)HEADS * PAGE * HEAD_DIM * 2);
    tm_kv_cache_free(&f32);
    /* FP8 rows are head_dim codes and a 4-byte scale; head_dim must be a
     * multiple of 4, which keeps the scale aligned */
    tm_kv_cache f8, bad;
    assert_int_equal(tm_kv_cache_init(&f8, &be, KN_FP8_E4M3, LAYERS, HEADS, 8, PAGE, PAGES), TN_OK);
    assert_int_equal(tm_kv_page_bytes(&f8), (size_t)HEADS * PAGE * (8 + 4));
    tm_kv_cache_free(&f8);
    assert_int_equal(tm_kv_cache_init(&bad, &be, KN_FP8_E4M3, 1, 1, 6, 4, 4), TN_ERR_ARG);
    assert_int_equal(tm_kv_cache_init(&bad, &be, (kn_dtype)9, 1, 1, 4, 4, 4), TN_ERR_ARG);
    char err[200];
    tm_kv_staging s;
    assert_int_equal(tm_kv_staging_init(&s, &bf, TM_KV_PATH_STAGED, 0, err, sizeof err), TN_OK);
    const size_t pb = tm_kv_page_bytes(&bf);
    for (int l = 0; l < LAYERS; l++)
        for (size_t i = 0; i < pb * PAGES; i++) {
            ((uint8_t *)s.mirror_k[l])[i] = (uint8_t)(i * 7 + l);
            ((uint8_t *)s.mirror_v[l])[i] = (uint8_t)(i * 5 + l + 1);
        }
    int32_t in[] = {3};
    assert_int_equal(tm_kv_staging_to_device(&s, in, 1), TN_OK);
    for (int l = 0; l < LAYERS; l++) {
        assert_memory_equal((uint8_t *)bf.k[l] + 3 * pb, (uint8_t *)s.mirror_k[l] + 3 * pb, pb);
        assert_memory_equal((uint8_t *)bf.v[l] + 3 * pb, (uint8_t *)s.mirror_v[l] + 3 * pb, pb);
        /* the page before it stays as the cache had it: zeros */
        for (size_t i = 0; i < pb; i++)
            assert_int_equal(((uint8_t *)bf.k[l])[2 * pb + i], 0);
    }
    tm_kv_staging_free(&s);
    tm_kv_cache_free(&bf);
    kn_backend_free(&be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(path_names_parse),
        cmocka_unit_test(host_pools_go_direct),
        cmocka_unit_test(direct_device_pools_need_a_cuda_transport),
        cmocka_unit_test(staged_copies_move_exactly_the_named_pages),
        cmocka_unit_test(bf16_pages_move_their_native_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
