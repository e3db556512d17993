/* The properties both tokenizer fuzz targets check on every input. */
#ifndef TANDEM_TESTS_FUZZ_TOK_PROPS_H
#define TANDEM_TESTS_FUZZ_TOK_PROPS_H
#include <stddef.h>
#include <stdint.h>
#include "tokenizer/tokenizer.h"

/* data[0] picks the mode, the rest is the payload:
 *  - encode (bit 0 clear): the payload as text, with special tokens
 *    recognised when bit 1 is set, or guarded (bit 2: bytes 0x01 delimit
 *    guarded ranges). Valid UTF-8 must encode to in-range ids that decode
 *    back to the text (its NFC form when nfc is set); invalid UTF-8 must
 *    fail with TN_ERR_ARG and a message.
 *  - decode (bit 0 set): the payload as 24-bit ids, some past the
 *    vocabulary. In-range ids decode to valid UTF-8, and streaming them one
 *    by one yields the same text; an out-of-range id is TN_ERR_ARG.
 * vocab is bpe_vocab_size(t) (which scans, so the caller keeps it). */
void fz_tokenizer_input(const bpe_tokenizer *t, int32_t vocab, int nfc, const uint8_t *data,
                        size_t size);

#endif
