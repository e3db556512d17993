/* Chat formats: turning an OpenAI-style conversation into prompt token ids,
 * and the model's output token ids back into reasoning, content and tool
 * calls.
 *
 *  CHAT_FORMAT_HARMONY  GPT-OSS (o200k_harmony tokenizer). System message
 *                       with identity, dates, reasoning effort and channels;
 *                       developer message with instructions and the
 *                       `functions` namespace; output channels analysis
 *                       (reasoning), commentary (tool calls, preambles) and
 *                       final (content).
 *  CHAT_FORMAT_QWEN3    ChatML with <think> (Qwen3 tokenizer), exactly the
 *                       chat template of the Qwen3 tokenizer_config.json.
 *
 * docs/CHAT_FORMATS.md shows the exact layouts. Both renderers are tested
 * against the token ids of the reference formats (tests/fixtures). */
#ifndef TANDEM_CHAT_CHAT_H
#define TANDEM_CHAT_CHAT_H
#include <stddef.h>
#include <stdint.h>
#include <cJSON.h>
#include "common/sbuf.h"
#include "common/tok_ids.h"
#include "tokenizer/tokenizer.h"

typedef enum chat_format {
    CHAT_FORMAT_HARMONY = 1,
    CHAT_FORMAT_QWEN3 = 2,
} chat_format;

/* The chat format that goes with a tokenizer (Harmony for o200k_harmony,
 * Qwen3 ChatML for the Qwen3 tokenizer.json). */
chat_format chat_format_for(const bpe_tokenizer *t);

typedef enum chat_role {
    CHAT_ROLE_SYSTEM = 1,
    CHAT_ROLE_DEVELOPER,
    CHAT_ROLE_USER,
    CHAT_ROLE_ASSISTANT,
    CHAT_ROLE_TOOL,
} chat_role;

typedef struct chat_tool_call {
    char *id;        /* may be NULL */
    char *name;      /* function name */
    char *arguments; /* JSON text, as OpenAI's function.arguments string */
} chat_tool_call;

typedef struct chat_message {
    chat_role role;
    char *content;      /* NULL when absent (assistant with only tool calls) */
    char *reasoning;    /* assistant "reasoning_content" (or "reasoning"), NULL if absent */
    chat_tool_call *tool_calls;
    size_t n_tool_calls;
    char *tool_call_id; /* tool messages */
    char *name;         /* tool messages: the function name when the client sends it */
} chat_message;

typedef struct chat_conversation {
    chat_message *messages;
    size_t n_messages;
    cJSON *tools; /* owned duplicate of the request's "tools" array, or NULL */
} chat_conversation;

/* Builds a conversation from the request's "messages" array and optional
 * "tools" array (OpenAI chat completions shape). Content may be a string,
 * null, or an array of {"type":"text","text":...} parts; other part types
 * are rejected. Returns 0 or TN_ERR_ARG with a message naming the field
 * ("messages[2].role: unknown role 'bot'"). */
int chat_conversation_from_json(const cJSON *messages, const cJSON *tools, chat_conversation *out,
                                char *err, size_t errlen);
void chat_conversation_free(chat_conversation *c);

typedef struct chat_render_opts {
    int add_generation_prompt;    /* end with the assistant turn opener (default 1) */
    /* Qwen3 */
    int enable_thinking;          /* 0: append the empty <think></think> block (default 1) */
    int plain_content;            /* 1: special-token strings inside message text stay text.
                                     Default 0 = what HF apply_chat_template + encode does */
    /* Harmony (NULL = default) */
    const char *reasoning_effort; /* "low" | "medium" | "high" (default "medium") */
    const char *model_identity;   /* default "You are ChatGPT, a large language model trained by OpenAI." */
    const char *knowledge_cutoff; /* default "2024-06" */
    const char *current_date;     /* "YYYY-MM-DD"; NULL omits the line */
    int system_message;           /* 0 omits the system message (default 1) */
} chat_render_opts;

void chat_render_opts_default(chat_render_opts *o);

/* Renders the conversation into prompt token ids (appended to ids). When
 * text is not NULL the rendered prompt text is appended to it too (special
 * tokens spelled out). Returns 0 or TN_ERR_ARG with a reason (e.g. a tool
 * message whose tool_call_id matches no earlier tool call, a tool schema
 * that is not an object). */
int chat_render(const bpe_tokenizer *t, chat_format f, const chat_conversation *c,
                const chat_render_opts *o, tok_ids *ids, sbuf *text, char *err,
                size_t errlen);

/* Token ids that end generation for the format: Harmony <|return|> and
 * <|call|>; Qwen3 <|im_end|> and <|endoftext|>. Returns how many were
 * written (at most cap). */
size_t chat_stop_token_ids(const bpe_tokenizer *t, chat_format f, int32_t *ids, size_t cap);

/* ---- parsing the model's output ---- */

typedef enum chat_delta_kind {
    CHAT_DELTA_NONE = 0,
    CHAT_DELTA_REASONING, /* text to append to reasoning_content */
    CHAT_DELTA_CONTENT,   /* text to append to content */
    CHAT_DELTA_TOOL_CALL, /* a complete tool call (tool_calls[tool_index]) */
} chat_delta_kind;

typedef struct chat_delta {
    chat_delta_kind kind;
    const char *text; /* REASONING / CONTENT: complete UTF-8, valid until the next call */
    size_t len;
    const chat_tool_call *tool_call; /* TOOL_CALL */
    size_t tool_index;
} chat_delta;

typedef struct chat_result {
    sbuf reasoning;
    sbuf content;
    chat_tool_call *tool_calls;
    size_t n_tool_calls;
    int stopped; /* a stop token ended the output (else: length limit or cut) */
} chat_result;

typedef struct chat_parse_opts {
    /* Qwen3: the prompt already opened <think> (thinking-only models whose
     * template ends with "<think>\n"), so output starts as reasoning. */
    int start_in_reasoning;
} chat_parse_opts;

typedef struct chat_parser chat_parser;

/* Creates a parser for one completion. The prompt must have ended with the
 * assistant turn opener (chat_render with add_generation_prompt). */
int chat_parser_new(const bpe_tokenizer *t, chat_format f, const chat_parse_opts *o,
                    chat_parser **out, char *err, size_t errlen);
void chat_parser_free(chat_parser *p);

/* Feeds one generated token. *d receives what became visible (often
 * CHAT_DELTA_NONE: a header token, half a character, a held-back newline).
 * Returns 0, or TN_ERR_ARG when the output breaks the format (e.g. Harmony
 * text where a <|start|> is required). */
int chat_parser_push(chat_parser *p, int32_t id, chat_delta *d, char *err, size_t errlen);

/* Ends the output: flushes held-back text (an unfinished tool call becomes
 * content) into *d. */
int chat_parser_finish(chat_parser *p, chat_delta *d, char *err, size_t errlen);

/* Everything parsed so far (complete after chat_parser_finish). */
const chat_result *chat_parser_result(const chat_parser *p);

/* Convenience: parse a whole completion. */
int chat_parse_completion(const bpe_tokenizer *t, chat_format f, const chat_parse_opts *o,
                          const int32_t *ids, size_t n, chat_parser **out, char *err,
                          size_t errlen);

#endif
