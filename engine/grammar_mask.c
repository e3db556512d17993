/* Token masks of a grammar state over a vocabulary: the vocabulary's byte
 * trie, and one sequence's constraint with its cache of masks by state
 * (engine/grammar.h). */
#include "engine/grammar.h"

#include <stdlib.h>
#include "engine/grammar_cache.h"
#include <string.h>
#include "common/status.h"

void tm_vocab_trie_free(tm_vocab_trie *t)
{
    free(t->byte);
    free(t->depth);
    free(t->skip);
    free(t->tok_begin);
    free(t->sorted);
    free(t->off);
    free(t->blob);
    free(t->has_bytes);
    tm_mask_cache_free(t->masks);
    memset(t, 0, sizeof *t);
}

int tm_vocab_trie_share_masks(tm_vocab_trie *t, size_t budget_bytes)
{
    if (t->masks)
        return TN_ERR_ARG;
    return tm_mask_cache_new(&t->masks, (t->vocab + 31) / 32, budget_bytes);
}

/* qsort context: the blob the token ids index */
typedef struct sort_ref {
    const char *p;
    size_t n;
    int32_t id;
} sort_ref;

static int cmp_ref(const void *a, const void *b)
{
    const sort_ref *x = a, *y = b;
    size_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->p, y->p, n);
    if (c)
        return c;
    if (x->n != y->n)
        return x->n < y->n ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

int tm_vocab_trie_build(tm_vocab_trie *t, int vocab, const char *const *bytes, const size_t *lens)
{
    memset(t, 0, sizeof *t);
    if (vocab <= 0 || !bytes || !lens)
        return TN_ERR_ARG;
    t->vocab = vocab;
    size_t total = 0;
    int n_tok = 0;
    for (int i = 0; i < vocab; i++)
        if (bytes[i] && lens[i]) {
            if (lens[i] > 255)
                return TN_ERR_ARG;
            total += lens[i];
            n_tok++;
        }
    t->off = malloc(((size_t)vocab + 1) * sizeof *t->off);
    t->blob = malloc(total ? total : 1);
    t->has_bytes = calloc((size_t)vocab, 1);
    sort_ref *refs = malloc(((size_t)n_tok + 1) * sizeof *refs);
    /* at most one node per byte */
    t->byte = malloc(total ? total : 1);
    t->depth = malloc(total ? total : 1);
    t->skip = malloc((total ? total : 1) * sizeof *t->skip);
    t->tok_begin = malloc((total + 1) * sizeof *t->tok_begin);
    t->sorted = malloc(((size_t)n_tok + 1) * sizeof *t->sorted);
    if (!t->off || !t->blob || !t->has_bytes || !refs || !t->byte || !t->depth || !t->skip ||
        !t->tok_begin || !t->sorted) {
        free(refs);
        tm_vocab_trie_free(t);
        return TN_ERR_NOMEM;
    }
    size_t k = 0;
    int j = 0;
    for (int i = 0; i < vocab; i++) {
        t->off[i] = (int64_t)k;
        if (bytes[i] && lens[i]) {
            memcpy(t->blob + k, bytes[i], lens[i]);
            refs[j++] = (sort_ref){ t->blob + k, lens[i], i };
            k += lens[i];
            t->has_bytes[i] = 1;
        }
    }
    t->off[vocab] = (int64_t)k;
    qsort(refs, (size_t)n_tok, sizeof *refs, cmp_ref);
    /* Sorted strings give the trie in preorder: each token shares its
     * longest common prefix with the previous one and adds nodes for the
     * rest, so the tokens' end nodes ascend with the sorted order (a
     * repeat of the same bytes adds none and ends at the same node). */
    int32_t *end_node = malloc(((size_t)n_tok + 1) * sizeof *end_node);
    if (!end_node) {
        free(refs);
        tm_vocab_trie_free(t);
        return TN_ERR_NOMEM;
    }
    int32_t path[256];
    int path_len = 0, n = 0;
    const sort_ref *prev = NULL;
    for (int i = 0; i < n_tok; i++) {
        const sort_ref *r = &refs[i];
        size_t common = 0;
        if (prev)
            while (common < prev->n && common < r->n && prev->p[common] == r->p[common])
                common++;
        while ((size_t)path_len > common) /* close the nodes past the prefix */
            t->skip[path[--path_len]] = n;
        for (size_t d = common; d < r->n; d++) {
            t->byte[n] = (uint8_t)r->p[d];
            t->depth[n] = (uint8_t)(d + 1);
            path[path_len++] = n++;
        }
        end_node[i] = path[path_len - 1];
        t->sorted[i] = r->id;
        if (r->n > (size_t)t->max_depth)
            t->max_depth = (int)r->n;
        prev = r;
    }
    while (path_len > 0)
        t->skip[path[--path_len]] = n;
    t->n_nodes = n;
    int i = 0;
    for (int nd = 0; nd < n; nd++) {
        t->tok_begin[nd] = i;
        while (i < n_tok && end_node[i] == nd)
            i++;
    }
    t->tok_begin[n] = i;
    free(end_node);
    free(refs);
    return TN_OK;
}

