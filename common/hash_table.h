/* Small open-addressing hash tables (linear probing, power-of-two size,
 * load factor <= 1/2) for the tokenizers' vocabularies: loading o200k
 * (200k ranks) or the Qwen3 vocabulary and merges has to take well under a
 * second, and lookups sit on the encode hot path. Insert-only: the tables
 * are built once when a tokenizer loads and read-only afterwards. */
#ifndef TANDEM_COMMON_HASH_TABLE_H
#define TANDEM_COMMON_HASH_TABLE_H
#include <stddef.h>
#include <stdint.h>

uint64_t hash_bytes(const void *p, size_t n);

/* Byte-string keys -> uint32 values. Keys are not copied: each slot stores
 * (offset, length) into an arena the owner keeps alive and passes to every
 * call, so a vocabulary stores its token bytes exactly once. */
typedef struct bytes_map {
    struct bytes_slot *slots;
    size_t cap;   /* power of two, 0 when empty */
    size_t count;
} bytes_map;

/* Sizes the table for `expected` keys. Returns 0 or TN_ERR_NOMEM. */
int bytes_map_init(bytes_map *m, size_t expected);
void bytes_map_free(bytes_map *m);
/* Inserts arena[off..off+len) -> value. Returns 0, 1 when the key was
 * already present (the stored value is kept), or TN_ERR_NOMEM. */
int bytes_map_put(bytes_map *m, const unsigned char *arena, uint32_t off, uint32_t len,
                  uint32_t value);
/* Looks key[0..len) up; returns 1 and sets *value when found, else 0. */
int bytes_map_get(const bytes_map *m, const unsigned char *arena, const void *key,
                  size_t len, uint32_t *value);

/* uint64 keys -> uint64 values; the key UINT64_MAX is reserved. */
typedef struct u64_map {
    uint64_t *keys;
    uint64_t *values;
    size_t cap;
    size_t count;
} u64_map;

int u64_map_init(u64_map *m, size_t expected);
void u64_map_free(u64_map *m);
/* Returns 0, 1 when already present (value kept), TN_ERR_ARG for the
 * reserved key, or TN_ERR_NOMEM. */
int u64_map_put(u64_map *m, uint64_t key, uint64_t value);
int u64_map_get(const u64_map *m, uint64_t key, uint64_t *value);

#endif
