/* Flag-file parser (see flag_file.h). */
#include "router/flag_file.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = '\0';
    return s;
}

int flag_file_load(const char *path, flag_file_setter set, void *ctx, char *err, size_t errlen)
{
    if (!path || !set) {
        snprintf(err, errlen, "flag_file_load: NULL argument");
        return -1;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot open config %s: %s", path, strerror(errno));
        return -1;
    }
    char line[1024], msg[512];
    long lineno = 0;
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof(line), f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            snprintf(err, errlen, "%s:%ld: line longer than %zu bytes", path, lineno, sizeof(line) - 2);
            rc = -1;
            break;
        }
        char *s = trim(line);
        if (*s == '\0' || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            snprintf(err, errlen, "%s:%ld: expected 'name = value'", path, lineno);
            rc = -1;
            break;
        }
        *eq = '\0';
        char *name = trim(s), *value = trim(eq + 1);
        if (!*name) {
            snprintf(err, errlen, "%s:%ld: missing name before '='", path, lineno);
            rc = -1;
            break;
        }
        msg[0] = '\0';
        int r = set(ctx, name, value, msg, sizeof(msg));
        if (r == 1) {
            snprintf(err, errlen, "%s:%ld: unknown setting '%s'", path, lineno, name);
            rc = -1;
        } else if (r != 0) {
            snprintf(err, errlen, "%s:%ld: %s", path, lineno, msg[0] ? msg : "bad value");
            rc = -1;
        }
    }
    if (rc == 0 && ferror(f)) {
        snprintf(err, errlen, "%s: read error", path);
        rc = -1;
    }
    fclose(f);
    return rc;
}
