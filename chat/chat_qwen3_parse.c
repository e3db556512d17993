/* Qwen3 output parsing, on token ids: <think> .. </think> is reasoning,
 * <tool_call>{"name": .., "arguments": {..}}</tool_call> a tool call, the
 * rest content; <|im_end|> / <|endoftext|> stop. Newlines that only frame
 * these blocks (after <think>, before </think>, after </think>, before and
 * between tool calls) are dropped, the way the chat template strips them
 * when the turn is rendered back; they are held back while streaming until
 * it is known whether text follows. */
#include <string.h>
#include "chat/chat_parser_internal.h"
#include "chat/chat_json.h"
#include "tokenizer/tokenizer_internal.h"
#include "common/status.h"

int qwen3_parser_init(chat_parser *p, const chat_parse_opts *o, char *err, size_t errlen)
{
    p->id_think = bpe_token_id(p->tok, "<think>");
    p->id_think_end = bpe_token_id(p->tok, "</think>");
    p->id_tool_call = bpe_token_id(p->tok, "<tool_call>");
    p->id_tool_call_end = bpe_token_id(p->tok, "</tool_call>");
    p->id_im_end = bpe_token_id(p->tok, "<|im_end|>");
    p->id_eot = bpe_token_id(p->tok, "<|endoftext|>");
    if (p->id_think < 0 || p->id_think_end < 0 || p->id_tool_call < 0 || p->id_tool_call_end < 0 ||
        p->id_im_end < 0 || p->id_eot < 0) {
        tn_errf(err, errlen, "tokenizer %s lacks the Qwen3 chat tokens", bpe_tokenizer_name(p->tok));
        return TN_ERR_ARG;
    }
    p->qmode = o->start_in_reasoning ? QM_REASONING : QM_CONTENT;
    p->at_start = o->start_in_reasoning;
    return TN_OK;
}

static chat_delta_kind mode_kind(const chat_parser *p)
{
    return p->qmode == QM_REASONING ? CHAT_DELTA_REASONING : CHAT_DELTA_CONTENT;
}

/* Text for the current reasoning/content section: drop leading newlines at
 * the start of a section, hold trailing ones back. */
static int section_text(chat_parser *p, const char *s, size_t n, chat_delta *d)
{
    if (p->at_start) {
        while (n && *s == '\n') {
            s++;
            n--;
        }
        if (n == 0)
            return TN_OK;
        p->at_start = 0;
    }
    size_t trail = 0;
    while (trail < n && s[n - 1 - trail] == '\n')
        trail++;
    if (trail == n) {
        p->held_newlines += n;
        return TN_OK;
    }
    int rc = TN_OK;
    for (size_t i = 0; i < p->held_newlines && rc == TN_OK; i++)
        rc = sb_putc(&p->delta, '\n');
    if (rc == TN_OK)
        rc = sb_append(&p->delta, s, n - trail);
    p->held_newlines = trail;
    return rc == TN_OK ? parser_emit_text(p, mode_kind(p), d) : rc;
}

/* Emits held newlines and an incomplete trailing character (the output
 * ended here). */
static int flush_section(chat_parser *p, chat_delta *d)
{
    sb_reset(&p->piece);
    int rc = bpe_stream_finish(&p->stream, &p->piece);
    if (rc != TN_OK)
        return rc;
    if (p->qmode == QM_TOOL_CALL)
        return sb_append(&p->call, p->piece.p, p->piece.len);
    for (size_t i = 0; i < p->held_newlines && rc == TN_OK; i++)
        rc = sb_putc(&p->delta, '\n');
    p->held_newlines = 0;
    if (rc == TN_OK && p->piece.len)
        rc = sb_append(&p->delta, p->piece.p, p->piece.len);
    return rc == TN_OK ? parser_emit_text(p, mode_kind(p), d) : rc;
}

/* Ends a section at a block token: its trailing newlines are dropped. */
static int close_section(chat_parser *p, chat_delta *d)
{
    sb_reset(&p->piece);
    int rc = bpe_stream_finish(&p->stream, &p->piece);
    if (rc == TN_OK && p->piece.len)
        rc = section_text(p, p->piece.p, p->piece.len, d);
    p->held_newlines = 0;
    return rc;
}

