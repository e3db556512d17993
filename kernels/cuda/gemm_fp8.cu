/* Block-scaled FP8 GEMM through cuBLASLt (kernels/fp8.h's product).
 *
 * Row-major out[m][n] is the column-major n x m matrix out^T = W X^T, so
 * cuBLASLt's A is the weight (stored [n][ld] row-major = k x n column-major,
 * transposed: TRANSA = T) with CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
 * scales, and B is the quantized activations (k x m column-major, TRANSB =
 * N) with CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F scales. Both operands
 * are padded along k to a multiple of 128 with zero codes (the weight at
 * load, the activations by kn_cuda_quant_fp8), so k is always a whole
 * number of scale blocks; the GEMM runs over the padded k, which adds
 * exact zeros.
 *
 * Scale layouts cuBLASLt reads (there is no leading-dimension attribute
 * for scales): 128x128 weight scales [ceil(n/128)][ld] with ld =
 * ceil(k/128) rounded up to 4 floats (16-byte aligned rows), which is HF's
 * weight_scale_inv with padded rows; 1x128 activation scales outer-dim
 * major, [ceil(k/128)][m] (fp8_cuda.cuh). Both layouts were checked on the
 * H200 (tests/gpu/probe_fp8.cu): unpadded weight-scale rows give wrong
 * results (relative error 0.46) where the padded ones match the float64
 * reference. cuBLASLt also wants the activation row count m to be a
 * multiple of 16 (fp8_cuda.cuh), so activations are quantized into
 * 16-row-padded segments and the pad rows' outputs are dropped.
 *
 * Precision: Hopper's FP8 tensor cores accumulate each 128-wide k block
 * with less than fp32 precision before cuBLASLt promotes it to fp32 with
 * the block scales; the probe measured a normwise relative error of
 * 2-3e-4 against the float64 value of the same function (fp32 output).
 *
 * The bias goes into the epilogue (CUBLASLT_EPILOGUE_BIAS, fp32 bias) when
 * cuBLASLt has an algorithm for it; otherwise it is broadcast into out
 * first and the product accumulates onto it (beta = 1). The heuristic's
 * choice is cached per shape (rows bucketed, four buckets per octave) and pointer
 * alignment in the backend's cuBLASLt plan cache (lt_plan_cache.cuh, shared
 * with the bf16 GEMM), so steady-state calls (every layer, every expert) do
 * not query it again. */
#include <string.h>
#include <stdlib.h>
#include <cublasLt.h>
#include <cuda_bf16.h>
#include "kernels/cuda/fp8_cuda.cuh"
#include "kernels/cuda/lt_plan_cache.cuh"

/* Plans live in the backend's cuBLASLt plan cache (lt_plan_cache.cuh),
 * shared with the bf16 GEMM; this state only keeps what the tests ask. */
struct kn_cuda_fp8 {
    int last_bias_fused;   /* of the latest call with a bias (tests, probe) */
};

int kn_cuda_fp8_last_bias_fused(const kn_backend *be)
{
    const struct kn_cuda_fp8 *f = kn_cuda_ctx_of(be)->fp8;
    return f ? f->last_bias_fused : -1;
}

void kn_cuda_fp8_free(struct kn_cuda_fp8 *f)
{
    free(f);
}

static struct kn_cuda_fp8 *fp8_state(const kn_backend *be, const char *op)
{
    kn_cuda_ctx *ctx = kn_cuda_ctx_of(be);
    if (ctx->fp8)
        return ctx->fp8;
    struct kn_cuda_fp8 *f = (struct kn_cuda_fp8 *)calloc(1, sizeof *f);
    if (!f) {
        fprintf(stderr, "tandem: %s: out of host memory\n", op);
        return NULL;
    }
    ctx->fp8 = f;
    return f;
}

/* The descriptors of one call; destroyed by descs_free. */
typedef struct descs {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulPreference_t pref;
} descs;

