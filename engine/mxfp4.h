/* GPT-OSS's MXFP4 expert weights as released (OCP microscaling FP4):
 * `*_blocks` U8 [..., rows, G, 16] holds 32 FP4 e2m1 values per group as
 * nibbles, the low nibble first (element 2j is byte j & 0xf, element 2j+1
 * is byte j >> 4); `*_scales` U8 [..., rows, G] holds one e8m0 exponent per
 * group (value 2^(s - 127)). A row of G groups is 32 * G values along the
 * product's input dimension (transformers' convert_moe_packed_tensors
 * builds [..., rows, 32 G] and transposes the last two dims to get the
 * bf16 checkpoint's x @ W layout). For gate_up_proj the rows interleave
 * gate and up (row 2i is gate i, row 2i + 1 is up i), as in the bf16
 * checkpoint's last dim. */
#ifndef TANDEM_ENGINE_MXFP4_H
#define TANDEM_ENGINE_MXFP4_H
#include <stddef.h>
#include <stdint.h>

/* The 16 e2m1 values by code: 0, 0.5, 1, 1.5, 2, 3, 4, 6, then negated. */
float tm_fp4_value(uint8_t code);
/* Decodes one row of n_groups groups: dst[32 * n_groups] (exact in f32
 * for scales 0..254; 255 is e8m0's NaN and decodes to NaN). */
void tm_mxfp4_decode_row(float *dst, const uint8_t *blocks, const uint8_t *scales,
                         size_t n_groups);

#endif
