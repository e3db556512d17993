/* Rank start-up: forking a group from one process, supervising the children,
 * and the --rank/--world/--comm-name flags. */
#include "engine/comm_launch.h"
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "common/status.h"

static int valid_prefix(const char *p)
{
    size_t n = strlen(p);
    if (n == 0 || n > 16)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' && p[i] <= 'Z') ||
              (p[i] >= '0' && p[i] <= '9') || p[i] == '-' || p[i] == '_' || p[i] == '.'))
            return 0;
    return 1;
}

void comm_launch_kill(comm_launch *L)
{
    if (!L || L->rank != 0)
        return;
    for (int r = 1; r <= L->n_children; r++)
        if (L->children[r] > 0)
            kill(L->children[r], SIGKILL);
    for (int r = 1; r <= L->n_children; r++) {
        if (L->children[r] > 0) {
            while (waitpid(L->children[r], NULL, 0) < 0 && errno == EINTR) {
            }
            L->children[r] = 0;
        }
    }
    L->n_children = 0;
}

int comm_launch_fork(comm_launch *L, int world, const char *prefix, char *err,
                     size_t errlen)
{
    if (!L || !prefix || !valid_prefix(prefix) || world < 1 || world > COMM_MAX_WORLD) {
        tn_errf(err, errlen, "comm_launch_fork: world must be 1..%d and the prefix 1..16 "
             "characters of [A-Za-z0-9._-]", COMM_MAX_WORLD);
        return TN_ERR_ARG;
    }
    memset(L, 0, sizeof(*L));
    L->world = world;
    uint64_t nonce = 0;
    if (getrandom(&nonce, sizeof(nonce), GRND_NONBLOCK) != (ssize_t)sizeof(nonce)) {
        struct timespec ts;   /* no entropy yet: pid + clock is unique enough here */
        clock_gettime(CLOCK_MONOTONIC, &ts);
        nonce = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    }
    snprintf(L->name, sizeof(L->name), "%s-%ld-%08llx", prefix, (long)getpid(),
             (unsigned long long)(nonce & 0xffffffffu));
    fflush(NULL);   /* children must not repeat buffered output */
    for (int r = 1; r < world; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            tn_errf(err, errlen, "comm_launch_fork: fork of rank %d failed: %s", r,
                 strerror(errno));
            comm_launch_kill(L);
            return TN_ERR_SYS;
        }
        if (pid == 0) {
            L->rank = r;
            L->n_children = 0;
            memset(L->children, 0, sizeof(L->children));
            return TN_OK;
        }
        L->children[r] = pid;
        L->n_children = r;
    }
    L->rank = 0;
    return TN_OK;
}

static void describe(char *buf, size_t n, int rank, int status)
{
    if (WIFEXITED(status))
        snprintf(buf, n, "rank %d exited with status %d", rank, WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, n, "rank %d was killed by signal %d", rank, WTERMSIG(status));
    else
        snprintf(buf, n, "rank %d stopped (status 0x%x)", rank, status);
}

int comm_launch_wait(comm_launch *L, int timeout_ms, char *err, size_t errlen)
{
    if (!L || L->rank != 0)
        return 0;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int remaining = L->n_children, bad = 0;
    char first[160] = "";
    while (remaining > 0) {
        for (int r = 1; r <= L->n_children; r++) {
            if (L->children[r] <= 0)
                continue;
            int status = 0;
            pid_t got = waitpid(L->children[r], &status, WNOHANG);
            if (got == 0)
                continue;
            if (got < 0 && errno == EINTR)
                continue;
            L->children[r] = 0;
            remaining--;
            if (got < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                if (!bad)
                    describe(first, sizeof(first), r, got < 0 ? -1 : status);
                bad = 1;
            }
        }
        if (remaining == 0)
            break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long ms = (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
        if (timeout_ms > 0 && ms >= timeout_ms) {
            if (!bad)
                snprintf(first, sizeof(first), "%d rank(s) still running after %d ms; "
                         "killed", remaining, timeout_ms);
            bad = 1;
            comm_launch_kill(L);
            break;
        }
        struct timespec nap = {0, 5 * 1000000L};
        nanosleep(&nap, NULL);
    }
    L->n_children = 0;
    if (bad) {
        tn_errf(err, errlen, "%s", first);
        return TN_ERR_ARG;
    }
    return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return 0;
    *out = (int)v;
    return 1;
}

int comm_launch_parse_args(comm_launch *L, int argc, char **argv, char *err,
                           size_t errlen)
{
    if (!L || (argc > 0 && !argv))
        return TN_ERR_ARG;
    memset(L, 0, sizeof(*L));
    int have_rank = 0, have_world = 0, have_name = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int is_rank = !strcmp(a, "--rank"), is_world = !strcmp(a, "--world"),
            is_name = !strcmp(a, "--comm-name");
        if (!is_rank && !is_world && !is_name)
            continue;
        if (i + 1 >= argc) {
            tn_errf(err, errlen, "%s needs a value", a);
            return TN_ERR_ARG;
        }
        const char *v = argv[++i];
        if (is_rank) {
            if (!parse_int(v, 0, COMM_MAX_WORLD - 1, &L->rank)) {
                tn_errf(err, errlen, "--rank must be 0..%d, got '%s'", COMM_MAX_WORLD - 1, v);
                return TN_ERR_ARG;
            }
            have_rank = 1;
        } else if (is_world) {
            if (!parse_int(v, 1, COMM_MAX_WORLD, &L->world)) {
                tn_errf(err, errlen, "--world must be 1..%d, got '%s'", COMM_MAX_WORLD, v);
                return TN_ERR_ARG;
            }
            have_world = 1;
        } else {
            if (strlen(v) > COMM_NAME_MAX || !*v) {
                tn_errf(err, errlen, "--comm-name must be 1..%d characters", COMM_NAME_MAX);
                return TN_ERR_ARG;
            }
            snprintf(L->name, sizeof(L->name), "%s", v);
            have_name = 1;
        }
    }
    int n = have_rank + have_world + have_name;
    if (n == 0)
        return 0;
    if (n != 3) {
        tn_errf(err, errlen, "--rank, --world and --comm-name go together (missing %s)",
             !have_rank ? "--rank" : !have_world ? "--world" : "--comm-name");
        return TN_ERR_ARG;
    }
    if (L->rank >= L->world) {
        tn_errf(err, errlen, "--rank %d is not below --world %d", L->rank, L->world);
        return TN_ERR_ARG;
    }
    return 1;
}
