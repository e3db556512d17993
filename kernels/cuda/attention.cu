/* GQA attention with GPT-OSS's learned sink over the paged HND KV cache, on
 * the GPU, in fp32 throughout (fp32 FFMA on CUDA cores, no tensor cores).
 * Every kernel is instantiated for the pools' element type T (float,
 * __nv_bfloat16 or __nv_fp8_e4m3, kn_kv_pools): K and V are read in T
 * straight from the pools and widened to fp32 in registers as they are
 * staged into shared memory (paged_kv.cuh; FP8 codes times their row's
 * scale), so a bf16 cache is read at half the bytes, an FP8 one at a
 * quarter (plus 4 bytes of scale per row), and the arithmetic after the
 * load is unchanged.
 *
 * Both kernels are FlashAttention-style: scores are computed tile by tile
 * and folded into a running max m, running sum l and unnormalised output o
 * (online softmax), never materialising the score matrix. Scores are kept
 * in the log2 domain (q is pre-scaled by scale*log2(e)) so exp is exp2.
 *
 * The sink. softmax([q.k_j*scale ..., sink]) without the sink column equals
 * the online softmax whose state starts at m = sink, l = exp(sink - m) = 1,
 * o = 0 instead of m = -inf, l = 0. That start must happen exactly once per
 * (row, head): when one block walks all keys it starts there; when the keys
 * are split over blocks (split-KV), only split 0 starts from the sink, the
 * others from -inf, and the combine step merges the partial states without
 * adding the sink again.
 *
 * Query vectors. GQA heads kvh*G .. kvh*G+G-1 read the same KV head, so a
 * block takes all G of them for a run of rows: its "query vectors" are the
 * (row, head-in-group) pairs v = row_local*G + g of one sequence, which
 * share every K/V tile the block loads. Vector v sits at position
 * kv_len - n_q + v/G and sees keys j <= pos, and j > pos - window when
 * window > 0.
 *
 * Kernels (all fp32; attention_mma.cu has the bf16 tensor-core prefill
 * kernel that replaces attn_flash_kernel when the backend's attention
 * precision is bf16, attention_wgmma.cu the Hopper wgmma one that
 * replaces that for head_dim 64 over bf16 pools when the wgmma switch is
 * on, and attention_decode_mma.cu the bf16 tensor-core decode kernel that
 * replaces the split-KV kernels over bf16 and FP8 pools at that precision):
 *  - attn_flash_kernel<D>: prefill and long chunks (D = 64 or 128). 128
 *    query vectors x 64-key tiles, 256 threads, each thread an 8x4 block of
 *    scores and 8 x D/16 of the output; the whole key range in one block.
 *  - attn_split_kernel<VPW>: decode (few vectors per sequence) and any
 *    other head_dim <= 256 (attn_decode_kernel<VPW, D> is its fast form
 *    for D = 64 or 128). 4 warps, each owning VPW query vectors, 32-key
 *    chunks (one key per lane). Splits the key range over blocks when there
 *    are too few (sequence, KV head) pairs to fill the GPU, followed by
 *    kn_cuda_attn_split_combine (attention_decode_mma.cu).
 */
#include <math.h>
#include "kernels/cuda/attention_decode_mma.cuh"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/attention_wgmma.cuh"
#include "kernels/cuda/attention_setup.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/paged_kv.cuh"
extern "C" {
#include "kernels/attention.h"
#include "kernels/cuda/cuda_ops.h"
}

