/* Shared-secret socket keys (common/sock_auth.c) and the HTTP API key check
 * (router/api_key.c): keys are a function of the secret and the label
 * alone, different secrets or labels give unrelated keys, bad secret files
 * are refused with a reason, and only "Bearer <the key>" passes. The CURVE
 * handshake and ZAP check themselves run between real processes in
 * tests/integration/test_security.sh. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/status.h"
#include "router/api_key.h"
#include "common/sock_auth.h"
#include "tests/unit/engine_testutil.h"

static void write_text(const char *path, const char *text)
{
    assert_int_equal(et_write_file(path, text, strlen(text)), 0);
}

static void keys_follow_the_secret_and_label(void **state)
{
    (void)state;
    char dir[256], a[512], b[512], err[256];
    assert_int_equal(et_tmpdir(dir, sizeof dir), 0);
    write_text(et_path(a, sizeof a, dir, "a"), "  0123456789abcdef0123456789abcdef-secret-one\n");
    write_text(et_path(b, sizeof b, dir, "b"), "0123456789abcdef0123456789abcdef-secret-two");
    sock_auth x, y, z, w;
    assert_int_equal(sock_auth_load(&x, a, "workers", err, sizeof err), 0);
    assert_int_equal(sock_auth_load(&y, a, "workers", err, sizeof err), 0);
    assert_int_equal(sock_auth_load(&z, b, "workers", err, sizeof err), 0);
    assert_int_equal(sock_auth_load(&w, a, "rpc", err, sizeof err), 0);
    assert_true(x.enabled && strlen(x.server_public) == 40 && strlen(x.client_secret) == 40);
    /* the same secret (whitespace aside) and label: the same keys on every process */
    assert_string_equal(x.server_public, y.server_public);
    assert_string_equal(x.client_public, y.client_public);
    assert_memory_equal(x.client_public_raw, y.client_public_raw, 32);
    /* another secret or another socket: other keys */
    assert_string_not_equal(x.server_public, z.server_public);
    assert_string_not_equal(x.client_public, z.client_public);
    assert_string_not_equal(x.server_public, w.server_public);
    assert_string_not_equal(x.server_public, x.client_public);
    sock_auth_wipe(&x);
    assert_int_equal(x.enabled, 0);
    assert_int_equal(x.server_secret[0], 0);
    sock_auth_wipe(&y);
    sock_auth_wipe(&z);
    sock_auth_wipe(&w);
    et_rm_rf(dir);
}

static void bad_secret_files_are_refused(void **state)
{
    (void)state;
    char dir[256], p[512], err[256] = "";
    sock_auth x;
    assert_int_equal(et_tmpdir(dir, sizeof dir), 0);
    write_text(et_path(p, sizeof p, dir, "short"), "   short secret   \n");
    assert_int_equal(sock_auth_load(&x, p, "workers", err, sizeof err), -1);
    assert_non_null(strstr(err, "at least 32 bytes"));
    assert_int_equal(x.enabled, 0);
    assert_int_equal(sock_auth_load(&x, et_path(p, sizeof p, dir, "none"), "workers", err,
                                    sizeof err),
                     TN_ERR_SYS);
    assert_non_null(strstr(err, "cannot read"));
    et_rm_rf(dir);
}

static void bearer_token_check(void **state)
{
    (void)state;
    char dir[256], p[512], err[256] = "";
    unsigned char h[32];
    const char *key = "sk-tandem-0123456789abcdef0123456789abcdef";
    assert_int_equal(et_tmpdir(dir, sizeof dir), 0);
    char text[128];
    snprintf(text, sizeof text, "%s\n", key);
    write_text(et_path(p, sizeof p, dir, "key"), text);
    assert_int_equal(api_key_hash_file(p, h, err, sizeof err), 0);
    char good[128];
    snprintf(good, sizeof good, "Bearer %s", key);
    assert_int_equal(api_key_check(h, good), 1);
    snprintf(good, sizeof good, "Bearer   %s  ", key);
    assert_int_equal(api_key_check(h, good), 1);
    assert_int_equal(api_key_check(h, NULL), 0);
    assert_int_equal(api_key_check(h, ""), 0);
    assert_int_equal(api_key_check(h, key), 0); /* no scheme */
    assert_int_equal(api_key_check(h, "Basic c2stdGFuZGVt"), 0);
    assert_int_equal(api_key_check(h, "Bearer sk-tandem-0123456789abcdef0123456789abcdeF"), 0);
    assert_int_equal(api_key_check(h, "Bearer sk-tandem-0123456789abcdef0123456789abcde"), 0);
    write_text(p, "two words 0123456789abcdef0123456789abcdef");
    assert_int_equal(api_key_hash_file(p, h, err, sizeof err), -1);
    assert_non_null(strstr(err, "one word"));
    write_text(p, "0123456789");
    assert_int_equal(api_key_hash_file(p, h, err, sizeof err), -1);
    assert_non_null(strstr(err, "at least 32 bytes"));
    et_rm_rf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(keys_follow_the_secret_and_label),
        cmocka_unit_test(bad_secret_files_are_refused),
        cmocka_unit_test(bearer_token_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
