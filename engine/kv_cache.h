/* The paged HND KV cache: for every layer a K pool and a V pool of
 * [n_pages][n_kv_heads][page_size] rows of the cache's dtype (f32, bf16,
 * or FP8 e4m3 codes with a scale per row: kn_kv_pools) on the backend (see kernels/attention.h for the layout and
 * why it is head-major). Pages are handed out to sequences from a free
 * list; one page id covers every layer. */
#ifndef TANDEM_ENGINE_KV_CACHE_H
#define TANDEM_ENGINE_KV_CACHE_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/attention.h"
#include "kernels/backend.h"
#include "kernels/dtype.h"

typedef struct tm_kv_cache {
    const kn_backend *be;
    kn_dtype dtype;      /* of the pools' elements: KN_F32, KN_BF16 or KN_FP8_E4M3 */
    int n_layers, n_kv_heads, head_dim, page_size, n_pages;
    void **k;            /* [n_layers] pools on the backend */
    void **v;
    int32_t *free_pages; /* host stack of free page ids */
    int n_free;
    uint8_t *page_used;  /* host [n_pages]: 1 while handed out (catches double release) */
} tm_kv_cache;

/* Allocates the pools of dtype (KN_F32, KN_BF16, or KN_FP8_E4M3 with
 * head_dim a multiple of 4; zeroed on the CPU backend). Returns TN_ERR_ARG
 * for a non-positive size or another dtype,
 * TN_ERR_NOMEM (with nothing left allocated) when memory runs out. */
int tm_kv_cache_init(tm_kv_cache *c, const kn_backend *be, kn_dtype dtype, int n_layers,
                     int n_kv_heads, int head_dim, int page_size, int n_pages);
/* Frees everything; safe on a zeroed or already-freed cache. */
void tm_kv_cache_free(tm_kv_cache *c);
/* Bytes of one page of one layer's K (or V) pool. */
size_t tm_kv_page_bytes(const tm_kv_cache *c);
/* Layer l's pools as the attention ops take them. */
kn_kv_pools tm_kv_layer_pools(const tm_kv_cache *c, int l);
/* Takes n pages; returns TN_ERR_NOMEM (taking none) if fewer are free. */
int tm_kv_alloc_pages(tm_kv_cache *c, int n, int32_t *pages);
/* Returns pages to the free list; ids out of range or not handed out are
 * ignored, so a double release cannot hand one page to two sequences. */
void tm_kv_release_pages(tm_kv_cache *c, const int32_t *pages, int n);
/* Copies page src's K and V rows, every layer, onto page dst (on the
 * backend): a copy-on-write of a page two sequences shared. */
int tm_kv_copy_page(const tm_kv_cache *c, int32_t dst, int32_t src);
/* Pages a sequence of n_tokens tokens needs. */
int tm_kv_pages_for(const tm_kv_cache *c, int n_tokens);

/* Pages holding prompt_len + max_tokens - 1 tokens: the most a request can
 * ever have cached (its last token is returned, never fed back). The
 * decoder's admission control and the router's placement accounting both
 * use it, so they agree on what a request needs; it reads no cache, so the
 * router calls it with a decoder's announced page size. 0 for non-positive
 * arguments. */
int tm_kv_pages_needed(int prompt_len, int max_tokens, int page_size);

#endif
