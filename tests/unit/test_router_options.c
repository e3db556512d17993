/* tandem-router's settings: deploy/base/router.conf plus the flags the
 * router Deployment passes (deploy/base/router-deployment.yaml) parse into
 * the expected configuration and pass validation; flags override the file;
 * mistakes are refused with the name and the place. */
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
#include "router/router.h"

static int parse(router_config *c, int argc, const char **argv, char *err, size_t errlen)
{
    router_config_default(c);
    return router_config_parse(c, argc, (char **)argv, err, errlen);
}

static void deployment_config_is_accepted(void **state)
{
    (void)state;
    router_config *c = calloc(1, sizeof *c);
    assert_non_null(c);
    char err[512] = "";
    /* As the Deployment passes them, after the env substitution of the
     * gb200 overlay. */
    const char *argv[] = {"tandem-router", "--config=deploy/base/router.conf",
                          "--scaler=kubernetes", "--scaler-k8s-decode-pods-per-replica=4",
                          "--autoscale-prefill-max=16", "--autoscale-decode-max=4"};
    int rc = parse(c, 6, argv, err, sizeof err);
    if (rc != OPTS_OK)
        print_error("%s\n", err);
    assert_int_equal(rc, OPTS_OK);
    assert_int_equal(router_config_validate(c, err, sizeof err), 0);
    assert_int_equal(c->http_port, 8080);
    assert_int_equal(c->rpc_port, 8081);
    assert_int_equal(c->metrics_port, 9090);
    assert_int_equal(c->worker_port, 8082);
    assert_string_equal(c->host, "0.0.0.0");
    assert_int_equal(c->queue_timeout_ms, 30000);
    assert_int_equal(c->drain_timeout_ms, 30000);
    assert_string_equal(c->as.scaler, "kubernetes");
    assert_string_equal(c->as.k8s_workload[AS_POOL_PREFILL], "deployments/tandem-prefiller");
    assert_string_equal(c->as.k8s_workload[AS_POOL_DECODE], "statefulsets/tandem-decoder");
    assert_int_equal(c->as.k8s_pods_per_replica[AS_POOL_DECODE], 4);
    assert_int_equal(c->as.policy.pool[AS_POOL_PREFILL].max_replicas, 16);
    assert_int_equal(c->as.policy.pool[AS_POOL_DECODE].max_replicas, 4);
    assert_int_equal(c->as.policy.pool[AS_POOL_DECODE].max_step_up, 2);
    assert_float_equal(c->as.policy.prefill_prior_tps, 75851, 0);
    free(c);
}

static void flags_override_the_file(void **state)
{
    (void)state;
    router_config *c = calloc(1, sizeof *c);
    assert_non_null(c);
    char err[512] = "";
    const char *argv[] = {"tandem-router", "--autoscale-decode-max-batch", "8",
                          "--config", "deploy/base/router.conf", "--http-port=0",
                          "--scaler", "local", "--scaler-local-model", "tests/fixtures/gpt_oss_tiny",
                          "--scaler-local-decode-args", "--kv-pages 64 --max-batch 8",
                          "--autoscale-prefill-up-window-s=0.5"};
    assert_int_equal(parse(c, 13, argv, err, sizeof err), OPTS_OK);
    assert_int_equal(router_config_validate(c, err, sizeof err), 0);
    assert_int_equal(c->http_port, 0);                       /* flag over file */
    assert_float_equal(c->as.policy.decode_max_batch, 8, 0); /* flag over file (64) */
    assert_float_equal(c->as.policy.pool[AS_POOL_PREFILL].scale_up_window_s, 0.5, 0);
    assert_string_equal(c->as.local_args[AS_POOL_DECODE], "--kv-pages 64 --max-batch 8");
    free(c);
}

/* The failover defaults (docs/RELIABILITY.md): the router queue on, a
 * drain on SIGTERM, and a progress timeout above what a live worker needs
 * to report (its heartbeats lapsing twice plus the prefillers' default
 * transfer timeout). */
