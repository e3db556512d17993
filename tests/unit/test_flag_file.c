/* Flag files, and that deploy/base/router.conf is a valid router
 * configuration for the autoscale policy (every autoscale-* key is a real
 * flag with a valid value, and the result passes validation). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/status.h"
#include "autoscale/autoscale_policy.h"
#include "common/flag_file.h"

/* The router's own settings in router.conf that are not autoscale flags
 * (tests/unit/test_router_options.c parses the file with the router's own
 * parser). */
static const char *const ROUTER_KEYS[] = {"host", "http-port", "rpc-port", "worker-port", "metrics-port",
                                          "queue-timeout-ms", "drain-timeout-ms", "http-memory-budget-mb",
                                          "scaler-k8s-prefill", "scaler-k8s-decode", NULL};

static int set_router(void *ctx, const char *name, const char *value, char *err, size_t errlen)
{
    int r = autoscale_config_set_flag(ctx, name, value, err, errlen);
    if (r != 1)
        return r;
    for (const char *const *k = ROUTER_KEYS; *k; k++)
        if (strcmp(*k, name) == 0)
            return *value ? 0 : -1;
    return 1;
}

static void router_conf_is_a_valid_autoscale_config(void **state)
{
    (void)state;
    autoscale_config c;
    autoscale_config_default(&c);
    char err[512] = "";
    int rc = flag_file_load("deploy/base/router.conf", set_router, &c, err, sizeof(err));
    if (rc != 0)
        print_error("%s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(autoscale_config_validate(&c, err, sizeof(err)), 0);
    assert_float_equal(c.prefill_target_utilisation, 0.8, 0.0);
    assert_float_equal(c.decode_max_batch, 64.0, 0.0);
    assert_int_equal(c.pool[AS_POOL_DECODE].max_step_up, 2);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void syntax_and_errors(void **state)
{
    (void)state;
    char path[] = "/tmp/tandem-conf-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    autoscale_config c;
    autoscale_config_default(&c);
    char err[512];
    write_text(path, "# comment\n\n   autoscale-prefill-max   =  12  \r\n\tautoscale-decode-headroom=0.25\n");
    assert_int_equal(flag_file_load(path, set_router, &c, err, sizeof(err)), 0);
    assert_int_equal(c.pool[AS_POOL_PREFILL].max_replicas, 12);
    assert_float_equal(c.decode_headroom, 0.25, 0.0);
    write_text(path, "autoscale-prefill-max = 3\nautoscale-prefil-max = 4\n");
    assert_int_equal(flag_file_load(path, set_router, &c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, ":2: unknown setting 'autoscale-prefil-max'"));
    write_text(path, "autoscale-prefill-max = many\n");
    assert_int_equal(flag_file_load(path, set_router, &c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, ":1: --autoscale-prefill-max: 'many' is not an integer"));
    write_text(path, "just words\n");
    assert_int_equal(flag_file_load(path, set_router, &c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "expected 'name = value'"));
    write_text(path, " = 3\n");
    assert_int_equal(flag_file_load(path, set_router, &c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "missing name"));
    unlink(path);
    assert_int_equal(flag_file_load(path, set_router, &c, err, sizeof(err)), TN_ERR_SYS);
    assert_non_null(strstr(err, "cannot open config"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(router_conf_is_a_valid_autoscale_config),
        cmocka_unit_test(syntax_and_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
