/* A growable byte string: responses (JSON, SSE, Prometheus text), the
 * tokenizers' and the chat formats' text. The text is NUL-terminated so a
 * caller can use it as a C string.
 *
 * Error convention: every append returns TN_OK or TN_ERR_NOMEM and leaves
 * the text unchanged on failure. A failure also sets oom, after which later
 * appends fail at once, so a builder may either check each call or ignore
 * the results and check oom (or sb_take's NULL) once at the end. */
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
/* len = 0, keeps the memory (and the oom mark). */
void sb_reset(sbuf *b);
/* Room for len + extra bytes and the NUL. */
int sb_reserve(sbuf *b, size_t extra);
int sb_append(sbuf *b, const void *s, size_t n);
int sb_puts(sbuf *b, const char *s);
int sb_putc(sbuf *b, char c);
/* Also fails (TN_ERR_ARG, oom not set) when vsnprintf reports an error. */
int sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s[0..n) as a JSON string literal with quotes. s must be UTF-8;
 * control characters (NUL included) are escaped as \u00XX. */
int sb_json_str(sbuf *b, const char *s, size_t n);
/* Removes the first n bytes. */
void sb_consume(sbuf *b, size_t n);
/* Hands the text to the caller (who frees it); b is left empty. An empty
 * buffer yields "". NULL when out of memory (now or earlier: oom). */
char *sb_take(sbuf *b);

/* Length of the longest prefix of s that ends on a UTF-8 character
 * boundary, where an incomplete sequence at the end is held back (it may
 * complete with the next token). Invalid bytes do not hold anything back. */
size_t utf8_stable_prefix(const char *s, size_t n);
/* Appends s[0..n) to out with every maximal ill-formed subsequence replaced
 * by one U+FFFD (Python's errors="replace"), so the result is valid UTF-8. */
void utf8_sanitize_append(sbuf *out, const char *s, size_t n);

#endif
