#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "common/status.h"

static void status_strings_are_distinct(void **state)
{
    (void)state;
    assert_string_equal(tn_status_str(TN_OK), "ok");
    assert_string_not_equal(tn_status_str(TN_ERR_ARG), tn_status_str(TN_ERR_NOMEM));
    assert_string_equal(tn_status_str(12345), "unknown error");
    /* every code of the one status type has its own description: no two
     * meanings share a value */
    for (int a = TN_ERR_TOO_LONG; a <= TN_IN_PROGRESS; a++)
        for (int b = a + 1; b <= TN_IN_PROGRESS; b++)
            assert_string_not_equal(tn_status_str(a), tn_status_str(b));
}

static void fail_formats_and_returns_the_status(void **state)
{
    (void)state;
    char err[16];
    assert_int_equal(tn_fail(err, sizeof err, TN_ERR_TIMEOUT, "after %d ms", 1500), TN_ERR_TIMEOUT);
    assert_string_equal(err, "after 1500 ms");
    tn_errf(err, sizeof err, "%s", "a message longer than the buffer");
    assert_int_equal(strlen(err), sizeof err - 1); /* truncated, terminated */
    assert_int_equal(tn_fail(NULL, 0, TN_ERR_ARG, "ignored"), TN_ERR_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(status_strings_are_distinct),
        cmocka_unit_test(fail_formats_and_returns_the_status),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
