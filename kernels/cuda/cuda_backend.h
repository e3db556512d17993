/* The CUDA backend's public settings: switches of the CUDA-only paths that
 * the engine, benchmarks and tests may call on a backend of kind
 * KN_BACKEND_CUDA (implemented in kernels/cuda/, linked only when the build
 * defines TANDEM_CUDA). The backend's internals (lifetime, buffers, events,
 * the per-op kn_OP_cuda implementations) are in kernels/cuda/cuda_ops.h. */
#ifndef TANDEM_KERNELS_CUDA_CUDA_BACKEND_H
#define TANDEM_KERNELS_CUDA_CUDA_BACKEND_H
#include <stddef.h>
#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The MoE expert path (kernels/cuda/moe_experts.cu), for benchmarks and
 * tests: -1 picks by rows per expert (the default; the grouped kernel when
 * n_tokens*k <= TANDEM_CUDA_MOE_GROUPED_ROWS (default
 * KN_CUDA_MOE_GROUPED_ROWS) times the local experts), 0 forces the
 * per-expert cuBLAS GEMMs, 1 the grouped kernel (bf16 and FP8 weights; fp32
 * weights always take cuBLAS). Starts from TANDEM_CUDA_MOE_GROUPED=0/1 at init. */
#define KN_CUDA_MOE_GROUPED_ROWS 32
void kn_cuda_set_moe_grouped(const kn_backend *be, int mode);
int kn_cuda_moe_grouped(const kn_backend *be);
/* The grouped FP8 expert kernels (moe_grouped_fp8.cu): 1 (the default)
 * stages each pass's token rows in shared memory where they fit, 0 lets
 * every warp read them from global memory (the earlier kernels; the same
 * results bit for bit). Starts from TANDEM_CUDA_MOE_STAGED=0/1 at init. */
void kn_cuda_set_moe_staged(const kn_backend *be, int on);
/* The per-expert MoE path's GEMMs spread over n streams (1..4; 1 keeps
 * them on the backend's stream; the default is 4). Starts from
 * TANDEM_CUDA_MOE_STREAMS=n at init (n = 1 turns the side streams off). */
void kn_cuda_set_moe_streams(const kn_backend *be, int n);
/* The per-expert MoE path with FP8 weights: 1 (the default) computes the
 * activation and its e4m3 quantization for the down product in one kernel,
 * 0 in two (an fp32 activation pass between them); both give the same
 * codes, scales and outputs. Starts from TANDEM_CUDA_FP8_FUSED_ACT=0/1 at
 * init. */
void kn_cuda_set_moe_fp8_fused_act(const kn_backend *be, int on);
/* FP8 experts with more rows than the grouped decode kernels take (the
 * prefill): 0 (the default, faster on the H200 so far: docs/PERF.md) the
 * per-expert cuBLASLt GEMMs; 1 the grouped FP8 GEMMs (one launch per
 * product over all experts' tiles, kernels/cuda/moe_gemm_fp8.cu); 4 the same grouped
 * GEMMs on Hopper's wgmma (sm_90a) instead of mma.sync (sm_89+); 2 / 5
 * run gate_up as the grouped GEMM (mma.sync / wgmma) and down with the
 * decode kernel, 3 / 6 the reverse (to tell which product is wrong); 7
 * the grouped GEMMs on the warp-specialised Hopper kernel (a TMA producer
 * warpgroup, two wgmma consumer warpgroups; moe_gemm_fp8_ws.cu), 8 / 9
 * its gate_up / down paired with the decode kernel's other product.
 * Starts from TANDEM_CUDA_MOE_FP8_GEMM=0..9 at init. */
void kn_cuda_set_moe_fp8_gemm(const kn_backend *be, int mode);
int kn_cuda_moe_fp8_gemm(const kn_backend *be);
/* Decode-sized calls of the fused ops: 1 (the default) runs
 * kn_rope_kv_append (per-head q/k norm + RoPE + KV append) and
 * kn_moe_router (router product + top-k + softmax) as one kernel each, 0 as
 * the separate kernels they replace (kn_rmsnorm, kn_rope, kn_kv_append;
 * kn_matmul, kn_moe_route), for comparison. Prefill-sized calls always take
 * the separate kernels. Starts from TANDEM_CUDA_FUSED_DECODE=0/1 at init.
 * Decode graphs recorded before a change keep the kernels they recorded. */
void kn_cuda_set_fused_decode(const kn_backend *be, int on);
int kn_cuda_fused_decode(const kn_backend *be);
/* FP8 weights at decode (kernels/cuda/gemv_fp8.cuh): 1 (the default)
 * lets kn_matmul_w with up to KN_CUDA_FP8_GEMV_ROWS rows run as a GEMV that
 * reads x as fp32 (no activation quantization: more accurate than the
 * skinny and cuBLASLt paths); 0 turns it off. Starts from
 * TANDEM_CUDA_FP8_GEMV=0/1 at init. The row bound: bench_ops (s8run8) read
 * GPT-OSS's q at 41% of the copy ceiling at one row, 21% at 4, 8% at 8. */
