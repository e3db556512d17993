#include "tests/fuzz/parse_props.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/status.h"
#include "common/utf8.h"
#include "tests/fuzz/harness.h"

static void pool_add(fz_token_pool *pool, int32_t id, const char *what)
{
    if (id < 0) {
        fprintf(stderr, "token '%s' is not in the vocabulary\n", what);
        exit(2);
    }
    if (pool->n < sizeof(pool->ids) / sizeof(pool->ids[0]))
        pool->ids[pool->n++] = id;
}

void fz_token_pool_init(fz_token_pool *pool, const bpe_tokenizer *t,
                        const char *const *specials, size_t n_specials)
{
    pool->n = 0;
    pool->vocab = bpe_vocab_size(t);
    for (size_t i = 0; i < n_specials; i++)
        pool_add(pool, bpe_token_id(t, specials[i]), specials[i]);
    static const char *const halves[] = {"\xF0", "\x9F", "\x98", "\x80"};
    for (size_t i = 0; i < 4; i++)
        pool_add(pool, bpe_token_id(t, halves[i]), "a UTF-8 byte");
    const char *text = "Hello world\n\n to=functions.get_weather json {\"city\": \"Paris\"} analysis "
                       "final commentary assistant user <|constrain|>json {\"name\": \"f\", "
                       "\"arguments\": {}}\n";
    tok_ids ids;
    tok_ids_init(&ids);
    char err[256];
    if (bpe_encode(t, text, strlen(text), 0, &ids, err, sizeof(err)) != TN_OK) {
        fprintf(stderr, "cannot encode the pool text: %s\n", err);
        exit(2);
    }
    for (size_t i = 0; i < ids.len; i++)
        pool_add(pool, ids.ids[i], "an ordinary token");
    tok_ids_free(&ids);
}

static int text_equal(const sbuf *a, const sbuf *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->p, b->p, a->len) == 0);
}

static int str_equal(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

static void check_result(const chat_result *r)
{
    FZ_CHECK(utf8_valid(r->reasoning.p ? r->reasoning.p : "", r->reasoning.len, NULL));
    FZ_CHECK(utf8_valid(r->content.p ? r->content.p : "", r->content.len, NULL));
    for (size_t i = 0; i < r->n_tool_calls; i++) {
        FZ_CHECK(r->tool_calls[i].name != NULL);
        FZ_CHECK(r->tool_calls[i].arguments != NULL);
    }
}

void fz_parse_input(const bpe_tokenizer *t, chat_format f, const fz_token_pool *pool,
                    const uint8_t *data, size_t size)
{
    if (size == 0)
        return;
    chat_parse_opts po = {data[0] & 1};
    const uint8_t *p = data + 1, *end = data + size;
    tok_ids ids;
    tok_ids_init(&ids);
    while (p < end) {
        uint8_t b = *p++;
        int32_t id = b < 0xC0 ? pool->ids[b % pool->n]
                              : (int32_t)(((uint32_t)(b & 0x3F) << 16 | fz_take(&p, end, 2)) %
                                          (uint32_t)pool->vocab);
        FZ_CHECK(tok_ids_push(&ids, id) == TN_OK);
    }

    char err[256] = "";
    chat_parser *sp = NULL;
    FZ_CHECK(chat_parser_new(t, f, &po, &sp, err, sizeof(err)) == TN_OK);
    sbuf reasoning, content;
    sb_init(&reasoning);
    sb_init(&content);
    size_t n_calls = 0;
    int failed = 0;
    for (size_t i = 0; i <= ids.len && !failed; i++) {
        chat_delta d;
        memset(&d, 0, sizeof(d));
        err[0] = '\0';
        int rc = i < ids.len ? chat_parser_push(sp, ids.ids[i], &d, err, sizeof(err))
                             : chat_parser_finish(sp, &d, err, sizeof(err));
        if (rc != TN_OK) {
            FZ_CHECK(rc == TN_ERR_ARG);
            FZ_CHECK(err[0] != '\0');
            failed = 1;
            break;
        }
        if (d.kind == CHAT_DELTA_REASONING || d.kind == CHAT_DELTA_CONTENT) {
            FZ_CHECK(d.len > 0 && utf8_valid(d.text, d.len, NULL));
            FZ_CHECK(sb_append(d.kind == CHAT_DELTA_REASONING ? &reasoning : &content,
                                   d.text, d.len) == TN_OK);
        } else if (d.kind == CHAT_DELTA_TOOL_CALL) {
            FZ_CHECK(d.tool_call != NULL && d.tool_index == n_calls);
            n_calls++;
        }
    }
    if (!failed) {
        const chat_result *r = chat_parser_result(sp);
        check_result(r);
        FZ_CHECK(text_equal(&reasoning, &r->reasoning));
        FZ_CHECK(text_equal(&content, &r->content));
        FZ_CHECK(n_calls == r->n_tool_calls);

        chat_parser *wp = NULL;
        FZ_CHECK(chat_parse_completion(t, f, &po, ids.ids, ids.len, &wp, err, sizeof(err)) ==
                 TN_OK);
        const chat_result *w = chat_parser_result(wp);
        FZ_CHECK(text_equal(&w->reasoning, &r->reasoning));
        FZ_CHECK(text_equal(&w->content, &r->content));
        FZ_CHECK(w->n_tool_calls == r->n_tool_calls && w->stopped == r->stopped);
        for (size_t i = 0; i < w->n_tool_calls; i++) {
            FZ_CHECK(str_equal(w->tool_calls[i].name, r->tool_calls[i].name));
            FZ_CHECK(str_equal(w->tool_calls[i].arguments, r->tool_calls[i].arguments));
        }
        chat_parser_free(wp);
    }
    chat_parser_free(sp);
    sb_free(&reasoning);
    sb_free(&content);
    tok_ids_free(&ids);
}
