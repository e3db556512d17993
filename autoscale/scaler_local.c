/* local scaler: runs prefiller and decoder processes on this machine from a
 * command template (what `make run` uses). Each worker gets its own process
 * group so a drain or kill reaches anything it started, and
 * PR_SET_PDEATHSIG so a crashed router does not leave workers behind.
 * Scale-down is a drain: SIGTERM (the worker stops taking requests and
 * finishes its running ones), then SIGKILL after drain_timeout_s. */
#include "autoscale/scaler.h"
#include "common/status.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_MAX_WORKERS 64

typedef enum { SLOT_FREE = 0, SLOT_RUNNING, SLOT_DRAINING } slot_state;

typedef struct {
    slot_state state;
    pid_t pid;
    double drain_deadline;
} worker_slot;

struct scaler_local {
    char **argv[AS_POOL_COUNT];  /* owned copies of the templates */
    int base_port[AS_POOL_COUNT];
    double drain_timeout_s;
    int max_workers;
    worker_slot *slots[AS_POOL_COUNT]; /* max_workers each, index = slot */
    int killed_after_timeout;
};

static double monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void scaler_local_free_argv(char **argv)
{
    if (!argv)
        return;
    for (char **a = argv; *a; a++)
        free(*a);
    free(argv);
}

static char **copy_argv(const char *const *argv)
{
    size_t n = 0;
    while (argv[n])
        n++;
    char **out = calloc(n + 1, sizeof(*out));
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        out[i] = strdup(argv[i]);
        if (!out[i]) {
            scaler_local_free_argv(out);
            return NULL;
        }
    }
    return out;
}

int scaler_local_split_command(const char *line, char ***argv_out, char *err, size_t errlen)
{
    if (!line || !argv_out)
        return tn_fail(err, errlen, TN_ERR_ARG, "scaler_local_split_command: NULL argument");
    *argv_out = NULL;
    size_t cap = 8, n = 0;
    char **argv = calloc(cap, sizeof(*argv));
    if (!argv)
        return tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory");
    const char *p = line;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n')
            p++;
        if (!*p)
            break;
        const char *start = p;
        while (*p && *p != ' ' && *p != '\t' && *p != '\n')
            p++;
        if (n + 2 > cap) {
            cap *= 2;
            char **na = realloc(argv, cap * sizeof(*na));
            if (!na) {
                scaler_local_free_argv(argv);
                return tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory");
            }
            argv = na;
        }
        argv[n] = strndup(start, (size_t)(p - start));
        if (!argv[n]) {
            scaler_local_free_argv(argv);
            return tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory");
        }
        argv[++n] = NULL;
    }
    if (n == 0) {
        free(argv);
        return tn_fail(err, errlen, TN_ERR_ARG, "worker command line is empty");
    }
    *argv_out = argv;
    return 0;
}

int scaler_local_create(const scaler_local_config *cfg, scaler_local **out, char *err, size_t errlen)
{
    if (!cfg || !out)
        return tn_fail(err, errlen, TN_ERR_ARG, "scaler_local_create: NULL argument");
    *out = NULL;
    if (!(cfg->drain_timeout_s >= 0.0))
        return tn_fail(err, errlen, TN_ERR_ARG, "local scaler: drain timeout must be >= 0 seconds");
    if (cfg->max_workers < 0 || cfg->max_workers > 4096)
        return tn_fail(err, errlen, TN_ERR_ARG, "local scaler: max workers must be in [0, 4096]");
    scaler_local *l = calloc(1, sizeof(*l));
    if (!l)
        return tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory");
    l->drain_timeout_s = cfg->drain_timeout_s;
    l->max_workers = cfg->max_workers ? cfg->max_workers : DEFAULT_MAX_WORKERS;
    for (int p = 0; p < AS_POOL_COUNT; p++) {
        l->base_port[p] = cfg->base_port[p];
        l->slots[p] = calloc((size_t)l->max_workers, sizeof(worker_slot));
        if (!l->slots[p])
            goto oom;
        if (!cfg->argv[p])
            continue;
        if (!cfg->argv[p][0]) {
            scaler_local_destroy(l);
            return tn_fail(err, errlen, TN_ERR_ARG, "local scaler: %s command is empty", as_pool_name((as_pool)p));
        }
        l->argv[p] = copy_argv(cfg->argv[p]);
        if (!l->argv[p])
            goto oom;
    }
    *out = l;
    return 0;
oom:
    scaler_local_destroy(l);
    return tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory");
}

