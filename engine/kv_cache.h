/* The paged HND KV cache: for every layer a K pool and a V pool of
 * [n_pages][n_kv_heads][page_size] rows of the cache's dtype (f32, bf16,
 * or FP8 e4m3 codes with a scale per row: kn_kv_pools) on the backend (see kernels/attention.h for the layout and
 * why it is head-major). Pages are handed out to sequences from a free
 * list; one page id covers every layer.
 *
 * Window pool (tm_kv_cache_init_windowed). Sliding-window layers read only
 * their last `window` tokens, so they may keep only those: their pools then
 * hold n_win_slots pages instead of n_pages, and each page id, when handed
 * out, also takes a window slot (win_slot[page]) that backs the page in the
 * window layers. tm_kv_window_trim gives back the slots of a sequence's
 * pages that fell wholly out of the window; the page id itself stays the
 * sequence's (the full layers still hold its tokens) and the window layers'
 * page table maps it to -1 (a page no row reads: kernels/attention.h). So
 * a sequence of n tokens costs full_layers x n + window_layers x (window +
 * up to two pages) instead of all layers x n, and callers keep one page list
 * per sequence. */
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
    /* window pool (0 / NULL without one) */
    int window;          /* the largest layer window: what a slot must cover */
    int n_win_slots;     /* pages in each window layer's pools */
    uint8_t *layer_win;  /* host [n_layers]: 1 for a window layer (pools of n_win_slots) */
    int32_t *win_slot;   /* host [n_pages]: the page's slot in the window pools, or -1 */
    int32_t *win_free;   /* host stack of free slots */
    int n_win_free;
} tm_kv_cache;

/* Allocates the pools of dtype (KN_F32, KN_BF16, or KN_FP8_E4M3 with
 * head_dim a multiple of 4; zeroed on the CPU backend). Returns TN_ERR_ARG
 * for a non-positive size or another dtype,
 * TN_ERR_NOMEM (with nothing left allocated) when memory runs out. */
int tm_kv_cache_init(tm_kv_cache *c, const kn_backend *be, kn_dtype dtype, int n_layers,
                     int n_kv_heads, int head_dim, int page_size, int n_pages);
/* tm_kv_cache_init with a window pool: layers whose layer_window[l] > 0
 * get pools of n_win_slots pages (see the top of this file). n_win_slots 0
 * or no window layer: the same as tm_kv_cache_init. */
int tm_kv_cache_init_windowed(tm_kv_cache *c, const kn_backend *be, kn_dtype dtype, int n_layers,
                              int n_kv_heads, int head_dim, int page_size, int n_pages,
                              const int *layer_window, int n_win_slots);
/* Whether layer l's pools are window-pool pools (indexed by win_slot). */
int tm_kv_layer_windowed(const tm_kv_cache *c, int l);
/* Window slots a sequence of n_tokens tokens holds after
 * tm_kv_window_trim: the pages from the one holding position
 * n_tokens - window to the last. n_tokens pages' worth without a window
 * pool. */
int tm_kv_window_pages_for(const tm_kv_cache *c, int n_tokens);
/* The window layers' page table for a sequence's page list: win_pt[i] =
 * win_slot[pt[i]], -1 where the page holds no slot (or pt[i] is not a
 * page). */
void tm_kv_window_table(const tm_kv_cache *c, const int32_t *pt, int32_t *win_pt, size_t n);
/* Gives back the window slots of the sequence's pages wholly before
 * position n_tokens - window: no query at position >= n_tokens - 1 reads
 * them (the last token may be recomputed). Returns how many it freed; 0
 * without a window pool. */
int tm_kv_window_trim(tm_kv_cache *c, const int32_t *pages, int n_pages, int n_tokens);
/* Bytes of the cache's pools, every layer: what the cache costs. */
size_t tm_kv_cache_bytes(const tm_kv_cache *c);
/* Frees everything; safe on a zeroed or already-freed cache. */
void tm_kv_cache_free(tm_kv_cache *c);
/* Bytes of one page of one layer's K (or V) pool. */
size_t tm_kv_page_bytes(const tm_kv_cache *c);
/* Layer l's pools as the attention ops take them. */
kn_kv_pools tm_kv_layer_pools(const tm_kv_cache *c, int l);
/* Takes n pages (with a window pool, each with a window slot); returns
 * TN_ERR_NOMEM (taking none) if fewer pages or slots are free. */
int tm_kv_alloc_pages(tm_kv_cache *c, int n, int32_t *pages);
/* Returns pages (and their window slots) to the free lists; ids out of
 * range or not handed out are ignored, so a double release cannot hand one
 * page to two sequences. */
void tm_kv_release_pages(tm_kv_cache *c, const int32_t *pages, int n);
/* Copies page src's K and V rows, every layer, onto page dst (on the
 * backend): a copy-on-write of a page two sequences shared. Window layers
 * copy slot to slot; TN_ERR_ARG if src holds a slot and dst does not. */
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
