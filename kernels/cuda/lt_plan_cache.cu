/* The cuBLASLt plan cache shared by the FP8 and bf16 GEMMs
 * (lt_plan_cache.cuh says why and how it is bounded). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cuda/lt_plan_cache.cuh"

struct kn_lt_cache *kn_lt_cache_of(const kn_backend *be, const char *op)
{
    kn_cuda_ctx *ctx = kn_cuda_ctx_of(be);
    if (ctx->lt_cache)
        return ctx->lt_cache;
    struct kn_lt_cache *c = (struct kn_lt_cache *)calloc(1, sizeof *c);
    if (!c) {
        fprintf(stderr, "tandem: %s: out of host memory\n", op);
        return NULL;
    }
    cublasStatus_t st = cublasLtCreate(&c->lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
        kn_cuda_blas_error(op, "cublasLtCreate", st);
        free(c);
        return NULL;
    }
    ctx->lt_cache = c;
    return c;
}

void kn_lt_plan_reset(kn_lt_plan *p)
{
    if (p->c)
        cublasLtMatrixLayoutDestroy(p->c);
    if (p->b)
        cublasLtMatrixLayoutDestroy(p->b);
    if (p->a)
        cublasLtMatrixLayoutDestroy(p->a);
    if (p->op)
        cublasLtMatmulDescDestroy(p->op);
    memset(p, 0, sizeof *p);
}

void kn_lt_cache_free(struct kn_lt_cache *c)
{
    if (!c)
        return;
    for (int i = 0; i < KN_LT_PLAN_SLOTS; i++)
        kn_lt_plan_reset(&c->plans[i]);
    if (c->lt)
        cublasLtDestroy(c->lt);
    free(c);
}

/* FNV-1a over the key's bytes (keys are built from a memset, so padding
 * is zero too). */
static unsigned key_hash(const kn_lt_key *k)
{
    unsigned h = 2166136261u;
    const unsigned char *b = (const unsigned char *)k;
    for (size_t i = 0; i < sizeof *k; i++)
        h = (h ^ b[i]) * 16777619u;
    return h % KN_LT_PLAN_SLOTS;
}

kn_lt_plan *kn_lt_cache_slot(struct kn_lt_cache *c, const kn_lt_key *key, int *hit)
{
    kn_lt_plan *p = &c->plans[key_hash(key)];
    *hit = p->valid != 0 && memcmp(&p->key, key, sizeof *key) == 0;
    if (!*hit)
        kn_lt_plan_reset(p);
    return p;
}

int kn_lt_align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 1 && (a & (uintptr_t)(al - 1)))
        al >>= 1;
    return al;
}

/* Four buckets per octave: a plan is picked for a size within 25% of the
 * real m. With power-of-two buckets an m just over half its bucket ran the
 * algorithm the heuristic chose for twice its rows (12-22% slower than a
 * per-shape choice at 2048/8192 tokens, bench_moe --varying-m). */
int kn_lt_row_bucket(int m, int min_rows)
{
    int want = m > min_rows ? m : min_rows;
    if (want <= 16) {
        int b = 1;
        while (b < want)
            b <<= 1;
        return b;
    }
    if (want > (1 << 30))
        return want;
    int b0 = 16;                 /* b0 < want <= 2 b0 */
    while (2 * b0 < want)
        b0 <<= 1;
    for (int q = 5; q <= 8; q++) {
        long long b = ((long long)b0 * q / 4 + 15) / 16 * 16;
        if (b >= want)
            return (int)b;
    }
    return 2 * b0;
}
