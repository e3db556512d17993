#include "tests/fuzz/tok_props.h"
#include <string.h>
#include "common/status.h"
#include "tokenizer/unicode.h"
#include "common/utf8.h"
#include "tests/fuzz/harness.h"

static void check_encode(const bpe_tokenizer *t, int32_t vocab, int nfc, int mode,
                         const char *text, size_t n)
{
    char err[256] = "";
    tok_ids ids;
    tok_ids_init(&ids);
    int special = (mode & 2) != 0, guarded = (mode & 4) != 0;
    int rc;
    if (guarded) {
        /* Guards are the ranges between consecutive pairs of 0x01 bytes
         * (always on character boundaries, as a renderer's are). */
        size_t guards[64], n_guards = 0, open = 0;
        int inside = 0;
        for (size_t i = 0; i < n && n_guards < 64; i++) {
            if (text[i] != 1)
                continue;
            if (!inside) {
                open = i + 1;
            } else {
                guards[n_guards++] = open;
                guards[n_guards++] = i;
            }
            inside = !inside;
        }
        rc = bpe_encode_guarded(t, text, n, guards, n_guards / 2, &ids, err, sizeof(err));
    } else {
        rc = bpe_encode(t, text, n, special ? BPE_ENCODE_SPECIAL : 0, &ids, err, sizeof(err));
    }
    int valid = utf8_valid(text, n, NULL);
    if (!valid) {
        FZ_CHECK(rc == TN_ERR_ARG);
        FZ_CHECK(err[0] != '\0');
        tok_ids_free(&ids);
        return;
    }
    FZ_CHECK(rc == TN_OK);
    for (size_t i = 0; i < ids.len; i++)
        FZ_CHECK(ids.ids[i] >= 0 && ids.ids[i] < vocab);

    sbuf out;
    sb_init(&out);
    FZ_CHECK(bpe_decode(t, ids.ids, ids.len, 0, &out, err, sizeof(err)) == TN_OK);
    /* NFC applies to the text between special tokens, not across them, so
     * the whole-text NFC comparison holds only when none were recognised. */
    if (!nfc) {
        FZ_CHECK(out.len == n);
        FZ_CHECK(n == 0 || memcmp(out.p, text, n) == 0);
    } else if (!special && !guarded) {
        sbuf want;
        sb_init(&want);
        FZ_CHECK(uc_nfc_append(&want, text, n) == TN_OK);
        FZ_CHECK(out.len == want.len);
        FZ_CHECK(want.len == 0 || memcmp(out.p, want.p, want.len) == 0);
        sb_free(&want);
    }
    sb_free(&out);
    tok_ids_free(&ids);
}

static void check_decode(const bpe_tokenizer *t, int32_t vocab, int mode, const uint8_t *p,
                         const uint8_t *end)
{
    int flags = (mode & 2) ? BPE_DECODE_SKIP_SPECIAL : 0;
    tok_ids ids;
    tok_ids_init(&ids);
    int any_bad = 0;
    while (p < end) {
        /* Mostly in range; a few just past the end of the vocabulary. */
        int32_t id = (int32_t)(fz_take(&p, end, 3) % (uint32_t)(vocab + 8));
        any_bad |= id >= vocab;
        FZ_CHECK(tok_ids_push(&ids, id) == TN_OK);
    }
    char err[256] = "";
    sbuf whole;
    sb_init(&whole);
    int rc = bpe_decode(t, ids.ids, ids.len, flags, &whole, err, sizeof(err));
    if (any_bad) {
        FZ_CHECK(rc == TN_ERR_ARG && err[0] != '\0');
    } else {
        FZ_CHECK(rc == TN_OK);
        FZ_CHECK(utf8_valid(whole.p ? whole.p : "", whole.len, NULL));
        sbuf streamed;
        sb_init(&streamed);
        bpe_stream s;
        bpe_stream_init(&s, flags);
        for (size_t i = 0; i < ids.len; i++) {
            size_t before = streamed.len;
            FZ_CHECK(bpe_stream_push(t, &s, ids.ids[i], &streamed, err, sizeof(err)) == TN_OK);
            /* each piece is whole characters */
            FZ_CHECK(utf8_valid(streamed.p ? streamed.p + before : "",
                                streamed.len - before, NULL));
        }
        FZ_CHECK(bpe_stream_finish(&s, &streamed) == TN_OK);
        FZ_CHECK(streamed.len == whole.len);
        FZ_CHECK(whole.len == 0 || memcmp(streamed.p, whole.p, whole.len) == 0);
        sb_free(&streamed);
    }
    sb_free(&whole);
    tok_ids_free(&ids);
}

void fz_tokenizer_input(const bpe_tokenizer *t, int32_t vocab, int nfc, const uint8_t *data,
                        size_t size)
{
    if (size == 0)
        return;
    int mode = data[0];
    if (mode & 1)
        check_decode(t, vocab, mode, data + 1, data + size);
    else
        check_encode(t, vocab, nfc, mode, (const char *)data + 1, size - 1);
}