static void descs_free(descs *d)
{
    if (d->pref)
        cublasLtMatmulPreferenceDestroy(d->pref);
    if (d->c)
        cublasLtMatrixLayoutDestroy(d->c);
    if (d->b)
        cublasLtMatrixLayoutDestroy(d->b);
    if (d->a)
        cublasLtMatrixLayoutDestroy(d->a);
    if (d->op)
        cublasLtMatmulDescDestroy(d->op);
}

#define LT_TRY(call)                                                           \
    do {                                                                       \
        st = (call);                                                           \
        if (st != CUBLAS_STATUS_SUCCESS) {                                     \
            what = #call;                                                      \
            goto fail;                                                         \
        }                                                                      \
    } while (0)

/* Builds the descriptors for this call, with or without the bias
 * epilogue. Returns a cuBLAS status; *what names the failing call. */
static cublasStatus_t descs_make(descs *d, const kn_backend *be, const kn_lt_key *key, int m,
                                 const float *xs, const float *ws, const float *bias,
                                 int epilogue_bias, const char **what_out)
{
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    const char *what = NULL;
    const int kp = (int)kn_fp8_ld((size_t)key->k);
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    int32_t mode_a = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    int32_t mode_b = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    cudaDataType_t ct = (cudaDataType_t)key->out_type;
    size_t ws_bytes = be->scratch_bytes;
    uint32_t al[4];
    memset(d, 0, sizeof *d);
    LT_TRY(cublasLtMatmulDescCreate(&d->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT_TRY(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_TRY(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LT_TRY(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode_a,
                                          sizeof mode_a));
    LT_TRY(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode_b,
                                          sizeof mode_b));
    LT_TRY(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ws,
                                          sizeof ws));
    LT_TRY(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xs,
                                          sizeof xs));
    if (epilogue_bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bt = CUDA_R_32F;
        LT_TRY(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                              sizeof epi));
        LT_TRY(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                              sizeof bias));
        LT_TRY(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                              sizeof bt));
    }
    LT_TRY(cublasLtMatrixLayoutCreate(&d->a, CUDA_R_8F_E4M3, kp, key->n, kp));
    LT_TRY(cublasLtMatrixLayoutCreate(&d->b, CUDA_R_8F_E4M3, kp, m, kp));
    LT_TRY(cublasLtMatrixLayoutCreate(&d->c, ct, key->n, m, key->n));
    LT_TRY(cublasLtMatmulPreferenceCreate(&d->pref));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(d->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &ws_bytes, sizeof ws_bytes));
    for (int i = 0; i < 3; i++)
        al[i] = (uint32_t)key->align[i];
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(d->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                &al[0], sizeof al[0]));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(d->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                &al[1], sizeof al[1]));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(d->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                &al[2], sizeof al[2]));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(d->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                &al[2], sizeof al[2]));
    return CUBLAS_STATUS_SUCCESS;
fail:
    *what_out = what;
    descs_free(d);
    return st;
}

__global__ void fp8_bias_broadcast_kernel(float *out32, __nv_bfloat16 *out16, const float *bias,
                                          int m, int n)
{
    size_t total = (size_t)m * n;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        if (out32)
            out32[i] = bias[i % n];
        else
            out16[i] = __float2bfloat16_rn(bias[i % n]);
    }
}

/* The plan for key: cached, or asked of the heuristic (the fused bias
 * first, then without) for key->m rows. NULL when cuBLASLt has none
 * (*rc TN_ERR_UNSUPPORTED): the refusal is cached too, so the heuristic is
 * asked once per key and, for an exact row count (the caller's last try),
 * the message below is printed once per shape, not on every call (the
 * skinny kernel may take the shape over: kn_matmul_w_cuda). */
