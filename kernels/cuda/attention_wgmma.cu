/* Sink attention for prefill on Hopper's warpgroup tensor cores (wgmma,
 * sm_90a): bf16 Q, K, V and P, fp32 scores, softmax state and output
 * accumulation. Same function as attention_mma.cu's kernel (read
 * attention.cu's header for the sink rule and the GQA "query vectors"
 * v = row_local * G + g that share one KV head's tiles); what differs:
 *
 *  - Two consumer warpgroups per block; warpgroup w owns query vectors
 *    [64w, 64w + 64) of the block's 128. All query heads of one KV head
 *    sit in the same block, so each K/V tile is read once for the group.
 *  - Q (scaled by scale * log2(e), rounded to bf16) stays in registers as
 *    wgmma A fragments for the whole block; S = Q K^T is one m64n128k16
 *    wgmma chain per 128-key tile (K from shared memory), O += P V one
 *    m64n64k16 chain with P re-packed from the S accumulators in registers
 *    and V read MN-major (transposed) from shared memory. No shared memory
 *    for Q, S or P.
 *  - K/V tiles: 128 keys x 64 dims bf16 (16 KB each), 128-byte swizzled
 *    (wgmma.cuh), in a ring of stages, filled one of two ways:
 *      attn_wgmma_kernel (mode 1): every thread copies with 16-byte
 *        cp.async, 3 stages, one block barrier per tile;
 *      attn_wgmma_tma_kernel (mode 2): a producer warp issues one bulk
 *        tensor copy (TMA) per page into a 4-stage ring with full/empty
 *        mbarriers, the consumer warpgroups never wait for each other.
 *    Keys past the block's range and keys on unmapped pages are
 *    zero-filled (cp.async src-size 0; mode 2 copies such tiles with
 *    cp.async too), so NaN in an unwritten pool slot never reaches P V.
 *  - Masks only on tiles that cross a row's causal bound, window edge or
 *    the range end; key ranges start at the window's first key (tiles
 *    wholly before the window are never loaded), and a warpgroup skips the
 *    tiles none of its rows can see.
 *  - The sink enters each row's softmax state once, before the first key
 *    (kn_attn_row_init); the whole key range of a row is in one block, so
 *    there is no split to fold it into twice.
 *
 *  - Head_dim 128 (Qwen3; modes 6 and 7, mode 2's form): K/V tiles of two
 *    64-dim halves 16 KB apart, Q in shared memory the same way, S a chain
 *    over both halves, O += P V one m64n64k16 chain per half; 3 stages.
 *  - Mode 6 is mode 2 persistent: one block per SM takes a run of query
 *    tiles (window layers: consecutive ones, whose key ranges overlap and
 *    whose copies the producer issues while the consumers finish the tile
 *    before), or causal ones longest first; it skips the P V chunks of 16
 *    keys and the right half of S that no row of a warpgroup sees (a
 *    window's first and last tile, a causal diagonal).
 *  - Mode 8 is mode 6 with sliding-window layers streamed: a block's run
 *    of consecutive query tiles shares one pass over its keys
 *    (attn_wgmma_window_kernel).
 *  - Mode 9 is mode 5 with FlashAttention-3's ping-pong: the warpgroups
 *    take turns issuing their products (named barriers).
 *
 * Only bf16 pools and head_dim 64 (GPT-OSS), or 128 in modes 6-8;
 * kn_cuda_attention_wgmma_fits sends every other call to the earlier
 * kernels. */
#include <cuda.h>
#include <cuda_bf16.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include "kernels/cuda/attention_setup.cuh"
#include "kernels/cuda/attention_wgmma.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/paged_kv.cuh"
#include "kernels/cuda/tensor_map.cuh"
#include "kernels/cuda/wgmma.cuh"
extern "C" {
#include "kernels/attention.h"
}

namespace {

const int WG_ROWS = 64;                /* query vectors per warpgroup (the wgmma M) */
const int N_WG = 2;                    /* warpgroups per block */
const int WB_M = WG_ROWS * N_WG;       /* query vectors per block */
const int WB_N = 128;                  /* keys per tile */
const int WD = 64;                     /* head_dim of mode 1 (cp.async) */
const int STAGES = 3;                  /* K/V tiles in flight, mode 1 */
const int WB_THREADS = N_WG * 128;
/* One K or V tile of 128 keys x D dims, bf16: D / 64 column halves of
 * [128 keys][64 dims] (128-byte rows, swizzled), HALF_BYTES apart. */
const int HALF_BYTES = WB_N * 128;
template <int D> __host__ __device__ constexpr int tile_bytes() { return WB_N * D * 2; }
template <int D> __host__ __device__ constexpr int stage_bytes() { return 2 * tile_bytes<D>(); }
const int TILE_BYTES = tile_bytes<WD>();
const int STAGE_BYTES = stage_bytes<WD>();
/* 1024 bytes of slack: the swizzled tiles must start 1024-byte aligned */
const size_t WGMMA_SMEM_BYTES = (size_t)STAGES * STAGE_BYTES + 1024;

struct WgArgs {
    float *out;
    const float *q;
    const void *k_pool, *v_pool; /* bf16 */
    const int32_t *q_offset, *kv_len, *page_table;
    const float *sinks;
    int max_pages, n_pages, n_heads, n_kv_heads, group, page_size, window;
    float scale_log2;
    /* mode 6 (persistent): query tiles of the longest sequence, and how
     * many of them each block takes */
    int q_tiles, q_steps;
};

/* 16 bytes global -> shared; src_bytes 0 writes 16 zero bytes and reads
 * nothing. */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}


/* One block's place: sequence s, KV head kvh, query vectors [v0, v0 + bm)
 * of nvec, and the keys [kbeg, kend) they may see. */
struct BlockPlace {
    int s, kvh, q0, nvec, v0, first_pos, kbeg, kend;
};

/* Query tile `tile` (of bm vectors) of this block's sequence and KV head;
 * returns false when it has no query vectors. */
__device__ __forceinline__ bool block_place(const WgArgs &a, BlockPlace &b, int bm, int tile)
{
    b.s = blockIdx.z;
    b.kvh = blockIdx.y;
    if (tile < 0)
        return false;
    b.q0 = a.q_offset[b.s];
    const int nq = a.q_offset[b.s + 1] - b.q0;
    b.nvec = nq * a.group;
    b.v0 = tile * bm;
    if (b.v0 >= b.nvec)
        return false;
    b.first_pos = a.kv_len[b.s] - nq;
    kn_attn_key_range(a, b.first_pos, b.v0, bm, b.nvec, &b.kbeg, &b.kend);
    return true;
}

