/* config.json parsing: both fixtures, both RoPE spellings, and the configs
 * the engine must refuse with a clear message. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/config.h"
#include "common/status.h"
#include "tests/unit/engine_testutil.h"

/* The fields that give a MoE model its shape. */
typedef struct moe_shape {
    int arch, vocab_size, hidden_size, n_layers, n_heads, n_kv_heads, head_dim, n_experts,
        n_experts_per_tok, moe_inter;
} moe_shape;

static void assert_moe_shape(const tm_config *c, moe_shape want)
{
    assert_int_equal(c->arch, want.arch);
    assert_int_equal(c->vocab_size, want.vocab_size);
    assert_int_equal(c->hidden_size, want.hidden_size);
    assert_int_equal(c->n_layers, want.n_layers);
    assert_int_equal(c->n_heads, want.n_heads);
    assert_int_equal(c->n_kv_heads, want.n_kv_heads);
    assert_int_equal(c->head_dim, want.head_dim);
    assert_int_equal(c->n_experts, want.n_experts);
    assert_int_equal(c->n_experts_per_tok, want.n_experts_per_tok);
    assert_int_equal(c->moe_inter, want.moe_inter);
}

static void gpt_oss_fixture(void **state)
{
    (void)state;
    tm_config c;
    char err[256] = "";
    assert_int_equal(tm_config_load(ET_GPT_OSS, &c, err, sizeof(err)), TN_OK);
    assert_int_equal(c.arch, TM_ARCH_GPT_OSS);
    assert_string_equal(c.model_type, "gpt_oss");
    assert_int_equal(c.vocab_size, 512);
    assert_int_equal(c.hidden_size, 64);
    assert_int_equal(c.n_layers, 4);
    assert_int_equal(c.n_heads, 4);
    assert_int_equal(c.n_kv_heads, 2);
    assert_int_equal(c.head_dim, 16);
    assert_int_equal(c.n_experts, 8);
    assert_int_equal(c.n_experts_per_tok, 2);
    assert_int_equal(c.moe_inter, 64);
    assert_true(c.rms_eps == 1e-5f);
    assert_int_equal(c.max_position, 131072);
    assert_int_equal(c.sliding_window, 16);
    const int windows[4] = {16, 0, 16, 0};
    for (int l = 0; l < 4; l++)
        assert_int_equal(c.layer_window[l], windows[l]);
    assert_true(c.attention_bias && c.attn_sinks && c.expert_bias);
    assert_false(c.qk_norm);
    assert_int_equal(c.route_mode, KN_ROUTE_TOPK_SOFTMAX);
    assert_int_equal(c.expert_act, KN_ACT_SWIGLU_OAI);
    assert_true(c.swiglu_alpha == 1.702f && c.swiglu_limit == 7.0f);
    assert_int_equal(c.rope.head_dim, 16);
    assert_true(c.rope.theta == 150000.0);
    assert_int_equal(c.rope.yarn, 1);
    assert_true(c.rope.factor == 32.0 && c.rope.beta_fast == 32.0 && c.rope.beta_slow == 1.0);
    assert_int_equal(c.rope.original_max_position, 4096);
    assert_int_equal(c.rope.truncate, 0);
    assert_true(c.rope.attention_factor <= 0);
    assert_false(c.tie_word_embeddings);
    assert_int_equal(c.n_eos, 1);
    assert_int_equal(c.eos_ids[0], 2);
}

static void qwen3_fixture(void **state)
{
    (void)state;
    tm_config c;
    char err[256] = "";
    assert_int_equal(tm_config_load(ET_QWEN3, &c, err, sizeof(err)), TN_OK);
    assert_moe_shape(&c, (moe_shape){TM_ARCH_QWEN3_MOE, 512, 64, 3, 4, 2, 16, 16, 4, 32});
    assert_true(c.norm_topk_prob && c.qk_norm);
    assert_false(c.attention_bias || c.attn_sinks || c.expert_bias);
    assert_int_equal(c.route_mode, KN_ROUTE_SOFTMAX_TOPK);
    assert_int_equal(c.expert_act, KN_ACT_SWIGLU);
    assert_true(c.rms_eps == 1e-6f);
    assert_true(c.rope.theta == 1000000.0);
    assert_int_equal(c.rope.yarn, 0);
    assert_int_equal(c.sliding_window, 0);
    for (int l = 0; l < 3; l++)
        assert_int_equal(c.layer_window[l], 0);
    assert_int_equal(c.n_eos, 1);
    assert_int_equal(c.eos_ids[0], 2);
}

/* A scratch dir holding a variant of a fixture's config.json. */
typedef struct variant {
    char dir[256];
    cJSON *json;
} variant;

