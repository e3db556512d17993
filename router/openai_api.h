/* The OpenAI-compatible HTTP API: parsing and validating request bodies
 * (cJSON) and writing response bodies and server-sent-event chunks in
 * OpenAI's shapes. Pure functions: no sockets, no router state, so unit
 * tests cover every rule.
 *
 * Validation follows OpenAI's rules and error body
 *   {"error":{"message":..., "type":"invalid_request_error", "param":..., "code":...}}
 * Unknown fields are refused (400 unknown_parameter, as OpenAI does); known
 * fields Tandem does not implement (echo, suffix, tool_choice other than
 * "auto", a response_format other than text, audio, ...) are rejected when
 * set to a
 * non-default value rather than silently ignored; metadata fields (user,
 * metadata, store, service_tier, ...) are accepted and ignored. Checks that need the model
 * (vocabulary, context length) happen in the router. */
#ifndef TANDEM_ROUTER_OPENAI_API_H
#define TANDEM_ROUTER_OPENAI_API_H
#include <stddef.h>
#include <stdint.h>
#include <cJSON.h>
#include "common/sbuf.h"

#define API_MAX_STOP 4
#define API_MAX_MODEL 128
#define API_MAX_TOP_LOGPROBS 20   /* top_logprobs / completions logprobs: 0..20 (OpenAI, vLLM) */
#define API_MAX_LOGIT_BIAS 1024   /* logit_bias entries per request */
#define API_MAX_CHOICES 128       /* n (and best_of) x prompts per request */

typedef enum { API_COMPLETIONS = 0, API_CHAT = 1 } api_kind;

typedef struct api_error {
    int http_status;
    char message[512];
    char type[40];
    char param[40];   /* "" is JSON null */
    char code[48];    /* "" is JSON null */
} api_error;

