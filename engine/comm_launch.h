/* Starting the ranks of a multi-rank executable. Two ways, same program:
 *
 *   1. An orchestrator (Kubernetes, a script) starts every rank itself and
 *      tells each one where it stands:
 *          tandem-X --rank R --world W --comm-name NAME ...
 *      All W processes rendezvous on NAME (engine/comm.h).
 *   2. One process is started with a group size (e.g. `--tp 4`) and forks
 *      the other ranks: comm_launch_fork. The caller becomes rank 0 and
 *      supervises the children; the group name is generated.
 *
 * comm_launch_parse_args reads the flags of way 1 so every executable spells
 * them the same. */
#ifndef TANDEM_ENGINE_COMM_LAUNCH_H
#define TANDEM_ENGINE_COMM_LAUNCH_H
#include <stddef.h>
#include <sys/types.h>
#include "engine/comm.h"

typedef struct comm_launch {
    int rank, world;
    char name[COMM_NAME_MAX + 1];
    int n_children;                  /* rank 0 of a forked group only */
    pid_t children[COMM_MAX_WORLD];  /* children[r] is rank r's pid (r >= 1) */
} comm_launch;

/* Forks world - 1 children and names the group "<prefix>-<pid>-<nonce>"
 * (prefix at most 16 characters of [A-Za-z0-9._-]). Returns in every
 * process with L->rank set (0 in the caller). Call it before the process
 * starts threads (OpenMP, BLAS pools): a child keeps only the calling thread.
 * On failure nothing is left running and err says why. */
int comm_launch_fork(comm_launch *L, int world, const char *prefix,
                     char *err, size_t errlen);

/* Rank 0 of a forked group: waits for every child, up to timeout_ms (0 =
 * no limit), then SIGKILLs and reaps the rest. Returns 0 when every child
 * exited with status 0, else -1 with the first failure in err ("rank 2 was
 * killed by signal 9"). Other ranks: returns 0 at once (they just exit). */
int comm_launch_wait(comm_launch *L, int timeout_ms, char *err, size_t errlen);

/* Rank 0 of a forked group, on its own failure: SIGKILLs and reaps every
 * child. */
void comm_launch_kill(comm_launch *L);

/* Fills L from --rank R --world W --comm-name NAME anywhere in argv (each
 * flag takes the next argument). Returns 1 when all three were given and
 * valid, 0 when none was, -1 (reason in err) when some are missing or bad. */
int comm_launch_parse_args(comm_launch *L, int argc, char **argv, char *err,
                           size_t errlen);

#endif
