/* Configuration files made of flags: one "name = value" per line, where name
 * is a long command-line flag without "--" (deploy/base/router.conf). Blank
 * lines and lines starting with '#' are skipped; blanks around the name and
 * the value are trimmed. One parser for every executable, so a config file
 * and the command line always accept the same names. */
#ifndef TANDEM_COMMON_FLAG_FILE_H
#define TANDEM_COMMON_FLAG_FILE_H

#include <stddef.h>
#include <stdio.h>

/* Sets one flag: returns 0 when set, 1 when the name is unknown, -1 for a
 * bad value (with a message in err). */
typedef int (*flag_file_setter)(void *ctx, const char *name, const char *value, char *err, size_t errlen);

/* Calls set for every line of path in order. An unknown name is an error
 * (a typo in a config file must not pass silently). Returns 0, or -1 with
 * "path:line: message" in err. */
int flag_file_load(const char *path, flag_file_setter set, void *ctx, char *err, size_t errlen);

/* Numeric settings described by a table of struct fields, so the command
 * line, config files and --help all come from one list. */
typedef enum { FLAG_FIELD_DOUBLE, FLAG_FIELD_INT } flag_field_kind;

typedef struct flag_field {
    const char *name;   /* without "--" */
    flag_field_kind kind;
    size_t offset;      /* of the double or int field in the settings struct */
    const char *help;
} flag_field;

/* Parses value into the named field of base. Returns 0 when set, 1 when no
 * field has that name, -1 for a missing, non-numeric, non-finite or
 * out-of-range value (with "--NAME: ..." in err). */
int flag_field_set(void *base, const flag_field *fields, size_t n, const char *name,
                   const char *value, char *err, size_t errlen);
/* One "--NAME=N / help (default D)" entry per field, D read from defaults. */
void flag_field_print_help(FILE *out, const void *defaults, const flag_field *fields, size_t n);

#endif
