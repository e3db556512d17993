/* Command-line flags and config files for every Tandem executable.
 *
 * A program describes its settings once, as a table of opt_spec; the same
 * names work as flags (`--name value`, `--name=value`, a bare `--name` for
 * booleans) and as `name = value` lines in a config file given with
 * `--config FILE` (`#` starts a comment). Flags override the config file
 * whatever their order. `--help` prints the table. Values are parsed
 * strictly: "12x" is not an int. */
#ifndef TANDEM_COMMON_OPTIONS_H
#define TANDEM_COMMON_OPTIONS_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The capacity of an OPT_STR that holds a file or directory path: Linux's
 * PATH_MAX, the longest path the kernel accepts, so any path a user can
 * open fits. A longer value is refused with the flag named, never cut. */
#define OPT_PATH_MAX 4096

typedef enum { OPT_STR, OPT_INT, OPT_DOUBLE, OPT_BOOL, OPT_CALL } opt_type;

typedef struct opt_spec {
    const char *name;   /* without the dashes */
    opt_type type;
    void *dst;          /* char[dst_size] / int / double / int (0 or 1) / opt_call */
    size_t dst_size;    /* OPT_STR only: capacity including the NUL */
    const char *help;
} opt_spec;

/* OPT_CALL: the value goes to set(ctx, name, value, err, errlen) (the
 * opts_extra_setter signature below), which checks and stores it and
 * returns 0, or -1 with a message that names the flag itself (it is
 * reported as it is). Every occurrence calls it, so a setter can collect a
 * repeated option (`--connect A --connect B`), parse a list or an enum, or
 * check a range in its program's own words. The flag always takes a value;
 * --help shows no default for it (say it in the help text). value lives
 * only for the call (it may be a config file's line): copy what is kept. */
typedef int (*opts_extra_setter)(void *ctx, const char *name, const char *value, char *err,
                                 size_t errlen);
typedef struct opt_call {
    opts_extra_setter set;
    void *ctx;
} opt_call;

enum { OPTS_OK = 0, OPTS_HELP = 1, OPTS_ERROR = -1 };

/* Parses argv (and the --config file it names) into the specs' targets,
 * which hold their defaults on entry. Returns OPTS_OK, OPTS_HELP (when
 * --help was given; nothing else is parsed) or OPTS_ERROR with a one-line
 * reason in err. Positional arguments are errors. */
int opts_parse(const opt_spec *specs, int n_specs, int argc, char **argv,
               char *err, size_t errlen);

/* opts_parse, where names missing from specs (on the command line and in
 * the config file) go to extra before they are reported unknown: settings
 * kept outside the table (the autoscale policy's flags). extra returns 0
 * when it set the name, 1 when it does not know it either, -1 for a bad
 * value (reason in err). Extra flags always take a value. */
int opts_parse_with(const opt_spec *specs, int n_specs, opts_extra_setter extra, void *extra_ctx,
                    int argc, char **argv, char *err, size_t errlen);

/* A whole command line: the table, the setter for names outside it (or
 * NULL), and the word for a flag in "unknown WORD '--x' (see --help)":
 * NULL says "flag", the programs in programs/ say "option" as their getopt
 * code did. */
typedef struct opts_cli {
    const opt_spec *specs;
    int n_specs;
    opts_extra_setter extra;
    void *extra_ctx;
    const char *word;
} opts_cli;

/* opts_parse_with for an opts_cli. */
int opts_parse_cli(const opts_cli *cli, int argc, char **argv, char *err, size_t errlen);

/* Strict value parsers for OPT_CALL setters (and the table's own types):
 * the whole string, base 10, no blanks. Return 0, or -1 leaving *out as it
 * was. opts_int: lo <= value <= hi. opts_u64: no sign. opts_double: finite. */
int opts_int(const char *s, int lo, int hi, int *out);
int opts_u64(const char *s, unsigned long long *out);
int opts_double(const char *s, double *out);

/* The first len bytes of s as comma-separated ints, each in lo..hi, into
 * out[cap]: "1,2,3" (no empty items, no blanks; a digit starts each item,
 * so no signs). Sets *n. Returns 0, or -1 for an empty or malformed list or
 * more than cap items. opts_list_len(s, len) is the cap that s needs. */
int opts_int_list(const char *s, size_t len, int lo, int hi, int32_t *out, int cap, int *n);
int opts_list_len(const char *s, size_t len);

/* For usage errors: prints "PROG: MESSAGE\n(see PROG --help)\n" to stderr
 * (a MESSAGE from the parser loses its own " (see --help)") and returns 2,
 * the exit status of a usage error. */
int opts_usage_error(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "usage: PROG [flags]", the intro paragraph and every flag with its
 * help and its current (default) value. */
void opts_print_help(FILE *out, const char *prog, const char *intro,
                     const opt_spec *specs, int n_specs);

#endif
