/* The growable string buffer (common/sbuf.c) and the token-id vector
 * (common/tok_ids.c): appends, formatting, JSON strings, consume, take, the
 * one error convention (TN_ERR_NOMEM, text unchanged, oom latched), and the
 * UTF-8 helpers built on it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "common/sbuf.h"
#include "common/status.h"
#include "common/tok_ids.h"

static void appends_and_formats(void **state)
{
    (void)state;
    sbuf b;
    sb_init(&b);
    assert_null(b.p);
    assert_int_equal(b.len, 0);
    assert_int_equal(sb_append(&b, "abc", 3), TN_OK);
    assert_int_equal(sb_append(&b, NULL, 0), TN_OK);
    assert_int_equal(sb_puts(&b, "de"), TN_OK);
    assert_int_equal(sb_putc(&b, 'f'), TN_OK);
    assert_int_equal(sb_printf(&b, "-%d-%s", 42, "x"), TN_OK);
    assert_string_equal(b.p, "abcdef-42-x");
    assert_int_equal(b.len, 11);
    /* Bytes, NUL included, go in verbatim and the text stays terminated. */
    assert_int_equal(sb_append(&b, "\0z", 2), TN_OK);
    assert_int_equal(b.len, 13);
    assert_memory_equal(b.p + 11, "\0z", 3);
    assert_false(b.oom);
    sb_free(&b);
    assert_null(b.p);
    assert_int_equal(b.len, 0);
}

static void grows_past_many_doublings(void **state)
{
    (void)state;
    sbuf b;
    sb_init(&b);
    for (int i = 0; i < 10000; i++)
        assert_int_equal(sb_putc(&b, (char)('a' + i % 26)), TN_OK);
    assert_int_equal(b.len, 10000);
    assert_true(b.cap > b.len);
    for (int i = 0; i < 10000; i++)
        assert_int_equal(b.p[i], 'a' + i % 26);
    assert_int_equal(b.p[10000], '\0');
    sb_free(&b);
}

static void reserve_and_reset_keep_memory(void **state)
{
    (void)state;
    sbuf b;
    sb_init(&b);
    assert_int_equal(sb_reserve(&b, 1000), TN_OK);
    assert_true(b.cap >= 1001);
    char *mem = b.p;
    size_t cap = b.cap;
    for (int i = 0; i < 1000; i++)
        sb_putc(&b, 'x');
    assert_ptr_equal(b.p, mem); /* no reallocation within the reserve */
    sb_reset(&b);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.p, "");
    assert_ptr_equal(b.p, mem);
    assert_int_equal(b.cap, cap);
    sb_puts(&b, "again");
    assert_string_equal(b.p, "again");
    sb_free(&b);
    /* Resetting a buffer that never allocated is fine. */
    sb_init(&b);
    sb_reset(&b);
    assert_null(b.p);
    sb_free(&b);
}

static void failure_leaves_text_and_latches_oom(void **state)
{
    (void)state;
    sbuf b;
    sb_init(&b);
    sb_puts(&b, "kept");
    /* A size that cannot be represented fails without touching the text. */
    assert_int_equal(sb_reserve(&b, SIZE_MAX), TN_ERR_NOMEM);
    assert_string_equal(b.p, "kept");
    assert_int_equal(b.len, 4);
    assert_true(b.oom);
    /* After a failure every append fails and changes nothing ... */
    assert_int_equal(sb_puts(&b, "more"), TN_ERR_NOMEM);
    assert_int_equal(sb_putc(&b, 'c'), TN_ERR_NOMEM);
    assert_int_equal(sb_printf(&b, "%d", 7), TN_ERR_NOMEM);
    assert_int_equal(sb_json_str(&b, "j", 1), TN_ERR_NOMEM);
    assert_int_equal(sb_append(&b, "", 0), TN_ERR_NOMEM);
    assert_string_equal(b.p, "kept");
    /* ... and take reports it once at the end, freeing the text. */
    assert_null(sb_take(&b));
    assert_null(b.p);
    assert_false(b.oom);
    sb_free(&b);
}