static kn_lt_plan *plan_get(struct kn_lt_cache *c, const kn_backend *be, const char *op,
                           const kn_lt_key *key, const float *xs, const float *ws,
                           const float *bias, int exact, int *rc)
{
    int hit;
    kn_lt_plan *p = kn_lt_cache_slot(c, key, &hit);
    *rc = TN_OK;
    if (hit && p->valid < 0) {
        *rc = TN_ERR_UNSUPPORTED;
        return NULL;
    }
    if (hit)
        return p;
    const char *what = "cuBLASLt descriptors";
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    descs d;
    for (int epi = bias ? 1 : 0; epi >= 0 && !found; epi--) {
        cublasStatus_t st = descs_make(&d, be, key, key->m, xs, ws, bias, epi, &what);
        if (st != CUBLAS_STATUS_SUCCESS) {
            *rc = kn_cuda_blas_error(op, what, st);
            return NULL;
        }
        memset(&res, 0, sizeof res);
        c->searches++;
        st = cublasLtMatmulAlgoGetHeuristic(c->lt, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &res,
                                            &found);
        descs_free(&d);
        /* any refusal of the fused form falls back to the broadcast */
        if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED && epi == 0) {
            *rc = kn_cuda_blas_error(op, "cublasLtMatmulAlgoGetHeuristic", st);
            return NULL;
        }
        if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
            p->valid = 1;
            p->key = *key;
            p->epilogue_bias = epi;
            p->algo = res.algo;
        } else {
            found = 0;
        }
    }
    if (!found) {
        if (exact)
            fprintf(stderr, "tandem: %s: cuBLASLt has no block-scaled FP8 algorithm for "
                    "m=%d n=%d k=%d (%s output, alignments %d/%d/%d)\n", op, key->m, key->n, key->k,
                    key->out_type == CUDA_R_16BF ? "bf16" : "fp32", key->align[0], key->align[1],
                    key->align[2]);
        p->valid = -1;
        p->key = *key;
        *rc = TN_ERR_UNSUPPORTED;
        return NULL;
    }
    return p;
}

/* Runs plan p for m rows. Returns the cuBLAS status of cublasLtMatmul
 * (which checks the algorithm against the problem on the host, before
 * anything is queued) or sets *rc on other failures. */
static cublasStatus_t plan_run(struct kn_cuda_fp8 *f, struct kn_lt_cache *c,
                               const kn_backend *be, const char *op, const kn_lt_plan *p,
                               int m, void *out, const uint8_t *xq,
                               const float *xs, const uint8_t *w, const float *ws,
                               const float *bias, cudaStream_t stream, void *ws_buf, int *rc)
{
    const char *what = "cuBLASLt descriptors";
    descs d;
    *rc = TN_OK;
    cublasStatus_t st = descs_make(&d, be, &p->key, m, xs, ws, bias, p->epilogue_bias, &what);
    if (st != CUBLAS_STATUS_SUCCESS) {
        *rc = kn_cuda_blas_error(op, what, st);
        return st;
    }
    float alpha = 1.0f, beta = 0.0f;
    if (bias)
        f->last_bias_fused = p->epilogue_bias;
    if (bias && !p->epilogue_bias) {
        const int n = p->key.n;
        size_t total = (size_t)m * n, blocks = (total + 255) / 256;
        size_t cap = (size_t)kn_cuda_ctx_of(be)->sm_count * 16;
        fp8_bias_broadcast_kernel<<<(unsigned)(blocks < cap ? blocks : cap), 256, 0, stream>>>(
            p->key.out_type == CUDA_R_16BF ? NULL : (float *)out,
            p->key.out_type == CUDA_R_16BF ? (__nv_bfloat16 *)out : NULL, bias, m, n);
        cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) {
            descs_free(&d);
            *rc = kn_cuda_device_error(op, "fp8_bias_broadcast_kernel", err);
            return CUBLAS_STATUS_EXECUTION_FAILED;
        }
        beta = 1.0f;
    }
    st = cublasLtMatmul(c->lt, d.op, &alpha, w, d.a, xq, d.b, &beta, out, d.c, out, d.c,
                        &p->algo, ws_buf, be->scratch_bytes, stream);
    descs_free(&d);
    return st;
}

/* Algorithms are looked up for a bucket of rows (kn_lt_row_bucket; the many
 * row counts of the experts share a few heuristic queries) and run with the
 * real count; where cuBLASLt refuses that pairing, the exact count gets its
 * own plan (lt_plan_cache.cuh). */
