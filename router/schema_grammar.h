/* Structured outputs: a request's response_format (json_object,
 * json_schema) or forced tool call (tool_choice "required" or a named
 * function) compiled into a grammar program (engine/grammar.h) that the
 * workers enforce token by token.
 *
 * JSON is generated compact (no whitespace between tokens). Object
 * properties come in the schema's order, required ones always, optional
 * ones possibly skipped. Supported JSON Schema: type (one or a list),
 * properties, required, additionalProperties (false, or true/a schema:
 * nothing beyond the listed properties is generated, which such a schema
 * allows), items, enum, const, anyOf, $ref to "#", "#/$defs/..." or
 * "#/definitions/...", and the bounds minLength/maxLength,
 * minItems/maxItems (at most SG_MAX_BOUND); description, title, default,
 * examples, $schema, $id and $comment are ignored. Any other keyword
 * (pattern, format, minimum, oneOf, allOf, ...) is refused with its name.
 * Numbers have at most 16 integer and 16 fraction digits and a 3-digit
 * exponent; JSON nests at most about TM_G_MAX_DEPTH / 2 deep.
 *
 * Chat formats wrap the JSON: Harmony as the final channel
 * (<|channel|>final<|message|>JSON) or a commentary tool call
 * (<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS
 * <|call|>); Qwen3 as content or <tool_call>\n{"name":..,"arguments":..}\n
 * </tool_call>; the bytes codec and completions as plain JSON. */
#ifndef TANDEM_ROUTER_SCHEMA_GRAMMAR_H
#define TANDEM_ROUTER_SCHEMA_GRAMMAR_H
#include <stddef.h>
#include <stdint.h>
#include <cJSON.h>
#include "tokenizer/tokenizer.h"

#define SG_MAX_BOUND 1000

typedef enum sg_wrap { SG_WRAP_PLAIN = 0, SG_WRAP_HARMONY = 1, SG_WRAP_QWEN3 = 2 } sg_wrap;

/* What a request asks for, from its JSON (any may be NULL). */
typedef struct sg_request {
    const cJSON *response_format;
    const cJSON *tools;
    const cJSON *tool_choice;
} sg_request;

/* The grammar for r in the wrapping of tok's chat format (tok NULL: plain
 * JSON, the bytes codec and completions). *code is NULL when nothing is
 * constrained. TN_ERR_ARG with param ("response_format", "tool_choice",
 * "tools") and the reason in err; TN_ERR_NOMEM. */
int sg_build(const sg_request *r, const bpe_tokenizer *tok, int chat, int32_t **code, int *n_code,
             char *param, size_t param_len, char *err, size_t errlen);

/* A schema alone as plain JSON (tests, benchmarks). */
int sg_compile_schema(const cJSON *schema, int32_t **code, int *n_code, char *err, size_t errlen);
#endif
