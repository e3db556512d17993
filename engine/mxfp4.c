/* MXFP4 decoding (engine/mxfp4.h). */
#include "engine/mxfp4.h"
#include <math.h>

float tm_fp4_value(uint8_t code)
{
    /* e2m1: exponent bits 2..1 (bias 1), mantissa bit 0; exponent 0 is
     * the subnormal 0 / 0.5 */
    int exp = (code >> 1) & 3, man = code & 1;
    float v = exp == 0 ? 0.5f * (float)man : ldexpf(1.0f + 0.5f * (float)man, exp - 1);
    return (code & 8) ? -v : v;
}

void tm_mxfp4_decode_row(float *dst, const uint8_t *blocks, const uint8_t *scales,
                         size_t n_groups)
{
    for (size_t g = 0; g < n_groups; g++) {
        float scale = scales[g] == 255 ? NAN : ldexpf(1.0f, (int)scales[g] - 127);
        const uint8_t *b = blocks + g * 16;
        float *d = dst + g * 32;
        for (int j = 0; j < 16; j++) {
            d[2 * j] = tm_fp4_value(b[j] & 0x0f) * scale;
            d[2 * j + 1] = tm_fp4_value(b[j] >> 4) * scale;
        }
    }
}
