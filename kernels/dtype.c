/* Host conversions between fp32 and bf16. */
#include "kernels/dtype.h"
#include <string.h>

size_t kn_dtype_size(kn_dtype dt)
{
    switch (dt) {
    case KN_F32: return 4;
    case KN_BF16: return 2;
    }
    return 0;
}

const char *kn_dtype_name(kn_dtype dt)
{
    switch (dt) {
    case KN_F32: return "f32";
    case KN_BF16: return "bf16";
    }
    return "?";
}

uint16_t kn_f32_to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)      /* NaN: keep it a (quiet) NaN */
        return (uint16_t)((u >> 16) | 0x0040u);
    /* Adding 0x7fff plus the lowest kept bit rounds half to even; an overflow
     * carries into the exponent, which is exactly rounding up to infinity. */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float kn_bf16_to_f32(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

void kn_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = kn_f32_to_bf16(src[i]);
}

void kn_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = kn_bf16_to_f32(src[i]);
}

float kn_round_bf16(float x)
{
    return kn_bf16_to_f32(kn_f32_to_bf16(x));
}
