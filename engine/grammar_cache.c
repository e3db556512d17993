/* The worker-wide cache of grammar states' token masks
 * (engine/grammar_cache.h). */
#include "engine/grammar_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "common/status.h"

struct tm_mc_grammar {
    int32_t *code;
    int n_code;
    uint64_t hash;
    int refs;             /* constraints using it + entries keyed by it */
    tm_mc_grammar *prev, *next;
};

typedef struct mc_entry {
    tm_mc_grammar *g;
    tm_gstate key;
    uint64_t hash;
    int add_stop;
    size_t bytes;
    struct mc_entry *chain;       /* the bucket's next */
    struct mc_entry *newer, *older; /* recency list */
    uint32_t mask[];
} mc_entry;

struct tm_mask_cache {
    pthread_mutex_t lock;
    int words;
    size_t budget, bytes;
    mc_entry **buckets;
    size_t n_buckets;
    int n_entries;
    mc_entry *newest, *oldest;
    tm_mc_grammar *grammars;
    int n_grammars;
    uint64_t hits, misses, evictions;
};

static uint64_t fnv(uint64_t h, uint32_t w)
{
    return (h ^ w) * 1099511628211ull;
}

static uint64_t code_hash(const int32_t *code, int n)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)n;
    for (int i = 0; i < n; i++)
        h = fnv(h, (uint32_t)code[i]);
    return h;
}

static uint64_t key_hash(const tm_mc_grammar *g, const tm_gstate *s)
{
    uint64_t h = g->hash ^ ((uint64_t)s->n * 0x9E3779B97F4A7C15ull);
    for (int i = 0; i < s->len; i++)
        h = fnv(h, (uint32_t)s->v[i]);
    return h ^ (h >> 29);
}

int tm_mask_cache_new(tm_mask_cache **out, int words, size_t budget_bytes)
{
    *out = NULL;
    if (words <= 0 || budget_bytes < (size_t)words * sizeof(uint32_t) + sizeof(mc_entry))
        return TN_ERR_ARG;
    tm_mask_cache *c = calloc(1, sizeof *c);
    if (!c)
        return TN_ERR_NOMEM;
    c->n_buckets = 256;
    c->buckets = calloc(c->n_buckets, sizeof *c->buckets);
    if (!c->buckets || pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c->buckets);
        free(c);
        return TN_ERR_NOMEM;
    }
    c->words = words;
    c->budget = budget_bytes;
    *out = c;
    return TN_OK;
}

static void grammar_unref(tm_mask_cache *c, tm_mc_grammar *g)
{
    if (--g->refs > 0)
        return;
    if (g->prev)
        g->prev->next = g->next;
    else
        c->grammars = g->next;
    if (g->next)
        g->next->prev = g->prev;
    c->n_grammars--;
    free(g->code);
    free(g);
}

static void unlink_entry(tm_mask_cache *c, mc_entry *e)
{
    mc_entry **p = &c->buckets[e->hash & (c->n_buckets - 1)];
    while (*p != e)
        p = &(*p)->chain;
    *p = e->chain;
    if (e->newer)
        e->newer->older = e->older;
    else
        c->newest = e->older;
    if (e->older)
        e->older->newer = e->newer;
    else
        c->oldest = e->newer;
    c->n_entries--;
    c->bytes -= e->bytes;
}

static void drop_entry(tm_mask_cache *c, mc_entry *e)
{
    unlink_entry(c, e);
    grammar_unref(c, e->g);
    tm_gstate_free(&e->key);
    free(e);
}

void tm_mask_cache_free(tm_mask_cache *c)
{
    if (!c)
        return;
    while (c->oldest)
        drop_entry(c, c->oldest);
    /* grammars still referenced by constraints are the caller's bug; free
     * them anyway so nothing leaks */
    while (c->grammars) {
        tm_mc_grammar *g = c->grammars;
        c->grammars = g->next;
        free(g->code);
        free(g);
    }
    pthread_mutex_destroy(&c->lock);
    free(c->buckets);
    free(c);
}

int tm_mask_cache_grammar(tm_mask_cache *c, const int32_t *code, int n_code, tm_mc_grammar **out)
{
    const uint64_t h = code_hash(code, n_code);
    pthread_mutex_lock(&c->lock);
    for (tm_mc_grammar *g = c->grammars; g; g = g->next)
        if (g->hash == h && g->n_code == n_code &&
            !memcmp(g->code, code, (size_t)n_code * sizeof *code)) {
            g->refs++;
            *out = g;
            pthread_mutex_unlock(&c->lock);
            return TN_OK;
        }
    tm_mc_grammar *g = calloc(1, sizeof *g);
    int32_t *copy = malloc((size_t)(n_code > 0 ? n_code : 1) * sizeof *copy);
    if (!g || !copy) {
        pthread_mutex_unlock(&c->lock);
        free(g);
        free(copy);
        return TN_ERR_NOMEM;
    }
    memcpy(copy, code, (size_t)n_code * sizeof *code);
    *g = (tm_mc_grammar){ .code = copy, .n_code = n_code, .hash = h, .refs = 1,
                          .next = c->grammars };
    if (c->grammars)
        c->grammars->prev = g;
    c->grammars = g;
    c->n_grammars++;
    *out = g;
    pthread_mutex_unlock(&c->lock);
    return TN_OK;
}

