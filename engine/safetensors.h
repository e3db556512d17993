/* Read-only access to .safetensors files through mmap.
 *
 * A file is 8 bytes of little-endian header length N, N bytes of JSON header
 * ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...} plus an
 * optional "__metadata__"), then the tensor bytes; offsets are relative to
 * the end of the header. Opening validates every entry against the file size
 * up front, so a truncated or corrupt file fails at open with its name in the
 * message instead of faulting later. A model directory holds either one
 * model.safetensors or shards listed by model.safetensors.index.json; both
 * open into one name-sorted tensor table. */
#ifndef TANDEM_ENGINE_SAFETENSORS_H
#define TANDEM_ENGINE_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>

#define TM_ST_MAX_DIMS 8

typedef enum {
    TM_ST_BOOL, TM_ST_U8, TM_ST_I8, TM_ST_F8_E4M3, TM_ST_F8_E5M2, TM_ST_F8_E8M0,
    TM_ST_I16, TM_ST_U16, TM_ST_F16, TM_ST_BF16,
    TM_ST_I32, TM_ST_U32, TM_ST_F32,
    TM_ST_I64, TM_ST_U64, TM_ST_F64,
    TM_ST_N_DTYPES
} tm_st_dtype;

typedef struct tm_st_tensor {
    char *name;
    tm_st_dtype dtype;
    int ndim;
    int64_t shape[TM_ST_MAX_DIMS];
    size_t numel;
    const void *data;    /* inside the mapping; not aligned in general */
    size_t nbytes;
    int file;            /* index into tm_safetensors.files */
} tm_st_tensor;

typedef struct tm_st_file {
    char *path;
    void *map;
    size_t size;
} tm_st_file;

typedef struct tm_safetensors {
    tm_st_file *files;
    int n_files;
    tm_st_tensor *tensors;   /* sorted by name */
    int n_tensors;
} tm_safetensors;

/* Opens one .safetensors file. On failure returns a negative status, writes
 * a reason naming the file into err, and leaves *st empty. */
int tm_st_open_file(tm_safetensors *st, const char *path, char *err, size_t errlen);
/* Opens dir/model.safetensors, or else every shard named by
 * dir/model.safetensors.index.json (checking that each listed tensor is in
 * its shard). Same failure contract. */
int tm_st_open_dir(tm_safetensors *st, const char *dir, char *err, size_t errlen);
void tm_st_close(tm_safetensors *st);

/* NULL when absent. */
const tm_st_tensor *tm_st_find(const tm_safetensors *st, const char *name);

const char *tm_st_dtype_name(tm_st_dtype dt);
/* 1 for F32, BF16 and F16: the dtypes tm_st_to_f32 converts. */
int tm_st_is_float(tm_st_dtype dt);
/* Converts elements [first, first + n) of a tensor to f32 into dst: F32,
 * BF16, F16 exactly; F8_E4M3 as the codes' e4m3fn values (exact; a block-
 * scaled checkpoint's weight_scale_inv is applied by the weight loader);
 * U8 as integers (MXFP4 blocks and e8m0 scales are read bytewise by
 * engine/mxfp4.h instead). Returns TN_ERR_ARG for another dtype or a range
 * past the tensor. */
int tm_st_to_f32(const tm_st_tensor *t, size_t first, size_t n, float *dst);

#endif