/* One consumer warpgroup's state: its query vectors [wv0, wv0 + 64), the
 * keys [wbeg, wend) they may see, this thread's two rows (warp rows g and
 * g + 8) as Q fragments, positions, softmax state and output
 * accumulators. */
template <int D> struct WgState {
    int wv0, wbeg, wend, pos_lo, pos_hi;
    bool active;
    int vrow[2], pos[2];
    float m[2], l[2];
    uint32_t qa[D / 16][4];
    float o[D / 64][32]; /* dims 64h.. of the output in o[h] */
};

/* Q_SMEM: instead of register fragments, this warpgroup's 64 x D Q tile
 * (scaled, bf16) into shared memory at qs (D / 64 halves of 64 x 64,
 * Q_HALF_BYTES apart), 128-byte swizzled like the K tiles (the wgmma A
 * operand from a descriptor); wtid is the thread's index in its
 * warpgroup. The caller syncs the warpgroup before the first wgmma. */
const int Q_HALF_BYTES = WG_ROWS * 128;
template <int D, bool Q_SMEM>
__device__ __forceinline__ void wg_init(const WgArgs &a, const BlockPlace &b, int wg, int wq, int g,
                                        int t, WgState<D> &w, uint32_t qs = 0, int wtid = 0)
{
    static_assert(D == 64 || Q_SMEM, "head_dim 128 keeps Q in shared memory");
    w.wv0 = b.v0 + wg * WG_ROWS;
    w.active = w.wv0 < b.nvec;
    w.wbeg = w.wend = 0;
    if (w.active)
        kn_attn_key_range(a, b.first_pos, w.wv0, WG_ROWS, b.nvec, &w.wbeg, &w.wend);
    w.pos_lo = b.first_pos + w.wv0 / a.group;
    w.pos_hi = w.wend - 1;
    w.vrow[0] = w.wv0 + wq * 16 + g;
    w.vrow[1] = w.vrow[0] + 8;
    const int G = a.group;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const float *qp = NULL;
        if (w.vrow[i] < b.nvec) {
            int rl = w.vrow[i] / G, gg = w.vrow[i] - rl * G;
            qp = a.q + ((size_t)(b.q0 + rl) * a.n_heads + b.kvh * G + gg) * D + 2 * t;
        }
#pragma unroll
        for (int ks = 0; ks < D / 16 && !Q_SMEM; ks++) {
            float2 lo = make_float2(0.f, 0.f), hi = make_float2(0.f, 0.f);
            if (qp) {
                lo = *(const float2 *)(qp + ks * 16);
                hi = *(const float2 *)(qp + ks * 16 + 8);
            }
            w.qa[ks][i] = kn_pack_bf16(lo.x * a.scale_log2, lo.y * a.scale_log2);
            w.qa[ks][2 + i] = kn_pack_bf16(hi.x * a.scale_log2, hi.y * a.scale_log2);
        }
        /* the sink's 1 goes into the l share of t == 0 only (the 4
         * threads of a row add their shares at the end) */
        kn_attn_row_init(a, b.kvh, w.vrow[i], b.nvec, b.first_pos, true, t == 0, w.pos[i], w.m[i],
                         w.l[i]);
    }
#pragma unroll
    for (int h = 0; h < D / 64; h++)
#pragma unroll
        for (int i = 0; i < 32; i++)
            w.o[h][i] = 0.f;
    if (Q_SMEM) {
        /* 64 rows x D / 8 chunks of 8 dims; thread wtid writes chunks
         * wtid + 128k; chunk c of a row is chunk c % 8 of half c / 8 */
        const int CPR = D / 8;
#pragma unroll
        for (int k = 0; k < WG_ROWS * CPR / 128; k++) {
            const int idx = wtid + 128 * k, r = idx / CPR, c = idx % CPR, v = w.wv0 + r;
            float4 x0 = make_float4(0.f, 0.f, 0.f, 0.f), x1 = x0;
            if (v < b.nvec) {
                int rl = v / G, gg = v - rl * G;
                const float *qp = a.q + ((size_t)(b.q0 + rl) * a.n_heads + b.kvh * G + gg) * D + c * 8;
                x0 = *(const float4 *)qp;
                x1 = *(const float4 *)(qp + 4);
            }
            const float sl = a.scale_log2;
            uint4 u;
            u.x = kn_pack_bf16(x0.x * sl, x0.y * sl);
            u.y = kn_pack_bf16(x0.z * sl, x0.w * sl);
            u.z = kn_pack_bf16(x1.x * sl, x1.y * sl);
            u.w = kn_pack_bf16(x1.z * sl, x1.w * sl);
            asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n"
                         ::"r"(qs + (c >> 3) * Q_HALF_BYTES + kn_sw128_offset(r, c & 7)),
                         "r"(u.x), "r"(u.y), "r"(u.z), "r"(u.w)
                         : "memory");
        }
        kn_fence_proxy_async_smem(); /* the stores, before wgmma reads them */
    }
}

/* Whether this warpgroup's rows see any key of the tile at j0. */
template <int D> __device__ __forceinline__ bool wg_sees(const WgState<D> &w, int j0)
{
    return w.active && j0 < w.wend && j0 + WB_N > w.wbeg;
}

/* 2^x on the special-function unit (ex2.approx.ftz: 2^-inf = 0, about
 * 2 ulp; P is rounded to bf16 next). */
__device__ __forceinline__ float fast_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Issues S = Q K^T for the tile at kaddr into sc: 64 rows x 128 keys, 16
 * dims per wgmma (+32 bytes along the swizzled K rows, + HALF_BYTES for
 * dims 64..127), committed as one group; the caller waits. narrow
 * (warpgroup-uniform; only when none of the rows sees a key of the
 * tile's right half, which the softmax then masks): the left 64 keys
 * alone, into sc[0..31] (the m64n64 accumulator layout is the first half
 * of the m64n128 one). */
template <int D, bool Q_SMEM>
__device__ __forceinline__ void wg_scores_issue(const WgState<D> &w, uint32_t kaddr, float (&sc)[WB_N / 2],
                                                uint32_t qs, bool narrow = false)
{
#pragma unroll
    for (int n = 0; n < WB_N / 2; n++)
        sc[n] = 0.f;
    float(&left)[32] = reinterpret_cast<float(&)[32]>(sc);
    kn_wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
        const uint32_t koff = (ks >> 2) * HALF_BYTES + (ks & 3) * 32;
        const uint64_t kdesc = kn_wgmma_desc_sw128(kaddr + koff, 16, 1024);
        if (Q_SMEM) { /* Q from shared memory at qs */
            const uint64_t qdesc = kn_wgmma_desc_sw128(qs + (ks >> 2) * Q_HALF_BYTES + (ks & 3) * 32, 16, 1024);
            if (narrow)
                kn_wgmma_m64n64k16_ss(left, qdesc, kdesc, ks > 0);
            else
                kn_wgmma_m64n128k16_ss(sc, qdesc, kdesc, ks > 0);
        } else if (narrow) {
            kn_wgmma_m64n64k16_rs<0>(left, w.qa[ks], kdesc, ks > 0);
        } else {
            kn_wgmma_m64n128k16_rs<0>(sc, w.qa[ks], kdesc, ks > 0);
        }
    }
    kn_wgmma_commit();
}

