/* libFuzzer target: the input as model.safetensors.index.json in a model
 * directory that also holds two valid shards (a.safetensors with tensors x
 * and y, b.safetensors with z), opened with tm_st_open_dir. Properties: the
 * open succeeds or fails with a message; when it succeeds every tensor the
 * index lists is found in the shard it names, and nothing outside the
 * directory was opened (only a.* / b.* shards exist). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cJSON.h>
#include "engine/safetensors.h"
#include "common/status.h"
#include "tests/fuzz/harness.h"

/* Set once; see harness.h. */
static const char *dir;

static void write_shard(const char *name, const char *header, const void *payload, size_t n)
{
    size_t hlen = strlen(header);
    uint8_t buf[512];
    FZ_CHECK(8 + hlen + n <= sizeof(buf));
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    memcpy(buf + 8, header, hlen);
    memcpy(buf + 8 + hlen, payload, n);
    fz_write_file(dir, name, buf, 8 + hlen + n);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    dir = fz_scratch_dir();
    static const float xy[3] = {1.0f, 2.0f, 3.0f};
    write_shard("a.safetensors",
                "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                xy, sizeof(xy));
    static const uint8_t z[2] = {0x80, 0x3f};
    write_shard("b.safetensors",
                "{\"z\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[0,2]}}", z, sizeof(z));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_write_file(dir, "model.safetensors.index.json", data, size);
    tm_safetensors st;
    char err[512] = "";
    int rc = tm_st_open_dir(&st, dir, err, sizeof(err));
    if (rc != TN_OK) {
        FZ_CHECK(rc == TN_ERR_ARG && err[0] != '\0');
        FZ_CHECK(st.n_tensors == 0 && st.files == NULL);
        return 0;
    }
    FZ_CHECK(st.n_files >= 1 && st.n_files <= 2);
    cJSON *root = cJSON_ParseWithLength((const char *)data, size);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    FZ_CHECK(cJSON_IsObject(map));
    const cJSON *e;
    cJSON_ArrayForEach(e, map) {
        const tm_st_tensor *t = tm_st_find(&st, e->string);
        FZ_CHECK(t != NULL);
        const char *base = strrchr(st.files[t->file].path, '/');
        FZ_CHECK(base && strcmp(base + 1, e->valuestring) == 0);
    }
    cJSON_Delete(root);
    tm_st_close(&st);
    return 0;
}
