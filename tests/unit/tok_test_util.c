#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "tests/unit/tok_test_util.h"
#include "common/status.h"

cJSON *toktest_load_fixture(void)
{
    FILE *f = fopen(TT_FIXTURE, "rb");
    if (!f)
        fail_msg("%s is missing (run the tests from the repository root)", TT_FIXTURE);
    char *buf = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (cap - n < 4096) {
            cap = cap ? cap * 2 : 65536;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    fclose(f);
    cJSON *j = cJSON_ParseWithLength(buf, n);
    free(buf);
    if (!j)
        fail_msg("%s is not valid JSON", TT_FIXTURE);
    return j;
}

const char *toktest_str(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

bpe_tokenizer *toktest_load_tokenizer(const cJSON *fixture, const char *key)
{
    const char *path = toktest_str(fixture, key);
    char err[512];
    bpe_tokenizer *t = NULL;
    if (bpe_tokenizer_load(path, &t, err, sizeof(err)) != TN_OK)
        fail_msg("cannot load %s (%s); `make deps` fetches the vocabularies", path, err);
    return t;
}

void toktest_ids_from_json(const cJSON *arr, tok_ids *out)
{
    if (!cJSON_IsArray(arr))
        fail_msg("fixture: expected an array of token ids");
    for (const cJSON *e = arr->child; e; e = e->next) {
        if (!cJSON_IsNumber(e))
            fail_msg("fixture: non-numeric token id");
        assert_int_equal(tok_ids_push(out, (int32_t)e->valuedouble), TN_OK);
    }
}

void toktest_assert_ids_equal(const char *what, const int32_t *got, size_t n_got, const cJSON *want)
{
    tok_ids w;
    tok_ids_init(&w);
    toktest_ids_from_json(want, &w);
    size_t i = 0;
    while (i < n_got && i < w.len && got[i] == w.ids[i])
        i++;
    if (i < n_got || i < w.len) {
        fprintf(stderr, "# %s: first difference at index %zu (got %zu ids, want %zu)\n# got: ",
                what, i, n_got, w.len);
        for (size_t k = i > 3 ? i - 3 : 0; k < n_got && k < i + 8; k++)
            fprintf(stderr, "%d ", (int)got[k]);
        fprintf(stderr, "\n# want: ");
        for (size_t k = i > 3 ? i - 3 : 0; k < w.len && k < i + 8; k++)
            fprintf(stderr, "%d ", (int)w.ids[k]);
        fprintf(stderr, "\n");
        tok_ids_free(&w);
        fail_msg("%s: token ids differ from the reference", what);
    }
    tok_ids_free(&w);
}
