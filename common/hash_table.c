#include "common/hash_table.h"
#include <stdlib.h>
#include <string.h>
#include "common/status.h"

struct bytes_slot {
    uint32_t off;
    uint32_t len;
    uint32_t value;
    uint32_t hash;  /* low 32 bits of the key hash; 0 marks an empty slot */
};

/* FNV-1a over 8-byte words followed by a murmur-style finaliser: fast for
 * the short keys of a BPE vocabulary and well mixed in the low bits the
 * power-of-two table uses. */
uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ULL ^ (n * 0x9E3779B97F4A7C15ULL);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0x100000001b3ULL;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    while (n--) {
        h = (h ^ *s++) * 0x100000001b3ULL;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

static size_t table_size_for(size_t expected)
{
    size_t cap = 16;
    while (cap < expected * 2 + 1)
        cap *= 2;
    return cap;
}

int bytes_map_init(bytes_map *m, size_t expected)
{
    m->cap = table_size_for(expected);
    m->count = 0;
    m->slots = calloc(m->cap, sizeof(*m->slots));
    if (!m->slots) {
        m->cap = 0;
        return TN_ERR_NOMEM;
    }
    return TN_OK;
}

void bytes_map_free(bytes_map *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = m->count = 0;
}

static uint32_t slot_hash(uint64_t h)
{
    uint32_t s = (uint32_t)(h >> 32);
    return s ? s : 1;
}

static int bytes_map_grow(bytes_map *m)
{
    size_t cap = m->cap * 2;
    struct bytes_slot *slots = calloc(cap, sizeof(*slots));
    if (!slots)
        return TN_ERR_NOMEM;
    for (size_t i = 0; i < m->cap; i++) {
        struct bytes_slot *s = &m->slots[i];
        if (!s->hash)
            continue;
        /* The slot hash is the high half of the 64-bit hash; the index uses
         * it too, so no key needs rehashing. */
        size_t j = s->hash & (cap - 1);
        while (slots[j].hash)
            j = (j + 1) & (cap - 1);
        slots[j] = *s;
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return TN_OK;
}

int bytes_map_put(bytes_map *m, const unsigned char *arena, uint32_t off, uint32_t len,
                  uint32_t value)
{
    if ((m->count + 1) * 2 > m->cap && bytes_map_grow(m) != TN_OK)
        return TN_ERR_NOMEM;
    uint32_t h = slot_hash(hash_bytes(arena + off, len));
    size_t i = h & (m->cap - 1);
    while (m->slots[i].hash) {
        struct bytes_slot *s = &m->slots[i];
        if (s->hash == h && s->len == len && memcmp(arena + s->off, arena + off, len) == 0)
            return 1;
        i = (i + 1) & (m->cap - 1);
    }
    m->slots[i] = (struct bytes_slot){off, len, value, h};
    m->count++;
    return TN_OK;
}

int bytes_map_get(const bytes_map *m, const unsigned char *arena, const void *key,
                  size_t len, uint32_t *value)
{
    if (!m->cap)
        return 0;
    uint32_t h = slot_hash(hash_bytes(key, len));
    size_t i = h & (m->cap - 1);
    while (m->slots[i].hash) {
        const struct bytes_slot *s = &m->slots[i];
        if (s->hash == h && s->len == len && memcmp(arena + s->off, key, len) == 0) {
            *value = s->value;
            return 1;
        }
        i = (i + 1) & (m->cap - 1);
    }
    return 0;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ULL;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dULL;
    x ^= x >> 33;
    return x;
}

int u64_map_init(u64_map *m, size_t expected)
{
    m->cap = table_size_for(expected);
    m->count = 0;
    m->keys = malloc(m->cap * sizeof(*m->keys));
    m->values = malloc(m->cap * sizeof(*m->values));
    if (!m->keys || !m->values) {
        u64_map_free(m);
        return TN_ERR_NOMEM;
    }
    memset(m->keys, 0xFF, m->cap * sizeof(*m->keys));
    return TN_OK;
}

void u64_map_free(u64_map *m)
{
    free(m->keys);
    free(m->values);
    m->keys = NULL;
    m->values = NULL;
    m->cap = m->count = 0;
}

static int u64_map_grow(u64_map *m)
{
    u64_map bigger;
    if (u64_map_init(&bigger, m->cap) != TN_OK)
        return TN_ERR_NOMEM;
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i] != UINT64_MAX)
            u64_map_put(&bigger, m->keys[i], m->values[i]);
    u64_map_free(m);
    *m = bigger;
    return TN_OK;
}

int u64_map_put(u64_map *m, uint64_t key, uint64_t value)
{
    if (key == UINT64_MAX)
        return TN_ERR_ARG;
    if ((m->count + 1) * 2 > m->cap && u64_map_grow(m) != TN_OK)
        return TN_ERR_NOMEM;
    size_t i = mix64(key) & (m->cap - 1);
    while (m->keys[i] != UINT64_MAX) {
        if (m->keys[i] == key)
            return 1;
        i = (i + 1) & (m->cap - 1);
    }
    m->keys[i] = key;
    m->values[i] = value;
    m->count++;
    return TN_OK;
}

int u64_map_get(const u64_map *m, uint64_t key, uint64_t *value)
{
    if (!m->cap || key == UINT64_MAX)
        return 0;
    size_t i = mix64(key) & (m->cap - 1);
    while (m->keys[i] != UINT64_MAX) {
        if (m->keys[i] == key) {
            *value = m->values[i];
            return 1;
        }
        i = (i + 1) & (m->cap - 1);
    }
    return 0;
}
