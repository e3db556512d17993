#include "tests/unit/engine_testutil.h"
#include "common/options.h"
#include "common/status.h"
#include <cjson/cJSON.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int golden_f32(const tm_safetensors *st, const char *name, int ndim, float **out,
                      int64_t *shape, char *err, size_t errlen)
{
    const tm_st_tensor *t = tm_st_find(st, name);
    if (!t || t->dtype != TM_ST_F32 || t->ndim != ndim) {
        snprintf(err, errlen, "golden: %s missing or not F32 with %d dims", name, ndim);
        return -1;
    }
    *out = malloc(t->nbytes ? t->nbytes : 1);
    if (!*out) {
        snprintf(err, errlen, "golden: out of memory");
        return -1;
    }
    tm_st_to_f32(t, 0, t->numel, *out);
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)ndim);
    return 0;
}

static int golden_i32(const tm_safetensors *st, const char *name, int32_t **out,
                      int64_t *len, char *err, size_t errlen)
{
    const tm_st_tensor *t = tm_st_find(st, name);
    if (!t || t->dtype != TM_ST_I32 || t->ndim != 1) {
        snprintf(err, errlen, "golden: %s missing or not I32 [n]", name);
        return -1;
    }
    *out = malloc(t->nbytes ? t->nbytes : 1);
    if (!*out) {
        snprintf(err, errlen, "golden: out of memory");
        return -1;
    }
    memcpy(*out, t->data, t->nbytes);
    *len = t->shape[0];
    return 0;
}

int et_golden_load(const char *dir, et_golden *g, char *err, size_t errlen)
{
    memset(g, 0, sizeof(*g));
    char path[512];
    tm_safetensors st;
    if (tm_st_open_file(&st, et_path(path, sizeof(path), dir, "golden.safetensors"), err,
                        errlen))
        return -1;
    int64_t T, G, pl[2], hs[3], gl[2], gm[1];
    int rc = golden_i32(&st, "prompt_ids", &g->prompt, &T, err, errlen);
    rc = rc ? rc : golden_i32(&st, "gen_ids", &g->gen_ids, &G, err, errlen);
    rc = rc ? rc : golden_f32(&st, "prompt_logits", 2, &g->prompt_logits, pl, err, errlen);
    rc = rc ? rc : golden_f32(&st, "hidden", 3, &g->hidden, hs, err, errlen);
    rc = rc ? rc : golden_f32(&st, "gen_logits", 2, &g->gen_logits, gl, err, errlen);
    rc = rc ? rc : golden_f32(&st, "gen_margin", 1, &g->gen_margin, gm, err, errlen);
    tm_st_close(&st);
    if (!rc && (pl[0] != T || gl[0] != G || gl[1] != pl[1] || gm[0] != G || hs[1] != T)) {
        snprintf(err, errlen, "golden: inconsistent shapes");
        rc = -1;
    }
    if (rc) {
        et_golden_free(g);
        return -1;
    }
    g->T = (int)T;
    g->G = (int)G;
    g->V = (int)pl[1];
    g->L = (int)hs[0] - 1;
    g->H = (int)hs[2];
    return 0;
}

void et_golden_free(et_golden *g)
{
    free(g->prompt);
    free(g->prompt_logits);
    free(g->hidden);
    free(g->gen_ids);
    free(g->gen_logits);
    free(g->gen_margin);
    memset(g, 0, sizeof(*g));
}

double et_rel_err(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

int et_device_list(const char *s, int *dev, int n)
{
    int32_t v[64];
    int got = 0;
    if (n < 1 || n > 64 || opts_int_list(s, strlen(s), 0, 63, v, n, &got) != 0)
        return -1;
    for (int r = 0; r < n; r++)
        dev[r] = v[r < got ? r : got - 1];
    return 0;
}

int et_argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

int et_tmpdir(char *buf, size_t n)
{
    const char *base = getenv("TMPDIR");
    snprintf(buf, n, "%s/tandem-engine-test-XXXXXX", base && *base ? base : "/tmp");
    return mkdtemp(buf) ? 0 : -1;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void et_rm_rf(const char *dir)
{
    if (dir && strstr(dir, "tandem-engine-test-"))
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int et_copy_prefix(const char *src, const char *dst, size_t bytes)
{
    FILE *in = fopen(src, "rb");
    FILE *out = in ? fopen(dst, "wb") : NULL;
    int rc = in && out ? 0 : -1;
    char buf[65536];
    while (!rc && bytes > 0) {
        size_t want = bytes < sizeof(buf) ? bytes : sizeof(buf);
        size_t got = fread(buf, 1, want, in);
        if (got == 0)
            break;
        if (fwrite(buf, 1, got, out) != got)
            rc = -1;
        bytes -= got;
    }
    if (in)
        fclose(in);
    if (out && fclose(out) != 0)
        rc = -1;
    return rc;
}

int et_copy_file(const char *src, const char *dst)
{
    return et_copy_prefix(src, dst, SIZE_MAX);
}

int et_write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int rc = fwrite(data, 1, n, f) == n ? 0 : -1;
    if (fclose(f) != 0)
        rc = -1;
    return rc;
}

const char *et_path(char *buf, size_t n, const char *dir, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
    return buf;
}

int et_st_write(const char *path, const et_tensor *t, int n)
{
    cJSON *hdr = cJSON_CreateObject();
    size_t off = 0;
    for (int i = 0; hdr && i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(hdr, t[i].name);
        cJSON *shape = e ? cJSON_AddArrayToObject(e, "shape") : NULL;
        cJSON *offs = e ? cJSON_AddArrayToObject(e, "data_offsets") : NULL;
        if (!shape || !offs || !cJSON_AddStringToObject(e, "dtype", t[i].dtype)) {
            cJSON_Delete(hdr);
            return -1;
        }
        for (int d = 0; d < t[i].ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t[i].shape[d]));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + t[i].nbytes)));
        off += t[i].nbytes;
    }
    char *json = hdr ? cJSON_PrintUnformatted(hdr) : NULL;
    cJSON_Delete(hdr);
    if (!json)
        return -1;
    size_t hlen = strlen(json), padded = (hlen + 7) / 8 * 8;
    FILE *f = fopen(path, "wb");
    int rc = f ? 0 : -1;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)(padded >> (8 * i));
    if (!rc && fwrite(len8, 1, 8, f) != 8)
        rc = -1;
    if (!rc && fwrite(json, 1, hlen, f) != hlen)
        rc = -1;
    for (size_t i = hlen; !rc && i < padded; i++)
        if (fputc(' ', f) == EOF)
            rc = -1;
    for (int i = 0; !rc && i < n; i++)
        if (t[i].nbytes && fwrite(t[i].data, 1, t[i].nbytes, f) != t[i].nbytes)
            rc = -1;
    if (f && fclose(f) != 0)
        rc = -1;
    free(json);
    return rc;
}