/* A complete <tool_call> block: JSON with a string "name" becomes a tool
 * call (arguments re-serialized as Python's json.dumps, as vLLM does);
 * anything else is given back as content, tags included. */
static int end_tool_call(chat_parser *p, chat_delta *d)
{
    sb_reset(&p->piece);
    int rc = bpe_stream_finish(&p->stream, &p->piece);
    if (rc == TN_OK)
        rc = sb_append(&p->call, p->piece.p, p->piece.len);
    if (rc != TN_OK)
        return rc;
    cJSON *j = cJSON_ParseWithLength(p->call.p ? p->call.p : "", p->call.len);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(j, "arguments");
    if (cJSON_IsObject(j) && cJSON_IsString(name)) {
        sbuf a;
        sb_init(&a);
        if (cJSON_IsString(args))
            rc = sb_puts(&a, args->valuestring);
        else if (args)
            rc = json_dump_python(args, &a);
        else
            rc = sb_puts(&a, "{}");
        if (rc == TN_OK)
            rc = parser_emit_tool_call(p, name->valuestring, strlen(name->valuestring),
                                       a.p ? a.p : "", a.len, d);
        sb_free(&a);
    } else {
        rc = sb_puts(&p->delta, "<tool_call>");
        if (rc == TN_OK)
            rc = sb_append(&p->delta, p->call.p, p->call.len);
        if (rc == TN_OK)
            rc = sb_puts(&p->delta, "</tool_call>");
        if (rc == TN_OK)
            rc = parser_emit_text(p, CHAT_DELTA_CONTENT, d);
    }
    cJSON_Delete(j);
    sb_reset(&p->call);
    return rc;
}

int qwen3_parser_push(chat_parser *p, int32_t id, chat_delta *d, char *err, size_t errlen)
{
    if (p->res.stopped) {
        tn_errf(err, errlen, "Qwen3 output continues after <|im_end|> (token %d)", (int)id);
        return TN_ERR_ARG;
    }
    if (id == p->id_im_end || id == p->id_eot) {
        p->res.stopped = 1;
        if (p->qmode == QM_TOOL_CALL) /* unterminated call: give it back as text */
            return qwen3_parser_finish(p, d, err, errlen);
        return flush_section(p, d);
    }
    if (p->qmode == QM_TOOL_CALL) {
        if (id == p->id_tool_call_end) {
            int rc = end_tool_call(p, d);
            p->qmode = QM_CONTENT;
            p->at_start = 1;
            return rc;
        }
        int rc = parser_decode(p, id, err, errlen);
        return rc == TN_OK ? sb_append(&p->call, p->piece.p, p->piece.len) : rc;
    }
    if (id == p->id_think || id == p->id_think_end || id == p->id_tool_call) {
        int rc = close_section(p, d);
        if (id == p->id_think) {
            p->qmode = QM_REASONING;
            p->at_start = 1;
        } else if (id == p->id_think_end) {
            p->qmode = QM_CONTENT;
            p->at_start = 1;
        } else {
            p->qmode = QM_TOOL_CALL;
            sb_reset(&p->call);
        }
        return rc;
    }
    int rc = parser_decode(p, id, err, errlen);
    return rc == TN_OK ? section_text(p, p->piece.p, p->piece.len, d) : rc;
}

int qwen3_parser_finish(chat_parser *p, chat_delta *d, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    if (p->qmode != QM_TOOL_CALL)
        return flush_section(p, d);
    sb_reset(&p->piece);
    int rc = bpe_stream_finish(&p->stream, &p->piece);
    if (rc == TN_OK)
        rc = sb_puts(&p->delta, "<tool_call>");
    if (rc == TN_OK)
        rc = sb_append(&p->delta, p->call.p ? p->call.p : "", p->call.len);
    if (rc == TN_OK)
        rc = sb_append(&p->delta, p->piece.p ? p->piece.p : "", p->piece.len);
    if (rc == TN_OK)
        rc = parser_emit_text(p, CHAT_DELTA_CONTENT, d);
    p->qmode = QM_CONTENT;
    sb_reset(&p->call);
    return rc;
}
