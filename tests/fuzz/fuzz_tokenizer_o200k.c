/* libFuzzer target: the o200k tokenizer's encode, guarded encode, decode and
 * streaming decode (properties in tests/fuzz/tok_props.h). */
#define FZ_TOKENIZER "o200k"
#define FZ_TOKENIZER_NFC 0
#include "tests/fuzz/tok_target.h"
