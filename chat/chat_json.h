/* JSON text output the chat formats need to reproduce byte for byte:
 * Python's json.dumps (what HF chat templates' `tojson` and Qwen's tool
 * call arguments use) and serde_json's compact form (what openai-harmony
 * prints for schema defaults). */
#ifndef TANDEM_CHAT_CHAT_JSON_H
#define TANDEM_CHAT_CHAT_JSON_H
#include <cJSON.h>
#include "common/sbuf.h"

/* json.dumps(v, ensure_ascii=False): ", " and ": " separators, keys in
 * document order, non-ASCII kept, control characters escaped. Numbers: an
 * integral value within 2^53 prints as an integer, anything else as
 * Python's float repr (cJSON does not keep the source spelling, so an
 * input "1.0" prints as "1"). Returns 0 or TN_ERR_NOMEM. */
int json_dump_python(const cJSON *v, sbuf *out);

/* Compact JSON (no spaces), same number rule. */
int json_dump_compact(const cJSON *v, sbuf *out);

/* A JSON string literal for s (quotes included), escaped as Python does. */
int json_dump_string(const char *s, sbuf *out);

#endif
