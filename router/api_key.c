#include "router/api_key.h"
#include "common/status.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#define KEY_MAX 4096
#define KEY_MIN 32

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

int api_key_hash_file(const char *path, unsigned char hash[32], char *err, size_t errlen)
{
    if (sodium_init() < 0) {
        snprintf(err, errlen, "libsodium cannot initialise");
        return TN_ERR_ARG;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot read the API key file %s: %s", path, strerror(errno));
        return TN_ERR_SYS;
    }
    char *buf = sodium_malloc(KEY_MAX + 1);
    if (!buf) {
        fclose(f);
        snprintf(err, errlen, "out of memory");
        return TN_ERR_NOMEM;
    }
    size_t n = fread(buf, 1, KEY_MAX + 1, f);
    fclose(f);
    size_t start = 0;
    while (start < n && is_space(buf[start]))
        start++;
    while (n > start && is_space(buf[n - 1]))
        n--;
    int rc = -1;
    if (n > KEY_MAX)
        snprintf(err, errlen, "%s: an API key holds at most %d bytes", path, KEY_MAX);
    else if (n - start < KEY_MIN)
        snprintf(err, errlen, "%s: the API key must be at least %d bytes", path, KEY_MIN);
    else if (memchr(buf + start, '\n', n - start) || memchr(buf + start, ' ', n - start))
        snprintf(err, errlen, "%s: the API key must be one word on one line", path);
    else
        rc = crypto_generichash(hash, 32, (const unsigned char *)buf + start, n - start, NULL, 0);
    sodium_free(buf);
    return rc == 0 ? 0 : -1;
}

int api_key_check(const unsigned char hash[32], const char *authorization)
{
    if (!authorization || strncmp(authorization, "Bearer ", 7) != 0)
        return 0;
    const char *tok = authorization + 7;
    while (*tok == ' ')
        tok++;
    size_t n = strlen(tok);
    while (n > 0 && is_space(tok[n - 1]))
        n--;
    /* Hash, then compare the hashes in constant time: the comparison takes
     * the same time whatever the token, and its length leaks nothing. */
    unsigned char got[32];
    if (crypto_generichash(got, sizeof got, (const unsigned char *)tok, n, NULL, 0) != 0)
        return 0;
    return sodium_memcmp(got, hash, 32) == 0;
}