#define KN_CUDA_FP8_GEMV_ROWS 8
void kn_cuda_set_fp8_gemv(const kn_backend *be, int on);
int kn_cuda_fp8_gemv_on(const kn_backend *be);
/* FP8 weights at decode batches (kernels/cuda/gemm_fp8_skinny.cuh):
 * kn_matmul_w with from_rows <= m <= KN_CUDA_FP8_SKINNY_ROWS rows runs the
 * skinny tensor-core kernel (x quantized per 1x128 block: the CPU's
 * function) ahead of the GEMV; from_rows 0 turns it off. The default is 2:
 * one row keeps the GEMV, which reads x as fp32 and folds the norm in.
 * Past KN_CUDA_FP8_SKINNY_ROWS cuBLASLt's GEMM, which keeps each weight
 * tile in shared memory for all its rows: bench_ops on an H100 (s11run1)
 * had GPT-OSS's q at 13.4 us skinny vs 18.2 cuBLASLt at 32 rows and 31.8
 * vs 20.4 at 128, the skinny cost growing ~0.19 us a row, so they tie near
 * 64. Starts from TANDEM_CUDA_FP8_SKINNY=N at init (0: off). */
#define KN_CUDA_FP8_SKINNY_ROWS 64
void kn_cuda_set_fp8_skinny(const kn_backend *be, int from_rows);
int kn_cuda_fp8_skinny(const kn_backend *be);
#define KN_CUDA_MOE_GEMV_TOKENS 4
/* The same for kn_moe_experts with FP8 weights and up to
 * KN_CUDA_MOE_GEMV_TOKENS tokens: 1 (the
 * default) runs the expert GEMV kernels (kernels/cuda/moe_gemv_fp8.cu: fp32
 * activations, no quantization), 0 the paths above. Starts from
 * TANDEM_CUDA_MOE_GEMV=0/1 at init. */
void kn_cuda_set_moe_gemv(const kn_backend *be, int on);
int kn_cuda_moe_gemv_on(const kn_backend *be);
/* Tests: 1 fills every temporary buffer of the CUDA ops with 0xff bytes
 * (NaN) when it is allocated, so output a kernel forgets to write shows as
 * NaN rather than as a stale earlier result. Off by default;
 * TANDEM_CUDA_POISON_TMP=1 at init. */
void kn_cuda_set_poison_tmp(const kn_backend *be, int on);
/* bf16 GEMMs (kn_matmul_w, the per-expert MoE products): 1 (the default)
 * runs them through cuBLASLt with plans cached per (n, k, row
 * bucket, four per octave); 0 through cublasGemmEx, which searches an algorithm for every
 * new (m, n, k) on the host. Starts from TANDEM_CUDA_LT_CACHE=0/1 at init;
 * for benchmarks and tests. */
void kn_cuda_set_lt_cache(const kn_backend *be, int on);
/* Prefill attention on Hopper's warpgroup tensor cores
 * (kernels/cuda/attention_wgmma.cu): with the bf16 attention precision on
 * (kn_backend_set_attn_bf16), mode 1 sends the calls it takes (head_dim
 * 64, bf16 KV pools, prefill-sized) to the wgmma kernel with cp.async
 * loads, mode 2 to the wgmma kernel with TMA loads and a producer warp,
 * mode 3 to that kernel with each tile's softmax overlapping the previous
 * tile's P V, mode 4 to mode 3 with three warpgroups of query rows, mode
 * 5 to mode 2's producer warp with mode 3's overlap, mode 6 to mode 2's
 * kernel made persistent (a block per SM looping over query tiles: a
 * window layer's run of tiles, or causal tiles longest first) with the
 * P V chunks and S halves no row sees skipped, mode 7 to mode 2's kernel,
 * mode 8 to mode 6 with sliding-window layers' keys streamed once per
 * block through the ring (windows up to about 250 keys; longer ones take
 * mode 6's kernel), mode 9 to mode 5 with FlashAttention-3's ping-pong
 * between the two warpgroups; modes 6-8 also take head_dim 128 (Qwen3),
 * the others 64 only (modes 2-9: page sizes 8..128 dividing 128; other
 * page sizes take mode 1's kernel, or for head_dim 128 the mma.sync one);
 * 0 keeps the mma.sync kernel. Mode 7 is the default
 * (KN_CUDA_DEFAULT_ATTN_WGMMA). Needs an sm_90 GPU. Starts from
 * TANDEM_CUDA_ATTN_WGMMA=0..9 at init; for benchmarks and tests.
 * kn_cuda_attn_wgmma_launches counts one
 * mode's kernel launches on this backend. */
#define KN_CUDA_ATTN_WGMMA_MODES 9
void kn_cuda_set_attn_wgmma(const kn_backend *be, int mode);
int kn_cuda_attn_wgmma(const kn_backend *be);
long long kn_cuda_attn_wgmma_launches(const kn_backend *be, int mode);
/* Launches of the bf16 tensor-core decode attention
 * (attention_decode_mma.cu: bf16 precision, bf16 pools, at most 16 query
 * vectors per sequence, head_dim 64 or 128) on this backend. */
long long kn_cuda_attn_decode_mma_launches(const kn_backend *be);
/* The same decode attention over bf16 pools with TMA copies
 * (attention_decode_tma.cu; page sizes that are multiples of 16): 1, the
 * default, sends the bf16-pool calls there, 0 keeps the cp.async kernel.
 * Starts from TANDEM_CUDA_ATTN_DECODE_TMA=0/1 at init; its launches are
 * counted like the other's. */
void kn_cuda_set_attn_decode_tma(const kn_backend *be, int on);
long long kn_cuda_attn_decode_tma_launches(const kn_backend *be);
/* cuBLASLt heuristic queries the backend has made so far (FP8 and bf16
 * plans together): flat once the plan cache is warm. */
long long kn_cuda_lt_searches(const kn_backend *be);

#ifdef __cplusplus
}
#endif
#endif