/* The scores sc of keys [j0, j0 + WB_N) into P in place (fp32, unscaled
 * probabilities) and the rows' softmax state (m, l); alpha gets the factor
 * the output must be rescaled by (the caller does it once no wgmma writes
 * the output). Keys at or past kend are masked. */
template <int D>
__device__ __forceinline__ void wg_softmax(const WgArgs &a, WgState<D> &w, float (&sc)[WB_N / 2], int j0,
                                           int kend, int t, float (&alpha)[2])
{
    /* Masks only where the tile crosses a row's causal bound or window
     * edge, or runs past kend (warpgroup-uniform test). */
    const bool need_mask = j0 + WB_N > w.pos_lo || j0 + WB_N > kend ||
                           (a.window > 0 && j0 <= w.pos_hi - a.window);
    if (need_mask) {
#pragma unroll
        for (int n = 0; n < WB_N / 8; n++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                int j = j0 + n * 8 + 2 * t + (c & 1), p = w.pos[c >> 1];
                bool vis = j < kend && j <= p && (a.window <= 0 || j > p - a.window);
                if (!vis)
                    sc[4 * n + c] = -INFINITY;
            }
    }

    /* Online softmax, rows g (i = 0: c0, c1) and g + 8 (i = 1: c2, c3). */
#pragma unroll
    for (int i = 0; i < 2; i++) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < WB_N / 8; n++)
            mx = fmaxf(mx, fmaxf(sc[4 * n + 2 * i], sc[4 * n + 2 * i + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        float m_new = fmaxf(w.m[i], mx);
        /* A row with nothing visible yet (no sink) keeps m = -inf: use 0
         * as the reference so every exp2 is of -inf, i.e. 0. */
        float m_ref = m_new == -INFINITY ? 0.f : m_new;
        alpha[i] = fast_exp2(w.m[i] - m_ref);
        float psum = 0.f;
#pragma unroll
        for (int n = 0; n < WB_N / 8; n++) {
            sc[4 * n + 2 * i] = fast_exp2(sc[4 * n + 2 * i] - m_ref);
            sc[4 * n + 2 * i + 1] = fast_exp2(sc[4 * n + 2 * i + 1] - m_ref);
            psum += sc[4 * n + 2 * i] + sc[4 * n + 2 * i + 1];
        }
        w.m[i] = m_new;
        w.l[i] = w.l[i] * alpha[i] + psum;
    }
}

/* P (fp32, the S accumulator layout) as bf16 A fragments: the fragment
 * for 16 keys is two adjacent 8-key blocks of S. */
__device__ __forceinline__ void pack_p(const float (&sc)[WB_N / 2], uint32_t (&pa)[WB_N / 16][4])
{
#pragma unroll
    for (int kk = 0; kk < WB_N / 16; kk++) {
        pa[kk][0] = kn_pack_bf16(sc[8 * kk + 0], sc[8 * kk + 1]);
        pa[kk][1] = kn_pack_bf16(sc[8 * kk + 2], sc[8 * kk + 3]);
        pa[kk][2] = kn_pack_bf16(sc[8 * kk + 4], sc[8 * kk + 5]);
        pa[kk][3] = kn_pack_bf16(sc[8 * kk + 6], sc[8 * kk + 7]);
    }
}

template <int D> __device__ __forceinline__ void wg_rescale(WgState<D> &w, const float (&alpha)[2])
{
#pragma unroll
    for (int h = 0; h < D / 64; h++)
#pragma unroll
        for (int n = 0; n < 8; n++) {
            w.o[h][4 * n + 0] *= alpha[0];
            w.o[h][4 * n + 1] *= alpha[0];
            w.o[h][4 * n + 2] *= alpha[1];
            w.o[h][4 * n + 3] *= alpha[1];
        }
}

/* Issues O += P V for the tile's V at vaddr: 16 keys per wgmma; V is
 * [key][dim] in shared memory, read transposed (MN-major), 16 keys = two
 * 1024-byte atoms; dims 64h.. (the tile's half h) into o[h]. One
 * committed group; the caller waits. Only the 16-key chunks kk in
 * [kk_lo, kk_hi) (warpgroup-uniform): the others' P is exactly 0. */
template <int D>
__device__ __forceinline__ void wg_pv_issue(WgState<D> &w, const uint32_t (&pa)[WB_N / 16][4], uint32_t vaddr,
                                            int kk_lo = 0, int kk_hi = WB_N / 16)
{
#pragma unroll
    for (int h = 0; h < D / 64; h++)
        kn_wgmma_fence_regs(w.o[h]);
    kn_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < WB_N / 16; kk++)
        if (kk >= kk_lo && kk < kk_hi)
#pragma unroll
            for (int h = 0; h < D / 64; h++)
                kn_wgmma_m64n64k16_rs<1>(w.o[h], pa[kk],
                                         kn_wgmma_desc_sw128(vaddr + h * HALF_BYTES + kk * 2048, 1024, 1024), 1);
    kn_wgmma_commit();
}

/* Waits for this warpgroup's products and keeps the output registers
 * behind the wait. */
template <int D> __device__ __forceinline__ void wg_o_settle(WgState<D> &w)
{
    kn_wgmma_wait<0>();
#pragma unroll
    for (int h = 0; h < D / 64; h++)
        kn_wgmma_fence_regs(w.o[h]);
}

/* The tile of keys [j0, j0 + WB_N) at shared addresses kaddr (K) and vaddr
 * (V), 128-byte swizzled, into this warpgroup's softmax state and output,
 * one product after the other (Q from shared memory at qs when Q_SMEM).
 * TRIM (mode 6): the 16-key chunks of P V no row of the warpgroup sees
 * are not issued, and S is computed for the left 64 keys alone when the
 * rows see none of the right 64 (a window's or a causal diagonal's last
 * tile). */
