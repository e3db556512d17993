/* Helpers for the engine tests: fixture paths, the HF golden outputs, error
 * norms, scratch directories and a small safetensors writer for building
 * damaged model directories. Linked into every test binary; names carry
 * the et_ prefix. */
#ifndef TANDEM_TESTS_ENGINE_TESTUTIL_H
#define TANDEM_TESTS_ENGINE_TESTUTIL_H
#include <stddef.h>
#include <stdint.h>
#include "engine/model.h"
#include "engine/safetensors.h"

#define ET_GPT_OSS "tests/fixtures/gpt_oss_tiny"
#define ET_QWEN3 "tests/fixtures/qwen3_moe_tiny"

/* golden.safetensors of a fixture, converted to host arrays. */
typedef struct et_golden {
    int T, V, G, L, H;          /* prompt len, vocab, generated, layers, hidden */
    int32_t *prompt;            /* [T] */
    float *prompt_logits;       /* [T][V] */
    float *hidden;              /* [L+1][T][H] */
    int32_t *gen_ids;           /* [G] */
    float *gen_logits;          /* [G][V] */
    float *gen_margin;          /* [G] */
} et_golden;

/* A fixture model on the CPU backend with its HF golden outputs: what the
 * engine tests load per family (ET_GPT_OSS, ET_QWEN3). */
typedef struct et_family {
    const char *dir;
    kn_backend be;
    tm_model *m;
    et_golden g;
} et_family;

/* Starts the CPU backend and loads f->dir's model and golden; 0 when they
 * load and agree on the vocabulary, else -1 (a message in err). */
int et_family_open(et_family *f, char *err, size_t errlen);
/* Frees what et_family_open made (safe after a failed open). */
void et_family_close(et_family *f);
/* The two as a cmocka setup / teardown pair for *state = an et_family
 * (the open's message on stderr when it fails). */
int et_family_setup(void **state);
int et_family_teardown(void **state);

/* Returns 0 on success; on failure a message is in err. */
int et_golden_load(const char *fixture_dir, et_golden *g, char *err, size_t errlen);
void et_golden_free(et_golden *g);

/* ||a - b|| / ||b|| in double. */
double et_rel_err(const float *a, const float *b, size_t n);
/* Index of the largest value (lowest index on ties). */
int et_argmax(const float *x, int n);

/* "D" or "D0,D1,...": the GPU ordinal (0..63) of each of n ranks into
 * dev[0..n-1] (common/options.h's list parser; at most n entries); ranks
 * past the list's end take its last device. -1 on a malformed list. */
int et_device_list(const char *s, int *dev, int n);
/* Prefills prompt[0..T) through m (a cache of its own, pages of 16) and
 * runs n greedy steps: all (if not NULL) gets the prompt's logits [T][V],
 * ids the n greedy tokens (the first from the prefill). Returns TN_OK or
 * the first failing call's status. */
int et_run_greedy(tm_model *m, const kn_backend *be, const int32_t *prompt, int T,
                  float *all, int32_t *ids, int n);

/* mkdtemp under $TMPDIR or /tmp; path written into buf (>= 64 bytes). */
int et_tmpdir(char *buf, size_t n);
/* Removes a directory tree (only what et_tmpdir made). */
void et_rm_rf(const char *dir);
int et_copy_file(const char *src, const char *dst);
/* Copies the first `bytes` bytes of src to dst. */
int et_copy_prefix(const char *src, const char *dst, size_t bytes);
int et_write_file(const char *path, const void *data, size_t n);
/* dir/name into buf. */
const char *et_path(char *buf, size_t n, const char *dir, const char *name);

/* A tensor to write: data must hold the bytes the dtype and shape need. */
typedef struct et_tensor {
    char name[160];
    char dtype[16];
    int ndim;
    int64_t shape[8];
    const void *data;
    size_t nbytes;
} et_tensor;

/* Writes a safetensors file (header padded to 8 bytes). Returns 0 or -1. */
int et_st_write(const char *path, const et_tensor *t, int n);

/* Every tensor of an opened checkpoint as write entries pointing into its
 * mapping (the caller edits the list, then writes it). *out is malloc'd. */
int et_st_entries(const tm_safetensors *st, et_tensor **out, int *n);

#endif