namespace {

struct AttnArgs {
    float *out;
    const float *q;
    const void *k_pool, *v_pool; /* elements of the kernel's KV type T */
    const int32_t *q_offset, *kv_len, *page_table;
    const float *sinks;
    int max_pages, n_pages, n_heads, n_kv_heads, group, head_dim, page_size, window;
    float scale_log2;
    /* split kernel only */
    int vec4; /* head_dim % 4 == 0, pools and q 16-byte aligned */
    int n_qchunks, n_splits;
    float *part_o;  /* [n_rows][n_heads][n_splits][head_dim] */
    float *part_ml; /* [n_rows][n_heads][n_splits][2]: m (log2 domain), l */
};

__device__ __forceinline__ bool key_visible(int j, int pos, int window)
{
    return j <= pos && (window <= 0 || j > pos - window);
}

/* ------------------------------------------------------------------ */
/* Prefill: 128 query vectors x 64 keys per tile.                     */

const int FL_BM = 128, FL_BN = 64, FL_THREADS = 256;

template <int D> struct FlashSmem {
    static const int LD = D + 4;         /* row stride of Q, K, V tiles (floats) */
    static const int LDP = FL_BN + 16;   /* row stride of P: the two half-warps' rows 16 banks apart */
    static const int FLOATS = FL_BM * LD + 2 * FL_BN * LD + FL_BM * LDP;
    static const size_t BYTES = FLOATS * sizeof(float) + FL_BN * sizeof(long long);
};

template <int D, class T>
__global__ void __launch_bounds__(FL_THREADS)
attn_flash_kernel(AttnArgs a)
{
    const T *k_pool = (const T *)a.k_pool, *v_pool = (const T *)a.v_pool;
    typedef FlashSmem<D> S;
    const int LD = S::LD, LDP = S::LDP, DC = D / 16;
    extern __shared__ __align__(16) float smem[];
    float *Qs = smem;
    float *Ks = Qs + FL_BM * LD;
    float *Vs = Ks + FL_BN * LD;
    float *Ps = Vs + FL_BN * LD;
    long long *krow = (long long *)(Ps + FL_BM * LDP);

    const int s = blockIdx.z, kvh = blockIdx.y;
    /* Later tiles see more keys under the causal mask: start them first. */
    const int tile = gridDim.x - 1 - blockIdx.x;
    const int q0 = a.q_offset[s], nq = a.q_offset[s + 1] - q0;
    const int G = a.group, nvec = nq * G, v0 = tile * FL_BM;
    if (v0 >= nvec)
        return;
    const int first_pos = a.kv_len[s] - nq;
    const int tid = threadIdx.x, lane = tid & 31;
    const int tx = lane & 15, ty = (tid >> 5) * 2 + (lane >> 4);

    for (int idx = tid; idx < FL_BM * (D / 4); idx += FL_THREADS) {
        int r = idx / (D / 4), c4 = idx % (D / 4);
        *(float4 *)&Qs[r * LD + c4 * 4] = kn_attn_q4<D>(a, q0, kvh, v0 + r, nvec, c4);
    }

    /* This thread's rows are ty + 16*i; its score columns tx + 16*c; its
     * output dims tx + 16*c. l is this thread's share of the row sum (the
     * 16 threads of a row add theirs at the end), so the sink's 1 goes to
     * tx == 0 only. */
    int pos[8];
    float m[8], l[8], o[8][DC];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        kn_attn_row_init(a, kvh, v0 + ty + 16 * i, nvec, first_pos, true, tx == 0, pos[i], m[i],
                         l[i]);
#pragma unroll
        for (int c = 0; c < DC; c++)
            o[i][c] = 0.f;
    }

    int kbeg, kend;
    kn_attn_key_range(a, first_pos, v0, FL_BM, nvec, &kbeg, &kend);

    for (int j0 = kbeg; j0 < kend; j0 += FL_BN) {
        __syncthreads(); /* the previous tile's K, V, P are no longer read */
        if (tid < FL_BN) {
            int j = j0 + tid;
            krow[tid] = j < kend ? paged_kv_row(a.page_table, a.max_pages, a.n_pages, s, j, kvh, a.n_kv_heads,
                                                kv_row_len(k_pool, D), a.page_size)
                                 : -1;
        }
        __syncthreads();
        for (int idx = tid; idx < FL_BN * (D / 4); idx += FL_THREADS) {
            int key = idx / (D / 4), c4 = idx % (D / 4);
            long long off = krow[key];
            float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), vv = kv;
            if (off >= 0) {
                kv = kv_load4(k_pool, off, c4 * 4, D);
                vv = kv_load4(v_pool, off, c4 * 4, D);
            }
            *(float4 *)&Ks[key * LD + c4 * 4] = kv;
            *(float4 *)&Vs[key * LD + c4 * 4] = vv;
        }
        __syncthreads();

        float sc[8][4];
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int c = 0; c < 4; c++)
                sc[i][c] = 0.f;
#pragma unroll 2
        for (int d = 0; d < D; d += 4) {
            float4 kf[4];
#pragma unroll
            for (int c = 0; c < 4; c++)
                kf[c] = *(const float4 *)&Ks[(tx + 16 * c) * LD + d];
#pragma unroll
            for (int i = 0; i < 8; i++) {
                float4 qf = *(const float4 *)&Qs[(ty + 16 * i) * LD + d];
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    sc[i][c] = fmaf(qf.x, kf[c].x, sc[i][c]);
                    sc[i][c] = fmaf(qf.y, kf[c].y, sc[i][c]);
                    sc[i][c] = fmaf(qf.z, kf[c].z, sc[i][c]);
                    sc[i][c] = fmaf(qf.w, kf[c].w, sc[i][c]);
                }
            }
        }

