/* Router placement (least queued input tokens; smallest batch with KV room),
 * the worker registry, and the flag/config-file parser every executable uses. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "common/options.h"
#include "router/placement.h"

static router_worker *add(worker_registry *r, const char *id, int role, const char *model,
                          int pages, int page_size, int max_context)
{
    Tandem__V1__Register reg = TANDEM__V1__REGISTER__INIT;
    reg.worker_id = (char *)id;
    reg.role = role;
    reg.model = (char *)model;
    reg.vocab_size = 512;
    reg.max_context = max_context;
    reg.page_size = page_size;
    reg.kv_pages_total = pages;
    char err[200];
    router_worker *w = workers_register(r, id, strlen(id), &reg, 1000, err, sizeof err);
    assert_non_null(w);
    return w;
}

#define PRE TANDEM__V1__WORKER_ROLE__WORKER_ROLE_PREFILLER
#define DEC TANDEM__V1__WORKER_ROLE__WORKER_ROLE_DECODER

static void prefiller_with_fewest_queued_tokens_wins(void **state)
{
    (void)state;
    worker_registry r;
    workers_init(&r);
    router_worker *a = add(&r, "p-a", PRE, "m", 0, 16, 4096);
    router_worker *b = add(&r, "p-b", PRE, "m", 0, 16, 4096);
    add(&r, "p-other", PRE, "other", 0, 16, 4096);
    a->assigned_input_tokens = 500;
    a->in_flight = 1;
    b->assigned_input_tokens = 100;
    b->in_flight = 3; /* more requests but fewer tokens: tokens decide */
    router_worker *got;
    assert_int_equal(placement_pick_prefiller(&r, "m", &got), PLACE_OK);
    assert_ptr_equal(got, b);
    assert_int_equal(placement_pick_prefiller(&r, "nope", &got), PLACE_NO_WORKER);
    workers_free(&r);
}

static void decoder_with_smallest_batch_and_room_wins(void **state)
{
    (void)state;
    worker_registry r;
    workers_init(&r);
    router_worker *a = add(&r, "d-a", DEC, "m", 100, 16, 1601);
    router_worker *b = add(&r, "d-b", DEC, "m", 100, 16, 1601);
    a->in_flight = 1;
    b->in_flight = 5;
    router_worker *got;
    /* 64 prompt tokens: 4 pages + 1 to grow into at admission (the worst
     * case, 64 + 65 - 1 = 128 tokens, is 8): both have room, a has the
     * smaller batch. */
    assert_int_equal(placement_pages_at_admission(64, 65, 16), 5);
    assert_int_equal(placement_pages_at_admission(63, 1, 16), 4); /* never above the worst case */
    assert_int_equal(placement_pick_decoder(&r, "m", 64, 65, &got), PLACE_OK);
    assert_ptr_equal(got, a);
    a->pages_committed = 95; /* a has 5 pages left: enough by use */
    assert_int_equal(placement_pick_decoder(&r, "m", 64, 65, &got), PLACE_OK);
    assert_ptr_equal(got, a);
    a->pages_committed = 96; /* 4 left: not enough */
    assert_int_equal(placement_pick_decoder(&r, "m", 64, 65, &got), PLACE_OK);
    assert_ptr_equal(got, b);
    b->pages_committed = 97; /* neither has room now: the one with most room waits */
    assert_int_equal(placement_pick_decoder(&r, "m", 64, 65, &got), PLACE_OK);
    assert_ptr_equal(got, a);
    /* 101 pages can never fit in 100. */
    assert_int_equal(placement_pick_decoder(&r, "m", 1600, 17, &got), PLACE_NEVER_FITS);
    assert_int_equal(placement_pick_decoder(&r, "x", 1, 1, &got), PLACE_NO_WORKER);
    assert_int_equal(placement_max_context(&r, "m"), 1601);
    workers_free(&r);
}

static void registry_refreshes_and_expires(void **state)
{
    (void)state;
    worker_registry r;
    workers_init(&r);
    router_worker *a = add(&r, "d-a", DEC, "m", 10, 16, 161);
    a->in_flight = 2;
    router_worker *again = add(&r, "d-a", DEC, "m", 20, 16, 321);
    assert_ptr_equal(a, again);
    assert_int_equal(r.n, 1);
    assert_int_equal(a->kv_pages_total, 20);
    assert_int_equal(a->in_flight, 2); /* accounting survives re-registration */
    add(&r, "p-a", PRE, "m", 0, 16, 100);
    assert_int_equal(workers_next_expired(&r, 1000 + 500, 1000), -1);
    r.w[1]->last_seen_ms = 2000;
    int i = workers_next_expired(&r, 2600, 1000);
    assert_int_equal(i, 0);
    assert_string_equal(r.w[i]->id, "d-a");
    workers_remove_at(&r, i);
    assert_int_equal(r.n, 1);
    assert_true(workers_serve_model(&r, "m", PRE));
    assert_false(workers_serve_model(&r, "m", DEC));

    Tandem__V1__Register bad = TANDEM__V1__REGISTER__INIT;
    bad.worker_id = "x";
    bad.role = DEC;
    bad.model = "m";
    char err[200];
    assert_null(workers_register(&r, "x", 1, &bad, 0, err, sizeof err)); /* zero sizes */
    assert_null(workers_register(&r, "y", 1, &bad, 0, err, sizeof err)); /* id mismatch */
    assert_non_null(strstr(err, "differs"));
    workers_free(&r);
}

