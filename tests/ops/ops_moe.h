/* Shared by the MoE cases of ops_moe.c and ops_moe_paths.c. */
#ifndef TANDEM_TESTS_OPS_OPS_MOE_H
#define TANDEM_TESTS_OPS_OPS_MOE_H
#include <stdint.h>
#include "kernels/moe.h"
#include "tests/ops/op_harness.h"

/* k distinct experts of [0, n_global) per token, with random positive
 * weights in [0.05, 1.05); skew sends every token's first route to expert
 * `first` (an expert with many more rows than the others). */
void ops_moe_routes(op_env *e, int32_t *idx, float *rw, int n_tok, int k, int n_global, int skew,
                    int first);
/* A backend copy of host expert weights hw: per expert gu_bytes of gate_up
 * and dn_bytes of down (plus biases and, for FP8, block scales). */
kn_moe_weights ops_moe_upload(op_env *e, const kn_moe_weights *hw, size_t gu_bytes, size_t dn_bytes);
#endif
