/* FP8 block-scaled weights and activations: layout and host helpers.
 *
 * A KN_FP8_E4M3 weight matrix of logical shape [n][k] is stored as
 *   data   [n][kn_fp8_ld(k)] e4m3 codes: each row padded from k up to the
 *          next multiple of 128 (cuBLASLt's block-scaled FP8 GEMM works on
 *          whole 128-wide k blocks) with finite codes (zero when loaded;
 *          random for synthetic weights), which meet zero activation codes;
 *   scale  [kn_fp8_blocks(n)][kn_fp8_scale_ld(k)] fp32 dequant multipliers,
 *          one per 128x128 block: real w[i][j] = e4m3(data[i][j]) *
 *          scale[i/128][j/128] (HF's `weight_scale_inv`; the row of scales
 *          is padded to a multiple of 4 floats = 16 bytes, which cuBLASLt's
 *          128x128 scale layout needs; the padding is never read as a
 *          scale of real data).
 *
 * Activations are quantized per row in 1x128 blocks of k at the input of
 * each product: s = amax(|block|) / 448 (an all-zero block gets s = 1),
 * q = e4m3(x / s) (float division, round to nearest even, saturating).
 * The product is then
 *   out[i][j] = sum over k blocks b of s_x[i][b] * s_w[j/128][b] *
 *               sum_{k in b} e4m3(q_x[i][k]) * e4m3(q_w[j][k])  + bias[j]
 * accumulated in fp32: what both backends compute (kernels/matmul.h). */
#ifndef TANDEM_KERNELS_FP8_H
#define TANDEM_KERNELS_FP8_H
#include <stddef.h>
#include <stdint.h>

#define KN_FP8_BLOCK 128
#define KN_E4M3_MAX 448.0f

/* Blocks of 128 covering n: ceil(n / 128). */
static inline size_t kn_fp8_blocks(size_t n)
{
    return (n + KN_FP8_BLOCK - 1) / KN_FP8_BLOCK;
}
/* Bytes per stored row of a k-wide FP8 matrix: k rounded up to 128. */
static inline size_t kn_fp8_ld(size_t k)
{
    return kn_fp8_blocks(k) * KN_FP8_BLOCK;
}
/* Floats per row of a weight's block scales: ceil(k/128) rounded up to 4. */
static inline size_t kn_fp8_scale_ld(size_t k)
{
    return (kn_fp8_blocks(k) + 3) / 4 * 4;
}
/* Bytes of an [n][k] FP8 weight's data, and floats of its scales. */
static inline size_t kn_fp8_data_bytes(size_t n, size_t k)
{
    return n * kn_fp8_ld(k);
}
static inline size_t kn_fp8_scale_count(size_t n, size_t k)
{
    return kn_fp8_blocks(n) * kn_fp8_scale_ld(k);
}

/* Quantizes a row-major [n][k] fp32 matrix into the stored layout above:
 * per 128x128 block s = amax / 448 (1 for an all-zero block), codes
 * e4m3(w / s); row padding gets zero codes, scale padding 1. NaN weights
 * stay NaN codes. */
void kn_fp8_quantize_weight(uint8_t *data, float *scale, const float *w, size_t n, size_t k);
/* The real values of a stored FP8 weight as row-major [n][k] fp32
 * (code value times its block's scale, rounded to fp32). */
void kn_fp8_dequantize_weight(float *w, const uint8_t *data, const float *scale, size_t n,
                              size_t k);
/* One activation row's 1x128 quantization: q [kn_fp8_ld(k)] (zero codes
 * past k) and s [kn_fp8_blocks(k)]. */
void kn_fp8_quantize_act_row(uint8_t *q, float *s, const float *x, size_t k);
/* x rounded through that quantization: out[i] = e4m3(q[i]) * s (fp32;
 * out may be x),
 * the activation values the FP8 product actually multiplies. */
void kn_fp8_round_act_row(float *out, const float *x, size_t k);

/* One FP8 KV cache row (kernels/attention.h, kn_kv_pools): head_dim e4m3
 * codes of x / s, then s as 4 native bytes, s = amax / 448 (1 for an
 * all-zero or non-finite amax): head_dim + 4 bytes at row. What
 * kn_kv_append writes on both backends, bit for bit. */
void kn_fp8_kv_row_encode(uint8_t *row, const float *x, size_t head_dim);
/* The values a row holds: out[d] = e4m3(code[d]) * s (fp32 product). */
void kn_fp8_kv_row_decode(float *out, const uint8_t *row, size_t head_dim);

#endif
