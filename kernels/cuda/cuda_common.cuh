/* Internal to the CUDA backend (the kernels/cuda .cu files): the state behind a
 * kn_backend of kind KN_BACKEND_CUDA, error helpers and shared launch
 * helpers. Not part of the op API.
 *
 * kn_backend's fields for CUDA:
 *   stream   the cudaStream_t every op queues its work on
 *   blas     a kn_cuda_ctx * (handles, memory pool, flags)
 *   scratch  cuBLAS workspace (scratch_bytes), owned by the backend
 * Ops receive `const kn_backend *`, so everything an op may change lives
 * behind the ctx pointer, never in the struct itself. */
#ifndef TANDEM_KERNELS_CUDA_COMMON_CUH
#define TANDEM_KERNELS_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/dtype.h"
#include "kernels/kn_check.h"
#include "common/status.h"
}

#define KN_CUDA_MAX_SIDE 4
#define KN_CUDA_DEFAULT_MOE_STREAMS 4
/* prefill sink attention on the wgmma + TMA kernel: mode 7 is mode 2's
 * kernel for head_dim 64 (GPT-OSS) and takes head_dim 128 too (Qwen3:
 * 8192 tokens 522 -> 287 ms in s5run3; docs/PERF.md) */
#define KN_CUDA_DEFAULT_ATTN_WGMMA 7
/* FP8 prefill experts on the warp-specialised grouped GEMM (TMA producer
 * warpgroup, two wgmma consumers; moe_gemm_fp8_ws.cu): one launch per
 * product over all experts, no host sync. On the H200 (s6run3/s6run4,
 * prefill of 8192 tokens) it ties the per-expert cuBLASLt GEMMs on
 * GPT-OSS-20B's 32 experts (125.1 vs 124.0 ms) and beats them on the
 * 128-expert models: GPT-OSS-120B 207.0 vs 218.2 ms, Qwen3-30B-A3B 180.5 vs
 * 221.0 ms (docs/PERF.md); mma.sync (1) and the first wgmma version (4)
 * were slower than per-expert (s5run3) */
#define KN_CUDA_DEFAULT_MOE_FP8_GEMM 7

