#include "engine/safetensors.h"
#include "kernels/dtype.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common/file.h"
#include "common/status.h"

/* A header larger than this is corrupt, not a model (real ones are < 10 MB). */
#define ST_MAX_HEADER (256u << 20)
#define ST_MAX_INDEX (64u << 20)

static const struct {
    const char *name;
    size_t bytes;
} dtype_info[TM_ST_N_DTYPES] = {
    [TM_ST_BOOL] = {"BOOL", 1},       [TM_ST_U8] = {"U8", 1},
    [TM_ST_I8] = {"I8", 1},           [TM_ST_F8_E4M3] = {"F8_E4M3", 1},
    [TM_ST_F8_E5M2] = {"F8_E5M2", 1}, [TM_ST_F8_E8M0] = {"F8_E8M0", 1},
    [TM_ST_I16] = {"I16", 2},         [TM_ST_U16] = {"U16", 2},
    [TM_ST_F16] = {"F16", 2},         [TM_ST_BF16] = {"BF16", 2},
    [TM_ST_I32] = {"I32", 4},         [TM_ST_U32] = {"U32", 4},
    [TM_ST_F32] = {"F32", 4},         [TM_ST_I64] = {"I64", 8},
    [TM_ST_U64] = {"U64", 8},         [TM_ST_F64] = {"F64", 8},
};

const char *tm_st_dtype_name(tm_st_dtype dt)
{
    return (unsigned)dt < TM_ST_N_DTYPES ? dtype_info[dt].name : "?";
}

int tm_st_is_float(tm_st_dtype dt)
{
    return dt == TM_ST_F32 || dt == TM_ST_BF16 || dt == TM_ST_F16;
}

static int dtype_parse(const char *s, tm_st_dtype *out)
{
    for (int i = 0; i < TM_ST_N_DTYPES; i++) {
        if (strcmp(s, dtype_info[i].name) == 0) {
            *out = (tm_st_dtype)i;
            return 1;
        }
    }
    return 0;
}

void tm_st_close(tm_safetensors *st)
{
    if (!st)
        return;
    for (int i = 0; i < st->n_tensors; i++)
        free(st->tensors[i].name);
    free(st->tensors);
    for (int i = 0; i < st->n_files; i++) {
        if (st->files[i].map)
            munmap(st->files[i].map, st->files[i].size);
        free(st->files[i].path);
    }
    free(st->files);
    memset(st, 0, sizeof(*st));
}

/* A JSON number that is a non-negative integer exactly representable in a
 * double (2^53), which covers every real offset and dimension. */
static int json_uint(const cJSON *j, uint64_t *out)
{
    if (!cJSON_IsNumber(j))
        return 0;
    double d = j->valuedouble;
    if (!(d >= 0.0) || d > 9007199254740992.0 || d != (double)(uint64_t)d)
        return 0;
    *out = (uint64_t)d;
    return 1;
}

