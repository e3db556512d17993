/* Element types of weight buffers. Activations are always fp32 between
 * ops; weights of the large products (linear layers and experts) may be
 * stored narrower, and the op that reads them says how it computes. */
#ifndef TANDEM_KERNELS_DTYPE_H
#define TANDEM_KERNELS_DTYPE_H
#include <stddef.h>
#include <stdint.h>

typedef enum {
    KN_F32 = 0,   /* IEEE binary32 */
    KN_BF16 = 1,  /* bfloat16: the top 16 bits of a binary32 */
    /* FP8 e4m3fn (OCP "E4M3", torch.float8_e4m3fn): 1 sign, 4 exponent bits
     * (bias 7), 3 mantissa bits; largest finite 448, no infinities, NaN is
     * S.1111.111 (0x7f / 0xff). Weights of this dtype always come with
     * 128x128 block scales (kernels/fp8.h). */
    KN_FP8_E4M3 = 2,
} kn_dtype;

/* Bytes per element, or 0 for an unknown dtype. */
size_t kn_dtype_size(kn_dtype dt);
/* "f32", "bf16", "fp8", or "?" for an unknown dtype. */
const char *kn_dtype_name(kn_dtype dt);

/* Round to nearest, ties to even (what the tensor cores' conversion does);
 * NaN stays NaN (quiet), infinities stay infinite. */
uint16_t kn_f32_to_bf16(float x);
float kn_bf16_to_f32(uint16_t b);
void kn_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n);
void kn_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n);
/* x rounded to the nearest bf16 value, as a float. */
float kn_round_bf16(float x);

/* e4m3fn encode: round to nearest, ties to even; magnitudes beyond 448
 * (infinities too) saturate to +-448 (what cvt.rn.satfinite does); NaN
 * stays NaN (0x7f with the input's sign). */
uint8_t kn_f32_to_e4m3(float x);
/* e4m3fn decode: exact (every e4m3 value is a float). */
float kn_e4m3_to_f32(uint8_t c);

#endif
