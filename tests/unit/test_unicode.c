/* Unicode support of the tokenizers: NFC against the Unicode conformance
 * file NormalizationTest.txt (Debian unicode-data), lossy UTF-8 decoding
 * against the Unicode standard's own example, property lookups. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "tokenizer/unicode.h"
#include "common/utf8.h"
#include "common/status.h"

#define NORMALIZATION_TEST "/usr/share/unicode/NormalizationTest.txt.bz2"

/* Parses "0044 0307" into UTF-8. */
static void hex_field_to_utf8(const char *field, sbuf *out)
{
    sb_reset(out);
    const char *p = field;
    while (*p) {
        char *end;
        unsigned long cp = strtoul(p, &end, 16);
        if (end == p)
            break;
        char b[4];
        int n = utf8_encode((uint32_t)cp, b);
        assert_true(n > 0);
        assert_int_equal(sb_append(out, b, (size_t)n), TN_OK);
        p = end;
        while (*p == ' ')
            p++;
    }
}

static void assert_nfc(const sbuf *in, const sbuf *want, const char *line)
{
    sbuf got;
    sb_init(&got);
    assert_int_equal(uc_nfc_append(&got, in->p ? in->p : "", in->len), TN_OK);
    if (got.len != want->len || memcmp(got.p ? got.p : "", want->p ? want->p : "", got.len))
        fail_msg("NFC mismatch on NormalizationTest line: %s", line);
    sb_free(&got);
}

static void nfc_conformance(void **state)
{
    (void)state;
    FILE *f = popen("bzcat " NORMALIZATION_TEST, "r");
    if (!f)
        fail_msg("cannot run bzcat on %s (make deps installs unicode-data and bzip2)",
                 NORMALIZATION_TEST);
    uint8_t *in_part1 = calloc(0x110000, 1);
    assert_non_null(in_part1);
    char line[1024];
    int part = -1, checked = 0;
    sbuf c[5];
    for (int i = 0; i < 5; i++)
        sb_init(&c[i]);
    while (fgets(line, sizeof(line), f)) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        if (line[0] == '@') {
            part = atoi(line + 5);
            continue;
        }
        char *fields[5], *p = line;
        for (int i = 0; i < 5; i++) {
            fields[i] = p;
            p = strchr(p, ';');
            assert_non_null(p);
            *p++ = '\0';
        }
        for (int i = 0; i < 5; i++)
            hex_field_to_utf8(fields[i], &c[i]);
        if (part == 1)
            in_part1[strtoul(fields[0], NULL, 16)] = 1;
        /* c2 == NFC(c1) == NFC(c2) == NFC(c3); c4 == NFC(c4) == NFC(c5) */
        assert_nfc(&c[0], &c[1], fields[0]);
        assert_nfc(&c[1], &c[1], fields[0]);
        assert_nfc(&c[2], &c[1], fields[0]);
        assert_nfc(&c[3], &c[3], fields[0]);
        assert_nfc(&c[4], &c[3], fields[0]);
        checked++;
    }
    int rc = pclose(f);
    if (rc != 0 || checked < 10000)
        fail_msg("could not read %s (bzcat status %d, %d lines)", NORMALIZATION_TEST, rc, checked);
    /* Every code point not listed in part 1 is its own NFC. */
    sbuf one;
    sb_init(&one);
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if (in_part1[cp] || (cp >= 0xD800 && cp <= 0xDFFF))
            continue;
        char b[4];
        int n = utf8_encode(cp, b);
        sb_reset(&one);
        assert_int_equal(uc_nfc_append(&one, b, (size_t)n), TN_OK);
        if (one.len != (size_t)n || memcmp(one.p, b, (size_t)n))
            fail_msg("NFC changed U+%04X, which part 1 says is stable", cp);
    }
    sb_free(&one);
    for (int i = 0; i < 5; i++)
        sb_free(&c[i]);
    free(in_part1);
}

static void nfc_rejects_invalid_utf8(void **state)
{
    (void)state;
    sbuf out;
    sb_init(&out);
    assert_int_equal(uc_nfc_append(&out, "a\xff", 2), TN_ERR_ARG);
    sb_free(&out);
}

/* Unicode 15.0, section 3.9 "U+FFFD Substitution of Maximal Subparts",
 * Table 3-8: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 decodes to
 * a FFFD FFFD FFFD b FFFD c FFFD FFFD d. */