template <int D, bool Q_SMEM, bool TRIM>
__device__ __forceinline__ void wg_tile(const WgArgs &a, WgState<D> &w, uint32_t kaddr, uint32_t vaddr,
                                        int j0, int kend, int t, uint32_t qs = 0)
{
    float sc[WB_N / 2], alpha[2];
    uint32_t pa[WB_N / 16][4];
    int kk_lo = 0, kk_hi = WB_N / 16;
    if (TRIM) {
        kk_lo = max(0, (w.wbeg - j0) >> 4);
        kk_hi = min(WB_N / 16, (w.wend - j0 + 15) >> 4);
    }
    wg_scores_issue<D, Q_SMEM>(w, kaddr, sc, qs, TRIM && kk_hi <= WB_N / 32);
    kn_wgmma_wait<0>();
    kn_wgmma_fence_regs(sc);
    wg_softmax(a, w, sc, j0, kend, t, alpha);
    pack_p(sc, pa);
    wg_rescale(w, alpha);
    wg_pv_issue(w, pa, vaddr, kk_lo, kk_hi);
    wg_o_settle(w);
}

/* The rows' outputs: o / l, l summed over the 4 threads of a row. */
template <int D>
__device__ __forceinline__ void wg_store(const WgArgs &a, const BlockPlace &b, const WgState<D> &w, int t)
{
    const int G = a.group;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        float lsum = w.l[i];
        lsum += __shfl_xor_sync(0xffffffffu, lsum, 1);
        lsum += __shfl_xor_sync(0xffffffffu, lsum, 2);
        const int v = w.vrow[i];
        if (v >= b.nvec)
            continue;
        int rl = v / G, gg = v - rl * G;
        float inv = lsum > 0.f ? 1.f / lsum : 0.f;
        float *dst = a.out + ((size_t)(b.q0 + rl) * a.n_heads + b.kvh * G + gg) * D + 2 * t;
#pragma unroll
        for (int h = 0; h < D / 64; h++)
#pragma unroll
            for (int n = 0; n < 8; n++)
                *(float2 *)(dst + h * 64 + n * 8) =
                    make_float2(w.o[h][4 * n + 2 * i] * inv, w.o[h][4 * n + 2 * i + 1] * inv);
    }
}

/* Keys [j0, j0 + WB_N) of K and V into the tiles at kdst and vdst by
 * cp.async, 16 bytes per copy, threads lane0 .. lane0 + nthreads - 1 of
 * the block's copying threads; keys at or past kend and keys on unmapped
 * pages are zero-filled. Chunk c of a row (8 dims) is chunk c % 8 of the
 * tile's half c / 8. */
template <int D>
__device__ __forceinline__ void cp_async_tile(const WgArgs &a, const BlockPlace &b, uint32_t kdst,
                                              uint32_t vdst, int j0, int lane0, int nthreads)
{
    const __nv_bfloat16 *k_pool = (const __nv_bfloat16 *)a.k_pool;
    const __nv_bfloat16 *v_pool = (const __nv_bfloat16 *)a.v_pool;
    const int CPR = D / 8;
    for (int idx = lane0; idx < WB_N * CPR; idx += nthreads) {
        const int r = idx / CPR, c = idx % CPR, j = j0 + r;
        long long off = j < b.kend ? paged_kv_row(a.page_table, a.max_pages, a.n_pages, b.s, j, b.kvh,
                                                  a.n_kv_heads, D, a.page_size)
                                   : -1;
        const int bytes = off >= 0 ? 16 : 0;
        if (off < 0)
            off = 0;
        const uint32_t at = (c >> 3) * HALF_BYTES + kn_sw128_offset(r, c & 7);
        cp_async16(kdst + at, k_pool + off + c * 8, bytes);
        cp_async16(vdst + at, v_pool + off + c * 8, bytes);
    }
}

/* The cp.async kernel: every thread copies, a ring of STAGES tiles, one
 * block barrier per tile. */
__global__ void __launch_bounds__(WB_THREADS, 1) attn_wgmma_kernel(WgArgs a)
{
    extern __shared__ __align__(1024) uint8_t wg_smem[];
    const uint32_t smem = ((uint32_t)__cvta_generic_to_shared(wg_smem) + 1023u) & ~1023u;
    BlockPlace b;
    /* Later tiles see more keys under the causal mask: start them first. */
    if (!block_place(a, b, WB_M, gridDim.x - 1 - blockIdx.x))
        return;
    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, wq = (tid >> 5) & 3;
    const int g = lane >> 2, t = lane & 3;
    const int n_tiles = (b.kend - b.kbeg + WB_N - 1) / WB_N;
    WgState<WD> w;
    wg_init<WD, false>(a, b, wg, wq, g, t, w);

#pragma unroll
    for (int st = 0; st < STAGES - 1; st++) {
        if (st < n_tiles)
            cp_async_tile<WD>(a, b, smem + st * STAGE_BYTES, smem + st * STAGE_BYTES + TILE_BYTES,
                              b.kbeg + st * WB_N, tid, WB_THREADS);
        cp_async_commit();
    }
    for (int i = 0; i < n_tiles; i++) {
        cp_async_wait<STAGES - 2>(); /* this thread's copies of tile i landed */
        kn_fence_proxy_async_smem(); /* ... and are visible to wgmma */
        __syncthreads();             /* everyone's are; tile i - 1 is no longer read */
        if (i + STAGES - 1 < n_tiles) {
            const uint32_t st = smem + ((i + STAGES - 1) % STAGES) * STAGE_BYTES;
            cp_async_tile<WD>(a, b, st, st + TILE_BYTES, b.kbeg + (i + STAGES - 1) * WB_N, tid, WB_THREADS);
        }
        cp_async_commit();
        const int j0 = b.kbeg + i * WB_N;
        if (wg_sees(w, j0)) {
            const uint32_t kaddr = smem + (i % STAGES) * STAGE_BYTES;
            wg_tile<WD, false, false>(a, w, kaddr, kaddr + TILE_BYTES, j0, b.kend, t);
        }
    }
    cp_async_wait<0>();
    if (w.active)
        wg_store(a, b, w, t);
}

/* The TMA kernels. Each page of page_size tokens of one KV head is one
 * contiguous [page_size][64] bf16 box of the pool seen as a 2D tensor
 * [n_pages * n_kv_heads * page_size][64] (kmap, vmap: 128-byte swizzle),
 * so a 128-key tile is 128 / page_size box copies of K and as many of V,
 * completing on the stage's `full` mbarrier; the 8 consumer warps arrive
 * on its `empty` mbarrier when their wgmma have read it. Tiles start at a
 * multiple of page_size. A tile with a key at or past kv_len or an
 * unmapped page is copied by the producer warp with cp.async instead (zero
 * fill, as the other kernel), so unwritten slots never reach P V. Head_dim
 * 128 is two boxes per page, dims 0..63 and 64..127 (a 128-byte swizzled
 * box row is at most 64 bf16). */
