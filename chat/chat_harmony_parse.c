/* Harmony output parsing: the model continues the prompt's
 * "<|start|>assistant" with one or more messages
 *
 *   [<|channel|>analysis]<|message|>..<|end|><|start|>assistant<|channel|>final<|message|>..<|return|>
 *   <|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{..}<|call|>
 *
 * Headers are read as the harmony renderer's parser reads them: the
 * channel follows <|channel|>; of the remaining whitespace-separated words
 * the last is the recipient when it starts with "to=" and otherwise the
 * content type, with the recipient just before it. analysis -> reasoning,
 * final and recipient-less commentary (preambles) -> content, a message to
 * functions.NAME -> tool call NAME with the message text as arguments. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include "chat/chat_parser_internal.h"
#include "tokenizer/tokenizer_internal.h"
#include "common/status.h"

#define MAX_HEADER_TOKENS 512

int harmony_parser_init(chat_parser *p, char *err, size_t errlen)
{
    p->id_start = bpe_token_id(p->tok, "<|start|>");
    p->id_message = bpe_token_id(p->tok, "<|message|>");
    p->id_end = bpe_token_id(p->tok, "<|end|>");
    p->id_return = bpe_token_id(p->tok, "<|return|>");
    p->id_call = bpe_token_id(p->tok, "<|call|>");
    if (p->id_start < 0 || p->id_message < 0 || p->id_end < 0 || p->id_return < 0 || p->id_call < 0) {
        tn_errf(err, errlen, "tokenizer %s lacks the Harmony special tokens", bpe_tokenizer_name(p->tok));
        return TN_ERR_ARG;
    }
    p->hstate = HS_HEADER; /* the prompt ended with <|start|>assistant */
    p->first_message = 1;
    return TN_OK;
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* Splits header text (without the channel) on ASCII whitespace. */
static size_t split_words(char *s, char **words, size_t max)
{
    size_t n = 0;
    while (*s) {
        while (*s && isspace((unsigned char)*s))
            *s++ = '\0';
        if (!*s)
            break;
        if (n < max)
            words[n++] = s;
        while (*s && !isspace((unsigned char)*s))
            s++;
    }
    return n;
}

static int parse_header(chat_parser *p, char *err, size_t errlen)
{
    sbuf h, tmp;
    sb_init(&h);
    sb_init(&tmp);
    int rc = bpe_decode(p->tok, p->header.ids, p->header.len, 0, &h, err, errlen);
    free(p->channel);
    free(p->recipient);
    p->channel = p->recipient = NULL;
    if (rc != TN_OK)
        goto out;
    const char *s = h.p ? h.p : "";
    /* the channel: the word after <|channel|> (up to whitespace or '<') */
    const char *ch = strstr(s, "<|channel|>");
    if (ch) {
        const char *v = ch + 11, *e = v;
        while (*e && !isspace((unsigned char)*e) && *e != '<')
            e++;
        if (e == v) {
            tn_errf(err, errlen, "Harmony header has <|channel|> without a channel name");
            rc = TN_ERR_ARG;
            goto out;
        }
        p->channel = dup_n(v, (size_t)(e - v));
        rc = p->channel ? sb_append(&tmp, s, (size_t)(ch - s)) : TN_ERR_NOMEM;
        if (rc == TN_OK)
            rc = sb_puts(&tmp, e);
    } else {
        rc = sb_puts(&tmp, s);
    }
    if (rc != TN_OK)
        goto out;
    /* "<|constrain|>" starts a word of its own */
    sb_reset(&h);
    for (const char *q = tmp.p ? tmp.p : ""; *q && rc == TN_OK;) {
        if (strncmp(q, "<|constrain|>", 13) == 0) {
            rc = sb_append(&h, " <|constrain|>", 14);
            q += 13;
        } else {
            rc = sb_putc(&h, *q++);
        }
    }
    if (rc != TN_OK || !h.p)
        goto out;
    char *words[16];
    size_t n = split_words(h.p, words, 16);
    size_t w = 0;
    /* the author: "assistant" for the model's own messages */
    if (n > 0 && (!p->first_message || strcmp(words[0], "assistant") == 0))
        w = 1;
    if (w < n) {
        const char *last = words[--n];
        const char *rcpt = NULL;
        if (strncmp(last, "to=", 3) == 0)
            rcpt = last + 3;
        else if (n == w && strncmp(last, "<|constrain|>", 13) != 0)
            rcpt = last;
        else if (n > w)
            rcpt = strncmp(words[n - 1], "to=", 3) == 0 ? words[n - 1] + 3 : words[n - 1];
        if (rcpt && strcmp(rcpt, "all") != 0) {
            p->recipient = dup_n(rcpt, strlen(rcpt));
            if (!p->recipient)
                rc = TN_ERR_NOMEM;
        }
    }
out:
    sb_free(&h);
    sb_free(&tmp);
    return rc;
}