static void lossy_decoding_follows_the_standard(void **state)
{
    (void)state;
    const unsigned char in[] = {0x61, 0xF1, 0x80, 0x80, 0xE1, 0x80, 0xC2,
                                0x62, 0x80, 0x63, 0x80, 0xBF, 0x64};
    sbuf out;
    sb_init(&out);
    assert_int_equal(utf8_append_lossy(&out, in, sizeof(in), 1, NULL), TN_OK);
    assert_string_equal(out.p, "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "b\xEF\xBF\xBD"
                                  "c\xEF\xBF\xBD\xEF\xBF\xBD" "d");
    /* Table 3-9..3-11 shapes: surrogates and overlongs are one FFFD per byte. */
    sb_reset(&out);
    const unsigned char sur[] = {0xED, 0xA0, 0x80, 0xC0, 0xAF};
    assert_int_equal(utf8_append_lossy(&out, sur, sizeof(sur), 1, NULL), TN_OK);
    assert_int_equal(out.len, 15);
    /* Not final: a truncated character at the end waits. */
    sb_reset(&out);
    size_t pending = 99;
    const unsigned char part[] = {'o', 'k', 0xF0, 0x9F, 0x98};
    assert_int_equal(utf8_append_lossy(&out, part, sizeof(part), 0, &pending), TN_OK);
    assert_string_equal(out.p, "ok");
    assert_int_equal(pending, 3);
    sb_free(&out);
}

static void utf8_strictness(void **state)
{
    (void)state;
    uint32_t cp;
    assert_int_equal(utf8_decode((const unsigned char *)"\xC3\xA9", 2, &cp), 2);
    assert_int_equal(cp, 0xE9);
    assert_int_equal(utf8_decode((const unsigned char *)"\xF0\x9F\x91\x8D", 4, &cp), 4);
    assert_int_equal(cp, 0x1F44D);
    assert_int_equal(utf8_decode((const unsigned char *)"\xE0\x80\x80", 3, &cp), 0);
    assert_int_equal(utf8_decode((const unsigned char *)"\xF4\x90\x80\x80", 4, &cp), 0);
    assert_int_equal(utf8_decode((const unsigned char *)"\xED\xB0\x80", 3, &cp), 0);
    char b[4];
    assert_int_equal(utf8_encode(0xD800, b), 0);
    assert_int_equal(utf8_encode(0x110000, b), 0);
    size_t bad = 0;
    assert_false(utf8_valid("abc\xE2\x82", 5, &bad));
    assert_int_equal(bad, 3);
}

static void properties(void **state)
{
    (void)state;
    assert_int_equal(uc_category('A'), UC_LU);
    assert_int_equal(uc_category(0x111), UC_LL);    /* đ */
    assert_int_equal(uc_category(0x1C5), UC_LT);    /* ǅ */
    assert_int_equal(uc_category(0x4E2D), UC_LO);   /* 中, inside a CJK range entry */
    assert_int_equal(uc_category(0xAC01), UC_LO);   /* Hangul syllable range */
    assert_int_equal(uc_category(0x301), UC_MN);
    assert_int_equal(uc_category(0x94D), UC_MN);    /* Devanagari virama */
    assert_int_equal(uc_category(0x93F), UC_MC);
    assert_int_equal(uc_category(0x661), UC_ND);    /* Arabic-Indic one */
    assert_int_equal(uc_category(0xBD), UC_NO);     /* ½ */
    assert_int_equal(uc_category(0x1F44D), UC_SO);
    assert_int_equal(uc_category(0x378), UC_CN);    /* unassigned */
    assert_true(uc_is_white_space(0x85));
    assert_true(uc_is_white_space(0x3000));
    assert_false(uc_is_white_space(0x200B));        /* ZERO WIDTH SPACE is Cf */
    assert_false(uc_is_white_space(0xFEFF));
    assert_int_equal(uc_combining_class(0x301), 230);
    assert_int_equal(uc_compose('C', 0x30C), 0x10C);
    assert_int_equal(uc_compose(0x1100, 0x1161), 0xAC00);
    assert_int_equal(uc_compose(0x915, 0x93C), 0);   /* composition exclusion */
    uint32_t d[UC_MAX_DECOMP];
    assert_int_equal(uc_decompose(0x1E09, d), 3);    /* ḉ = c + cedilla + acute */
    assert_int_equal(d[0], 'c');
    assert_int_equal(uc_decompose(0xAC01, d), 3);    /* 각 = ᄀ ᅡ ᆨ */
    assert_int_equal(d[2], 0x11A8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nfc_conformance),
        cmocka_unit_test(nfc_rejects_invalid_utf8),
        cmocka_unit_test(lossy_decoding_follows_the_standard),
        cmocka_unit_test(utf8_strictness),
        cmocka_unit_test(properties),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
