/* The bf16 GEMM through cuBLASLt with cached plans: out[m][n] (fp32) =
 * x[m][k] w[n][k]^T (+ what out held, beta = 1), both operands bf16, fp32
 * accumulation on the tensor cores: the same function as cublasGemmEx with
 * CUBLAS_COMPUTE_32F, which matmul.cu ran before.
 *
 * Why cuBLASLt: cublasGemmEx searches an algorithm on the host for every
 * new (m, n, k), and the MoE experts' row counts are new on almost every
 * call (lt_plan_cache.cuh). Here the descriptors and the algorithm are made
 * once per (n, k, pointer alignments, row bucket: four per octave) and kept in
 * the backend's plan cache; a call only sets the real row count on the
 * cached B and C layouts (host-side attributes, read by cublasLtMatmul when
 * it is called, so changing them between calls is safe) and runs.
 *
 * Layout as in matmul.cu: column-major out^T (n x m, ld n) = A^T B with A =
 * w read column-major (k x n, ld k, TRANSA = T) and B = x (k x m, ld k). */
#include <stdio.h>
#include <string.h>
#include "kernels/cuda/lt_plan_cache.cuh"

/* Descriptors and the heuristic's algorithm for key (key->m rows) into the
 * empty slot p. TN_ERR_UNSUPPORTED (quietly) when cuBLASLt has none. */
static int plan_make(struct kn_lt_cache *c, size_t ws_bytes, const char *op, const kn_lt_key *key,
                     kn_lt_plan *p)
{
    cublasStatus_t st;
    const char *what = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasOperation_t ta = (cublasOperation_t)key->trans_a, tb = (cublasOperation_t)key->trans_b;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    uint32_t al[3] = { (uint32_t)key->align[0], (uint32_t)key->align[1], (uint32_t)key->align[2] };
#define BF16_LT_TRY(call)                                                      \
    do {                                                                       \
        st = (call);                                                           \
        if (st != CUBLAS_STATUS_SUCCESS) {                                     \
            what = #call;                                                      \
            goto fail;                                                         \
        }                                                                      \
    } while (0)
    BF16_LT_TRY(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    BF16_LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    BF16_LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    BF16_LT_TRY(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, key->k, key->n, key->k));
    BF16_LT_TRY(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, key->k, key->m, key->k));
    BF16_LT_TRY(cublasLtMatrixLayoutCreate(&p->c, (cudaDataType_t)key->out_type, key->n, key->m,
                                           key->n));
    BF16_LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    BF16_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &ws_bytes, sizeof ws_bytes));
    BF16_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                     &al[0], sizeof al[0]));
    BF16_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                     &al[1], sizeof al[1]));
    BF16_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                     &al[2], sizeof al[2]));
    BF16_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                     &al[2], sizeof al[2]));
#undef BF16_LT_TRY
    memset(&res, 0, sizeof res);
    c->searches++;
    st = cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->a, p->b, p->c, p->c, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found < 1)) {
        kn_lt_plan_reset(p);
        return TN_ERR_UNSUPPORTED;
    }
    if (st != CUBLAS_STATUS_SUCCESS) {
        kn_lt_plan_reset(p);
        return kn_cuda_blas_error(op, "cublasLtMatmulAlgoGetHeuristic (bf16)", st);
    }
    p->algo = res.algo;
    p->key = *key;
    p->valid = 1;
    return TN_OK;
fail:
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    kn_lt_plan_reset(p);
    return kn_cuda_blas_error(op, what, st);
}

/* Runs plan p for m rows; the cuBLAS status (cublasLtMatmul checks the
 * algorithm against the problem on the host before queuing anything, and
 * refuses with NOT_SUPPORTED or INVALID_VALUE). */
static cublasStatus_t plan_run(struct kn_lt_cache *c, const kn_lt_plan *p, cudaStream_t stream,
                               void *ws, size_t ws_bytes, float *out, const void *x, const void *w,
                               float beta, int m)
{
    const uint64_t cols = (uint64_t)m;
    const float alpha = 1.0f;
    cublasStatus_t st = cublasLtMatrixLayoutSetAttribute(p->b, CUBLASLT_MATRIX_LAYOUT_COLS, &cols,
                                                         sizeof cols);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutSetAttribute(p->c, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof cols);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    return cublasLtMatmul(c->lt, p->op, &alpha, w, p->a, x, p->b, &beta, out, p->c, out, p->c,
                          &p->algo, ws, ws_bytes, stream);
}

int kn_cuda_gemm_bf16_lt(const kn_backend *be, cudaStream_t stream, void *ws, size_t ws_bytes,
                         const char *op, float *out, const void *x, const void *w, float beta,
                         int m, int n, int k)
{
    if (m == 0)
        return TN_OK;
    struct kn_lt_cache *c = kn_lt_cache_of(be, op);
    if (!c)
        return TN_ERR_DEVICE;
    kn_lt_key key;
    memset(&key, 0, sizeof key);
    key.kind = KN_LT_KIND_BF16;
    key.m = kn_lt_row_bucket(m, 1);
    key.n = n;
    key.k = k;
    key.trans_a = CUBLAS_OP_T;
    key.trans_b = CUBLAS_OP_N;
    key.out_type = CUDA_R_32F;
    key.align[0] = kn_lt_align_of(w);
    key.align[1] = kn_lt_align_of(x);
    key.align[2] = kn_lt_align_of(out);
    for (int exact = key.m == m; ; exact = 1) {
        if (exact)
            key.m = m;
        int hit, rc = TN_OK;
        kn_lt_plan *p = kn_lt_cache_slot(c, &key, &hit);
        if (!hit)
            rc = plan_make(c, ws_bytes, op, &key, p);
        if (rc == TN_ERR_UNSUPPORTED && !exact)
            continue;   /* none for the bucket: ask for the exact count */
        if (rc == TN_ERR_UNSUPPORTED) {
            fprintf(stderr, "tandem: %s: cuBLASLt has no bf16 algorithm for m=%d n=%d k=%d "
                    "(alignments %d/%d/%d)\n", op, m, n, k, key.align[0], key.align[1], key.align[2]);
            return rc;
        }
        if (rc != TN_OK)
            return rc;
        cublasStatus_t st = plan_run(c, p, stream, ws, ws_bytes, out, x, w, beta, m);
        if (st == CUBLAS_STATUS_SUCCESS)
            return TN_OK;
        /* the bucket's algorithm refused for these rows: the exact plan */
        if (exact || (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE))
            return kn_cuda_blas_error(op, "cublasLtMatmul (bf16)", st);
    }
}
