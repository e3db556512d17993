/* tandem-servebench's plot of a sweep, written as SVG text by hand: two
 * panels, latency (TTFT p50/p99, ITL p50/p99; log scale) against the load
 * (concurrency or request rate) and against the total token throughput
 * reached at that load. */
#ifndef TANDEM_PROGRAMS_SERVEBENCH_SVG_H
#define TANDEM_PROGRAMS_SERVEBENCH_SVG_H
#include <stddef.h>
#include "programs/servebench_report.h"

int svb_write_svg(const char *path, const svb_run_info *info, const svb_point *pts, int n,
                  char *err, size_t errlen);

#endif