/* Replaces every {pool}, {index} and {port} in tmpl. */
static char *expand(const char *tmpl, const char *pool, int index, int port)
{
    char num_index[16], num_port[16];
    snprintf(num_index, sizeof(num_index), "%d", index);
    snprintf(num_port, sizeof(num_port), "%d", port);
    size_t cap = strlen(tmpl) + 1, len = 0;
    /* Each placeholder grows by at most the longest value minus its length. */
    for (const char *p = tmpl; (p = strchr(p, '{')) != NULL; p++)
        cap += 16 + strlen(pool);
    char *out = malloc(cap);
    if (!out)
        return NULL;
    for (const char *p = tmpl; *p;) {
        const char *val = NULL;
        size_t skip = 0;
        if (strncmp(p, "{pool}", 6) == 0)
            val = pool, skip = 6;
        else if (strncmp(p, "{index}", 7) == 0)
            val = num_index, skip = 7;
        else if (strncmp(p, "{port}", 6) == 0)
            val = num_port, skip = 6;
        if (val) {
            size_t vl = strlen(val);
            memcpy(out + len, val, vl);
            len += vl;
            p += skip;
        } else {
            out[len++] = *p++;
        }
    }
    out[len] = '\0';
    return out;
}

/* fork + exec one worker; an exec failure comes back through a CLOEXEC pipe
 * so the caller gets "cannot exec X: reason" instead of a worker that dies. */
static int start_worker(scaler_local *l, as_pool pool, int index, char *err, size_t errlen)
{
    char **tmpl = l->argv[pool];
    size_t n = 0;
    while (tmpl[n])
        n++;
    char **argv = calloc(n + 1, sizeof(*argv));
    if (!argv)
        return tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        argv[i] = expand(tmpl[i], as_pool_name(pool), index, l->base_port[pool] + index);
        if (!argv[i]) {
            scaler_local_free_argv(argv);
            return tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory");
        }
    }
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0) {
        int e = errno;
        scaler_local_free_argv(argv);
        return tn_fail(err, errlen, TN_ERR_SYS, "local scaler: pipe: %s", strerror(e));
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(pfd[0]);
        close(pfd[1]);
        scaler_local_free_argv(argv);
        return tn_fail(err, errlen, TN_ERR_SYS, "local scaler: fork: %s", strerror(e));
    }
    if (pid == 0) {
        /* Child: only async-signal-safe calls until exec. */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) /* the router died before prctl */
            _exit(127);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        /* The router's sockets must not leak into workers. */
        close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
        execvp(argv[0], argv);
        int e = errno;
        ssize_t w = write(pfd[1], &e, sizeof(e));
        (void)w;
        _exit(127);
    }
    /* Both sides set the group: whichever runs first, signals to -pid work. */
    setpgid(pid, pid);
    close(pfd[1]);
    int child_errno = 0;
    ssize_t r;
    do
        r = read(pfd[0], &child_errno, sizeof(child_errno));
    while (r < 0 && errno == EINTR);
    close(pfd[0]);
    if (r > 0) {
        waitpid(pid, NULL, 0);
        tn_fail(err, errlen, TN_ERR_SYS, "local scaler: cannot start %s worker %d: %s: %s", as_pool_name(pool), index, argv[0],
             strerror(child_errno));
        scaler_local_free_argv(argv);
        return TN_ERR_SYS;
    }
    scaler_local_free_argv(argv);
    worker_slot *s = &l->slots[pool][index];
    s->state = SLOT_RUNNING;
    s->pid = pid;
    fprintf(stderr, "local scaler: started %s worker %d (pid %d)\n", as_pool_name(pool), index,
            (int)pid);
    s->drain_deadline = 0.0;
    return 0;
}

