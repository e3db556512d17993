/* local scaler with real child processes (sleep, sh): starts, drains with
 * SIGTERM, kills after the drain timeout, reports exec failures, restarts
 * slots of workers that died, and leaves no process or zombie behind. The
 * test process is a child subreaper, so even a worker's own children come
 * back to it and can be checked. Waits are bounded; nothing asserts speed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "common/status.h"
#include "autoscale/scaler.h"

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits (bounded, 10 s) until path exists. */
static int wait_for_file(const char *path)
{
    struct stat st;
    for (int i = 0; i < 1000; i++) {
        if (stat(path, &st) == 0 && st.st_size > 0)
            return 1;
        sleep_ms(10);
    }
    return 0;
}

static int process_gone(pid_t pid)
{
    return kill(pid, 0) == -1 && errno == ESRCH;
}

/* Reaps every child that has already ended (reparented grandchildren too)
 * and asserts none is left running or unreaped, waiting at most 10 s for
 * killed ones to be delivered. */
static void assert_no_children_left(void)
{
    for (int i = 0; i < 1000; i++) {
        pid_t w = waitpid(-1, NULL, WNOHANG);
        if (w < 0 && errno == ECHILD)
            return;
        if (w == 0)
            sleep_ms(10);
    }
    fail_msg("child processes are still alive");
}

typedef struct {
    char dir[64];
} fixture;

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof(*fx));
    if (!fx)
        return -1;
    snprintf(fx->dir, sizeof(fx->dir), "/tmp/tandem-local-XXXXXX");
    if (!mkdtemp(fx->dir))
        return -1;
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture *fx = *state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->dir);
    int rc = system(cmd);
    free(fx);
    return rc == 0 ? 0 : -1;
}

static void split_command_on_blanks(void **state)
{
    (void)state;
    char **argv = NULL;
    char err[256];
    assert_int_equal(scaler_local_split_command("  build/bin/tandem-prefiller\t--port {port}  --id {index}\n", &argv,
                                                err, sizeof(err)), 0);
    assert_string_equal(argv[0], "build/bin/tandem-prefiller");
    assert_string_equal(argv[1], "--port");
    assert_string_equal(argv[2], "{port}");
    assert_string_equal(argv[3], "--id");
    assert_string_equal(argv[4], "{index}");
    assert_null(argv[5]);
    scaler_local_free_argv(argv);
    assert_int_equal(scaler_local_split_command("   ", &argv, err, sizeof(err)), TN_ERR_ARG);
    assert_non_null(strstr(err, "empty"));
    assert_null(argv);
}

static void placeholders_are_expanded(void **state)
{
    fixture *fx = *state;
    char script[256];
    snprintf(script, sizeof(script), "echo {pool} {index} {port} > %s/{pool}-{index}.txt; exec sleep 30", fx->dir);
    const char *argv[] = {"sh", "-c", script, NULL};
    scaler_local_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.argv[AS_POOL_DECODE] = argv;
    cfg.base_port[AS_POOL_DECODE] = 9100;
    cfg.drain_timeout_s = 5.0;
    scaler_local *l = NULL;
    char err[256];
    assert_int_equal(scaler_local_create(&cfg, &l, err, sizeof(err)), 0);
    assert_int_equal(scaler_local_set_replicas(l, AS_POOL_DECODE, 2, err, sizeof(err)), 0);
    char path[128], line[64] = "";
    snprintf(path, sizeof(path), "%s/decode-1.txt", fx->dir);
    assert_true(wait_for_file(path));
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof(line), f));
    fclose(f);
    assert_string_equal(line, "decode 1 9101\n");
    /* The prefill pool has no command: setting it fails loudly. */
    assert_int_equal(scaler_local_set_replicas(l, AS_POOL_PREFILL, 1, err, sizeof(err)), TN_ERR_ARG);
    assert_non_null(strstr(err, "no command configured for the prefill pool"));
    scaler_local_destroy(l);
    assert_no_children_left();
}

