/* Internal to the CUDA backend: one tile of scores through the mask and the
 * online softmax, in mma.sync C-fragment layout (mma.cuh: g = lane / 4,
 * t = lane % 4; fragment n holds keys j0 + 8 n + 2 t + {0, 1} of rows g
 * (c0, c1) and g + 8 (c2, c3)). The bf16 prefill kernel (attention_mma.cu)
 * and the two tensor-core decode kernels (attention_decode_tile.cuh) run
 * these same steps per tile. Scores and the running max are in the log2
 * domain (q carries scale * log2 e, attention_setup.cuh). */
#ifndef TANDEM_KERNELS_CUDA_ATTENTION_TILE_SOFTMAX_CUH
#define TANDEM_KERNELS_CUDA_ATTENTION_TILE_SOFTMAX_CUH
#include <math.h>

/* sc = -inf where the key is not visible to the row at pos[0] (rows g) /
 * pos[1] (rows g + 8): at or past kend, after the row's position, or with
 * a window, window or more positions before it. */
template <int NT>
static __device__ __forceinline__ void kn_attn_tile_mask(float (&sc)[NT][4], const int (&pos)[2], int j0, int kend,
                                                         int window, int t)
{
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const int j = j0 + n * 8 + 2 * t + (c & 1), p = pos[c >> 1];
            if (!(j < kend && j <= p && (window <= 0 || j > p - window)))
                sc[n][c] = -INFINITY;
        }
}

/* The online-softmax update of rows g and g + 8 by one tile of NT 8-key
 * fragments: the max m and the sum l, the output's DN 8-dim fragments o
 * rescaled by exp2(m_old - m_new), and sc replaced by the probabilities
 * exp2(s - m_new) (the P of O += P V). The max crosses the four lanes
 * that share a row. */
template <int NT, int DN>
static __device__ __forceinline__ void kn_attn_tile_softmax(float (&sc)[NT][4], float (&m)[2], float (&l)[2],
                                                            float (&o)[DN][4])
{
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < NT; n++)
            mx = fmaxf(mx, fmaxf(sc[n][2 * r], sc[n][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[r], mx);
        /* A row with nothing visible yet (and no sink) keeps m = -inf: 0 is
         * the reference then, so every exp2 is of -inf, i.e. 0. */
        const float m_ref = m_new == -INFINITY ? 0.f : m_new;
        const float alpha = exp2f(m[r] - m_ref);
        float psum = 0.f;
#pragma unroll
        for (int n = 0; n < NT; n++) {
            sc[n][2 * r] = exp2f(sc[n][2 * r] - m_ref);
            sc[n][2 * r + 1] = exp2f(sc[n][2 * r + 1] - m_ref);
            psum += sc[n][2 * r] + sc[n][2 * r + 1];
        }
        m[r] = m_new;
        l[r] = l[r] * alpha + psum;
#pragma unroll
        for (int n = 0; n < DN; n++) {
            o[n][2 * r] *= alpha;
            o[n][2 * r + 1] *= alpha;
        }
    }
}
#endif
