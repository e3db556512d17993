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

/* Step 1 of kn_cuda_moe_grouped_fp8 on its own: x [n_tokens][dim] ->
 * e4m3 codes xq [n_tokens][kn_fp8_ld(dim)] (zero codes in the padding) and
 * 1x128 scales xs [n_tokens][kn_fp8_blocks(dim)], per token. The grouped
 * GEMMs (moe_gemm_fp8.cu) read the same. */
cudaError_t kn_cuda_moe_fp8_quant_x(const kn_backend *be, uint8_t *xq, float *xs, const float *x, int n_tokens,
                                    int dim);
/* One product of kn_cuda_moe_grouped_fp8 on its own (which 0: gate_up
 * from xq/xs into aq/as, [n_slots][kn_fp8_ld(inter)] codes and
 * [n_slots][kn_fp8_blocks(inter)] scales by position; 1: down from aq/as
 * into y), for the grouped GEMMs' diagnostic modes. */
cudaError_t kn_cuda_moe_fp8_decode_product(const kn_backend *be, const kn_moe_weights *w, int which, float *y,
                                           uint8_t *aq, float *as, const uint8_t *xq, const float *xs,
                                           const int *perm, const int *offsets, int k);
#endif