const int PIPE_AHEAD = 2; /* modes 3, 4: tiles copied ahead of the one computed (4 stages - 2) */
/* The ring's stages: 4 of 32 KB for head_dim 64, 3 of 64 KB for 128. */
template <int D> __host__ __device__ constexpr int tma_stages() { return D == 64 ? 4 : 3; }
template <int D> __host__ __device__ constexpr int q_tile_bytes() { return WG_ROWS * D * 2; }
/* The ring, the Q tiles (3 warpgroups' for mode 4, 2 for head_dim 128),
 * the barriers; 1024 bytes of alignment slack. */
template <int D> __host__ __device__ constexpr size_t tma_smem_bytes()
{
    return (size_t)tma_stages<D>() * stage_bytes<D>() + (D == 64 ? 3 : 2) * q_tile_bytes<D>() + 1024 +
           2 * tma_stages<D>() * 8;
}

/* Tile i of the block (keys kbeg + 128 i ..) into ring slot `ring` (the
 * block's running count of tiles, which picks the stage and the barrier
 * phases), by one warp, after waiting for the stage to be released when
 * the ring has wrapped. Head_dim 128: each page is two boxes, dims 0..63
 * and 64..127, into the tile's two halves. */
template <int D>
__device__ __forceinline__ void tma_produce_tile(const WgArgs &a, const BlockPlace &b, const CUtensorMap *kmap,
                                                 const CUtensorMap *vmap, uint32_t smem, uint32_t bars, int ring,
                                                 int i, int lane)
{
    const int S = tma_stages<D>();
    const int ps = a.page_size, np = WB_N / ps;
    const int st = ring % S;
    const uint32_t full = bars + 8 * st, empty = bars + 8 * (S + st);
    const uint32_t kdst = smem + st * stage_bytes<D>(), vdst = kdst + tile_bytes<D>();
    if (ring >= S)
        kn_mbar_wait(empty, ((ring / S) - 1) & 1);
    const int j0 = b.kbeg + i * WB_N;
    /* lane l < np: page l of the tile */
    int row = 0;
    bool ok = true;
    if (lane < np) {
        const int key0 = j0 + lane * ps, pi = key0 / ps;
        int page = pi < a.max_pages ? a.page_table[(size_t)b.s * a.max_pages + pi] : -1;
        ok = key0 + ps <= a.kv_len[b.s] && page >= 0 && page < a.n_pages;
        row = (page * a.n_kv_heads + b.kvh) * ps;
    }
    if (__all_sync(0xffffffffu, ok)) {
        if (lane == 0)
            kn_mbar_arrive_expect_tx(full, 2 * tile_bytes<D>());
        __syncwarp();
        if (lane < np) {
#pragma unroll
            for (int h = 0; h < D / 64; h++) {
                kn_tma_load_2d(kdst + h * HALF_BYTES + lane * ps * 128, kmap, 64 * h, row, full);
                kn_tma_load_2d(vdst + h * HALF_BYTES + lane * ps * 128, vmap, 64 * h, row, full);
            }
        }
    } else {
        cp_async_tile<D>(a, b, kdst, vdst, j0, lane, 32);
        cp_async_commit();
        cp_async_wait<0>();
        kn_fence_proxy_async_smem();
        __syncwarp();
        if (lane == 0)
            kn_mbar_arrive(full);
    }
}

/* This warp's share of releasing a stage: after its wgmma have read it. */
template <int D> __device__ __forceinline__ void release_stage(uint32_t bars, int st, int lane)
{
    __syncwarp();
    if (lane == 0)
        kn_mbar_arrive(bars + 8 * (tma_stages<D>() + st));
}

/* The query tile a mode 6 block computes at its step `step`: with a
 * window every tile costs the same, so a block takes a run of consecutive
 * tiles (the producer streams the overlapping key ranges from L2); causal,
 * the longest tiles first, dealt out in a snake (block x takes ranks x,
 * 2 gx - 1 - x, 2 gx + x, ...) so the blocks' sums of tile lengths even
 * out. Negative or past q_tiles: nothing. */
__device__ __forceinline__ int persist_tile(const WgArgs &a, int step)
{
    if (a.window > 0)
        return blockIdx.x * a.q_steps + step;
    const int gx = gridDim.x, x = blockIdx.x;
    const int rank = step * gx + ((step & 1) ? gx - 1 - x : x);
    return a.q_tiles - 1 - rank;
}

/* Warps 0-7 are the two consumer warpgroups (three in mode 4).
 * PIPE = false (modes 2, 6, 7): 288 threads, warp 8 the producer; one
 * product after the other per tile.
 * PIPE = true (mode 3): each warpgroup issues tile i's S = Q K^T before
 * tile i-1's O += P V and computes tile i's softmax while that product
 * runs. That needs more than the 168 registers a thread may hold when 9
 * warps share an SM's four register files (3 on one), and a producer
 * warpgroup handing its registers over with setmaxnreg did not help
 * (ptxas still allotted the consumers 168 and spilled). So mode 3 has 8
 * warps (up to 255 registers) and warp 0 also produces: at the top of
 * tile i it copies tile i + 2, whose stage tile i - 2 freed (tile i - 1's
 * stage is held until its P V is done).
 * D = 128 (modes 6, 7): Q in shared memory, 3 stages of 64 KB.
 * PERSIST (mode 6): a block computes q_steps query tiles (persist_tile)
 * one after the other; the producer runs on into the next tile's keys
 * while the consumers finish, store and load the next Q, and the ring's
 * slots and barrier phases count on across the steps; with head_dim 64
 * the P V chunks and S halves no row sees are skipped (wg_tile's TRIM:
 * with head_dim 128 its live ranges spilled under the 168-register cap).
 * PP (mode 9, mode 5's form): FlashAttention-3's ping-pong between the two
 * warpgroups: each issues its tile's products (S of tile i, P V of tile
 * i - 1) only in its turn (named barrier 3 + wg, opened by the other's
 * bar.arrive once it has issued its own), so one warpgroup's softmax runs
 * while the other's products keep the tensor cores busy instead of both
 * drifting into their softmax together. Both warpgroups take a turn for
 * every tile of the block, seen or not, so the turns pair up; warpgroup 1
 * opens the first turn and skips its last arrive. */
