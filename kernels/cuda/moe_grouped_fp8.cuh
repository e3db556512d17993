/* Internal to the CUDA backend: the grouped (decode) middle of
 * kn_moe_experts for FP8 weights (moe_grouped_fp8.cu). */
#ifndef TANDEM_KERNELS_CUDA_MOE_GROUPED_FP8_CUH
#define TANDEM_KERNELS_CUDA_MOE_GROUPED_FP8_CUH
#include "kernels/cuda/cuda_common.cuh"
extern "C" {
#include "kernels/moe.h"
}

/* 1 when the grouped FP8 kernels take these weights (16-byte aligned code
 * arrays, 4-byte aligned scales), else 0 (the per-expert path runs). */
int kn_cuda_moe_grouped_fp8_ok(const kn_moe_weights *w);

/* y[pos] = down_e(quant(act(gate_up_e quant(x[perm[pos] / k]) + b))) for
 * every routed position pos < offsets[n_local] (fp32 [n_tokens*k][dim], no
 * down bias), w->wdtype == KN_FP8_E4M3: the function of kernels/fp8.h's
 * product on both products, as kn_moe_experts_cpu computes it. perm and
 * offsets are moe_experts.cu's device grouping; rows_hint (slots per local
 * expert) picks the rows per pass. Three launches, no host sync;
 * temporaries from the backend's pool. */
int kn_cuda_moe_grouped_fp8(const kn_backend *be, const char *op, const kn_moe_weights *w, float *y,
                            const float *x, const int *perm, const int *offsets, int n_tokens, int k,
                            long long rows_hint);
#endif
