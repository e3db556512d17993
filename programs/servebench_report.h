/* tandem-servebench's outputs: the JSON report (every point of a run with
 * its configuration), the table for people, and the per-request trace (one
 * JSON line per request: its timestamps and token counts, from which every
 * figure of the report can be recomputed). */
#ifndef TANDEM_PROGRAMS_SERVEBENCH_REPORT_H
#define TANDEM_PROGRAMS_SERVEBENCH_REPORT_H
#include <stdio.h>
#include "programs/servebench_metrics.h"
#include "programs/servebench_stats.h"

/* What the run was: echoed into the JSON report. */
typedef struct svb_run_info {
    const char *label, *url, *model, *api, *prompt, *input, *output, *lengths_file;
    const char *load_kind;  /* "concurrency" or "rate" */
    int concurrency;        /* the limit in rate mode (0: none) */
    unsigned long long seed;
    svb_slo slo;
    double send_for_s, point_limit_s;
} svb_run_info;

/* One point of a sweep (a single run is a sweep of one). */
typedef struct svb_point {
    double load;            /* concurrency, or requests/s */
    svb_summary s;
    int have_stages;        /* stage_* below come from the router's /metrics */
    double stage_mean_s[SVB_N_TIMINGS], stage_count[SVB_N_TIMINGS];
} svb_point;

int svb_write_json(const char *path, const svb_run_info *info, const svb_point *pts, int n,
                   char *err, size_t errlen);
void svb_print_table(FILE *f, const svb_run_info *info, const svb_point *pts, int n);
/* Appends one JSON line per record of point k to f. */
int svb_write_trace(FILE *f, int k, double load, const svb_record *recs, int n);

#endif
