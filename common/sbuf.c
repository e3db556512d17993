#include "common/sbuf.h"

#include "common/status.h"
#include "common/utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sb_init(sbuf *b)
{
    memset(b, 0, sizeof *b);
}

void sb_free(sbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

void sb_reset(sbuf *b)
{
    b->len = 0;
    if (b->p)
        b->p[0] = '\0';
}

int sb_reserve(sbuf *b, size_t extra)
{
    if (b->oom)
        return TN_ERR_NOMEM;
    if (extra > SIZE_MAX - b->len - 1) {
        b->oom = 1;
        return TN_ERR_NOMEM;
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return TN_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        return TN_ERR_NOMEM;
    }
    b->p = p;
    b->cap = cap;
    return TN_OK;
}

int sb_append(sbuf *b, const void *s, size_t n)
{
    if (sb_reserve(b, n) != TN_OK)
        return TN_ERR_NOMEM;
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return TN_OK;
}

int sb_puts(sbuf *b, const char *s)
{
    return sb_append(b, s, strlen(s));
}

int sb_putc(sbuf *b, char c)
{
    return sb_append(b, &c, 1);
}

int sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return TN_ERR_ARG; /* an encoding error; the text is unchanged */
    if (sb_reserve(b, (size_t)n) != TN_OK)
        return TN_ERR_NOMEM;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return TN_OK;
}

int sb_json_str(sbuf *b, const char *s, size_t n)
{
    sb_append(b, "\"", 1);
    size_t run = 0; /* bytes copied verbatim in one go */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                esc = u;
            }
        }
        if (esc) {
            sb_append(b, s + i - run, run);
            run = 0;
            sb_puts(b, esc);
        } else {
            run++;
        }
    }
    sb_append(b, s + n - run, run);
    return sb_append(b, "\"", 1);
}

void sb_consume(sbuf *b, size_t n)
{
    if (n >= b->len) {
        sb_reset(b);
        return;
    }
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
    b->p[b->len] = '\0';
}

char *sb_take(sbuf *b)
{
    char *p = NULL;
    if (sb_reserve(b, 0) == TN_OK) {
        b->p[b->len] = '\0'; /* a buffer that never held text has no NUL yet */
        p = b->p;
        b->p = NULL;
    }
    sb_free(b);
    return p;
}

/* Length of the valid UTF-8 sequence at s (1..4), 0 if invalid, or -1 if it
 * is a valid start cut off by the end of the buffer. */
static int utf8_seq(const unsigned char *s, size_t avail)
{
    unsigned c = s[0];
    int len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    unsigned cp = c & (0x3F >> (len - 1));
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= avail)
            return -1;
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
        /* Reject overlongs and surrogates as soon as the second byte shows them. */
        if (i == 1 && len == 3 && c == 0xE0 && s[1] < 0xA0)
            return 0;
        if (i == 1 && len == 3 && c == 0xED && s[1] > 0x9F)
            return 0;
        if (i == 1 && len == 4 && c == 0xF0 && s[1] < 0x90)
            return 0;
        if (i == 1 && len == 4 && c == 0xF4 && s[1] > 0x8F)
            return 0;
    }
    return cp >= min ? len : 0;
}

size_t utf8_stable_prefix(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        int l = utf8_seq(u + i, n - i);
        if (l < 0)
            return i;
        i += l ? (size_t)l : 1;
    }
    return n;
}

void utf8_sanitize_append(sbuf *out, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        int l = utf8_seq(u + i, n - i);
        if (l > 0) {
            i += (size_t)l;
            run += (size_t)l;
            continue;
        }
        sb_append(out, s + i - run, run);
        run = 0;
        sb_puts(out, "\xEF\xBF\xBD");
        /* One U+FFFD per maximal ill-formed subpart, as Python's
         * errors="replace" and WHATWG TextDecoder do. */
        size_t sub = utf8_maximal_subpart(u + i, n - i);
        i += sub ? sub : 1;
    }
    sb_append(out, s + n - run, run);
}
