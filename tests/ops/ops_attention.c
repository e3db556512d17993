/* kn_kv_append + kn_attention over the paged HND cache on every backend,
 * against float64 recomputations (normwise per output row on the sequence
 * scenarios, over the whole output on the pool cases).
 *
 * Sequence scenarios (the `seq` cases): several sequences of different
 * lengths, page sizes that do not divide them, pages in shuffled physical
 * order, GQA ratios 1, 2 and 4, sinks on and off, sliding windows (shorter
 * and longer than the sequences); a full prefill (and the pool layout it
 * leaves: page_table[t / page_size], slot t % page_size, head-major), decode
 * steps after a shorter prefill that must reproduce the full prefill's rows,
 * and a chunked prefill with an idle sequence. Pool slots never written
 * hold NaN and unused page-table entries hold -1, so reading either shows.
 *
 * Pool cases (the `pool` cases, the CUDA kernels' shapes): random earlier
 * tokens already in the pool, this step's rows appended (the pools must
 * then hold exactly the rows placed by hand), prefill, chunked prefill,
 * decode with split-KV lengths, speculative multi-row decode, head sizes
 * of the generic kernel; on CUDA also against the CPU, and the bf16
 * tensor-core prefill kernel (kn_backend_set_attn_bf16) as a CUDA variant.
 * Every pool case runs again with bf16 pools and with FP8 pools
 * (kn_kv_pools.dtype KN_BF16, KN_FP8_E4M3): kv_append must store exactly
 * the rows' encoding (bf16: round-to-nearest-even codes; FP8: e4m3 codes
 * and the row's scale, kn_fp8_kv_row_encode), and attention over them must
 * match float64 attention over the values those bytes hold to the fp32
 * bound (the kernels only widen what they load), and float64 attention
 * over the unrounded fp32 values to BF16_KV_TOL / FP8_KV_TOL (the cost of
 * storing the cache narrower).
 * And the precision switch and the argument checks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "common/status.h"
#include "kernels/attention.h"
#include "kernels/dtype.h"
#include "kernels/fp8.h"
#include "tests/ops/op_harness.h"
#ifdef TANDEM_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

#define MAX_SEQS 8

/* float64 attention of one query head over nk visible keys/values (row
 * pointers), with an optional sink logit: out[head_dim]. */
static void ref_head(double *out, const float *q, const float *const *keys, const float *const *vals,
                     int nk, int hd, double scale, const float *sink)
{
    double *sc = tu_xcalloc((size_t)nk + 1, sizeof *sc);
    double m = sink ? *sink : -INFINITY;
    for (int j = 0; j < nk; j++) {
        double dot = 0.0;
        for (int d = 0; d < hd; d++)
            dot += (double)q[d] * keys[j][d];
        sc[j] = dot * scale;
        if (sc[j] > m)
            m = sc[j];
    }
    double denom = sink ? exp(*sink - m) : 0.0;
    for (int d = 0; d < hd; d++)
        out[d] = 0.0;
    for (int j = 0; j < nk; j++) {
        double p = exp(sc[j] - m);
        denom += p;
        for (int d = 0; d < hd; d++)
            out[d] += p * vals[j][d];
    }
    for (int d = 0; d < hd; d++)
        out[d] /= denom;
    free(sc);
}