#pragma unroll
        for (int i = 0; i < 8; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                int j = j0 + tx + 16 * c;
                if (!key_visible(j, pos[i], a.window))
                    sc[i][c] = -INFINITY;
                mx = fmaxf(mx, sc[i][c]);
            }
#pragma unroll
            for (int off = 8; off > 0; off >>= 1)
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            float m_new = fmaxf(m[i], mx);
            float alpha = 1.f, psum = 0.f;
            if (m_new != -INFINITY) {
                alpha = exp2f(m[i] - m_new);
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    sc[i][c] = exp2f(sc[i][c] - m_new);
                    psum += sc[i][c];
                }
            } else {
#pragma unroll
                for (int c = 0; c < 4; c++)
                    sc[i][c] = 0.f;
            }
            m[i] = m_new;
            l[i] = l[i] * alpha + psum;
#pragma unroll
            for (int c = 0; c < DC; c++)
                o[i][c] *= alpha;
#pragma unroll
            for (int c = 0; c < 4; c++)
                Ps[(ty + 16 * i) * LDP + tx + 16 * c] = sc[i][c];
        }
        __syncthreads();

#pragma unroll 2
        for (int kk = 0; kk < FL_BN; kk += 4) {
            float vv[4][DC];
#pragma unroll
            for (int u = 0; u < 4; u++)
#pragma unroll
                for (int c = 0; c < DC; c++)
                    vv[u][c] = Vs[(kk + u) * LD + tx + 16 * c];
#pragma unroll
            for (int i = 0; i < 8; i++) {
                float4 pf = *(const float4 *)&Ps[(ty + 16 * i) * LDP + kk];
#pragma unroll
                for (int c = 0; c < DC; c++) {
                    o[i][c] = fmaf(pf.x, vv[0][c], o[i][c]);
                    o[i][c] = fmaf(pf.y, vv[1][c], o[i][c]);
                    o[i][c] = fmaf(pf.z, vv[2][c], o[i][c]);
                    o[i][c] = fmaf(pf.w, vv[3][c], o[i][c]);
                }
            }
        }
    }

#pragma unroll
    for (int i = 0; i < 8; i++) {
        float lsum = l[i];
#pragma unroll
        for (int off = 8; off > 0; off >>= 1)
            lsum += __shfl_xor_sync(0xffffffffu, lsum, off);
        int v = v0 + ty + 16 * i;
        if (v >= nvec)
            continue;
        int rl = v / G, g = v - rl * G;
        float inv = lsum > 0.f ? 1.f / lsum : 0.f;
        float *dst = a.out + ((size_t)(q0 + rl) * a.n_heads + kvh * G + g) * D;
#pragma unroll
        for (int c = 0; c < DC; c++)
            dst[tx + 16 * c] = o[i][c] * inv;
    }
}

/* ------------------------------------------------------------------ */
/* Decode and any head_dim: 4 warps x VPW query vectors, 32-key chunks. */

const int SP_WARPS = 4, SP_KC = 32, SP_DMAX = 256, SP_DPL = SP_DMAX / 32;

static size_t split_smem_bytes(int vb, int d)
{
    size_t floats = (size_t)vb * d + (size_t)SP_KC * (d + 1) + (size_t)SP_KC * d + (size_t)vb * SP_KC;
    floats = (floats + 1) & ~(size_t)1; /* 8-byte alignment for krow */
    return floats * sizeof(float) + SP_KC * sizeof(long long);
}

/* The split-KV and decode kernels' block: sequence s = blockIdx.z, KV head
 * and chunk of vb query vectors from blockIdx.y, split blockIdx.x; the
 * sequence's first row q0, its nvec query vectors, the chunk's first v0
 * and the position of its first row. False (the block has nothing to do)
 * when the chunk starts past the sequence's vectors. */
__device__ __forceinline__ bool split_block(const AttnArgs &a, int vb, int &s, int &kvh, int &split,
                                            int &q0, int &nvec, int &v0, int &first_pos)
{
    s = blockIdx.z;
    kvh = blockIdx.y / a.n_qchunks;
    split = blockIdx.x;
    q0 = a.q_offset[s];
    const int nq = a.q_offset[s + 1] - q0;
    nvec = nq * a.group;
    v0 = (blockIdx.y % a.n_qchunks) * vb;
    if (v0 >= nvec)
        return false;
    first_pos = a.kv_len[s] - nq;
    return true;
}

/* The split-KV and decode kernels' state before any key: warp w owns
 * vectors v0 + w + SP_WARPS*t (t < VPW), the lane DPL output dims of each;
 * split 0 starts from the sinks. */