/* Parses one header entry into t (name already set). */
static int parse_entry(const cJSON *e, tm_st_tensor *t, const uint8_t *data,
                       uint64_t data_size, const char *path, char *err, size_t errlen)
{
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsObject(e) || !cJSON_IsString(dt) || !cJSON_IsArray(shape) ||
        !cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2) {
        tn_errf(err, errlen, "%s: tensor '%s': header entry needs dtype, shape and "
                "data_offsets [begin, end]", path, t->name);
        return TN_ERR_ARG;
    }
    if (!dtype_parse(dt->valuestring, &t->dtype)) {
        tn_errf(err, errlen, "%s: tensor '%s': unknown dtype '%s'", path, t->name,
                dt->valuestring);
        return TN_ERR_ARG;
    }
    int nd = cJSON_GetArraySize(shape);
    if (nd > TM_ST_MAX_DIMS) {
        tn_errf(err, errlen, "%s: tensor '%s': %d dimensions (at most %d)", path,
                t->name, nd, TM_ST_MAX_DIMS);
        return TN_ERR_ARG;
    }
    t->ndim = nd;
    uint64_t numel = 1;
    int overflow = 0;
    for (int i = 0; i < nd; i++) {
        uint64_t d;
        if (!json_uint(cJSON_GetArrayItem(shape, i), &d)) {
            tn_errf(err, errlen, "%s: tensor '%s': shape[%d] is not a non-negative "
                    "integer", path, t->name, i);
            return TN_ERR_ARG;
        }
        t->shape[i] = (int64_t)d;
        if (d != 0 && numel > UINT64_MAX / d)
            overflow = 1;
        numel *= d;
    }
    uint64_t esize = dtype_info[t->dtype].bytes;
    if (overflow || numel > UINT64_MAX / esize) {
        tn_errf(err, errlen, "%s: tensor '%s': shape is too large", path, t->name);
        return TN_ERR_ARG;
    }
    uint64_t begin, end;
    if (!json_uint(cJSON_GetArrayItem(offs, 0), &begin) ||
        !json_uint(cJSON_GetArrayItem(offs, 1), &end) || begin > end) {
        tn_errf(err, errlen, "%s: tensor '%s': bad data_offsets", path, t->name);
        return TN_ERR_ARG;
    }
    if (end > data_size) {
        tn_errf(err, errlen, "%s: tensor '%s': data ends at byte %llu but the file "
                "holds %llu data bytes (truncated file?)", path, t->name,
                (unsigned long long)end, (unsigned long long)data_size);
        return TN_ERR_ARG;
    }
    if (end - begin != numel * esize) {
        tn_errf(err, errlen, "%s: tensor '%s': data_offsets span %llu bytes but "
                "%s shape needs %llu", path, t->name,
                (unsigned long long)(end - begin), dtype_info[t->dtype].name,
                (unsigned long long)(numel * esize));
        return TN_ERR_ARG;
    }
    t->numel = (size_t)numel;
    t->nbytes = (size_t)(end - begin);
    t->data = data + begin;
    return TN_OK;
}

static int grow_tensors(tm_safetensors *st, int extra)
{
    tm_st_tensor *n = realloc(st->tensors, sizeof(*n) * (size_t)(st->n_tensors + extra));
    if (!n)
        return TN_ERR_NOMEM;
    st->tensors = n;
    return TN_OK;
}

/* Maps path and appends its tensors to st (unsorted). */
static int add_file(tm_safetensors *st, const char *path, char *err, size_t errlen)
{
    tm_st_file *files = realloc(st->files, sizeof(*files) * (size_t)(st->n_files + 1));
    if (!files) {
        tn_errf(err, errlen, "%s: out of memory", path);
        return TN_ERR_NOMEM;
    }
    st->files = files;
    tm_st_file *f = &st->files[st->n_files];
    memset(f, 0, sizeof(*f));
    f->path = strdup(path);
    if (!f->path) {
        tn_errf(err, errlen, "%s: out of memory", path);
        return TN_ERR_NOMEM;
    }
    st->n_files++;   /* counted now so tm_st_close frees it on any failure */

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        tn_errf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return TN_ERR_ARG;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        tn_errf(err, errlen, "%s is not a regular file", path);
        close(fd);
        return TN_ERR_ARG;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < 8) {
        tn_errf(err, errlen, "%s: truncated safetensors file (%llu bytes, the "
                "header length alone needs 8)", path, (unsigned long long)size);
        close(fd);
        return TN_ERR_ARG;
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        tn_errf(err, errlen, "cannot mmap %s: %s", path, strerror(errno));
        return TN_ERR_ARG;
    }
    f->map = map;
    f->size = (size_t)size;

    const uint8_t *bytes = map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | bytes[i];
    if (hlen > size - 8) {
        tn_errf(err, errlen, "%s: truncated safetensors file (header claims %llu "
                "bytes, file has %llu after the length)", path,
                (unsigned long long)hlen, (unsigned long long)(size - 8));
        return TN_ERR_ARG;
    }
    if (hlen > ST_MAX_HEADER || hlen < 2) {
        tn_errf(err, errlen, "%s: implausible safetensors header length %llu (not a "
                "safetensors file?)", path, (unsigned long long)hlen);
        return TN_ERR_ARG;
    }
    cJSON *hdr = cJSON_ParseWithLength((const char *)bytes + 8, (size_t)hlen);
    if (!cJSON_IsObject(hdr)) {
        tn_errf(err, errlen, "%s: safetensors header is not a JSON object (not a "
                "safetensors file?)", path);
        cJSON_Delete(hdr);
        return TN_ERR_ARG;
    }
    const uint8_t *data = bytes + 8 + hlen;
    uint64_t data_size = size - 8 - hlen;
    int n = cJSON_GetArraySize(hdr);
    int rc = grow_tensors(st, n);
    if (rc) {
        tn_errf(err, errlen, "%s: out of memory", path);
        cJSON_Delete(hdr);
        return rc;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, hdr) {
        if (strcmp(e->string, "__metadata__") == 0)
            continue;
        tm_st_tensor *t = &st->tensors[st->n_tensors];
        memset(t, 0, sizeof(*t));
        t->name = strdup(e->string);
        if (!t->name) {
            tn_errf(err, errlen, "%s: out of memory", path);
            cJSON_Delete(hdr);
            return TN_ERR_NOMEM;
        }
        t->file = st->n_files - 1;
        st->n_tensors++;
        rc = parse_entry(e, t, data, data_size, path, err, errlen);
        if (rc) {
            cJSON_Delete(hdr);
            return rc;
        }
    }
    cJSON_Delete(hdr);
    return TN_OK;
}

