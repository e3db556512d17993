#include "programs/servebench_metrics.h"
#include <stdlib.h>
#include <string.h>

const char *const svb_timing_names[SVB_N_TIMINGS] = {
    "router_ttft", "prefill", "kv_transfer", "decode_step", "router_itl", "router_e2e",
    "stage_router", "stage_admission", "stage_prefill_queue", "stage_prefill",
    "stage_kv_transfer", "stage_first_decode",
};

/* The histogram family of each timing, and a label its samples must carry
 * (NULL: any). */
static const struct {
    const char *family, *label;
} FAMILIES[SVB_N_TIMINGS] = {
    {"tandem_time_to_first_token_seconds", NULL},
    {"tandem_prefill_duration_seconds", NULL},
    {"tandem_kv_transfer_duration_seconds", "direction=\"send\""},
    {"tandem_decode_step_duration_seconds", NULL},
    {"tandem_inter_token_latency_seconds", NULL},
    {"tandem_request_duration_seconds", NULL},
    {"tandem_request_stage_seconds", "stage=\"router\""},
    {"tandem_request_stage_seconds", "stage=\"admission\""},
    {"tandem_request_stage_seconds", "stage=\"prefill_queue\""},
    {"tandem_request_stage_seconds", "stage=\"prefill\""},
    {"tandem_request_stage_seconds", "stage=\"kv_transfer\""},
    {"tandem_request_stage_seconds", "stage=\"first_decode\""},
};

/* Does line start with family + suffix, then '{' or ' '? Returns where the
 * labels (or the value) start, else NULL. */
static const char *sample_of(const char *line, const char *family, const char *suffix)
{
    size_t f = strlen(family), s = strlen(suffix);
    if (strncmp(line, family, f) != 0 || strncmp(line + f, suffix, s) != 0)
        return NULL;
    const char *p = line + f + s;
    return *p == '{' || *p == ' ' ? p : NULL;
}

static void add_sample(const char *p, const char *line_end, const char *label, double *acc)
{
    const char *value = p;
    if (*p == '{') {
        const char *close = memchr(p, '}', (size_t)(line_end - p));
        if (!close)
            return;
        if (label) {
            size_t n = strlen(label);
            int found = 0;
            for (const char *q = p; q + n <= close; q++)
                if (memcmp(q, label, n) == 0) {
                    found = 1;
                    break;
                }
            if (!found)
                return;
        }
        value = close + 1;
    } else if (label) {
        return;
    }
    char *end;
    double v = strtod(value, &end);
    if (end != value)
        *acc += v;
}

void svb_prom_parse(const char *text, svb_prom *out)
{
    memset(out, 0, sizeof *out);
    for (const char *line = text; line && *line;) {
        const char *nl = strchr(line, '\n');
        const char *end = nl ? nl : line + strlen(line);
        if (*line != '#') {
            const char *p;
            if ((p = sample_of(line, "tandem_prefill_input_tokens_total", "")))
                add_sample(p, end, NULL, &out->prefill_tokens);
            else if ((p = sample_of(line, "tandem_decode_output_tokens_total", "")))
                add_sample(p, end, NULL, &out->decode_tokens);
            for (int t = 0; t < SVB_N_TIMINGS; t++) {
                const char *p;
                if ((p = sample_of(line, FAMILIES[t].family, "_sum")))
                    add_sample(p, end, FAMILIES[t].label, &out->sum[t]);
                else if ((p = sample_of(line, FAMILIES[t].family, "_count")))
                    add_sample(p, end, FAMILIES[t].label, &out->count[t]);
            }
        }
        line = nl ? nl + 1 : NULL;
    }
}

void svb_prom_means(const svb_prom *before, const svb_prom *after, double *mean_s, double *count)
{
    for (int t = 0; t < SVB_N_TIMINGS; t++) {
        double n = after->count[t] - before->count[t];
        count[t] = n;
        mean_s[t] = n > 0 ? (after->sum[t] - before->sum[t]) / n : 0;
    }
}