static int gemm_fp8_on(const kn_backend *be, const char *op, cudaStream_t stream, void *ws_buf,
                       void *out, int out_bf16, const uint8_t *xq, const float *xs,
                       const uint8_t *w, const float *ws, const float *bias, int m, int n, int k)
{
    if (m == 0)
        return TN_OK;
    if (m % KN_CUDA_FP8_M_ALIGN)
        return kn_arg_error(op, "fp8 GEMM rows %d are not a multiple of %d", m,
                            KN_CUDA_FP8_M_ALIGN);
    struct kn_cuda_fp8 *f = fp8_state(be, op);
    struct kn_lt_cache *c = kn_lt_cache_of(be, op);
    if (!f || !c)
        return TN_ERR_DEVICE;
    kn_lt_key key;
    memset(&key, 0, sizeof key);
    key.kind = KN_LT_KIND_FP8_BLOCK;
    key.m = kn_lt_row_bucket(m, KN_CUDA_FP8_M_ALIGN);
    key.n = n;
    key.k = k;
    key.trans_a = CUBLAS_OP_T;
    key.trans_b = CUBLAS_OP_N;
    key.out_type = out_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    key.has_bias = bias != NULL;
    key.align[0] = kn_lt_align_of(w);
    key.align[1] = kn_lt_align_of(xq);
    key.align[2] = kn_lt_align_of(out);
    key.align[3] = bias ? kn_lt_align_of(bias) : 0;
    int rc;
    for (int exact = key.m == m; ; exact = 1) {
        if (exact)
            key.m = m;
        kn_lt_plan *p = plan_get(c, be, op, &key, xs, ws, bias, exact, &rc);
        if (!p && !exact && rc == TN_ERR_UNSUPPORTED)
            continue;   /* none for the bucket: ask for the exact count */
        if (!p)
            return rc;
        cublasStatus_t st = plan_run(f, c, be, op, p, m, out, xq, xs, w, ws, bias, stream, ws_buf,
                                     &rc);
        if (rc != TN_OK)
            return rc;
        if (st == CUBLAS_STATUS_SUCCESS)
            return TN_OK;
        if (exact)
            return kn_cuda_blas_error(op, "cublasLtMatmul (fp8)", st);
    }
}

int kn_cuda_gemm_fp8(const kn_backend *be, const char *op, void *out, int out_bf16,
                     const uint8_t *xq, const float *xs, const uint8_t *w, const float *ws,
                     const float *bias, int m, int n, int k)
{
    return gemm_fp8_on(be, op, kn_cuda_stream(be), be->scratch, out, out_bf16, xq, xs, w, ws, bias,
                       m, n, k);
}

/* Quantized activations for m rows in n_segs segments, zeroed (pad rows
 * are zero codes with finite scales). */
int kn_cuda_fp8_act_alloc(const kn_backend *be, const char *op, int m, int k, int n_segs,
                          uint8_t **xq, float **xs)
{
    size_t qb = kn_cuda_fp8_padded_rows((size_t)m, (size_t)n_segs) * kn_fp8_ld((size_t)k);
    size_t sb = kn_cuda_fp8_act_scale_count((size_t)m, (size_t)k, (size_t)n_segs) * sizeof(float);
    *xq = (uint8_t *)kn_cuda_tmp_alloc(be, op, qb);
    *xs = (float *)kn_cuda_tmp_alloc(be, op, sb);
    if (!*xq || !*xs)
        return TN_ERR_NOMEM;
    cudaStream_t s = kn_cuda_stream(be);
    KN_CUDA_TRY(op, cudaMemsetAsync(*xq, 0, qb, s));
    KN_CUDA_TRY(op, cudaMemsetAsync(*xs, 0, sb, s));
    return TN_OK;
}