/* ------------------------------------------------------------ constraint */

static void dfa_free(tm_constraint *c);

void tm_constraint_free(tm_constraint *c)
{
    tm_mask_cache_release(c->shared, c->shared_g);
    tm_grammar_free(&c->g);
    tm_gstate_free(&c->state);
    tm_gstate_free(&c->tmp);
    if (c->levels)
        for (int i = 0; i <= c->trie->max_depth; i++)
            tm_gstate_free(&c->levels[i]);
    free(c->levels);
    free(c->stop);
    dfa_free(c);
    for (int i = 0; i < TM_CONSTRAINT_CACHE; i++) {
        tm_gstate_free(&c->cache[i].key);
        free(c->cache[i].mask);
    }
    memset(c, 0, sizeof *c);
}

int tm_constraint_init(tm_constraint *c, const int32_t *code, int n_code,
                       const tm_vocab_trie *trie, const int32_t *stop, int n_stop, char *err,
                       size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->trie = trie;
    int rc = tm_grammar_load(&c->g, code, n_code, trie->vocab, err, errlen);
    if (rc != TN_OK)
        return rc;
    c->words = (trie->vocab + 31) / 32;
    c->levels = calloc((size_t)trie->max_depth + 1, sizeof *c->levels);
    c->level_ids = calloc((size_t)trie->max_depth + 1, sizeof *c->level_ids);
    c->stop = malloc(((size_t)n_stop + 1) * sizeof *c->stop);
    if (!c->levels || !c->level_ids || !c->stop || tm_grammar_start(&c->g, &c->state) != TN_OK) {
        tm_constraint_free(c);
        return tn_fail(err, errlen, TN_ERR_NOMEM, "grammar: out of memory");
    }
    for (int i = 0; i < n_stop; i++) {
        if (stop[i] < 0 || stop[i] >= trie->vocab) {
            tm_constraint_free(c);
            return tn_fail(err, errlen, TN_ERR_ARG, "grammar: stop token %d outside the vocabulary",
                           (int)stop[i]);
        }
        c->stop[i] = stop[i];
    }
    c->n_stop = n_stop;
    if (trie->masks && tm_constraint_share(c, trie->masks) != TN_OK) {
        tm_constraint_free(c);
        return tn_fail(err, errlen, TN_ERR_NOMEM, "grammar: out of memory");
    }
    return TN_OK;
}

static void set_bit(uint32_t *m, int32_t t)
{
    m[t >> 5] |= 1u << (t & 31);
}

static uint64_t state_hash(const tm_gstate *s)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)s->n;
    for (int i = 0; i < s->len; i++)
        h = (h ^ (uint32_t)s->v[i]) * 1099511628211ull;
    return h;
}

static void dfa_reset(tm_constraint *c)
{
    for (int i = 0; i < c->dfa.n; i++)
        tm_gstate_free(&c->dfa.states[i]);
    c->dfa.n = 0;
    if (c->dfa.slots)
        memset(c->dfa.slots, 0, (size_t)c->dfa.n_slots * sizeof *c->dfa.slots);
}

static void dfa_free(tm_constraint *c)
{
    dfa_reset(c);
    free(c->dfa.states);
    free(c->dfa.trans);
    free(c->dfa.slots);
    free(c->dfa.hash);
    free(c->level_ids);
}