template <int NWG, bool PIPE, bool PWARP, int D, bool PERSIST, bool PP = false>
__global__ void __launch_bounds__(PWARP ? NWG * 128 + 32 : NWG * 128, 1)
attn_wgmma_tma_kernel(const WgArgs a, const __grid_constant__ CUtensorMap kmap,
                      const __grid_constant__ CUtensorMap vmap)
{
    static_assert(D == 64 || (NWG == 2 && !PIPE && PWARP), "head_dim 128: mode 2's form only");
    static_assert(!PERSIST || (NWG == 2 && !PIPE && PWARP), "persistent: mode 2's form only");
    static_assert(!PP || (NWG == 2 && PIPE && PWARP && !PERSIST), "ping-pong: mode 5's form only");
    const int S = tma_stages<D>();
    /* modes 4 and 5 keep Q in shared memory: registers for a third
     * warpgroup (4), for the overlap under a producer warp's 168 cap (5);
     * head_dim 128: registers for the 64 x 128 output */
    const bool Q_SMEM = NWG == 3 || (PIPE && PWARP) || D == 128;
    extern __shared__ __align__(1024) uint8_t wg_smem[];
    const uint32_t smem = ((uint32_t)__cvta_generic_to_shared(wg_smem) + 1023u) & ~1023u;
    const uint32_t qsm = smem + S * stage_bytes<D>();          /* Q tiles */
    const uint32_t bars = qsm + (D == 64 ? 3 : 2) * q_tile_bytes<D>(); /* full[S], empty[S] */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    if (tid == 0) {
        for (int st = 0; st < S; st++) {
            kn_mbar_init(bars + 8 * st, 1);
            kn_mbar_init(bars + 8 * (S + st), NWG * 4);
        }
        kn_mbar_init_fence();
    }
    __syncthreads();

    const int wg = warp >> 2, wq = warp & 3, g = lane >> 2, t = lane & 3;
    const uint32_t qs = qsm + wg * q_tile_bytes<D>();
    const int steps = PERSIST ? a.q_steps : 1;
    int ring = 0; /* tiles through the ring so far (PIPE: one step, from 0) */
    for (int step = 0; step < steps; step++) {
        BlockPlace b;
        /* Later tiles see more keys under the causal mask: start them first. */
        const int tile = PERSIST ? persist_tile(a, step) : (int)(gridDim.x - 1 - blockIdx.x);
        if (!block_place(a, b, NWG * WG_ROWS, tile))
            continue;
        b.kbeg -= b.kbeg % a.page_size; /* tiles of whole pages (the keys before kbeg are masked) */
        const int n_tiles = (b.kend - b.kbeg + WB_N - 1) / WB_N;

        if (PWARP && warp == NWG * 4) {
            for (int i = 0; i < n_tiles; i++)
                tma_produce_tile<D>(a, b, &kmap, &vmap, smem, bars, ring + i, i, lane);
            ring += n_tiles;
            continue;
        }
        if (!PWARP && warp == 0)
            for (int i = 0; i < PIPE_AHEAD && i < n_tiles; i++)
                tma_produce_tile<D>(a, b, &kmap, &vmap, smem, bars, i, i, lane);

        WgState<D> w;
        if (Q_SMEM && step > 0) /* the warpgroup's last wgmma read this Q tile before it is rewritten */
            asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
        wg_init<D, Q_SMEM>(a, b, wg, wq, g, t, w, qs, tid & 127);
        if (Q_SMEM) /* this warpgroup's Q tile is written (named barrier 1 + wg) */
            asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
        if (!PIPE) {
            for (int i = 0; i < n_tiles; i++) {
                const int r = ring + i, st = r % S;
                const uint32_t kaddr = smem + st * stage_bytes<D>();
                /* wait even for a tile this warpgroup skips: the stage must not
                 * be released before its copies have landed */
                kn_mbar_wait(bars + 8 * st, (r / S) & 1);
                const int j0 = b.kbeg + i * WB_N;
                if (wg_sees(w, j0))
                    wg_tile<D, Q_SMEM, PERSIST && D == 64>(a, w, kaddr, kaddr + tile_bytes<D>(), j0, b.kend, t, qs);
                release_stage<D>(bars, st, lane);
            }
            ring += n_tiles;
        } else {
            /* pending: tile prev_st's P (pa_prev) still has its P V to issue,
             * and its stage to release after that. This tile's P stays fp32 in
             * sc until that P V has read pa_prev (registers: one S, one P). */
            bool pending = false;
            int prev_st = 0;
            float sc[WB_N / 2], alpha[2];
            uint32_t pa_prev[WB_N / 16][4];
            if (PP && wg == 1) /* warpgroup 0 takes the first turn */
                asm volatile("bar.arrive 3, 256;\n" ::: "memory");
            for (int i = 0; i < n_tiles; i++) {
                const int st = i % S, j0 = b.kbeg + i * WB_N;
                const uint32_t kaddr = smem + st * stage_bytes<D>();
                const bool sees = wg_sees(w, j0);
                if (!PWARP && warp == 0 && i + PIPE_AHEAD < n_tiles)
                    tma_produce_tile<D>(a, b, &kmap, &vmap, smem, bars, i + PIPE_AHEAD, i + PIPE_AHEAD, lane);
                if (!sees && pending) { /* past this warpgroup's keys: finish the last tile */
                    wg_pv_issue(w, pa_prev, smem + prev_st * stage_bytes<D>() + tile_bytes<D>());
                    wg_o_settle(w);
                    release_stage<D>(bars, prev_st, lane);
                    pending = false;
                }
                kn_mbar_wait(bars + 8 * st, (i / S) & 1);
                const bool pass_turn = PP && !(wg == 1 && i == n_tiles - 1);
                if (PP) /* this warpgroup's turn */
                    asm volatile("bar.sync %0, 256;\n" ::"r"(3 + wg) : "memory");
                if (!sees) {
                    if (pass_turn)
                        asm volatile("bar.arrive %0, 256;\n" ::"r"(4 - wg) : "memory");
                    release_stage<D>(bars, st, lane);
                    continue;
                }
                wg_scores_issue<D, Q_SMEM>(w, kaddr, sc, qs);
                if (pending)
                    wg_pv_issue(w, pa_prev, smem + prev_st * stage_bytes<D>() + tile_bytes<D>());
                if (pass_turn) /* products issued: the other warpgroup's turn */
                    asm volatile("bar.arrive %0, 256;\n" ::"r"(4 - wg) : "memory");
                if (pending) {
                    kn_wgmma_wait<1>(); /* S of this tile; the previous P V may still run */
                } else {
                    kn_wgmma_wait<0>();
                }
                kn_wgmma_fence_regs(sc);
                wg_softmax(a, w, sc, j0, b.kend, t, alpha);
                if (pending) {
                    wg_o_settle(w);
                    release_stage<D>(bars, prev_st, lane);
                }
                pack_p(sc, pa_prev);
                wg_rescale(w, alpha);
                prev_st = st;
                pending = true;
            }
            if (pending) {
                wg_pv_issue(w, pa_prev, smem + prev_st * stage_bytes<D>() + tile_bytes<D>());
                wg_o_settle(w);
                release_stage<D>(bars, prev_st, lane);
            }
        }
        if (w.active)
            wg_store(a, b, w, t);
    }
}