static void variant_open(variant *v, const char *fixture)
{
    char path[512], *text = NULL;
    assert_int_equal(et_tmpdir(v->dir, sizeof(v->dir)), 0);
    FILE *f = fopen(et_path(path, sizeof(path), fixture, "config.json"), "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    rewind(f);
    text = calloc((size_t)n + 1, 1);
    assert_non_null(text);
    assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    v->json = cJSON_Parse(text);
    free(text);
    assert_non_null(v->json);
}

static void variant_set(variant *v, const char *key, cJSON *value)
{
    cJSON_DeleteItemFromObjectCaseSensitive(v->json, key);
    if (value)
        cJSON_AddItemToObject(v->json, key, value);
}

/* Writes the variant and parses it. */
static int variant_load(variant *v, tm_config *c, char *err, size_t errlen)
{
    char path[512];
    char *text = cJSON_Print(v->json);
    assert_non_null(text);
    assert_int_equal(et_write_file(et_path(path, sizeof(path), v->dir, "config.json"), text,
                                   strlen(text)), 0);
    free(text);
    err[0] = '\0';
    return tm_config_load(v->dir, c, err, errlen);
}

static void variant_close(variant *v)
{
    cJSON_Delete(v->json);
    et_rm_rf(v->dir);
}

/* transformers 4.x spelling: rope_theta + rope_scaling at the top level. */
static void rope_v4_spelling_matches_v5(void **state)
{
    (void)state;
    tm_config v5, v4;
    char err[256];
    assert_int_equal(tm_config_load(ET_GPT_OSS, &v5, err, sizeof(err)), TN_OK);
    variant v;
    variant_open(&v, ET_GPT_OSS);
    cJSON *rp = cJSON_DetachItemFromObjectCaseSensitive(v.json, "rope_parameters");
    cJSON_DeleteItemFromObjectCaseSensitive(rp, "rope_theta");
    variant_set(&v, "rope_scaling", rp);
    variant_set(&v, "rope_theta", cJSON_CreateNumber(150000.0));
    assert_int_equal(variant_load(&v, &v4, err, sizeof(err)), TN_OK);
    assert_memory_equal(&v4.rope, &v5.rope, sizeof(v4.rope));
    variant_close(&v);
}

static void eos_list_and_layer_type_default(void **state)
{
    (void)state;
    tm_config c;
    char err[256];
    variant v;
    variant_open(&v, ET_GPT_OSS);
    int ids[3] = {0, 2, 511};
    variant_set(&v, "eos_token_id", cJSON_CreateIntArray(ids, 3));
    variant_set(&v, "layer_types", NULL);   /* GptOssConfig: even layers slide */
    variant_set(&v, "num_experts_per_tok", NULL);
    variant_set(&v, "experts_per_token", cJSON_CreateNumber(3));
    assert_int_equal(variant_load(&v, &c, err, sizeof(err)), TN_OK);
    assert_int_equal(c.n_eos, 3);
    assert_int_equal(c.eos_ids[2], 511);
    assert_int_equal(c.n_experts_per_tok, 3);
    const int windows[4] = {16, 0, 16, 0};
    for (int l = 0; l < 4; l++)
        assert_int_equal(c.layer_window[l], windows[l]);
    variant_close(&v);
}

static void qwen3_sliding_window_applies_to_all_layers(void **state)
{
    (void)state;
    tm_config c;
    char err[256];
    variant v;
    variant_open(&v, ET_QWEN3);
    variant_set(&v, "use_sliding_window", cJSON_CreateTrue());
    variant_set(&v, "sliding_window", cJSON_CreateNumber(8));
    variant_set(&v, "num_local_experts", NULL);     /* released spelling */
    variant_set(&v, "num_experts", cJSON_CreateNumber(16));
    assert_int_equal(variant_load(&v, &c, err, sizeof(err)), TN_OK);
    assert_int_equal(c.n_experts, 16);
    assert_int_equal(c.sliding_window, 8);
    for (int l = 0; l < 3; l++)
        assert_int_equal(c.layer_window[l], 8);
    variant_close(&v);
}

/* One rejected variant: field set to json (NULL deletes it), expecting an
 * error whose text contains `expect`. */
static void expect_reject(const char *fixture, const char *key, cJSON *value,
                          const char *expect)
{
    tm_config c;
    char err[256];
    variant v;
    variant_open(&v, fixture);
    variant_set(&v, key, value);
    int rc = variant_load(&v, &c, err, sizeof(err));
    print_message("# %s=...: %s\n", key, err);
    assert_true(rc < 0);
    assert_non_null(strstr(err, expect));
    assert_non_null(strstr(err, "config.json"));
    variant_close(&v);
}

static void rejects_bad_configs(void **state)
{
    (void)state;
    expect_reject(ET_GPT_OSS, "model_type", cJSON_CreateString("llama"),
                  "unknown model_type 'llama'");
    expect_reject(ET_GPT_OSS, "model_type", NULL, "model_type");
    expect_reject(ET_GPT_OSS, "hidden_size", NULL, "missing required field 'hidden_size'");
    expect_reject(ET_GPT_OSS, "hidden_size", cJSON_CreateString("64"), "hidden_size");
    expect_reject(ET_GPT_OSS, "num_hidden_layers", cJSON_CreateNumber(2.5),
                  "num_hidden_layers");
    expect_reject(ET_GPT_OSS, "num_key_value_heads", cJSON_CreateNumber(3), "multiple");
    expect_reject(ET_GPT_OSS, "num_local_experts", NULL, "num_local_experts");
    expect_reject(ET_GPT_OSS, "num_experts_per_tok", cJSON_CreateNumber(9), "larger");
    expect_reject(ET_GPT_OSS, "layer_types", cJSON_CreateString("full_attention"),
                  "layer_types");
    expect_reject(ET_GPT_OSS, "sliding_window", NULL, "sliding_window");
    expect_reject(ET_GPT_OSS, "eos_token_id", cJSON_CreateNumber(512), "eos_token_id");
    expect_reject(ET_GPT_OSS, "rope_parameters",
                  cJSON_Parse("{\"rope_type\": \"linear\", \"rope_theta\": 10000.0, "
                              "\"factor\": 2.0}"),
                  "rope_type 'linear' is not supported");
    expect_reject(ET_GPT_OSS, "rope_parameters", cJSON_Parse("{\"rope_type\": \"yarn\"}"),
                  "rope_theta");
    expect_reject(ET_QWEN3, "mlp_only_layers", cJSON_Parse("[1]"), "not supported");
    expect_reject(ET_QWEN3, "decoder_sparse_step", cJSON_CreateNumber(2), "not supported");
    expect_reject(ET_QWEN3, "moe_intermediate_size", NULL, "moe_intermediate_size");
    expect_reject(ET_QWEN3, "hidden_act", cJSON_CreateString("gelu"), "gelu");
}

static void rejects_missing_and_invalid_files(void **state)
{
    (void)state;
    tm_config c;
    char err[256] = "", dir[256], path[512];
    assert_true(tm_config_load("/nonexistent/tandem-model", &c, err, sizeof(err)) < 0);
    assert_non_null(strstr(err, "/nonexistent/tandem-model/config.json"));
    assert_int_equal(et_tmpdir(dir, sizeof(dir)), 0);
    assert_true(tm_config_load(dir, &c, err, sizeof(err)) < 0);
    assert_non_null(strstr(err, "config.json"));
    const char *junk = "{\"model_type\": \"gpt_oss\", ";
    assert_int_equal(et_write_file(et_path(path, sizeof(path), dir, "config.json"), junk,
                                   strlen(junk)), 0);
    assert_true(tm_config_load(dir, &c, err, sizeof(err)) < 0);
    assert_non_null(strstr(err, "not a valid JSON object"));
    et_rm_rf(dir);
}

/* The released models' configs (tests/fixtures/configs, for synthetic
 * benchmarks) parse into their published shapes. */
static void real_model_configs(void **state)
{
    (void)state;
    tm_config c;
    char err[256] = "";
    static const struct { const char *file; int layers, experts; } oss[] = {
        {"tests/fixtures/configs/gpt-oss-20b.json", 24, 32},
        {"tests/fixtures/configs/gpt-oss-120b.json", 36, 128},
    };
    for (int i = 0; i < 2; i++) {
        if (tm_config_load_file(oss[i].file, &c, err, sizeof err) != TN_OK)
            fail_msg("%s", err);
        assert_int_equal(c.arch, TM_ARCH_GPT_OSS);
        assert_int_equal(c.n_layers, oss[i].layers);
        assert_int_equal(c.n_experts, oss[i].experts);
        assert_int_equal(c.hidden_size, 2880);
        assert_int_equal(c.n_heads, 64);
        assert_int_equal(c.n_kv_heads, 8);
        assert_int_equal(c.head_dim, 64);
        assert_int_equal(c.n_experts_per_tok, 4);
        assert_int_equal(c.moe_inter, 2880);
        assert_int_equal(c.vocab_size, 201088);
        for (int l = 0; l < c.n_layers; l++)
            assert_int_equal(c.layer_window[l], l % 2 == 0 ? 128 : 0);
        assert_int_equal(c.rope.yarn, 1);
        assert_true(c.rope.theta == 150000.0 && c.rope.factor == 32.0);
        assert_int_equal(c.rope.original_max_position, 4096);
        assert_true(c.swiglu_limit == 7.0f);
    }
    if (tm_config_load_file("tests/fixtures/configs/qwen3-30b-a3b.json", &c, err, sizeof err))
        fail_msg("%s", err);
    assert_moe_shape(&c, (moe_shape){TM_ARCH_QWEN3_MOE, 151936, 2048, 48, 32, 4, 128, 128, 8, 768});
    assert_int_equal(c.sliding_window, 0);
    assert_true(c.rope.theta == 1e6 && c.rope.yarn == 0);
    assert_true(c.rms_eps == 1e-6f);
    assert_int_equal(c.norm_topk_prob, 1);
    assert_int_equal(tm_config_load_file("tests/fixtures/configs/absent.json", &c, err,
                                         sizeof err), TN_ERR_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpt_oss_fixture),
        cmocka_unit_test(qwen3_fixture),
        cmocka_unit_test(rope_v4_spelling_matches_v5),
        cmocka_unit_test(eos_list_and_layer_type_default),
        cmocka_unit_test(qwen3_sliding_window_applies_to_all_layers),
        cmocka_unit_test(rejects_bad_configs),
        cmocka_unit_test(rejects_missing_and_invalid_files),
        cmocka_unit_test(real_model_configs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
