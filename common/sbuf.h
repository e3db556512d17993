/* A growable byte string for building responses (JSON, SSE, Prometheus
 * text). An allocation failure sets oom and makes later appends no-ops, so
 * a builder checks once at the end. */
#ifndef TANDEM_COMMON_SBUF_H
#define TANDEM_COMMON_SBUF_H
#include <stddef.h>
#include <stdint.h>

typedef struct sbuf {
    char *p;      /* NUL-terminated when non-NULL */
    size_t len, cap;
    int oom;
} sbuf;

void sb_init(sbuf *b);
void sb_free(sbuf *b);
void sb_reset(sbuf *b);
void sb_append(sbuf *b, const char *s, size_t n);
void sb_puts(sbuf *b, const char *s);
void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s[0..n) as a JSON string literal with quotes. s must be UTF-8;
 * control characters (NUL included) are escaped as \u00XX. */
void sb_json_str(sbuf *b, const char *s, size_t n);
/* Removes the first n bytes. */
void sb_consume(sbuf *b, size_t n);
/* Hands the buffer to the caller (NULL if oom); b is left empty. */
char *sb_take(sbuf *b);

/* Length of the longest prefix of s that ends on a UTF-8 character
 * boundary, where an incomplete sequence at the end is held back (it may
 * complete with the next token). Invalid bytes do not hold anything back. */
size_t utf8_stable_prefix(const char *s, size_t n);
/* Appends s[0..n) to out with every maximal ill-formed subsequence replaced
 * by one U+FFFD (Python's errors="replace"), so the result is valid UTF-8. */
void utf8_sanitize_append(sbuf *out, const char *s, size_t n);

#endif
