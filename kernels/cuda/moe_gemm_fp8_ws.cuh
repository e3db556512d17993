/* Internal to the CUDA backend: the warp-specialised Hopper form of the
 * grouped FP8 expert GEMMs (moe_gemm_fp8_ws.cu; kn_cuda_moe_gemm_fp8's
 * modes 7-9). */
#ifndef TANDEM_KERNELS_CUDA_MOE_GEMM_FP8_WS_CUH
#define TANDEM_KERNELS_CUDA_MOE_GEMM_FP8_WS_CUH
#include "kernels/cuda/cuda_common.cuh"
extern "C" {
#include "kernels/moe.h"
}

/* Rows (routed positions) per m-tile: kn_cuda_moe_gemm_fp8's tile_off
 * counts m-tiles of this many rows, as for its own kernels. */
#define KN_MOE_WS_BM 64

/* One product of kn_cuda_moe_gemm_fp8 on the warp-specialised kernel.
 * which 0: gate_up, from xq / xs (per token, kn_cuda_moe_fp8_quant_x's
 * layout; rows through perm) into aq / aqs ([pos][kn_fp8_ld(inter)] codes,
 * [pos][kn_fp8_blocks(inter)] scales); which 1: down, from aq / aqs into y
 * ([pos][dim] fp32). tile_off[0..n_local]: m-tiles of KN_MOE_WS_BM rows per
 * local expert (exclusive scan, on the device). n_slots = n_tokens * k rows
 * have room in aq / y. Returns a tn_status; the kernel's launch error,
 * or a refusal (a compiled register count the setmaxnreg split cannot
 * take), is reported with op. */
int kn_cuda_moe_gemm_fp8_ws(const kn_backend *be, const char *op, const kn_moe_weights *w, int which,
                            float *y, uint8_t *aq, float *aqs, const uint8_t *xq, const float *xs,
                            const int *perm, const int *offsets, const int *tile_off, int n_tokens, int k);
#endif
