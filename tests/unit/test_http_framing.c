/* The HTTP request framing the router's connection front applies
 * (router/http_framing.c): requests pass through byte for byte, whole or
 * one byte at a time, and a chunked body declaring more than the limit is
 * cut at the first digit that takes it over, with the last chunk put in
 * place of its size line. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "router/http_framing.h"

typedef struct fed {
    char out[8192];
    size_t len;
    int ev;
    int heads_events;
} fed;

/* Feeds s in pieces of `step` bytes (0: all at once). */
static void feed(http_framing *f, const char *s, size_t n, size_t step, fed *r)
{
    memset(r, 0, sizeof *r);
    size_t i = 0;
    while (i < n) {
        size_t k = step && n - i > step ? step : n - i;
        char buf[4096 + HTTP_FRAMING_SLACK];
        size_t o = 0;
        int ev = http_framing_feed(f, s + i, k, buf, &o);
        assert_true(o <= k + HTTP_FRAMING_SLACK);
        assert_true(r->len + o <= sizeof r->out);
        memcpy(r->out + r->len, buf, o);
        r->len += o;
        r->ev |= ev;
        r->heads_events += (ev & FR_EV_HEAD) != 0;
        i += k;
    }
}

/* s passes through unchanged, in every piece size, ending between requests. */
static void expect_passthrough(const char *s, uint64_t heads)
{
    size_t steps[] = {0, 1, 2, 3, 7, 64};
    for (size_t k = 0; k < sizeof steps / sizeof *steps; k++) {
        http_framing f;
        http_framing_init(&f, 1000);
        fed r;
        feed(&f, s, strlen(s), steps[k], &r);
        assert_int_equal(r.len, strlen(s));
        assert_memory_equal(r.out, s, r.len);
        assert_false(r.ev & FR_EV_REFUSED);
        assert_int_equal(f.heads, heads);
        assert_false(http_framing_mid_request(&f));
    }
}

static void requests_pass_through(void **state)
{
    (void)state;
    expect_passthrough("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 1);
    expect_passthrough("\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n", 2);
    expect_passthrough("POST /v1/completions HTTP/1.1\r\nHost: x\r\ncontent-LENGTH:  5 \r\n\r\n"
                       "hello"
                       "GET /metrics HTTP/1.1\r\n\r\n",
                       2);
    /* chunked, with extensions, bare LFs and trailers */
    expect_passthrough("POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n"
                       "5\r\nhello\r\n1a;ext=1\r\nabcdefghijklmnopqrstuvwxyz\r\n3\nabc\n"
                       "0\r\nX-Trailer: 1\r\n\r\n"
                       "GET / HTTP/1.1\n\n",
                       2);
    /* exactly the limit (1000) in two chunks */
    char big[2200];
    int n = snprintf(big, sizeof big, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                                      "1f4\r\n%0500d\r\n1F4\r\n%0500d\r\n0\r\n\r\n", 0, 0);
    assert_true(n > 0 && (size_t)n < sizeof big);
    expect_passthrough(big, 1);
}

/* Framing libmicrohttpd refuses (the router answers 400 before the body)
 * passes through uninterpreted. */
static void ambiguous_framing_is_opaque(void **state)
{
    (void)state;
    const char *cases[] = {
        "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nffffffffffffffff\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nffffffffffffffff\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n folded\r\n\r\nffffffffffffffff\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nffffffffffffffff\r\n",
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        http_framing f;
        http_framing_init(&f, 1000);
        fed r;
        feed(&f, cases[i], strlen(cases[i]), 1, &r);
        assert_int_equal(f.state, FR_OPAQUE);
        assert_int_equal(r.len, strlen(cases[i]));
        assert_memory_equal(r.out, cases[i], r.len);
        assert_false(r.ev & FR_EV_REFUSED);
    }
}

static void expect_refused(const char *s, size_t keep, uint64_t max, size_t step)
{
    http_framing f;
    http_framing_init(&f, max);
    fed r;
    feed(&f, s, strlen(s), step, &r);
    assert_true(r.ev & FR_EV_REFUSED);
    assert_int_equal(f.state, FR_REFUSED);
    assert_false(http_framing_mid_request(&f));
    /* what came before the refused size line, then the last chunk */
    assert_int_equal(r.len, keep + 5);
    assert_memory_equal(r.out, s, keep);
    assert_memory_equal(r.out + keep, "0\r\n\r\n", 5);
}

static void oversized_chunks_are_cut_at_once(void **state)
{
    (void)state;
    const char *head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    char s[512];
    size_t steps[] = {0, 1, 5};
    for (size_t k = 0; k < 3; k++) {
        /* 2^64-1 with no end of line and no data: refused at the digit that
         * goes over, without waiting for more */
        snprintf(s, sizeof s, "%sffffffffffffffff", head);
        expect_refused(s, strlen(head), 1000, steps[k]);
        snprintf(s, sizeof s, "%s3e9", head); /* 1001 */
        expect_refused(s, strlen(head), 1000, steps[k]);
        /* leading zeros are fine until the value overflows the limit */
        snprintf(s, sizeof s, "%s00000000000000000000003e8\r\n", head); /* 1000 */
        http_framing f;
        http_framing_init(&f, 1000);
        fed r;
        feed(&f, s, strlen(s), steps[k], &r);
        assert_false(r.ev & FR_EV_REFUSED);
        assert_int_equal(f.state, FR_CHUNK_DATA);
        assert_true(http_framing_mid_request(&f));
        /* the sum of chunks counts: 600 + 401 */
        snprintf(s, sizeof s, "%s258\r\n", head);
        size_t keep = strlen(s) + 600 + 2;
        char *t = malloc(keep + 64);
        assert_non_null(t);
        memcpy(t, s, strlen(s));
        memset(t + strlen(s), 'a', 600);
        memcpy(t + strlen(s) + 600, "\r\n191\r\n", 8);
        expect_refused(t, keep, 1000, steps[k]);
        free(t);
    }
}

static void a_refused_request_drops_the_rest(void **state)
{
    (void)state;
    const char *s = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nfffff\r\nxxxxxxxx"
                    "GET /next HTTP/1.1\r\n\r\n";
    http_framing f;
    http_framing_init(&f, 100);
    fed r;
    feed(&f, s, strlen(s), 0, &r);
    assert_true(r.ev & FR_EV_REFUSED);
    assert_int_equal(f.heads, 1);
    size_t head = strlen("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert_int_equal(r.len, head + 5);
}

static void mid_request_tracks_heads_and_bodies(void **state)
{
    (void)state;
    http_framing f;
    http_framing_init(&f, 1000);
    char out[64 + HTTP_FRAMING_SLACK];
    size_t o;
    assert_false(http_framing_mid_request(&f));
    http_framing_feed(&f, "PO", 2, out, &o);
    assert_true(http_framing_mid_request(&f));
    const char *rest = "ST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n";
    assert_int_equal(http_framing_feed(&f, rest, strlen(rest), out, &o), FR_EV_HEAD);
    assert_true(http_framing_mid_request(&f));
    http_framing_feed(&f, "ok", 2, out, &o);
    assert_false(http_framing_mid_request(&f));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(requests_pass_through),
        cmocka_unit_test(ambiguous_framing_is_opaque),
        cmocka_unit_test(oversized_chunks_are_cut_at_once),
        cmocka_unit_test(a_refused_request_drops_the_rest),
        cmocka_unit_test(mid_request_tracks_heads_and_bodies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
