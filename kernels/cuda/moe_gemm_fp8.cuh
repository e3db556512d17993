/* Internal to the CUDA backend: the grouped FP8 expert GEMMs, the prefill
 * middle of kn_moe_experts for FP8 weights (moe_gemm_fp8.cu). */
#ifndef TANDEM_KERNELS_CUDA_MOE_GEMM_FP8_CUH
#define TANDEM_KERNELS_CUDA_MOE_GEMM_FP8_CUH
#include "kernels/cuda/cuda_common.cuh"
extern "C" {
#include "kernels/moe.h"
}

/* What kn_cuda_moe_gemm_fp8 runs (kn_cuda_ctx.moe_fp8_gemm; the
 * diagnostic modes mix its products with the decode grouped kernels of
 * moe_grouped_fp8.cu, which read and write the same [pos][ld] activation
 * codes and [pos][blocks] scales, so a mismatch on the GPU names the
 * product that is wrong). */
enum {
    KN_MOE_FP8_GEMM_OFF = 0,     /* the per-expert cuBLASLt GEMMs (moe_experts.cu) */
    KN_MOE_FP8_GEMM_ON = 1,      /* both products grouped GEMMs, mma.sync */
    KN_MOE_FP8_GEMM_GATE_UP = 2, /* gate_up grouped GEMM (mma.sync), down the decode kernel */
    KN_MOE_FP8_GEMM_DOWN = 3,    /* gate_up the decode kernel, down grouped GEMM (mma.sync) */
    KN_MOE_FP8_GEMM_WGMMA = 4,   /* both products grouped GEMMs on Hopper's wgmma */
    KN_MOE_FP8_GEMM_WGMMA_GATE_UP = 5,
    KN_MOE_FP8_GEMM_WGMMA_DOWN = 6,
    KN_MOE_FP8_GEMM_WS = 7,      /* both products on the warp-specialised TMA + wgmma kernel (moe_gemm_fp8_ws.cu; the default) */
    KN_MOE_FP8_GEMM_WS_GATE_UP = 8,
    KN_MOE_FP8_GEMM_WS_DOWN = 9,
    KN_MOE_FP8_GEMM_MODES = 10
};

/* y[pos] = down_e(quant(act(gate_up_e quant(x[perm[pos] / k]) + b))) for
 * every routed position pos < offsets[n_local] (fp32 [n_tokens*k][dim], no
 * down bias; kn_cuda_moe_grouped_fp8's function), w->wdtype == KN_FP8_E4M3
 * with kn_cuda_moe_grouped_fp8_ok(w). perm and offsets are moe_experts.cu's
 * device grouping. One launch per product over all experts' tiles, no host
 * sync; temporaries from the backend's pool. mode: one of the enum above
 * but _OFF. */
int kn_cuda_moe_gemm_fp8(const kn_backend *be, const char *op, const kn_moe_weights *w, float *y,
                         const float *x, const int *perm, const int *offsets, int n_tokens, int k, int mode);
#endif
