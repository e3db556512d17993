/* The decoder group's layout from the pod environment the StatefulSet sets
 * (worker/worker_group_env.c): the ranks, world and rendezvous leader of
 * each pod of a G-pod group against the mapping deploy/ documents
 * (group rank = (k mod G) x GPUS_PER_POD + local index, leader = pod
 * k - k mod G on the headless service, port 8092), the one-pod case, and
 * every malformed or contradicting input refused with its reason. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include "worker/worker_group_env.h"

static const char *const *g_env;   /* NAME=VALUE strings, NULL-terminated */

static const char *fake_env(const char *name)
{
    size_t n = strlen(name);
    for (const char *const *e = g_env; *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

static int layout(worker_options *o, const char *const *env, char *err, size_t errlen)
{
    g_env = env;
    return worker_group_from_env(o, fake_env, err, errlen);
}

static void pods_of_a_gb200_group(void **state)
{
    (void)state;
    char pod[64];
    const char *env[] = {pod, "TANDEM_DECODER_PODS_PER_GROUP=4", "TANDEM_DECODER_GPUS_PER_POD=4",
                         "TANDEM_DECODER_HEADLESS_SERVICE=tandem-decoder-headless",
                         "POD_NAMESPACE=serving", NULL};
    for (int k = 0; k < 8; k++) {
        worker_options o;
        worker_options_default(&o);
        snprintf(pod, sizeof pod, "POD_NAME=tandem-decoder-%d", k);
        char err[300] = "", want[128];
        assert_int_equal(layout(&o, env, err, sizeof err), 0);
        assert_int_equal(o.ranks, 16);
        assert_int_equal(o.ep, 16);
        assert_int_equal(o.world, 16);
        assert_int_equal(o.rank, (k % 4) * 4);
        assert_int_equal(o.local_ranks, 4);
        snprintf(want, sizeof want, "tandem-decoder-%d.tandem-decoder-headless.serving.svc:8092",
                 k - k % 4);
        assert_string_equal(o.group_leader, want);
    }
}

static void one_pod_forks_its_group(void **state)
{
    (void)state;
    const char *env[] = {"POD_NAME=tandem-decoder-3", "TANDEM_DECODER_PODS_PER_GROUP=1",
                         "TANDEM_DECODER_GPUS_PER_POD=8", NULL};
    worker_options o;
    worker_options_default(&o);
    o.ep = 4;   /* given: kept */
    char err[300];
    assert_int_equal(layout(&o, env, err, sizeof err), 0);
    assert_int_equal(o.ranks, 8);
    assert_int_equal(o.ep, 4);
    assert_int_equal(o.world, 0);
    assert_string_equal(o.group_leader, "");
}

static void bad_environments_are_refused(void **state)
{
    (void)state;
    struct { const char *env[6]; const char *msg; } cases[] = {
        {{"TANDEM_DECODER_GPUS_PER_POD=4", NULL}, "TANDEM_DECODER_PODS_PER_GROUP must be"},
        {{"TANDEM_DECODER_PODS_PER_GROUP=2", "TANDEM_DECODER_GPUS_PER_POD=x", NULL},
         "TANDEM_DECODER_GPUS_PER_POD must be 1..64, got 'x'"},
        {{"TANDEM_DECODER_PODS_PER_GROUP=16", "TANDEM_DECODER_GPUS_PER_POD=8", NULL},
         "exceed 64 ranks"},
        {{"POD_NAME=decoder", "TANDEM_DECODER_PODS_PER_GROUP=2", "TANDEM_DECODER_GPUS_PER_POD=2",
          "TANDEM_DECODER_HEADLESS_SERVICE=s", NULL}, "POD_NAME must end in -ORDINAL"},
        {{"POD_NAME=d-1", "TANDEM_DECODER_PODS_PER_GROUP=2", "TANDEM_DECODER_GPUS_PER_POD=2",
          NULL}, "TANDEM_DECODER_HEADLESS_SERVICE is unset"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        worker_options o;
        worker_options_default(&o);
        char err[300] = "";
        assert_int_equal(layout(&o, cases[i].env, err, sizeof err), -1);
        if (!strstr(err, cases[i].msg))
            print_error("case %zu: '%s' lacks '%s'\n", i, err, cases[i].msg);
        assert_non_null(strstr(err, cases[i].msg));
    }
    /* a flag that contradicts the environment */
    const char *env[] = {"POD_NAME=d-1", "TANDEM_DECODER_PODS_PER_GROUP=2",
                         "TANDEM_DECODER_GPUS_PER_POD=2", "TANDEM_DECODER_HEADLESS_SERVICE=s",
                         NULL};
    worker_options o;
    worker_options_default(&o);
    o.ranks = 2;
    char err[300] = "";
    assert_int_equal(layout(&o, env, err, sizeof err), -1);
    assert_non_null(strstr(err, "give none of them (or --dp 4)"));
    worker_options_default(&o);
    o.ranks = 4;   /* the same value is fine */
    assert_int_equal(layout(&o, env, err, sizeof err), 0);
    assert_string_equal(o.group_leader, "d-0.s:8092");
    assert_int_equal(o.rank, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pods_of_a_gb200_group),
        cmocka_unit_test(one_pod_forks_its_group),
        cmocka_unit_test(bad_environments_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
