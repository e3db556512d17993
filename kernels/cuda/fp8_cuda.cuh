/* Internal to the CUDA backend: FP8 block-scaled products (kernels/fp8.h).
 *
 *   quant_fp8.cu   kn_cuda_quant_fp8: fp32 activation rows -> e4m3 codes
 *                  and 1x128 block scales, in the layouts cuBLASLt reads
 *   gemm_fp8.cu    kn_cuda_gemm_fp8: cuBLASLt's block-scaled FP8 GEMM
 *                  (128x128 weight scales, 1x128 activation scales), bias
 *                  in the epilogue; kn_cuda_fp8_expert_gemms: the per-expert
 *                  GEMMs of kn_moe_experts
 * Other engineers' kernels (the MoE paths) call these; no argument checks
 * here beyond what cuBLASLt needs. */
#ifndef TANDEM_KERNELS_CUDA_FP8_CUDA_CUH
#define TANDEM_KERNELS_CUDA_FP8_CUDA_CUH
#include <cuda_fp8.h>
#include "kernels/cuda/cuda_common.cuh"
extern "C" {
#include "kernels/fp8.h"
}

/* cuBLASLt has block-scaled FP8 algorithms only when the activation rows
 * (the GEMM's outer dimension m) are a multiple of 16 (device probe: m = 64,
 * 128, 8192 run; m = 1, 5, 7, 130, 333 get no algorithm). So the quantized
 * activations are laid out in row segments padded to 16 rows: row r of
 * segment g (rows [r0, r1) of x) goes to padded row r + 15 * g, segment g
 * starts at padded row P = r0 + 15 * g and owns round_up(r1 - r0, 16) rows.
 * Codes: [padded rows][kn_fp8_ld(k)], pad rows zero. Scales, as
 * CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F reads them: outer-dimension
 * major, one run of round_up(rows, 16) floats per k block, the segment's
 * runs starting at float kn_cuda_fp8_seg_base(P, g, k) (16-byte aligned).
 * One segment (a plain linear layer) is the case g = 0, r0 = 0. */
#define KN_CUDA_FP8_M_ALIGN 16
static inline __host__ __device__ size_t kn_cuda_fp8_round_rows(size_t rows)
{
    return (rows + KN_CUDA_FP8_M_ALIGN - 1) / KN_CUDA_FP8_M_ALIGN * KN_CUDA_FP8_M_ALIGN;
}
static inline __host__ __device__ size_t kn_cuda_fp8_seg_row(size_t r0, size_t g)
{
    return r0 + (KN_CUDA_FP8_M_ALIGN - 1) * g;
}
static inline __host__ __device__ size_t kn_cuda_fp8_seg_base(size_t pad_r0, size_t g, size_t k)
{
    return (pad_r0 * ((k + KN_FP8_BLOCK - 1) / KN_FP8_BLOCK) + 3) / 4 * 4 + 4 * g;
}
/* One e4m3 code: round to nearest even, saturating (kn_fp8's rounding). */
static __device__ __forceinline__ unsigned char kn_cuda_fp8_to_e4m3(float v)
{
    return (unsigned char)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}
/* First segment whose end is past row r (upper bound over seg_offsets). */
static __device__ __forceinline__ int kn_cuda_fp8_segment_of(const int *seg_offsets, int n_segs, int r)
{
    int lo = 0, hi = n_segs - 1;
    while (lo < hi) {
        int mid = (lo + hi) >> 1;
        if (seg_offsets[mid + 1] <= r)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}
/* The 1x128 activation quantizer (kernels/fp8.h), one warp per (row,
 * 128-wide block): lane l holds the block's elements 4l..4l+3 in v, of
 * which the first `valid` are in the row (the rest are 0). Returns the
 * lane's 4 codes packed low byte first (zero codes past the row) and sets
 * *scale to the block's s = amax / 448 (1 for an all-zero or non-finite
 * amax, as on the CPU). The division is IEEE and the conversion rounds to
 * nearest even with saturation, so codes and scales are bit-identical to
 * kn_fp8_quantize_act_row. All 32 lanes must call it (warp shuffles). */
static __device__ __forceinline__ uint32_t kn_cuda_fp8_quant4(const float (&v)[4], int valid,
                                                              float *scale)
{
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 4; i++)
        amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float s = amax > 0.f && isfinite(amax) ? amax / KN_E4M3_MAX : 1.f;
    uint32_t packed = 0;
#pragma unroll
    for (int i = 0; i < 4; i++)
        packed |= (uint32_t)(i < valid ? kn_cuda_fp8_to_e4m3(v[i] / s) : 0) << (8 * i);
    *scale = s;
    return packed;
}
/* kn_cuda_fp8_quant4 on the elements c0..c0+3 of the k-wide fp32 row xr
 * (those past k read as 0). */
