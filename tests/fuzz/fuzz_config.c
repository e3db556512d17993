/* libFuzzer target: the input as a model directory's config.json, parsed
 * with tm_config_load, then the RoPE tables derived from it as the model
 * loader does (kn_rope_inv_freq). Properties: the parse succeeds or fails
 * with a message (and a zeroed config); an accepted config is one the
 * engine can size a model from (positive dimensions, at most TM_MAX_LAYERS
 * layers, heads a multiple of KV heads, experts per token within the
 * experts, EOS ids inside the vocabulary), and its RoPE tables are finite. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/config.h"
#include "kernels/rope.h"
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_write_file(dir, "config.json", data, size);
    tm_config c;
    char err[512] = "";
    int rc = tm_config_load(dir, &c, err, sizeof(err));
    if (rc != TN_OK) {
        FZ_CHECK(rc == TN_ERR_ARG && err[0] != '\0');
        FZ_CHECK(c.arch == 0 && c.n_layers == 0);
        return 0;
    }
    FZ_CHECK(c.arch == TM_ARCH_GPT_OSS || c.arch == TM_ARCH_QWEN3_MOE);
    FZ_CHECK(c.vocab_size > 0 && c.hidden_size > 0 && c.n_heads > 0 && c.n_kv_heads > 0);
    FZ_CHECK(c.n_layers > 0 && c.n_layers <= TM_MAX_LAYERS);
    FZ_CHECK(c.n_heads % c.n_kv_heads == 0);
    FZ_CHECK(c.head_dim >= 2 && c.head_dim % 2 == 0 && c.rope.head_dim == c.head_dim);
    FZ_CHECK(c.n_experts > 0 && c.n_experts_per_tok > 0 && c.n_experts_per_tok <= c.n_experts);
    FZ_CHECK(c.moe_inter > 0 && c.max_position > 0);
    FZ_CHECK(isfinite(c.rms_eps) && c.rms_eps > 0);
    FZ_CHECK(c.n_eos >= 0 && c.n_eos <= TM_MAX_EOS);
    for (int i = 0; i < c.n_eos; i++)
        FZ_CHECK(c.eos_ids[i] >= 0 && c.eos_ids[i] < c.vocab_size);
    for (int i = 0; i < c.n_layers; i++)
        FZ_CHECK(c.layer_window[i] >= 0);
    if (c.arch == TM_ARCH_GPT_OSS)
        FZ_CHECK(isfinite(c.swiglu_limit) && c.swiglu_limit > 0);
    /* The tables are head_dim/2 floats; a huge head_dim is a valid parse
     * whose tables this harness does not allocate. */
    if (c.head_dim <= 4096) {
        float inv_freq[2048], scale = 0;
        if (kn_rope_inv_freq(&c.rope, inv_freq, &scale) == TN_OK) {
            FZ_CHECK(isfinite(scale));
            for (int i = 0; i < c.head_dim / 2; i++)
                FZ_CHECK(isfinite(inv_freq[i]));
        }
    }
    return 0;
}
