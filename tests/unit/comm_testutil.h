/* What the communicator tests (test_comm_host.c, test_comm_staged.c) share:
 * the exit codes a rank reports its verdict with, deterministic test data,
 * the survivors' verdict on a collective that a dead or misbehaving rank
 * failed, and running a group of forked ranks (rank_testutil.h) to the exit
 * status expected of each, with no shared-memory segment left behind. */
#ifndef TANDEM_TESTS_COMM_TESTUTIL_H
#define TANDEM_TESTS_COMM_TESTUTIL_H
#include <stddef.h>
#include "engine/comm.h"
#include "tests/unit/rank_testutil.h"

#define CT_WAIT_MS 60000 /* bound on a whole case; reaching it is a failure */

/* Exit codes a rank reports. */
enum { PASS = 0, E_INIT = 10, E_CALL, E_VALUE, E_EXPECTED_FAIL, E_MESSAGE, E_SETUP };

/* Value i of rank r (mixed signs and magnitudes), the same in every process. */
float ct_datum(int r, size_t i);

/* A survivor's verdict: rc must be TN_ERR_PEER and comm_error(c) must
 * contain expect. Returns PASS, E_EXPECTED_FAIL or E_MESSAGE (and says why
 * on stderr). */
int ct_expect_peer_error(const rt_rank *r, comm *c, int rc, const char *expect);

/* Forks world ranks running fn (the group's name starts with tag), waits for
 * them (CT_WAIT_MS) and asserts each rank's exit status: want_status[r], or
 * PASS for every rank when want_status is NULL; then that neither the
 * group's segment nor any other of ours is left in /dev/shm. */
void ct_run_group(int world, const char *tag, rt_rank_fn fn, void *arg, const int *want_status);

#endif