/* The id of state s (copied in when new); -1 when out of memory. */
static int32_t dfa_intern(tm_constraint *c, const tm_gstate *s)
{
    uint64_t h = state_hash(s);
    if (c->dfa.n_slots) {
        for (int k = (int)(h & (uint64_t)(c->dfa.n_slots - 1));; k = (k + 1) & (c->dfa.n_slots - 1)) {
            int32_t id = c->dfa.slots[k] - 1;
            if (id < 0)
                break;
            if (c->dfa.hash[id] == h && tm_gstate_equal(&c->dfa.states[id], s))
                return id;
        }
    }
    if (c->dfa.n == c->dfa.cap) {
        int cap = c->dfa.cap ? 2 * c->dfa.cap : 64;
        tm_gstate *st = realloc(c->dfa.states, (size_t)cap * sizeof *st);
        if (!st)
            return -1;
        c->dfa.states = st;
        int32_t *tr = realloc(c->dfa.trans, (size_t)cap * 256 * sizeof *tr);
        if (!tr)
            return -1;
        c->dfa.trans = tr;
        uint64_t *hs = realloc(c->dfa.hash, (size_t)cap * sizeof *hs);
        if (!hs)
            return -1;
        c->dfa.hash = hs;
        c->dfa.cap = cap;
    }
    if (2 * (c->dfa.n + 1) > c->dfa.n_slots) { /* rehash at half full */
        int n_slots = c->dfa.n_slots ? 2 * c->dfa.n_slots : 128;
        int32_t *sl = calloc((size_t)n_slots, sizeof *sl);
        if (!sl)
            return -1;
        for (int id = 0; id < c->dfa.n; id++) {
            int k = (int)(c->dfa.hash[id] & (uint64_t)(n_slots - 1));
            while (sl[k])
                k = (k + 1) & (n_slots - 1);
            sl[k] = id + 1;
        }
        free(c->dfa.slots);
        c->dfa.slots = sl;
        c->dfa.n_slots = n_slots;
    }
    int32_t id = c->dfa.n;
    memset(&c->dfa.states[id], 0, sizeof c->dfa.states[id]);
    if (tm_gstate_copy(&c->dfa.states[id], s) != TN_OK)
        return -1;
    c->dfa.hash[id] = h;
    for (int b = 0; b < 256; b++)
        c->dfa.trans[(size_t)id * 256 + b] = -1;
    int k = (int)(h & (uint64_t)(c->dfa.n_slots - 1));
    while (c->dfa.slots[k])
        k = (k + 1) & (c->dfa.n_slots - 1);
    c->dfa.slots[k] = id + 1;
    c->dfa.n++;
    return id;
}

/* The id after byte b from state id p: -2 when no stack survives, -1 when
 * out of memory. */
static int32_t dfa_step(tm_constraint *c, int32_t p, uint8_t b)
{
    int32_t nx = c->dfa.trans[(size_t)p * 256 + b];
    if (nx != -1)
        return nx;
    if (tm_grammar_advance_byte(&c->g, &c->dfa.states[p], b, &c->tmp) != TN_OK)
        return -1;
    nx = c->tmp.n == 0 ? -2 : dfa_intern(c, &c->tmp);
    if (nx != -1)
        c->dfa.trans[(size_t)p * 256 + b] = nx;
    return nx;
}

int tm_constraint_share(tm_constraint *c, struct tm_mask_cache *cache)
{
    if (c->shared)
        return TN_OK;
    int rc = tm_mask_cache_grammar(cache, c->g.code, c->g.n_code, &c->shared_g);
    if (rc == TN_OK)
        c->shared = cache;
    return rc;
}

/* The trie walk: every byte token whose bytes some stack accepts and the
 * grammar's tokens at the stacks' tops; *add_stop: whether the stop
 * tokens join them (an accepting state, or a dead end). */
