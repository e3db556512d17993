/* Harmony (GPT-OSS) internals behind chat/chat.h. */
#ifndef TANDEM_CHAT_CHAT_HARMONY_H
#define TANDEM_CHAT_CHAT_HARMONY_H
#include <cJSON.h>
#include "chat/chat.h"

/* Appends the TypeScript-like rendering of a JSON schema (the `_` argument
 * type of a function tool). Returns 0 or TN_ERR_NOMEM. */
int harmony_schema_to_typescript(const cJSON *schema, sbuf *out);

int harmony_render(const bpe_tokenizer *t, const chat_conversation *c, const chat_render_opts *o,
                   tok_ids *ids, sbuf *text, char *err, size_t errlen);

#endif
