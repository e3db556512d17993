/* common/options: the parts the programs in programs/ use beyond the
 * router's table: OPT_CALL setters (repeated options, ranges in a
 * program's own words), the "option" wording, and the strict value and
 * list parsers. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "common/options.h"

typedef struct collected {
    char items[4][32];
    int n;
    int level;
} collected;

static int collect(void *ctx, const char *name, const char *value, char *err, size_t errlen)
{
    collected *c = ctx;
    if (!strcmp(name, "level")) {
        if (opts_int(value, 1, 3, &c->level) == 0)
            return 0;
        snprintf(err, errlen, "--level must be 1..3, got '%s'", value);
        return -1;
    }
    if (c->n == 4 || strlen(value) >= sizeof c->items[0]) {
        snprintf(err, errlen, "too many --%s", name);
        return -1;
    }
    memcpy(c->items[c->n++], value, strlen(value) + 1);
    return 0;
}

static int parse(collected *c, int *flag, const char *word, int argc, const char **argv,
                 char *err, size_t errlen)
{
    opt_call call = {collect, c};
    const opt_spec specs[] = {
        {"item", OPT_CALL, &call, 0, "repeatable"},
        {"level", OPT_CALL, &call, 0, "1..3"},
        {"flag", OPT_BOOL, flag, 0, "a boolean"},
    };
    const opts_cli cli = {specs, 3, NULL, NULL, word};
    return opts_parse_cli(&cli, argc, (char **)argv, err, errlen);
}

static void call_options_repeat_and_check_ranges(void **state)
{
    (void)state;
    collected c = {0};
    int flag = 0;
    char err[256] = "";
    const char *ok[] = {"prog", "--item", "a", "--flag", "--item=b", "--level", "2", "--item", "c"};
    assert_int_equal(parse(&c, &flag, NULL, 9, ok, err, sizeof err), OPTS_OK);
    assert_int_equal(c.n, 3);
    assert_string_equal(c.items[0], "a");
    assert_string_equal(c.items[1], "b");
    assert_string_equal(c.items[2], "c");
    assert_int_equal(c.level, 2);
    assert_int_equal(flag, 1);

    /* the setter's message is reported as it is */
    const char *bad[] = {"prog", "--level", "4"};
    assert_int_equal(parse(&c, &flag, NULL, 3, bad, err, sizeof err), OPTS_ERROR);
    assert_string_equal(err, "--level must be 1..3, got '4'");
    assert_int_equal(c.level, 2);

    const char *novalue[] = {"prog", "--item"};
    assert_int_equal(parse(&c, &flag, NULL, 2, novalue, err, sizeof err), OPTS_ERROR);
    assert_non_null(strstr(err, "--item needs a value"));
}

static void unknown_flags_in_the_programs_words(void **state)
{
    (void)state;
    collected c = {0};
    int flag = 0;
    char err[256] = "";
    const char *argv[] = {"prog", "--frobnicate"};
    assert_int_equal(parse(&c, &flag, NULL, 2, argv, err, sizeof err), OPTS_ERROR);
    assert_non_null(strstr(err, "unknown flag '--frobnicate'"));
    assert_int_equal(parse(&c, &flag, "option", 2, argv, err, sizeof err), OPTS_ERROR);
    assert_non_null(strstr(err, "unknown option '--frobnicate'"));
    const char *stray[] = {"prog", "--flag", "extra"};
    assert_int_equal(parse(&c, &flag, "option", 3, stray, err, sizeof err), OPTS_ERROR);
    assert_non_null(strstr(err, "unexpected argument 'extra'"));
    const char *help[] = {"prog", "--frobnicate", "--help"};
    assert_int_equal(parse(&c, &flag, "option", 3, help, err, sizeof err), OPTS_HELP);
}

static void call_options_from_a_config_file(void **state)
{
    (void)state;
    char path[] = "/tmp/tandem-test-options-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char text[] = "item = x\nlevel = 3\n";
    assert_int_equal(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
    close(fd);
    collected c = {0};
    int flag = 0;
    char err[256] = "", arg[64];
    snprintf(arg, sizeof arg, "--config=%s", path);
    const char *argv[] = {"prog", arg, "--item", "y"};
    int rc = parse(&c, &flag, NULL, 4, argv, err, sizeof err);
    unlink(path);
    assert_int_equal(rc, OPTS_OK);
    assert_int_equal(c.n, 2);
    assert_string_equal(c.items[0], "x");
    assert_string_equal(c.items[1], "y");
    assert_int_equal(c.level, 3);
}

static void strict_value_parsers(void **state)
{
    (void)state;
    int v = 7;
    assert_int_equal(opts_int("12", 1, 12, &v), 0);
    assert_int_equal(v, 12);
    assert_int_equal(opts_int("13", 1, 12, &v), -1);
    assert_int_equal(opts_int("0", 1, 12, &v), -1);
    assert_int_equal(opts_int("12x", 1, 100, &v), -1);
    assert_int_equal(opts_int("", 1, 100, &v), -1);
    assert_int_equal(opts_int("99999999999", 0, 2147483647, &v), -1);
    assert_int_equal(v, 12);
    unsigned long long u = 0;
    assert_int_equal(opts_u64("18446744073709551615", &u), 0);
    assert_true(u == 18446744073709551615ull);
    assert_int_equal(opts_u64("-1", &u), -1);
    assert_int_equal(opts_u64("1.5", &u), -1);
    double d = 0;
    assert_int_equal(opts_double("0.25", &d), 0);
    assert_true(d == 0.25);
    assert_int_equal(opts_double("nan", &d), -1);
    assert_int_equal(opts_double("1e999", &d), -1);
    assert_int_equal(opts_double("1,5", &d), -1);
}

static void int_lists(void **state)
{
    (void)state;
    int32_t out[4];
    int n = -1;
    const char *s = "1,22,333";
    assert_int_equal(opts_list_len(s, strlen(s)), 3);
    assert_int_equal(opts_int_list(s, strlen(s), 0, 1000, out, 4, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(out[0], 1);
    assert_int_equal(out[1], 22);
    assert_int_equal(out[2], 333);
    /* the first len bytes only */
    assert_int_equal(opts_int_list("4,5;6", 3, 0, 9, out, 4, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(out[1], 5);
    const char *bad[] = {"", "1,,2", "1,", ",1", "1,-2", "+1", " 1", "1,2x", "1,1001",
                         "1,2,3,4,5"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        n = -1;
        assert_int_equal(opts_int_list(bad[i], strlen(bad[i]), 0, 1000, out, 4, &n), -1);
        assert_int_equal(n, -1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(call_options_repeat_and_check_ranges),
        cmocka_unit_test(unknown_flags_in_the_programs_words),
        cmocka_unit_test(call_options_from_a_config_file),
        cmocka_unit_test(strict_value_parsers),
        cmocka_unit_test(int_lists),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
