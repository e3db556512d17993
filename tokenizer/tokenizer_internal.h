/* Internal layout of bpe_tokenizer, shared by the loaders (tokenizer_hf.c,
 * tokenizer_tiktoken.c), the encoder and the decoder. Not for other
 * modules: use tokenizer/tokenizer.h. */
#ifndef TANDEM_TOKENIZER_TOKENIZER_INTERNAL_H
#define TANDEM_TOKENIZER_TOKENIZER_INTERNAL_H
#include <stdarg.h>
#include "common/status.h"
#include "tokenizer/tokenizer.h"
#include "common/hash_table.h"
#include "tokenizer/pretokenize.h"

#define TOK_FLAG_PRESENT 1
#define TOK_FLAG_ADDED 2   /* matched before pre-tokenization, decoded verbatim */
#define TOK_FLAG_SPECIAL 4 /* skipped by BPE_DECODE_SKIP_SPECIAL */

#define TOK_MAX_ADDED_LENS 64

struct bpe_tokenizer {
    bpe_kind kind;
    char name[32];
    pretok_kind pretok;
    int nfc;                 /* normalize ordinary text to NFC first */
    int whole_piece_lookup;  /* tiktoken: a piece that is itself a token skips merging */

    /* Token bytes live once in the arena; per id: offset, length, flags. */
    unsigned char *arena;
    size_t arena_len, arena_cap;
    int32_t n_ids;
    uint32_t *tok_off;
    uint32_t *tok_len;
    uint8_t *tok_flags;

    bytes_map vocab;  /* ordinary token bytes -> id (tiktoken: id == rank) */
    u64_map merges;   /* HF: (left id << 32 | right id) -> (rank << 32 | merged id) */
    int32_t byte_ids[256];

    bytes_map added;  /* added token text -> id (aliases allowed) */
    size_t added_lens[TOK_MAX_ADDED_LENS]; /* distinct lengths, longest first */
    size_t n_added_lens;
    uint8_t added_first_byte[256];         /* 1 if some added token starts so */
};

/* Allocates an empty tokenizer with room for n_ids ids. */
bpe_tokenizer *tok_alloc(bpe_kind kind, const char *name, int32_t n_ids);
/* Copies bytes into the arena; returns the offset or -1 on overflow/OOM. */
int64_t tok_arena_add(bpe_tokenizer *t, const void *p, size_t n);
/* Records id -> arena[off..off+len) with flags; grows the id tables when
 * id >= n_ids. Returns 0 or TN_ERR_NOMEM / TN_ERR_ARG (negative id). */
int tok_set_token(bpe_tokenizer *t, int32_t id, uint32_t off, uint32_t len, uint8_t flags);
/* Registers an added token (its text becomes matchable before
 * pre-tokenization). A second text for the same id is an alias: both
 * encode to id, the later one is what decoding prints. */
int tok_add_added(bpe_tokenizer *t, int32_t id, const char *text, size_t len, int special);
/* Fills byte_ids from the vocab map; fails naming the first missing byte. */
int tok_resolve_byte_ids(bpe_tokenizer *t, char *err, size_t errlen);

int tok_load_hf_json(const char *path, bpe_tokenizer **out, char *err, size_t errlen);
int tok_load_tiktoken(const char *path, bpe_tokenizer **out, char *err, size_t errlen);

#endif
