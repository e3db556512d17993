/* safetensors parsing and validation: the fixtures against their
 * tensors.txt listings (written by the Python safetensors library), dtype
 * conversion against hand-computed values, and every kind of damaged file. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/safetensors.h"
#include "common/status.h"
#include "tests/unit/engine_testutil.h"

/* Each line of tensors.txt: "name file [d0, d1, ...] DTYPE". */
static void matches_listing(const char *fixture, int expect_files)
{
    tm_safetensors st;
    char err[512] = "", path[512], line[512];
    assert_int_equal(tm_st_open_dir(&st, fixture, err, sizeof(err)), TN_OK);
    assert_int_equal(st.n_files, expect_files);
    FILE *f = fopen(et_path(path, sizeof(path), fixture, "tensors.txt"), "r");
    assert_non_null(f);
    int lines = 0;
    while (fgets(line, sizeof(line), f)) {
        char name[256], file[128], dtype[16];
        char *lb = strchr(line, '['), *rb = strchr(line, ']');
        assert_non_null(lb);
        assert_non_null(rb);
        assert_int_equal(sscanf(line, "%255s %127s", name, file), 2);
        assert_int_equal(sscanf(rb + 1, "%15s", dtype), 1);
        const tm_st_tensor *t = tm_st_find(&st, name);
        assert_non_null(t);
        assert_string_equal(tm_st_dtype_name(t->dtype), dtype);
        const char *base = strrchr(st.files[t->file].path, '/');
        assert_string_equal(base + 1, file);
        int nd = 0;
        for (char *p = lb + 1; p < rb;) {
            char *end;
            long long d = strtoll(p, &end, 10);
            if (end == p)
                break;
            assert_true(nd < t->ndim);
            assert_int_equal(t->shape[nd], d);
            nd++;
            p = end;
            while (*p == ',' || *p == ' ')
                p++;
        }
        assert_int_equal(nd, t->ndim);
        lines++;
    }
    fclose(f);
    assert_int_equal(lines, st.n_tensors);
    assert_null(tm_st_find(&st, "model.layers.99.mlp.router.weight"));
    tm_st_close(&st);
}

static void fixtures_match_their_listings(void **state)
{
    (void)state;
    matches_listing(ET_GPT_OSS, 1);
    matches_listing(ET_QWEN3, 3);   /* sharded through model.safetensors.index.json */
}

static void golden_file_reads(void **state)
{
    (void)state;
    et_golden g;
    char err[512] = "";
    assert_int_equal(et_golden_load(ET_GPT_OSS, &g, err, sizeof(err)), 0);
    assert_int_equal(g.T, 40);
    assert_int_equal(g.V, 512);
    assert_int_equal(g.G, 32);
    assert_int_equal(g.L, 4);
    assert_int_equal(g.H, 64);
    for (int i = 0; i < g.T; i++)
        assert_true(g.prompt[i] >= 0 && g.prompt[i] < g.V);
    /* the recorded greedy token is the argmax of the recorded logits */
    for (int i = 0; i < g.G; i++)
        assert_int_equal(et_argmax(g.gen_logits + (size_t)i * g.V, g.V), g.gen_ids[i]);
    et_golden_free(&g);
}

