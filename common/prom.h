/* Prometheus text exposition (format 0.0.4) building blocks shared by the
 * router and the workers: histograms with fixed buckets, the request outcome
 * label, label-value escaping, and writers for one family's header and
 * samples. The names, labels and buckets themselves are docs/METRICS.md's. */
#ifndef TANDEM_COMMON_PROM_H
#define TANDEM_COMMON_PROM_H
#include <stdint.h>
#include "common/sbuf.h"

#define PROM_MAX_BUCKETS 12

/* docs/METRICS.md's `outcome` label values, in this order everywhere
 * (including the WorkerMetrics arrays on the wire). */
typedef enum {
    OUTCOME_OK = 0,
    OUTCOME_CLIENT_ERROR,  /* 4xx: bad request, prompt too long, unknown model */
    OUTCOME_REJECTED,      /* no capacity: 429 / 503 */
    OUTCOME_CANCELLED,     /* the client went away or cancelled */
    OUTCOME_TIMEOUT,
    OUTCOME_ERROR,         /* server-side failure */
    OUTCOME_COUNT,
} metrics_outcome;

const char *prom_outcome_name(metrics_outcome o);

typedef struct histogram {
    const double *bounds;  /* upper bounds, increasing; static storage */
    int n_bounds;          /* <= PROM_MAX_BUCKETS */
    uint64_t counts[PROM_MAX_BUCKETS + 1]; /* per bucket, not cumulative; last: +Inf */
    double sum;
    uint64_t count;
} histogram;

void histogram_init(histogram *h, const double *bounds, int n_bounds);
void histogram_observe(histogram *h, double v);

/* "# HELP name help\n# TYPE name type\n" */
void prom_family(sbuf *b, const char *name, const char *type, const char *help);
/* Appends s as a label value (backslash, quote and newline escaped). */
void prom_label_value(sbuf *b, const char *s);
/* name{labels} value. labels is "" or already formatted (a="b",c="d"). */
void prom_sample(sbuf *b, const char *name, const char *labels, double value);
void prom_sample_u64(sbuf *b, const char *name, const char *labels, uint64_t value);
/* name_bucket{labels,le=...} (cumulative), name_sum, name_count. */
void prom_histogram(sbuf *b, const char *name, const char *labels, const histogram *h);

#endif
