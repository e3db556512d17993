/* Model directories that must not load: every case gives a clear message
 * (checked by content), a negative status, no model and no leak (the ASan
 * build checks the last). The damaged checkpoints are rebuilt from the
 * fixtures' real tensors in a temporary directory. Two rewritten-but-valid
 * checkpoints (Qwen3 experts fused the transformers-5 way, GPT-OSS in F32)
 * must load and compute the same logits as the originals. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "kernels/backend.h"
#include "common/status.h"
#include "tests/unit/engine_testutil.h"

typedef void (*edit_fn)(et_tensor *t, int *n, void *ctx);

static int find(const et_tensor *t, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0)
            return i;
    fail_msg("fixture has no tensor %s", name);
    return -1;
}

static void drop(et_tensor *t, int *n, int i)
{
    memmove(&t[i], &t[i + 1], sizeof(*t) * (size_t)(*n - i - 1));
    (*n)--;
}

/* dir = a copy of fixture's config.json plus the fixture's tensors, edited,
 * as one model.safetensors. */
static void build_dir(char *dir, size_t n, const char *fixture, edit_fn edit, void *ctx)
{
    char src[512], dst[512], err[512];
    assert_int_equal(et_tmpdir(dir, n), 0);
    assert_int_equal(et_copy_file(et_path(src, sizeof(src), fixture, "config.json"),
                                  et_path(dst, sizeof(dst), dir, "config.json")), 0);
    tm_safetensors st;
    assert_int_equal(tm_st_open_dir(&st, fixture, err, sizeof(err)), TN_OK);
    et_tensor *t;
    int nt;
    assert_int_equal(et_st_entries(&st, &t, &nt), 0);
    if (edit)
        edit(t, &nt, ctx);
    assert_int_equal(et_st_write(et_path(dst, sizeof(dst), dir, "model.safetensors"), t, nt),
                     0);
    free(t);
    tm_st_close(&st);
}

static void expect_load_error(const char *dir, const char *expect)
{
    kn_backend be;
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    tm_model *m = (tm_model *)&be;   /* must be reset to NULL */
    char err[512] = "";
    int rc = tm_model_load(dir, &be, &m, err, sizeof(err));
    print_message("# %s\n", err);
    assert_true(rc < 0);
    assert_null(m);
    if (!strstr(err, expect))
        fail_msg("error '%s' does not contain '%s'", err, expect);
    kn_backend_free(&be);
}

static void fixture_with(const char *fixture, edit_fn edit, void *ctx, const char *expect)
{
    char dir[256];
    build_dir(dir, sizeof(dir), fixture, edit, ctx);
    expect_load_error(dir, expect);
    et_rm_rf(dir);
}

/* ---- edits ---- */

static void edit_fp8(et_tensor *t, int *n, void *ctx)
{
    (void)ctx;
    int i = find(t, *n, "model.layers.0.mlp.experts.gate_up_proj");
    strcpy(t[i].dtype, "F8_E4M3");
    t[i].nbytes /= 2;   /* one byte per element; the bf16 bytes serve as data */
}

static void edit_mxfp4(et_tensor *t, int *n, void *ctx)
{
    /* the released GPT-OSS layout: U8 blocks of 32 fp4 values plus scales */
    static const uint8_t zeros[8 * 128 * 2 * 16];
    (void)ctx;
    int i = find(t, *n, "model.layers.0.mlp.experts.gate_up_proj");
    t[i] = (et_tensor){"model.layers.0.mlp.experts.gate_up_proj_blocks", "U8", 4,
                       {8, 128, 2, 16}, zeros, sizeof(zeros)};
    t[(*n)++] = (et_tensor){"model.layers.0.mlp.experts.gate_up_proj_scales", "U8", 3,
                            {8, 128, 2}, zeros, 8 * 128 * 2};
}

