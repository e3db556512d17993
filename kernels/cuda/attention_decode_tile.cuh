/* Internal to the CUDA backend: what the two tensor-core decode attention
 * kernels share -- attention_decode_mma.cu (bf16 or FP8 pools, cp.async
 * copies) and attention_decode_tma.cu (bf16 pools, TMA copies). Both give
 * a block one (sequence, KV head, key split) and DEC_WARPS warps, each warp
 * walking its own tiles of keys with its own online-softmax state held in
 * mma.sync m16n8k16 fragments (mma.cuh: g = lane / 4, t = lane % 4; query
 * vector rows g and g + 8 of the GQA group's 16-row A operand), and merge
 * the warp states at the end. The helpers below are those parts: the
 * split's key range, the Q fragments, the per-tile mask and softmax update,
 * and the merge into the output or the split's partial state (read
 * attention_decode_mma.cu's header for the whole design). */
#ifndef TANDEM_KERNELS_CUDA_ATTENTION_DECODE_TILE_CUH
#define TANDEM_KERNELS_CUDA_ATTENTION_DECODE_TILE_CUH
#include <math.h>
#include "kernels/cuda/attention_decode_mma.cuh"
#include "kernels/cuda/attention_setup.cuh"
#include "kernels/cuda/attention_tile_softmax.cuh"
#include "kernels/cuda/mma.cuh"
extern "C" {
#include "kernels/attention.h"
}

const int DEC_WARPS = 4, DEC_THREADS = DEC_WARPS * 32, DEC_ROWS = 16;
/* Each split gets at least this many keys: fewer would spend more on the
 * partial states and the combine than on the keys. */
const int DEC_MIN_SPLIT_KEYS = 256;

struct DecArgs {
    float *out;
    const float *q;
    const void *k_pool, *v_pool; /* bf16, or FP8 rows of D codes + fp32 scale */
    long long pool_bytes;         /* FP8: bytes of each pool (n_pages pages) */
    const int32_t *q_offset, *kv_len, *page_table;
    const float *sinks;
    int max_pages, n_pages, n_heads, n_kv_heads, group, page_size, window;
    float scale_log2;
    int n_splits;
    float *part_o;  /* [n_rows][n_heads][n_splits][D] (n_splits > 1) */
    float *part_ml; /* [n_rows][n_heads][n_splits][2]: m (log2 domain), l */
};

/* The keys [*kbeg, *kend) split `split` of the block's (sequence, KV head)
 * visits and *tile0, where its first NK-key tile starts: the vectors'
 * visible range, its tiles counted from *tile0 of the whole range (kbeg
 * rounded down to a multiple of ALIGN: 1, or NK when tiles must not cross
 * a page), cut into n_splits runs of whole tiles. Empty when nvec is 0. */
template <int NK, int ALIGN>
static __device__ __forceinline__ void dec_split_range(const DecArgs &a, int first_pos, int nvec, int split,
                                                       int *kbeg, int *kend, int *tile0)
{
    *kbeg = *kend = *tile0 = 0;
    if (nvec <= 0)
        return;
    kn_attn_key_range(a, first_pos, 0, nvec, nvec, kbeg, kend);
    const int base = *kbeg - *kbeg % ALIGN;
    const int tiles = (*kend - base + NK - 1) / NK;
    const int per = (tiles + a.n_splits - 1) / a.n_splits;
    *tile0 = base + split * per * NK;
    *kend = min(*kend, *tile0 + per * NK);
    *kbeg = max(*kbeg, *tile0);
}

/* Q (times scale * log2 e) as bf16 A fragments of KS = D / 16 k-steps,
 * query vector rows g and g + 8 (zeros past nvec). Dim d of k-step kk,
 * half h (0: a0 / a1, the b0 dims; 1: a2 / a3, b1's) is DIM(t, 2 kk + h):
 * the kernel's K fragments must use the same map. */
template <int D, class DimMap>
static __device__ __forceinline__ void dec_load_q(const DecArgs &a, uint32_t (&qa)[D / 16][4], int q0, int kvh,
                                                  int nvec, int g, int t, DimMap dim)
{
    const float *qr[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int v = g + 8 * i;
        qr[i] = v < nvec ? a.q + ((size_t)(q0 + v / a.group) * a.n_heads + kvh * a.group + v % a.group) * D : NULL;
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int d = dim(t, 2 * kk + h);
#pragma unroll
            for (int i = 0; i < 2; i++) {
                float2 x = qr[i] ? *(const float2 *)(qr[i] + d) : make_float2(0.f, 0.f);
                qa[kk][2 * h + i] = kn_pack_bf16(x.x * a.scale_log2, x.y * a.scale_log2);
            }
        }
}

/* FP8 pools: each entry of sc (NT 8-key C fragments; thread t holds keys
 * 8n + 2t, 8n + 2t + 1 of fragment n) times its key's row scale: the scores
 * q . code times the K scale, or the probabilities times the V scale before
 * P V over the codes. */
template <int NT>
static __device__ __forceinline__ void dec_scale_by_key(float (&sc)[NT][4], const float *key_scale, int t)
{
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int c = 0; c < 4; c++)
            sc[n][c] *= key_scale[n * 8 + 2 * t + (c & 1)];
}