int et_st_entries(const tm_safetensors *st, et_tensor **out, int *n)
{
    /* room for a few added entries */
    et_tensor *t = calloc((size_t)st->n_tensors + 8, sizeof(*t));
    if (!t)
        return -1;
    for (int i = 0; i < st->n_tensors; i++) {
        const tm_st_tensor *s = &st->tensors[i];
        snprintf(t[i].name, sizeof(t[i].name), "%s", s->name);
        snprintf(t[i].dtype, sizeof(t[i].dtype), "%s", tm_st_dtype_name(s->dtype));
        t[i].ndim = s->ndim;
        memcpy(t[i].shape, s->shape, sizeof(int64_t) * (size_t)s->ndim);
        t[i].data = s->data;
        t[i].nbytes = s->nbytes;
    }
    *out = t;
    *n = st->n_tensors;
    return 0;
}

int et_run_greedy(tm_model *m, const kn_backend *be, const int32_t *prompt, int T,
                  float *all, int32_t *ids, int n)
{
    const tm_config *c = tm_model_config(m);
    const int V = c->vocab_size, page = 16;
    const int n_pages = (T + n + page - 1) / page;
    tm_kv_cache kv;
    int rc = tm_kv_cache_init(&kv, be, KN_F32, c->n_layers, c->n_kv_heads, c->head_dim, page, n_pages);
    if (rc != TN_OK)
        return rc;
    int32_t *pages = malloc(sizeof(int32_t) * (size_t)n_pages);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(T + n));
    float *logits = calloc((size_t)V, sizeof(float));
    rc = pages && toks && logits ? tm_kv_alloc_pages(&kv, n_pages, pages) : TN_ERR_NOMEM;
    if (rc == TN_OK) {
        memcpy(toks, prompt, sizeof(int32_t) * (size_t)T);
        tm_seq_step st = {toks, T, 0, pages, n_pages};
        rc = tm_forward(m, &kv, &st, 1, logits, all);
    }
    for (int i = 0, len = T; rc == TN_OK && i < n; i++) {
        if (i > 0) {
            tm_seq_step st = {toks + len - 1, 1, len - 1, pages, n_pages};
            if ((rc = tm_forward(m, &kv, &st, 1, logits, NULL)) != TN_OK)
                break;
        }
        ids[i] = et_argmax(logits, V);
        toks[len++] = ids[i];
    }
    free(logits);
    free(toks);
    free(pages);
    tm_kv_cache_free(&kv);
    return rc;
}

int et_family_open(et_family *f, char *err, size_t errlen)
{
    if (kn_backend_init_cpu(&f->be) != TN_OK) {
        snprintf(err, errlen, "cannot start the CPU backend");
        return -1;
    }
    if (tm_model_load(f->dir, &f->be, &f->m, err, errlen) != TN_OK ||
        et_golden_load(f->dir, &f->g, err, errlen) != 0)
        return -1;
    if (f->g.V != tm_model_config(f->m)->vocab_size) {
        snprintf(err, errlen, "golden vocabulary %d, model %d", f->g.V,
                 tm_model_config(f->m)->vocab_size);
        return -1;
    }
    return 0;
}

void et_family_close(et_family *f)
{
    tm_model_free(f->m);
    f->m = NULL;
    et_golden_free(&f->g);
    kn_backend_free(&f->be);
}

int et_family_setup(void **state)
{
    et_family *f = *state;
    char err[512] = "";
    if (et_family_open(f, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s\n", f->dir, err);
        return -1;
    }
    return 0;
}

int et_family_teardown(void **state)
{
    et_family_close(*state);
    return 0;
}
