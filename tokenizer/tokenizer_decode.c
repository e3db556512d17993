/* Decoding token ids back to UTF-8 text, whole or streamed. Ordinary token
 * bytes are joined and made valid (U+FFFD per maximal ill-formed subpart);
 * an added token ends the current byte run, as in HF's ByteLevel decoder,
 * and is emitted verbatim. */
#include <stdlib.h>
#include <string.h>
#include "tokenizer/tokenizer_internal.h"
#include "common/utf8.h"
#include "common/status.h"

static int check_id(const bpe_tokenizer *t, int32_t id, char *err, size_t errlen)
{
    if (id < 0 || id >= t->n_ids || !(t->tok_flags[id] & TOK_FLAG_PRESENT)) {
        tn_errf(err, errlen, "token id %d is not in the %s vocabulary", (int)id, t->name);
        return TN_ERR_ARG;
    }
    return TN_OK;
}

void bpe_stream_init(bpe_stream *s, int flags)
{
    memset(s, 0, sizeof(*s));
    s->flags = flags;
}

int bpe_stream_finish(bpe_stream *s, sbuf *out)
{
    int rc = utf8_append_lossy(out, s->pending, s->n_pending, 1, NULL);
    s->n_pending = 0;
    return rc;
}

int bpe_stream_push(const bpe_tokenizer *t, bpe_stream *s, int32_t id, sbuf *out, char *err,
                    size_t errlen)
{
    if (check_id(t, id, err, errlen) != TN_OK)
        return TN_ERR_ARG;
    uint8_t f = t->tok_flags[id];
    const unsigned char *bytes = t->arena + t->tok_off[id];
    size_t n = t->tok_len[id];
    if ((f & TOK_FLAG_SPECIAL) && (s->flags & BPE_DECODE_SKIP_SPECIAL))
        return TN_OK;
    if (f & TOK_FLAG_ADDED) {
        if (bpe_stream_finish(s, out) != TN_OK || sb_append(out, bytes, n) != TN_OK)
            return TN_ERR_NOMEM;
        return TN_OK;
    }
    /* Pending bytes (at most 3) continue into this token: decode them
     * together, holding back a character that is still incomplete. */
    unsigned char local[260];
    size_t k = s->n_pending, total = k + n;
    unsigned char *buf = total <= sizeof(local) ? local : malloc(total);
    if (!buf)
        return TN_ERR_NOMEM;
    memcpy(buf, s->pending, k);
    memcpy(buf + k, bytes, n);
    size_t pending;
    int rc = utf8_append_lossy(out, buf, total, 0, &pending);
    if (rc == TN_OK) {
        memcpy(s->pending, buf + total - pending, pending);
        s->n_pending = pending;
    }
    if (buf != local)
        free(buf);
    return rc;
}

int bpe_decode(const bpe_tokenizer *t, const int32_t *ids, size_t n, int flags, sbuf *out,
               char *err, size_t errlen)
{
    if (!t || (!ids && n) || !out) {
        tn_errf(err, errlen, "bpe_decode: null argument");
        return TN_ERR_ARG;
    }
    for (size_t i = 0; i < n; i++)
        if (check_id(t, ids[i], err, errlen) != TN_OK)
            return TN_ERR_ARG;
    /* Join the bytes of each run of ordinary tokens, then make them valid
     * in one pass. */
    sbuf run;
    sb_init(&run);
    int rc = TN_OK;
    for (size_t i = 0; i <= n && rc == TN_OK; i++) {
        uint8_t f = i < n ? t->tok_flags[ids[i]] : TOK_FLAG_ADDED;
        if (i < n && (f & TOK_FLAG_SPECIAL) && (flags & BPE_DECODE_SKIP_SPECIAL))
            continue;
        if (!(f & TOK_FLAG_ADDED)) {
            rc = sb_append(&run, t->arena + t->tok_off[ids[i]], t->tok_len[ids[i]]);
            continue;
        }
        rc = utf8_append_lossy(out, (const unsigned char *)run.p, run.len, 1, NULL);
        sb_reset(&run);
        if (rc == TN_OK && i < n)
            rc = sb_append(out, t->arena + t->tok_off[ids[i]], t->tok_len[ids[i]]);
    }
    sb_free(&run);
    if (rc != TN_OK)
        tn_errf(err, errlen, "decode: out of memory");
    return rc;
}
