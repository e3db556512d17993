/* Host conversions between fp32 and bf16. */
#include "kernels/dtype.h"
#include <math.h>
#include <string.h>

size_t kn_dtype_size(kn_dtype dt)
{
    switch (dt) {
    case KN_F32: return 4;
    case KN_BF16: return 2;
    case KN_FP8_E4M3: return 1;
    }
    return 0;
}

const char *kn_dtype_name(kn_dtype dt)
{
    switch (dt) {
    case KN_F32: return "f32";
    case KN_BF16: return "bf16";
    case KN_FP8_E4M3: return "fp8";
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

/* Works on the magnitude in double, where scaling by powers of two is exact,
 * so nearbyint (round half to even in the default rounding mode) sees the
 * exact quotient. */
uint8_t kn_f32_to_e4m3(float x)
{
    uint8_t sign = signbit(x) ? 0x80 : 0x00;
    if (isnan(x))
        return (uint8_t)(sign | 0x7f);
    double a = fabs((double)x);
    if (a >= 448.0)
        return (uint8_t)(sign | 0x7e);
    if (a < 0x1p-6) {
        /* subnormals are multiples of 2^-9; a count of 8 is exactly the
         * smallest normal, whose code is 0x08 */
        return (uint8_t)(sign | (uint8_t)nearbyint(a * 512.0));
    }
    int e;
    frexp(a, &e);              /* a = f * 2^e, f in [0.5, 1) */
    int exp = e - 1;           /* a = 1.m * 2^exp, exp in [-6, 8] */
    double mant = ldexp(a, -exp) - 1.0;
    /* a mantissa that rounds up to 8/8 carries into the exponent, which is
     * the next binade's code; a < 448 keeps the result at most 0x7e */
    int code = ((exp + 7) << 3) + (int)nearbyint(mant * 8.0);
    return (uint8_t)(sign | code);
}

float kn_e4m3_to_f32(uint8_t c)
{
    int exp = (c >> 3) & 15, mant = c & 7;
    float v;
    if (exp == 15 && mant == 7)
        v = NAN;
    else if (exp == 0)
        v = ldexpf((float)mant, -9);
    else
        v = ldexpf(1.0f + (float)mant / 8.0f, exp - 7);
    return (c & 0x80) ? -v : v;
}
