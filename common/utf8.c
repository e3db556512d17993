#include "common/utf8.h"
#include "common/status.h"

/* Valid second-byte range for each lead byte (Unicode Table 3-7). */
static int lead_info(unsigned char b, int *len, unsigned char *lo, unsigned char *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (b < 0x80) { *len = 1; return 1; }
    if (b >= 0xC2 && b <= 0xDF) { *len = 2; return 1; }
    if (b >= 0xE0 && b <= 0xEF) {
        *len = 3;
        if (b == 0xE0) *lo = 0xA0;
        if (b == 0xED) *hi = 0x9F;
        return 1;
    }
    if (b >= 0xF0 && b <= 0xF4) {
        *len = 4;
        if (b == 0xF0) *lo = 0x90;
        if (b == 0xF4) *hi = 0x8F;
        return 1;
    }
    return 0;
}

int utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    int len;
    unsigned char lo, hi;
    if (n == 0 || !lead_info(s[0], &len, &lo, &hi) || (size_t)len > n)
        return 0;
    if (len == 1) {
        *cp = s[0];
        return 1;
    }
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (int i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    uint32_t c = s[0] & (0xFF >> (len + 1));
    for (int i = 1; i < len; i++)
        c = (c << 6) | (s[i] & 0x3F);
    *cp = c;
    return len;
}

int utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF)
        return 0;
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp <= 0x10FFFF) {
        out[0] = (char)(0xF0 | (cp >> 18));
        out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[3] = (char)(0x80 | (cp & 0x3F));
        return 4;
    }
    return 0;
}

int utf8_valid(const char *s, size_t n, size_t *bad_at)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    uint32_t cp;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        int len = utf8_decode(u + i, n - i, &cp);
        if (len == 0) {
            if (bad_at)
                *bad_at = i;
            return 0;
        }
        i += (size_t)len;
    }
    return 1;
}

size_t utf8_maximal_subpart(const unsigned char *s, size_t n)
{
    int len;
    unsigned char lo, hi;
    if (n == 0 || !lead_info(s[0], &len, &lo, &hi) || len == 1)
        return 0;
    size_t k = 1;
    if (k < n && s[1] >= lo && s[1] <= hi) {
        k = 2;
        while (k < n && k < (size_t)len && (s[k] & 0xC0) == 0x80)
            k++;
    }
    return k;
}

int utf8_append_lossy(sbuf *out, const unsigned char *s, size_t n, int final,
                      size_t *pending)
{
    size_t i = 0, run = 0; /* s[run..i) is valid and not yet copied */
    uint32_t cp;
    if (pending)
        *pending = 0;
    else
        final = 1;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int len = utf8_decode(s + i, n - i, &cp);
        if (len > 0) {
            i += (size_t)len;
            continue;
        }
        if (sb_append(out, s + run, i - run) != TN_OK)
            return TN_ERR_NOMEM;
        size_t sub = utf8_maximal_subpart(s + i, n - i);
        int lead_len;
        unsigned char lo, hi;
        /* A valid but truncated sequence at the end waits for more bytes. */
        if (!final && sub > 0 && i + sub == n && lead_info(s[i], &lead_len, &lo, &hi) &&
            sub < (size_t)lead_len) {
            if (pending)
                *pending = sub;
            return TN_OK;
        }
        if (sb_append(out, UTF8_REPLACEMENT, 3) != TN_OK)
            return TN_ERR_NOMEM;
        i += sub ? sub : 1;
        run = i;
    }
    /* s is NULL when n is 0 (an empty sbuf's p) and NULL + 0 is
     * undefined behaviour in C, so an empty tail appends from a literal. */
    return sb_append(out, i > run ? s + run : (const unsigned char *)"", i - run);
}
