/* A worker's vocabulary trie from --tokenizer (worker/worker_vocab.h). */
#include "worker/worker_vocab.h"

#include <stdlib.h>
#include <string.h>
#include "common/status.h"
#include "tokenizer/tokenizer.h"

int worker_vocab_load(const char *spec, int vocab, tm_vocab_trie *out, int *loaded, char *err,
                      size_t errlen)
{
    *loaded = 0;
    memset(out, 0, sizeof *out);
    if (!spec[0] || !strcmp(spec, "none"))
        return TN_OK;
    const char **bytes = calloc((size_t)vocab, sizeof *bytes);
    size_t *lens = calloc((size_t)vocab, sizeof *lens);
    char *byte_store = malloc(256);
    bpe_tokenizer *tok = NULL;
    int rc = bytes && lens && byte_store ? TN_OK : TN_ERR_NOMEM;
    if (rc == TN_OK && !strcmp(spec, "bytes")) {
        for (int t = 0; t < 256 && t < vocab; t++) {
            byte_store[t] = (char)t;
            bytes[t] = &byte_store[t];
            lens[t] = 1;
        }
    } else if (rc == TN_OK) {
        rc = bpe_tokenizer_load(spec, &tok, err, errlen);
        /* once: bpe_vocab_size scans the id table's unused tail (for the
         * Qwen3 vocabulary, once per token made startup quadratic: 30 s
         * under ASan) */
        int32_t n_tok = rc == TN_OK ? bpe_vocab_size(tok) : 0;
        if (rc == TN_OK && n_tok > vocab)
            rc = tn_fail(err, errlen, TN_ERR_ARG, "--tokenizer %s has %d tokens, the model %d", spec,
                         (int)n_tok, vocab);
        for (int t = 0; rc == TN_OK && t < n_tok; t++)
            if (!bpe_token_is_added(tok, t))
                bytes[t] = bpe_token_bytes(tok, t, &lens[t]);
    }
    if (rc == TN_OK) {
        rc = tm_vocab_trie_build(out, vocab, bytes, lens);
        if (rc != TN_OK)
            tn_errf(err, errlen, "--tokenizer %s: %s", spec,
                    rc == TN_ERR_NOMEM ? "out of memory" : "a token longer than 255 bytes");
        /* one mask cache for every request's grammar over this vocabulary */
        if (rc == TN_OK &&
            (rc = tm_vocab_trie_share_masks(out, (size_t)TM_MASK_CACHE_DEFAULT_MB << 20)) != TN_OK) {
            tm_vocab_trie_free(out);
            tn_errf(err, errlen, "--tokenizer %s: out of memory for the mask cache", spec);
        }
    } else if (rc == TN_ERR_NOMEM) {
        tn_errf(err, errlen, "out of memory");
    }
    *loaded = rc == TN_OK;
    if (tok)
        bpe_tokenizer_free(tok);
    free(bytes);
    free(lens);
    free(byte_store);
    return rc;
}