/* One tile's scores sc (NT 8-key C fragments of keys j0..) masked, then
 * the online-softmax update of rows g, g + 8 (attention_tile_softmax.cuh):
 * m, l, the output o rescaled, sc replaced by the probabilities. */
template <int NT, int DN>
static __device__ __forceinline__ void dec_softmax_tile(const DecArgs &a, float (&sc)[NT][4], const int (&pos)[2],
                                                        float (&m)[2], float (&l)[2], float (&o)[DN][4], int j0,
                                                        int kend, int t)
{
    kn_attn_tile_mask<NT>(sc, pos, j0, kend, a.window, t);
    kn_attn_tile_softmax<NT, DN>(sc, m, l, o);
}

/* Merges the DEC_WARPS warp states (m, per-lane l, o) of the block through
 * shared memory mrg (DEC_WARPS * DEC_ROWS * (D + 2) floats, free once every
 * warp is done with its tiles: the first barrier) into the output (one
 * split) or this split's partial state for kn_cuda_attn_split_combine. */
template <int D>
static __device__ __forceinline__ void dec_merge_store(const DecArgs &a, float *mrg, const float (&o)[D / 8][4],
                                                       const float (&m)[2], const float (&l)[2], int q0, int kvh,
                                                       int nvec, int split)
{
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, t = lane & 3;
    __syncthreads(); /* every warp is done with its part of mrg */
    float *wm = mrg, *wl = wm + DEC_WARPS * DEC_ROWS, *wo = wl + DEC_WARPS * DEC_ROWS;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float lsum = l[r];
        lsum += __shfl_xor_sync(0xffffffffu, lsum, 1);
        lsum += __shfl_xor_sync(0xffffffffu, lsum, 2);
        const int row = g + 8 * r;
        if (t == 0) {
            wm[w * DEC_ROWS + row] = m[r];
            wl[w * DEC_ROWS + row] = lsum;
        }
        float *dst = wo + ((size_t)w * DEC_ROWS + row) * D + 2 * t;
#pragma unroll
        for (int n = 0; n < D / 8; n++)
            *(float2 *)(dst + n * 8) = make_float2(o[n][2 * r], o[n][2 * r + 1]);
    }
    __syncthreads();
    const int G = a.group;
    for (int idx = tid; idx < nvec * D; idx += DEC_THREADS) {
        const int row = idx / D, d = idx - row * D;
        float mmax = -INFINITY;
#pragma unroll
        for (int u = 0; u < DEC_WARPS; u++)
            mmax = fmaxf(mmax, wm[u * DEC_ROWS + row]);
        float lsum = 0.f, acc = 0.f;
        if (mmax != -INFINITY)
#pragma unroll
            for (int u = 0; u < DEC_WARPS; u++) {
                const float mu = wm[u * DEC_ROWS + row];
                if (mu == -INFINITY)
                    continue;
                const float f = exp2f(mu - mmax);
                lsum += wl[u * DEC_ROWS + row] * f;
                acc += wo[((size_t)u * DEC_ROWS + row) * D + d] * f;
            }
        const size_t oh = (size_t)(q0 + row / G) * a.n_heads + kvh * G + row % G;
        if (a.n_splits == 1) {
            a.out[oh * D + d] = lsum > 0.f ? acc / lsum : 0.f;
        } else {
            const size_t pi = oh * a.n_splits + split;
            a.part_o[pi * D + d] = acc;
            if (d == 0) {
                a.part_ml[pi * 2] = mmax;
                a.part_ml[pi * 2 + 1] = lsum;
            }
        }
    }
}
/* The decode kernels' host side around launch (int launch(const DecArgs &),
 * the kernel's own launch): the arguments, the split count for the batch
 * (a sliding-window layer reads at most window + rows keys a sequence),
 * the splits' partial states and their combine. */
template <class Launch>
static int dec_run(const kn_backend *be, const char *op, float *out, const float *q, const kn_kv_pools *pools,
                   const kn_seq_batch *b, int n_heads, int n_kv_heads, int head_dim, int page_size, float scale,
                   const float *sinks, int window, Launch launch)
{
    DecArgs a;
    kn_attn_args_fill(a, out, q, pools->k, pools->v, b, n_heads, n_kv_heads, page_size, scale, sinks, window);
    const int keys = window > 0 && window + b->max_q_len < b->max_kv_len ? window + b->max_q_len : b->max_kv_len;
    a.n_splits = kn_cuda_decode_mma_splits(be, b->n_seqs, n_kv_heads, keys);
    a.pool_bytes = (long long)b->n_pages * n_kv_heads * page_size * (long long)kn_kv_row_bytes(pools->dtype, head_dim);
    const size_t row_heads = (size_t)b->n_rows * n_heads;
    int rc = kn_cuda_attn_split_parts(be, op, row_heads, a.n_splits, head_dim, &a.part_o, &a.part_ml);
    if (rc != TN_OK)
        return rc;
    return kn_cuda_attn_split_finish(be, op, launch(a), out, a.part_o, a.part_ml, row_heads, a.n_splits, head_dim);
}
#endif
