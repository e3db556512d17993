/* Growable byte buffer and token-id vector used by the tokenizers and the
 * chat formats. Both keep a terminating NUL / spare slot so callers can use
 * the text as a C string. Append functions return 0 or TN_ERR_NOMEM and
 * leave the buffer unchanged on failure. */
#ifndef TANDEM_COMMON_STRBUF_H
#define TANDEM_COMMON_STRBUF_H
#include <stddef.h>
#include <stdint.h>

typedef struct strbuf {
    char *data;   /* NUL-terminated when non-NULL */
    size_t len;
    size_t cap;
} strbuf;

void strbuf_init(strbuf *b);
void strbuf_free(strbuf *b);
void strbuf_clear(strbuf *b);                 /* len = 0, keeps memory */
int strbuf_reserve(strbuf *b, size_t extra);  /* room for len + extra + NUL */
int strbuf_append(strbuf *b, const void *p, size_t n);
int strbuf_append_str(strbuf *b, const char *s);
int strbuf_append_char(strbuf *b, char c);
/* Detaches the data (caller frees); the buffer becomes empty. Never NULL
 * on success: an empty buffer yields "". */
char *strbuf_take(strbuf *b);

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