static void edit_i64(et_tensor *t, int *n, void *ctx)
{
    int i = find(t, *n, "model.embed_tokens.weight");
    strcpy(t[i].dtype, "I64");
    t[i].nbytes *= 4;
    t[i].data = ctx;
}

static void edit_drop(et_tensor *t, int *n, void *ctx)
{
    drop(t, n, find(t, *n, ctx));
}

static void edit_shape(et_tensor *t, int *n, void *ctx)
{
    (void)ctx;
    int i = find(t, *n, "model.layers.2.self_attn.o_proj.weight");
    t[i].shape[1] /= 2;
    t[i].nbytes /= 2;
}

static void edit_extra(et_tensor *t, int *n, void *ctx)
{
    (void)ctx;
    int i = find(t, *n, "model.layers.0.self_attn.sinks");
    t[*n] = t[i];
    strcpy(t[*n].name, "model.layers.0.self_attn.q_norm.weight");
    (*n)++;
}

static void rejects_quantized_and_wrong_dtypes(void **state)
{
    (void)state;
    /* F8_E4M3 without its block scales; a 3-D F8 tensor would not be read
     * either, but the missing scales are named first */
    fixture_with(ET_GPT_OSS, edit_fp8, NULL,
                 "tensor 'model.layers.0.mlp.experts.gate_up_proj' is F8_E4M3 but "
                 "'model.layers.0.mlp.experts.gate_up_proj_scale_inv' (its block scales) "
                 "is missing");
    /* MXFP4 gate_up without the MXFP4 down_proj */
    fixture_with(ET_GPT_OSS, edit_mxfp4, NULL,
                 "missing tensor 'model.layers.0.mlp.experts.down_proj_blocks'");
    void *zeros = calloc(512 * 64, 8);
    assert_non_null(zeros);
    fixture_with(ET_GPT_OSS, edit_i64, zeros,
                 "tensor 'model.embed_tokens.weight' has dtype I64; the loader reads "
                 "BF16, F16, F32 or F8_E4M3 with a weight_scale_inv");
    free(zeros);
}

static void rejects_missing_wrong_and_extra_tensors(void **state)
{
    (void)state;
    fixture_with(ET_GPT_OSS, edit_drop, "model.layers.1.self_attn.sinks",
                 "missing tensor 'model.layers.1.self_attn.sinks'");
    fixture_with(ET_GPT_OSS, edit_drop, "lm_head.weight", "missing tensor 'lm_head.weight'");
    fixture_with(ET_QWEN3, edit_drop, "model.layers.2.mlp.experts.15.down_proj.weight",
                 "missing tensor 'model.layers.2.mlp.experts.15.down_proj.weight'");
    fixture_with(ET_QWEN3, edit_drop, "model.layers.0.self_attn.k_norm.weight",
                 "missing tensor 'model.layers.0.self_attn.k_norm.weight'");
    fixture_with(ET_GPT_OSS, edit_shape, NULL,
                 "tensor 'model.layers.2.self_attn.o_proj.weight' has shape [64, 32], "
                 "expected [64, 64]");
    fixture_with(ET_GPT_OSS, edit_extra, NULL,
                 "tensor 'model.layers.0.self_attn.q_norm.weight' is not used");
}

