#include "tests/unit/rank_testutil.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long elapsed_ms(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec - t0->tv_nsec) / 1000000;
}

int rt_start(rt_group *g, int world, const char *tag, rt_rank_fn fn, void *arg)
{
    static const char *const no_tag = "t";
    memset(g, 0, sizeof(*g));
    if (world < 1 || world > RT_MAX_RANKS)
        return -1;
    g->world = world;
    /* unique per call without global state: pid plus a fresh clock reading */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    snprintf(g->name, sizeof(g->name), "%s-%ld-%lx", tag ? tag : no_tag, (long)getpid(),
             (unsigned long)(ts.tv_nsec ^ (ts.tv_sec << 20)));
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    g->ready_fd = fds[0];
    fflush(NULL);
    for (int r = 0; r < world; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            for (int q = 0; q < r; q++)
                kill(g->pid[q], SIGKILL);
            for (int q = 0; q < r; q++)
                waitpid(g->pid[q], NULL, 0);
            close(fds[0]);
            close(fds[1]);
            return -1;
        }
        if (pid == 0) {
            close(fds[0]);
            rt_rank me = {.rank = r, .world = world, .ready_fd = fds[1]};
            snprintf(me.name, sizeof(me.name), "%s", g->name);
            int rc = fn(&me, arg);
            close(fds[1]);
            fflush(NULL);
            exit(rc & 0xff);
        }
        g->pid[r] = pid;
    }
    close(fds[1]);
    return 0;
}

void rt_signal_ready(const rt_rank *r)
{
    unsigned char b = (unsigned char)r->rank;
    while (write(r->ready_fd, &b, 1) < 0 && errno == EINTR) {
    }
}

int rt_wait_ready(rt_group *g, int rank, int timeout_ms)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (!g->seen[rank]) {
        long left = timeout_ms - elapsed_ms(&t0);
        if (left <= 0)
            return -1;
        struct pollfd p = {.fd = g->ready_fd, .events = POLLIN};
        int n = poll(&p, 1, (int)left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        unsigned char b;
        ssize_t got = read(g->ready_fd, &b, 1);
        if (got == 0)
            return -1;   /* every rank closed the pipe: none will signal */
        if (got == 1 && b < RT_MAX_RANKS)
            g->seen[b] = 1;
    }
    return 0;
}

void rt_kill(rt_group *g, int rank, int sig)
{
    if (g->pid[rank] > 0)
        kill(g->pid[rank], sig);
}

int rt_wait(rt_group *g, int timeout_ms, int *status)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int left = g->world, bad = 0;
    for (int r = 0; r < g->world; r++)
        status[r] = 0;
    while (left > 0) {
        for (int r = 0; r < g->world; r++) {
            if (g->pid[r] <= 0)
                continue;
            int st;
            pid_t got = waitpid(g->pid[r], &st, WNOHANG);
            if (got == 0 || (got < 0 && errno == EINTR))
                continue;
            status[r] = got < 0 ? RT_HUNG
                        : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            g->pid[r] = 0;
            left--;
        }
        if (left > 0 && elapsed_ms(&t0) > timeout_ms) {
            for (int r = 0; r < g->world; r++) {
                if (g->pid[r] > 0) {
                    kill(g->pid[r], SIGKILL);
                    waitpid(g->pid[r], NULL, 0);
                    g->pid[r] = 0;
                    status[r] = RT_HUNG;
                    left--;
                }
            }
        }
        if (left > 0) {
            struct timespec nap = {0, 2 * 1000000L};
            nanosleep(&nap, NULL);
        }
    }
    close(g->ready_fd);
    g->ready_fd = -1;
    for (int r = 0; r < g->world; r++)
        bad += status[r] != 0;
    return bad;
}

int rt_shm_exists(const char *name)
{
    char path[160];
    snprintf(path, sizeof(path), "/dev/shm/tandem-comm-%s", name);
    struct stat st;
    return stat(path, &st) == 0;
}

int rt_shm_count_ours(const char *tag)
{
    char prefix[96];
    snprintf(prefix, sizeof(prefix), "tandem-comm-%s-%ld-", tag, (long)getpid());
    DIR *d = opendir("/dev/shm");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}
