#include "router/text_codec.h"
#include "common/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

int codec_init(text_codec *c, const char *name, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    if (!strcmp(name, "none") || !strcmp(name, "bytes")) {
        c->kind = !strcmp(name, "none") ? CODEC_NONE : CODEC_BYTES;
        snprintf(c->name, sizeof c->name, "%s", name);
        return 0;
    }
    if (ends_with(name, ".json") || ends_with(name, ".tiktoken")) {
        char why[400];
        if (bpe_tokenizer_load(name, &c->bpe, why, sizeof why) != 0) {
            snprintf(err, errlen, "tokenizer %s: %s", name, why);
            return TN_ERR_ARG;
        }
        c->kind = CODEC_BPE;
        snprintf(c->name, sizeof c->name, "%s", bpe_tokenizer_name(c->bpe));
        return 0;
    }
    snprintf(err, errlen, "unknown tokenizer '%s' (expected none, bytes, or a tokenizer.json / "
             "o200k_base.tiktoken path)", name);
    return TN_ERR_ARG;
}

void codec_free(text_codec *c)
{
    if (c->bpe)
        bpe_tokenizer_free(c->bpe);
    memset(c, 0, sizeof *c);
}

const char *codec_name(const text_codec *c)
{
    return c->name[0] ? c->name : "none";
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
        return TN_ERR_NOMEM;
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
        return TN_ERR_ARG;
    }
    if (len > (size_t)1 << 30) {
        snprintf(err, errlen, "prompt too large");
        return TN_ERR_ARG;
    }
    if (c->kind == CODEC_BPE) {
        tok_ids v;
        tok_ids_init(&v);
        char why[300];
        /* Special-token strings in a client's text stay text. */
        if (bpe_encode(c->bpe, text, len, 0, &v, why, sizeof why) != 0) {
            tok_ids_free(&v);
            snprintf(err, errlen, "cannot tokenize the prompt: %s", why);
            return TN_ERR_ARG;
        }
        *ids = malloc((v.len ? v.len : 1) * sizeof **ids);
        if (!*ids) {
            tok_ids_free(&v);
            snprintf(err, errlen, "out of memory");
            return TN_ERR_NOMEM;
        }
        if (v.len)
            memcpy(*ids, v.ids, v.len * sizeof **ids);
        *n_ids = (int)v.len;
        tok_ids_free(&v);
        return 0;
    }
    return bytes_to_ids(text, len, ids, n_ids, err, errlen);
}

int codec_has_chat_format(const text_codec *c)
{
    return c->kind == CODEC_BPE;
}

int codec_chat_stop_ids(const text_codec *c, int32_t *ids, int cap)
{
    if (c->kind != CODEC_BPE || cap <= 0)
        return 0;
    return (int)chat_stop_token_ids(c->bpe, chat_format_for(c->bpe), ids, (size_t)cap);
}

int codec_chat_parser_new(const text_codec *c, chat_parser **out, char *err, size_t errlen)
{
    *out = NULL;
    if (c->kind != CODEC_BPE) {
        snprintf(err, errlen, "no chat format for the %s codec", c->name);
        return TN_ERR_ARG;
    }
    return chat_parser_new(c->bpe, chat_format_for(c->bpe), NULL, out, err, errlen) ? -1 : 0;
}

/* The vocabulary's own chat format. */
static int render_with_format(const text_codec *c, const api_request *ar, int32_t **ids,
                              int *n_ids, char *err, size_t errlen)
{
    /* The chat formats read messages from JSON, whose strings end at a NUL. */
    if (ar->content_has_nul) {
        snprintf(err, errlen, "message content with NUL (\\u0000) is not supported by the %s "
                 "chat format; send the prompt to /v1/completions or drop the NUL",
                 c->name);
        return TN_ERR_ARG;
    }
    chat_conversation conv;
    if (chat_conversation_from_json(ar->messages_json, ar->tools_json, &conv, err, errlen) != 0)
        return TN_ERR_ARG;
    chat_render_opts o;
    chat_render_opts_default(&o);
    /* Message text from clients stays text, even if it spells special tokens. */
    o.plain_content = 1;
    if (ar->reasoning_effort[0])
        o.reasoning_effort = ar->reasoning_effort;
    if (ar->enable_thinking >= 0)
        o.enable_thinking = ar->enable_thinking;
    char date[16];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y-%m-%d", &tm);
    o.current_date = date;
    tok_ids v;
    tok_ids_init(&v);
    int rc = chat_render(c->bpe, chat_format_for(c->bpe), &conv, &o, &v, NULL, err, errlen);
    chat_conversation_free(&conv);
    if (rc == 0) {
        *ids = malloc((v.len ? v.len : 1) * sizeof **ids);
        if (!*ids) {
            snprintf(err, errlen, "out of memory");
            rc = -1;
        } else {
            if (v.len)
                memcpy(*ids, v.ids, v.len * sizeof **ids);
            *n_ids = (int)v.len;
        }
    }
    tok_ids_free(&v);
    return rc ? -1 : 0;
}

int codec_render_chat(const text_codec *c, const api_request *ar, int32_t **ids, int *n_ids,
                      char *err, size_t errlen)
{
    if (c->kind == CODEC_NONE) {
        snprintf(err, errlen, "this router runs with --tokenizer none: chat completions need a "
                 "tokenizer; send token ids to /v1/completions");
        return TN_ERR_ARG;
    }
    if (c->kind == CODEC_BPE)
        return render_with_format(c, ar, ids, n_ids, err, errlen);
    if (ar->tools_json) {
        snprintf(err, errlen, "tools need a chat format: run the router with a real vocabulary "
                 "(--tokenizer PATH)");
        return TN_ERR_ARG;
    }
    const api_message *msgs = ar->messages;
    int n_msgs = ar->n_messages;
    sbuf b;
    sb_init(&b);
    for (int i = 0; i < n_msgs; i++) {
        sb_printf(&b, "<|im_start|>%s\n", msgs[i].role);
        sb_append(&b, msgs[i].content, msgs[i].content_len); /* NUL bytes included */
        sb_puts(&b, "<|im_end|>\n");
    }
    sb_puts(&b, "<|im_start|>assistant\n");
    if (b.oom) {
        sb_free(&b);
        snprintf(err, errlen, "out of memory");
        return TN_ERR_NOMEM;
    }
    int rc = codec_encode(c, b.p, b.len, ids, n_ids, err, errlen);
    sb_free(&b);
    return rc;
}

void codec_decode_token(const text_codec *c, int32_t id, sbuf *out)
{
    if (c->kind == CODEC_BPE) {
        size_t len = 0;
        const char *bytes = bpe_token_bytes(c->bpe, id, &len);
        /* Special tokens (EOS, channel markers) are structure, not text. */
        if (!bytes || bpe_token_is_special(c->bpe, id))
            return;
        sb_append(out, bytes, len);
        return;
    }
    if (c->kind != CODEC_BYTES)
        return;
    if (id >= 0 && id < 256) {
        char ch = (char)(unsigned char)id;
        sb_append(out, &ch, 1);
    } else {
        sb_puts(out, "\xEF\xBF\xBD");
    }
}

int codec_token_bytes(const text_codec *c, int32_t id, sbuf *out)
{
    if (c->kind == CODEC_BPE) {
        size_t len = 0;
        const char *bytes = bpe_token_bytes(c->bpe, id, &len);
        if (bytes)
            sb_append(out, bytes, len);
        return 0;
    }
    if (c->kind != CODEC_BYTES)
        return -1;
    codec_decode_token(c, id, out);
    return 0;
}