struct kn_cuda_ctx {
    cudaStream_t stream;
    cublasHandle_t blas;
    /* the device's largest dynamic shared memory per block (opt-in) */
    int smem_optin;
    /* Temporary buffers of one op come from this pool, stream-ordered
     * (cudaMallocFromPoolAsync), so ops stay asynchronous and capturable. */
    cudaMemPool_t pool;
    int sm_count;
    /* TANDEM_CUDA_TF32=1 in the environment at init lets cuBLAS use TF32
     * tensor cores for fp32 products (relative error ~3e-4 instead of fp32's
     * ~1e-6). Off by default: results then match the CPU to fp32 rounding. */
    int allow_tf32;
    /* Attention precision: 0 = fp32 kernels (the default; matches the CPU to
     * fp32 rounding), 1 = bf16 tensor-core prefill kernel (attention_mma.cu,
     * relative error ~3e-3). Starts from TANDEM_CUDA_ATTN_BF16=1 at init;
     * kn_backend_set_attn_bf16 changes it. */
    int attn_bf16;
    /* MoE expert path (moe_experts.cu): -1 = by rows per expert (grouped
     * kernel when n_tokens*k <= moe_grouped_rows * n_local), 0 = per-expert
     * cuBLAS GEMMs, 1 = grouped kernel (bf16, FP8 weights). From
     * TANDEM_CUDA_MOE_GROUPED=0/1 and TANDEM_CUDA_MOE_GROUPED_ROWS=N at init;
     * kn_cuda_set_moe_grouped changes the mode. */
    int moe_grouped;
    int moe_grouped_rows;
    /* The grouped FP8 kernels stage their token rows in shared memory (1,
     * the default; TANDEM_CUDA_MOE_STAGED=0 at init or
     * kn_cuda_set_moe_staged for the unstaged kernels). */
    int moe_staged;
    /* The per-expert GEMMs spread over this many streams (1: the main one;
     * TANDEM_CUDA_MOE_STREAMS at init, kn_cuda_set_moe_streams), so small
     * experts' GEMMs run side by side instead of each leaving SMs idle. */
    int moe_streams;
    /* FP8 per-expert middle: 1 (the default) fuses bias + activation +
     * 1x128 e4m3 quantization of the down product's input into one kernel;
     * 0 runs the activation kernel (fp32 a) and the quantization apart.
     * Same codes and scales either way. From TANDEM_CUDA_FP8_FUSED_ACT=0 at
     * init; kn_cuda_set_moe_fp8_fused_act changes it. */
    int moe_fp8_fused_act;
    /* FP8 experts off the grouped (decode) middle: 1 runs the grouped
     * GEMMs of moe_gemm_fp8.cu (one launch per product, no host sync) on
     * mma.sync, 4 on wgmma, 7 on the warp-specialised TMA + wgmma kernel
     * (moe_gemm_fp8_ws.cu: KN_CUDA_DEFAULT_MOE_FP8_GEMM), 0 the
     * per-expert cuBLASLt GEMMs;
     * 2, 3 (mma.sync), 5, 6 (wgmma) and 8, 9 (warp-specialised) pair one
     * grouped GEMM with the decode kernel's other product (diagnostics,
     * moe_gemm_fp8.cuh). From TANDEM_CUDA_MOE_FP8_GEMM=0..9 at init;
     * kn_cuda_set_moe_fp8_gemm changes it. */
    int moe_fp8_gemm;
    /* 1: every temporary from kn_cuda_tmp_alloc is filled with 0xff bytes
     * (NaN floats, NaN e4m3 codes) before use, so a kernel that leaves part
     * of its output unwritten fails the checks instead of reading what an
     * earlier op left there (tests; TANDEM_CUDA_POISON_TMP=1 at init,
     * kn_cuda_set_poison_tmp). */
    int poison_tmp;
    /* FP8 GEMVs at decode (gemv_fp8.cuh): fp8_gemv 1 (the default) sends
     * kn_matmul_w with FP8 weights and up to KN_CUDA_FP8_GEMV_ROWS rows
     * to gemv_fp8.cu instead of quantization + cuBLASLt; moe_gemv 1 (the
     * default) sends kn_moe_experts with FP8 weights and up to
     * KN_CUDA_MOE_GEMV_MAX_TOKENS tokens to moe_gemv_fp8.cu. From
     * TANDEM_CUDA_FP8_GEMV=0/1 and TANDEM_CUDA_MOE_GEMV=0/1 at init;
     * kn_cuda_set_fp8_gemv / kn_cuda_set_moe_gemv change them. */
    int fp8_gemv;
    int moe_gemv;
    /* The skinny FP8 kernel's smallest row count (0: off;
     * kn_cuda_set_fp8_skinny, TANDEM_CUDA_FP8_SKINNY). */
    int fp8_skinny;
    /* Side streams, made on first use by kn_cuda_side_streams: each with its
     * own cuBLAS handle and workspace (concurrent cuBLAS calls must not
     * share one) and an event for joining back to the main stream. */
    int n_side;
    cudaStream_t side[KN_CUDA_MAX_SIDE];
    cublasHandle_t side_blas[KN_CUDA_MAX_SIDE];
    void *side_ws[KN_CUDA_MAX_SIDE];
    cudaEvent_t side_done[KN_CUDA_MAX_SIDE];
    cudaEvent_t side_fork;
    /* cuBLASLt state of the FP8 products (gemm_fp8.cu), made on first use. */
    struct kn_cuda_fp8 *fp8;
    /* cuBLASLt handle and plan cache of the FP8 and bf16 GEMMs
     * (lt_plan_cache.cuh), made on first use. */
    struct kn_lt_cache *lt_cache;
    /* bf16 products through cuBLASLt with cached plans (gemm_bf16_lt.cu;
     * 1, the default) or through cublasGemmEx, which searches an algorithm
     * on every new shape (0: TANDEM_CUDA_LT_CACHE=0 at init, or
     * kn_cuda_set_lt_cache; kept for comparison). */
    int bf16_lt;
    /* With attn_bf16: 0 = attention_mma.cu's kernel for prefill; 1 = the
     * Hopper wgmma kernel with cp.async loads, 2 = the wgmma kernel with
     * TMA loads, 3 = that with softmax / P V overlap, 4 = 3 with three
     * warpgroups, 5 = 2 with the overlap, 6 = 2 persistent (blocks loop
     * over query tiles) with head_dim 128 too, 7 = 2 with head_dim 128 too,
     * 8 = 6 with window layers' keys streamed, 9 = 5 with the warpgroups'
     * ping-pong (attention_wgmma.cu; page
     * sizes TMA cannot box fall back to 1) for the calls they take
     * (head_dim 64, 128 in modes 6-8; bf16 pools). Starts from
     * TANDEM_CUDA_ATTN_WGMMA=0..9 at init; kn_cuda_set_attn_wgmma changes it. attn_wgmma_launches[mode
     * - 1] counts each form's launches (tests check which ran);
     * tensor_map_encode is the driver's cuTensorMapEncodeTiled, looked up
     * on first use. */
    int attn_wgmma;
    long long attn_wgmma_launches[KN_CUDA_ATTN_WGMMA_MODES];
    /* Launches of the bf16 tensor-core decode kernel
     * (attention_decode_mma.cu), which runs with attn_bf16 over bf16 pools
     * for decode-sized batches (tests and benchmarks check which ran). */
    long long attn_decode_mma_launches;
    /* 1 (the default): decode calls over bf16 pools whose page size is a
     * multiple of 16 take attention_decode_tma.cu (TMA copies) instead of
     * attention_decode_mma.cu's cp.async kernel; 0 keeps the latter. From
     * TANDEM_CUDA_ATTN_DECODE_TMA=0 at init; kn_cuda_set_attn_decode_tma
     * changes it; attn_decode_tma_launches counts its launches. */
    int attn_decode_tma;
    long long attn_decode_tma_launches;
    void *tensor_map_encode;
    /* Decode-sized calls of the fused ops (kn_rope_kv_append, kn_moe_router)
     * run their one-kernel forms: 1 (the default), or 0 for the separate
     * kernels they replace. From TANDEM_CUDA_FUSED_DECODE=0/1 at init;
     * kn_cuda_set_fused_decode changes it. */
    int fused_decode;
    /* kn_moe_router's fused kernel: one arrival counter per token tile
     * (KN_CUDA_ROUTER_TILES), zeroed at init; the tile's last block resets
     * its counter, so they are zero again between launches (and between
     * graph replays). */
    unsigned *router_done;
    /* kn_matmul_w_multi_normed's one-row GEMV: its arrival counter (one
     * word after router_done's, same life), reset by its last block. */
    unsigned *gemv_done;
    /* The expert GEMV's down kernel (moe_gemv_fp8.cu): one arrival counter
     * per (row group, token) (KN_CUDA_MOE_DOWN_COUNTERS, after gemv_done's,
     * same life), reset by the group's last route block. */
    unsigned *moe_down_done;
};