static void rejects_bad_directories(void **state)
{
    (void)state;
    char dir[256], src[512], dst[512];
    expect_load_error("/nonexistent/tandem-model", "/nonexistent/tandem-model");
    expect_load_error(ET_GPT_OSS "/config.json", "is not a directory");
    assert_int_equal(et_tmpdir(dir, sizeof(dir)), 0);
    expect_load_error(dir, "config.json");                     /* empty directory */
    assert_int_equal(et_copy_file(et_path(src, sizeof(src), ET_GPT_OSS, "config.json"),
                                  et_path(dst, sizeof(dst), dir, "config.json")), 0);
    expect_load_error(dir, "no model.safetensors or model.safetensors.index.json");
    /* truncated weights */
    assert_int_equal(et_copy_prefix(et_path(src, sizeof(src), ET_GPT_OSS, "model.safetensors"),
                                    et_path(dst, sizeof(dst), dir, "model.safetensors"),
                                    700000), 0);
    expect_load_error(dir, "truncated");
    expect_load_error(dir, dst);                               /* names the file */
    /* unknown architecture with real weights */
    const char *llama = "{\"model_type\": \"llama\", \"hidden_size\": 64}";
    assert_int_equal(et_write_file(et_path(dst, sizeof(dst), dir, "config.json"), llama,
                                   strlen(llama)), 0);
    expect_load_error(dir, "unknown model_type 'llama'");
    /* a Qwen3 config over GPT-OSS weights */
    assert_int_equal(et_copy_file(et_path(src, sizeof(src), ET_QWEN3, "config.json"),
                                  et_path(dst, sizeof(dst), dir, "config.json")), 0);
    assert_int_equal(et_copy_file(et_path(src, sizeof(src), ET_GPT_OSS, "model.safetensors"),
                                  et_path(dst, sizeof(dst), dir, "model.safetensors")), 0);
    expect_load_error(dir, "missing tensor 'model.layers.0.self_attn.q_norm.weight'");
    et_rm_rf(dir);
    /* a sharded checkpoint missing a shard */
    assert_int_equal(et_tmpdir(dir, sizeof(dir)), 0);
    const char *keep[] = {"config.json", "model.safetensors.index.json",
                          "model-00001-of-00003.safetensors",
                          "model-00003-of-00003.safetensors"};
    for (int i = 0; i < 4; i++)
        assert_int_equal(et_copy_file(et_path(src, sizeof(src), ET_QWEN3, keep[i]),
                                      et_path(dst, sizeof(dst), dir, keep[i])), 0);
    expect_load_error(dir, "model-00002-of-00003.safetensors");
    et_rm_rf(dir);
}

/* ---- rewritten but valid checkpoints ---- */

typedef struct fuse_ctx {
    int layers, experts, inter, dim;
    uint8_t *buf;   /* holds the fused bytes */
} fuse_ctx;

/* Qwen3 per-expert weights -> transformers-5 fused experts.gate_up_proj
 * [E][2I][H] (gate rows, then up rows) and experts.down_proj [E][H][I]. */
static void edit_fuse_qwen3(et_tensor *t, int *n, void *ctx)
{
    fuse_ctx *f = ctx;
    const size_t gsz = (size_t)f->inter * f->dim * 2;   /* bf16 bytes of one [I][H] */
    uint8_t *p = f->buf;
    for (int l = 0; l < f->layers; l++) {
        uint8_t *gu = p, *dn = p + (size_t)f->experts * 2 * gsz;
        p = dn + (size_t)f->experts * gsz;
        for (int e = 0; e < f->experts; e++) {
            char name[160];
            const char *parts[3] = {"gate_proj", "up_proj", "down_proj"};
            uint8_t *dst[3] = {gu + (size_t)e * 2 * gsz, gu + (size_t)e * 2 * gsz + gsz,
                               dn + (size_t)e * gsz};
            for (int k = 0; k < 3; k++) {
                snprintf(name, sizeof(name), "model.layers.%d.mlp.experts.%d.%s.weight", l, e,
                         parts[k]);
                int i = find(t, *n, name);
                assert_int_equal(t[i].nbytes, gsz);
                assert_string_equal(t[i].dtype, "BF16");
                memcpy(dst[k], t[i].data, gsz);
                drop(t, n, i);
            }
        }
        et_tensor *g = &t[(*n)++], *d = &t[(*n)++];
        *g = (et_tensor){"", "BF16", 3, {f->experts, 2 * f->inter, f->dim}, gu,
                         (size_t)f->experts * 2 * gsz};
        *d = (et_tensor){"", "BF16", 3, {f->experts, f->dim, f->inter}, dn,
                         (size_t)f->experts * gsz};
        snprintf(g->name, sizeof(g->name), "model.layers.%d.mlp.experts.gate_up_proj", l);
        snprintf(d->name, sizeof(d->name), "model.layers.%d.mlp.experts.down_proj", l);
    }
}

