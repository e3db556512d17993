/* Shared by the FP8 cases of ops_fp8.c and ops_moe.c. */
#ifndef TANDEM_TESTS_OPS_OPS_FP8_H
#define TANDEM_TESTS_OPS_OPS_FP8_H
#include <stdint.h>
#include "tests/ops/op_harness.h"

/* An [n][k] FP8 weight quantized on the host (case-owned host buffers):
 * blocky = 0: uniform in [-0.1, 0.1); 1: 128x128 blocks of magnitudes
 * 2^-3..2^3. */
void ops_fp8_weight(op_env *e, int n, int k, int blocky, uint8_t **data, float **scale);
#endif