static void begin_drain(scaler_local *l, worker_slot *s, double now)
{
    /* The whole group: a worker that forked helpers drains them too. */
    if (kill(-s->pid, SIGTERM) != 0 && errno == ESRCH)
        kill(s->pid, SIGTERM);
    s->state = SLOT_DRAINING;
    s->drain_deadline = now + l->drain_timeout_s;
}

int scaler_local_get_replicas(const scaler_local *l, as_pool pool)
{
    if (!l || !as_pool_name(pool))
        return -1;
    int n = 0;
    for (int i = 0; i < l->max_workers; i++)
        n += l->slots[pool][i].state == SLOT_RUNNING;
    return n;
}

int scaler_local_draining(const scaler_local *l, as_pool pool)
{
    if (!l || !as_pool_name(pool))
        return -1;
    int n = 0;
    for (int i = 0; i < l->max_workers; i++)
        n += l->slots[pool][i].state == SLOT_DRAINING;
    return n;
}

size_t scaler_local_pids(const scaler_local *l, as_pool pool, int *pids, size_t max)
{
    size_t n = 0;
    if (!l || !as_pool_name(pool))
        return 0;
    for (int i = 0; i < l->max_workers && n < max; i++)
        if (l->slots[pool][i].state == SLOT_RUNNING)
            pids[n++] = (int)l->slots[pool][i].pid;
    return n;
}

int scaler_local_killed_after_timeout(const scaler_local *l)
{
    return l ? l->killed_after_timeout : 0;
}

/* Has the worker exited? Checked with WNOWAIT so that the exited leader
 * stays a zombie, keeping its PID (and so its process group id) reserved
 * until its group has been killed: a reused PID is never signalled. */
static int worker_exited(pid_t pid, int block, siginfo_t *info)
{
    int r;
    memset(info, 0, sizeof(*info));
    do
        r = waitid(P_PID, (id_t)pid, info, WEXITED | WNOWAIT | (block ? 0 : WNOHANG));
    while (r < 0 && errno == EINTR);
    if (r < 0)
        return errno == ECHILD ? -1 : 0; /* -1: not our child any more */
    return info->si_pid == pid;
}

int scaler_local_poll(scaler_local *l)
{
    if (!l)
        return 0;
    int reaped = 0;
    double now = monotonic_s();
    for (int p = 0; p < AS_POOL_COUNT; p++) {
        for (int i = 0; i < l->max_workers; i++) {
            worker_slot *s = &l->slots[p][i];
            if (s->state == SLOT_FREE)
                continue;
            siginfo_t info;
            int exited = worker_exited(s->pid, 0, &info);
            if (exited == 0 && s->state == SLOT_DRAINING && now >= s->drain_deadline) {
                fprintf(stderr, "local scaler: %s worker %d (pid %d) still running %.1f s after SIGTERM; killing it\n",
                        as_pool_name((as_pool)p), i, (int)s->pid, l->drain_timeout_s);
                kill(-s->pid, SIGKILL);
                kill(s->pid, SIGKILL);
                /* SIGKILL cannot be caught: this wait is short. */
                exited = worker_exited(s->pid, 1, &info);
                l->killed_after_timeout++;
            }
            if (exited == 0)
                continue;
            if (exited > 0) {
                if (s->state == SLOT_RUNNING)
                    fprintf(stderr, "local scaler: %s worker %d (pid %d) exited unexpectedly (%s %d)\n",
                            as_pool_name((as_pool)p), i, (int)s->pid,
                            info.si_code == CLD_EXITED ? "status" : "signal", info.si_status);
                else
                    fprintf(stderr, "local scaler: %s worker %d (pid %d) drained and exited (%s %d)\n",
                            as_pool_name((as_pool)p), i, (int)s->pid,
                            info.si_code == CLD_EXITED ? "status" : "signal", info.si_status);
                /* Anything the worker left in its group goes with it. */
                kill(-s->pid, SIGKILL);
                while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR)
                    ;
            }
            s->state = SLOT_FREE;
            s->pid = 0;
            reaped++;
        }
    }
    return reaped;
}

