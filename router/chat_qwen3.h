/* Qwen3 ChatML internals behind router/chat.h. */
#ifndef TANDEM_ROUTER_CHAT_QWEN3_H
#define TANDEM_ROUTER_CHAT_QWEN3_H
#include "router/chat.h"

int qwen3_render(const bpe_tokenizer *t, const chat_conversation *c, const chat_render_opts *o,
                 tok_ids *ids, strbuf *text, char *err, size_t errlen);

#endif
