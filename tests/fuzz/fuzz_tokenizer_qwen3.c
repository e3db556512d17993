/* libFuzzer target: the qwen3 tokenizer's encode, guarded encode, decode and
 * streaming decode (properties in tests/fuzz/tok_props.h). */
#define FZ_TOKENIZER "qwen3"
#define FZ_TOKENIZER_NFC 1
#include "tests/fuzz/tok_target.h"
