/* The router registers the workers of one model only while their KV caches
 * agree (router/kv_compat.h): dtype, layers, KV heads and head_dim; page
 * sizes may differ. A mismatch is refused with both sides named. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include "router/kv_compat.h"
#include "router/workers.h"

#define PRE TANDEM__V1__WORKER_ROLE__WORKER_ROLE_PREFILLER
#define DEC TANDEM__V1__WORKER_ROLE__WORKER_ROLE_DECODER
#define F32 TANDEM__V1__KV_DTYPE__KV_DTYPE_F32
#define BF16 TANDEM__V1__KV_DTYPE__KV_DTYPE_BF16

static router_worker *add(worker_registry *r, const char *id, int role, const char *model,
                          int dtype, int layers, int heads, int head_dim, int page_size,
                          char *err, size_t errlen)
{
    Tandem__V1__Register reg = TANDEM__V1__REGISTER__INIT;
    reg.worker_id = (char *)id;
    reg.role = role;
    reg.model = (char *)model;
    reg.vocab_size = 512;
    reg.max_context = 1024;
    reg.page_size = page_size;
    reg.kv_pages_total = 64;
    reg.kv_dtype = dtype;
    reg.kv_layers = layers;
    reg.kv_heads = heads;
    reg.kv_head_dim = head_dim;
    err[0] = '\0';
    return workers_register(r, id, strlen(id), &reg, 1000, err, errlen);
}

static void matching_caches_register_and_mismatches_are_refused(void **state)
{
    (void)state;
    worker_registry r;
    workers_init(&r);
    char err[512];
    router_worker *p = add(&r, "p1", PRE, "m", BF16, 24, 8, 64, 16, err, sizeof err);
    assert_non_null(p);
    assert_int_equal(p->kv.dtype, BF16);
    assert_int_equal(p->kv.layers, 24);
    /* same cache, another page size: fine (the TransferEngine re-pages) */
    assert_non_null(add(&r, "d1", DEC, "m", BF16, 24, 8, 64, 32, err, sizeof err));

    /* an f32 decoder next to a bf16 prefiller: refused, both named */
    assert_null(add(&r, "d2", DEC, "m", F32, 24, 8, 64, 16, err, sizeof err));
    assert_non_null(strstr(err, "KV cache mismatch"));
    assert_non_null(strstr(err, "worker d2"));
    assert_non_null(strstr(err, "f32"));
    assert_non_null(strstr(err, "bf16"));
    assert_non_null(strstr(err, "prefiller p1"));
    assert_non_null(strstr(err, "--kv-dtype"));
    assert_int_equal(r.n, 2);

    /* nor an fp8 one */
    assert_null(add(&r, "d8", DEC, "m", TANDEM__V1__KV_DTYPE__KV_DTYPE_FP8_E4M3, 24, 8, 64, 16, err,
                    sizeof err));
    assert_non_null(strstr(err, "fp8 (3)"));

    /* geometry counts as much as the dtype */
    assert_null(add(&r, "d3", DEC, "m", BF16, 24, 4, 64, 16, err, sizeof err));
    assert_non_null(strstr(err, "KV cache mismatch"));
    assert_null(add(&r, "d4", DEC, "m", BF16, 24, 8, 128, 16, err, sizeof err));
    assert_null(add(&r, "p2", PRE, "m", BF16, 12, 8, 64, 16, err, sizeof err));
    /* a worker that announces nothing does not match an announced cache */
    assert_null(add(&r, "d5", DEC, "m", 0, 0, 0, 0, 16, err, sizeof err));
    assert_non_null(strstr(err, "not announced"));

    /* another model keeps its own signature */
    assert_non_null(add(&r, "p9", PRE, "other", F32, 4, 2, 16, 16, err, sizeof err));
    assert_non_null(add(&r, "d9", DEC, "other", F32, 4, 2, 16, 8, err, sizeof err));
    assert_int_equal(r.n, 4);

    /* a worker re-registering is compared with the others, not itself:
     * the only decoder of "other" may come back with a bf16 cache only
     * if the prefiller agrees, which it does not */
    assert_null(add(&r, "d9", DEC, "other", BF16, 4, 2, 16, 8, err, sizeof err));
    assert_non_null(add(&r, "d9", DEC, "other", F32, 4, 2, 16, 8, err, sizeof err));
    assert_int_equal(r.n, 4);

    /* once every bf16 worker of "m" is gone, an f32 pair may serve it */
    for (int i = r.n - 1; i >= 0; i--)
        if (!strcmp(r.w[i]->model, "m"))
            workers_remove_at(&r, i);
    assert_int_equal(r.n, 2);
    assert_non_null(add(&r, "d2", DEC, "m", F32, 24, 8, 64, 16, err, sizeof err));
    workers_free(&r);
}

static void signatures_describe_themselves(void **state)
{
    (void)state;
    char buf[96];
    kv_signature s = {BF16, 24, 8, 64};
    kv_signature_describe(&s, buf, sizeof buf);
    assert_string_equal(buf, "bf16 (2), 24 layers x 8 KV heads x 64");
    kv_signature none = {0, 0, 0, 0};
    kv_signature_describe(&none, buf, sizeof buf);
    assert_string_equal(buf, "not announced");
    assert_true(kv_signature_equal(&s, &s));
    assert_false(kv_signature_equal(&s, &none));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matching_caches_register_and_mismatches_are_refused),
        cmocka_unit_test(signatures_describe_themselves),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
