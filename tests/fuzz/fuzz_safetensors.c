/* libFuzzer target: the input as a whole .safetensors file opened with
 * tm_st_open_file. Properties: the open either succeeds or fails with a
 * message; an opened file's tensors lie inside the mapping with nbytes =
 * numel x element size, are sorted, unique and found by name, and float
 * tensors convert (a range past the end is refused). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/safetensors.h"
#include "common/status.h"
#include "tests/fuzz/harness.h"

/* Set once; see harness.h. */
static const char *dir;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    dir = fz_scratch_dir();
    return 0;
}

static size_t dtype_bytes(tm_st_dtype dt)
{
    switch (dt) {
    case TM_ST_BOOL: case TM_ST_U8: case TM_ST_I8: case TM_ST_F8_E4M3: case TM_ST_F8_E5M2:
    case TM_ST_F8_E8M0:
        return 1;
    case TM_ST_I16: case TM_ST_U16: case TM_ST_F16: case TM_ST_BF16:
        return 2;
    case TM_ST_I32: case TM_ST_U32: case TM_ST_F32:
        return 4;
    default:
        return 8;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_write_file(dir, "fuzz.safetensors", data, size);
    char path[4200];
    snprintf(path, sizeof(path), "%s/fuzz.safetensors", dir);
    tm_safetensors st;
    char err[512] = "";
    int rc = tm_st_open_file(&st, path, err, sizeof(err));
    if (rc != TN_OK) {
        FZ_CHECK(rc == TN_ERR_ARG && err[0] != '\0');
        FZ_CHECK(st.n_tensors == 0 && st.tensors == NULL && st.files == NULL);
        return 0;
    }
    FZ_CHECK(st.n_files == 1 && st.files[0].size == size);
    const uint8_t *map = st.files[0].map;
    float buf[64];
    for (int i = 0; i < st.n_tensors; i++) {
        const tm_st_tensor *t = &st.tensors[i];
        FZ_CHECK(t->dtype < TM_ST_N_DTYPES && t->ndim >= 0 && t->ndim <= TM_ST_MAX_DIMS);
        size_t numel = 1;
        for (int d = 0; d < t->ndim; d++)
            numel *= (size_t)t->shape[d];
        FZ_CHECK(numel == t->numel && t->nbytes == numel * dtype_bytes(t->dtype));
        const uint8_t *p = t->data;
        FZ_CHECK(p >= map + 8 && (size_t)(p - map) <= size && t->nbytes <= size - (size_t)(p - map));
        FZ_CHECK(i == 0 || strcmp(st.tensors[i - 1].name, t->name) < 0);
        FZ_CHECK(tm_st_find(&st, t->name) == t);
        /* tm_st_to_f32 converts the float dtypes, F8_E4M3 codes and U8
         * bytes (engine/safetensors.h); every other dtype is refused. */
        if (tm_st_is_float(t->dtype) || t->dtype == TM_ST_F8_E4M3 || t->dtype == TM_ST_U8) {
            size_t n = t->numel < 64 ? t->numel : 64;
            FZ_CHECK(tm_st_to_f32(t, 0, n, buf) == TN_OK);
            FZ_CHECK(tm_st_to_f32(t, t->numel, 1, buf) == TN_ERR_ARG);
        } else {
            FZ_CHECK(tm_st_to_f32(t, 0, 0, buf) == TN_ERR_ARG);
        }
    }
    tm_st_close(&st);
    return 0;
}