static int cmp_tensor(const void *a, const void *b)
{
    return strcmp(((const tm_st_tensor *)a)->name, ((const tm_st_tensor *)b)->name);
}

/* Sorts the table for lookup and rejects a name defined twice. */
static int finish(tm_safetensors *st, char *err, size_t errlen)
{
    if (st->n_tensors > 1)
        qsort(st->tensors, (size_t)st->n_tensors, sizeof(*st->tensors), cmp_tensor);
    for (int i = 1; i < st->n_tensors; i++) {
        if (strcmp(st->tensors[i - 1].name, st->tensors[i].name) == 0) {
            tn_errf(err, errlen, "tensor '%s' is defined twice (%s and %s)",
                    st->tensors[i].name, st->files[st->tensors[i - 1].file].path,
                    st->files[st->tensors[i].file].path);
            return TN_ERR_ARG;
        }
    }
    return TN_OK;
}

int tm_st_open_file(tm_safetensors *st, const char *path, char *err, size_t errlen)
{
    memset(st, 0, sizeof(*st));
    int rc = add_file(st, path, err, errlen);
    if (!rc)
        rc = finish(st, err, errlen);
    if (rc)
        tm_st_close(st);
    return rc;
}

/* A shard name from an index must name a file inside the model directory. */
static int shard_name_ok(const char *s)
{
    return s[0] != '\0' && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static int open_index(tm_safetensors *st, const char *dir, const char *index_path,
                      char *err, size_t errlen)
{
    char *text = NULL;
    int rc = tn_read_file(index_path, ST_MAX_INDEX, &text, NULL, err, errlen);
    if (rc)
        return rc;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(map) || cJSON_GetArraySize(map) == 0) {
        tn_errf(err, errlen, "%s: %s", index_path, root ? "no \"weight_map\" object"
                : "not valid JSON");
        cJSON_Delete(root);
        return TN_ERR_ARG;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, map) {
        if (!cJSON_IsString(e) || !shard_name_ok(e->valuestring)) {
            tn_errf(err, errlen, "%s: weight_map entry '%s' does not name a shard "
                    "file in the model directory", index_path, e->string);
            cJSON_Delete(root);
            return TN_ERR_ARG;
        }
        int seen = 0;
        for (int i = 0; i < st->n_files && !seen; i++) {
            const char *base = strrchr(st->files[i].path, '/');
            seen = strcmp(base ? base + 1 : st->files[i].path, e->valuestring) == 0;
        }
        if (seen)
            continue;
        char *shard = tn_path_join(dir, e->valuestring);
        if (!shard) {
            tn_errf(err, errlen, "%s: out of memory", index_path);
            cJSON_Delete(root);
            return TN_ERR_NOMEM;
        }
        rc = add_file(st, shard, err, errlen);
        free(shard);
        if (rc) {
            cJSON_Delete(root);
            return rc;
        }
    }
    rc = finish(st, err, errlen);
    /* Every listed tensor must really be in the shard the index names. */
    cJSON_ArrayForEach(e, map) {
        if (rc)
            break;
        const tm_st_tensor *t = tm_st_find(st, e->string);
        const char *base = t ? strrchr(st->files[t->file].path, '/') : NULL;
        if (!t) {
            tn_errf(err, errlen, "%s lists tensor '%s' in %s, which does not hold it",
                    index_path, e->string, e->valuestring);
            rc = TN_ERR_ARG;
        } else if (strcmp(base ? base + 1 : st->files[t->file].path, e->valuestring) != 0) {
            tn_errf(err, errlen, "%s lists tensor '%s' in %s but it is in %s",
                    index_path, e->string, e->valuestring, st->files[t->file].path);
            rc = TN_ERR_ARG;
        }
    }
    cJSON_Delete(root);
    return rc;
}

