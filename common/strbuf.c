#include "common/strbuf.h"
#include <stdlib.h>
#include <string.h>
#include "common/status.h"

void strbuf_init(strbuf *b)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void strbuf_free(strbuf *b)
{
    free(b->data);
    strbuf_init(b);
}

void strbuf_clear(strbuf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

int strbuf_reserve(strbuf *b, size_t extra)
{
    if (extra > SIZE_MAX - b->len - 1)
        return TN_ERR_NOMEM;
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return TN_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = realloc(b->data, cap);
    if (!p)
        return TN_ERR_NOMEM;
    b->data = p;
    b->cap = cap;
    return TN_OK;
}

int strbuf_append(strbuf *b, const void *p, size_t n)
{
    if (strbuf_reserve(b, n) != TN_OK)
        return TN_ERR_NOMEM;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return TN_OK;
}

int strbuf_append_str(strbuf *b, const char *s)
{
    return strbuf_append(b, s, strlen(s));
}

int strbuf_append_char(strbuf *b, char c)
{
    return strbuf_append(b, &c, 1);
}

char *strbuf_take(strbuf *b)
{
    if (!b->data && strbuf_reserve(b, 0) != TN_OK)
        return NULL;
    b->data[b->len] = '\0';
    char *p = b->data;
    strbuf_init(b);
    return p;
}

void tok_ids_init(tok_ids *v)
{
    v->ids = NULL;
    v->len = 0;
    v->cap = 0;
}

void tok_ids_free(tok_ids *v)
{
    free(v->ids);
    tok_ids_init(v);
}

static int tok_ids_reserve(tok_ids *v, size_t extra)
{
    if (extra > SIZE_MAX / sizeof(int32_t) - v->len)
        return TN_ERR_NOMEM;
    size_t need = v->len + extra;
    if (need <= v->cap)
        return TN_OK;
    size_t cap = v->cap ? v->cap : 32;
    while (cap < need)
        cap *= 2;
    int32_t *p = realloc(v->ids, cap * sizeof(int32_t));
    if (!p)
        return TN_ERR_NOMEM;
    v->ids = p;
    v->cap = cap;
    return TN_OK;
}

int tok_ids_push(tok_ids *v, int32_t id)
{
    if (tok_ids_reserve(v, 1) != TN_OK)
        return TN_ERR_NOMEM;
    v->ids[v->len++] = id;
    return TN_OK;
}

int tok_ids_append(tok_ids *v, const int32_t *ids, size_t n)
{
    if (tok_ids_reserve(v, n) != TN_OK)
        return TN_ERR_NOMEM;
    if (n)
        memcpy(v->ids + v->len, ids, n * sizeof(int32_t));
    v->len += n;
    return TN_OK;
}