void tm_mask_cache_release(tm_mask_cache *c, tm_mc_grammar *g)
{
    if (!c || !g)
        return;
    pthread_mutex_lock(&c->lock);
    grammar_unref(c, g);
    pthread_mutex_unlock(&c->lock);
}

static mc_entry *find(tm_mask_cache *c, const tm_mc_grammar *g, const tm_gstate *s, uint64_t h)
{
    for (mc_entry *e = c->buckets[h & (c->n_buckets - 1)]; e; e = e->chain)
        if (e->hash == h && e->g == g && tm_gstate_equal(&e->key, s))
            return e;
    return NULL;
}

static void make_newest(tm_mask_cache *c, mc_entry *e)
{
    if (c->newest == e)
        return;
    /* out of the list */
    if (e->newer)
        e->newer->older = e->older;
    if (e->older)
        e->older->newer = e->newer;
    else
        c->oldest = e->newer;
    /* in at the front */
    e->newer = NULL;
    e->older = c->newest;
    if (c->newest)
        c->newest->newer = e;
    c->newest = e;
    if (!c->oldest)
        c->oldest = e;
}

int tm_mask_cache_get(tm_mask_cache *c, tm_mc_grammar *g, const tm_gstate *s, uint32_t *mask,
                      int *add_stop)
{
    const uint64_t h = key_hash(g, s);
    pthread_mutex_lock(&c->lock);
    mc_entry *e = find(c, g, s, h);
    if (e) {
        memcpy(mask, e->mask, (size_t)c->words * sizeof *mask);
        *add_stop = e->add_stop;
        make_newest(c, e);
        c->hits++;
    } else {
        c->misses++;
    }
    pthread_mutex_unlock(&c->lock);
    return e != NULL;
}

/* Doubles the buckets (nothing when memory is short: chains grow). */
static void grow(tm_mask_cache *c)
{
    size_t n = c->n_buckets * 2;
    mc_entry **b = calloc(n, sizeof *b);
    if (!b)
        return;
    for (size_t i = 0; i < c->n_buckets; i++)
        for (mc_entry *e = c->buckets[i], *next; e; e = next) {
            next = e->chain;
            e->chain = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
        }
    free(c->buckets);
    c->buckets = b;
    c->n_buckets = n;
}

void tm_mask_cache_put(tm_mask_cache *c, tm_mc_grammar *g, const tm_gstate *s,
                       const uint32_t *mask, int add_stop)
{
    const uint64_t h = key_hash(g, s);
    const size_t bytes = sizeof(mc_entry) + (size_t)c->words * sizeof *mask +
                         (size_t)s->len * sizeof *s->v;
    if (bytes > c->budget)
        return;
    mc_entry *e = malloc(bytes - (size_t)s->len * sizeof *s->v);
    if (!e)
        return;
    memset(e, 0, sizeof *e);
    if (tm_gstate_copy(&e->key, s) != TN_OK) {
        tm_gstate_free(&e->key);
        free(e);
        return;
    }
    memcpy(e->mask, mask, (size_t)c->words * sizeof *mask);
    e->hash = h;
    e->add_stop = add_stop;
    e->bytes = bytes;
    e->g = g;
    pthread_mutex_lock(&c->lock);
    if (find(c, g, s, h)) { /* another row computed it meanwhile */
        pthread_mutex_unlock(&c->lock);
        tm_gstate_free(&e->key);
        free(e);
        return;
    }
    while (c->oldest && c->bytes + bytes > c->budget) {
        drop_entry(c, c->oldest);
        c->evictions++;
    }
    if ((size_t)c->n_entries >= c->n_buckets)
        grow(c);
    g->refs++;
    mc_entry **b = &c->buckets[h & (c->n_buckets - 1)];
    e->chain = *b;
    *b = e;
    e->older = c->newest;
    if (c->newest)
        c->newest->newer = e;
    c->newest = e;
    if (!c->oldest)
        c->oldest = e;
    c->n_entries++;
    c->bytes += bytes;
    pthread_mutex_unlock(&c->lock);
}

void tm_mask_cache_stats_get(tm_mask_cache *c, tm_mask_cache_stats *out)
{
    pthread_mutex_lock(&c->lock);
    *out = (tm_mask_cache_stats){ .hits = c->hits, .misses = c->misses,
                                  .evictions = c->evictions, .grammars = c->n_grammars,
                                  .entries = c->n_entries, .bytes = c->bytes,
                                  .budget = c->budget };
    pthread_mutex_unlock(&c->lock);
}
