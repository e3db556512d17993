/* Internal to the CUDA backend: the dense FP8 product at a few to a
 * hundred rows (decode batches), gemm_fp8_skinny.cu.
 *
 * The function: kernels/fp8.h's product, as the CPU and the cuBLASLt path
 * compute it: out[r][n] = sum_k q(x)[r][k] * w_real[n][k] + bias[n], x
 * quantized per 1x128 block to e4m3 (q), w_real = code * block scale.
 * Accumulation: each 128-wide block of exact code products summed by the
 * tensor cores in fp32 (mma.sync m16n8k16, 8 chained), scaled by s_x *
 * s_w into an fp32 total per warp, the warps' totals added in warp order:
 * tests/ops checks |out - exact| <= 2^-15 sum_k |q(x) w_real| (+ the
 * bias's rounding) against the float64 value of the same function. */
#ifndef TANDEM_KERNELS_CUDA_GEMM_FP8_SKINNY_CUH
#define TANDEM_KERNELS_CUDA_GEMM_FP8_SKINNY_CUH
#include "kernels/cuda/gemv_fp8.cuh"

/* 1 when kn_matmul_w with FP8 weights at m rows takes the skinny kernel. */
int kn_cuda_fp8_skinny_takes(const kn_backend *be, int m);

/* mats[i].out = q(x) mats[i].w^T + mats[i].bias for every matrix (same K,
 * n_mats <= KN_CUDA_GEMV_MATS) in two launches on be's stream (the
 * quantization of x, then one kernel over all matrices), two temporaries
 * from the pool, no host sync (capturable). TN_ERR_UNSUPPORTED (nothing
 * queued) for unaligned weights (16 bytes; scales 4) or an empty matrix:
 * the caller then takes another path. */
int kn_cuda_fp8_skinny_multi(const kn_backend *be, const char *op, const kn_cuda_gemv_mat *mats, int n_mats,
                             const float *x, int m, int k);
#endif
