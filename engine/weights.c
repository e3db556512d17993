#include "engine/weights.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/mxfp4.h"
#include "common/file.h"
#include "kernels/fp8.h"
#include "common/status.h"

/* Load state: the first failure writes err and turns every later step into
 * a no-op, so the per-tensor code reads straight through. */
typedef struct loader {
    const tm_safetensors *st;
    const kn_backend *be;
    const tm_shard *sh;
    tm_weights *w;
    tm_weight_types types;   /* of the large products' matrices */
    uint8_t *used;      /* [st->n_tensors]: consumed by the model */
    char *err;
    size_t errlen;
    int rc;
} loader;

static void lfail(loader *L, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void lfail(loader *L, int rc, const char *fmt, ...)
{
    if (L->rc)
        return;
    if (L->err && L->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(L->err, L->errlen, fmt, ap);
        va_end(ap);
    }
    L->rc = rc;
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *dims)
{
    size_t off = 0;
    off += (size_t)snprintf(buf + off, n - off, "[");
    for (int i = 0; i < ndim && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (off < n)
        snprintf(buf + off, n - off, "]");
}

/* The block scales of an F8_E4M3 checkpoint tensor `X.weight`: the tensor
 * `X.weight_scale_inv`, float, [ceil(rows/128)][ceil(cols/128)] (HF's
 * block-FP8 layout, weight_block_size [128, 128]); marked used. NULL (and
 * the load failed) when missing or misshapen. */
static const tm_st_tensor *fp8_scale_of(loader *L, const tm_st_tensor *t)
{
    char name[512];
    snprintf(name, sizeof(name), "%s_scale_inv", t->name);
    const tm_st_tensor *s = tm_st_find(L->st, name);
    if (!s) {
        lfail(L, TN_ERR_ARG, "tensor '%s' is F8_E4M3 but '%s' (its block scales) is missing",
              t->name, name);
        return NULL;
    }
    L->used[s - L->st->tensors] = 1;
    if (t->ndim != 2) {
        lfail(L, TN_ERR_UNSUPPORTED, "tensor '%s': F8_E4M3 is read for 2-D weights only "
              "(it has %d dims)", t->name, t->ndim);
        return NULL;
    }
    if (!tm_st_is_float(s->dtype) || s->ndim != 2 ||
        s->shape[0] != (int64_t)kn_fp8_blocks((size_t)t->shape[0]) ||
        s->shape[1] != (int64_t)kn_fp8_blocks((size_t)t->shape[1])) {
        lfail(L, TN_ERR_ARG, "tensor '%s' must be a float [%zu, %zu] (128x128 blocks of "
              "'%s')", name, kn_fp8_blocks((size_t)t->shape[0]),
              kn_fp8_blocks((size_t)t->shape[1]), t->name);
        return NULL;
    }
    return s;
}

/* Elements [first, first + n) of a tensor as f32 into dst: float tensors
 * converted, F8_E4M3 ones decoded and multiplied by their block scale. */
static void read_f32(loader *L, const tm_st_tensor *t, size_t first, size_t n, float *dst)
{
    if (L->rc)
        return;
    tm_st_to_f32(t, first, n, dst);
    if (t->dtype != TM_ST_F8_E4M3)
        return;
    const tm_st_tensor *s = fp8_scale_of(L, t);
    if (!s)
        return;
    const size_t cols = (size_t)t->shape[1], scols = (size_t)s->shape[1];
    float *sc = malloc(s->numel * sizeof(float));
    if (!sc) {
        lfail(L, TN_ERR_NOMEM, "out of memory reading '%s'", s->name);
        return;
    }
    tm_st_to_f32(s, 0, s->numel, sc);
    for (size_t i = 0; i < n; i++) {
        size_t r = (first + i) / cols, c = (first + i) % cols;
        dst[i] *= sc[(r / KN_FP8_BLOCK) * scols + c / KN_FP8_BLOCK];
    }
    free(sc);
}

/* The tensor `name` with exactly this shape and a float dtype, or NULL. */
static const tm_st_tensor *want(loader *L, const char *name, int ndim, const int64_t *dims)
{
    if (L->rc)
        return NULL;
    const tm_st_tensor *t = tm_st_find(L->st, name);
    if (!t) {
        lfail(L, TN_ERR_ARG, "missing tensor '%s'", name);
        return NULL;
    }
    L->used[t - L->st->tensors] = 1;
    if (t->dtype == TM_ST_F8_E4M3) {
        if (!fp8_scale_of(L, t))
            return NULL;
    } else if (!tm_st_is_float(t->dtype)) {
        lfail(L, TN_ERR_ARG, "tensor '%s' has dtype %s; the loader reads BF16, F16, F32 or "
              "F8_E4M3 with a weight_scale_inv", name, tm_st_dtype_name(t->dtype));
        return NULL;
    }
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = t->shape[i] == dims[i];
    if (!same) {
        char got[128], exp[128];
        shape_str(got, sizeof(got), t->ndim, t->shape);
        shape_str(exp, sizeof(exp), ndim, dims);
        lfail(L, TN_ERR_ARG, "tensor '%s' has shape %s, expected %s", name, got, exp);
        return NULL;
    }
    return t;
}

/* Host-writable staging for n floats: on the CPU backend it already is the
 * final buffer, elsewhere a host buffer that stage_commit uploads. */
static float *stage_alloc(loader *L, size_t n)
{
    if (L->rc)
        return NULL;
    size_t bytes = n * sizeof(float);
    float *p = L->be->kind == KN_BACKEND_CPU ? kn_malloc(L->be, bytes) : malloc(bytes);
    if (!p)
        lfail(L, TN_ERR_NOMEM, "out of memory loading weights (%zu bytes)", bytes);
    return p;
}

static void stage_drop(loader *L, float *host)
{
    if (!host)
        return;
    if (L->be->kind == KN_BACKEND_CPU)
        kn_free(L->be, host);
    else
        free(host);
}

/* Rewrites n floats in place as n bf16 values packed at the start of the
 * same buffer. Forward order is safe: bf16 i (bytes 2i..2i+1) overwrites
 * only float i/2, which has already been read. */
static void pack_bf16_in_place(float *buf, size_t n)
{
    unsigned char *bytes = (unsigned char *)buf;
    for (size_t i = 0; i < n; i++) {
        float f;
        memcpy(&f, bytes + 4 * i, sizeof f);
        uint16_t b = kn_f32_to_bf16(f);
        memcpy(bytes + 2 * i, &b, sizeof b);
    }
}

/* A host buffer of bytes copied to the backend (ownership taken). */
static void *upload_bytes(loader *L, void *host, size_t bytes)
{
    if (!host)
        return NULL;
    L->w->bytes += bytes;
    void *dev = kn_malloc(L->be, bytes);
    int rc = dev ? kn_copy_to_backend(L->be, dev, host, bytes) : TN_ERR_NOMEM;
    free(host);
    if (rc) {
        if (dev)
            kn_free(L->be, dev);
        lfail(L, rc, "cannot copy weights to the backend: %s", tn_status_str(rc));
        return NULL;
    }
    return dev;
}

/* Takes ownership of host (n floats); returns the backend buffer holding
 * them as dt (NULL on failure): on the CPU backend host itself. */
static void *stage_commit_as(loader *L, float *host, size_t n, kn_dtype dt)
{
    if (!host)
        return NULL;
    if (L->rc) {
        stage_drop(L, host);
        return NULL;
    }
    if (dt == KN_BF16)
        pack_bf16_in_place(host, n);
    size_t bytes = n * kn_dtype_size(dt);
    if (L->be->kind == KN_BACKEND_CPU) {
        L->w->bytes += bytes;
        return host;
    }
    return upload_bytes(L, host, bytes);
}

static float *stage_commit(loader *L, float *host, size_t n)
{
    return stage_commit_as(L, host, n, KN_F32);
}

/* Takes ownership of host: n_mats matrices [rows][cols] of f32, stored as
 * dt. FP8 quantizes each matrix into the layout of kernels/fp8.h and
 * returns its scales in *scale; other dtypes leave *scale NULL. */
static void *commit_matrices(loader *L, float *host, size_t n_mats, size_t rows, size_t cols,
                             kn_dtype dt, float **scale)
{
    *scale = NULL;
    if (dt != KN_FP8_E4M3)
        return stage_commit_as(L, host, n_mats * rows * cols, dt);
    if (!host)
        return NULL;
    if (L->rc) {
        stage_drop(L, host);
        return NULL;
    }
    const size_t db = kn_fp8_data_bytes(rows, cols), sc = kn_fp8_scale_count(rows, cols);
    uint8_t *data = malloc(n_mats * db);
    float *scales = malloc(n_mats * sc * sizeof(float));
    if (!data || !scales) {
        free(data);
        free(scales);
        stage_drop(L, host);
        lfail(L, TN_ERR_NOMEM, "out of memory quantizing weights (%zu bytes)", n_mats * db);
        return NULL;
    }
    for (size_t i = 0; i < n_mats; i++)
        kn_fp8_quantize_weight(data + i * db, scales + i * sc, host + i * rows * cols, rows,
                               cols);
    stage_drop(L, host);
    void *d = upload_bytes(L, data, n_mats * db);
    float *s = upload_bytes(L, scales, n_mats * sc * sizeof(float));
    if (!d || !s) {
        if (d)
            kn_free(L->be, d);
        if (s)
            kn_free(L->be, s);
        return NULL;
    }
    *scale = s;
    return d;
}

static size_t numel(int ndim, const int64_t *dims)
{
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (size_t)dims[i];
    return n;
}

/* Rows [row0, row0 + n_rows) along the first axis of a tensor of shape
 * dims, stored as dt (converted through f32, exact for the BF16/F16/F32
 * checkpoints the loader reads): a rank's heads or experts are such a run. */
static void *load_rows_as(loader *L, const char *name, int ndim, const int64_t *dims,
                          size_t row0, size_t n_rows, kn_dtype dt, float **scale)
{
    float *unused;
    if (!scale)
        scale = &unused;
    *scale = NULL;
    const tm_st_tensor *t = want(L, name, ndim, dims);
    if (!t)
        return NULL;
    size_t row = numel(ndim - 1, dims + 1), n = n_rows * row;
    float *host = stage_alloc(L, n);
    if (host)
        read_f32(L, t, row0 * row, n, host);
    /* a 3-D tensor is a stack of matrices (experts), a 2-D one a matrix */
    if (ndim == 3)
        return commit_matrices(L, host, n_rows, (size_t)dims[1], (size_t)dims[2], dt, scale);
    return commit_matrices(L, host, 1, n_rows, row, dt, scale);
}

/* Norms, biases, sinks, router, embedding: always f32. */
static float *load_rows(loader *L, const char *name, int ndim, const int64_t *dims,
                        size_t row0, size_t n_rows)
{
    return load_rows_as(L, name, ndim, dims, row0, n_rows, KN_F32, NULL);
}

/* A matrix (or stack of matrices) of the large products, stored as dt. */
static void *load_matrix_rows(loader *L, const char *name, int ndim, const int64_t *dims,
                              size_t row0, size_t n_rows, kn_dtype dt, float **scale)
{
    return load_rows_as(L, name, ndim, dims, row0, n_rows, dt, scale);
}

/* A tensor copied as is (converted to f32). */
static float *load_plain(loader *L, const char *name, int ndim, const int64_t *dims)
{
    return load_rows(L, name, ndim, dims, 0, (size_t)dims[0]);
}

/* Columns [col0, col0 + n_cols) of a [rows][cols] matrix, as the loader's
 * wdtype: o_proj's inputs from this rank's heads. */
static void *load_cols(loader *L, const char *name, int64_t rows, int64_t cols,
                       size_t col0, size_t n_cols, float **scale)
{
    *scale = NULL;
    const tm_st_tensor *t = want(L, name, 2, (int64_t[]){rows, cols});
    if (!t)
        return NULL;
    size_t n = (size_t)rows * n_cols;
    float *host = stage_alloc(L, n);
    for (int64_t r = 0; host && r < rows; r++)
        read_f32(L, t, (size_t)r * (size_t)cols + col0, n_cols, host + (size_t)r * n_cols);
    return commit_matrices(L, host, 1, (size_t)rows, n_cols, L->types.attn, scale);
}

static const char *lname(char *buf, size_t n, int layer, const char *suffix)
{
    snprintf(buf, n, "model.layers.%d.%s", layer, suffix);
    return buf;
}

/* GPT-OSS gate_up_proj [E][dim][2I] with gate = [..., ::2], up = [..., 1::2]
 * -> [E][2I][dim], gate rows first. */
static void *load_gpt_oss_gate_up(loader *L, const char *name, int E, int dim, int inter,
                                  float **scale)
{
    const tm_st_tensor *t = want(L, name, 3, (int64_t[]){E, dim, 2 * inter});
    const int e0 = L->sh->expert0, nE = L->sh->n_experts;
    size_t n = (size_t)nE * 2 * inter * dim;
    float *host = t ? stage_alloc(L, n) : NULL;
    float *row = host ? malloc(sizeof(float) * 2 * (size_t)inter) : NULL;
    if (host && !row)
        lfail(L, TN_ERR_NOMEM, "out of memory loading '%s'", name);
    for (int e = 0; row && e < nE; e++) {
        float *dst = host + (size_t)e * 2 * inter * dim;
        for (int d = 0; d < dim; d++) {
            read_f32(L, t, ((size_t)(e0 + e) * dim + d) * 2 * inter, 2 * (size_t)inter, row);
            for (int i = 0; i < inter; i++) {
                dst[(size_t)i * dim + d] = row[2 * i];
                dst[(size_t)(inter + i) * dim + d] = row[2 * i + 1];
            }
        }
    }
    free(row);
    return commit_matrices(L, host, (size_t)nE, 2 * (size_t)inter, (size_t)dim,
                           L->types.experts, scale);
}

/* GPT-OSS gate_up_proj_bias [E][2I] interleaved -> [E][2I], gate first. */
static float *load_gpt_oss_gate_up_bias(loader *L, const char *name, int E, int inter)
{
    const tm_st_tensor *t = want(L, name, 2, (int64_t[]){E, 2 * inter});
    const int e0 = L->sh->expert0, nE = L->sh->n_experts;
    size_t n = (size_t)nE * 2 * inter;
    float *host = t ? stage_alloc(L, n) : NULL;
    float *row = host ? malloc(sizeof(float) * 2 * (size_t)inter) : NULL;
    if (host && !row)
        lfail(L, TN_ERR_NOMEM, "out of memory loading '%s'", name);
    for (int e = 0; row && e < nE; e++) {
        read_f32(L, t, (size_t)(e0 + e) * 2 * inter, 2 * (size_t)inter, row);
        for (int i = 0; i < inter; i++) {
            host[(size_t)e * 2 * inter + i] = row[2 * i];
            host[(size_t)e * 2 * inter + inter + i] = row[2 * i + 1];
        }
    }
    free(row);
    return stage_commit(L, host, n);
}

/* GPT-OSS down_proj [E][I][dim] (applied as x @ W) -> [E][dim][I]. */
static void *load_gpt_oss_down(loader *L, const char *name, int E, int dim, int inter,
                               float **scale)
{
    const tm_st_tensor *t = want(L, name, 3, (int64_t[]){E, inter, dim});
    const int e0 = L->sh->expert0, nE = L->sh->n_experts;
    size_t n = (size_t)nE * dim * inter;
    float *host = t ? stage_alloc(L, n) : NULL;
    float *row = host ? malloc(sizeof(float) * (size_t)dim) : NULL;
    if (host && !row)
        lfail(L, TN_ERR_NOMEM, "out of memory loading '%s'", name);
    for (int e = 0; row && e < nE; e++) {
        float *dst = host + (size_t)e * dim * inter;
        for (int i = 0; i < inter; i++) {
            read_f32(L, t, ((size_t)(e0 + e) * inter + i) * dim, (size_t)dim, row);
            for (int d = 0; d < dim; d++)
                dst[(size_t)d * inter + i] = row[d];
        }
    }
    free(row);
    return commit_matrices(L, host, (size_t)nE, (size_t)dim, (size_t)inter, L->types.experts,
                           scale);
}

/* GPT-OSS MXFP4 experts (engine/mxfp4.h): blocks [E][rows][G][16] and
 * scales [E][rows][G] of `prefix`_blocks / _scales, rows = out_rows, G =
 * in_dim / 32. gate_up (interleave set): row 2i is gate i, 2i+1 up i ->
 * our rows i and inter + i; down: rows already [dim][inter]. */
static void *load_gpt_oss_mxfp4(loader *L, const char *prefix, int E, int out_rows,
                                int in_dim, int interleave, float **scale)
{
    *scale = NULL;
    char bn[300], sn[300];
    snprintf(bn, sizeof(bn), "%s_blocks", prefix);
    snprintf(sn, sizeof(sn), "%s_scales", prefix);
    if (L->rc)
        return NULL;
    if (in_dim % 32) {
        lfail(L, TN_ERR_ARG, "'%s': MXFP4 needs an input dimension divisible by 32 (%d)", bn,
              in_dim);
        return NULL;
    }
    const int G = in_dim / 32;
    const tm_st_tensor *b = tm_st_find(L->st, bn), *s = tm_st_find(L->st, sn);
    if (!b || !s) {
        lfail(L, TN_ERR_ARG, "missing tensor '%s'", !b ? bn : sn);
        return NULL;
    }
    L->used[b - L->st->tensors] = 1;
    L->used[s - L->st->tensors] = 1;
    const int64_t bd[4] = {E, out_rows, G, 16}, sd[3] = {E, out_rows, G};
    int ok = b->dtype == TM_ST_U8 && s->dtype == TM_ST_U8 && b->ndim == 4 && s->ndim == 3;
    for (int i = 0; ok && i < 4; i++)
        ok = b->shape[i] == bd[i] && (i == 3 || s->shape[i] == sd[i]);
    if (!ok) {
        lfail(L, TN_ERR_ARG, "MXFP4 tensors '%s' / '%s' must be U8 [%d, %d, %d, 16] and "
              "[%d, %d, %d]", bn, sn, E, out_rows, G, E, out_rows, G);
        return NULL;
    }
    const int e0 = L->sh->expert0, nE = L->sh->n_experts, inter = out_rows / 2;
    const size_t per = (size_t)out_rows * in_dim;
    float *host = stage_alloc(L, (size_t)nE * per);
    const uint8_t *bp = b->data, *spp = s->data;
    for (int e = 0; host && e < nE; e++)
        for (int o = 0; o < out_rows; o++) {
            size_t src = (size_t)(e0 + e) * out_rows + o;
            int dst_row = interleave ? (o % 2 ? inter + o / 2 : o / 2) : o;
            tm_mxfp4_decode_row(host + (size_t)e * per + (size_t)dst_row * in_dim,
                                bp + src * (size_t)G * 16, spp + src * (size_t)G, (size_t)G);
        }
    return commit_matrices(L, host, (size_t)nE, (size_t)out_rows, (size_t)in_dim,
                           L->types.experts, scale);
}

/* Qwen3 released layout: one gate/up/down Linear per expert. */
static void load_qwen3_experts_split(loader *L, tm_layer_weights *lw, int l, int E,
                                     int dim, int inter)
{
    const int e0 = L->sh->expert0, nE = L->sh->n_experts;
    size_t per_gu = 2 * (size_t)inter * dim, per_d = (size_t)dim * inter;
    float *gu = stage_alloc(L, (size_t)nE * per_gu);
    float *dn = stage_alloc(L, (size_t)nE * per_d);
    char name[256], suffix[128];
    /* every expert is checked; only this rank's are read */
    for (int e = 0; e < E && gu && dn && !L->rc; e++) {
        int mine = e >= e0 && e < e0 + nE;
        size_t j = mine ? (size_t)(e - e0) : 0;
        snprintf(suffix, sizeof(suffix), "mlp.experts.%d.gate_proj.weight", e);
        const tm_st_tensor *g = want(L, lname(name, sizeof(name), l, suffix), 2,
                                     (int64_t[]){inter, dim});
        if (g && mine)
            read_f32(L, g, 0, (size_t)inter * dim, gu + j * per_gu);
        snprintf(suffix, sizeof(suffix), "mlp.experts.%d.up_proj.weight", e);
        const tm_st_tensor *u = want(L, lname(name, sizeof(name), l, suffix), 2,
                                     (int64_t[]){inter, dim});
        if (u && mine)
            read_f32(L, u, 0, (size_t)inter * dim, gu + j * per_gu + (size_t)inter * dim);
        snprintf(suffix, sizeof(suffix), "mlp.experts.%d.down_proj.weight", e);
        const tm_st_tensor *d = want(L, lname(name, sizeof(name), l, suffix), 2,
                                     (int64_t[]){dim, inter});
        if (d && mine)
            read_f32(L, d, 0, per_d, dn + j * per_d);
    }
    if (!gu || !dn || L->rc) {
        stage_drop(L, gu);
        stage_drop(L, dn);
        return;
    }
    lw->gate_up = commit_matrices(L, gu, (size_t)nE, 2 * (size_t)inter, (size_t)dim,
                                  L->types.experts, &lw->gate_up_s);
    lw->down = commit_matrices(L, dn, (size_t)nE, (size_t)dim, (size_t)inter, L->types.experts,
                               &lw->down_s);
}

static void load_layer(loader *L, const tm_config *c, int l, tm_layer_weights *lw)
{
    const int H = c->hidden_size, E = c->n_experts, I = c->moe_inter;
    const int qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    const tm_shard *sh = L->sh;
    /* this rank's heads: rows of q/k/v, columns of o */
    const size_t hd = (size_t)c->head_dim, q0 = (size_t)sh->head0 * hd,
                 nq = (size_t)sh->n_heads * hd, k0 = (size_t)sh->kv_head0 * hd,
                 nk = (size_t)sh->n_kv_heads * hd;
    char n[256];
    lw->attn_norm = load_plain(L, lname(n, sizeof(n), l, "input_layernorm.weight"), 1,
                               (int64_t[]){H});
    lw->mlp_norm = load_plain(L, lname(n, sizeof(n), l, "post_attention_layernorm.weight"),
                              1, (int64_t[]){H});
    const kn_dtype at = L->types.attn, et = L->types.experts;
    lw->q_w = load_matrix_rows(L, lname(n, sizeof(n), l, "self_attn.q_proj.weight"), 2,
                               (int64_t[]){qd, H}, q0, nq, at, &lw->q_s);
    lw->k_w = load_matrix_rows(L, lname(n, sizeof(n), l, "self_attn.k_proj.weight"), 2,
                               (int64_t[]){kvd, H}, k0, nk, at, &lw->k_s);
    lw->v_w = load_matrix_rows(L, lname(n, sizeof(n), l, "self_attn.v_proj.weight"), 2,
                               (int64_t[]){kvd, H}, k0, nk, at, &lw->v_s);
    lw->o_w = load_cols(L, lname(n, sizeof(n), l, "self_attn.o_proj.weight"), H, qd, q0, nq,
                        &lw->o_s);
    if (c->attention_bias) {
        lw->q_b = load_rows(L, lname(n, sizeof(n), l, "self_attn.q_proj.bias"), 1,
                            (int64_t[]){qd}, q0, nq);
        lw->k_b = load_rows(L, lname(n, sizeof(n), l, "self_attn.k_proj.bias"), 1,
                            (int64_t[]){kvd}, k0, nk);
        lw->v_b = load_rows(L, lname(n, sizeof(n), l, "self_attn.v_proj.bias"), 1,
                            (int64_t[]){kvd}, k0, nk);
        /* o_proj's partial sums are all-reduced: one rank adds the bias */
        lname(n, sizeof(n), l, "self_attn.o_proj.bias");
        if (sh->o_bias)
            lw->o_b = load_plain(L, n, 1, (int64_t[]){H});
        else
            want(L, n, 1, (int64_t[]){H});
    }
    if (c->qk_norm) {
        lw->q_norm = load_plain(L, lname(n, sizeof(n), l, "self_attn.q_norm.weight"), 1,
                                (int64_t[]){c->head_dim});
        lw->k_norm = load_plain(L, lname(n, sizeof(n), l, "self_attn.k_norm.weight"), 1,
                                (int64_t[]){c->head_dim});
    }
    if (c->attn_sinks)
        lw->sinks = load_rows(L, lname(n, sizeof(n), l, "self_attn.sinks"), 1,
                              (int64_t[]){c->n_heads}, (size_t)sh->head0,
                              (size_t)sh->n_heads);

    if (c->arch == TM_ARCH_GPT_OSS) {
        lw->router_w = load_plain(L, lname(n, sizeof(n), l, "mlp.router.weight"), 2,
                                  (int64_t[]){E, H});
        lw->router_b = load_plain(L, lname(n, sizeof(n), l, "mlp.router.bias"), 1,
                                  (int64_t[]){E});
        lname(n, sizeof(n), l, "mlp.experts.gate_up_proj");
        if (tm_st_find(L->st, lname(n, sizeof(n), l, "mlp.experts.gate_up_proj_blocks"))) {
            /* MXFP4 as released */
            lw->gate_up = load_gpt_oss_mxfp4(
                L, lname(n, sizeof(n), l, "mlp.experts.gate_up_proj"), E, 2 * I, H, 1,
                &lw->gate_up_s);
            lw->down = load_gpt_oss_mxfp4(L, lname(n, sizeof(n), l, "mlp.experts.down_proj"),
                                          E, H, I, 0, &lw->down_s);
        } else {
            lw->gate_up = load_gpt_oss_gate_up(
                L, lname(n, sizeof(n), l, "mlp.experts.gate_up_proj"), E, H, I, &lw->gate_up_s);
            lw->down = load_gpt_oss_down(L, lname(n, sizeof(n), l, "mlp.experts.down_proj"),
                                         E, H, I, &lw->down_s);
        }
        lw->gate_up_b = load_gpt_oss_gate_up_bias(
            L, lname(n, sizeof(n), l, "mlp.experts.gate_up_proj_bias"), E, I);
        lw->down_b = load_rows(L, lname(n, sizeof(n), l, "mlp.experts.down_proj_bias"), 2,
                               (int64_t[]){E, H}, (size_t)sh->expert0,
                               (size_t)sh->n_experts);
        return;
    }
    lw->router_w = load_plain(L, lname(n, sizeof(n), l, "mlp.gate.weight"), 2,
                              (int64_t[]){E, H});
    if (tm_st_find(L->st, lname(n, sizeof(n), l, "mlp.experts.gate_up_proj"))) {
        /* transformers-5 fused experts: already [E][2I][H] and [E][H][I] */
        lw->gate_up = load_matrix_rows(L, n, 3, (int64_t[]){E, 2 * I, H},
                                       (size_t)sh->expert0, (size_t)sh->n_experts, et,
                                       &lw->gate_up_s);
        lw->down = load_matrix_rows(L, lname(n, sizeof(n), l, "mlp.experts.down_proj"), 3,
                                    (int64_t[]){E, H, I}, (size_t)sh->expert0,
                                    (size_t)sh->n_experts, et, &lw->down_s);
    } else {
        load_qwen3_experts_split(L, lw, l, E, H, I);
    }
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* FP8 kinds the loader does not read get a clear message up front. */
static void reject_unreadable(loader *L)
{
    for (int i = 0; i < L->st->n_tensors && !L->rc; i++) {
        const tm_st_tensor *t = &L->st->tensors[i];
        if (t->dtype == TM_ST_F8_E5M2 || t->dtype == TM_ST_F8_E8M0)
            lfail(L, TN_ERR_UNSUPPORTED, "tensor '%s' has dtype %s, which the loader does not "
                  "read (F8_E4M3 with weight_scale_inv, and GPT-OSS MXFP4 experts, are read)",
                  t->name, tm_st_dtype_name(t->dtype));
    }
}

void tm_weights_quantized(const tm_safetensors *st, int *attn, int *experts)
{
    *attn = *experts = 0;
    for (int i = 0; i < st->n_tensors; i++) {
        const tm_st_tensor *t = &st->tensors[i];
        int quant = t->dtype == TM_ST_F8_E4M3 || ends_with(t->name, "_blocks");
        if (!quant)
            continue;
        if (strstr(t->name, ".self_attn."))
            *attn = 1;
        else if (strstr(t->name, ".mlp.experts."))
            *experts = 1;
    }
}

void tm_weights_free(tm_weights *w)
{
    if (!w || !w->be)
        return;
    const kn_backend *be = w->be;
#define FREE_W(p) do { if (p) kn_free(be, p); } while (0)
    for (int l = 0; w->layers && l < w->n_layers; l++) {
        tm_layer_weights *lw = &w->layers[l];
        void *all[] = {lw->attn_norm, lw->mlp_norm, lw->q_w, lw->k_w, lw->v_w, lw->o_w,
                        lw->q_b, lw->k_b, lw->v_b, lw->o_b, lw->q_norm, lw->k_norm,
                        lw->sinks, lw->router_w, lw->router_b, lw->gate_up,
                        lw->gate_up_b, lw->down, lw->down_b, lw->q_s, lw->k_s, lw->v_s,
                        lw->o_s, lw->gate_up_s, lw->down_s};
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
            FREE_W(all[i]);
    }
    if (w->lm_head != w->embed)
        FREE_W(w->lm_head);
    FREE_W(w->embed);
    FREE_W(w->final_norm);
#undef FREE_W
    free(w->layers);
    memset(w, 0, sizeof(*w));
}

int tm_weights_load(tm_weights *w, const tm_config *c, const tm_safetensors *st,
                    const kn_backend *be, const tm_weight_types *types, char *err,
                    size_t errlen)
{
    tm_shard full;
    tm_shard_full(c, &full);
    return tm_weights_load_shard(w, c, st, be, &full, types, err, errlen);
}

int tm_weights_load_shard(tm_weights *w, const tm_config *c, const tm_safetensors *st,
                          const kn_backend *be, const tm_shard *shard,
                          const tm_weight_types *types, char *err, size_t errlen)
{
    memset(w, 0, sizeof(*w));
    if (!types || (types->head != KN_F32 && types->head != KN_BF16) ||
        (types->attn != KN_F32 && types->attn != KN_BF16 && types->attn != KN_FP8_E4M3) ||
        (types->experts != KN_F32 && types->experts != KN_BF16 &&
         types->experts != KN_FP8_E4M3)) {
        tn_errf(err, errlen, "bad weight dtypes (head %d, attention %d, experts %d)",
                types ? (int)types->head : -1, types ? (int)types->attn : -1,
                types ? (int)types->experts : -1);
        return TN_ERR_ARG;
    }
    const kn_dtype wdtype = types->head;
    w->be = be;
    w->n_layers = c->n_layers;
    w->wdtype = wdtype;
    w->types = *types;
    loader L = {st, be, shard, w, *types, NULL, err, errlen, 0};
    L.used = calloc((size_t)st->n_tensors + 1, 1);
    w->layers = calloc((size_t)c->n_layers, sizeof(*w->layers));
    if (!L.used || !w->layers)
        lfail(&L, TN_ERR_NOMEM, "out of memory");
    reject_unreadable(&L);

    const int V = c->vocab_size, H = c->hidden_size;
    w->embed = load_plain(&L, "model.embed_tokens.weight", 2, (int64_t[]){V, H});
    for (int l = 0; l < c->n_layers && !L.rc; l++)
        load_layer(&L, c, l, &w->layers[l]);
    w->final_norm = load_plain(&L, "model.norm.weight", 1, (int64_t[]){H});
    const tm_st_tensor *head = tm_st_find(st, "lm_head.weight");
    if (c->tie_word_embeddings) {
        /* HF ties the head to the embedding and ignores a stored copy; a
         * narrower head is its own copy of the embedding's values */
        w->lm_head = wdtype == KN_F32
                         ? (void *)w->embed
                         : load_matrix_rows(&L, "model.embed_tokens.weight", 2,
                                            (int64_t[]){V, H}, 0, (size_t)V, wdtype, NULL);
        if (head && !L.rc)
            L.used[head - st->tensors] = 1;
    } else {
        w->lm_head = load_matrix_rows(&L, "lm_head.weight", 2, (int64_t[]){V, H}, 0, (size_t)V,
                                      wdtype, NULL);
    }
    /* A tensor nothing reads means the checkpoint and the config disagree
     * (e.g. biases the config turned off): refuse rather than ignore it. */
    for (int i = 0; i < st->n_tensors && !L.rc; i++) {
        const char *name = st->tensors[i].name;
        if (!L.used[i] && !ends_with(name, "rotary_emb.inv_freq"))
            lfail(&L, TN_ERR_ARG, "tensor '%s' is not used by a %s model with this "
                  "config.json", name, c->model_type);
    }
    free(L.used);
    if (L.rc) {
        tm_weights_free(w);
        return L.rc;
    }
    return TN_OK;
}
