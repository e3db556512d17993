#include "common/file.h"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "common/status.h"

int tn_read_file(const char *path, size_t max_bytes, char **out, size_t *len,
                 char *err, size_t errlen)
{
    *out = NULL;
    if (len)
        *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        tn_errf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return TN_ERR_ARG;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        tn_errf(err, errlen, "%s is not a regular file", path);
        fclose(f);
        return TN_ERR_ARG;
    }
    if ((unsigned long long)sb.st_size > max_bytes) {
        tn_errf(err, errlen, "%s is too large (%lld bytes, limit %zu)", path,
                (long long)sb.st_size, max_bytes);
        fclose(f);
        return TN_ERR_ARG;
    }
    size_t n = (size_t)sb.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        tn_errf(err, errlen, "%s: out of memory", path);
        fclose(f);
        return TN_ERR_NOMEM;
    }
    size_t got = fread(buf, 1, n, f);
    int rerr = ferror(f);
    fclose(f);
    if (got != n || rerr) {
        tn_errf(err, errlen, "cannot read %s", path);
        free(buf);
        return TN_ERR_ARG;
    }
    buf[n] = '\0';
    *out = buf;
    if (len)
        *len = n;
    return TN_OK;
}

char *tn_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    int slash = a > 0 && dir[a - 1] != '/';
    char *p = malloc(a + (size_t)slash + b + 1);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    if (slash)
        p[a] = '/';
    memcpy(p + a + (size_t)slash, name, b + 1);
    return p;
}
