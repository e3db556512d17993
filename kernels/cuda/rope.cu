/* Rotary position embedding on the GPU, the CPU backend's arithmetic: the
 * angle is the float32 product pos * inv_freq[i] (as HF computes it), its
 * cos and sin are taken in double and scaled, and the rotation is done in
 * float with explicit round-to-nearest products (no fused multiply-add), so
 * both backends give the same bits.
 *
 * Positions live in device memory and are not validated here (the CPU
 * backend rejects negative ones); the formula is defined for any position
 * and no memory outside x is touched either way. */
#include <math.h>
#include "kernels/cuda/cuda_common.cuh"
extern "C" {
#include "kernels/rope.h"
#include "kernels/cuda/cuda_ops.h"
}

/* One thread per (token, frequency); it rotates that pair in every head, so
 * cos/sin are computed once per (token, frequency) as on the CPU. */
__global__ void rope_kernel(float *x, const int32_t *pos, int n_tokens, int n_heads, int head_dim,
                            const float *inv_freq, float attn_scale)
{
    int half = head_dim / 2;
    size_t total = (size_t)n_tokens * half;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        int t = (int)(idx / half), i = (int)(idx % half);
        float angle = __fmul_rn((float)pos[t], inv_freq[i]);
        double sd, cd;
        sincos((double)angle, &sd, &cd);
        float c = (float)(cd * attn_scale), s = (float)(sd * attn_scale);
        float *xt = x + (size_t)t * n_heads * head_dim;
        for (int h = 0; h < n_heads; h++) {
            float *xh = xt + (size_t)h * head_dim;
            float x0 = xh[i], x1 = xh[i + half];
            xh[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
            xh[i + half] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
        }
    }
}

extern "C" int kn_rope_cuda(const kn_backend *be, float *x, const int32_t *pos, int n_tokens,
                            int n_heads, int head_dim, const float *inv_freq, float attn_scale)
{
    static const char op[] = "kn_rope";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK)
        return rc;
    if (n_tokens == 0)
        return TN_OK;
    size_t total = (size_t)n_tokens * (head_dim / 2);
    size_t blocks = (total + 127) / 128;
    size_t max_blocks = (size_t)kn_cuda_ctx_of(be)->sm_count * 16;
    rope_kernel<<<(unsigned)(blocks < max_blocks ? blocks : max_blocks), 128, 0, kn_cuda_stream(be)>>>(
        x, pos, n_tokens, n_heads, head_dim, inv_freq, attn_scale);
    KN_CUDA_LAUNCH_CHECK(op, "rope_kernel");
    return TN_OK;
}
