/* tandem-grammar-bench: what structured outputs add to a decode step. A
 * batch of --batch sequences, each constrained by the same JSON schema
 * (compiled as the router does) over a real vocabulary (--tokenizer, as
 * the workers load it), samples --steps tokens through tm_sample_rows on
 * the CPU backend from random logits; the same batch unconstrained is the
 * baseline. Prints, per step: the whole sampling, the host's mask work (trie
 * walks on cache misses, copies on hits), the masks computed vs served
 * from the caches, and the vocabulary load. --cache-mb 0 leaves out the
 * worker's shared mask cache (engine/grammar_cache.h): each sequence then
 * has only its own small cache, as before that cache existed; --warmup
 * steps run untimed first (a worker's steady state). It measures, it does not check:
 * correctness lives in tests/unit/test_grammar.c and the cluster tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/options.h"
#include "common/status.h"
#include "common/sys.h"
#include "engine/grammar.h"
#include "engine/grammar_cache.h"
#include "engine/sampler.h"
#include "kernels/backend.h"
#include "router/schema_grammar.h"
#include "worker/worker_vocab.h"

static const char INTRO[] =
    "Measures the per-step cost of constrained decoding (structured outputs) at a batch "
    "size on the CPU: tm_sample_rows with and without the grammar masks.";

static const char DEFAULT_SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":24},"
    "\"age\":{\"type\":\"integer\"},\"score\":{\"type\":\"number\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":8},\"maxItems\":4},"
    "\"ok\":{\"type\":\"boolean\"},\"where\":{\"anyOf\":[{\"type\":\"null\"},"
    "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"}},\"required\":[\"x\"]}]}},"
    "\"required\":[\"name\",\"age\",\"score\",\"tags\",\"ok\",\"where\"]}";

int main(int argc, char **argv)
{
    char tokenizer[OPT_PATH_MAX] = "vocab/gpt-tokenizer/data/o200k_base.tiktoken";
    char schema_file[OPT_PATH_MAX] = "";
    int batch = 128, steps = 64, vocab_arg = 0, stop = -1, warmup = 0;
    int cache_mb = TM_MASK_CACHE_DEFAULT_MB;
    const opt_spec specs[] = {
        {"tokenizer", OPT_STR, tokenizer, sizeof tokenizer,
         "vocabulary: tokenizer.json, o200k_base.tiktoken or bytes"},
        {"schema", OPT_STR, schema_file, sizeof schema_file,
         "JSON schema file (default: a nested object with strings, numbers, arrays, anyOf)"},
        {"batch", OPT_INT, &batch, 0, "sequences per step"},
        {"steps", OPT_INT, &steps, 0, "steps timed"},
        {"vocab", OPT_INT, &vocab_arg, 0, "model vocabulary (0: the tokenizer's, rounded up to 64)"},
        {"stop", OPT_INT, &stop, 0, "stop token id (-1: the last id of the vocabulary)"},
        {"cache-mb", OPT_INT, &cache_mb, 0,
         "the shared mask cache's budget in MiB, as a worker's (0: none, per-sequence caches only)"},
        {"warmup", OPT_INT, &warmup, 0, "untimed steps before the timed ones"},
    };
    const int n_specs = (int)(sizeof specs / sizeof *specs);
    char err[512];
    int prc = opts_parse(specs, n_specs, argc, argv, err, sizeof err);
    if (prc == OPTS_HELP) {
        opts_print_help(stdout, "tandem-grammar-bench", INTRO, specs, n_specs);
        return 0;
    }
    if (prc != OPTS_OK || batch <= 0 || steps <= 0 || warmup < 0 || cache_mb < 0) {
        fprintf(stderr, "tandem-grammar-bench: %s\n",
                prc != OPTS_OK ? err : "batch and steps must be positive, warmup and cache-mb >= 0");
        return 2;
    }
    int vocab = vocab_arg;
    if (!vocab)
        vocab = !strcmp(tokenizer, "bytes") ? 512 : 201088;
    char *schema_text = NULL;
    if (schema_file[0]) {
        FILE *f = fopen(schema_file, "rb");
        long n = -1;
        if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
            (schema_text = calloc((size_t)n + 1, 1)) && fread(schema_text, 1, (size_t)n, f) == (size_t)n) {
        } else {
            fprintf(stderr, "tandem-grammar-bench: cannot read %s\n", schema_file);
            if (f)
                fclose(f);
            free(schema_text);
            return 1;
        }
        fclose(f);
    }
    cJSON *schema = cJSON_Parse(schema_text ? schema_text : DEFAULT_SCHEMA);
    free(schema_text);
    int32_t *code = NULL;
    int n_code = 0;
    if (!schema || sg_compile_schema(schema, &code, &n_code, err, sizeof err) != TN_OK) {
        fprintf(stderr, "tandem-grammar-bench: schema: %s\n", schema ? err : "not JSON");
        cJSON_Delete(schema);
        return 1;
    }
    cJSON_Delete(schema);
    double t0 = tn_now_s();
    tm_vocab_trie trie;
    int loaded;
    if (worker_vocab_load(tokenizer, vocab, &trie, &loaded, err, sizeof err) != TN_OK || !loaded) {
        fprintf(stderr, "tandem-grammar-bench: %s\n", loaded ? err : "a vocabulary is needed");
        free(code);
        return 1;
    }
    double t_load = tn_now_s() - t0;
    /* worker_vocab_load gave the trie the worker's cache: replace it by
     * the budget asked for, or none */
    tm_mask_cache_free(trie.masks);
    trie.masks = NULL;
    if (cache_mb > 0 && tm_vocab_trie_share_masks(&trie, (size_t)cache_mb << 20) != TN_OK) {
        fprintf(stderr, "tandem-grammar-bench: cannot make a %d MiB mask cache\n", cache_mb);
        return 1;
    }
    if (stop < 0)
        stop = vocab - 1;
    kn_backend be;
    if (kn_backend_init_cpu(&be) != TN_OK) {
        fprintf(stderr, "tandem-grammar-bench: no CPU backend\n");
        return 1;
    }
    tm_sampler s;
    tm_sampler_init(&s, &be);
    float *logits = malloc((size_t)batch * vocab * sizeof *logits);
    kn_sampling *params = calloc((size_t)batch, sizeof *params);
    uint64_t *rngs = calloc((size_t)batch, sizeof *rngs);
    int32_t *tokens = calloc((size_t)batch, sizeof *tokens);
    tm_constraint *cons = calloc((size_t)batch, sizeof *cons);
    tm_constraint **con_ptrs = calloc((size_t)batch, sizeof *con_ptrs);
    if (!logits || !params || !rngs || !tokens || !cons || !con_ptrs) {
        fprintf(stderr, "tandem-grammar-bench: out of memory\n");
        return 1;
    }
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < (size_t)batch * vocab; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        logits[i] = (float)(x >> 40) / (float)(1 << 24) * 8.0f;
    }
    for (int i = 0; i < batch; i++) {
        params[i] = (kn_sampling){ .temperature = 1.0f, .top_p = 1.0f, .top_k = 0 };
        rngs[i] = 1000 + (uint64_t)i;
    }
    /* baseline: the same batch unconstrained */
    t0 = tn_now_s();
    for (int k = 0; k < steps; k++)
        if (tm_sample_rows(&s, logits, batch, vocab, params, rngs, NULL, NULL, NULL, tokens, NULL) != TN_OK)
            return 1;
    double t_plain = (tn_now_s() - t0) / steps;
    int32_t stop_id = stop;
    int restarts = 0;
    for (int i = 0; i < batch; i++) {
        if (tm_constraint_init(&cons[i], code, n_code, &trie, &stop_id, 1, err, sizeof err) != TN_OK) {
            fprintf(stderr, "tandem-grammar-bench: %s\n", err);
            return 1;
        }
        con_ptrs[i] = &cons[i];
    }
    double t_first = 0, t_total = 0, mask_timed = 0;
    for (int k = 0; k < warmup + steps; k++) {
        if (k == warmup)
            mask_timed = s.mask_s;
        t0 = tn_now_s();
        if (tm_sample_rows(&s, logits, batch, vocab, params, rngs, NULL, con_ptrs, NULL, tokens,
                           NULL) != TN_OK) {
            fprintf(stderr, "tandem-grammar-bench: sampling failed\n");
            return 1;
        }
        for (int i = 0; i < batch; i++) {
            if (tm_constraint_accept(&cons[i], tokens[i]) != TN_OK)
                return 1;
            if (tokens[i] == stop_id) { /* a finished sequence starts over */
                tm_constraint_free(&cons[i]);
                if (tm_constraint_init(&cons[i], code, n_code, &trie, &stop_id, 1, err, sizeof err))
                    return 1;
                restarts++;
            }
        }
        double dt = tn_now_s() - t0;
        if (k == 0)
            t_first = dt;
        if (k >= warmup)
            t_total += dt;
    }
    mask_timed = s.mask_s - mask_timed;
    /* the counts of sequences that finished went with their constraints:
     * these are the live ones' */
    uint64_t computed = 0, cached = 0, shared = 0;
    for (int i = 0; i < batch; i++) {
        computed += cons[i].masks_computed;
        cached += cons[i].masks_cached;
        shared += cons[i].masks_shared;
    }
    printf("| vocabulary | tokens | trie nodes | load + trie | shared cache | batch | sample, plain "
           "| sample, constrained | of which masks (host) | first step (cold) | masks walked / "
           "shared / own cache |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    char cache_col[32] = "none";
    if (cache_mb > 0)
        snprintf(cache_col, sizeof cache_col, "%d MiB", cache_mb);
    printf("| %s | %d | %d | %.2f s | %s | %d | %.2f ms | %.2f ms | %.2f ms | %.1f ms | %llu / %llu / "
           "%llu |\n",
           strrchr(tokenizer, '/') ? strrchr(tokenizer, '/') + 1 : tokenizer, vocab, trie.n_nodes,
           t_load, cache_col, batch, t_plain * 1e3, t_total / steps * 1e3, mask_timed / steps * 1e3,
           t_first * 1e3, (unsigned long long)computed, (unsigned long long)shared,
           (unsigned long long)cached);
    printf("# %d timed steps after %d warm-up steps, %d sequences finished and restarted\n", steps,
           warmup, restarts);
    if (trie.masks) {
        tm_mask_cache_stats st;
        tm_mask_cache_stats_get(trie.masks, &st);
        printf("# shared cache: %d masks (%.1f MiB of %.0f), %llu hits, %llu misses, %llu evicted\n",
               st.entries, (double)st.bytes / (1 << 20), (double)st.budget / (1 << 20),
               (unsigned long long)st.hits, (unsigned long long)st.misses,
               (unsigned long long)st.evictions);
    }
    for (int i = 0; i < batch; i++)
        tm_constraint_free(&cons[i]);
    free(cons);
    free(con_ptrs);
    free(logits);
    free(params);
    free(rngs);
    free(tokens);
    free(code);
    tm_sampler_free(&s);
    tm_vocab_trie_free(&trie);
    kn_backend_free(&be);
    return 0;
}
