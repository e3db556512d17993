#include "common/tok_ids.h"
#include <stdlib.h>
#include <string.h>
#include "common/status.h"

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