static void dtype_conversion(void **state)
{
    (void)state;
    char dir[256], path[512], err[512];
    assert_int_equal(et_tmpdir(dir, sizeof(dir)), 0);
    /* bf16: 1.0, -2.5, 3.140625 (0x4049), -0; f16: 1.0, -2.0, 65504 (max),
     * 2^-24 (smallest subnormal), 2^-15 (0x0200), +inf */
    const uint16_t bf16[4] = {0x3f80, 0xc020, 0x4049, 0x8000};
    const uint16_t f16[6] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x0200, 0x7c00};
    const float f32[3] = {0.5f, -1e-30f, 123456.75f};
    const int64_t i64[2] = {7, -7};
    et_tensor t[4] = {
        {"a_bf16", "BF16", 2, {2, 2}, bf16, sizeof(bf16)},
        {"b_f16", "F16", 1, {6}, f16, sizeof(f16)},
        {"c_f32", "F32", 1, {3}, f32, sizeof(f32)},
        {"d_i64", "I64", 1, {2}, i64, sizeof(i64)},
    };
    assert_int_equal(et_st_write(et_path(path, sizeof(path), dir, "x.safetensors"), t, 4), 0);
    tm_safetensors st;
    assert_int_equal(tm_st_open_file(&st, path, err, sizeof(err)), TN_OK);
    float out[6];
    const tm_st_tensor *a = tm_st_find(&st, "a_bf16");
    assert_non_null(a);
    assert_int_equal(a->numel, 4);
    assert_int_equal(tm_st_to_f32(a, 0, 4, out), TN_OK);
    assert_true(out[0] == 1.0f && out[1] == -2.5f && out[2] == 3.140625f && out[3] == 0.0f);
    assert_int_equal(tm_st_to_f32(a, 2, 2, out), TN_OK);   /* a sub-range */
    assert_true(out[0] == 3.140625f);
    assert_int_equal(tm_st_to_f32(a, 3, 2, out), TN_ERR_ARG);  /* past the end */
    const tm_st_tensor *b = tm_st_find(&st, "b_f16");
    assert_int_equal(tm_st_to_f32(b, 0, 6, out), TN_OK);
    assert_true(out[0] == 1.0f && out[1] == -2.0f && out[2] == 65504.0f);
    assert_true(out[3] == 0x1p-24f && out[4] == 0x1p-15f && out[5] > 3e38f);
    const tm_st_tensor *c = tm_st_find(&st, "c_f32");
    assert_int_equal(tm_st_to_f32(c, 0, 3, out), TN_OK);
    assert_memory_equal(out, f32, sizeof(f32));
    const tm_st_tensor *d = tm_st_find(&st, "d_i64");
    assert_int_equal(d->dtype, TM_ST_I64);
    assert_false(tm_st_is_float(d->dtype));
    assert_int_equal(tm_st_to_f32(d, 0, 2, out), TN_ERR_ARG);
    tm_st_close(&st);
    et_rm_rf(dir);
}

/* Writes raw bytes (8-byte length + header text + n_data zero bytes) and
 * expects the open to fail naming the file and `expect`. */
static void expect_bad_raw(const char *dir, uint64_t hlen_field, const char *header,
                           size_t n_data, const char *expect)
{
    char path[512], err[512] = "";
    size_t hl = strlen(header);
    uint8_t *buf = calloc(8 + hl + n_data + 1, 1);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(hlen_field >> (8 * i));
    memcpy(buf + 8, header, hl);
    et_path(path, sizeof(path), dir, "bad.safetensors");
    assert_int_equal(et_write_file(path, buf, 8 + hl + n_data), 0);
    free(buf);
    tm_safetensors st;
    int rc = tm_st_open_file(&st, path, err, sizeof(err));
    print_message("# %s\n", err);
    assert_true(rc < 0);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, expect));
    assert_int_equal(st.n_tensors, 0);
    assert_null(st.files);
}

static void rejects_damaged_files(void **state)
{
    (void)state;
    char dir[256], path[512], err[512], src[512];
    assert_int_equal(et_tmpdir(dir, sizeof(dir)), 0);
    const char *ok = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
    expect_bad_raw(dir, strlen(ok), ok, 8, "truncated");        /* data cut short */
    expect_bad_raw(dir, 1000, ok, 16, "truncated");             /* header cut short */
    expect_bad_raw(dir, 0, "", 0, "header length 0");           /* 8 bytes, nothing else */
    expect_bad_raw(dir, 5, "hello", 0, "not a JSON object");
    const char *shape = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,16]}}";
    expect_bad_raw(dir, strlen(shape), shape, 16, "needs 24");
    const char *dt = "{\"w\":{\"dtype\":\"Q4_K\",\"shape\":[2],\"data_offsets\":[0,2]}}";
    expect_bad_raw(dir, strlen(dt), dt, 2, "unknown dtype 'Q4_K'");
    const char *neg = "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}";
    expect_bad_raw(dir, strlen(neg), neg, 4, "shape[0]");
    const char *rev = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}";
    expect_bad_raw(dir, strlen(rev), rev, 8, "bad data_offsets");
    const char *noff = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}";
    expect_bad_raw(dir, strlen(noff), noff, 4, "data_offsets");
    const char *dup = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    expect_bad_raw(dir, strlen(dup), dup, 4, "defined twice");
    /* tiny file */
    et_path(path, sizeof(path), dir, "tiny.safetensors");
    assert_int_equal(et_write_file(path, "abc", 3), 0);
    tm_safetensors st;
    assert_true(tm_st_open_file(&st, path, err, sizeof(err)) < 0);
    assert_non_null(strstr(err, "truncated"));
    /* a real file cut in half */
    et_path(path, sizeof(path), dir, "half.safetensors");
    assert_int_equal(et_copy_prefix(et_path(src, sizeof(src), ET_GPT_OSS, "model.safetensors"),
                                    path, 500000), 0);
    assert_true(tm_st_open_file(&st, path, err, sizeof(err)) < 0);
    print_message("# %s\n", err);
    assert_non_null(strstr(err, "half.safetensors"));
    assert_non_null(strstr(err, "truncated"));
    /* missing file */
    et_path(path, sizeof(path), dir, "absent.safetensors");
    assert_true(tm_st_open_file(&st, path, err, sizeof(err)) < 0);
    assert_non_null(strstr(err, "absent.safetensors"));
    et_rm_rf(dir);
}