static __device__ __forceinline__ uint32_t kn_cuda_fp8_quant_row4(const float *xr, int c0, int k,
                                                                  float *scale)
{
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        v[i] = c0 + i < k ? xr[c0 + i] : 0.f;
    return kn_cuda_fp8_quant4(v, k - c0, scale);
}
/* Stores what kn_cuda_fp8_quant4 gave for block b of row r (this lane's
 * codes at column c0; lane 0 writes the scale) into q and s in the
 * segmented layout above, ld codes per row, k the row's width.
 * seg_offsets: device [n_segs + 1] row offsets, or NULL for one segment of
 * m rows. */
static __device__ __forceinline__ void kn_cuda_fp8_store_block(uint8_t *q, float *s, int ld, int k,
                                                               const int *seg_offsets, int n_segs,
                                                               int m, int r, int b, int c0,
                                                               uint32_t packed, float scale)
{
    int r0 = 0, rows = m, g = 0;
    if (seg_offsets) {
        g = kn_cuda_fp8_segment_of(seg_offsets, n_segs, r);
        r0 = seg_offsets[g];
        rows = seg_offsets[g + 1] - r0;
    }
    const size_t pr0 = kn_cuda_fp8_seg_row((size_t)r0, (size_t)g);
    *(uint32_t *)(q + (pr0 + (size_t)(r - r0)) * ld + c0) = packed;
    if ((threadIdx.x & 31) == 0)
        s[kn_cuda_fp8_seg_base(pr0, (size_t)g, (size_t)k) +
          (size_t)b * kn_cuda_fp8_round_rows((size_t)rows) + (r - r0)] = scale;
}

/* Padded rows, and floats of scales, for m rows in n_segs segments. */
static inline size_t kn_cuda_fp8_padded_rows(size_t m, size_t n_segs)
{
    return m + (KN_CUDA_FP8_M_ALIGN - 1) * n_segs;
}
static inline size_t kn_cuda_fp8_act_scale_count(size_t m, size_t k, size_t n_segs)
{
    return kn_cuda_fp8_padded_rows(m, n_segs) * kn_fp8_blocks(k) + 4 * (n_segs + 1);
}

/* Quantizes x [m][k] (fp32, rows k apart) into q and s (layout above; the
 * caller zeroes q and s first so pad rows are zero codes and finite
 * scales). seg_offsets: NULL for one segment (all m rows), else a device
 * array of n_segs + 1 ascending row offsets (seg_offsets[0] = 0,
 * seg_offsets[n_segs] = m). Queued on be's stream. */
int kn_cuda_quant_fp8(const kn_backend *be, const char *op, uint8_t *q, float *s,
                      const float *x, int m, int k, const int *seg_offsets, int n_segs);
/* kn_cuda_quant_fp8 where row r of the m rows is x row src_rows[r] /
 * src_div (src_rows a device array of m indices; NULL: row r): the MoE
 * experts quantize straight from the tokens through their permutation
 * (slot = token * k + route), so no gathered fp32 copy is written. */
int kn_cuda_quant_fp8_gather(const kn_backend *be, const char *op, uint8_t *q, float *s,
                             const float *x, int m, int k, const int *seg_offsets, int n_segs,
                             const int *src_rows, int src_div);

