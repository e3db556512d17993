/* Configuration files made of flags: one "name = value" per line, where name
 * is a long command-line flag without "--" (deploy/base/router.conf). Blank
 * lines and lines starting with '#' are skipped; blanks around the name and
 * the value are trimmed. One parser for every executable, so a config file
 * and the command line always accept the same names. */
#ifndef TANDEM_ROUTER_FLAG_FILE_H
#define TANDEM_ROUTER_FLAG_FILE_H

#include <stddef.h>

/* Sets one flag: returns 0 when set, 1 when the name is unknown, -1 for a
 * bad value (with a message in err). */
typedef int (*flag_file_setter)(void *ctx, const char *name, const char *value, char *err, size_t errlen);

/* Calls set for every line of path in order. An unknown name is an error
 * (a typo in a config file must not pass silently). Returns 0, or -1 with
 * "path:line: message" in err. */
int flag_file_load(const char *path, flag_file_setter set, void *ctx, char *err, size_t errlen);

#endif
