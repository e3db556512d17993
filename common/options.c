#include "common/options.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const opt_spec *find_spec(const opt_spec *specs, int n, const char *name,
                                 size_t name_len)
{
    for (int i = 0; i < n; i++)
        if (strlen(specs[i].name) == name_len &&
            strncmp(specs[i].name, name, name_len) == 0)
            return &specs[i];
    return NULL;
}

int opts_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

int opts_u64(const char *s, unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-')
        return -1;
    *out = v;
    return 0;
}

int opts_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

int opts_list_len(const char *s, size_t len)
{
    int n = 1;
    for (size_t i = 0; i < len; i++)
        n += s[i] == ',';
    return n;
}

int opts_int_list(const char *s, size_t len, int lo, int hi, int32_t *out, int cap, int *n)
{
    const char *p = s, *stop = s + len;
    int k = 0;
    for (;;) {
        char item[24];
        size_t il = 0;
        while (p + il < stop && p[il] != ',')
            il++;
        if (il == 0 || il >= sizeof item || *p < '0' || *p > '9' || k == cap)
            return -1;
        memcpy(item, p, il);
        item[il] = '\0';
        int v;
        if (opts_int(item, lo, hi, &v) != 0)
            return -1;
        out[k++] = v;
        p += il;
        if (p == stop)
            break;
        p++;   /* the comma; an item must follow */
        if (p == stop)
            return -1;
    }
    *n = k;
    return 0;
}

int opts_usage_error(const char *prog, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* the parser's own "(see --help)" would say it twice */
    static const char see[] = " (see --help)";
    size_t len = strlen(msg);
    if (len >= sizeof see - 1 && !strcmp(msg + len - (sizeof see - 1), see))
        msg[len - (sizeof see - 1)] = '\0';
    fprintf(stderr, "%s: %s\n(see %s --help)\n", prog, msg, prog);
    return 2;
}

static int parse_bool(const char *v, int *out)
{
    if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on")) {
        *out = 1;
        return 0;
    }
    if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off")) {
        *out = 0;
        return 0;
    }
    return -1;
}