/* A copy of the sharded Qwen3 fixture whose index is replaced by `index`
 * (NULL keeps it) and optionally without one shard. */
static void expect_bad_index(const char *index, const char *drop_shard, const char *expect)
{
    char dir[256], src[512], dst[512], err[512] = "";
    assert_int_equal(et_tmpdir(dir, sizeof(dir)), 0);
    const char *files[] = {"model-00001-of-00003.safetensors",
                           "model-00002-of-00003.safetensors",
                           "model-00003-of-00003.safetensors",
                           "model.safetensors.index.json"};
    for (int i = 0; i < 4; i++) {
        if (drop_shard && strcmp(files[i], drop_shard) == 0)
            continue;
        assert_int_equal(et_copy_file(et_path(src, sizeof(src), ET_QWEN3, files[i]),
                                      et_path(dst, sizeof(dst), dir, files[i])), 0);
    }
    if (index)
        assert_int_equal(et_write_file(et_path(dst, sizeof(dst), dir,
                                               "model.safetensors.index.json"),
                                       index, strlen(index)), 0);
    tm_safetensors st;
    int rc = tm_st_open_dir(&st, dir, err, sizeof(err));
    print_message("# %s\n", err);
    assert_true(rc < 0);
    assert_non_null(strstr(err, expect));
    et_rm_rf(dir);
}

static void rejects_bad_shard_sets(void **state)
{
    (void)state;
    expect_bad_index(NULL, "model-00002-of-00003.safetensors", "model-00002-of-00003");
    expect_bad_index("{\"weight_map\": {\"lm_head.weight\": \"../model.safetensors\"}}", NULL,
                     "does not name a shard");
    expect_bad_index("{\"weight_map\": {\"lm_head.weight\": "
                     "\"model-00002-of-00003.safetensors\", \"model.norm.weight\": "
                     "\"model-00001-of-00003.safetensors\"}}", NULL, "but it is in");
    expect_bad_index("{\"weight_map\": {\"no.such.tensor\": "
                     "\"model-00001-of-00003.safetensors\"}}", NULL, "does not hold it");
    expect_bad_index("{\"metadata\": {}}", NULL, "weight_map");
    expect_bad_index("[1, 2", NULL, "not valid JSON");
    /* empty directory */
    char dir[256], err[512], path[512];
    assert_int_equal(et_tmpdir(dir, sizeof(dir)), 0);
    tm_safetensors st;
    assert_true(tm_st_open_dir(&st, dir, err, sizeof(err)) < 0);
    assert_non_null(strstr(err, "no model.safetensors or model.safetensors.index.json"));
    /* two shards both defining tensor x */
    const float one = 1.0f;
    et_tensor x = {"x", "F32", 1, {1}, &one, sizeof(one)};
    et_tensor y = {"y", "F32", 1, {1}, &one, sizeof(one)};
    et_tensor xy[2] = {x, y};
    assert_int_equal(et_st_write(et_path(path, sizeof(path), dir, "s1.safetensors"), &x, 1), 0);
    assert_int_equal(et_st_write(et_path(path, sizeof(path), dir, "s2.safetensors"), xy, 2), 0);
    const char *index = "{\"weight_map\": {\"x\": \"s1.safetensors\", \"y\": \"s2.safetensors\"}}";
    assert_int_equal(et_write_file(et_path(path, sizeof(path), dir,
                                           "model.safetensors.index.json"),
                                   index, strlen(index)), 0);
    assert_true(tm_st_open_dir(&st, dir, err, sizeof(err)) < 0);
    print_message("# %s\n", err);
    assert_non_null(strstr(err, "tensor 'x' is defined twice"));
    et_rm_rf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fixtures_match_their_listings),
        cmocka_unit_test(golden_file_reads),
        cmocka_unit_test(dtype_conversion),
        cmocka_unit_test(rejects_damaged_files),
        cmocka_unit_test(rejects_bad_shard_sets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