int kn_cuda_fp8_linear_quantized(const kn_backend *be, const char *op, void *out, int out_bf16,
                                 const uint8_t *xq, const float *xs, const uint8_t *w, const float *ws,
                                 const float *bias, int m, int n, int k)
{
    if (m == 0)
        return TN_OK;
    const int m_pad = (int)kn_cuda_fp8_round_rows((size_t)m);
    const size_t elem = out_bf16 ? 2 : 4;
    void *tmp = NULL;
    int rc = TN_OK;
    /* the pad rows' outputs go to a temporary, whose first m rows are out */
    if (m_pad != m) {
        tmp = kn_cuda_tmp_alloc(be, op, (size_t)m_pad * n * elem);
        rc = tmp ? TN_OK : TN_ERR_NOMEM;
    }
    if (rc == TN_OK)
        rc = kn_cuda_gemm_fp8(be, op, tmp ? tmp : out, out_bf16, xq, xs, w, ws, bias, m_pad, n, k);
    if (rc == TN_OK && tmp) {
        cudaError_t err = cudaMemcpyAsync(out, tmp, (size_t)m * n * elem,
                                          cudaMemcpyDeviceToDevice, kn_cuda_stream(be));
        if (err != cudaSuccess)
            rc = kn_cuda_device_error(op, "cudaMemcpyAsync (fp8 rows)", err);
    }
    kn_cuda_tmp_free(be, tmp);
    return rc;
}

int kn_cuda_fp8_quantize_rows(const kn_backend *be, const char *op, const float *x, int m, int k, uint8_t **xq,
                              float **xs)
{
    int rc = kn_cuda_fp8_act_alloc(be, op, m, k, 1, xq, xs);
    return rc == TN_OK ? kn_cuda_quant_fp8(be, op, *xq, *xs, x, m, k, NULL, 1) : rc;
}

int kn_cuda_fp8_linear(const kn_backend *be, const char *op, void *out, int out_bf16,
                       const float *x, const uint8_t *w, const float *ws, const float *bias,
                       int m, int n, int k)
{
    if (m == 0)
        return TN_OK;
    uint8_t *xq = NULL;
    float *xs = NULL;
    int rc = kn_cuda_fp8_quantize_rows(be, op, x, m, k, &xq, &xs);
    if (rc == TN_OK)
        rc = kn_cuda_fp8_linear_quantized(be, op, out, out_bf16, xq, xs, w, ws, bias, m, n, k);
    kn_cuda_tmp_free(be, xq);
    kn_cuda_tmp_free(be, xs);
    return rc;
}

/* Each expert's GEMM writes its rows rounded up to 16. Written in expert
 * order straight into out, an expert's pad rows land on the next experts'
 * rows, which their own GEMMs (queued later on the same stream) then
 * overwrite. With n_streams > 1 the experts are cut into n_streams runs of
 * consecutive experts with about equal rows, one run per side stream (its
 * own cuBLASLt workspace), so that ordering still holds inside a run; an
 * expert whose padded rows would run past the end of its run (of out, for
 * one stream) goes through its run's temporary and a copy of its real
 * rows, so no stream writes rows another one owns. */