int scaler_local_set_replicas(scaler_local *l, as_pool pool, int n, char *err, size_t errlen)
{
    if (!l || !as_pool_name(pool) || n < 0)
        return tn_fail(err, errlen, TN_ERR_ARG, "scaler_local_set_replicas: bad argument");
    if (!l->argv[pool])
        return tn_fail(err, errlen, TN_ERR_ARG, "local scaler: no command configured for the %s pool", as_pool_name(pool));
    if (n > l->max_workers)
        return tn_fail(err, errlen, TN_ERR_ARG, "local scaler: %d %s workers is more than the limit %d", n, as_pool_name(pool),
                    l->max_workers);
    scaler_local_poll(l);
    int running = scaler_local_get_replicas(l, pool);
    worker_slot *slots = l->slots[pool];
    /* Start in the lowest free slots (a draining worker still holds its
     * slot, and so its port). */
    for (int i = 0; i < l->max_workers && running < n; i++) {
        if (slots[i].state != SLOT_FREE)
            continue;
        int rc = start_worker(l, pool, i, err, errlen);
        if (rc != 0)
            return rc;
        running++;
    }
    if (running < n)
        return tn_fail(err, errlen, TN_ERR_BUSY, "local scaler: no free %s slot (all %d are running or draining)", as_pool_name(pool),
                    l->max_workers);
    /* Drain the highest slots first, the mirror of the start order. */
    double now = monotonic_s();
    for (int i = l->max_workers - 1; i >= 0 && running > n; i--) {
        if (slots[i].state != SLOT_RUNNING)
            continue;
        begin_drain(l, &slots[i], now);
        running--;
    }
    return 0;
}

void scaler_local_wait_drained(scaler_local *l, double max_wait_s)
{
    if (!l)
        return;
    double end = monotonic_s() + max_wait_s;
    for (;;) {
        scaler_local_poll(l);
        int draining = 0;
        for (int p = 0; p < AS_POOL_COUNT; p++)
            draining += scaler_local_draining(l, (as_pool)p);
        if (draining == 0)
            return;
        if (monotonic_s() >= end) {
            /* Past the caller's bound: force the remaining drains now. */
            for (int p = 0; p < AS_POOL_COUNT; p++)
                for (int i = 0; i < l->max_workers; i++)
                    if (l->slots[p][i].state == SLOT_DRAINING)
                        l->slots[p][i].drain_deadline = 0.0;
            scaler_local_poll(l);
            return;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

void scaler_local_destroy(scaler_local *l)
{
    if (!l)
        return;
    double now = monotonic_s();
    for (int p = 0; p < AS_POOL_COUNT; p++)
        for (int i = 0; l->slots[p] && i < l->max_workers; i++)
            if (l->slots[p][i].state == SLOT_RUNNING)
                begin_drain(l, &l->slots[p][i], now);
    if (l->slots[0] && l->slots[1])
        scaler_local_wait_drained(l, l->drain_timeout_s);
    for (int p = 0; p < AS_POOL_COUNT; p++) {
        scaler_local_free_argv(l->argv[p]);
        free(l->slots[p]);
    }
    free(l);
}

static int local_set(void *impl, as_pool pool, int n, char *err, size_t errlen)
{
    return scaler_local_set_replicas(impl, pool, n, err, errlen);
}

static int local_get(void *impl, as_pool pool, int *n, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    *n = scaler_local_get_replicas(impl, pool);
    return 0;
}

static int local_poll(void *impl, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    scaler_local_poll(impl);
    return 0;
}

static void local_destroy(void *impl)
{
    scaler_local_destroy(impl);
}

SCALER_DEFINE_AS_SCALER(scaler_local_as_scaler, scaler_local, "local",
                        local_set, local_get, local_poll, local_destroy)