static void flags_override_the_config_file(void **state)
{
    (void)state;
    char path[] = "/tmp/tandem-opts-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "# comment\nport = 81\nname=from-file   # trailing\n\nverbose = true\nrate=0.5\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    int port = 1, verbose = 0;
    double rate = 0;
    char name[16] = "default";
    opt_spec specs[] = {
        {"port", OPT_INT, &port, 0, "p"},
        {"name", OPT_STR, name, sizeof name, "n"},
        {"verbose", OPT_BOOL, &verbose, 0, "v"},
        {"rate", OPT_DOUBLE, &rate, 0, "r"},
    };
    char err[256];
    char *argv1[] = {"prog", "--port", "82", "--config", path, NULL};
    assert_int_equal(opts_parse(specs, 4, 5, argv1, err, sizeof err), OPTS_OK);
    assert_int_equal(port, 82);
    assert_string_equal(name, "from-file");
    assert_int_equal(verbose, 1);
    assert_true(rate == 0.5);
    char *argv2[] = {"prog", "--port=12x", NULL};
    assert_int_equal(opts_parse(specs, 4, 2, argv2, err, sizeof err), OPTS_ERROR);
    assert_non_null(strstr(err, "integer"));
    char *argv3[] = {"prog", "--nope", NULL};
    assert_int_equal(opts_parse(specs, 4, 2, argv3, err, sizeof err), OPTS_ERROR);
    char *argv4[] = {"prog", "--name", "much-too-long-for-it", NULL};
    assert_int_equal(opts_parse(specs, 4, 3, argv4, err, sizeof err), OPTS_ERROR);
    char *argv5[] = {"prog", "--port", "1", "--help", NULL};
    assert_int_equal(opts_parse(specs, 4, 4, argv5, err, sizeof err), OPTS_HELP);
    FILE *f = fopen(path, "w");
    fputs("bogus = 1\n", f);
    fclose(f);
    char *argv6[] = {"prog", "--config", path, NULL};
    assert_int_equal(opts_parse(specs, 4, 3, argv6, err, sizeof err), OPTS_ERROR);
    assert_non_null(strstr(err, ":1: unknown setting 'bogus'"));
    unlink(path);
}

static void draining_workers_are_never_picked(void **state)
{
    (void)state;
    worker_registry r;
    workers_init(&r);
    router_worker *p1 = add(&r, "p-1", PRE, "m", 0, 16, 4096);
    router_worker *p2 = add(&r, "p-2", PRE, "m", 0, 16, 4096);
    router_worker *d1 = add(&r, "d-1", DEC, "m", 100, 16, 1601);
    router_worker *d2 = add(&r, "d-2", DEC, "m", 100, 16, 1601);
    p2->assigned_input_tokens = 1000; /* p-1 would win on load */
    d2->in_flight = 5;                /* d-1 would win on batch */
    p1->draining = 1;
    d1->draining = 1;
    router_worker *got;
    assert_int_equal(placement_pick_prefiller(&r, "m", &got), PLACE_OK);
    assert_ptr_equal(got, p2);
    assert_int_equal(placement_pick_decoder(&r, "m", 10, 10, &got), PLACE_OK);
    assert_ptr_equal(got, d2);
    p2->draining = 1;
    d2->draining = 1;
    assert_int_equal(placement_pick_prefiller(&r, "m", &got), PLACE_NO_WORKER);
    assert_int_equal(placement_pick_decoder(&r, "m", 10, 10, &got), PLACE_NO_WORKER);
    int registered, serving;
    workers_count(&r, DEC, &registered, &serving);
    assert_int_equal(registered, 2);
    assert_int_equal(serving, 0);
    workers_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(draining_workers_are_never_picked),
        cmocka_unit_test(prefiller_with_fewest_queued_tokens_wins),
        cmocka_unit_test(decoder_with_smallest_batch_and_room_wins),
        cmocka_unit_test(registry_refreshes_and_expires),
        cmocka_unit_test(flags_override_the_config_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
