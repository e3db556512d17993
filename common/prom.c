#include "common/prom.h"

#include <string.h>

static const char *const OUTCOME_NAMES[OUTCOME_COUNT] = {
    "ok", "client_error", "rejected", "cancelled", "timeout", "error"};

const char *prom_outcome_name(metrics_outcome o)
{
    return o >= 0 && o < OUTCOME_COUNT ? OUTCOME_NAMES[o] : "error";
}

void histogram_init(histogram *h, const double *bounds, int n_bounds)
{
    memset(h, 0, sizeof *h);
    h->bounds = bounds;
    h->n_bounds = n_bounds < PROM_MAX_BUCKETS ? n_bounds : PROM_MAX_BUCKETS;
}

void histogram_observe(histogram *h, double v)
{
    int i = 0;
    while (i < h->n_bounds && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

void prom_family(sbuf *b, const char *name, const char *type, const char *help)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void prom_label_value(sbuf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            sb_printf(b, "\\%c", *s);
        else if (*s == '\n')
            sb_puts(b, "\\n");
        else
            sb_append(b, s, 1);
    }
}

void prom_sample(sbuf *b, const char *name, const char *labels, double value)
{
    if (labels[0])
        sb_printf(b, "%s{%s} %.9g\n", name, labels, value);
    else
        sb_printf(b, "%s %.9g\n", name, value);
}

void prom_sample_u64(sbuf *b, const char *name, const char *labels, uint64_t value)
{
    if (labels[0])
        sb_printf(b, "%s{%s} %llu\n", name, labels, (unsigned long long)value);
    else
        sb_printf(b, "%s %llu\n", name, (unsigned long long)value);
}

void prom_histogram(sbuf *b, const char *name, const char *labels, const histogram *h)
{
    const char *sep = labels[0] ? "," : "";
    uint64_t cum = 0;
    for (int i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        sb_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, h->bounds[i],
                  (unsigned long long)cum);
    }
    cum += h->counts[h->n_bounds];
    sb_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep, (unsigned long long)cum);
    if (labels[0]) {
        sb_printf(b, "%s_sum{%s} %.9g\n%s_count{%s} %llu\n", name, labels, h->sum, name, labels,
                  (unsigned long long)cum);
    } else {
        sb_printf(b, "%s_sum %.9g\n%s_count %llu\n", name, h->sum, name, (unsigned long long)cum);
    }
}
