/* Format-independent half of chat_parser: creation, result accumulation,
 * dispatch to the Harmony / Qwen3 state machines. */
#include <stdlib.h>
#include <string.h>
#include "chat/chat_parser_internal.h"
#include "chat/chat_harmony.h"
#include "chat/chat_qwen3.h"
#include "tokenizer/tokenizer_internal.h"
#include "common/status.h"

chat_format chat_format_for(const bpe_tokenizer *t)
{
    return bpe_tokenizer_kind(t) == BPE_KIND_O200K_HARMONY ? CHAT_FORMAT_HARMONY : CHAT_FORMAT_QWEN3;
}

void chat_render_opts_default(chat_render_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->add_generation_prompt = 1;
    o->enable_thinking = 1;
    o->system_message = 1;
}

static int format_matches(const bpe_tokenizer *t, chat_format f, char *err, size_t errlen)
{
    if ((f == CHAT_FORMAT_HARMONY && bpe_tokenizer_kind(t) == BPE_KIND_O200K_HARMONY) ||
        (f == CHAT_FORMAT_QWEN3 && bpe_tokenizer_kind(t) == BPE_KIND_HF_QWEN))
        return TN_OK;
    tn_errf(err, errlen, "chat format %d does not go with the %s tokenizer", (int)f,
             bpe_tokenizer_name(t));
    return TN_ERR_ARG;
}

int chat_render(const bpe_tokenizer *t, chat_format f, const chat_conversation *c,
                const chat_render_opts *o, tok_ids *ids, sbuf *text, char *err, size_t errlen)
{
    if (!t || !c || !ids) {
        tn_errf(err, errlen, "chat_render: null argument");
        return TN_ERR_ARG;
    }
    if (format_matches(t, f, err, errlen) != TN_OK)
        return TN_ERR_ARG;
    chat_render_opts defaults;
    if (!o) {
        chat_render_opts_default(&defaults);
        o = &defaults;
    }
    size_t start = ids->len;
    int rc = f == CHAT_FORMAT_HARMONY ? harmony_render(t, c, o, ids, text, err, errlen)
                                      : qwen3_render(t, c, o, ids, text, err, errlen);
    if (rc != TN_OK)
        ids->len = start;
    return rc;
}

size_t chat_stop_token_ids(const bpe_tokenizer *t, chat_format f, int32_t *ids, size_t cap)
{
    const char *names[2];
    if (f == CHAT_FORMAT_HARMONY) {
        names[0] = "<|return|>";
        names[1] = "<|call|>";
    } else {
        names[0] = "<|im_end|>";
        names[1] = "<|endoftext|>";
    }
    size_t n = 0;
    for (int i = 0; i < 2 && n < cap; i++) {
        int32_t id = bpe_token_id(t, names[i]);
        if (id >= 0)
            ids[n++] = id;
    }
    return n;
}

int parser_emit_text(chat_parser *p, chat_delta_kind kind, chat_delta *d)
{
    if (p->delta.len == 0)
        return TN_OK;
    sbuf *dst = kind == CHAT_DELTA_REASONING ? &p->res.reasoning : &p->res.content;
    if (sb_append(dst, p->delta.p, p->delta.len) != TN_OK)
        return TN_ERR_NOMEM;
    d->kind = kind;
    d->text = p->delta.p;
    d->len = p->delta.len;
    return TN_OK;
}

