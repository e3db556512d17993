/* tandem-servebench's workload: the list of requests one benchmark point
 * sends, made reproducibly from a seed. Each request has an input and an
 * output length (fixed, uniform in a range, or drawn from a file of
 * ShareGPT-like length pairs), an arrival time (a Poisson process at a
 * given rate, or none: every request is ready at once and the concurrency
 * limit paces them) and its JSON body for /v1/completions or
 * /v1/chat/completions, with a prompt of random token ids or random words. */
#ifndef TANDEM_PROGRAMS_SERVEBENCH_WORKLOAD_H
#define TANDEM_PROGRAMS_SERVEBENCH_WORKLOAD_H
#include <stddef.h>
#include <stdint.h>

typedef enum { SVB_API_COMPLETIONS, SVB_API_CHAT } svb_api;
typedef enum { SVB_PROMPT_IDS, SVB_PROMPT_TEXT } svb_prompt_kind;

/* A length range: lo == hi for a fixed length. */
typedef struct svb_range {
    int lo, hi;
} svb_range;

/* Length pairs from a file (svb_lengths_load). */
typedef struct svb_lengths {
    int *input, *output;
    int n;
} svb_lengths;

typedef struct svb_workload_cfg {
    const char *model;
    svb_api api;
    svb_prompt_kind prompt;
    svb_range input, output;     /* used when lengths is NULL */
    const svb_lengths *lengths;  /* pairs drawn uniformly with replacement */
    int vocab;                  /* token-id prompts: ids drawn below this */
    double rate;                /* requests/s of the Poisson arrivals; 0: all at once */
    int n;                      /* requests */
    uint64_t seed;
} svb_workload_cfg;

typedef struct svb_request {
    int input_len;     /* prompt tokens (ids) or words (text) asked for */
    int output_len;    /* max_tokens (ignore_eos is set, so also the output) */
    double arrival_s;  /* earliest send time from the point's start */
    char *body;        /* the JSON request body */
} svb_request;

/* Parses "N" or "LO-HI" (1 <= LO <= HI). Returns 0 or -1. */
int svb_range_parse(const char *s, svb_range *out);

/* Reads a file of length pairs: one "INPUT OUTPUT" per line (blank- or
 * comma-separated positive integers; '#' starts a comment). Returns TN_OK
 * or an error naming the file and line. */
int svb_lengths_load(const char *path, svb_lengths *out, char *err, size_t errlen);
void svb_lengths_free(svb_lengths *l);

/* Makes cfg->n requests into *out (caller frees with svb_workload_free). */
int svb_workload_make(const svb_workload_cfg *cfg, svb_request **out, char *err, size_t errlen);
void svb_workload_free(svb_request *r, int n);

#endif