static void scale_up_and_drain_down(void **state)
{
    (void)state;
    const char *argv[] = {"sleep", "30", NULL};
    scaler_local_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.argv[AS_POOL_PREFILL] = argv;
    cfg.drain_timeout_s = 10.0;
    scaler_local *l = NULL;
    char err[256];
    assert_int_equal(scaler_local_create(&cfg, &l, err, sizeof(err)), 0);
    scaler s = scaler_local_as_scaler(l);
    assert_string_equal(scaler_kind(&s), "local");
    assert_int_equal(scaler_set_replicas(&s, AS_POOL_PREFILL, 3, err, sizeof(err)), 0);
    int pids[8];
    assert_int_equal(scaler_local_pids(l, AS_POOL_PREFILL, pids, 8), 3);
    assert_true(pids[0] != pids[1] && pids[1] != pids[2] && pids[0] != pids[2]);
    for (int i = 0; i < 3; i++)
        assert_int_equal(kill(pids[i], 0), 0);
    int n = -1;
    assert_int_equal(scaler_get_replicas(&s, AS_POOL_PREFILL, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 3);
    /* Idempotent. */
    assert_int_equal(scaler_set_replicas(&s, AS_POOL_PREFILL, 3, err, sizeof(err)), 0);
    assert_int_equal(scaler_local_get_replicas(l, AS_POOL_PREFILL), 3);

    /* Down to 1: the two highest slots get SIGTERM and drain. */
    assert_int_equal(scaler_set_replicas(&s, AS_POOL_PREFILL, 1, err, sizeof(err)), 0);
    assert_int_equal(scaler_local_get_replicas(l, AS_POOL_PREFILL), 1);
    scaler_local_wait_drained(l, 10.0);
    assert_int_equal(scaler_local_draining(l, AS_POOL_PREFILL), 0);
    assert_int_equal(scaler_local_killed_after_timeout(l), 0); /* sleep obeys SIGTERM */
    assert_true(process_gone(pids[1]));
    assert_true(process_gone(pids[2]));
    int left[8];
    assert_int_equal(scaler_local_pids(l, AS_POOL_PREFILL, left, 8), 1);
    assert_int_equal(left[0], pids[0]);
    assert_int_equal(kill(pids[0], 0), 0);

    /* Back up to 2: slot 1 is reused. */
    assert_int_equal(scaler_set_replicas(&s, AS_POOL_PREFILL, 2, err, sizeof(err)), 0);
    assert_int_equal(scaler_local_pids(l, AS_POOL_PREFILL, left, 8), 2);
    assert_int_equal(left[0], pids[0]);
    scaler_destroy(&s); /* drains and reaps everything */
    assert_true(process_gone(pids[0]));
    assert_true(process_gone(left[1]));
    assert_no_children_left();
}

static void drain_timeout_kills_the_worker_and_its_children(void **state)
{
    fixture *fx = *state;
    char script[384];
    /* Ignores SIGTERM and has a child of its own in its process group. */
    snprintf(script, sizeof(script),
             "trap '' TERM; sleep 30 & echo $! > %s/child-{index}; exec sleep 30", fx->dir);
    const char *argv[] = {"sh", "-c", script, NULL};
    scaler_local_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.argv[AS_POOL_DECODE] = argv;
    cfg.drain_timeout_s = 0.2;
    scaler_local *l = NULL;
    char err[256];
    assert_int_equal(scaler_local_create(&cfg, &l, err, sizeof(err)), 0);
    assert_int_equal(scaler_local_set_replicas(l, AS_POOL_DECODE, 1, err, sizeof(err)), 0);
    int pid;
    assert_int_equal(scaler_local_pids(l, AS_POOL_DECODE, &pid, 1), 1);
    char path[128];
    snprintf(path, sizeof(path), "%s/child-0", fx->dir);
    assert_true(wait_for_file(path)); /* the trap is set from here on */
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int child = 0;
    assert_int_equal(fscanf(f, "%d", &child), 1);
    fclose(f);
    assert_int_equal(kill(child, 0), 0);

    assert_int_equal(scaler_local_set_replicas(l, AS_POOL_DECODE, 0, err, sizeof(err)), 0);
    assert_int_equal(scaler_local_draining(l, AS_POOL_DECODE), 1);
    scaler_local_wait_drained(l, 10.0);
    assert_int_equal(scaler_local_draining(l, AS_POOL_DECODE), 0);
    assert_int_equal(scaler_local_killed_after_timeout(l), 1);
    assert_true(process_gone(pid));
    scaler_local_destroy(l);
    /* The worker's own child was killed with its group and, reparented to
     * this subreaper, is reaped here. */
    assert_no_children_left();
    assert_true(process_gone(child));
}

static void exec_failure_is_reported(void **state)
{
    (void)state;
    const char *argv[] = {"/nonexistent/tandem-worker", "--port", "{port}", NULL};
    scaler_local_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.argv[AS_POOL_PREFILL] = argv;
    cfg.drain_timeout_s = 1.0;
    scaler_local *l = NULL;
    char err[256];
    assert_int_equal(scaler_local_create(&cfg, &l, err, sizeof(err)), 0);
    assert_int_equal(scaler_local_set_replicas(l, AS_POOL_PREFILL, 1, err, sizeof(err)), TN_ERR_SYS);
    assert_non_null(strstr(err, "/nonexistent/tandem-worker"));
    assert_non_null(strstr(err, "No such file"));
    assert_int_equal(scaler_local_get_replicas(l, AS_POOL_PREFILL), 0);
    assert_int_equal(scaler_local_set_replicas(l, AS_POOL_PREFILL, 65, err, sizeof(err)), TN_ERR_ARG);
    assert_non_null(strstr(err, "limit"));
    scaler_local_destroy(l);
    assert_no_children_left();
}

static void dead_worker_frees_its_slot(void **state)
{
    fixture *fx = *state;
    char marker[128], script[256];
    snprintf(marker, sizeof(marker), "%s/ran", fx->dir);
    snprintf(script, sizeof(script), "echo x >> %s; exit 3", marker);
    const char *argv[] = {"sh", "-c", script, NULL};
    scaler_local_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.argv[AS_POOL_PREFILL] = argv;
    cfg.drain_timeout_s = 1.0;
    scaler_local *l = NULL;
    char err[256];
    assert_int_equal(scaler_local_create(&cfg, &l, err, sizeof(err)), 0);
    assert_int_equal(scaler_local_set_replicas(l, AS_POOL_PREFILL, 1, err, sizeof(err)), 0);
    assert_int_equal(scaler_local_get_replicas(l, AS_POOL_PREFILL), 1);
    int reaped = 0;
    for (int i = 0; i < 1000 && !reaped; i++) {
        reaped = scaler_local_poll(l);
        if (!reaped)
            sleep_ms(10);
    }
    assert_int_equal(reaped, 1);
    assert_int_equal(scaler_local_get_replicas(l, AS_POOL_PREFILL), 0);
    /* The next set_replicas starts a replacement. */
    assert_int_equal(scaler_local_set_replicas(l, AS_POOL_PREFILL, 1, err, sizeof(err)), 0);
    scaler_local_wait_drained(l, 1.0);
    scaler_local_destroy(l);
    assert_no_children_left();
}

static void bad_configuration_is_rejected(void **state)
{
    (void)state;
    const char *empty[] = {NULL};
    scaler_local_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.argv[AS_POOL_PREFILL] = empty;
    scaler_local *l = NULL;
    char err[256];
    assert_int_equal(scaler_local_create(&cfg, &l, err, sizeof(err)), TN_ERR_ARG);
    assert_non_null(strstr(err, "prefill command is empty"));
    memset(&cfg, 0, sizeof(cfg));
    cfg.drain_timeout_s = -1.0;
    assert_int_equal(scaler_local_create(&cfg, &l, err, sizeof(err)), TN_ERR_ARG);
    assert_null(l);
}

int main(void)
{
    /* Orphans of our workers come back here, so the test can see them. */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
        perror("prctl(PR_SET_CHILD_SUBREAPER)");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(split_command_on_blanks),
        cmocka_unit_test_setup_teardown(placeholders_are_expanded, setup, teardown),
        cmocka_unit_test(scale_up_and_drain_down),
        cmocka_unit_test_setup_teardown(drain_timeout_kills_the_worker_and_its_children, setup, teardown),
        cmocka_unit_test(exec_failure_is_reported),
        cmocka_unit_test_setup_teardown(dead_worker_frees_its_slot, setup, teardown),
        cmocka_unit_test(bad_configuration_is_rejected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