static void take_detaches(void **state)
{
    (void)state;
    sbuf b;
    sb_init(&b);
    char *empty = sb_take(&b); /* never NULL on success: "" */
    assert_non_null(empty);
    assert_string_equal(empty, "");
    free(empty);
    sb_puts(&b, "hello");
    char *s = sb_take(&b);
    assert_string_equal(s, "hello");
    assert_null(b.p);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
    free(s);
    /* The buffer is reusable after take. */
    sb_puts(&b, "x");
    assert_string_equal(b.p, "x");
    sb_free(&b);
}

static void consume_drops_a_prefix(void **state)
{
    (void)state;
    sbuf b;
    sb_init(&b);
    sb_puts(&b, "line1\nline2\n");
    sb_consume(&b, 6);
    assert_string_equal(b.p, "line2\n");
    assert_int_equal(b.len, 6);
    sb_consume(&b, 100);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.p, "");
    sb_free(&b);
}

static void json_strings_are_escaped(void **state)
{
    (void)state;
    sbuf b;
    sb_init(&b);
    static const char in[] = "a\"b\\c\n\r\t\b\f\x01\x1f\0é";
    assert_int_equal(sb_json_str(&b, in, sizeof in - 1), TN_OK);
    assert_string_equal(b.p, "\"a\\\"b\\\\c\\n\\r\\t\\b\\f\\u0001\\u001f\\u0000é\"");
    sb_reset(&b);
    assert_int_equal(sb_json_str(&b, "", 0), TN_OK);
    assert_string_equal(b.p, "\"\"");
    sb_free(&b);
}

static void utf8_helpers(void **state)
{
    (void)state;
    /* "é" is C3 A9; a lone C3 at the end waits for its continuation. */
    assert_int_equal(utf8_stable_prefix("ab\xC3", 3), 2);
    assert_int_equal(utf8_stable_prefix("ab\xC3\xA9", 4), 4);
    assert_int_equal(utf8_stable_prefix("\xE2\x82", 2), 0);
    /* Invalid bytes hold nothing back. */
    assert_int_equal(utf8_stable_prefix("a\xFF", 2), 2);
    assert_int_equal(utf8_stable_prefix("a\xC3" "b", 3), 3);

    sbuf b;
    sb_init(&b);
    utf8_sanitize_append(&b, "ok\xFFz\xE2\x82", 6);
    assert_string_equal(b.p, "ok\xEF\xBF\xBDz\xEF\xBF\xBD");
    sb_reset(&b);
    utf8_sanitize_append(&b, "\xC3\xA9", 2);
    assert_string_equal(b.p, "\xC3\xA9");
    sb_free(&b);
}

static void token_id_vector(void **state)
{
    (void)state;
    tok_ids v;
    tok_ids_init(&v);
    assert_int_equal(v.len, 0);
    for (int32_t i = 0; i < 100; i++)
        assert_int_equal(tok_ids_push(&v, i), TN_OK);
    const int32_t more[] = {7, 8, 9};
    assert_int_equal(tok_ids_append(&v, more, 3), TN_OK);
    assert_int_equal(tok_ids_append(&v, NULL, 0), TN_OK);
    assert_int_equal(v.len, 103);
    assert_int_equal(v.ids[99], 99);
    assert_int_equal(v.ids[102], 9);
    assert_int_equal(tok_ids_append(&v, more, SIZE_MAX / 2), TN_ERR_NOMEM);
    assert_int_equal(v.len, 103);
    tok_ids_free(&v);
    assert_null(v.ids);
    assert_int_equal(v.len, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(appends_and_formats),
        cmocka_unit_test(grows_past_many_doublings),
        cmocka_unit_test(reserve_and_reset_keep_memory),
        cmocka_unit_test(failure_leaves_text_and_latches_oom),
        cmocka_unit_test(take_detaches),
        cmocka_unit_test(consume_drops_a_prefix),
        cmocka_unit_test(json_strings_are_escaped),
        cmocka_unit_test(utf8_helpers),
        cmocka_unit_test(token_id_vector),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
