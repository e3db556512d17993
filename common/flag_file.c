/* Flag-file parser (see flag_file.h). */
#include "common/flag_file.h"
#include "common/status.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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
        return TN_ERR_ARG;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot open config %s: %s", path, strerror(errno));
        return TN_ERR_SYS;
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

static int field_error(char *err, size_t errlen, const char *fmt, const char *name,
                       const char *value)
{
    if (err && errlen)
        snprintf(err, errlen, fmt, name, value);
    return TN_ERR_ARG;
}

int flag_field_set(void *base, const flag_field *fields, size_t n, const char *name,
                   const char *value, char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(fields[i].name, name) != 0)
            continue;
        if (!value || !*value)
            return field_error(err, errlen, "--%s needs a value%s", name, "");
        char *end = NULL;
        errno = 0;
        if (fields[i].kind == FLAG_FIELD_DOUBLE) {
            double v = strtod(value, &end);
            if (errno || *end || !isfinite(v))
                return field_error(err, errlen, "--%s: '%s' is not a number", name, value);
            memcpy((char *)base + fields[i].offset, &v, sizeof(v));
        } else {
            long v = strtol(value, &end, 10);
            if (errno || *end || v < INT_MIN || v > INT_MAX)
                return field_error(err, errlen, "--%s: '%s' is not an integer", name, value);
            int iv = (int)v;
            memcpy((char *)base + fields[i].offset, &iv, sizeof(iv));
        }
        return 0;
    }
    return 1;
}

void flag_field_print_help(FILE *out, const void *defaults, const flag_field *fields, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *at = (const char *)defaults + fields[i].offset;
        if (fields[i].kind == FLAG_FIELD_DOUBLE) {
            double v;
            memcpy(&v, at, sizeof(v));
            fprintf(out, "  --%s=N\n      %s (default %g)\n", fields[i].name, fields[i].help, v);
        } else {
            int v;
            memcpy(&v, at, sizeof(v));
            fprintf(out, "  --%s=N\n      %s (default %d)\n", fields[i].name, fields[i].help, v);
        }
    }
}
