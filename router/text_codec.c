#include "router/text_codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int codec_init(text_codec *c, const char *name, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    if (!strcmp(name, "none")) {
        c->kind = CODEC_NONE;
        return 0;
    }
    if (!strcmp(name, "bytes")) {
        c->kind = CODEC_BYTES;
        return 0;
    }
    snprintf(err, errlen, "unknown tokenizer '%s' (expected none or bytes)", name);
    return -1;
}

void codec_free(text_codec *c)
{
    memset(c, 0, sizeof *c);
}

const char *codec_name(const text_codec *c)
{
    return c->kind == CODEC_BYTES ? "bytes" : "none";
}

int codec_has_text(const text_codec *c)
{
    return c->kind != CODEC_NONE;
}

static int bytes_to_ids(const char *s, size_t n, int32_t **ids, int *n_ids, char *err,
                        size_t errlen)
{
    *ids = malloc((n ? n : 1) * sizeof **ids);
    if (!*ids) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        (*ids)[i] = (unsigned char)s[i];
    *n_ids = (int)n;
    return 0;
}

int codec_encode(const text_codec *c, const char *text, size_t len, int32_t **ids,
                 int *n_ids, char *err, size_t errlen)
{
    if (c->kind == CODEC_NONE) {
        snprintf(err, errlen, "this router runs with --tokenizer none: send the prompt as an "
                 "array of token ids");
        return -1;
    }
    if (len > (size_t)1 << 30) {
        snprintf(err, errlen, "prompt too large");
        return -1;
    }
    return bytes_to_ids(text, len, ids, n_ids, err, errlen);
}

int codec_render_chat(const text_codec *c, const api_message *msgs, int n_msgs,
                      int32_t **ids, int *n_ids, char *err, size_t errlen)
{
    if (c->kind == CODEC_NONE) {
        snprintf(err, errlen, "this router runs with --tokenizer none: chat completions need a "
                 "tokenizer; send token ids to /v1/completions");
        return -1;
    }
    sbuf b;
    sb_init(&b);
    for (int i = 0; i < n_msgs; i++) {
        sb_printf(&b, "<|im_start|>%s\n", msgs[i].role);
        sb_puts(&b, msgs[i].content);
        sb_puts(&b, "<|im_end|>\n");
    }
    sb_puts(&b, "<|im_start|>assistant\n");
    if (b.oom) {
        sb_free(&b);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = codec_encode(c, b.p, b.len, ids, n_ids, err, errlen);
    sb_free(&b);
    return rc;
}

void codec_decode_token(const text_codec *c, int32_t id, sbuf *out)
{
    if (c->kind != CODEC_BYTES)
        return;
    if (id >= 0 && id < 256) {
        char ch = (char)(unsigned char)id;
        sb_append(out, &ch, 1);
    } else {
        sb_puts(out, "\xEF\xBF\xBD");
    }
}