/* The fp32 Q rows of the query tile at b (128 vectors of D = 64: two
 * 128-byte lines each) prefetched into L2 by one warp: a window layer's
 * step is short, and its consumers' Q loads would otherwise wait on
 * memory with nothing to overlap. */
__device__ __forceinline__ void prefetch_q_tile(const WgArgs &a, const BlockPlace &b, int lane)
{
#pragma unroll
    for (int k = 0; k < N_WG * WG_ROWS * 2 / 32; k++) {
        const int idx = lane + 32 * k, v = b.v0 + (idx >> 1);
        if (v >= b.nvec)
            continue;
        const int rl = v / a.group, gg = v - rl * a.group;
        const float *p = a.q + ((size_t)(b.q0 + rl) * a.n_heads + b.kvh * a.group + gg) * WD + (idx & 1) * 32;
        asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
    }
}

/* Mode 8, sliding-window layers: a block takes a run of consecutive query
 * tiles of one (sequence, KV head), and its producer warp streams the
 * run's keys once, as 128-key tiles at multiples of 128 (kt = key / 128),
 * in order through the ring. Consecutive query tiles (128 / group
 * positions apart) share most of their window's keys, so each K/V tile is
 * copied once per block instead of once per query tile: a query tile
 * waits for the key tiles its range covers, and a tile's stage is released
 * only when the next query tile no longer needs it (each consumer warp
 * arrives once per key tile). Needs a query tile's range to span at most
 * the ring's stages (kn_cuda_attention_wgmma checks it: window 128 spans 3
 * tiles at most, the ring has 4). Head_dim 64, Q in registers, TRIM as
 * mode 6. */
__global__ void __launch_bounds__(N_WG * 128 + 32, 1)
attn_wgmma_window_kernel(const WgArgs a, const __grid_constant__ CUtensorMap kmap,
                         const __grid_constant__ CUtensorMap vmap)
{
    const int D = WD, S = tma_stages<WD>(), BM = N_WG * WG_ROWS;
    extern __shared__ __align__(1024) uint8_t wg_smem[];
    const uint32_t smem = ((uint32_t)__cvta_generic_to_shared(wg_smem) + 1023u) & ~1023u;
    const uint32_t bars = smem + S * stage_bytes<D>() + 3 * q_tile_bytes<D>(); /* full[S], empty[S] */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    if (tid == 0) {
        for (int st = 0; st < S; st++) {
            kn_mbar_init(bars + 8 * st, 1);
            kn_mbar_init(bars + 8 * (S + st), N_WG * 4);
        }
        kn_mbar_init_fence();
    }
    __syncthreads();

    /* The run: query tiles [t0, t1) of this sequence, keys from run.kbeg */
    const int t0 = blockIdx.x * a.q_steps;
    BlockPlace run;
    if (!block_place(a, run, BM, t0))
        return;
    const int t1 = min(t0 + a.q_steps, (run.nvec + BM - 1) / BM);
    const int kt_first = run.kbeg / WB_N;

    if (warp == N_WG * 4) { /* keys up to the last query tile's end */
        BlockPlace last;
        block_place(a, last, BM, t1 - 1);
        run.kbeg = kt_first * WB_N;
        run.kend = last.kend;
        const int n_kt = (run.kend - 1) / WB_N - kt_first + 1;
        int pf = t0; /* the next query tile whose Q to prefetch */
        for (int r = 0; r < n_kt; r++) {
            tma_produce_tile<D>(a, run, &kmap, &vmap, smem, bars, r, r, lane);
            /* Q of the query tiles starting at most 2 key tiles behind this
             * one: the producer runs up to the ring's 4 tiles ahead of the
             * consumers, so these are about the next ones they compute
             * (and no more than L2 holds for every block at once) */
            for (; pf < t1; pf++) {
                BlockPlace qb;
                block_place(a, qb, BM, pf);
                if (qb.kbeg / WB_N - kt_first > r - 2)
                    break;
                prefetch_q_tile(a, qb, lane);
            }
        }
        return;
    }
    const int wg = warp >> 2, wq = warp & 3, g = lane >> 2, t = lane & 3;
    int released = 0; /* key tiles (run-relative) this warp has released */
    for (int tile = t0; tile < t1; tile++) {
        /* keep: the first key tile the next query tile needs (all released
         * after the last) */
        int keep = INT_MAX;
        if (tile + 1 < t1) {
            BlockPlace nb;
            block_place(a, nb, BM, tile + 1);
            keep = nb.kbeg / WB_N - kt_first;
        }
        BlockPlace b;
        block_place(a, b, BM, tile);
        const int lo = b.kbeg / WB_N - kt_first, hi = (b.kend - 1) / WB_N - kt_first;
        keep = min(keep, hi + 1);
        WgState<D> w;
        wg_init<D, false>(a, b, wg, wq, g, t, w);
        for (int r = lo; r <= hi; r++) {
            const int st = r % S;
            /* a tile the previous query tile waited for: its phase is still
             * the completed one (the stage is not released yet) */
            kn_mbar_wait(bars + 8 * st, (r / S) & 1);
            const int j0 = (kt_first + r) * WB_N;
            if (wg_sees(w, j0))
                wg_tile<D, false, true>(a, w, smem + st * stage_bytes<D>(),
                                        smem + st * stage_bytes<D>() + tile_bytes<D>(), j0, b.kend, t);
        }
        /* release what the next query tile does not need */
        for (; released < keep; released++)
            release_stage<D>(bars, released % S, lane);
        if (w.active)
            wg_store(a, b, w, t);
    }
}

} // namespace

bool kn_cuda_attention_wgmma_fits(const kn_seq_batch *b, int n_heads, int n_kv_heads, int head_dim,
                                  int page_size, int mode, const float *out, const float *q,
                                  const kn_kv_pools *pools)
{
    long long nvec_max = (long long)b->max_q_len * (n_heads / n_kv_heads);
    const bool d128 = head_dim == 128 && mode >= 6 && mode <= 8 && kn_cuda_attention_wgmma_tma_fits(page_size) &&
                      kn_cuda_aligned16(q);
    return (head_dim == WD || d128) && pools->dtype == KN_BF16 && nvec_max > 16 &&
           ((uintptr_t)out & 7) == 0 && ((uintptr_t)q & 7) == 0 &&
           kn_cuda_aligned16(pools->k) && kn_cuda_aligned16(pools->v);
}

bool kn_cuda_attention_wgmma_tma_fits(int page_size)
{
    return page_size >= 8 && page_size <= WB_N && WB_N % page_size == 0;
}

/* One launch of a TMA form. PERSIST (modes 6, 8): at most one block per
 * SM (a block fills an SM's shared memory), each taking q_steps of the
 * longest sequence's query tiles, so every block starts at once and none
 * waits for a second wave. WINDOW: mode 8's window-stream kernel (head_dim
 * 64, PERSIST). */