int kn_cuda_fp8_expert_gemms_q(const kn_backend *be, const char *op, float *out, const uint8_t *xq,
                               const float *xs, const int *host_off, int n_experts,
                               const uint8_t *w, const float *ws, const float *bias, int n, int k,
                               int n_streams)
{
    const int rows_total = host_off[n_experts];
    if (rows_total == 0)
        return TN_OK;
    kn_cuda_ctx *ctx = kn_cuda_ctx_of(be);
    if (n_streams < 1 || n_streams > ctx->n_side)
        n_streams = 1;
    const size_t kp = kn_fp8_ld((size_t)k);
    const size_t w_bytes = kn_fp8_data_bytes((size_t)n, (size_t)k);
    const size_t w_scales = kn_fp8_scale_count((size_t)n, (size_t)k);
    /* run_end[c]: the row after run c's last expert; tmp rows per run */
    int run_end[KN_CUDA_MAX_SIDE];
    size_t tmp_rows[KN_CUDA_MAX_SIDE], tmp_at[KN_CUDA_MAX_SIDE], tmp_total = 0;
    for (int c = 0; c < KN_CUDA_MAX_SIDE; c++)
        run_end[c] = 0, tmp_rows[c] = 0;
#define RUN_OF(e) (n_streams == 1 ? 0 : (int)((long long)host_off[e] * n_streams / rows_total))
    for (int e = 0; e < n_experts; e++)
        if (host_off[e + 1] > host_off[e])
            run_end[RUN_OF(e)] = host_off[e + 1];
    for (int e = 0; e < n_experts; e++) {
        size_t r0 = (size_t)host_off[e], m_pad = kn_cuda_fp8_round_rows((size_t)(host_off[e + 1] - host_off[e]));
        const int c = RUN_OF(e);
        if (m_pad && r0 + m_pad > (size_t)run_end[c] && m_pad > tmp_rows[c])
            tmp_rows[c] = m_pad;
    }
    for (int c = 0; c < n_streams; c++) {
        tmp_at[c] = tmp_total;
        tmp_total += tmp_rows[c];
    }
    float *tmp = tmp_total ? (float *)kn_cuda_tmp_alloc(be, op, tmp_total * n * sizeof(float)) : NULL;
    int rc = tmp_total && !tmp ? TN_ERR_NOMEM : TN_OK;
    if (rc == TN_OK && n_streams > 1) {
        cudaError_t err = kn_cuda_side_fork(be, n_streams);
        if (err != cudaSuccess)
            rc = kn_cuda_device_error(op, "side stream fork (fp8)", err);
    }
    for (int e = 0; e < n_experts && rc == TN_OK; e++) {
        int r0 = host_off[e], rows = host_off[e + 1] - r0;
        if (rows == 0)
            continue;
        const int c = RUN_OF(e);
        cudaStream_t stream = n_streams > 1 ? ctx->side[c] : kn_cuda_stream(be);
        void *ws_buf = n_streams > 1 ? ctx->side_ws[c] : be->scratch;
        float *run_tmp = tmp ? tmp + tmp_at[c] * n : NULL;
        size_t p0 = kn_cuda_fp8_seg_row((size_t)r0, (size_t)e);
        int m_pad = (int)kn_cuda_fp8_round_rows((size_t)rows);
        int direct = r0 + m_pad <= run_end[c];
        rc = gemm_fp8_on(be, op, stream, ws_buf, direct ? out + (size_t)r0 * n : run_tmp, 0,
                         xq + p0 * kp, xs + kn_cuda_fp8_seg_base(p0, (size_t)e, (size_t)k),
                         w + (size_t)e * w_bytes, ws + (size_t)e * w_scales,
                         bias ? bias + (size_t)e * n : NULL, m_pad, n, k);
        if (rc == TN_OK && !direct) {
            cudaError_t err = cudaMemcpyAsync(out + (size_t)r0 * n, run_tmp,
                                              (size_t)rows * n * sizeof(float),
                                              cudaMemcpyDeviceToDevice, stream);
            if (err != cudaSuccess)
                rc = kn_cuda_device_error(op, "cudaMemcpyAsync (fp8 expert rows)", err);
        }
    }
#undef RUN_OF
    /* the join runs even after an error: nothing may still use tmp */
    if (n_streams > 1) {
        cudaError_t err = kn_cuda_side_join(be, n_streams);
        if (err != cudaSuccess && rc == TN_OK)
            rc = kn_cuda_device_error(op, "side stream join (fp8)", err);
    }
    kn_cuda_tmp_free(be, tmp);
    return rc;
}

int kn_cuda_fp8_expert_gemms(const kn_backend *be, const char *op, float *out, const float *x,
                             const int *x_rows, int x_rows_div,
                             const int *host_off, const int *dev_off, int n_experts,
                             const uint8_t *w, const float *ws, const float *bias,
                             int n, int k, int n_streams)
{
    const int rows_total = host_off[n_experts];
    if (rows_total == 0)
        return TN_OK;
    uint8_t *xq = NULL;
    float *xs = NULL;
    int rc = kn_cuda_fp8_act_alloc(be, op, rows_total, k, n_experts, &xq, &xs);
    if (rc == TN_OK)
        rc = kn_cuda_quant_fp8_gather(be, op, xq, xs, x, rows_total, k, dev_off, n_experts, x_rows,
                                      x_rows_div);
    if (rc == TN_OK)
        rc = kn_cuda_fp8_expert_gemms_q(be, op, out, xq, xs, host_off, n_experts, w, ws, bias, n, k,
                                        n_streams);
    kn_cuda_tmp_free(be, xq);
    kn_cuda_tmp_free(be, xs);
    return rc;
}
