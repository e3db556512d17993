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
    assert_string_equal(kn_status_str(KN_OK), "ok");
    assert_string_not_equal(kn_status_str(KN_ERR_ARG), kn_status_str(KN_ERR_NOMEM));
    assert_string_equal(kn_status_str(12345), "unknown error");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(status_strings_are_distinct),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
