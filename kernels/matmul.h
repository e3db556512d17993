/* Linear layer: out[m,n] = sum_k x[m,k] * w[n,k] + bias[n].
 * w is row-major [n, k] (HF nn.Linear orientation); bias may be NULL.
 * out must not alias x. */
#ifndef TANDEM_KERNELS_MATMUL_H
#define TANDEM_KERNELS_MATMUL_H
#include "kernels/backend.h"
#include "kernels/rmsnorm.h"
#include "kernels/dtype.h"

int kn_matmul(const kn_backend *be, float *out, const float *x, const float *w,
              const float *bias, int m, int n, int k);

/* A weight matrix on a backend with its element type. */
typedef struct kn_weight {
    kn_dtype dtype;
    const void *data;    /* backend [n][k] elements of dtype; KN_FP8_E4M3:
                            [n][kn_fp8_ld(k)] codes, rows zero-padded (fp8.h) */
    const float *scale;  /* KN_FP8_E4M3: backend 128x128 block dequant
                            multipliers [ceil(n/128)][kn_fp8_scale_ld(k)]
                            (HF weight_scale_inv); NULL for f32/bf16 */
} kn_weight;

/* The linear layer over a typed weight; x, bias and out stay fp32.
 *   KN_F32:  exactly kn_matmul.
 *   KN_BF16: out = bf16(x) w^T + bias, where bf16(x) rounds each input to
 *            the nearest bf16 (ties to even) and the products accumulate in
 *            fp32: what the tensor cores compute from bf16 operands. Both
 *            backends compute this same function (the CPU converts to fp32
 *            and calls sgemm; it exists for tests, not for speed).
 *   KN_FP8_E4M3: the block-scaled FP8 product of kernels/fp8.h: each row
 *            of x quantized in 1x128 blocks (s = amax/448, q = e4m3(x/s)),
 *            out = sum over k blocks of s_x * s_w * sum(q_x * q_w) + bias,
 *            fp32 accumulation (the CPU dequantizes both sides to fp32 and
 *            calls sgemm, which is that function up to fp32 rounding; CUDA
 *            runs cuBLASLt's block-scaled FP8 GEMM). Except: CUDA with at
 *            most 8 rows (decode) and TANDEM_CUDA_FP8_GEMV on (the
 *            default) computes out = x w_real^T + bias with x NOT
 *            quantized (w_real = code * block scale; fp32 sums within
 *            (29 + k/2048) * 2^-24 * sum|x w_real| of the exact value,
 *            kernels/cuda/gemv_fp8.cuh): more accurate than the function
 *            above, and so not bit-comparable with the CPU there. */
int kn_matmul_w(const kn_backend *be, float *out, const float *x, const kn_weight *w,
                const float *bias, int m, int n, int k);

/* One linear layer of kn_matmul_w_multi: out[m][n] = x w^T + bias. */
typedef struct kn_linear {
    float *out;
    const kn_weight *w;
    const float *bias; /* may be NULL */
    int n;
} kn_linear;
#define KN_LINEAR_MAX 4

/* Several linear layers over the same input x[m][k] (a layer's q, k and
 * v): each lin[i] exactly as kn_matmul_w(be, lin[i].out, x, lin[i].w,
 * lin[i].bias, m, lin[i].n, k), 1 <= n_lin <= KN_LINEAR_MAX, outputs not
 * overlapping x, the weights or each other. One call so that a backend can
 * run them together: CUDA's FP8 GEMV (the rows kn_matmul_w gives it)
 * takes all of them in one launch when every weight is FP8, which at
 * decode turns the small k/v projections (64 blocks each at GPT-OSS) from
 * launches of their own into blocks of q's. */
int kn_matmul_w_multi(const kn_backend *be, const kn_linear *lin, int n_lin, const float *x, int m, int k);

/* kn_matmul_w_multi over normalized rows: norm's add and RMSNorm
 * (kernels/rmsnorm.h: x += delta, xn = rmsnorm(x) * weight, both
 * written), then kn_matmul_w_multi(be, lin, n_lin, norm->xn, m, k): the
 * outputs equal kn_matmul_w_multi's of the xn written, bit for bit, and
 * that xn is kn_add_rmsnorm's within two float roundings (the fused CUDA
 * kernels sum the squares in another order and apply the weight before
 * 1/rms; the CPU is exactly the pair). On CUDA the
 * one-row FP8 GEMV (a layer's q/k/v at batch 1) does it in one launch:
 * each block normalizes the row from x and delta while its weight rows
 * arrive, and the last block to finish writes x += delta. */
int kn_matmul_w_multi_normed(const kn_backend *be, const kn_linear *lin, int n_lin,
                             const kn_norm_in *norm, int m, int k);
#endif
