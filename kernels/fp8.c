/* Host side of the FP8 block-scaled format (kernels/fp8.h). */
#include "kernels/fp8.h"
#include <math.h>
#include <string.h>
#include "kernels/dtype.h"

/* The scale of a block whose largest magnitude is amax. fmaxf ignores NaN
 * operands, so a NaN element does not poison its block's scale. */
static float block_scale(float amax)
{
    return amax > 0.0f && isfinite(amax) ? amax / KN_E4M3_MAX : 1.0f;
}

void kn_fp8_quantize_weight(uint8_t *data, float *scale, const float *w, size_t n, size_t k)
{
    const size_t ld = kn_fp8_ld(k), sld = kn_fp8_scale_ld(k);
    const size_t nb = kn_fp8_blocks(n), kb = kn_fp8_blocks(k);
    memset(data, 0, n * ld);
    for (size_t bi = 0; bi < nb; bi++) {
        float *srow = scale + bi * sld;
        for (size_t j = kb; j < sld; j++)
            srow[j] = 1.0f;
        size_t r0 = bi * KN_FP8_BLOCK, r1 = r0 + KN_FP8_BLOCK < n ? r0 + KN_FP8_BLOCK : n;
        for (size_t bj = 0; bj < kb; bj++) {
            size_t c0 = bj * KN_FP8_BLOCK, c1 = c0 + KN_FP8_BLOCK < k ? c0 + KN_FP8_BLOCK : k;
            float amax = 0.0f;
            for (size_t r = r0; r < r1; r++)
                for (size_t c = c0; c < c1; c++)
                    amax = fmaxf(amax, fabsf(w[r * k + c]));
            float s = block_scale(amax);
            srow[bj] = s;
            for (size_t r = r0; r < r1; r++)
                for (size_t c = c0; c < c1; c++)
                    data[r * ld + c] = kn_f32_to_e4m3(w[r * k + c] / s);
        }
    }
}

void kn_fp8_dequantize_weight(float *w, const uint8_t *data, const float *scale, size_t n,
                              size_t k)
{
    const size_t ld = kn_fp8_ld(k), sld = kn_fp8_scale_ld(k);
    float lut[256];
    for (int c = 0; c < 256; c++)
        lut[c] = kn_e4m3_to_f32((uint8_t)c);
    for (size_t r = 0; r < n; r++) {
        const float *srow = scale + (r / KN_FP8_BLOCK) * sld;
        for (size_t c = 0; c < k; c++)
            w[r * k + c] = lut[data[r * ld + c]] * srow[c / KN_FP8_BLOCK];
    }
}

void kn_fp8_quantize_act_row(uint8_t *q, float *s, const float *x, size_t k)
{
    const size_t kb = kn_fp8_blocks(k);
    memset(q, 0, kn_fp8_ld(k));
    for (size_t b = 0; b < kb; b++) {
        size_t c0 = b * KN_FP8_BLOCK, c1 = c0 + KN_FP8_BLOCK < k ? c0 + KN_FP8_BLOCK : k;
        float amax = 0.0f;
        for (size_t c = c0; c < c1; c++)
            amax = fmaxf(amax, fabsf(x[c]));
        s[b] = block_scale(amax);
        for (size_t c = c0; c < c1; c++)
            q[c] = kn_f32_to_e4m3(x[c] / s[b]);
    }
}

void kn_fp8_round_act_row(float *out, const float *x, size_t k)
{
    const size_t kb = kn_fp8_blocks(k);
    for (size_t b = 0; b < kb; b++) {
        size_t c0 = b * KN_FP8_BLOCK, c1 = c0 + KN_FP8_BLOCK < k ? c0 + KN_FP8_BLOCK : k;
        float amax = 0.0f;
        for (size_t c = c0; c < c1; c++)
            amax = fmaxf(amax, fabsf(x[c]));
        float s = block_scale(amax);
        for (size_t c = c0; c < c1; c++)
            out[c] = kn_e4m3_to_f32(kn_f32_to_e4m3(x[c] / s)) * s;
    }
}

void kn_fp8_kv_row_encode(uint8_t *row, const float *x, size_t head_dim)
{
    float amax = 0.0f;
    for (size_t d = 0; d < head_dim; d++)
        amax = fmaxf(amax, fabsf(x[d]));
    const float s = block_scale(amax);
    for (size_t d = 0; d < head_dim; d++)
        row[d] = kn_f32_to_e4m3(x[d] / s);
    memcpy(row + head_dim, &s, sizeof s);
}

void kn_fp8_kv_row_decode(float *out, const uint8_t *row, size_t head_dim)
{
    float s;
    memcpy(&s, row + head_dim, sizeof s);
    for (size_t d = 0; d < head_dim; d++)
        out[d] = kn_e4m3_to_f32(row[d]) * s;
}