/* out[m_pad][n] = dequant(xq, xs) dequant(w, ws)^T (+ bias[n]) for one
 * segment of quantized activations with m_pad (a multiple of 16) rows, and
 * w/ws an FP8 weight [n][kn_fp8_ld(k)] with scales
 * [ceil(n/128)][kn_fp8_scale_ld(k)]. out fp32 (out_bf16 = 0) or bf16;
 * bias fp32 or NULL. */
int kn_cuda_gemm_fp8(const kn_backend *be, const char *op, void *out, int out_bf16,
                     const uint8_t *xq, const float *xs, const uint8_t *w, const float *ws,
                     const float *bias, int m_pad, int n, int k);

/* The FP8 linear layer: out[m][n] (fp32 or bf16) = quant(x) w^T + bias,
 * x fp32 [m][k]; temporaries from the backend's pool. */
int kn_cuda_fp8_linear(const kn_backend *be, const char *op, void *out, int out_bf16,
                       const float *x, const uint8_t *w, const float *ws, const float *bias,
                       int m, int n, int k);
/* Its product alone, on x already quantized (kn_cuda_fp8_quantize_rows):
 * layers that read the same x (q, k, v) quantize it once. */
int kn_cuda_fp8_linear_quantized(const kn_backend *be, const char *op, void *out, int out_bf16,
                                 const uint8_t *xq, const float *xs, const uint8_t *w, const float *ws,
                                 const float *bias, int m, int n, int k);

/* The per-expert FP8 products of kn_moe_experts: rows
 * [host_off[e], host_off[e+1]) of x (fp32 [rows][k], grouped by expert)
 * times expert e's weight (w + e * kn_fp8_data_bytes(n, k), scales
 * ws + e * kn_fp8_scale_count(n, k)), plus bias + e * n (bias may be NULL),
 * into out (fp32 [rows][n]). dev_off is host_off on the device. With
 * x_rows (device, one index per row) row r is x row x_rows[r] / x_rows_div
 * instead (kn_cuda_quant_fp8_gather). n_streams > 1 (side streams made by
 * kn_cuda_side_streams) spreads the GEMMs over that many side streams
 * between a fork and a join; 1 queues them on the backend's stream. */
int kn_cuda_fp8_expert_gemms(const kn_backend *be, const char *op, float *out, const float *x,
                             const int *x_rows, int x_rows_div,
                             const int *host_off, const int *dev_off, int n_experts,
                             const uint8_t *w, const float *ws, const float *bias,
                             int n, int k, int n_streams);

/* Quantized activations for m rows in n_segs segments (layout above),
 * zeroed on be's stream so pad rows are zero codes with finite scales;
 * both from the backend's temporary pool (kn_cuda_tmp_free). */
int kn_cuda_fp8_act_alloc(const kn_backend *be, const char *op, int m, int k, int n_segs,
                          uint8_t **xq, float **xs);
/* x (fp32 [m][k]) quantized into one segment of kn_cuda_fp8_act_alloc's
 * layout: the input kn_cuda_fp8_linear_quantized takes. The caller frees
 * *xq and *xs (kn_cuda_tmp_free) whatever this returns. */
int kn_cuda_fp8_quantize_rows(const kn_backend *be, const char *op, const float *x, int m, int k, uint8_t **xq,
                              float **xs);
/* kn_cuda_fp8_expert_gemms on activations already quantized into xq/xs
 * (kn_cuda_fp8_act_alloc for host_off[n_experts] rows of k in n_experts
 * segments, segment e = expert e's rows), e.g. by a fused kernel. */
int kn_cuda_fp8_expert_gemms_q(const kn_backend *be, const char *op, float *out, const uint8_t *xq,
                               const float *xs, const int *host_off, int n_experts,
                               const uint8_t *w, const float *ws, const float *bias, int n, int k,
                               int n_streams);

/* 1 when the latest kn_cuda_gemm_fp8 with a bias fused it into cuBLASLt's
 * epilogue, 0 when it fell back to the broadcast, -1 before any. */
int kn_cuda_fp8_last_bias_fused(const kn_backend *be);

/* The FP8 state behind a CUDA backend (cuBLASLt handle, algorithm cache),
 * made on first use; freed with the backend. */
struct kn_cuda_fp8;
void kn_cuda_fp8_free(struct kn_cuda_fp8 *f);

#endif