static chat_delta_kind text_kind(const chat_parser *p)
{
    if (p->channel && strcmp(p->channel, "analysis") == 0)
        return CHAT_DELTA_REASONING;
    return CHAT_DELTA_CONTENT;
}

/* Ends the current message: a tool call is reported, text was already
 * streamed. */
static int end_message(chat_parser *p, chat_delta *d)
{
    int rc = TN_OK;
    if (p->recipient) {
        const char *name = p->recipient;
        if (strncmp(name, "functions.", 10) == 0)
            name += 10;
        rc = parser_emit_tool_call(p, name, strlen(name), p->body.p ? p->body.p : "",
                                   p->body.len, d);
    }
    sb_reset(&p->body);
    p->header.len = 0;
    bpe_stream_init(&p->stream, BPE_DECODE_SKIP_SPECIAL);
    return rc;
}

/* Routes decoded text: tool arguments are collected, the rest streamed. */
static int route_text(chat_parser *p, const char *s, size_t n, chat_delta *d)
{
    if (n == 0)
        return TN_OK;
    if (p->recipient)
        return sb_append(&p->body, s, n);
    int rc = sb_append(&p->delta, s, n);
    return rc == TN_OK ? parser_emit_text(p, text_kind(p), d) : rc;
}

int harmony_parser_push(chat_parser *p, int32_t id, chat_delta *d, char *err, size_t errlen)
{
    int rc = TN_OK;
    switch (p->hstate) {
    case HS_EXPECT_START:
        if (p->res.stopped) {
            tn_errf(err, errlen, "Harmony output continues after <|return|>/<|call|> (token %d)",
                     (int)id);
            return TN_ERR_ARG;
        }
        if (id != p->id_start) {
            tn_errf(err, errlen, "Harmony output: expected <|start|> after <|end|>, got token %d",
                     (int)id);
            return TN_ERR_ARG;
        }
        p->hstate = HS_HEADER;
        p->header.len = 0;
        return TN_OK;
    case HS_HEADER:
        if (id == p->id_message) {
            rc = parse_header(p, err, errlen);
            p->first_message = 0;
            if (rc == TN_OK)
                p->hstate = HS_CONTENT;
            return rc;
        }
        if (id == p->id_end || id == p->id_return || id == p->id_call || id == p->id_start) {
            tn_errf(err, errlen, "Harmony output: message header ended without <|message|>");
            return TN_ERR_ARG;
        }
        if (p->header.len >= MAX_HEADER_TOKENS) {
            tn_errf(err, errlen, "Harmony output: message header longer than %d tokens",
                     MAX_HEADER_TOKENS);
            return TN_ERR_ARG;
        }
        return tok_ids_push(&p->header, id);
    case HS_CONTENT:
        if (id == p->id_end || id == p->id_return || id == p->id_call) {
            sb_reset(&p->piece);
            rc = bpe_stream_finish(&p->stream, &p->piece);
            if (rc == TN_OK)
                rc = route_text(p, p->piece.p, p->piece.len, d);
            /* a tool call and flushed text never coincide: text of a message
             * with a recipient goes to its arguments */
            if (rc == TN_OK)
                rc = end_message(p, d);
            if (id != p->id_end)
                p->res.stopped = 1;
            p->hstate = HS_EXPECT_START;
            return rc;
        }
        rc = parser_decode(p, id, err, errlen);
        if (rc != TN_OK)
            return rc;
        return route_text(p, p->piece.p, p->piece.len, d);
    }
    return TN_ERR_ARG;
}

int harmony_parser_finish(chat_parser *p, chat_delta *d, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    if (p->hstate != HS_CONTENT)
        return TN_OK; /* nothing open, or an unfinished header: no text yet */
    sb_reset(&p->piece);
    int rc = bpe_stream_finish(&p->stream, &p->piece);
    if (rc == TN_OK)
        rc = route_text(p, p->piece.p, p->piece.len, d);
    if (rc == TN_OK)
        rc = end_message(p, d); /* a cut-off tool call is still reported */
    p->hstate = HS_EXPECT_START;
    return rc;
}