int tm_st_open_dir(tm_safetensors *st, const char *dir, char *err, size_t errlen)
{
    memset(st, 0, sizeof(*st));
    char *single = tn_path_join(dir, "model.safetensors");
    char *index = tn_path_join(dir, "model.safetensors.index.json");
    int rc;
    if (!single || !index) {
        tn_errf(err, errlen, "out of memory");
        rc = TN_ERR_NOMEM;
    } else if (access(single, F_OK) == 0) {
        rc = add_file(st, single, err, errlen);
        if (!rc)
            rc = finish(st, err, errlen);
    } else if (access(index, F_OK) == 0) {
        rc = open_index(st, dir, index, err, errlen);
    } else {
        tn_errf(err, errlen, "%s: no model.safetensors or model.safetensors.index.json",
                dir);
        rc = TN_ERR_ARG;
    }
    free(single);
    free(index);
    if (rc)
        tm_st_close(st);
    return rc;
}

const tm_st_tensor *tm_st_find(const tm_safetensors *st, const char *name)
{
    int lo = 0, hi = st->n_tensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(st->tensors[mid].name, name);
        if (c == 0)
            return &st->tensors[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

static float half_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);          /* inf / nan */
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);  /* normal: rebias 15 -> 127 */
    } else if (man == 0) {
        bits = sign;                                        /* signed zero */
    } else {
        /* subnormal half: normalise the mantissa into a normal float */
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while (!(man & 0x400u));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

int tm_st_to_f32(const tm_st_tensor *t, size_t first, size_t n, float *dst)
{
    if (!t || !dst || first > t->numel || n > t->numel - first)
        return TN_ERR_ARG;
    const uint8_t *p = t->data;
    switch (t->dtype) {
    case TM_ST_F32:
        memcpy(dst, p + first * 4, n * 4);
        return TN_OK;
    case TM_ST_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + (first + i) * 2, 2);
            uint32_t bits = (uint32_t)h << 16;
            memcpy(&dst[i], &bits, 4);
        }
        return TN_OK;
    case TM_ST_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + (first + i) * 2, 2);
            dst[i] = half_to_f32(h);
        }
        return TN_OK;
    case TM_ST_F8_E4M3:   /* the codes' values; block scales are the caller's */
        for (size_t i = 0; i < n; i++)
            dst[i] = kn_e4m3_to_f32(p[first + i]);
        return TN_OK;
    case TM_ST_U8:
        for (size_t i = 0; i < n; i++)
            dst[i] = (float)p[first + i];
        return TN_OK;
    default:
        return TN_ERR_ARG;
    }
}