static int compute_mask(tm_constraint *c, uint32_t *mask, int *add_stop)
{
    const tm_vocab_trie *t = c->trie;
    memset(mask, 0, (size_t)c->words * sizeof *mask);
    if (c->dfa.n >= TM_DFA_MAX_STATES)
        dfa_reset(c);
    int32_t root = dfa_intern(c, &c->state);
    if (root < 0)
        return TN_ERR_NOMEM;
    c->level_ids[0] = root;
    for (int i = 0; i < t->n_nodes;) {
        const int d = t->depth[i];
        int32_t nx = dfa_step(c, c->level_ids[d - 1], t->byte[i]);
        if (nx == -1)
            return TN_ERR_NOMEM;
        if (nx == -2) {
            i = t->skip[i];
            continue;
        }
        c->level_ids[d] = nx;
        for (int32_t k = t->tok_begin[i]; k < t->tok_begin[i + 1]; k++)
            set_bit(mask, t->sorted[k]);
        i++;
    }
    const tm_gstate *s = &c->state;
    for (int i = 0; i < s->len; i += 1 + s->v[i]) {
        const int d = s->v[i];
        if (d > 0 && c->g.code[s->v[i + d]] == TM_G_TOKEN)
            set_bit(mask, c->g.code[s->v[i + d] + 1]);
    }
    int any = 0;
    for (int w = 0; w < c->words && !any; w++)
        any = mask[w] != 0;
    *add_stop = tm_gstate_accepting(s) || !any;
    return TN_OK;
}

int tm_constraint_mask(tm_constraint *c, uint32_t *mask)
{
    for (int i = 0; i < c->n_cached; i++)
        if (tm_gstate_equal(&c->cache[i].key, &c->state)) {
            memcpy(mask, c->cache[i].mask, (size_t)c->words * sizeof *mask);
            c->cache[i].hits++;
            c->masks_cached++;
            return TN_OK;
        }
    int add_stop = 0;
    if (c->shared && tm_mask_cache_get(c->shared, c->shared_g, &c->state, mask, &add_stop)) {
        c->masks_shared++;
    } else {
        int rc = compute_mask(c, mask, &add_stop);
        if (rc != TN_OK)
            return rc;
        c->masks_computed++;
        if (c->shared)
            tm_mask_cache_put(c->shared, c->shared_g, &c->state, mask, add_stop);
    }
    if (add_stop)
        for (int k = 0; k < c->n_stop; k++)
            set_bit(mask, c->stop[k]);
    /* round-robin eviction once full */
    int slot = c->n_cached < TM_CONSTRAINT_CACHE ? c->n_cached : c->next_evict;
    if (!c->cache[slot].mask && !(c->cache[slot].mask = malloc((size_t)c->words * sizeof *mask)))
        return TN_OK; /* no cache entry, the mask itself is fine */
    if (tm_gstate_copy(&c->cache[slot].key, &c->state) != TN_OK)
        return TN_OK;
    memcpy(c->cache[slot].mask, mask, (size_t)c->words * sizeof *mask);
    c->cache[slot].hits = 0;
    if (c->n_cached < TM_CONSTRAINT_CACHE)
        c->n_cached++;
    else
        c->next_evict = (c->next_evict + 1) % TM_CONSTRAINT_CACHE;
    return TN_OK;
}

int tm_constraint_accept(tm_constraint *c, int32_t token)
{
    const tm_vocab_trie *t = c->trie;
    if (token < 0 || token >= t->vocab)
        return TN_ERR_ARG;
    int rc = tm_grammar_advance_token(&c->g, &c->state, token, &c->tmp);
    if (rc != TN_OK)
        return rc;
    if (c->tmp.n == 0 && t->has_bytes[token]) {
        /* byte by byte through tmp and levels[0] as scratch */
        rc = tm_gstate_copy(&c->tmp, &c->state);
        for (int64_t k = t->off[token]; rc == TN_OK && k < t->off[token + 1] && c->tmp.n > 0; k++) {
            rc = tm_grammar_advance_byte(&c->g, &c->tmp, (uint8_t)t->blob[k], &c->levels[0]);
            tm_gstate x = c->tmp;
            c->tmp = c->levels[0];
            c->levels[0] = x;
        }
        if (rc != TN_OK)
            return rc;
    }
    if (c->tmp.n > 0) {
        tm_gstate x = c->state;
        c->state = c->tmp;
        c->tmp = x;
        return TN_OK;
    }
    int is_stop = 0;
    for (int k = 0; k < c->n_stop; k++)
        is_stop |= c->stop[k] == token;
    if (is_stop)
        return TN_OK; /* the end (a dead end's way out too) */
    return TN_ERR_ARG;
}