static char *dup_n(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

int parser_emit_tool_call(chat_parser *p, const char *name, size_t name_len, const char *args,
                          size_t args_len, chat_delta *d)
{
    chat_tool_call *calls =
        realloc(p->res.tool_calls, (p->res.n_tool_calls + 1) * sizeof(*calls));
    if (!calls)
        return TN_ERR_NOMEM;
    p->res.tool_calls = calls;
    chat_tool_call *c = &calls[p->res.n_tool_calls];
    c->id = NULL;
    c->name = dup_n(name, name_len);
    c->arguments = dup_n(args, args_len);
    if (!c->name || !c->arguments) {
        free(c->name);
        free(c->arguments);
        return TN_ERR_NOMEM;
    }
    d->kind = CHAT_DELTA_TOOL_CALL;
    d->tool_call = c;
    d->tool_index = p->res.n_tool_calls++;
    return TN_OK;
}

int parser_decode(chat_parser *p, int32_t id, char *err, size_t errlen)
{
    sb_reset(&p->piece);
    return bpe_stream_push(p->tok, &p->stream, id, &p->piece, err, errlen);
}

int chat_parser_new(const bpe_tokenizer *t, chat_format f, const chat_parse_opts *o,
                    chat_parser **out, char *err, size_t errlen)
{
    *out = NULL;
    if (format_matches(t, f, err, errlen) != TN_OK)
        return TN_ERR_ARG;
    chat_parser *p = calloc(1, sizeof(*p));
    if (!p) {
        tn_errf(err, errlen, "out of memory");
        return TN_ERR_NOMEM;
    }
    p->tok = t;
    p->fmt = f;
    sb_init(&p->res.reasoning);
    sb_init(&p->res.content);
    sb_init(&p->delta);
    sb_init(&p->piece);
    sb_init(&p->body);
    sb_init(&p->call);
    tok_ids_init(&p->header);
    bpe_stream_init(&p->stream, BPE_DECODE_SKIP_SPECIAL);
    chat_parse_opts none = {0};
    int rc = f == CHAT_FORMAT_HARMONY ? harmony_parser_init(p, err, errlen)
                                      : qwen3_parser_init(p, o ? o : &none, err, errlen);
    if (rc != TN_OK) {
        chat_parser_free(p);
        return rc;
    }
    *out = p;
    return TN_OK;
}

void chat_parser_free(chat_parser *p)
{
    if (!p)
        return;
    sb_free(&p->res.reasoning);
    sb_free(&p->res.content);
    for (size_t i = 0; i < p->res.n_tool_calls; i++) {
        free(p->res.tool_calls[i].id);
        free(p->res.tool_calls[i].name);
        free(p->res.tool_calls[i].arguments);
    }
    free(p->res.tool_calls);
    sb_free(&p->delta);
    sb_free(&p->piece);
    sb_free(&p->body);
    sb_free(&p->call);
    tok_ids_free(&p->header);
    free(p->channel);
    free(p->recipient);
    free(p);
}

int chat_parser_push(chat_parser *p, int32_t id, chat_delta *d, char *err, size_t errlen)
{
    memset(d, 0, sizeof(*d));
    if (p->done) {
        tn_errf(err, errlen, "chat parser: token after finish");
        return TN_ERR_ARG;
    }
    sb_reset(&p->delta);
    int rc = p->fmt == CHAT_FORMAT_HARMONY ? harmony_parser_push(p, id, d, err, errlen)
                                           : qwen3_parser_push(p, id, d, err, errlen);
    if (rc == TN_ERR_NOMEM)
        tn_errf(err, errlen, "out of memory");
    return rc;
}

int chat_parser_finish(chat_parser *p, chat_delta *d, char *err, size_t errlen)
{
    memset(d, 0, sizeof(*d));
    if (p->done)
        return TN_OK;
    p->done = 1;
    sb_reset(&p->delta);
    int rc = p->fmt == CHAT_FORMAT_HARMONY ? harmony_parser_finish(p, d, err, errlen)
                                           : qwen3_parser_finish(p, d, err, errlen);
    if (rc == TN_ERR_NOMEM)
        tn_errf(err, errlen, "out of memory");
    return rc;
}

const chat_result *chat_parser_result(const chat_parser *p)
{
    return &p->res;
}

int chat_parse_completion(const bpe_tokenizer *t, chat_format f, const chat_parse_opts *o,
                          const int32_t *ids, size_t n, chat_parser **out, char *err,
                          size_t errlen)
{
    chat_parser *p;
    int rc = chat_parser_new(t, f, o, &p, err, errlen);
    if (rc != TN_OK)
        return rc;
    chat_delta d;
    for (size_t i = 0; i < n && rc == TN_OK; i++)
        rc = chat_parser_push(p, ids[i], &d, err, errlen);
    if (rc == TN_OK)
        rc = chat_parser_finish(p, &d, err, errlen);
    if (rc != TN_OK) {
        chat_parser_free(p);
        return rc;
    }
    *out = p;
    return TN_OK;
}