/* Stores value into the spec's target; where says where it came from. */
static int set_value(const opt_spec *s, const char *value, const char *where,
                     char *err, size_t errlen)
{
    switch (s->type) {
    case OPT_STR:
        if (strlen(value) >= s->dst_size) {
            snprintf(err, errlen, "%s: value for '%s' is longer than %zu bytes",
                     where, s->name, s->dst_size - 1);
            return OPTS_ERROR;
        }
        memcpy(s->dst, value, strlen(value) + 1);
        return OPTS_OK;
    case OPT_INT:
        if (opts_int(value, INT_MIN, INT_MAX, (int *)s->dst) != 0) {
            snprintf(err, errlen, "%s: '%s' wants an integer, got '%s'", where,
                     s->name, value);
            return OPTS_ERROR;
        }
        return OPTS_OK;
    case OPT_DOUBLE:
        if (opts_double(value, (double *)s->dst) != 0) {
            snprintf(err, errlen, "%s: '%s' wants a number, got '%s'", where,
                     s->name, value);
            return OPTS_ERROR;
        }
        return OPTS_OK;
    case OPT_CALL: {
        const opt_call *call = s->dst;
        return call->set(call->ctx, s->name, value, err, errlen) == 0 ? OPTS_OK : OPTS_ERROR;
    }
    case OPT_BOOL:
        if (parse_bool(value, (int *)s->dst) != 0) {
            snprintf(err, errlen, "%s: '%s' wants true or false, got '%s'", where,
                     s->name, value);
            return OPTS_ERROR;
        }
        return OPTS_OK;
    }
    snprintf(err, errlen, "%s: option '%s' has an unknown type", where, s->name);
    return OPTS_ERROR;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

/* Hands name = value to the extra setter; where says where it came from. */
static int set_extra(opts_extra_setter extra, void *ctx, const char *name, const char *value,
                     const char *where, char *err, size_t errlen)
{
    char why[400] = "";
    int rc = extra ? extra(ctx, name, value, why, sizeof why) : 1;
    if (rc < 0)
        snprintf(err, errlen, "%s: %s", where, why);
    return rc;
}

static int load_config_file(const opt_spec *specs, int n, opts_extra_setter extra,
                            void *extra_ctx, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "config file %s: %s", path, strerror(errno));
        return OPTS_ERROR;
    }
    char line[4096];
    int lineno = 0, rc = OPTS_OK;
    while (rc == OPTS_OK && fgets(line, sizeof line, f)) {
        lineno++;
        char where[512];
        snprintf(where, sizeof where, "%s:%d", path, lineno);
        if (!strchr(line, '\n') && !feof(f)) {
            snprintf(err, errlen, "%s: line longer than %zu bytes", where, sizeof line - 2);
            rc = OPTS_ERROR;
            break;
        }
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *t = trim(line);
        if (!*t)
            continue;
        char *eq = strchr(t, '=');
        if (!eq) {
            snprintf(err, errlen, "%s: expected 'name = value'", where);
            rc = OPTS_ERROR;
            break;
        }
        *eq = '\0';
        char *key = trim(t), *val = trim(eq + 1);
        const opt_spec *s = find_spec(specs, n, key, strlen(key));
        if (!s && strcmp(key, "config")) {
            int x = set_extra(extra, extra_ctx, key, val, where, err, errlen);
            if (x == 0)
                continue;
            if (x < 0) {
                rc = OPTS_ERROR;
                break;
            }
        }
        if (!s || !strcmp(key, "config")) {
            snprintf(err, errlen, "%s: unknown setting '%s'", where, key);
            rc = OPTS_ERROR;
            break;
        }
        rc = set_value(s, val, where, err, errlen);
    }
    if (rc == OPTS_OK && ferror(f)) {
        snprintf(err, errlen, "config file %s: read error", path);
        rc = OPTS_ERROR;
    }
    fclose(f);
    return rc;
}

/* Splits argv[*i] into name and value; advances *i past a separate value. */
static int next_flag(int argc, char **argv, int *i, const char **name,
                     size_t *name_len, const char **value, char *err, size_t errlen)
{
    const char *a = argv[*i];
    if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
        snprintf(err, errlen, "unexpected argument '%s' (flags start with --; see --help)", a);
        return OPTS_ERROR;
    }
    *name = a + 2;
    const char *eq = strchr(*name, '=');
    *name_len = eq ? (size_t)(eq - *name) : strlen(*name);
    *value = eq ? eq + 1 : NULL;
    (void)argc;
    return OPTS_OK;
}

int opts_parse(const opt_spec *specs, int n_specs, int argc, char **argv,
               char *err, size_t errlen)
{
    return opts_parse_with(specs, n_specs, NULL, NULL, argc, argv, err, errlen);
}

int opts_parse_with(const opt_spec *specs, int n_specs, opts_extra_setter extra, void *extra_ctx,
                    int argc, char **argv, char *err, size_t errlen)
{
    const opts_cli cli = {specs, n_specs, extra, extra_ctx, NULL};
    return opts_parse_cli(&cli, argc, argv, err, errlen);
}

