/* Shared pieces of the libFuzzer harnesses (tests/fuzz/fuzz_*.c).
 *
 * libFuzzer calls LLVMFuzzerTestOneInput with no user pointer, so a harness
 * keeps what it loads once (a tokenizer, a scratch directory) in a static
 * that LLVMFuzzerInitialize sets and nothing else writes: the one place the
 * project's "no global mutable state" rule gives way, and only in test code.
 *
 * A violated property aborts with a message; libFuzzer records the input
 * that did it as a crash. */
#ifndef TANDEM_TESTS_FUZZ_HARNESS_H
#define TANDEM_TESTS_FUZZ_HARNESS_H
#include <stddef.h>
#include <stdint.h>
#include "tokenizer/tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_CHECK(cond) \
    ((cond) ? (void)0 : fz_fail(__FILE__, __LINE__, #cond))
void fz_fail(const char *file, int line, const char *what) __attribute__((noreturn));

/* Loads vocab/... for "qwen3" or "o200k" (TANDEM_VOCAB_DIR overrides
 * "vocab"); exits with a message naming `make deps` when it cannot. */
bpe_tokenizer *fz_load_tokenizer(const char *which);

/* A fresh private directory under TMPDIR (default /tmp) that is removed,
 * with the files the harness wrote into it, when the process exits. */
const char *fz_scratch_dir(void);
/* Writes data to dir/name (replacing it); exits on an I/O error. */
void fz_write_file(const char *dir, const char *name, const void *data, size_t size);

/* Reads a little-endian value of n bytes (n <= 4) from *p, advancing it;
 * missing bytes read as 0. */
uint32_t fz_take(const uint8_t **p, const uint8_t *end, int n);

#endif
