/* Internal state of chat_parser (chat/chat.h), shared by the generic
 * part (chat_parser.c) and the per-format state machines
 * (chat_harmony_parse.c, chat_qwen3_parse.c). */
#ifndef TANDEM_CHAT_CHAT_PARSER_INTERNAL_H
#define TANDEM_CHAT_CHAT_PARSER_INTERNAL_H
#include "chat/chat.h"

enum harmony_state { HS_EXPECT_START, HS_HEADER, HS_CONTENT };
enum qwen_mode { QM_CONTENT, QM_REASONING, QM_TOOL_CALL };

struct chat_parser {
    const bpe_tokenizer *tok;
    chat_format fmt;
    chat_result res;
    sbuf delta;      /* text of the delta being returned */
    sbuf piece;      /* scratch: text decoded from one token */
    bpe_stream stream; /* UTF-8 assembly of content tokens */
    int done;          /* finish was called */

    /* Harmony */
    enum harmony_state hstate;
    int first_message;     /* header of the message the prompt opened */
    tok_ids header;
    char *channel, *recipient;
    sbuf body;           /* arguments of a tool call being generated */
    int32_t id_start, id_message, id_end, id_return, id_call;

    /* Qwen3 */
    enum qwen_mode qmode;
    int at_start;          /* leading newlines of this section are dropped */
    size_t held_newlines;  /* trailing newlines not yet emitted */
    sbuf call;           /* text of a <tool_call> block */
    int32_t id_think, id_think_end, id_tool_call, id_tool_call_end, id_im_end, id_eot;
};

int harmony_parser_init(chat_parser *p, char *err, size_t errlen);
int harmony_parser_push(chat_parser *p, int32_t id, chat_delta *d, char *err, size_t errlen);
int harmony_parser_finish(chat_parser *p, chat_delta *d, char *err, size_t errlen);

int qwen3_parser_init(chat_parser *p, const chat_parse_opts *o, char *err, size_t errlen);
int qwen3_parser_push(chat_parser *p, int32_t id, chat_delta *d, char *err, size_t errlen);
int qwen3_parser_finish(chat_parser *p, chat_delta *d, char *err, size_t errlen);

/* Shared helpers (chat_parser.c). */
/* Sets *d to a text delta of p->delta appended to the result. */
int parser_emit_text(chat_parser *p, chat_delta_kind kind, chat_delta *d);
/* Appends a tool call (copies) and sets *d to it. */
int parser_emit_tool_call(chat_parser *p, const char *name, size_t name_len, const char *args,
                          size_t args_len, chat_delta *d);
/* Decodes one token into p->piece (only complete characters). */
int parser_decode(chat_parser *p, int32_t id, char *err, size_t errlen);

#endif
