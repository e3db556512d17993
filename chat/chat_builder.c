#include "chat/chat_builder.h"
#include <stdlib.h>
#include <string.h>
#include "tokenizer/tokenizer_internal.h"
#include "common/status.h"

void cb_init(chat_builder *b, int guard_data)
{
    memset(b, 0, sizeof(*b));
    sb_init(&b->text);
    b->guard_data = guard_data;
}

void cb_free(chat_builder *b)
{
    sb_free(&b->text);
    free(b->guards);
    b->guards = NULL;
}

void cb_textn(chat_builder *b, const char *s, size_t n)
{
    if (b->rc == TN_OK)
        b->rc = sb_append(&b->text, s, n);
}

void cb_text(chat_builder *b, const char *s)
{
    cb_textn(b, s, strlen(s));
}

void cb_datan(chat_builder *b, const char *s, size_t n)
{
    size_t start = b->text.len;
    cb_textn(b, s, n);
    if (b->rc != TN_OK || !b->guard_data || n == 0)
        return;
    if (b->n_guards && b->guards[2 * b->n_guards - 1] == start) {
        b->guards[2 * b->n_guards - 1] = b->text.len; /* extends the previous range */
        return;
    }
    if (b->n_guards == b->cap_guards) {
        size_t cap = b->cap_guards ? b->cap_guards * 2 : 16;
        size_t *g = realloc(b->guards, 2 * cap * sizeof(*g));
        if (!g) {
            b->rc = TN_ERR_NOMEM;
            return;
        }
        b->guards = g;
        b->cap_guards = cap;
    }
    b->guards[2 * b->n_guards] = start;
    b->guards[2 * b->n_guards + 1] = b->text.len;
    b->n_guards++;
}

void cb_data(chat_builder *b, const char *s)
{
    cb_datan(b, s ? s : "", s ? strlen(s) : 0);
}

int cb_finish(chat_builder *b, const bpe_tokenizer *t, tok_ids *ids, sbuf *text_out, char *err,
              size_t errlen)
{
    if (b->rc != TN_OK) {
        tn_errf(err, errlen, "chat render: out of memory");
        return b->rc;
    }
    const char *s = b->text.p ? b->text.p : "";
    int rc = bpe_encode_guarded(t, s, b->text.len, b->guards, b->n_guards, ids, err, errlen);
    if (rc == TN_OK && text_out)
        rc = sb_append(text_out, s, b->text.len);
    return rc;
}