static void failover_defaults(void **state)
{
    (void)state;
    router_config *c = calloc(1, sizeof *c);
    assert_non_null(c);
    char err[512] = "";
    const char *a1[] = {"tandem-router"};
    assert_int_equal(parse(c, 1, a1, err, sizeof err), OPTS_OK);
    assert_int_equal(router_config_validate(c, err, sizeof err), 0);
    assert_int_equal(c->queue_timeout_ms, 30000);
    assert_int_equal(c->drain_timeout_ms, 30000);
    assert_int_equal(router_progress_timeout_ms(c), 2 * 5000 + 30000);
    const char *a2[] = {"tandem-router", "--worker-timeout-ms=3000", "--progress-timeout-ms=0"};
    assert_int_equal(parse(c, 3, a2, err, sizeof err), OPTS_OK);
    assert_int_equal(router_progress_timeout_ms(c), 36000);
    const char *a3[] = {"tandem-router", "--progress-timeout-ms=1500", "--queue-timeout-ms=0"};
    assert_int_equal(parse(c, 3, a3, err, sizeof err), OPTS_OK);
    assert_int_equal(router_config_validate(c, err, sizeof err), 0);
    assert_int_equal(router_progress_timeout_ms(c), 1500);
    assert_int_equal(c->queue_timeout_ms, 0);
    const char *a4[] = {"tandem-router", "--drain-timeout-ms=-1"};
    assert_int_equal(parse(c, 2, a4, err, sizeof err), OPTS_OK);
    assert_int_equal(router_config_validate(c, err, sizeof err), -1);
    assert_non_null(strstr(err, "--drain-timeout-ms >= 0"));
    free(c);
}

static void mistakes_are_refused(void **state)
{
    (void)state;
    router_config *c = calloc(1, sizeof *c);
    assert_non_null(c);
    char err[512] = "";
    const char *a1[] = {"tandem-router", "--autoscale-prefil-max=3"};
    assert_int_equal(parse(c, 2, a1, err, sizeof err), OPTS_ERROR);
    assert_non_null(strstr(err, "unknown flag '--autoscale-prefil-max'"));
    const char *a2[] = {"tandem-router", "--autoscale-prefill-max", "many"};
    assert_int_equal(parse(c, 3, a2, err, sizeof err), OPTS_ERROR);
    assert_non_null(strstr(err, "'many' is not an integer"));
    const char *a3[] = {"tandem-router", "--autoscale-prefill-max"};
    assert_int_equal(parse(c, 2, a3, err, sizeof err), OPTS_ERROR);
    assert_non_null(strstr(err, "needs a value"));
    const char *a4[] = {"tandem-router", "--scaler=elastic"};
    assert_int_equal(parse(c, 2, a4, err, sizeof err), OPTS_OK);
    assert_int_equal(router_config_validate(c, err, sizeof err), -1);
    assert_non_null(strstr(err, "--scaler must be"));
    const char *a5[] = {"tandem-router", "--scaler=local"};
    assert_int_equal(parse(c, 2, a5, err, sizeof err), OPTS_OK);
    assert_int_equal(router_config_validate(c, err, sizeof err), -1);
    assert_non_null(strstr(err, "--scaler-local-model"));
    const char *a6[] = {"tandem-router", "--autoscale-decode-min=5", "--autoscale-decode-max=2"};
    assert_int_equal(parse(c, 3, a6, err, sizeof err), OPTS_OK);
    assert_int_equal(router_config_validate(c, err, sizeof err), -1);
    assert_non_null(strstr(err, "autoscale-decode-max"));
    /* A bad autoscale value in a config file names the file and line. */
    char path[] = "/tmp/tandem-router-conf-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char text[] = "http-port = 1\nautoscale-decode-headroom = lots\n";
    assert_int_equal(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
    close(fd);
    char cfg[64];
    snprintf(cfg, sizeof cfg, "--config=%s", path);
    const char *a7[] = {"tandem-router", cfg};
    assert_int_equal(parse(c, 2, a7, err, sizeof err), OPTS_ERROR);
    assert_non_null(strstr(err, ":2: --autoscale-decode-headroom: 'lots' is not a number"));
    unlink(path);
    free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(deployment_config_is_accepted),
        cmocka_unit_test(flags_override_the_file),
        cmocka_unit_test(failover_defaults),
        cmocka_unit_test(mistakes_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