/* Every tensor widened from BF16 to F32 (exact). */
static void edit_to_f32(et_tensor *t, int *n, void *ctx)
{
    uint8_t *p = ctx;
    for (int i = 0; i < *n; i++) {
        size_t cnt = t[i].nbytes / 2;
        const uint8_t *src = t[i].data;
        for (size_t j = 0; j < cnt; j++) {
            uint8_t b[4] = {0, 0, src[2 * j], src[2 * j + 1]};   /* little-endian */
            memcpy(p + 4 * j, b, 4);
        }
        strcpy(t[i].dtype, "F32");
        t[i].data = p;
        t[i].nbytes = cnt * 4;
        p += cnt * 4;
    }
}

/* Last-row prefill logits of the golden prompt. */
static void prefill_logits(const char *dir, const int32_t *prompt, int T, float *out)
{
    kn_backend be;
    tm_model *m;
    char err[512] = "";
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    if (tm_model_load(dir, &be, &m, err, sizeof(err)) != TN_OK)
        fail_msg("%s", err);
    const tm_config *c = tm_model_config(m);
    tm_kv_cache kv;
    int32_t pages[8];
    assert_int_equal(tm_kv_cache_init(&kv, &be, KN_F32, c->n_layers, c->n_kv_heads, c->head_dim, 16,
                                      8), TN_OK);
    assert_int_equal(tm_kv_alloc_pages(&kv, 8, pages), TN_OK);
    tm_seq_step st = {.tokens = prompt, .n_tokens = T, .pages = pages, .n_pages = 8};
    assert_int_equal(tm_forward(m, &kv, &st, 1, out, NULL), TN_OK);
    tm_kv_cache_free(&kv);
    tm_model_free(m);
    kn_backend_free(&be);
}

static void rewritten_layouts_load_the_same_model(void **state)
{
    (void)state;
    char err[512], dir[256];
    et_golden g;
    float *ref = calloc(512, sizeof(float)), *got = calloc(512, sizeof(float));
    assert_true(ref && got);

    assert_int_equal(et_golden_load(ET_QWEN3, &g, err, sizeof(err)), 0);
    fuse_ctx f = {.layers = 3, .experts = 16, .inter = 32, .dim = 64};
    f.buf = malloc((size_t)f.layers * f.experts * 3 * f.inter * f.dim * 2);
    assert_non_null(f.buf);
    build_dir(dir, sizeof(dir), ET_QWEN3, edit_fuse_qwen3, &f);
    free(f.buf);
    prefill_logits(ET_QWEN3, g.prompt, g.T, ref);
    prefill_logits(dir, g.prompt, g.T, got);
    assert_memory_equal(got, ref, 512 * sizeof(float));
    et_rm_rf(dir);
    et_golden_free(&g);

    assert_int_equal(et_golden_load(ET_GPT_OSS, &g, err, sizeof(err)), 0);
    uint8_t *wide = malloc(4u << 20);   /* the fixture holds ~0.5M bf16 values */
    assert_non_null(wide);
    build_dir(dir, sizeof(dir), ET_GPT_OSS, edit_to_f32, wide);
    free(wide);
    prefill_logits(ET_GPT_OSS, g.prompt, g.T, ref);
    prefill_logits(dir, g.prompt, g.T, got);
    assert_memory_equal(got, ref, 512 * sizeof(float));
    et_rm_rf(dir);
    et_golden_free(&g);
    free(ref);
    free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rejects_quantized_and_wrong_dtypes),
        cmocka_unit_test(rejects_missing_wrong_and_extra_tensors),
        cmocka_unit_test(rejects_bad_directories),
        cmocka_unit_test(rewritten_layouts_load_the_same_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
