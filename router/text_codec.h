/* How the router turns text into token ids and back (the --tokenizer flag).
 *
 *   none   token ids only: /v1/completions takes a prompt given as an array
 *          of token ids, responses carry "token_ids" and empty "text", chat
 *          completions and stop strings are refused (HTTP 400). For models
 *          without a real vocabulary, e.g. the tiny test fixtures.
 *   bytes  UTF-8 bytes are token ids 0..255 (id = byte value); ids >= 256
 *          decode to U+FFFD. Chat messages are rendered as ChatML text
 *          ("<|im_start|>role\ncontent<|im_end|>\n", then
 *          "<|im_start|>assistant\n") and byte-encoded. An honest demo mode
 *          for the tiny fixtures (vocab 512), whose outputs are random.
 *   PATH   a real vocabulary (tokenizer/tokenizer.h): a HuggingFace
 *          tokenizer.json (Qwen3) or an o200k_base.tiktoken file
 *          (GPT-OSS, o200k_harmony). Prompts are encoded with special-token
 *          strings treated as text; output special tokens are not text.
 *          Chats render in the vocabulary's chat format (chat/chat.h:
 *          Harmony for o200k_harmony, ChatML with <think> for Qwen3) and
 *          the output is parsed back into reasoning, content and tool
 *          calls.
 *
 * Byte-level decoding is per token, so streaming text is the concatenation
 * of each token's bytes; the HTTP layer holds back incomplete UTF-8. */
#ifndef TANDEM_ROUTER_TEXT_CODEC_H
#define TANDEM_ROUTER_TEXT_CODEC_H
#include <stddef.h>
#include <stdint.h>
#include "router/openai_api.h"
#include "common/sbuf.h"
#include "chat/chat.h"
#include "tokenizer/tokenizer.h"

typedef enum { CODEC_NONE = 0, CODEC_BYTES = 1, CODEC_BPE = 2 } codec_kind;

typedef struct text_codec {
    codec_kind kind;
    bpe_tokenizer *bpe;   /* CODEC_BPE: loaded vocabulary (immutable, shared by threads) */
    char name[64];
} text_codec;

/* Parses a --tokenizer value (none, bytes or a vocabulary path); -1 with a
 * reason for an unknown name or a vocabulary that does not load. */
int codec_init(text_codec *c, const char *name, char *err, size_t errlen);
void codec_free(text_codec *c);
const char *codec_name(const text_codec *c);
/* 1 if the codec maps text to ids (stop strings, text prompts, chat). */
int codec_has_text(const text_codec *c);

/* text -> ids (malloc'd). Returns 0 or -1 with a reason. */
int codec_encode(const text_codec *c, const char *text, size_t len, int32_t **ids,
                 int *n_ids, char *err, size_t errlen);
/* Renders a chat request (messages, tools, reasoning options) into prompt
 * ids, ending with the assistant's turn header. Returns 0 or -1 with a
 * reason (a 400 for the client). */
int codec_render_chat(const text_codec *c, const api_request *ar, int32_t **ids, int *n_ids,
                      char *err, size_t errlen);
/* 1 if chat output is parsed by a chat format (reasoning, tool calls). */
int codec_has_chat_format(const text_codec *c);
/* The chat format's stop token ids (Harmony <|return|> <|call|>, Qwen3
 * <|im_end|> <|endoftext|>); returns how many were written. */
int codec_chat_stop_ids(const text_codec *c, int32_t *ids, int cap);
/* A parser for one chat completion's output. */
int codec_chat_parser_new(const text_codec *c, chat_parser **out, char *err, size_t errlen);
/* Appends the bytes of one token to out. */
void codec_decode_token(const text_codec *c, int32_t id, sbuf *out);
/* The bytes a token stands for, special tokens included ("<|im_end|>"):
 * what logprobs listings show. -1 (nothing appended) without a
 * vocabulary (none). */
int codec_token_bytes(const text_codec *c, int32_t id, sbuf *out);

#endif