int opts_parse_cli(const opts_cli *cli, int argc, char **argv, char *err, size_t errlen)
{
    const opt_spec *specs = cli->specs;
    const int n_specs = cli->n_specs;
    const opts_extra_setter extra = cli->extra;
    void *extra_ctx = cli->extra_ctx;
    const char *word = cli->word ? cli->word : "flag";
    /* --help wins over everything, and the config file is applied before
     * the other flags so that flags override it. */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return OPTS_HELP;
    for (int i = 1; i < argc; i++) {
        const char *path = NULL;
        if (!strcmp(argv[i], "--config")) {
            if (i + 1 >= argc) {
                snprintf(err, errlen, "--config needs a file name");
                return OPTS_ERROR;
            }
            path = argv[i + 1];
        } else if (!strncmp(argv[i], "--config=", 9)) {
            path = argv[i] + 9;
        }
        if (path && load_config_file(specs, n_specs, extra, extra_ctx, path, err, errlen) != OPTS_OK)
            return OPTS_ERROR;
    }
    for (int i = 1; i < argc; i++) {
        const char *name, *value;
        size_t name_len;
        if (next_flag(argc, argv, &i, &name, &name_len, &value, err, errlen) != OPTS_OK)
            return OPTS_ERROR;
        if (name_len == 6 && !strncmp(name, "config", 6)) {
            if (!value)
                i++;
            continue;
        }
        const opt_spec *s = find_spec(specs, n_specs, name, name_len);
        if (!s && extra) {
            char key[128], where[160];
            if (name_len >= sizeof key) {
                snprintf(err, errlen, "unknown %s '--%.*s' (see --help)", word, (int)name_len,
                         name);
                return OPTS_ERROR;
            }
            memcpy(key, name, name_len);
            key[name_len] = '\0';
            if (!value) {
                if (i + 1 >= argc) {
                    /* Ask the setter whether the name exists before saying
                     * it lacks a value. */
                    char why[8];
                    if (extra(extra_ctx, key, NULL, why, sizeof why) == 1)
                        goto unknown;
                    snprintf(err, errlen, "--%s needs a value", key);
                    return OPTS_ERROR;
                }
                value = argv[i + 1];
                snprintf(where, sizeof where, "flag --%s", key);
                int x = set_extra(extra, extra_ctx, key, value, where, err, errlen);
                if (x == 1)
                    goto unknown;
                if (x < 0)
                    return OPTS_ERROR;
                i++;
                continue;
            }
            snprintf(where, sizeof where, "flag --%s", key);
            int x = set_extra(extra, extra_ctx, key, value, where, err, errlen);
            if (x == 0)
                continue;
            if (x < 0)
                return OPTS_ERROR;
        }
        if (!s) {
        unknown:
            snprintf(err, errlen, "unknown %s '--%.*s' (see --help)", word, (int)name_len, name);
            return OPTS_ERROR;
        }
        if (!value) {
            if (s->type == OPT_BOOL) {
                *(int *)s->dst = 1;
                continue;
            }
            if (i + 1 >= argc) {
                snprintf(err, errlen, "--%s needs a value", s->name);
                return OPTS_ERROR;
            }
            value = argv[++i];
        }
        char where[80];
        snprintf(where, sizeof where, "flag --%s", s->name);
        if (set_value(s, value, where, err, errlen) != OPTS_OK)
            return OPTS_ERROR;
    }
    return OPTS_OK;
}

void opts_print_help(FILE *out, const char *prog, const char *intro,
                     const opt_spec *specs, int n_specs)
{
    fprintf(out, "usage: %s [--config FILE] [flags]\n\n%s\n\nflags (also 'name = value' lines in the config file):\n",
            prog, intro);
    for (int i = 0; i < n_specs; i++) {
        const opt_spec *s = &specs[i];
        char def[300];
        switch (s->type) {
        case OPT_STR:
            snprintf(def, sizeof def, "\"%s\"", (const char *)s->dst);
            break;
        case OPT_INT:
            snprintf(def, sizeof def, "%d", *(const int *)s->dst);
            break;
        case OPT_DOUBLE:
            snprintf(def, sizeof def, "%g", *(const double *)s->dst);
            break;
        case OPT_BOOL:
            snprintf(def, sizeof def, "%s", *(const int *)s->dst ? "true" : "false");
            break;
        case OPT_CALL:
            fprintf(out, "  --%-22s %s\n", s->name, s->help);
            continue;
        }
        fprintf(out, "  --%-22s %s (default %s)\n", s->name, s->help, def);
    }
    fprintf(out, "  --%-22s read settings from FILE\n  --%-22s print this help\n",
            "config FILE", "help");
}
