#include "engine/kv_cache.h"
#include <stdlib.h>
#include <string.h>
#include "common/status.h"

size_t tm_kv_page_bytes(const tm_kv_cache *c)
{
    return (size_t)c->n_kv_heads * (size_t)c->page_size * kn_kv_row_bytes(c->dtype, c->head_dim);
}

kn_kv_pools tm_kv_layer_pools(const tm_kv_cache *c, int l)
{
    kn_kv_pools p = {c->k[l], c->v[l], c->dtype};
    return p;
}

int tm_kv_layer_windowed(const tm_kv_cache *c, int l)
{
    return c->layer_win && l >= 0 && l < c->n_layers && c->layer_win[l];
}

size_t tm_kv_cache_bytes(const tm_kv_cache *c)
{
    size_t total = 0;
    for (int l = 0; l < c->n_layers; l++)
        total += 2 * tm_kv_page_bytes(c) *
                 (size_t)(tm_kv_layer_windowed(c, l) ? c->n_win_slots : c->n_pages);
    return total;
}

void tm_kv_cache_free(tm_kv_cache *c)
{
    if (!c)
        return;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->k && c->k[l])
            kn_free(c->be, c->k[l]);
        if (c->v && c->v[l])
            kn_free(c->be, c->v[l]);
    }
    free(c->k);
    free(c->v);
    free(c->free_pages);
    free(c->page_used);
    free(c->layer_win);
    free(c->win_slot);
    free(c->win_free);
    memset(c, 0, sizeof(*c));
}

int tm_kv_cache_init(tm_kv_cache *c, const kn_backend *be, kn_dtype dtype, int n_layers,
                     int n_kv_heads, int head_dim, int page_size, int n_pages)
{
    return tm_kv_cache_init_windowed(c, be, dtype, n_layers, n_kv_heads, head_dim, page_size,
                                     n_pages, NULL, 0);
}

int tm_kv_cache_init_windowed(tm_kv_cache *c, const kn_backend *be, kn_dtype dtype, int n_layers,
                              int n_kv_heads, int head_dim, int page_size, int n_pages,
                              const int *layer_window, int n_win_slots)
{
    memset(c, 0, sizeof(*c));
    if (n_win_slots < 0)
        return TN_ERR_ARG;
    int window = 0;
    for (int l = 0; layer_window && n_win_slots > 0 && l < n_layers; l++)
        if (layer_window[l] > window)
            window = layer_window[l];
    if (!be || n_layers <= 0 || n_kv_heads <= 0 || head_dim <= 0 || page_size <= 0 ||
        n_pages <= 0 || (dtype != KN_F32 && dtype != KN_BF16 && dtype != KN_FP8_E4M3) ||
        (dtype == KN_FP8_E4M3 && head_dim % 4 != 0))
        return TN_ERR_ARG;
    c->be = be;
    c->dtype = dtype;
    c->n_layers = n_layers;
    c->n_kv_heads = n_kv_heads;
    c->head_dim = head_dim;
    c->page_size = page_size;
    c->n_pages = n_pages;
    size_t page = tm_kv_page_bytes(c);
    if (page / kn_kv_row_bytes(dtype, head_dim) / (size_t)page_size != (size_t)n_kv_heads ||
        (size_t)n_pages > SIZE_MAX / page || (size_t)n_win_slots > SIZE_MAX / page) {
        memset(c, 0, sizeof(*c));
        return TN_ERR_ARG;
    }
    c->k = calloc((size_t)n_layers, sizeof(*c->k));
    c->v = calloc((size_t)n_layers, sizeof(*c->v));
    c->free_pages = malloc(sizeof(*c->free_pages) * (size_t)n_pages);
    c->page_used = calloc((size_t)n_pages, 1);
    if (!c->k || !c->v || !c->free_pages || !c->page_used)
        goto oom;
    if (window > 0) {
        c->window = window;
        c->n_win_slots = n_win_slots;
        c->layer_win = calloc((size_t)n_layers, 1);
        c->win_slot = malloc(sizeof(*c->win_slot) * (size_t)n_pages);
        c->win_free = malloc(sizeof(*c->win_free) * (size_t)n_win_slots);
        if (!c->layer_win || !c->win_slot || !c->win_free)
            goto oom;
        for (int l = 0; l < n_layers; l++)
            c->layer_win[l] = layer_window[l] > 0;
        for (int i = 0; i < n_pages; i++)
            c->win_slot[i] = -1;
        for (int i = 0; i < n_win_slots; i++)
            c->win_free[i] = n_win_slots - 1 - i;
        c->n_win_free = n_win_slots;
    }
    for (int l = 0; l < n_layers; l++) {
        const size_t pool = page * (size_t)(tm_kv_layer_windowed(c, l) ? n_win_slots : n_pages);
        c->k[l] = kn_malloc(be, pool);
        c->v[l] = kn_malloc(be, pool);
        if (!c->k[l] || !c->v[l])
            goto oom;
        /* Never-written slots are never read, but zeroing keeps a bug that
         * does read them deterministic (and memory checkers quiet). */
        if (be->kind == KN_BACKEND_CPU) {
            memset(c->k[l], 0, pool);
            memset(c->v[l], 0, pool);
        }
    }
    /* Stack order hands out page 0 first. */
    for (int i = 0; i < n_pages; i++)
        c->free_pages[i] = n_pages - 1 - i;
    c->n_free = n_pages;
    return TN_OK;
oom:
    tm_kv_cache_free(c);
    return TN_ERR_NOMEM;
}