/* Token tiles the fused router takes in one launch (moe_router.cu). */
#define KN_CUDA_ROUTER_TILE_ROWS 8
#define KN_CUDA_ROUTER_TILES 32
/* (row group, token) pairs the expert GEMV's down kernel counts: 8 output
 * columns a group, so 4 tokens of a model dimension up to 16384. */
#define KN_CUDA_MOE_DOWN_COUNTERS 8192
/* All the arrival counters, one allocation (router_done's). */
#define KN_CUDA_DONE_WORDS (KN_CUDA_ROUTER_TILES + 1 + KN_CUDA_MOE_DOWN_COUNTERS)

static inline kn_cuda_ctx *kn_cuda_ctx_of(const kn_backend *be)
{
    return (kn_cuda_ctx *)be->blas;
}

static inline cudaStream_t kn_cuda_stream(const kn_backend *be)
{
    return (cudaStream_t)be->stream;
}

/* "tandem: OP: WHAT failed: <cuda error string>"; returns TN_ERR_DEVICE. */
int kn_cuda_device_error(const char *op, const char *what, cudaError_t err);
int kn_cuda_blas_error(const char *op, const char *what, cublasStatus_t st);

/* Checks the backend an op was given: non-NULL, CUDA, initialised. */
int kn_cuda_check_backend(const char *op, const kn_backend *be);

