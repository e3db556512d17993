/* Qwen3 ChatML internals behind chat/chat.h. */
#ifndef TANDEM_CHAT_CHAT_QWEN3_H
#define TANDEM_CHAT_CHAT_QWEN3_H
#include "chat/chat.h"

int qwen3_render(const bpe_tokenizer *t, const chat_conversation *c, const chat_render_opts *o,
                 tok_ids *ids, sbuf *text, char *err, size_t errlen);

#endif
