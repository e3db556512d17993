/* Activation quantization for the FP8 products (kernels/fp8.h): one pass
 * over fp32 rows writes e4m3 codes and the 1x128 block scales in the
 * layout cuBLASLt's VEC128 scale mode reads (fp8_cuda.cuh).
 *
 * One warp per (row, 128-wide k block), each lane 4 elements, through
 * fp8_cuda.cuh's kn_cuda_fp8_quant_row4 (the block quantizer the MoE
 * kernels share) and kn_cuda_fp8_store_block. Elements past k (the row
 * padding up to a multiple of 128) are written as zero codes, so the
 * padded GEMM adds exact zeros. */
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
        float sc;
        const uint32_t packed = kn_cuda_fp8_quant_row4(xr, c0, k, &sc);
        kn_cuda_fp8_store_block(q, s, ld, k, seg_offsets, n_segs, m, r, b, c0, packed, sc);
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