template <int NWG, bool PIPE, bool PWARP, int D, bool PERSIST, bool WINDOW = false, bool PP = false>
static int launch_tma(const kn_backend *be, const char *op, WgArgs a, const kn_seq_batch *b,
                      const CUtensorMap &kmap, const CUtensorMap &vmap)
{
    static_assert(!WINDOW || (PERSIST && D == WD && NWG == N_WG && PWARP && !PIPE), "mode 8's form");
    const int threads = PWARP ? NWG * 128 + 32 : NWG * 128;
    const size_t smem = tma_smem_bytes<D>();
    void (*kernel)(const WgArgs, const CUtensorMap, const CUtensorMap) =
        WINDOW ? attn_wgmma_window_kernel : attn_wgmma_tma_kernel<NWG, PIPE, PWARP, D, PERSIST, PP>;
    KN_CUDA_TRY(op, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    long long q_tiles = kn_cuda_div_up((long long)b->max_q_len * a.group, NWG * WG_ROWS);
    long long gx = q_tiles, steps = 1;
    if (PERSIST) {
        long long slots = (long long)a.n_kv_heads * b->n_seqs;
        gx = kn_cuda_ctx_of(be)->sm_count / slots;
        gx = gx < 1 ? 1 : gx > q_tiles ? q_tiles : gx;
        steps = kn_cuda_div_up(q_tiles, gx);
        gx = kn_cuda_div_up(q_tiles, steps);
    }
    a.q_tiles = (int)q_tiles;
    a.q_steps = (int)steps;
    dim3 grid((unsigned)gx, a.n_kv_heads, b->n_seqs);
    kernel<<<grid, threads, smem, kn_cuda_stream(be)>>>(a, kmap, vmap);
    KN_CUDA_LAUNCH_CHECK(op, WINDOW ? "attn_wgmma_window_kernel" : "attn_wgmma_tma_kernel");
    return TN_OK;
}

/* Whether mode 8's window-stream kernel takes a window: a query tile's
 * key range (its positions plus window - 1 keys) must span at most the
 * ring's stages of 128-key tiles. */
static bool window_streams(int group, int window)
{
    if (window <= 0)
        return false;
    const long long len_max = (long long)N_WG * WG_ROWS / group + 1 + window;
    return (len_max + WB_N - 2) / WB_N + 1 <= tma_stages<WD>();
}

int kn_cuda_attention_wgmma(const kn_backend *be, const char *op, float *out, const float *q,
                            const kn_kv_pools *pools, const kn_seq_batch *b, int n_heads,
                            int n_kv_heads, int head_dim, int page_size, float scale,
                            const float *sinks, int window, int mode)
{
    if (mode < 1 || mode > KN_CUDA_ATTN_WGMMA_MODES)
        return kn_arg_error(op, "wgmma attention mode %d is not 1..%d", mode, KN_CUDA_ATTN_WGMMA_MODES);
    if (pools->dtype != KN_BF16 || (head_dim != WD && head_dim != 128))
        return kn_arg_error(op, "the wgmma attention kernel takes head_dim 64 or 128 over bf16 pools, "
                                "not head_dim %d over %s pools",
                            head_dim, kn_dtype_name(pools->dtype));
    if (head_dim == 128 && (mode < 6 || mode > 8 || !kn_cuda_aligned16(q)))
        return kn_arg_error(op, "head_dim 128 takes wgmma attention modes 6..8 with Q 16-byte aligned, "
                                "not mode %d%s", mode, kn_cuda_aligned16(q) ? "" : " (Q not aligned)");
    if ((mode == 4 || mode == 5 || mode == 9) && !kn_cuda_aligned16(q))
        mode = mode == 4 ? 3 : 2; /* modes 4, 5, 9 read Q rows 16 bytes at a time */
    if (mode > 1 && !kn_cuda_attention_wgmma_tma_fits(page_size))
        return kn_arg_error(op, "the TMA attention kernel takes page sizes 8..%d dividing %d, not %d",
                            WB_N, WB_N, page_size);
    WgArgs a;
    kn_attn_args_fill(a, out, q, pools->k, pools->v, b, n_heads, n_kv_heads, page_size, scale,
                      sinks, window);
    a.q_tiles = 0;
    a.q_steps = 1;
    kn_cuda_ctx *ctx = kn_cuda_ctx_of(be);
    if (mode == 1) {
        dim3 grid(kn_cuda_div_up((long long)b->max_q_len * a.group, WB_M), n_kv_heads, b->n_seqs);
        KN_CUDA_TRY(op, cudaFuncSetAttribute(attn_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)WGMMA_SMEM_BYTES));
        attn_wgmma_kernel<<<grid, WB_THREADS, WGMMA_SMEM_BYTES, kn_cuda_stream(be)>>>(a);
        KN_CUDA_LAUNCH_CHECK(op, "attn_wgmma_kernel");
        ctx->attn_wgmma_launches[0]++;
        return TN_OK;
    }
    /* one box a page */
    CUtensorMap kmap, vmap;
    int rc = kn_cuda_kv_pool_maps(be, op, pools, (long long)b->n_pages * n_kv_heads * page_size, head_dim, page_size,
                                  &kmap, &vmap);
    if (rc != TN_OK)
        return rc;
    const bool d128 = head_dim == 128;
    if (mode == 2 || (mode == 7 && !d128))
        rc = launch_tma<N_WG, false, true, WD, false>(be, op, a, b, kmap, vmap);
    else if (mode == 3)
        rc = launch_tma<N_WG, true, false, WD, false>(be, op, a, b, kmap, vmap);
    else if (mode == 4)
        rc = launch_tma<3, true, false, WD, false>(be, op, a, b, kmap, vmap);
    else if (mode == 5)
        rc = launch_tma<N_WG, true, true, WD, false>(be, op, a, b, kmap, vmap);
    else if (mode == 9)
        rc = launch_tma<N_WG, true, true, WD, false, false, true>(be, op, a, b, kmap, vmap);
    else if (mode == 8 && !d128 && window_streams(a.group, window))
        rc = launch_tma<N_WG, false, true, WD, true, true>(be, op, a, b, kmap, vmap);
    else if (mode == 6 || mode == 8)
        rc = d128 ? launch_tma<N_WG, false, true, 128, true>(be, op, a, b, kmap, vmap)
                  : launch_tma<N_WG, false, true, WD, true>(be, op, a, b, kmap, vmap);
    else
        rc = launch_tma<N_WG, false, true, 128, false>(be, op, a, b, kmap, vmap);
    if (rc != TN_OK)
        return rc;
    ctx->attn_wgmma_launches[mode - 1]++;
    return TN_OK;
}
