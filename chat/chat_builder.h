/* Internal to the chat renderers: the prompt text being rendered plus the
 * byte ranges that hold caller data (message text, names, arguments). The
 * whole text is encoded in one pass with special tokens recognised only
 * outside the guarded ranges, so template markup becomes special tokens
 * while data that merely looks like markup stays text. Errors are sticky:
 * check cb.rc once at the end. */
#ifndef TANDEM_CHAT_CHAT_BUILDER_H
#define TANDEM_CHAT_CHAT_BUILDER_H
#include <stddef.h>
#include "common/sbuf.h"
#include "common/tok_ids.h"
#include "tokenizer/tokenizer.h"

typedef struct chat_builder {
    sbuf text;
    size_t *guards; /* pairs [start, end) */
    size_t n_guards, cap_guards;
    int guard_data; /* 0: data is not guarded (HF-compatible Qwen3 mode) */
    int rc;
} chat_builder;

void cb_init(chat_builder *b, int guard_data);
void cb_free(chat_builder *b);
void cb_text(chat_builder *b, const char *s);                /* template markup */
void cb_textn(chat_builder *b, const char *s, size_t n);
void cb_data(chat_builder *b, const char *s);                /* caller data (NULL = "") */
void cb_datan(chat_builder *b, const char *s, size_t n);
/* Encodes the text into ids (and appends it to text_out when not NULL). */
int cb_finish(chat_builder *b, const bpe_tokenizer *t, tok_ids *ids, sbuf *text_out, char *err,
              size_t errlen);

#endif
