/* Pre-tokenizers: split text into the pieces BPE runs on. Each one is a
 * hand-written matcher equivalent to the regex its tokenizer was trained
 * with (leftmost-first alternation, greedy quantifiers, backtracking where
 * the regex backtracks), over Unicode classes from tokenizer/unicode.h:
 *
 * PRETOK_QWEN2 (Qwen2/Qwen3 tokenizer.json "Split" regex):
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}
 *   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *
 * PRETOK_O200K (o200k_base / o200k_harmony, as in gpt-tokenizer's
 * O200K_TOKEN_SPLIT_PATTERN and tiktoken):
 *   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'s|'d|'m|'t|'ll|'ve|'re)?
 *   |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'s|...)?
 *   |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   (contractions case-insensitive, ASCII letters only)
 *
 * \s is the Unicode White_Space property. Both patterns match every code
 * point, so the pieces cover the text exactly. */
#ifndef TANDEM_TOKENIZER_PRETOKENIZE_H
#define TANDEM_TOKENIZER_PRETOKENIZE_H
#include <stddef.h>

typedef enum pretok_kind {
    PRETOK_QWEN2 = 1,
    PRETOK_O200K = 2,
} pretok_kind;

/* Called once per piece with byte offsets [start, end); a non-zero return
 * stops the split and is passed back to the caller. */
typedef int (*pretok_piece_fn)(void *ctx, size_t start, size_t end);

/* Splits text[0..n) (must be valid UTF-8: TN_ERR_ARG otherwise). Returns 0,
 * a negative status, or the first non-zero value returned by fn. */
int pretokenize(pretok_kind kind, const char *text, size_t n, pretok_piece_fn fn, void *ctx);

#endif
