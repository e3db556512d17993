/* The MXFP4 decoding of GPT-OSS experts (engine/mxfp4.h): rows decoded from
 * hand-made blocks against values worked out by hand. (An engine helper,
 * not an op: it moved here from the old test_op_fp8.c when the op tests
 * became the case table of tests/ops/.) */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include "engine/mxfp4.h"

static void mxfp4_decodes_hand_made_blocks(void **state)
{
    (void)state;
    const float fp4[16] = { 0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6 };
    for (int c = 0; c < 16; c++) {
        assert_true(tm_fp4_value((uint8_t)c) == fp4[c]);
        assert_true(!!signbit(tm_fp4_value((uint8_t)c)) == (c >= 8));
    }
    /* group 0, scale 2^0: bytes 0x21 0x9f, then 0x00...; group 1, scale
     * 2^1: byte 0x7e; group 2, scale 2^-2: byte 0x35; group 3, scale
     * 2^-127 (e8m0 0): byte 0x0f */
    uint8_t blocks[4 * 16] = { 0 }, scales[4] = { 127, 128, 125, 0 };
    blocks[0] = 0x21;
    blocks[1] = 0x9f;
    blocks[16] = 0x7e;
    blocks[32] = 0x35;
    blocks[48] = 0x0f;
    float got[128];
    tm_mxfp4_decode_row(got, blocks, scales, 4);
    float want[128] = { 0 };
    want[0] = 0.5f;     /* 0x21: low nibble 1 (0.5), high nibble 2 (1.0) */
    want[1] = 1.0f;
    want[2] = -6.0f;    /* 0x9f: low f (-6), high 9 (-0.5) */
    want[3] = -0.5f;
    want[32] = -8.0f;   /* 0x7e: low e (-4) * 2, high 7 (6) * 2 */
    want[33] = 12.0f;
    want[64] = 0.75f;   /* 0x35: low 5 (3) / 4, high 3 (1.5) / 4 */
    want[65] = 0.375f;
    want[96] = -6.0f * 0x1p-127f;   /* 0x0f: low f (-6) * 2^-127, high 0 */
    want[97] = 0.0f;
    for (int i = 0; i < 128; i++)
        if (got[i] != want[i])
            fail_msg("element %d: %a, want %a", i, (double)got[i], (double)want[i]);
    scales[1] = 255;    /* e8m0 NaN */
    tm_mxfp4_decode_row(got, blocks, scales, 4);
    assert_true(isnan(got[32]) && isnan(got[40]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mxfp4_decodes_hand_made_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