/* Fills e; param and code may be NULL (JSON null). */
void api_error_set(api_error *e, int http_status, const char *type, const char *param,
                   const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* The error body as JSON (malloc'd; NULL on OOM). */
char *api_error_json(const api_error *e);

typedef struct api_message {
    char role[16];    /* system, developer, user, assistant, tool */
    char *content;    /* text (array-of-parts content is joined); may hold NUL bytes */
    size_t content_len;
} api_message;

/* One completions prompt: text (may hold NUL bytes: text_len is its
 * length), or token ids. */
typedef struct api_prompt {
    char *text;
    size_t text_len;
    int32_t *ids;
    int n_ids;
} api_prompt;

typedef struct api_request {
    api_kind kind;
    char model[API_MAX_MODEL];
    api_prompt *prompts;      /* completions: one or more prompts (a list of them:
                                 one choice per prompt and branch) */
    int n_prompts;
    int n;                    /* choices per prompt (1..API_MAX_CHOICES) */
    int best_of;              /* completions: candidates per prompt (>= n; the n
                                 with the highest cumulative logprob are returned) */
    api_message *messages;    /* chat */
    int n_messages;
    cJSON *messages_json;     /* chat: the request's messages and tools arrays */
    cJSON *tools_json;        /* (owned copies) for the chat formats; tools NULL if none
                                 (and with tool_choice "none": no tools are rendered) */
    cJSON *response_format_json; /* chat: owned copy unless absent or {"type":"text"} */
    cJSON *tool_choice_json;  /* chat: owned copy of "required" or a named function */
    int content_has_nul;      /* chat: a message's text holds a NUL, which the JSON
                                 copies above cannot carry (their strings end there) */
    char reasoning_effort[8]; /* chat: "low" | "medium" | "high" | "" (default) */
    int enable_thinking;      /* chat_template_kwargs.enable_thinking: -1 unset, 0, 1 */
    int max_tokens;           /* 0: not given (the router applies its default) */
    double temperature;       /* default 1 */
    double top_p;             /* default 1 */
    int top_k;                /* extension; default -1 (off) */
    int has_seed;
    uint64_t seed;
    int stream;
    int include_usage;        /* stream_options.include_usage */
    char *stop[API_MAX_STOP]; /* stop strings */
    int n_stop;
    int32_t *stop_token_ids;  /* extension (as in vLLM) */
    int n_stop_token_ids;
    int ignore_eos;           /* extension */
    int return_token_ids;     /* extension: add "token_ids" to each choice */
    double presence_penalty;  /* [-2, 2], default 0 */
    double frequency_penalty; /* [-2, 2], default 0 */
    double repetition_penalty; /* extension (vLLM): > 0, default 1 (none) */
    int32_t *bias_tokens;     /* logit_bias: token ids (each once; the router */
    float *bias_values;       /* checks them against the vocabulary), [-100, 100] */
    int n_bias;
    int echo;                 /* completions: the prompt's text starts each choice's */
    int logprobs;             /* -1: none; else how many alternatives per token
                                 (completions: logprobs k; chat: top_logprobs
                                 with logprobs true) */
} api_request;

/* Parses and validates a request body. Returns 0, or -1 with e filled
 * (HTTP 400, invalid_request_error). On failure *out holds nothing.
 * An escaped NUL (\u0000) is text in a prompt and in message content
 * (prompts[i].text / content keep it, with their lengths); anywhere else (model,
 * role, tool and function names, stop strings, keys, ...) it is a 400
 * naming the field. */
int api_parse_request(api_kind kind, const char *body, size_t len, api_request *out,
                      api_error *e);
void api_request_free(api_request *r);

/* An upper bound on the bytes api_parse_request and then the prompt's
 * tokenization hold at once for body[0..len) (the body itself not
 * counted), from one pass that allocates nothing: while parsing, a cJSON
 * node (64 bytes + the allocator's header) per value and per string, every
 * string's bytes in the tree and copied out as text (with escaped NULs
 * also the second parse and its copy of the body); then the text and up
 * to one 4-byte id per byte. The router reserves it against
 * --http-memory-budget-mb before parsing. */
size_t api_parse_cost(const char *body, size_t len);

typedef struct api_tool_call {
    const char *id, *name, *arguments;
} api_tool_call;

/* One token in a logprobs listing: its text as the bytes the tokenizer
 * gives it (bytes NULL: the router has no vocabulary, --tokenizer none; the
 * token is then written "token_id:<id>" with "bytes":null) and its
 * log-probability (-inf is written -9999.0, as OpenAI does). */
typedef struct api_lp_entry {
    const char *bytes;
    size_t len;
    int32_t id;
    float logprob;
} api_lp_entry;

/* A generated token with its alternatives (most likely first). */
typedef struct api_lp_token {
    api_lp_entry tok;
    const api_lp_entry *top;
    int n_top;
    long text_offset;             /* completions: characters of text before it */
    int no_logprob;               /* echo's first prompt token: null logprob and
                                     alternatives (nothing comes before it) */
} api_lp_token;

/* What one streamed chunk (or the final response) carries. */
typedef struct api_output {
    const char *text;             /* valid UTF-8 (chat: content) */
    size_t text_len;
    const char *reasoning;        /* chat: reasoning_content, valid UTF-8 */
    size_t reasoning_len;
    const api_tool_call *tool_calls; /* chat: tool calls in this chunk / response */
    int n_tool_calls;
    int tool_index;               /* streaming: index of tool_calls[0] in the response */
    int omit_empty_content;       /* chat chunks: leave out "content" when empty */
    const int32_t *token_ids;     /* emitted only when with_token_ids */
    int n_token_ids;
    int with_token_ids;
    const char *finish_reason;    /* "stop" | "length" | NULL (still running) */
    const char *fingerprint;      /* "system_fingerprint" (NULL: left out) */
    int usage_null;               /* chunks: add "usage":null (include_usage) */
    int with_logprobs;            /* the request asked for logprobs: write them
                                     (else "logprobs":null) */
    const api_lp_token *logprobs; /* the tokens of this chunk / response */
    int n_logprobs;
    int index;                    /* the choice's index */
} api_output;

/* The system_fingerprint of responses for model: "tandem-" API_FINGERPRINT_VERSION
 * "-" and the model name (cut to fit n). */
#define API_FINGERPRINT_VERSION "1"
void api_system_fingerprint(char *out, size_t n, const char *model);

/* x-request-id: whether the client's value is echoed (1..API_MAX_REQUEST_ID
 * bytes of printable ASCII, 0x20..0x7E). */
#define API_MAX_REQUEST_ID 128
int api_request_id_ok(const char *v);

/* One SSE event "data: {...}\n\n" appended to b, in the exact shape of an
 * OpenAI text_completion chunk / chat.completion.chunk. For chat,
 * first_chunk carries the assistant role with empty content. */
void api_sse_completion_chunk(sbuf *b, const char *id, long created, const char *model,
                              const api_output *o);
void api_sse_chat_chunk(sbuf *b, const char *id, long created, const char *model,
                        const api_output *o, int first_chunk);
/* The final usage-only chunk (stream_options.include_usage). */
void api_sse_usage_chunk(sbuf *b, api_kind kind, const char *id, long created,
                         const char *model, const char *fingerprint, int prompt_tokens,
                         int completion_tokens); /* fingerprint NULL: left out */
/* An error in the middle of a stream: "data: {"error":{...}}\n\n". */
void api_sse_error(sbuf *b, const api_error *e);
void api_sse_done(sbuf *b);

/* Non-streaming bodies. */
void api_completion_body(sbuf *b, const char *id, long created, const char *model,
                         const api_output *o, int prompt_tokens, int completion_tokens);
void api_chat_body(sbuf *b, const char *id, long created, const char *model,
                   const api_output *o, int prompt_tokens, int completion_tokens);
/* The same with several choices (o[i].index each; the fingerprint is
 * o[0]'s; usage sums over the choices, prompts counted once each). */
void api_completion_body_n(sbuf *b, const char *id, long created, const char *model,
                           const api_output *o, int n_choices, int prompt_tokens,
                           int completion_tokens);
void api_chat_body_n(sbuf *b, const char *id, long created, const char *model,
                     const api_output *o, int n_choices, int prompt_tokens, int completion_tokens);
/* GET /v1/models */
void api_models_body(sbuf *b, const char *const *models, int n_models, long created);
/* GET /v1/models/{id}: one entry of the list. */
void api_model_body(sbuf *b, const char *model, long created);

#endif