int tm_kv_alloc_pages(tm_kv_cache *c, int n, int32_t *pages)
{
    if (!c || n < 0 || (n > 0 && !pages))
        return TN_ERR_ARG;
    if (n > c->n_free || (c->window > 0 && n > c->n_win_free))
        return TN_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        int32_t p = c->free_pages[--c->n_free];
        c->page_used[p] = 1;
        if (c->window > 0)
            c->win_slot[p] = c->win_free[--c->n_win_free];
        pages[i] = p;
    }
    return TN_OK;
}

/* Gives back page p's window slot, if it holds one. */
static int release_slot(tm_kv_cache *c, int32_t p)
{
    if (c->window <= 0 || c->win_slot[p] < 0)
        return 0;
    c->win_free[c->n_win_free++] = c->win_slot[p];
    c->win_slot[p] = -1;
    return 1;
}

int tm_kv_window_pages_for(const tm_kv_cache *c, int n_tokens)
{
    if (n_tokens <= 0)
        return 0;
    const int last = (n_tokens - 1) / c->page_size;
    if (c->window <= 0)
        return last + 1;
    const int first = n_tokens - c->window > 0 ? (n_tokens - c->window) / c->page_size : 0;
    return last - first + 1;
}

void tm_kv_window_table(const tm_kv_cache *c, const int32_t *pt, int32_t *win_pt, size_t n)
{
    for (size_t i = 0; i < n; i++)
        win_pt[i] = c->window > 0 && pt[i] >= 0 && pt[i] < c->n_pages ? c->win_slot[pt[i]] : -1;
}

int tm_kv_window_trim(tm_kv_cache *c, const int32_t *pages, int n_pages, int n_tokens)
{
    if (!c || !pages || c->window <= 0 || n_tokens - c->window <= 0)
        return 0;
    /* pages wholly before position n_tokens - window */
    int dead = (n_tokens - c->window) / c->page_size, freed = 0;
    if (dead > n_pages)
        dead = n_pages;
    for (int i = 0; i < dead; i++)
        if (pages[i] >= 0 && pages[i] < c->n_pages && c->page_used[pages[i]])
            freed += release_slot(c, pages[i]);
    return freed;
}

void tm_kv_release_pages(tm_kv_cache *c, const int32_t *pages, int n)
{
    if (!c || !pages)
        return;
    for (int i = 0; i < n; i++) {
        int32_t p = pages[i];
        if (p < 0 || p >= c->n_pages || !c->page_used[p])
            continue;
        c->page_used[p] = 0;
        release_slot(c, p);
        c->free_pages[c->n_free++] = p;
    }
}

int tm_kv_copy_page(const tm_kv_cache *c, int32_t dst, int32_t src)
{
    if (!c || dst < 0 || src < 0 || dst >= c->n_pages || src >= c->n_pages)
        return TN_ERR_ARG;
    if (dst == src)
        return TN_OK;
    const int32_t wsrc = c->window > 0 ? c->win_slot[src] : -1;
    const int32_t wdst = c->window > 0 ? c->win_slot[dst] : -1;
    if (wsrc >= 0 && wdst < 0)
        return TN_ERR_ARG;
    size_t page = tm_kv_page_bytes(c);
    for (int l = 0; l < c->n_layers; l++) {
        int32_t d = dst, s = src;
        if (tm_kv_layer_windowed(c, l)) {
            if (wsrc < 0) /* out of the window: nothing to copy */
                continue;
            d = wdst, s = wsrc;
        }
        int rc = kn_copy_on_backend(c->be, (char *)c->k[l] + (size_t)d * page,
                                    (const char *)c->k[l] + (size_t)s * page, page);
        if (rc == TN_OK)
            rc = kn_copy_on_backend(c->be, (char *)c->v[l] + (size_t)d * page,
                                    (const char *)c->v[l] + (size_t)s * page, page);
        if (rc != TN_OK)
            return rc;
    }
    return TN_OK;
}

int tm_kv_pages_for(const tm_kv_cache *c, int n_tokens)
{
    return n_tokens <= 0 ? 0 : (n_tokens + c->page_size - 1) / c->page_size;
}

int tm_kv_pages_needed(int prompt_len, int max_tokens, int page_size)
{
    if (page_size <= 0 || prompt_len <= 0 || max_tokens <= 0)
        return 0;
    long tokens = (long)prompt_len + max_tokens - 1;
    return (int)((tokens + page_size - 1) / page_size);
}
