/* NFC normalization (UAX #15): canonical decomposition, canonical ordering,
 * canonical composition. The Qwen tokenizer.json asks for NFC before
 * pre-tokenization, so "c" + U+030C must tokenize exactly like "č". */
#include <stdlib.h>
#include <string.h>
#include "tokenizer/unicode.h"
#include "common/utf8.h"
#include "common/status.h"

typedef struct cp_vec {
    uint32_t *cp;
    uint8_t *cc;
    size_t len, cap;
} cp_vec;

static int cp_vec_push(cp_vec *v, uint32_t cp)
{
    if (v->len == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        uint32_t *c = realloc(v->cp, cap * sizeof(*c));
        if (!c)
            return TN_ERR_NOMEM;
        v->cp = c;
        uint8_t *k = realloc(v->cc, cap);
        if (!k)
            return TN_ERR_NOMEM;
        v->cc = k;
        v->cap = cap;
    }
    v->cp[v->len] = cp;
    v->cc[v->len] = (uint8_t)uc_combining_class(cp);
    v->len++;
    return TN_OK;
}

/* Stable sort of a run of non-starters by combining class. Runs are
 * usually one or two marks; long adversarial runs use a counting sort so
 * the cost stays linear. */
static int sort_run(cp_vec *v, size_t start, size_t end)
{
    size_t n = end - start;
    if (n <= 16) {
        for (size_t i = start + 1; i < end; i++) {
            uint32_t c = v->cp[i];
            uint8_t k = v->cc[i];
            size_t j = i;
            while (j > start && v->cc[j - 1] > k) {
                v->cp[j] = v->cp[j - 1];
                v->cc[j] = v->cc[j - 1];
                j--;
            }
            v->cp[j] = c;
            v->cc[j] = k;
        }
        return TN_OK;
    }
    size_t count[257] = {0};
    uint32_t *tmp = malloc(n * sizeof(*tmp));
    if (!tmp)
        return TN_ERR_NOMEM;
    for (size_t i = start; i < end; i++)
        count[v->cc[i] + 1]++;
    for (int k = 1; k < 257; k++)
        count[k] += count[k - 1];
    for (size_t i = start; i < end; i++)
        tmp[count[v->cc[i]]++] = v->cp[i];
    for (size_t i = 0; i < n; i++) {
        v->cp[start + i] = tmp[i];
        v->cc[start + i] = (uint8_t)uc_combining_class(tmp[i]);
    }
    free(tmp);
    return TN_OK;
}

static int passes_quick_check(const unsigned char *s, size_t n)
{
    int last_cc = 0;
    size_t i = 0;
    uint32_t cp;
    while (i < n) {
        if (s[i] < 0x80) {
            last_cc = 0;
            i++;
            continue;
        }
        int len = utf8_decode(s + i, n - i, &cp);
        if (len == 0)
            return 0;
        i += (size_t)len;
        int cc = uc_combining_class(cp);
        if ((cc != 0 && last_cc > cc) || uc_nfc_quick_check(cp) != 0)
            return 0;
        last_cc = cc;
    }
    return 1;
}

int uc_nfc_append(sbuf *out, const char *text, size_t n)
{
    const unsigned char *s = (const unsigned char *)text;
    if (!utf8_valid(text, n, NULL))
        return TN_ERR_ARG;
    if (passes_quick_check(s, n))
        return sb_append(out, text, n);

    cp_vec v = {0};
    int rc = TN_OK;
    size_t i = 0;
    while (i < n && rc == TN_OK) {
        uint32_t cp, dec[UC_MAX_DECOMP];
        int len = utf8_decode(s + i, n - i, &cp);
        i += (size_t)len;
        int k = uc_decompose(cp, dec);
        for (int j = 0; j < k && rc == TN_OK; j++)
            rc = cp_vec_push(&v, dec[j]);
    }
    for (size_t a = 0; a < v.len && rc == TN_OK;) {
        if (v.cc[a] == 0) {
            a++;
            continue;
        }
        size_t b = a;
        while (b < v.len && v.cc[b] != 0)
            b++;
        rc = sort_run(&v, a, b);
        a = b;
    }
    if (rc == TN_OK && v.len > 0) {
        size_t starter = 0, w = 1;
        int last_cc = v.cc[0] ? 256 : 0;
        for (size_t r = 1; r < v.len; r++) {
            uint32_t c = v.cp[r];
            int cc = v.cc[r];
            uint32_t comp = uc_compose(v.cp[starter], c);
            if (comp && (last_cc < cc || last_cc == 0)) {
                v.cp[starter] = comp;
                continue;
            }
            if (cc == 0)
                starter = w;
            last_cc = cc;
            v.cp[w++] = c;
        }
        v.len = w;
        for (size_t r = 0; r < v.len && rc == TN_OK; r++) {
            char buf[4];
            int len = utf8_encode(v.cp[r], buf);
            rc = sb_append(out, buf, (size_t)len);
        }
    }
    free(v.cp);
    free(v.cc);
    return rc;
}