/* Stream-ordered temporary device memory from the backend's pool. Freed
 * with kn_cuda_tmp_free on the same stream; NULL on failure (message
 * printed). */
void *kn_cuda_tmp_alloc(const kn_backend *be, const char *op, size_t bytes);
void kn_cuda_tmp_free(const kn_backend *be, void *ptr);

/* Launch check: the launch's own error (bad configuration, no kernel image
 * for this GPU) is reported by cudaGetLastError right after it. */
#define KN_CUDA_LAUNCH_CHECK(op, what)                                         \
    do {                                                                       \
        cudaError_t kn_err_ = cudaGetLastError();                              \
        if (kn_err_ != cudaSuccess)                                            \
            return kn_cuda_device_error((op), (what), kn_err_);                \
    } while (0)

#define KN_CUDA_TRY(op, call)                                                  \
    do {                                                                       \
        cudaError_t kn_err_ = (call);                                          \
        if (kn_err_ != cudaSuccess)                                            \
            return kn_cuda_device_error((op), #call, kn_err_);                 \
    } while (0)

/* out[m,n] = x[m,k] w[n,k]^T (+ bias[n]) on the backend's stream through
 * cuBLAS in fp32 (TF32 only when the ctx allows it). Shared by kn_matmul and
 * the MoE experts; no argument checks here. */
int kn_cuda_linear(const kn_backend *be, const char *op, float *out, const float *x,
                   const float *w, const float *bias, int m, int n, int k);
/* The same with x and w both of dtype dt (KN_F32 or KN_BF16; bf16 runs on
 * the tensor cores with fp32 accumulation); out and bias fp32. */
int kn_cuda_gemm(const kn_backend *be, const char *op, float *out, const void *x,
                 const void *w, kn_dtype dt, const float *bias, int m, int n, int k);
/* kn_cuda_gemm on another cuBLAS handle (a side stream's), on that
 * handle's stream. */
int kn_cuda_gemm_on(const kn_backend *be, cublasHandle_t blas, const char *op, float *out,
                    const void *x, const void *w, kn_dtype dt, const float *bias, int m, int n, int k);
/* out[m][n] (fp32) = x[m][k] w[n][k]^T + beta * out, x and w bf16, fp32
 * accumulation, through cuBLASLt with the plan cached per shape and row
 * bucket (gemm_bf16_lt.cu); on `stream` with workspace ws (ws_bytes),
 * which no concurrent GEMM may share. */
int kn_cuda_gemm_bf16_lt(const kn_backend *be, cudaStream_t stream, void *ws, size_t ws_bytes,
                         const char *op, float *out, const void *x, const void *w, float beta,
                         int m, int n, int k);
/* Makes side streams 0..n-1 (n <= KN_CUDA_MAX_SIDE) if they do not exist yet. */
int kn_cuda_side_streams(const kn_backend *be, const char *op, int n);
/* Side streams 0..n-1 wait for the backend stream's work so far (fork), or
 * the backend stream waits for theirs (join; moe_experts.cu). */
cudaError_t kn_cuda_side_fork(const kn_backend *be, int n_streams);
cudaError_t kn_cuda_side_join(const kn_backend *be, int n_streams);
/* dst[i] = bf16(src[i]) (round to nearest even), queued on the stream. */
int kn_cuda_to_bf16(const kn_backend *be, const char *op, void *dst, const float *src, size_t n);

static inline int kn_cuda_div_up(long long a, long long b)
{
    return (int)((a + b - 1) / b);
}

static inline bool kn_cuda_aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

#endif
