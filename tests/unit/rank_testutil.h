/* Helpers for tests that run several ranks as real processes: fork the
 * ranks, let the parent wait for a rank to reach a point, kill ranks, and
 * collect every rank's exit status with a bound on the wait. A rank reports
 * its verdict through its exit status (cmocka asserts must not run in a
 * child: they would unwind into the child's copy of the test runner).
 * Names carry the rt_ prefix. */
#ifndef TANDEM_TESTS_RANK_TESTUTIL_H
#define TANDEM_TESTS_RANK_TESTUTIL_H
#include <stddef.h>
#include <sys/types.h>

#define RT_MAX_RANKS 16
#define RT_HUNG (-1)        /* status of a rank killed because it overran */

typedef struct rt_rank {
    int rank, world;
    char name[64];          /* the group's rendezvous name */
    int ready_fd;           /* write end of the parent's ready pipe */
} rt_rank;

typedef int (*rt_rank_fn)(const rt_rank *r, void *arg);

typedef struct rt_group {
    int world;
    char name[64];
    pid_t pid[RT_MAX_RANKS];
    int ready_fd;           /* read end */
    unsigned char seen[RT_MAX_RANKS];
} rt_group;

/* Forks `world` ranks; each runs fn and exits with its return value. The
 * group name is unique to this process and call ("<tag>-<pid>-<n>").
 * Returns 0, or -1 if a fork failed (nothing is left running then). */
int rt_start(rt_group *g, int world, const char *tag, rt_rank_fn fn, void *arg);
/* In a rank: tells the parent this rank reached its ready point. */
void rt_signal_ready(const rt_rank *r);
/* In the parent: waits until `rank` signalled ready (0) or timeout_ms
 * passed or it exited first (-1). */
int rt_wait_ready(rt_group *g, int rank, int timeout_ms);
void rt_kill(rt_group *g, int rank, int sig);
/* Waits up to timeout_ms for every rank; a rank still running then is
 * SIGKILLed and gets RT_HUNG. status[r]: exit status, or 128 + signal for a
 * killed rank. Returns the number of ranks whose status is not 0. */
int rt_wait(rt_group *g, int timeout_ms, int *status);

/* 1 when /dev/shm holds the host communicator segment of group `name`. */
int rt_shm_exists(const char *name);
/* Number of /dev/shm entries whose name starts with "tandem-comm-<tag>-<our pid>". */
int rt_shm_count_ours(const char *tag);

#endif
