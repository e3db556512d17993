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
#include <stdio.h>

typedef enum { OPT_STR, OPT_INT, OPT_DOUBLE, OPT_BOOL } opt_type;

typedef struct opt_spec {
    const char *name;   /* without the dashes */
    opt_type type;
    void *dst;          /* char[dst_size] / int / double / int (0 or 1) */
    size_t dst_size;    /* OPT_STR only: capacity including the NUL */
    const char *help;
} opt_spec;

enum { OPTS_OK = 0, OPTS_HELP = 1, OPTS_ERROR = -1 };

/* Parses argv (and the --config file it names) into the specs' targets,
 * which hold their defaults on entry. Returns OPTS_OK, OPTS_HELP (when
 * --help was given; nothing else is parsed) or OPTS_ERROR with a one-line
 * reason in err. Positional arguments are errors. */
int opts_parse(const opt_spec *specs, int n_specs, int argc, char **argv,
               char *err, size_t errlen);

/* Settings kept outside the table (the autoscale policy's flags): called
 * with a name the table does not know; returns 0 when it set it, 1 when it
 * does not know the name either, -1 for a bad value (reason in err). */
typedef int (*opts_extra_setter)(void *ctx, const char *name, const char *value, char *err,
                                 size_t errlen);

/* opts_parse, where names missing from specs (on the command line and in
 * the config file) go to extra before they are reported unknown. Extra
 * flags always take a value. */
int opts_parse_with(const opt_spec *specs, int n_specs, opts_extra_setter extra, void *extra_ctx,
                    int argc, char **argv, char *err, size_t errlen);

/* Prints "usage: PROG [flags]", the intro paragraph and every flag with its
 * help and its current (default) value. */
void opts_print_help(FILE *out, const char *prog, const char *intro,
                     const opt_spec *specs, int n_specs);

#endif
