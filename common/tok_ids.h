/* A growable vector of token ids, used by the tokenizers and the chat
 * formats. Appends return TN_OK or TN_ERR_NOMEM and leave the vector
 * unchanged on failure. */
#ifndef TANDEM_COMMON_TOK_IDS_H
#define TANDEM_COMMON_TOK_IDS_H
#include <stddef.h>
#include <stdint.h>

typedef struct tok_ids {
    int32_t *ids;
    size_t len;
    size_t cap;
} tok_ids;

void tok_ids_init(tok_ids *v);
void tok_ids_free(tok_ids *v);
int tok_ids_push(tok_ids *v, int32_t id);
int tok_ids_append(tok_ids *v, const int32_t *ids, size_t n);

#endif