template <int VPW, int DPL>
__device__ __forceinline__ void split_init_state(const AttnArgs &a, int kvh, int v0, int nvec,
                                                 int first_pos, int split, int w, int lane,
                                                 int (&pos)[VPW], float (&m)[VPW],
                                                 float (&l)[VPW], float (&o)[VPW][DPL])
{
#pragma unroll
    for (int t = 0; t < VPW; t++) {
        kn_attn_row_init(a, kvh, v0 + w + SP_WARPS * t, nvec, first_pos, split == 0, lane == 0,
                         pos[t], m[t], l[t]);
#pragma unroll
        for (int c = 0; c < DPL; c++)
            o[t][c] = 0.f;
    }
}

/* The split-KV and decode kernels' results: each of the warp's vectors
 * gets its normalised output (one split) or this split's partial state
 * (o, m and the row sum l) for kn_cuda_attn_split_combine; dims past D are not
 * written. */
template <int VPW, int DPL>
__device__ __forceinline__ void split_store(const AttnArgs &a, int D, int q0, int kvh, int v0,
                                            int nvec, int split, int w, int lane,
                                            const float (&m)[VPW], const float (&l)[VPW],
                                            const float (&o)[VPW][DPL])
{
    const int G = a.group;
#pragma unroll
    for (int t = 0; t < VPW; t++) {
        float lsum = l[t];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            lsum += __shfl_xor_sync(0xffffffffu, lsum, off);
        int v = v0 + w + SP_WARPS * t;
        if (v >= nvec)
            continue;
        int rl = v / G, g = v - rl * G;
        size_t oh = (size_t)(q0 + rl) * a.n_heads + kvh * G + g;
        if (a.n_splits == 1) {
            float inv = lsum > 0.f ? 1.f / lsum : 0.f;
            float *dst = a.out + oh * D;
#pragma unroll
            for (int c = 0; c < DPL; c++)
                if (lane + 32 * c < D)
                    dst[lane + 32 * c] = o[t][c] * inv;
        } else {
            size_t pi = oh * a.n_splits + split;
            float *dst = a.part_o + pi * D;
#pragma unroll
            for (int c = 0; c < DPL; c++)
                if (lane + 32 * c < D)
                    dst[lane + 32 * c] = o[t][c];
            if (lane == 0) {
                a.part_ml[pi * 2] = m[t];
                a.part_ml[pi * 2 + 1] = lsum;
            }
        }
    }
}

/* The block's key range [*kbeg, *kend) cut into n_splits runs of whole
 * SP_KC-key chunks, this split's run kept. Cut from the block's own range
 * (its sequence's length, read on the device), so every sequence of a
 * batch is spread over all splits whatever the longest one, and a launch
 * sized for a length bound (a recorded decode step) stays balanced. */
__device__ __forceinline__ void split_range(int split, int n_splits, int *kbeg, int *kend)
{
    if (n_splits <= 1 || *kend <= *kbeg)
        return;
    const int chunks = (*kend - *kbeg + SP_KC - 1) / SP_KC;
    const int per = (chunks + n_splits - 1) / n_splits;
    const int beg = *kbeg + split * per * SP_KC;
    *kend = min(*kend, beg + per * SP_KC);
    *kbeg = beg;
}

