/* Activation quantization for the FP8 products (kernels/fp8.h): one pass
 * over fp32 rows writes e4m3 codes and the 1x128 block scales in the
 * layout cuBLASLt's VEC128 scale mode reads (fp8_cuda.cuh).
 *
 * One warp per (row, 128-wide k block): each lane loads 4 elements, the
 * warp reduces amax with shuffles, s = amax / 448 (1 for an all-zero or
 * non-finite amax, as on the CPU), and each lane writes its 4 codes as one
 * 32-bit store. Elements past k (the row padding up to a multiple of 128)
 * are written as zero codes, so the padded GEMM adds exact zeros. The
 * division x / s is IEEE (nvcc's default -prec-div=true) and the
 * conversion rounds to nearest even with saturation, so the codes and
 * scales are bit-identical to kn_fp8_quantize_act_row on the host. */
#include "kernels/cuda/fp8_cuda.cuh"

/* Row r reads x row src_rows[r] / src_div (the MoE permutation: slot ->
 * token), or row r when src_rows is NULL. */
__global__ void quant_fp8_kernel(uint8_t *q, float *s, const float *x, int m, int k, int kb,
                                 int ld, const int *seg_offsets, int n_segs, const int *src_rows,
                                 int src_div)
{
    const int lane = threadIdx.x & 31;
    const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
    const long long tasks = (long long)m * kb;
    for (long long t = blockIdx.x * (long long)(blockDim.x >> 5) + (threadIdx.x >> 5); t < tasks;
         t += warps) {
        const int r = (int)(t / kb), b = (int)(t - (long long)r * kb);
        const int c0 = b * KN_FP8_BLOCK + lane * 4;
        const float *xr = x + (size_t)(src_rows ? src_rows[r] / src_div : r) * k;
        float v[4];
        float amax = 0.f;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            v[i] = c0 + i < k ? xr[c0 + i] : 0.f;
            amax = fmaxf(amax, fabsf(v[i]));
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
        const float sc = amax > 0.f && isfinite(amax) ? amax / KN_E4M3_MAX : 1.f;
        uint32_t packed = 0;
#pragma unroll
        for (int i = 0; i < 4; i++)
            packed |= (uint32_t)(c0 + i < k ? kn_cuda_fp8_to_e4m3(v[i] / sc) : 0) << (8 * i);
        int r0 = 0, rows = m, g = 0;
        if (seg_offsets) {
            g = kn_cuda_fp8_segment_of(seg_offsets, n_segs, r);
            r0 = seg_offsets[g];
            rows = seg_offsets[g + 1] - r0;
        }
        const size_t pr0 = kn_cuda_fp8_seg_row((size_t)r0, (size_t)g);
        *(uint32_t *)(q + (pr0 + (size_t)(r - r0)) * ld + c0) = packed;
        if (lane == 0)
            s[kn_cuda_fp8_seg_base(pr0, (size_t)g, (size_t)k) +
              (size_t)b * kn_cuda_fp8_round_rows((size_t)rows) + (r - r0)] = sc;
    }
}

int kn_cuda_quant_fp8_gather(const kn_backend *be, const char *op, uint8_t *q, float *s,
                             const float *x, int m, int k, const int *seg_offsets, int n_segs,
                             const int *src_rows, int src_div)
{
    if (m == 0)
        return TN_OK;
    if (src_rows && src_div <= 0)
        return kn_arg_error(op, "fp8 quantization row divisor %d", src_div);
    const int kb = (int)kn_fp8_blocks((size_t)k), ld = (int)kn_fp8_ld((size_t)k);
    long long warps_needed = (long long)m * kb;
    long long blocks = (warps_needed + 7) / 8, cap = (long long)kn_cuda_ctx_of(be)->sm_count * 32;
    quant_fp8_kernel<<<(unsigned)(blocks < cap ? blocks : cap), 256, 0, kn_cuda_stream(be)>>>(
        q, s, x, m, k, kb, ld, seg_offsets, seg_offsets ? n_segs : 1, src_rows, src_div);
    KN_CUDA_LAUNCH_CHECK(op, "quant_fp8_kernel");
    return TN_OK;
}

int kn_cuda_quant_fp8(const kn_backend *be, const char *op, uint8_t *q, float *s,
                      const float *x, int m, int k, const int *seg_offsets, int n_segs)
{
    return kn_cuda_quant_fp8_gather(be, op, q, s, x, m, k, seg_offsets, n_segs, NULL, 1);
}