/* The first visible key position of a row at position pos. */
static int first_visible(int pos, int window)
{
    return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

/* ------------------------------------------------------------------ */
/* Sequence scenarios.                                                */

typedef struct attn_case {
    const char *name;
    int n_seqs;
    int lens[MAX_SEQS];
    int n_heads, n_kv_heads, head_dim, page_size, window, sinks;
} attn_case;

/* One case's data: every token's q, k, v unpaged, and the page assignment. */
typedef struct attn_world {
    const attn_case *c;
    int tok_off[MAX_SEQS + 1]; /* token t of sequence s is row tok_off[s] + t */
    float *q, *k, *v;          /* [total][heads][head_dim] */
    float *sinks;              /* [n_heads] or NULL */
    float scale;
    int max_pages, n_pages;
    int32_t *page_table;       /* [n_seqs][max_pages], -1 where unused */
    size_t pool_floats;
} attn_world;

static void world_init(attn_world *w, const attn_case *c, tu_rng *rng)
{
    memset(w, 0, sizeof *w);
    w->c = c;
    int used_pages = 0;
    w->max_pages = 1;
    for (int s = 0; s < c->n_seqs; s++) {
        w->tok_off[s + 1] = w->tok_off[s] + c->lens[s];
        int p = (c->lens[s] + c->page_size - 1) / c->page_size;
        used_pages += p;
        if (p + 1 > w->max_pages)
            w->max_pages = p + 1; /* a spare column, left at -1 */
    }
    int total = w->tok_off[c->n_seqs];
    size_t kv_row = (size_t)c->n_kv_heads * c->head_dim, q_row = (size_t)c->n_heads * c->head_dim;
    w->q = tu_xcalloc((size_t)total * q_row, sizeof(float));
    w->k = tu_xcalloc((size_t)total * kv_row, sizeof(float));
    w->v = tu_xcalloc((size_t)total * kv_row, sizeof(float));
    tu_rand_fill(rng, w->q, (size_t)total * q_row, -2.0f, 2.0f);
    tu_rand_fill(rng, w->k, (size_t)total * kv_row, -2.0f, 2.0f);
    tu_rand_fill(rng, w->v, (size_t)total * kv_row, -1.0f, 1.0f);
    if (c->sinks) {
        w->sinks = tu_xcalloc((size_t)c->n_heads, sizeof(float));
        tu_rand_fill(rng, w->sinks, (size_t)c->n_heads, -2.0f, 4.0f);
    }
    w->scale = (float)(1.0 / sqrt((double)c->head_dim));

    /* Physical pages: a shuffled pool with a few pages nobody owns. */
    w->n_pages = used_pages + 3;
    int32_t *perm = tu_xcalloc((size_t)w->n_pages, sizeof *perm);
    for (int i = 0; i < w->n_pages; i++)
        perm[i] = i;
    tu_rand_shuffle_i32(rng, perm, w->n_pages);
    w->page_table = tu_xcalloc((size_t)c->n_seqs * w->max_pages, sizeof(int32_t));
    int next = 0;
    for (int s = 0; s < c->n_seqs; s++)
        for (int i = 0; i < w->max_pages; i++)
            w->page_table[(size_t)s * w->max_pages + i] =
                i * c->page_size < c->lens[s] ? perm[next++] : -1;
    free(perm);
    w->pool_floats = (size_t)w->n_pages * c->n_kv_heads * c->page_size * c->head_dim;
}

static void world_free(attn_world *w)
{
    free(w->q);
    free(w->k);
    free(w->v);
    free(w->sinks);
    free(w->page_table);
}

/* float64 attention for token t of sequence s, all heads: out[n_heads][hd]. */
static void ref_attention_row(const attn_world *w, int s, int t, double *out)
{
    const attn_case *c = w->c;
    int hd = c->head_dim, group = c->n_heads / c->n_kv_heads, first = first_visible(t, c->window);
    const float **keys = tu_xcalloc((size_t)t + 1, sizeof *keys), **vals = tu_xcalloc((size_t)t + 1, sizeof *vals);
    for (int h = 0; h < c->n_heads; h++) {
        for (int j = first; j <= t; j++) {
            size_t at = ((size_t)(w->tok_off[s] + j) * c->n_kv_heads + h / group) * hd;
            keys[j - first] = w->k + at;
            vals[j - first] = w->v + at;
        }
        ref_head(out + (size_t)h * hd, w->q + ((size_t)(w->tok_off[s] + t) * c->n_heads + h) * hd, keys,
                 vals, t - first + 1, hd, w->scale, c->sinks ? &w->sinks[h] : NULL);
    }
    free(keys);
    free(vals);
}

/* One step: sequence s brings tokens [start[s], start[s] + n_q[s]). */
typedef struct attn_step {
    int32_t q_offset[MAX_SEQS + 1], kv_len[MAX_SEQS];
    kn_seq_batch b;
    float *q, *k, *v, *out;
} attn_step;

static void step_init(attn_step *st, const attn_world *w, const int *start, const int *n_q)
{
    const attn_case *c = w->c;
    memset(st, 0, sizeof *st);
    int max_q = 0, max_kv = 0;
    for (int s = 0; s < c->n_seqs; s++) {
        st->q_offset[s + 1] = st->q_offset[s] + n_q[s];
        st->kv_len[s] = start[s] + n_q[s];
        if (n_q[s] > max_q)
            max_q = n_q[s];
        if (st->kv_len[s] > max_kv)
            max_kv = st->kv_len[s];
    }
    int rows = st->q_offset[c->n_seqs];
    size_t kv_row = (size_t)c->n_kv_heads * c->head_dim, q_row = (size_t)c->n_heads * c->head_dim;
    st->q = tu_xcalloc((size_t)rows * q_row, sizeof(float));
    st->k = tu_xcalloc((size_t)rows * kv_row, sizeof(float));
    st->v = tu_xcalloc((size_t)rows * kv_row, sizeof(float));
    st->out = tu_xcalloc((size_t)rows * q_row, sizeof(float));
    for (int s = 0; s < c->n_seqs; s++)
        for (int i = 0; i < n_q[s]; i++) {
            size_t src = (size_t)w->tok_off[s] + start[s] + i, dst = (size_t)st->q_offset[s] + i;
            memcpy(st->q + dst * q_row, w->q + src * q_row, q_row * sizeof(float));
            memcpy(st->k + dst * kv_row, w->k + src * kv_row, kv_row * sizeof(float));
            memcpy(st->v + dst * kv_row, w->v + src * kv_row, kv_row * sizeof(float));
        }
    st->b = (kn_seq_batch){ .n_seqs = c->n_seqs, .n_rows = rows, .max_pages = w->max_pages,
                            .max_q_len = max_q, .max_kv_len = max_kv,
                            .q_offset = st->q_offset, .kv_len = st->kv_len,
                            .page_table = w->page_table, .n_pages = w->n_pages };
}

static void step_free(attn_step *st)
{
    free(st->q);
    free(st->k);
    free(st->v);
    free(st->out);
}

/* Appends the step's K/V to the backend pools and runs attention on it;
 * st->out gets the rows. */
static void step_run(op_env *e, attn_step *st, const attn_world *w, float *k_pool, float *v_pool)
{
    kn_kv_pools pools = { k_pool, v_pool, KN_F32 };
    const attn_case *c = w->c;
    int rows = st->b.n_rows;
    size_t kv_row = (size_t)c->n_kv_heads * c->head_dim, q_row = (size_t)c->n_heads * c->head_dim;
    kn_seq_batch db = st->b;
    db.q_offset = op_up(e, st->q_offset, sizeof(int32_t) * (size_t)(c->n_seqs + 1));
    db.kv_len = op_up(e, st->kv_len, sizeof(int32_t) * (size_t)c->n_seqs);
    db.page_table = op_up(e, w->page_table, sizeof(int32_t) * (size_t)c->n_seqs * w->max_pages);
    float *d_q = op_up(e, st->q, (size_t)rows * q_row * 4), *d_k = op_up(e, st->k, (size_t)rows * kv_row * 4);
    float *d_v = op_up(e, st->v, (size_t)rows * kv_row * 4), *d_out = op_nan(e, (size_t)rows * q_row);
    float *d_sinks = w->sinks ? op_up(e, w->sinks, (size_t)c->n_heads * 4) : NULL;
    op_ok(e, kn_kv_append(e->be, &pools, d_k, d_v, &db, c->n_kv_heads, c->head_dim, c->page_size),
          "kn_kv_append");
    op_ok(e, kn_attention(e->be, d_out, d_q, &pools, &db, c->n_heads, c->n_kv_heads, c->head_dim,
                          c->page_size, w->scale, d_sinks, c->window), "kn_attention");
    op_down(e, st->out, d_out, (size_t)rows * q_row * 4);
}

/* Checks every row of the step against float64 and, when prefill_out is
 * given (the full prefill's rows, indexed by tok_off), against those too
 * (on CUDA decode and prefill run different kernels: fp32 bound). */
static void step_check(op_env *e, const attn_step *st, const attn_world *w, const int *start,
                       const float *prefill_out, const char *what)
{
    const attn_case *c = w->c;
    size_t q_row = (size_t)c->n_heads * c->head_dim;
    double *ref = tu_xcalloc(q_row, sizeof *ref), tol = op_tol_fp32(e, 0);
    for (int s = 0; s < c->n_seqs; s++)
        for (int r = st->q_offset[s]; r < st->q_offset[s + 1]; r++) {
            int t = start[s] + (r - st->q_offset[s]);
            const float *got = st->out + (size_t)r * q_row;
            ref_attention_row(w, s, t, ref);
            double err = tu_max_rel_err(got, ref, q_row);
            if (!(err <= tol))
                op_fail(e, "%s: seq %d token %d rel err %g", what, s, t, err);
            if (prefill_out) {
                const float *want = prefill_out + (size_t)(w->tok_off[s] + t) * q_row;
                err = tu_max_rel_err_f32(got, want, q_row);
                if (!(err <= (e->cuda ? tol : 1e-6)))
                    op_fail(e, "%s: seq %d token %d differs from prefill by %g", what, s, t, err);
            }
        }
    free(ref);
}

typedef enum { SEQ_PREFILL, SEQ_DECODE, SEQ_CHUNKED } seq_kind;
typedef struct seq_param {
    attn_case c;
    seq_kind kind;
} seq_param;

/* Full prefill: every sequence's whole prompt in one batch, and the pool
 * layout it leaves. */
static void seq_prefill(op_env *e, const attn_world *w)
{
    const attn_case *c = w->c;
    int start[MAX_SEQS] = { 0 }, n_q[MAX_SEQS];
    for (int s = 0; s < c->n_seqs; s++)
        n_q[s] = c->lens[s];
    float *k_pool = op_nan(e, w->pool_floats), *v_pool = op_nan(e, w->pool_floats);
    attn_step st;
    step_init(&st, w, start, n_q);
    step_run(e, &st, w, k_pool, v_pool);
    step_check(e, &st, w, start, NULL, "prefill");
    float *kp = op_get(e, k_pool, w->pool_floats), *vp = op_get(e, v_pool, w->pool_floats);
    for (int s = 0; s < c->n_seqs; s++)
        for (int t = 0; t < c->lens[s]; t++)
            for (int h = 0; h < c->n_kv_heads; h++) {
                size_t page = (size_t)w->page_table[(size_t)s * w->max_pages + t / c->page_size];
                size_t at = ((page * c->n_kv_heads + h) * c->page_size + t % c->page_size) * c->head_dim;
                size_t src = ((size_t)(w->tok_off[s] + t) * c->n_kv_heads + h) * c->head_dim;
                if (memcmp(kp + at, w->k + src, c->head_dim * sizeof(float)) != 0 ||
                    memcmp(vp + at, w->v + src, c->head_dim * sizeof(float)) != 0)
                    op_fail(e, "pool: seq %d token %d head %d not at its slot", s, t, h);
            }
    step_free(&st);
}

/* Prefill of all but the last few tokens, then decode steps of one row per
 * sequence: each decode row must equal the full prefill's row for that
 * token (and the float64 reference). */
static void seq_decode(op_env *e, const attn_world *w)
{
    const attn_case *c = w->c;
    enum { DECODE_STEPS = 3 };
    int zero[MAX_SEQS] = { 0 }, full[MAX_SEQS], start[MAX_SEQS], n_q[MAX_SEQS];
    for (int s = 0; s < c->n_seqs; s++)
        full[s] = c->lens[s];
    float *k_pool = op_nan(e, w->pool_floats), *v_pool = op_nan(e, w->pool_floats);
    attn_step prefill, st;
    step_init(&prefill, w, zero, full);
    step_run(e, &prefill, w, k_pool, v_pool);
    float *k2 = op_nan(e, w->pool_floats), *v2 = op_nan(e, w->pool_floats);
    for (int s = 0; s < c->n_seqs; s++) /* shorter sequences join the decode later */
        n_q[s] = c->lens[s] - DECODE_STEPS > 0 ? c->lens[s] - DECODE_STEPS : 0;
    step_init(&st, w, zero, n_q);
    step_run(e, &st, w, k2, v2);
    step_check(e, &st, w, zero, prefill.out, "short prefill");
    step_free(&st);
    for (int i = DECODE_STEPS; i > 0; i--) {
        /* sequences too short to have reached this step sit it out */
        for (int s = 0; s < c->n_seqs; s++) {
            start[s] = c->lens[s] - i;
            n_q[s] = start[s] >= 0 ? 1 : 0;
            if (start[s] < 0)
                start[s] = 0;
        }
        step_init(&st, w, start, n_q);
        step_run(e, &st, w, k2, v2);
        step_check(e, &st, w, start, prefill.out, "decode");
        step_free(&st);
    }
    step_free(&prefill);
}

/* Chunked prefill: a first chunk of varying length, then the rest, with
 * one sequence idle (no rows, full kv_len) in the second batch. */
static void seq_chunked(op_env *e, const attn_world *w)
{
    const attn_case *c = w->c;
    int zero[MAX_SEQS] = { 0 }, first[MAX_SEQS], rest[MAX_SEQS];
    for (int s = 0; s < c->n_seqs; s++) {
        first[s] = s == 1 ? c->lens[s] : tu_rand_int(&e->rng, c->lens[s] + 1);
        rest[s] = c->lens[s] - first[s];
    }
    float *k_pool = op_nan(e, w->pool_floats), *v_pool = op_nan(e, w->pool_floats);
    attn_step a, b;
    step_init(&a, w, zero, first);
    step_run(e, &a, w, k_pool, v_pool);
    step_check(e, &a, w, zero, NULL, "chunk 1");
    step_init(&b, w, first, rest);
    step_run(e, &b, w, k_pool, v_pool);
    step_check(e, &b, w, first, NULL, "chunk 2");
    step_free(&a);
    step_free(&b);
}

static void seq_case(op_env *e, const void *param)
{
    const seq_param *p = param;
    attn_world w;
    world_init(&w, &p->c, &e->rng);
    if (p->kind == SEQ_PREFILL)
        seq_prefill(e, &w);
    else if (p->kind == SEQ_DECODE)
        seq_decode(e, &w);
    else
        seq_chunked(e, &w);
    world_free(&w);
}

/* ------------------------------------------------------------------ */
/* Pool cases.                                                        */

typedef struct pool_param {
    const char *name;
    int n_seqs;
    int n_q[MAX_SEQS], kv_len[MAX_SEQS];
    int n_heads, n_kv_heads, head_dim, page_size, window, sinks;
    int bf16; /* CUDA: the bf16 tensor-core prefill kernel */
    kn_dtype kv; /* the pools' dtype */
    int wgmma; /* CUDA: the Hopper wgmma kernel, mode 1 (cp.async), 2 (TMA), 3 (TMA, overlapped),
                  4 (3 with three warpgroups), 5 (2 with 3's overlap), 6 (2 persistent, head_dim
                  128 too), 7 (2, head_dim 128 too), 8 (6 with window layers streaming their
                  keys), 9 (5 with the warpgroups' ping-pong): kn_cuda_set_attn_wgmma */
    int fill; /* 0: random K, V; the diagnostic fills, which test one product alone:
                 FILL_K_ZERO (S = 0: only P V and the V layout matter),
                 FILL_V_CONST (V[key][d] = c[d]: out = c whatever P, if P is normalised) */
    int decode_mma; /* CUDA decode over bf16 pools: 1 keeps attention_decode_mma.cu's cp.async
                       kernel (kn_cuda_set_attn_decode_tma 0), 0 the TMA one's (the default) */
} pool_param;
enum { FILL_RANDOM, FILL_K_ZERO, FILL_V_CONST };

/* bf16 attention: Q, K, V and P rounded to bf16, fp32 softmax and sums.
 * Max abs error over max |ref| lands near 2e-3..5e-3 on these inputs; the
 * bound is 1e-2. fp32 rounding alone would stay under 1e-5: an error below
 * BF16_ATTN_MIN means the bf16 kernel did not run. */
#define BF16_ATTN_TOL 1e-2
#define BF16_ATTN_MIN 1e-5
/* bf16 pools against float64 attention over the unrounded fp32 K and V:
 * each stored value is off by at most 2^-9 relative, which moves scores
 * by about |q| |k| 2^-9 and the output by about 2^-9 of max |v|; measured
 * 1.3e-3..2.0e-3 (max abs error over max |ref|) on these inputs on the CPU,
 * bound 5e-3 (plus BF16_ATTN_TOL when the bf16 tensor-core kernel runs). */
#define BF16_KV_TOL 5e-3
/* FP8 pools, the same comparison: e4m3 keeps 3 mantissa bits, so each
 * value is within 2^-4 of itself relative (2^-10 of its row's scale for
 * the smallest); measured 2.6e-2..4.1e-2 on these inputs on the CPU,
 * bound 8e-2. Against float64 over the values the FP8 rows hold (codes
 * times scales) the kernels stay within the fp32 bound like the others. */
#define FP8_KV_TOL 8e-2

/* A pool of n_rows rows of D values in dtype dt's bytes (kn_kv_row_bytes
 * per row): f32 as is, bf16 rounded to nearest even, FP8 quantized per row
 * (kn_fp8_kv_row_encode, what kv_append must write). */
static uint8_t *pool_encode(op_env *e, const float *x, size_t n_rows, int D, kn_dtype dt)
{
    const size_t rb = kn_kv_row_bytes(dt, D);
    uint8_t *b = op_host(e, n_rows * rb);
    for (size_t r = 0; r < n_rows; r++) {
        const float *xr = x + r * D;
        if (dt == KN_F32)
            memcpy(b + r * rb, xr, rb);
        else if (dt == KN_BF16)
            kn_f32_to_bf16_n((uint16_t *)(b + r * rb), xr, (size_t)D);
        else
            kn_fp8_kv_row_encode(b + r * rb, xr, (size_t)D);
    }
    return b;
}

/* The values those bytes hold, as floats (the float64 references read
 * these). */
static float *pool_decode(op_env *e, const uint8_t *b, size_t n_rows, int D, kn_dtype dt)
{
    const size_t rb = kn_kv_row_bytes(dt, D);
    float *x = op_host(e, n_rows * D * sizeof(float));
    for (size_t r = 0; r < n_rows; r++) {
        float *xr = x + r * D;
        if (dt == KN_F32)
            memcpy(xr, b + r * rb, rb);
        else if (dt == KN_BF16)
            kn_bf16_to_f32_n(xr, (const uint16_t *)(b + r * rb), (size_t)D);
        else
            kn_fp8_kv_row_decode(xr, b + r * rb, (size_t)D);
    }
    return x;
}

/* The pool's bytes equal want. */
static int pool_equals(op_env *e, const void *dev, const uint8_t *want, size_t bytes)
{
    void *got = op_host(e, bytes);
    op_down(e, got, dev, bytes);
    return memcmp(got, want, bytes) == 0;
}

/* On a failed comparison: the first output element (row, head, dim) off
 * by more than tol times max |ref|, or NaN, so a log names where a kernel
 * went wrong. */
static void report_first_bad(op_env *e, const char *what, const float *got, const double *ref, int n_rows,
                             int H, int D, double tol)
{
    double max_ref = 0.0;
    size_t n = (size_t)n_rows * H * D;
    for (size_t i = 0; i < n; i++)
        max_ref = fabs(ref[i]) > max_ref ? fabs(ref[i]) : max_ref;
    int bad = 0;
    for (size_t i = 0; i < n && bad < 3; i++) {
        double err = fabs((double)got[i] - ref[i]);
        if (err <= tol * (max_ref > 0.0 ? max_ref : 1.0))
            continue;
        op_fail(e, "%s: first bad: row %zu head %zu dim %zu: got %.6g want %.6g", what, i / ((size_t)H * D),
                i / D % H, i % D, got[i], ref[i]);
        bad++;
    }
}

/* Pool slots no sequence has written -- positions at or past each
 * sequence's kv_len on its pages, and the pages nobody owns -- become NaN,
 * so a kernel that lets a key it must not see into a product shows. */
static void poison_unused_slots(float *pool, const int32_t *page_table, const int32_t *kv_len, int n_seqs,
                                int max_pages, int n_pages, int n_kv, int ps, int D)
{
    unsigned char *owned = tu_xcalloc((size_t)n_pages, 1);
    for (int s = 0; s < n_seqs; s++)
        for (int p = 0; p < max_pages; p++) {
            int page = page_table[(size_t)s * max_pages + p];
            owned[page] = 1;
            for (int slot = 0; slot < ps; slot++)
                if (p * ps + slot >= kv_len[s])
                    for (int h = 0; h < n_kv; h++)
                        for (int d = 0; d < D; d++)
                            pool[(((size_t)page * n_kv + h) * ps + slot) * D + d] = NAN;
        }
    for (int page = 0; page < n_pages; page++)
        if (!owned[page])
            for (size_t i = 0; i < (size_t)n_kv * ps * D; i++)
                pool[(size_t)page * n_kv * ps * D + i] = NAN;
    free(owned);
}

static void pool_case(op_env *e, const void *param)
{
    const pool_param *c = param;
    int D = c->head_dim, ps = c->page_size, n_kv = c->n_kv_heads, H = c->n_heads, G = H / n_kv;
    int n_rows = 0, max_q = 0, max_kv = 0, max_pages = 0;
    for (int s = 0; s < c->n_seqs; s++) {
        n_rows += c->n_q[s];
        max_q = c->n_q[s] > max_q ? c->n_q[s] : max_q;
        max_kv = c->kv_len[s] > max_kv ? c->kv_len[s] : max_kv;
        int np = (c->kv_len[s] + ps - 1) / ps;
        max_pages = np > max_pages ? np : max_pages;
    }
    /* pages of all sequences shuffled over a pool with spare pages */
    int n_pages = c->n_seqs * max_pages + 3;
    int32_t *perm = op_host(e, (size_t)n_pages * 4);
    for (int i = 0; i < n_pages; i++)
        perm[i] = i;
    tu_rand_shuffle_i32(&e->rng, perm, n_pages);
    int32_t *page_table = op_host(e, (size_t)c->n_seqs * max_pages * 4);
    int32_t q_offset[MAX_SEQS + 1] = { 0 }, kv_len[MAX_SEQS];
    for (int s = 0, next = 0; s < c->n_seqs; s++) {
        for (int p = 0; p < max_pages; p++)
            page_table[(size_t)s * max_pages + p] = perm[next++];
        q_offset[s + 1] = q_offset[s] + c->n_q[s];
        kv_len[s] = c->kv_len[s];
    }
    size_t pool_n = (size_t)n_pages * n_kv * ps * D;
    size_t row_n = (size_t)n_rows * n_kv * D, q_n = (size_t)n_rows * H * D;
    /* earlier tokens: random pool contents; this step's rows: kv_append */
    const kn_dtype kvt = c->kv;
    /* kexact/vexact: the unrounded fp32 values of every pool row (random
     * earlier tokens, then this step's rows placed by hand below); the
     * pools hold their encoding in kvt, and kpool/vpool are the values
     * that encoding holds (what the float64 reference reads) */
    const size_t pool_rows = pool_n / (size_t)D, pool_bytes = pool_rows * kn_kv_row_bytes(kvt, D);
    float *kexact = op_rand(e, pool_n, -1.f, 1.f), *vexact = op_rand(e, pool_n, -1.f, 1.f);
    float *k = op_rand(e, row_n, -1.f, 1.f), *v = op_rand(e, row_n, -1.f, 1.f);
    float *q = op_rand(e, q_n, -1.f, 1.f);
    if (c->fill == FILL_K_ZERO) {
        memset(kexact, 0, pool_n * 4);
        memset(k, 0, row_n * 4);
    } else if (c->fill == FILL_V_CONST) {
        for (size_t i = 0; i < pool_n; i++)
            vexact[i] = vexact[i % D];
        for (size_t i = 0; i < row_n; i++)
            v[i] = vexact[i % D];
    }
    float *sinks = c->sinks ? op_rand(e, (size_t)H, -1.f, 3.f) : NULL;
    float scale = 1.f / sqrtf((float)D);
    /* which CUDA decode kernel takes the call (bf16 precision, at most 16
     * query vectors a sequence): the TMA one over bf16 pools with pages of a
     * multiple of 16 rows unless the case asks for the cp.async one */
    const int takes_decode = c->bf16 && !c->wgmma && (kvt == KN_BF16 || kvt == KN_FP8_E4M3) &&
                             max_q * G <= 16 && (D == 64 || D == 128);
    const int takes_decode_tma = takes_decode && ps % 16 == 0 && !c->decode_mma;
    /* kernels that copy whole tiles or pages read slots no sequence wrote
     * and pages nobody owns: those are NaN (FP8: NaN codes), so one that
     * lets them reach the output fails */
    if (c->wgmma || takes_decode) {
        poison_unused_slots(kexact, page_table, kv_len, c->n_seqs, max_pages, n_pages, n_kv, ps, D);
        poison_unused_slots(vexact, page_table, kv_len, c->n_seqs, max_pages, n_pages, n_kv, ps, D);
    }
    void *d_kp = op_up(e, pool_encode(e, kexact, pool_rows, D, kvt), pool_bytes);
    void *d_vp = op_up(e, pool_encode(e, vexact, pool_rows, D, kvt), pool_bytes);
    kn_kv_pools dpools = { d_kp, d_vp, kvt };
    float *d_k = op_up(e, k, row_n * 4), *d_v = op_up(e, v, row_n * 4), *d_q = op_up(e, q, q_n * 4);
    float *d_sinks = sinks ? op_up(e, sinks, (size_t)H * 4) : NULL, *d_out = op_nan(e, q_n);
    kn_seq_batch hb = { .n_seqs = c->n_seqs, .n_rows = n_rows, .max_pages = max_pages, .max_q_len = max_q,
                        .max_kv_len = max_kv, .q_offset = q_offset, .kv_len = kv_len,
                        .page_table = page_table, .n_pages = n_pages };
    kn_seq_batch db = hb;
    db.q_offset = op_up(e, q_offset, (size_t)(c->n_seqs + 1) * 4);
    db.kv_len = op_up(e, kv_len, (size_t)c->n_seqs * 4);
    db.page_table = op_up(e, page_table, (size_t)c->n_seqs * max_pages * 4);
    /* the rows placed by hand: row r of sequence s at its position's slot */
    for (int s = 0; s < c->n_seqs; s++)
        for (int r = q_offset[s]; r < q_offset[s + 1]; r++) {
            int pos = kv_len[s] - c->n_q[s] + (r - q_offset[s]);
            for (int h = 0; h < n_kv; h++) {
                size_t at = (((size_t)page_table[(size_t)s * max_pages + pos / ps] * n_kv + h) * ps + pos % ps) * D;
                memcpy(kexact + at, k + ((size_t)r * n_kv + h) * D, (size_t)D * 4);
                memcpy(vexact + at, v + ((size_t)r * n_kv + h) * D, (size_t)D * 4);
            }
        }
    /* what kv_append must leave: every row in the pools' dtype */
    const uint8_t *kbytes = pool_encode(e, kexact, pool_rows, D, kvt);
    const uint8_t *vbytes = pool_encode(e, vexact, pool_rows, D, kvt);
    float *kpool = pool_decode(e, kbytes, pool_rows, D, kvt), *vpool = pool_decode(e, vbytes, pool_rows, D, kvt);
    if (op_ok(e, kn_kv_append(e->be, &dpools, d_k, d_v, &db, n_kv, D, ps), "kn_kv_append"))
        op_check(e, pool_equals(e, d_kp, kbytes, pool_bytes) && pool_equals(e, d_vp, vbytes, pool_bytes),
                 "kv_append: the %s pools differ from the rows placed by hand", kn_dtype_name(kvt));
    double *ref = op_host(e, q_n * sizeof(double)), *ref_exact = op_host(e, q_n * sizeof(double));
    const float **keys = op_host(e, (size_t)max_kv * sizeof *keys), **vals = op_host(e, (size_t)max_kv * sizeof *vals);
    for (int s = 0; s < c->n_seqs; s++)
        for (int r = q_offset[s]; r < q_offset[s + 1]; r++) {
            int pos = kv_len[s] - c->n_q[s] + (r - q_offset[s]), first = first_visible(pos, c->window);
            for (int h = 0; h < H; h++) {
                for (int j = first; j <= pos; j++) {
                    size_t at = (((size_t)page_table[(size_t)s * max_pages + j / ps] * n_kv + h / G) * ps + j % ps) * D;
                    keys[j - first] = kpool + at;
                    vals[j - first] = vpool + at;
                }
                ref_head(ref + ((size_t)r * H + h) * D, q + ((size_t)r * H + h) * D, keys, vals, pos - first + 1,
                         D, scale, sinks ? &sinks[h] : NULL);
                if (kvt == KN_F32)
                    continue;
                for (int j = first; j <= pos; j++) { /* the same keys, unrounded */
                    keys[j - first] = kexact + (keys[j - first] - kpool);
                    vals[j - first] = vexact + (vals[j - first] - vpool);
                }
                ref_head(ref_exact + ((size_t)r * H + h) * D, q + ((size_t)r * H + h) * D, keys, vals,
                         pos - first + 1, D, scale, sinks ? &sinks[h] : NULL);
            }
        }
    const int bf16 = c->bf16 || c->wgmma;
    if (bf16 && !op_ok(e, kn_backend_set_attn_bf16(e->be, 1), "kn_backend_set_attn_bf16"))
        return;
#ifdef TANDEM_CUDA
    /* modes 2-9 box whole pages: other page sizes take mode 1's kernel */
    int wgmma_was = 0, ran = c->wgmma >= 2 && ps >= 8 && ps <= 128 && 128 % ps == 0 ? c->wgmma : 1;
    long long wgmma_runs = 0;
    /* every case names its kernel: wgmma 0 keeps the mma.sync kernel tested
     * although the backend's default is a wgmma mode */
    if (e->be->kind == KN_BACKEND_CUDA) {
        wgmma_was = kn_cuda_attn_wgmma(e->be);
        wgmma_runs = kn_cuda_attn_wgmma_launches(e->be, ran);
        kn_cuda_set_attn_wgmma(e->be, c->wgmma);
    }
#endif
#ifdef TANDEM_CUDA
    long long decode_runs = 0, decode_tma_runs = 0;
    if (e->be->kind == KN_BACKEND_CUDA) {
        decode_runs = kn_cuda_attn_decode_mma_launches(e->be);
        decode_tma_runs = kn_cuda_attn_decode_tma_launches(e->be);
        kn_cuda_set_attn_decode_tma(e->be, !c->decode_mma);
    }
#else
    (void)takes_decode_tma;
#endif
    int rc = kn_attention(e->be, d_out, d_q, &dpools, &db, H, n_kv, D, ps, scale, d_sinks, c->window);
    kn_backend_set_attn_bf16(e->be, 0);
#ifdef TANDEM_CUDA
    /* bf16 precision over bf16 or FP8 pools with at most 16 query vectors
     * per sequence is a decode kernel's (attention_decode_tma.cu or
     * attention_decode_mma.cu) */
    if (e->be->kind == KN_BACKEND_CUDA) {
        kn_cuda_set_attn_decode_tma(e->be, 1);
        if (takes_decode_tma)
            op_check(e, kn_cuda_attn_decode_tma_launches(e->be) == decode_tma_runs + 1,
                     "the decode TMA kernel did not run (launches %lld -> %lld)", decode_tma_runs,
                     kn_cuda_attn_decode_tma_launches(e->be));
        else if (takes_decode)
            op_check(e, kn_cuda_attn_decode_mma_launches(e->be) == decode_runs + 1,
                     "the decode mma kernel did not run (launches %lld -> %lld)", decode_runs,
                     kn_cuda_attn_decode_mma_launches(e->be));
    }
    if (e->be->kind == KN_BACKEND_CUDA)
        kn_cuda_set_attn_wgmma(e->be, wgmma_was);
    if (c->wgmma) {
        op_check(e, kn_cuda_attn_wgmma_launches(e->be, ran) == wgmma_runs + 1,
                 "the mode %d wgmma kernel did not run (launches %lld -> %lld)", ran, wgmma_runs,
                 kn_cuda_attn_wgmma_launches(e->be, ran));
    }
#endif
    if (!op_ok(e, rc, "kn_attention"))
        return;
    double tol = bf16 ? BF16_ATTN_TOL : op_tol_fp32(e, 0);
    const char *kname = c->wgmma ? " wgmma" : c->bf16 ? " bf16" : "";
    float *got = op_get(e, d_out, q_n);
    double err = tu_max_rel_err(got, ref, q_n);
    if (!op_check_err(e, err, tol, "attention%s, %s pools vs float64", kname, kn_dtype_name(kvt)))
        report_first_bad(e, "attention vs float64", got, ref, n_rows, H, D, tol);
    if (bf16)
        op_check(e, err > BF16_ATTN_MIN, "bf16: rel err %.3g not above fp32's %g: the bf16 kernel did not run",
                 err, BF16_ATTN_MIN);
    if (kvt != KN_F32)
        op_check_err(e, tu_max_rel_err(got, ref_exact, q_n),
                     (kvt == KN_BF16 ? BF16_KV_TOL : FP8_KV_TOL) + (bf16 ? BF16_ATTN_TOL : 0),
                     "attention over %s pools vs float64 over the unrounded K, V", kn_dtype_name(kvt));
    if (e->cuda) {
        float *cpu = op_host(e, q_n * 4);
        kn_kv_pools hpools = { (void *)kbytes, (void *)vbytes, kvt };
        if (op_ok(e, kn_attention(e->cpu, cpu, q, &hpools, &hb, H, n_kv, D, ps, scale, sinks, c->window),
                  "kn_attention cpu"))
            op_check_err(e, tu_max_rel_err_f32(got, cpu, q_n), tol, "attention%s vs CPU", kname);
    }
}

/* The precision switch: the CPU refuses bf16, CUDA sets and clears it
 * (and the wgmma switch). */
static void precision_switch(op_env *e, const void *param)
{
    (void)param;
    if (!e->cuda) {
        OP_INT_EQ(e, kn_backend_set_attn_bf16(e->be, 1), TN_ERR_UNSUPPORTED);
        OP_INT_EQ(e, kn_backend_set_attn_bf16(e->be, 0), TN_OK);
        OP_INT_EQ(e, kn_backend_attn_bf16(e->be), 0);
        return;
    }
    OP_INT_EQ(e, kn_backend_set_attn_bf16(e->be, 1), TN_OK);
    OP_INT_EQ(e, kn_backend_attn_bf16(e->be), 1);
    OP_INT_EQ(e, kn_backend_set_attn_bf16(e->be, 0), TN_OK);
    OP_INT_EQ(e, kn_backend_attn_bf16(e->be), 0);
    OP_INT_EQ(e, kn_backend_attn_bf16(e->cpu), 0);
#ifdef TANDEM_CUDA
    int was = kn_cuda_attn_wgmma(e->be);
    for (int mode = 1; mode <= KN_CUDA_ATTN_WGMMA_MODES; mode++) {
        kn_cuda_set_attn_wgmma(e->be, mode);
        OP_INT_EQ(e, kn_cuda_attn_wgmma(e->be), mode);
    }
    kn_cuda_set_attn_wgmma(e->be, KN_CUDA_ATTN_WGMMA_MODES + 1); /* out of range: off */
    OP_INT_EQ(e, kn_cuda_attn_wgmma(e->be), 0);
    kn_cuda_set_attn_wgmma(e->be, 0);
    OP_INT_EQ(e, kn_cuda_attn_wgmma(e->be), 0);
    kn_cuda_set_attn_wgmma(e->be, was);
#endif
}

static void attention_rejects_bad_arguments(op_env *e, const void *param)
{
    (void)param;
    /* Two sequences, page_size 2: lens 3 and 2, pages {1, 0} and {2}. */
    enum { HD = 2, PS = 2, NP = 3 };
    float pool_k[NP * PS * HD] = { 0 }, pool_v[NP * PS * HD] = { 0 };
    float q[5 * HD] = { 0 }, k[5 * HD] = { 0 }, v[5 * HD] = { 0 }, out[5 * HD];
    int32_t q_offset[3] = { 0, 3, 5 }, kv_len[2] = { 3, 2 };
    int32_t pages[2 * 2] = { 1, 0, 2, -1 };
    kn_seq_batch ok = { .n_seqs = 2, .n_rows = 5, .max_pages = 2, .max_q_len = 3,
                        .max_kv_len = 3, .q_offset = q_offset, .kv_len = kv_len,
                        .page_table = pages, .n_pages = NP };
    kn_kv_pools pools = { pool_k, pool_v, KN_F32 };
    OP_INT_EQ(e, kn_kv_append(e->be, &pools, k, v, &ok, 1, HD, PS), TN_OK);
    OP_INT_EQ(e, kn_attention(e->be, out, q, &pools, &ok, 1, 1, HD, PS, 1.0f,
                                  NULL, 0), TN_OK);

#define BOTH_REJECT(batch, n_heads, n_kv, page_size, scale, window)                          \
    do {                                                                                     \
        OP_INT_EQ(e, kn_kv_append(e->be, &pools, k, v, batch, n_kv, HD, page_size), TN_ERR_ARG); \
        OP_INT_EQ(e, kn_attention(e->be, out, q, &pools, batch, n_heads, n_kv, HD,          \
                                      page_size, scale, NULL, window), TN_ERR_ARG);          \
    } while (0)

    BOTH_REJECT(NULL, 1, 1, PS, 1.0f, 0);
    BOTH_REJECT(&ok, 1, 0, PS, 1.0f, 0);
    BOTH_REJECT(&ok, 1, 1, 0, 1.0f, 0);
    kn_seq_batch bad = ok;
    bad.n_pages = 2; /* page 2 is now out of range */
    BOTH_REJECT(&bad, 1, 1, PS, 1.0f, 0);
    bad = ok;
    bad.n_pages = 0;
    BOTH_REJECT(&bad, 1, 1, PS, 1.0f, 0);
    bad = ok;
    bad.n_rows = 4; /* q_offset ends at 5 */
    BOTH_REJECT(&bad, 1, 1, PS, 1.0f, 0);
    bad = ok;
    bad.max_q_len = 2;
    BOTH_REJECT(&bad, 1, 1, PS, 1.0f, 0);
    bad = ok;
    bad.max_kv_len = 2;
    BOTH_REJECT(&bad, 1, 1, PS, 1.0f, 0);
    bad = ok;
    bad.max_pages = 1; /* sequence 0 needs 2 pages */
    BOTH_REJECT(&bad, 1, 1, PS, 1.0f, 0);
    bad = ok;
    bad.page_table = NULL;
    BOTH_REJECT(&bad, 1, 1, PS, 1.0f, 0);

    int32_t neg_pages[4] = { 1, -1, 2, -1 };
    bad = ok;
    bad.page_table = neg_pages; /* sequence 0's second page is missing */
    BOTH_REJECT(&bad, 1, 1, PS, 1.0f, 0);
    int32_t short_kv[2] = { 2, 2 }; /* sequence 0 has 3 rows but 2 tokens */
    bad = ok;
    bad.kv_len = short_kv;
    BOTH_REJECT(&bad, 1, 1, PS, 1.0f, 0);
    int32_t down_offsets[3] = { 0, 4, 3 };
    bad = ok;
    bad.q_offset = down_offsets;
    bad.n_rows = 3;
    BOTH_REJECT(&bad, 1, 1, PS, 1.0f, 0);

    /* Attention-only checks. */
    OP_INT_EQ(e, kn_attention(e->be, out, q, &pools, &ok, 3, 2, HD, PS, 1.0f, NULL, 0),
                     TN_ERR_ARG); /* 3 heads over 2 KV heads */
    OP_INT_EQ(e, kn_attention(e->be, out, q, &pools, &ok, 1, 1, HD, PS, 1.0f, NULL, -1),
                     TN_ERR_ARG);
    OP_INT_EQ(e, kn_attention(e->be, out, q, &pools, &ok, 1, 1, HD, PS, NAN, NULL, 0),
                     TN_ERR_ARG);
    OP_INT_EQ(e, kn_attention(e->be, NULL, q, &pools, &ok, 1, 1, HD, PS, 1.0f, NULL, 0),
                     TN_ERR_ARG);
    kn_kv_pools no_k = { NULL, pool_v, KN_F32 }, no_v = { pool_k, NULL, KN_F32 };
    OP_INT_EQ(e, kn_attention(e->be, out, q, &no_k, &ok, 1, 1, HD, PS, 1.0f, NULL, 0),
                     TN_ERR_ARG);
    OP_INT_EQ(e, kn_kv_append(e->be, &no_v, k, v, &ok, 1, HD, PS), TN_ERR_ARG);
    OP_INT_EQ(e, kn_attention(e->be, out, q, NULL, &ok, 1, 1, HD, PS, 1.0f, NULL, 0), TN_ERR_ARG);
    /* fp8 pools with head_dim 2 (rows need a multiple of 4), an unknown dtype */
    kn_kv_pools fp8 = { pool_k, pool_v, KN_FP8_E4M3 }, junk = { pool_k, pool_v, (kn_dtype)7 };
    OP_INT_EQ(e, kn_kv_append(e->be, &fp8, k, v, &ok, 1, HD, PS), TN_ERR_ARG);
    OP_INT_EQ(e, kn_attention(e->be, out, q, &fp8, &ok, 1, 1, HD, PS, 1.0f, NULL, 0), TN_ERR_ARG);
    OP_INT_EQ(e, kn_kv_append(e->be, &junk, k, v, &ok, 1, HD, PS), TN_ERR_ARG);
}

void ops_register_attention(void)
{
    static const attn_case seq[] = {
        { "gqa2", 3, { 37, 5, 64 }, 4, 2, 16, 8, 0, 0 },
        { "gqa2-sinks", 3, { 37, 5, 64 }, 4, 2, 16, 8, 0, 1 },
        { "gqa2-sinks-window", 3, { 37, 5, 64 }, 4, 2, 16, 8, 16, 1 },
        { "gqa4-sinks", 4, { 50, 17, 3, 33 }, 8, 2, 32, 16, 0, 1 },
        { "gqa4-window", 4, { 50, 17, 3, 33 }, 8, 2, 32, 5, 7, 0 },
        { "mha-page1-longwindow", 2, { 9, 4 }, 2, 2, 8, 1, 100, 1 },
        { "gqa4-bigpage", 2, { 70, 129 }, 8, 2, 64, 64, 32, 1 },
    };
    static const char *const kind[] = { "prefill", "decode after prefill", "chunked prefill, idle sequence" };
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
            seq_param p = { seq[i], (seq_kind)k };
            OP_CASE("attention", OP_ALL, seq_case, p, "seq %s: %s", kind[k], seq[i].name);
        }
    static const pool_param pool[] = {
        { "prefill 1 seq 200 rows, 16/2 heads, d64, page 16, sinks", 1, { 200 }, { 200 }, 16, 2, 64, 16, 0, 1, 0, KN_F32, 0, 0, 0 },
        { "prefill 1 seq 300 rows, sliding window 128, sinks", 1, { 300 }, { 300 }, 16, 2, 64, 16, 128, 1, 0, KN_F32, 0, 0, 0 },
        { "chunked prefill 2 seqs (70 of 150, 33 of 33), 8/2 heads, d128, no sink", 2, { 70, 33 }, { 150, 33 },
          8, 2, 128, 16, 0, 0, 0, KN_F32, 0, 0, 0 },
        { "MHA 4/4 heads, d64, 100 rows, page 5, sinks", 1, { 100 }, { 100 }, 4, 4, 64, 5, 0, 1, 0, KN_F32, 0, 0, 0 },
        { "decode 5 seqs kv 1..2500 (split-KV), 16/2 heads, d64, sinks", 5, { 1, 1, 1, 1, 1 },
          { 1, 17, 300, 1500, 2500 }, 16, 2, 64, 16, 0, 1, 0, KN_F32, 0, 0, 0 },
        { "decode 3 seqs kv 40..3000, window 128, sinks", 3, { 1, 1, 1 }, { 40, 700, 3000 }, 16, 2, 64, 16, 128, 1, 0, KN_F32, 0, 0, 0 },
        { "decode 2 seqs kv 2000, 32/4 heads d128, no sink (split-KV)", 2, { 1, 1 }, { 2000, 1999 }, 32, 4, 128, 16,
          0, 0, 0, KN_F32, 0, 0, 0 },
        { "prefill d80 (generic kernel) 45 rows, 4/2 heads, sinks", 1, { 45 }, { 45 }, 4, 2, 80, 16, 0, 1, 0, KN_F32, 0, 0, 0 },
        { "spec-decode 3 rows x 2 seqs kv 600, 16/2 heads, d64, sinks, window 128", 2, { 3, 3 }, { 600, 601 },
          16, 2, 64, 16, 128, 1, 0, KN_F32, 0, 0, 0 },
        { "decode d96 (generic) kv 1300, 12/4 heads, sinks", 2, { 1, 2 }, { 1300, 77 }, 12, 4, 96, 8, 0, 1, 0, KN_F32, 0, 0, 0 },
    };
    for (size_t i = 0; i < sizeof pool / sizeof pool[0]; i++)
        OP_CASE("attention", OP_ALL, pool_case, pool[i], "pool %s", pool[i].name);
    for (size_t i = 0; i < sizeof pool / sizeof pool[0]; i++) {
        pool_param p = pool[i];
        p.kv = KN_BF16;
        OP_CASE("attention", OP_ALL, pool_case, p, "pool bf16 KV %s", pool[i].name);
        p.kv = KN_FP8_E4M3;
        OP_CASE("attention", OP_ALL, pool_case, p, "pool fp8 KV %s", pool[i].name);
    }
    /* The bf16 tensor-core prefill kernel: the prefill cases above, then
     * GPT-OSS's 64/8 heads, odd lengths, chunked multi-sequence batches,
     * windows with and without sinks (rows whose first tiles are all
     * masked), head_dim 128. */
    static const pool_param bf16[] = {
        { "prefill 1 seq 200 rows, 16/2 heads, d64, page 16, sinks", 1, { 200 }, { 200 }, 16, 2, 64, 16, 0, 1, 1, KN_F32, 0, 0, 0 },
        { "prefill 1 seq 300 rows, sliding window 128, sinks", 1, { 300 }, { 300 }, 16, 2, 64, 16, 128, 1, 1, KN_F32, 0, 0, 0 },
        { "chunked prefill 2 seqs (70 of 150, 33 of 33), 8/2 heads, d128, no sink", 2, { 70, 33 }, { 150, 33 },
          8, 2, 128, 16, 0, 0, 1, KN_F32, 0, 0, 0 },
        { "MHA 4/4 heads, d64, 100 rows, page 5, sinks", 1, { 100 }, { 100 }, 4, 4, 64, 5, 0, 1, 1, KN_F32, 0, 0, 0 },
        { "GPT-OSS 64/8 heads d64, 777 rows, window 128, sinks", 1, { 777 }, { 777 }, 64, 8, 64, 16, 128, 1, 1, KN_F32, 0, 0, 0 },
        { "GPT-OSS 64/8 heads d64, 3 seqs (517 of 517, 129 of 1000, 5 of 63), sinks", 3, { 517, 129, 5 },
          { 517, 1000, 63 }, 64, 8, 64, 16, 0, 1, 1, KN_F32, 0, 0, 0 },
        { "32/4 heads d128, 333 rows, page 16, no sink", 1, { 333 }, { 333 }, 32, 4, 128, 16, 0, 0, 1, KN_F32, 0, 0, 0 },
        { "window 128 chunked 2 seqs (300 of 1200, 64 of 64), 16/2 d64, page 7, sinks", 2, { 300, 64 },
          { 1200, 64 }, 16, 2, 64, 7, 128, 1, 1, KN_F32, 0, 0, 0 },
        { "window 64, no sink, 16/2 heads d64, 400 rows", 1, { 400 }, { 400 }, 16, 2, 64, 16, 64, 0, 1, KN_F32, 0, 0, 0 },
        { "d128 window 100, sinks, 8/1 heads, 2 seqs (250 of 250, 31 of 400)", 2, { 250, 31 }, { 250, 400 }, 8,
          1, 128, 16, 100, 1, 1, KN_F32, 0, 0, 0 },
    };
    for (size_t i = 0; i < sizeof bf16 / sizeof bf16[0]; i++)
        OP_CASE("attention", OP_CUDA, pool_case, bf16[i], "pool bf16 %s", bf16[i].name);
    for (size_t i = 0; i < sizeof bf16 / sizeof bf16[0]; i++) { /* and reading bf16 / fp8 pools */
        pool_param p = bf16[i];
        p.kv = KN_BF16;
        OP_CASE("attention", OP_CUDA, pool_case, p, "pool bf16 bf16 KV %s", bf16[i].name);
        p.kv = KN_FP8_E4M3;
        OP_CASE("attention", OP_CUDA, pool_case, p, "pool bf16 fp8 KV %s", bf16[i].name);
    }
    /* The bf16 tensor-core decode kernel (attention_decode_mma.cu: bf16
     * pools, at most 16 query vectors per sequence): GPT-OSS's 64/8 heads
     * over lengths from 1 key to several splits' worth, windows, head_dim
     * 128, two speculative rows (16 vectors), GQA 16:1 and 1:1, page sizes
     * that do not divide a tile, sequences of different lengths in one
     * launch (each split cut from its own length), and the two diagnostic
     * fills. */
    static const pool_param dec[] = {
        { "decode GPT-OSS 64/8 heads d64, 6 seqs kv 1..5000, sinks", 6, { 1, 1, 1, 1, 1, 1 },
          { 1, 17, 300, 1500, 2500, 5000 }, 64, 8, 64, 16, 0, 1, 1, KN_BF16, 0, 0, 0 },
        { "decode 16/2 heads d64, 3 seqs kv 40..3000, window 128, sinks", 3, { 1, 1, 1 }, { 40, 700, 3000 },
          16, 2, 64, 16, 128, 1, 1, KN_BF16, 0, 0, 0 },
        { "decode 32/4 heads d128, 2 seqs kv 2000, no sink", 2, { 1, 1 }, { 2000, 1999 }, 32, 4, 128, 16, 0,
          0, 1, KN_BF16, 0, 0, 0 },
        { "decode 32/4 heads d128, 3 seqs kv 5..4100, window 100, sinks, page 7", 3, { 1, 1, 1 },
          { 5, 333, 4100 }, 32, 4, 128, 7, 100, 1, 1, KN_BF16, 0, 0, 0 },
        { "spec-decode 2 rows x 3 seqs (16 vectors), 16/2 heads d64, window 128, sinks", 3, { 2, 2, 2 },
          { 2, 600, 2601 }, 16, 2, 64, 16, 128, 1, 1, KN_BF16, 0, 0, 0 },
        { "decode GQA 16:1 d64, 2 seqs kv 1000, page 5, sinks", 2, { 1, 1 }, { 1000, 37 }, 16, 1, 64, 5, 0, 1,
          1, KN_BF16, 0, 0, 0 },
        { "decode MHA 8/8 heads d64, 2 seqs kv 700, no sink", 2, { 1, 1 }, { 700, 129 }, 8, 8, 64, 16, 0, 0, 1,
          KN_BF16, 0, 0, 0 },
        { "decode diag K = 0 (P V alone), 64/8 heads d64, kv 3000, sinks", 2, { 1, 1 }, { 3000, 90 }, 64, 8, 64,
          16, 0, 1, 1, KN_BF16, 0, FILL_K_ZERO, 0 },
        { "decode diag V[key][d] = c[d] (softmax sums alone), 64/8 heads d64, kv 3000", 2, { 1, 1 },
          { 3000, 90 }, 64, 8, 64, 16, 0, 1, 1, KN_BF16, 0, FILL_V_CONST, 0 },
    };
    for (size_t i = 0; i < sizeof dec / sizeof dec[0]; i++)
        OP_CASE("attention", OP_CUDA, pool_case, dec[i], "pool bf16 %s", dec[i].name);
    /* those over bf16 pools take the TMA kernel (attention_decode_tma.cu)
     * where the page size is a multiple of 16: the cp.async kernel again */
    for (size_t i = 0; i < sizeof dec / sizeof dec[0]; i++) {
        pool_param p = dec[i];
        if (p.page_size % 16)
            continue;
        p.decode_mma = 1;
        OP_CASE("attention", OP_CUDA, pool_case, p, "pool bf16 decode-mma %s", dec[i].name);
    }
    /* and both kernels over FP8 pools (rows of codes + scale): the TMA
     * kernel where the page size is a multiple of 16 (a tile's 16 rows as
     * one bulk copy, widened to bf16 in shared memory), the cp.async kernel
     * (the 16-byte chunks covering each row, 4-byte aligned only; page 5
     * with one KV head ending the pool mid-chunk) for the others and again
     * for those */
    for (size_t i = 0; i < sizeof dec / sizeof dec[0]; i++) {
        pool_param p = dec[i];
        p.kv = KN_FP8_E4M3;
        OP_CASE("attention", OP_CUDA, pool_case, p, "pool bf16 fp8 KV %s", dec[i].name);
        if (p.page_size % 16)
            continue;
        p.decode_mma = 1;
        OP_CASE("attention", OP_CUDA, pool_case, p, "pool bf16 fp8 KV decode-mma %s", dec[i].name);
    }
    /* The Hopper wgmma kernel (attention_wgmma.cu: head_dim 64, bf16 pools),
     * every mode,
     * with the unwritten pool slots and unowned pages NaN: GPT-OSS's 64/8
     * heads and GQA 8:1 at smaller head counts, causal with and without
     * a 128 window, sinks on and off, lengths that are not multiples of the
     * 128-vector or 128-key tiles, page sizes that do not divide them,
     * several sequences with their own page tables, chunked prefill
     * (earlier tokens cached), MHA, and one tile's worth of rows. */
    static const pool_param wg[] = {
        { "GPT-OSS 64/8 heads d64, 1 seq 520 rows, causal, sinks, page 16", 1, { 520 }, { 520 }, 64, 8, 64, 16, 0, 1,
          0, KN_BF16, 1, 0, 0 },
        { "GPT-OSS 64/8 heads d64, 777 rows, window 128, sinks", 1, { 777 }, { 777 }, 64, 8, 64, 16, 128, 1, 0,
          KN_BF16, 1, 0, 0 },
        { "16/2 heads, 900 rows, causal, no sink, page 16", 1, { 900 }, { 900 }, 16, 2, 64, 16, 0, 0, 0,
          KN_BF16, 1, 0, 0 },
        { "16/2 heads, 1000 rows, window 128, sinks, page 5", 1, { 1000 }, { 1000 }, 16, 2, 64, 5, 128, 1, 0,
          KN_BF16, 1, 0, 0 },
        { "16/2 heads, 333 rows, window 128, no sink, page 7", 1, { 333 }, { 333 }, 16, 2, 64, 7, 128, 0, 0,
          KN_BF16, 1, 0, 0 },
        { "16/2 heads, 3 seqs (517 of 517, 129 of 1000, 5 of 63), sinks, page 8", 3, { 517, 129, 5 },
          { 517, 1000, 63 }, 16, 2, 64, 8, 0, 1, 0, KN_BF16, 1, 0, 0 },
        { "16/2 heads, window 128 chunked 3 seqs (300 of 1200, 64 of 64, 200 of 333), page 16, sinks", 3,
          { 300, 64, 200 }, { 1200, 64, 333 }, 16, 2, 64, 16, 128, 1, 0, KN_BF16, 1, 0, 0 },
        { "8/1 heads, 2 seqs (250 of 250, 31 of 400), window 100, sinks, page 32", 2, { 250, 31 }, { 250, 400 }, 8,
          1, 64, 32, 100, 1, 0, KN_BF16, 1, 0, 0 },
        { "MHA 4/4 heads, 300 rows, causal, sinks, page 16", 1, { 300 }, { 300 }, 4, 4, 64, 16, 0, 1, 0, KN_BF16,
          1, 0, 0 },
        { "16/2 heads, 16 rows (one 128-vector tile), chunked after 500, sinks, page 16", 1, { 16 }, { 516 }, 16, 2,
          64, 16, 0, 1, 0, KN_BF16, 1, 0, 0 },
        /* 16 (sequence, KV head) pairs: on 132 SMs the persistent modes
         * give each block several query tiles (a window run, a snake) */
        { "GPT-OSS 64/8 heads, 2 seqs (600 of 900, 250 of 250), window 128, sinks, page 16", 2, { 600, 250 },
          { 900, 250 }, 64, 8, 64, 16, 128, 1, 0, KN_BF16, 1, 0, 0 },
        { "GPT-OSS 64/8 heads, 2 seqs (400 of 400, 150 of 500), causal, sinks, page 16", 2, { 400, 150 },
          { 400, 500 }, 64, 8, 64, 16, 0, 1, 0, KN_BF16, 1, 0, 0 },
        { "MHA 4/4 heads, 700 rows, window 128 (spans of 3 key tiles), sinks, page 16", 1, { 700 }, { 700 }, 4, 4,
          64, 16, 128, 1, 0, KN_BF16, 1, 0, 0 },
        { "16/2 heads, 600 rows, window 300 (spans of 4 key tiles: mode 8's whole ring), no sink, page 16", 1,
          { 600 }, { 600 }, 16, 2, 64, 16, 300, 0, 0, KN_BF16, 1, 0, 0 },
        { "8/1 heads, 800 rows, window 600 (mode 8 takes mode 6's kernel), sinks, page 32", 1, { 800 }, { 800 }, 8,
          1, 64, 32, 600, 1, 0, KN_BF16, 1, 0, 0 },
    };
    /* and two diagnostic fills per mode: which product is wrong when a
     * case above fails */
    static const pool_param wg_diag[] = {
        { "diag K = 0 (P V alone), 16/2 heads, 300 rows, sinks", 1, { 300 }, { 300 }, 16, 2, 64, 16, 0, 1, 0,
          KN_BF16, 1, FILL_K_ZERO, 0 },
        { "diag V[key][d] = c[d] (softmax sums alone), 16/2 heads, 300 rows, sinks", 1, { 300 }, { 300 }, 16, 2,
          64, 16, 0, 1, 0, KN_BF16, 1, FILL_V_CONST, 0 },
    };
    static const char *const wg_how[] = { "cp.async",    "tma",         "tma-pipe", "tma-pipe-3wg",
                                          "tma-pipe-pw", "tma-persist", "tma-d128", "tma-window",
                                          "tma-pingpong" };
    for (int mode = 1; mode <= (int)(sizeof wg_how / sizeof wg_how[0]); mode++) {
        const char *how = wg_how[mode - 1];
        for (size_t i = 0; i < sizeof wg / sizeof wg[0]; i++) {
            pool_param p = wg[i];
            p.wgmma = mode;
            OP_CASE("attention", OP_CUDA, pool_case, p, "pool wgmma %s %s", how, wg[i].name);
        }
        for (size_t i = 0; i < sizeof wg_diag / sizeof wg_diag[0]; i++) {
            pool_param p = wg_diag[i];
            p.wgmma = mode;
            OP_CASE("attention", OP_CUDA, pool_case, p, "pool wgmma %s %s", how, wg_diag[i].name);
        }
    }
    /* Head_dim 128 (Qwen3-30B-A3B: 32 query heads, 4 KV heads, no sinks)
     * in modes 6, 7 and 8: the same kinds of cases over page sizes TMA
     * boxes, and the diagnostic fills. */
    static const pool_param wg128[] = {
        { "Qwen3 32/4 heads d128, 1 seq 600 rows, causal, no sink, page 16", 1, { 600 }, { 600 }, 32, 4, 128, 16,
          0, 0, 0, KN_BF16, 1, 0, 0 },
        { "32/4 heads d128, 1000 rows, window 128, sinks, page 8", 1, { 1000 }, { 1000 }, 32, 4, 128, 8, 128, 1,
          0, KN_BF16, 1, 0, 0 },
        { "16/2 heads d128, 3 seqs (517 of 517, 129 of 1000, 5 of 63), sinks, page 32", 3, { 517, 129, 5 },
          { 517, 1000, 63 }, 16, 2, 128, 32, 0, 1, 0, KN_BF16, 1, 0, 0 },
        { "16/2 heads d128, window 100 chunked 2 seqs (300 of 1200, 64 of 64), page 128, sinks", 2, { 300, 64 },
          { 1200, 64 }, 16, 2, 128, 128, 100, 1, 0, KN_BF16, 1, 0, 0 },
        { "MHA 4/4 heads d128, 300 rows, causal, no sink, page 16", 1, { 300 }, { 300 }, 4, 4, 128, 16, 0, 0, 0,
          KN_BF16, 1, 0, 0 },
        { "32/4 heads d128, 16 rows chunked after 500, page 16", 1, { 16 }, { 516 }, 32, 4, 128, 16, 0, 0, 0,
          KN_BF16, 1, 0, 0 },
        { "diag K = 0 (P V alone), 16/2 heads d128, 300 rows, sinks", 1, { 300 }, { 300 }, 16, 2, 128, 16, 0, 1,
          0, KN_BF16, 1, FILL_K_ZERO, 0 },
        { "diag V[key][d] = c[d], 16/2 heads d128, 300 rows, sinks", 1, { 300 }, { 300 }, 16, 2, 128, 16, 0, 1, 0,
          KN_BF16, 1, FILL_V_CONST, 0 },
    };
    for (int mode = 6; mode <= 8; mode++)
        for (size_t i = 0; i < sizeof wg128 / sizeof wg128[0]; i++) {
            pool_param p = wg128[i];
            p.wgmma = mode;
            OP_CASE("attention", OP_CUDA, pool_case, p, "pool wgmma %s %s", wg_how[mode - 1], wg128[i].name);
        }
    OP_CASE("attention", OP_ALL, precision_switch, pool[0], "precision switch");
    OP_CASE("attention", OP_CPU, attention_rejects_bad_arguments, pool[0], "rejects bad arguments");
}