template <int VPW, class T>
__global__ void __launch_bounds__(SP_WARPS * 32)
attn_split_kernel(AttnArgs a)
{
    const T *k_pool = (const T *)a.k_pool, *v_pool = (const T *)a.v_pool;
    const int VB = SP_WARPS * VPW;
    extern __shared__ __align__(16) float smem[];
    const int D = a.head_dim, LDK = D + 1;
    float *Qs = smem;
    float *Ks = Qs + VB * D;
    float *Vs = Ks + SP_KC * LDK;
    float *Ps = Vs + SP_KC * D;
    size_t kofs = ((size_t)(VB * D + SP_KC * LDK + SP_KC * D + VB * SP_KC) + 1) & ~(size_t)1;
    long long *krow = (long long *)(smem + kofs);

    int s, kvh, split, q0, nvec, v0, first_pos;
    if (!split_block(a, VB, s, kvh, split, q0, nvec, v0, first_pos))
        return;
    const int G = a.group;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;

    for (int idx = tid; idx < VB * D; idx += blockDim.x) {
        int vb = idx / D, d = idx - vb * D, v = v0 + vb;
        float val = 0.f;
        if (v < nvec) {
            int rl = v / G, g = v - rl * G;
            val = a.q[((size_t)(q0 + rl) * a.n_heads + kvh * G + g) * D + d] * a.scale_log2;
        }
        Qs[idx] = val;
    }

    /* Warp w owns vectors w + 4*t; lane holds output dims lane + 32*c. */
    int pos[VPW];
    float m[VPW], l[VPW], o[VPW][SP_DPL];
    split_init_state<VPW, SP_DPL>(a, kvh, v0, nvec, first_pos, split, w, lane, pos, m, l, o);
    int kbeg, kend;
    kn_attn_key_range(a, first_pos, v0, VB, nvec, &kbeg, &kend);
    split_range(split, a.n_splits, &kbeg, &kend);

    for (int j0 = kbeg; j0 < kend; j0 += SP_KC) {
        __syncthreads();
        if (tid < SP_KC) {
            int j = j0 + tid;
            krow[tid] = j < kend ? paged_kv_row(a.page_table, a.max_pages, a.n_pages, s, j, kvh, a.n_kv_heads,
                                                kv_row_len(k_pool, D), a.page_size)
                                 : -1;
        }
        __syncthreads();
        if (a.vec4) { /* 4-element loads: rows start 16-byte (fp32) / 8-byte (bf16) aligned */
            const int D4 = D / 4;
            for (int idx = tid; idx < SP_KC * D4; idx += blockDim.x) {
                int key = idx / D4, d = (idx - key * D4) * 4;
                long long off = krow[key];
                float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), vv = kv;
                if (off >= 0) {
                    kv = kv_load4(k_pool, off, d, D);
                    vv = kv_load4(v_pool, off, d, D);
                }
                float *kd = Ks + key * LDK + d;
                kd[0] = kv.x, kd[1] = kv.y, kd[2] = kv.z, kd[3] = kv.w;
                *(float4 *)(Vs + key * D + d) = vv;
            }
        } else {
            for (int idx = tid; idx < SP_KC * D; idx += blockDim.x) {
                int key = idx / D, d = idx - key * D;
                long long off = krow[key];
                float kv = 0.f, vv = 0.f;
                if (off >= 0) {
                    kv = kv_load1(k_pool, off, d, D);
                    vv = kv_load1(v_pool, off, d, D);
                }
                Ks[key * LDK + d] = kv;
                Vs[idx] = vv;
            }
        }
        __syncthreads();

        const int j = j0 + lane;
#pragma unroll
        for (int t = 0; t < VPW; t++) {
            const int vb = w + SP_WARPS * t;
            const float *qv = Qs + vb * D;
            const float *kr = Ks + lane * LDK;
            float sc = 0.f;
            for (int d = 0; d < D; d++)
                sc = fmaf(qv[d], kr[d], sc);
            if (j >= kend || !key_visible(j, pos[t], a.window))
                sc = -INFINITY;
            float mx = sc;
#pragma unroll
            for (int off = 16; off > 0; off >>= 1)
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            float m_new = fmaxf(m[t], mx);
            float alpha = 1.f, p = 0.f;
            if (m_new != -INFINITY) {
                alpha = exp2f(m[t] - m_new);
                p = exp2f(sc - m_new);
            }
            m[t] = m_new;
            l[t] = l[t] * alpha + p;
#pragma unroll
            for (int c = 0; c < SP_DPL; c++)
                o[t][c] *= alpha;
            Ps[vb * SP_KC + lane] = p;
        }
        __syncwarp();
        for (int key = 0; key < SP_KC; key++) {
            const float *vr = Vs + key * D;
#pragma unroll
            for (int t = 0; t < VPW; t++) {
                float p = Ps[(w + SP_WARPS * t) * SP_KC + key];
#pragma unroll
                for (int c = 0; c < SP_DPL; c++) {
                    int d = lane + 32 * c;
                    if (d < D)
                        o[t][c] = fmaf(p, vr[d], o[t][c]);
                }
            }
        }
    }

    split_store<VPW, SP_DPL>(a, D, q0, kvh, v0, nvec, split, w, lane, m, l, o);
}

/* The split kernel specialised for head_dim D in {64, 128} with 16-byte
 * aligned pools: compile-time loops (no per-dimension guards), each key's K
 * read once from shared memory per warp for all of its vectors, p handed
 * to the output update by shuffles, and the next chunk's K/V loaded into
 * registers while the current one is computed (one global latency per
 * chunk is hidden instead of two being exposed). Same states, same sink
 * rule, same partial outputs as attn_split_kernel. */
