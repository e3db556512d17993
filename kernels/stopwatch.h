/* Where the time of a sequence of ops goes, without stopping the device
 * between them: the caller marks the boundaries of groups of ops as it
 * queues them, and collects the per-group totals afterwards.
 *
 * kn_stopwatch_lap(sw, g) ends the current stretch (all work queued since
 * the last lap, or since kn_stopwatch_start) and charges it to group g.
 * On CUDA a lap records an event on the backend's stream, so the stretch
 * is the device time between the two events (no sync; the ops stay
 * asynchronous; host work in between, such as a sync inside an op, counts
 * as part of the stretch it falls in). On the CPU it reads the monotonic
 * clock. */
#ifndef TANDEM_KERNELS_STOPWATCH_H
#define TANDEM_KERNELS_STOPWATCH_H
#include "kernels/backend.h"

typedef struct kn_stopwatch kn_stopwatch;

/* Room for max_laps laps between collects, charged to groups [0, n_groups).
 * Returns TN_OK, TN_ERR_ARG, TN_ERR_NOMEM or TN_ERR_DEVICE. */
int kn_stopwatch_create(const kn_backend *be, int n_groups, int max_laps, kn_stopwatch **out);
void kn_stopwatch_free(kn_stopwatch *sw);
/* Starts the first stretch (and drops laps not yet collected). */
int kn_stopwatch_start(kn_stopwatch *sw);
/* TN_ERR_ARG for a group out of range or more than max_laps laps. */
int kn_stopwatch_lap(kn_stopwatch *sw, int group);
/* Waits for the timed work, adds each lap's milliseconds into ms[group]
 * (the caller zeroes ms once; collects accumulate), and forgets the laps;
 * the next lap needs a new kn_stopwatch_start. */
int kn_stopwatch_collect(kn_stopwatch *sw, double *ms);

#endif
