/* Unicode character properties for the tokenizers' pre-tokenizer regexes
 * (\p{L}, \p{N}, \p{M}, \s) and for NFC normalization. Backed by tables
 * generated from the Unicode Character Database (tokenizer/unicode_data.h). */
#ifndef TANDEM_TOKENIZER_UNICODE_H
#define TANDEM_TOKENIZER_UNICODE_H
#include <stddef.h>
#include <stdint.h>
#include "tokenizer/unicode_data.h"
#include "common/sbuf.h"

/* General category of cp (UC_CN when unassigned or out of range). */
uc_gc uc_category(uint32_t cp);

static inline int uc_gc_is_letter(uc_gc g) { return g >= UC_LU && g <= UC_LO; }
static inline int uc_gc_is_mark(uc_gc g) { return g >= UC_MN && g <= UC_ME; }
static inline int uc_gc_is_number(uc_gc g) { return g >= UC_ND && g <= UC_NO; }

/* Unicode White_Space property, which is what \s means in the regex
 * engines the tokenizers were trained with (Rust regex / Oniguruma). */
int uc_is_white_space(uint32_t cp);

/* Canonical combining class (0 for starters). */
int uc_combining_class(uint32_t cp);

/* NFC quick check: 0 = Yes, 1 = No, 2 = Maybe. */
int uc_nfc_quick_check(uint32_t cp);

/* Writes the full canonical decomposition of cp into out (at most
 * UC_MAX_DECOMP code points, Hangul included) and returns its length; a
 * code point without decomposition yields itself (length 1). */
#define UC_MAX_DECOMP 8
int uc_decompose(uint32_t cp, uint32_t out[UC_MAX_DECOMP]);

/* Primary composite of the pair, or 0 when the pair does not compose. */
uint32_t uc_compose(uint32_t first, uint32_t second);

/* Appends the NFC form of the UTF-8 text s[0..n) to out. The text must be
 * valid UTF-8 (returns TN_ERR_ARG otherwise). Text that passes the NFC
 * quick check is copied unchanged. Returns 0 or a negative status. */
int uc_nfc_append(sbuf *out, const char *s, size_t n);

#endif