template <int VPW, int D, class T>
__global__ void __launch_bounds__(SP_WARPS * 32)
attn_decode_kernel(AttnArgs a)
{
    const T *k_pool = (const T *)a.k_pool, *v_pool = (const T *)a.v_pool;
    const int VB = SP_WARPS * VPW, DPL = D / 32, LDK = D + 1, D4 = D / 4;
    const int LOADS = SP_KC * D4 / (SP_WARPS * 32); /* float4 per thread per tensor */
    __shared__ __align__(16) float Qs[VB * D];
    __shared__ float Ks[SP_KC * LDK];
    __shared__ __align__(16) float Vs[SP_KC * D];

    int s, kvh, split, q0, nvec, v0, first_pos;
    if (!split_block(a, VB, s, kvh, split, q0, nvec, v0, first_pos))
        return;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;

    for (int idx = tid; idx < VB * D4; idx += blockDim.x) {
        int vb = idx / D4, c4 = idx - vb * D4;
        *(float4 *)&Qs[vb * D + c4 * 4] = kn_attn_q4<D>(a, q0, kvh, v0 + vb, nvec, c4);
    }

    int pos[VPW];
    float m[VPW], l[VPW], o[VPW][DPL];
    split_init_state<VPW, DPL>(a, kvh, v0, nvec, first_pos, split, w, lane, pos, m, l, o);
    int kbeg, kend;
    kn_attn_key_range(a, first_pos, v0, VB, nvec, &kbeg, &kend);
    split_range(split, a.n_splits, &kbeg, &kend);

    float4 kreg[LOADS], vreg[LOADS];
#define KN_DECODE_LOAD(J0)                                                                   \
    _Pragma("unroll") for (int it = 0; it < LOADS; it++) {                                  \
        int idx = tid + it * SP_WARPS * 32, key = idx / D4, d = (idx - key * D4) * 4;        \
        int j = (J0) + key;                                                                  \
        long long off = j < kend ? paged_kv_row(a.page_table, a.max_pages, a.n_pages, s, j,  \
                                                kvh, a.n_kv_heads, kv_row_len(k_pool, D),    \
                                                a.page_size)                                 \
                                 : -1;                                                       \
        kreg[it] = vreg[it] = make_float4(0.f, 0.f, 0.f, 0.f);                               \
        if (off >= 0) {                                                                      \
            kreg[it] = kv_load4(k_pool, off, d, D);                                          \
            vreg[it] = kv_load4(v_pool, off, d, D);                                          \
        }                                                                                    \
    }
    if (kbeg < kend) {
        KN_DECODE_LOAD(kbeg)
    }
    for (int j0 = kbeg; j0 < kend; j0 += SP_KC) {
        __syncthreads(); /* the previous chunk is no longer read */
#pragma unroll
        for (int it = 0; it < LOADS; it++) {
            int idx = tid + it * SP_WARPS * 32, key = idx / D4, d = (idx - key * D4) * 4;
            float *kd = Ks + key * LDK + d;
            kd[0] = kreg[it].x, kd[1] = kreg[it].y, kd[2] = kreg[it].z, kd[3] = kreg[it].w;
            *(float4 *)&Vs[key * D + d] = vreg[it];
        }
        __syncthreads();
        if (j0 + SP_KC < kend) {
            KN_DECODE_LOAD(j0 + SP_KC)
        }

        const float *kr = Ks + lane * LDK;
        float sc[VPW];
#pragma unroll
        for (int t = 0; t < VPW; t++)
            sc[t] = 0.f;
#pragma unroll
        for (int d = 0; d < D; d += 4) {
            float k0 = kr[d], k1 = kr[d + 1], k2 = kr[d + 2], k3 = kr[d + 3];
#pragma unroll
            for (int t = 0; t < VPW; t++) {
                float4 qf = *(const float4 *)&Qs[(w + SP_WARPS * t) * D + d];
                sc[t] = fmaf(qf.x, k0, sc[t]);
                sc[t] = fmaf(qf.y, k1, sc[t]);
                sc[t] = fmaf(qf.z, k2, sc[t]);
                sc[t] = fmaf(qf.w, k3, sc[t]);
            }
        }
        const int j = j0 + lane;
        float p[VPW];
#pragma unroll
        for (int t = 0; t < VPW; t++) {
            if (j >= kend || !key_visible(j, pos[t], a.window))
                sc[t] = -INFINITY;
            float mx = sc[t];
#pragma unroll
            for (int off = 16; off > 0; off >>= 1)
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            float m_new = fmaxf(m[t], mx);
            float alpha = 1.f;
            p[t] = 0.f;
            if (m_new != -INFINITY) {
                alpha = exp2f(m[t] - m_new);
                p[t] = exp2f(sc[t] - m_new);
            }
            m[t] = m_new;
            l[t] = l[t] * alpha + p[t];
#pragma unroll
            for (int c = 0; c < DPL; c++)
                o[t][c] *= alpha;
        }
#pragma unroll 8
        for (int key = 0; key < SP_KC; key++) {
            float vv[DPL];
#pragma unroll
            for (int c = 0; c < DPL; c++)
                vv[c] = Vs[key * D + lane + 32 * c];
#pragma unroll
            for (int t = 0; t < VPW; t++) {
                float pk = __shfl_sync(0xffffffffu, p[t], key);
#pragma unroll
                for (int c = 0; c < DPL; c++)
                    o[t][c] = fmaf(pk, vv[c], o[t][c]);
            }
        }
    }
#undef KN_DECODE_LOAD

    split_store<VPW, DPL>(a, D, q0, kvh, v0, nvec, split, w, lane, m, l, o);
}

