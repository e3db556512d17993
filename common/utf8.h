/* Strict UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above
 * U+10FFFF) and the lossy decoding the tokenizers use when token bytes do
 * not form valid text. */
#ifndef TANDEM_COMMON_UTF8_H
#define TANDEM_COMMON_UTF8_H
#include <stddef.h>
#include <stdint.h>
#include "common/sbuf.h"

#define UTF8_REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD */

/* Decodes one code point at s[0..n). Returns its length (1..4) and sets *cp,
 * or 0 when the bytes there are not a complete valid sequence. */
int utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

/* Encodes cp (must be a scalar value) into out; returns 1..4, 0 if invalid. */
int utf8_encode(uint32_t cp, char out[4]);

/* Returns 1 when s[0..n) is valid UTF-8; otherwise 0 and *bad_at (if not
 * NULL) is the offset of the first byte that is not part of a valid
 * sequence. */
int utf8_valid(const char *s, size_t n, size_t *bad_at);

/* Length of the longest prefix of s[0..n) that can be the start of a valid
 * sequence (the "maximal subpart" of Unicode 3.9 / WHATWG): 1..3 for a
 * truncated or broken sequence, 0 when s[0] cannot start one. Only
 * meaningful where utf8_decode returned 0. */
size_t utf8_maximal_subpart(const unsigned char *s, size_t n);

/* Appends s[0..n) to out, replacing each maximal ill-formed subpart by
 * U+FFFD (the same output as WHATWG TextDecoder and Python's
 * errors="replace"). When final is 0, a truncated sequence at the very end
 * is not replaced: its length is returned in *pending (the caller keeps
 * those bytes for the next call). Returns 0 or TN_ERR_NOMEM. */
int utf8_append_lossy(sbuf *out, const unsigned char *s, size_t n, int final,
                      size_t *pending);

#endif