template <int D, class T>
int launch_flash(const kn_backend *be, const char *op, const AttnArgs &a, const kn_seq_batch *b)
{
    size_t bytes = FlashSmem<D>::BYTES;
    KN_CUDA_TRY(op, cudaFuncSetAttribute(attn_flash_kernel<D, T>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    dim3 grid(kn_cuda_div_up((long long)b->max_q_len * a.group, FL_BM), a.n_kv_heads, b->n_seqs);
    attn_flash_kernel<D, T><<<grid, FL_THREADS, bytes, kn_cuda_stream(be)>>>(a);
    KN_CUDA_LAUNCH_CHECK(op, "attn_flash_kernel");
    return TN_OK;
}

template <int VPW, class T>
int launch_split(const kn_backend *be, const char *op, const AttnArgs &a, const kn_seq_batch *b)
{
    dim3 grid(a.n_splits, a.n_kv_heads * a.n_qchunks, b->n_seqs);
    if (a.vec4 && (a.head_dim == 64 || a.head_dim == 128)) {
        if (a.head_dim == 64)
            attn_decode_kernel<VPW, 64, T><<<grid, SP_WARPS * 32, 0, kn_cuda_stream(be)>>>(a);
        else
            attn_decode_kernel<VPW, 128, T><<<grid, SP_WARPS * 32, 0, kn_cuda_stream(be)>>>(a);
        KN_CUDA_LAUNCH_CHECK(op, "attn_decode_kernel");
        return TN_OK;
    }
    size_t bytes = split_smem_bytes(SP_WARPS * VPW, a.head_dim);
    KN_CUDA_TRY(op, cudaFuncSetAttribute(attn_split_kernel<VPW, T>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    attn_split_kernel<VPW, T><<<grid, SP_WARPS * 32, bytes, kn_cuda_stream(be)>>>(a);
    KN_CUDA_LAUNCH_CHECK(op, "attn_split_kernel");
    return TN_OK;
}

/* The launches for KV elements of type T (float or __nv_bfloat16). */
template <class T>
int launch_flash_d(const kn_backend *be, const char *op, const AttnArgs &a, const kn_seq_batch *b)
{
    return a.head_dim == 64 ? launch_flash<64, T>(be, op, a, b) : launch_flash<128, T>(be, op, a, b);
}

template <class T>
int launch_split_vpw(const kn_backend *be, const char *op, const AttnArgs &a,
                     const kn_seq_batch *b, int vpw)
{
    return vpw == 1 ? launch_split<1, T>(be, op, a, b)
         : vpw == 2 ? launch_split<2, T>(be, op, a, b)
                    : launch_split<4, T>(be, op, a, b);
}

} // namespace

extern "C" int kn_attention_cuda(const kn_backend *be, float *out, const float *q,
                                 const kn_kv_pools *pools, const kn_seq_batch *b,
                                 int n_heads, int n_kv_heads, int head_dim, int page_size,
                                 float scale, const float *sinks, int window)
{
    const void *k_pool = pools->k, *v_pool = pools->v;
    const kn_dtype kvt = pools->dtype;
    static const char op[] = "kn_attention";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK)
        return rc;
    if (head_dim > SP_DMAX)
        return kn_arg_error(op, "head_dim %d is over the CUDA kernels' limit %d", head_dim, SP_DMAX);
    if (b->n_rows == 0)
        return TN_OK;

    kn_cuda_ctx *ctx = kn_cuda_ctx_of(be);
    /* bf16 tensor cores only when the backend was asked for them
     * (kn_backend_set_attn_bf16, TANDEM_CUDA_ATTN_BF16=1); fp32 otherwise. */
    if (ctx->attn_bf16 && ctx->attn_wgmma &&
        kn_cuda_attention_wgmma_fits(b, n_heads, n_kv_heads, head_dim, page_size, ctx->attn_wgmma, out, q,
                                     pools))
        return kn_cuda_attention_wgmma(be, op, out, q, pools, b, n_heads, n_kv_heads, head_dim,
                                       page_size, scale, sinks, window,
                                       ctx->attn_wgmma > 1 && kn_cuda_attention_wgmma_tma_fits(page_size)
                                           ? ctx->attn_wgmma
                                           : 1);
    if (ctx->attn_bf16 && ctx->attn_decode_tma &&
        kn_cuda_attention_decode_tma_fits(b, n_heads, n_kv_heads, head_dim, page_size, out, q, pools))
        return kn_cuda_attention_decode_tma(be, op, out, q, pools, b, n_heads, n_kv_heads, head_dim,
                                            page_size, scale, sinks, window);
    if (ctx->attn_bf16 &&
        kn_cuda_attention_decode_mma_fits(b, n_heads, n_kv_heads, head_dim, out, q, pools))
        return kn_cuda_attention_decode_mma(be, op, out, q, pools, b, n_heads, n_kv_heads, head_dim,
                                            page_size, scale, sinks, window);
    if (ctx->attn_bf16 &&
        kn_cuda_attention_mma_fits(b, n_heads, n_kv_heads, head_dim, out, q, pools))
        return kn_cuda_attention_mma(be, op, out, q, pools, b, n_heads, n_kv_heads, head_dim,
                                     page_size, scale, sinks, window);
    AttnArgs a;
    kn_attn_args_fill(a, out, q, k_pool, v_pool, b, n_heads, n_kv_heads, page_size, scale, sinks,
                      window);
    a.head_dim = head_dim;
    a.vec4 = head_dim % 4 == 0 && kn_cuda_aligned16(k_pool) && kn_cuda_aligned16(v_pool) &&
             kn_cuda_aligned16(q);
    a.n_qchunks = 1;
    a.n_splits = 1;
    a.part_o = NULL;
    a.part_ml = NULL;

    long long nvec_max = (long long)b->max_q_len * a.group;
    bool aligned = kn_cuda_aligned16(out) && kn_cuda_aligned16(q) && kn_cuda_aligned16(k_pool) &&
                   kn_cuda_aligned16(v_pool);
    if (nvec_max > SP_WARPS * 4 && aligned && (head_dim == 64 || head_dim == 128))
        return kvt == KN_BF16       ? launch_flash_d<__nv_bfloat16>(be, op, a, b)
             : kvt == KN_FP8_E4M3 ? launch_flash_d<__nv_fp8_e4m3>(be, op, a, b)
                                  : launch_flash_d<float>(be, op, a, b);

    int vpw = nvec_max <= SP_WARPS ? 1 : nvec_max <= 2 * SP_WARPS ? 2 : 4;
    int vb = SP_WARPS * vpw;
    a.n_qchunks = kn_cuda_div_up(nvec_max, vb);
    /* Split the keys when (sequence, KV head, chunk) blocks alone would
     * leave most multiprocessors idle, keeping >= 256 keys per split. */
    long long base_blocks = (long long)b->n_seqs * n_kv_heads * a.n_qchunks;
    long long want_blocks = 2LL * ctx->sm_count;
    if (base_blocks < want_blocks && b->max_kv_len > 512) {
        long long by_blocks = (want_blocks + base_blocks - 1) / base_blocks;
        long long by_len = (b->max_kv_len + 255) / 256;
        int n = (int)(by_blocks < by_len ? by_blocks : by_len);
        const int split_keys = kn_cuda_div_up(kn_cuda_div_up(b->max_kv_len, n), SP_KC) * SP_KC;
        a.n_splits = kn_cuda_div_up(b->max_kv_len, split_keys);
    }
    const size_t row_heads = (size_t)b->n_rows * n_heads;
    rc = kn_cuda_attn_split_parts(be, op, row_heads, a.n_splits, head_dim, &a.part_o, &a.part_ml);
    if (rc != TN_OK)
        return rc;
    rc = kvt == KN_BF16       ? launch_split_vpw<__nv_bfloat16>(be, op, a, b, vpw)
       : kvt == KN_FP8_E4M3 ? launch_split_vpw<__nv_fp8_e4m3>(be, op, a, b, vpw)
                            : launch_split_vpw<float>(be, op, a, b, vpw);
    return kn_cuda_attn_split_finish(be, op, rc, out, a.part_o, a.part_ml, row_heads, a.n_splits, head_dim);
}
