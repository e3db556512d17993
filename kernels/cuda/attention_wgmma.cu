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
 * Only bf16 pools and head_dim 64 (GPT-OSS); kn_cuda_attention_wgmma_fits
 * sends every other call to the earlier kernels. */
#include <cuda.h>
#include <cuda_bf16.h>
#include <math.h>
#include <stdio.h>
#include "kernels/cuda/attention_setup.cuh"
#include "kernels/cuda/attention_wgmma.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/paged_kv.cuh"
#include "kernels/cuda/wgmma.cuh"
extern "C" {
#include "kernels/attention.h"
}

namespace {

const int WG_ROWS = 64;                /* query vectors per warpgroup (the wgmma M) */
const int N_WG = 2;                    /* warpgroups per block */
const int WB_M = WG_ROWS * N_WG;       /* query vectors per block */
const int WB_N = 128;                  /* keys per tile */
const int WD = 64;                     /* head_dim */
const int STAGES = 3;                  /* K/V tiles in flight */
const int WB_THREADS = N_WG * 128;
const int TILE_BYTES = WB_N * WD * 2;  /* one K or V tile, bf16 */
const int STAGE_BYTES = 2 * TILE_BYTES;
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

/* mbarrier and bulk-tensor-copy wrappers (inline PTX) for the TMA kernel. */
__device__ __forceinline__ void mbar_init(uint32_t bar, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, int parity)
{
    uint32_t done;
    asm volatile("{\n.reg .pred P1;\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 P1, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, P1;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
    return done != 0;
}
/* Waits until the phase with this parity has completed. A wait past
 * about 2^34 cycles (seconds; a tile takes microseconds) traps: a broken
 * pipeline shows as a launch failure instead of a hang. */
__device__ __forceinline__ void mbar_wait(uint32_t bar, int parity)
{
    if (mbar_try_wait(bar, parity))
        return;
    const long long t0 = clock64();
    while (!mbar_try_wait(bar, parity))
        if (clock64() - t0 > (1LL << 34))
            __trap();
}
/* Box (0, row) of a 2D tensor map into shared memory at dst, completing
 * its bytes on mbarrier bar. */
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, int row, uint32_t bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(0), "r"(row), "r"(bar)
                 : "memory");
}

/* One block's place: sequence s, KV head kvh, query vectors [v0, v0 + bm)
 * of nvec, and the keys [kbeg, kend) they may see. */
struct BlockPlace {
    int s, kvh, q0, nvec, v0, first_pos, kbeg, kend;
};

/* Returns false when the block has no query vectors. */
__device__ __forceinline__ bool block_place(const WgArgs &a, BlockPlace &b, int bm)
{
    b.s = blockIdx.z;
    b.kvh = blockIdx.y;
    /* Later tiles see more keys under the causal mask: start them first. */
    const int tile = gridDim.x - 1 - blockIdx.x;
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
struct WgState {
    int wv0, wbeg, wend, pos_lo, pos_hi;
    bool active;
    int vrow[2], pos[2];
    float m[2], l[2];
    uint32_t qa[WD / 16][4];
    float o[WD / 2];
};

/* Q_SMEM: instead of register fragments, this warpgroup's 64 x 64 Q tile
 * (scaled, bf16) into shared memory at qs, 128-byte swizzled like the K
 * tiles (the wgmma A operand from a descriptor); wtid is the thread's index
 * in its warpgroup. The caller syncs the warpgroup before the first wgmma. */
template <bool Q_SMEM>
__device__ __forceinline__ void wg_init(const WgArgs &a, const BlockPlace &b, int wg, int wq, int g,
                                        int t, WgState &w, uint32_t qs = 0, int wtid = 0)
{
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
            qp = a.q + ((size_t)(b.q0 + rl) * a.n_heads + b.kvh * G + gg) * WD + 2 * t;
        }
#pragma unroll
        for (int ks = 0; ks < WD / 16 && !Q_SMEM; ks++) {
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
    for (int i = 0; i < WD / 2; i++)
        w.o[i] = 0.f;
    if (Q_SMEM) {
        /* 64 rows x 8 chunks of 8 dims; thread wtid writes chunks wtid + 128k */
#pragma unroll
        for (int k = 0; k < WG_ROWS * 8 / 128; k++) {
            const int idx = wtid + 128 * k, r = idx >> 3, c = idx & 7, v = w.wv0 + r;
            float4 x0 = make_float4(0.f, 0.f, 0.f, 0.f), x1 = x0;
            if (v < b.nvec) {
                int rl = v / G, gg = v - rl * G;
                const float *qp = a.q + ((size_t)(b.q0 + rl) * a.n_heads + b.kvh * G + gg) * WD + c * 8;
                x0 = *(const float4 *)qp;
                x1 = *(const float4 *)(qp + 4);
            }
            const float sl = a.scale_log2;
            uint4 u;
            u.x = kn_pack_bf16(x0.x * sl, x0.y * sl);
            u.y = kn_pack_bf16(x0.z * sl, x0.w * sl);
            u.z = kn_pack_bf16(x1.x * sl, x1.y * sl);
            u.w = kn_pack_bf16(x1.z * sl, x1.w * sl);
            asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(qs + kn_sw128_offset(r, c)),
                         "r"(u.x), "r"(u.y), "r"(u.z), "r"(u.w)
                         : "memory");
        }
        kn_fence_proxy_async_smem(); /* the stores, before wgmma reads them */
    }
}

/* Whether this warpgroup's rows see any key of the tile at j0. */
__device__ __forceinline__ bool wg_sees(const WgState &w, int j0)
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
 * dims per wgmma (+32 bytes along the swizzled K rows), committed as one
 * group; the caller waits. */
template <bool Q_SMEM>
__device__ __forceinline__ void wg_scores_issue(const WgState &w, uint32_t kaddr, float (&sc)[WB_N / 2],
                                                uint32_t qs)
{
#pragma unroll
    for (int n = 0; n < WB_N / 2; n++)
        sc[n] = 0.f;
    kn_wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < WD / 16; ks++)
        if (Q_SMEM) /* Q from shared memory at qs */
            kn_wgmma_m64n128k16_ss(sc, kn_wgmma_desc_sw128(qs + ks * 32, 16, 1024),
                                   kn_wgmma_desc_sw128(kaddr + ks * 32, 16, 1024), ks > 0);
        else
            kn_wgmma_m64n128k16_rs<0>(sc, w.qa[ks], kn_wgmma_desc_sw128(kaddr + ks * 32, 16, 1024), ks > 0);
    kn_wgmma_commit();
}

/* The scores sc of keys [j0, j0 + WB_N) into P in place (fp32, unscaled
 * probabilities) and the rows' softmax state (m, l); alpha gets the factor
 * the output must be rescaled by (the caller does it once no wgmma writes
 * the output). Keys at or past kend are masked. */
__device__ __forceinline__ void wg_softmax(const WgArgs &a, WgState &w, float (&sc)[WB_N / 2], int j0,
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

__device__ __forceinline__ void wg_rescale(WgState &w, const float (&alpha)[2])
{
#pragma unroll
    for (int n = 0; n < WD / 8; n++) {
        w.o[4 * n + 0] *= alpha[0];
        w.o[4 * n + 1] *= alpha[0];
        w.o[4 * n + 2] *= alpha[1];
        w.o[4 * n + 3] *= alpha[1];
    }
}

/* Issues O += P V for the tile's V at vaddr: 16 keys per wgmma; V is
 * [key][dim] in shared memory, read transposed (MN-major), 16 keys = two
 * 1024-byte atoms. One committed group; the caller waits. */
__device__ __forceinline__ void wg_pv_issue(WgState &w, const uint32_t (&pa)[WB_N / 16][4], uint32_t vaddr)
{
    kn_wgmma_fence_regs(w.o);
    kn_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < WB_N / 16; kk++)
        kn_wgmma_m64n64k16_rs<1>(w.o, pa[kk], kn_wgmma_desc_sw128(vaddr + kk * 2048, 1024, 1024), 1);
    kn_wgmma_commit();
}

/* The tile of keys [j0, j0 + WB_N) at shared addresses kaddr (K) and vaddr
 * (V), 128-byte swizzled, into this warpgroup's softmax state and output,
 * one product after the other. */
__device__ __forceinline__ void wg_tile(const WgArgs &a, WgState &w, uint32_t kaddr, uint32_t vaddr,
                                        int j0, int kend, int t)
{
    float sc[WB_N / 2], alpha[2];
    uint32_t pa[WB_N / 16][4];
    wg_scores_issue<false>(w, kaddr, sc, 0);
    kn_wgmma_wait<0>();
    kn_wgmma_fence_regs(sc);
    wg_softmax(a, w, sc, j0, kend, t, alpha);
    pack_p(sc, pa);
    wg_rescale(w, alpha);
    wg_pv_issue(w, pa, vaddr);
    kn_wgmma_wait<0>();
    kn_wgmma_fence_regs(w.o);
}

/* The rows' outputs: o / l, l summed over the 4 threads of a row. */
__device__ __forceinline__ void wg_store(const WgArgs &a, const BlockPlace &b, const WgState &w, int t)
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
        float *dst = a.out + ((size_t)(b.q0 + rl) * a.n_heads + b.kvh * G + gg) * WD + 2 * t;
#pragma unroll
        for (int n = 0; n < WD / 8; n++)
            *(float2 *)(dst + n * 8) = make_float2(w.o[4 * n + 2 * i] * inv, w.o[4 * n + 2 * i + 1] * inv);
    }
}

/* Keys [j0, j0 + WB_N) of K and V into the tiles at kdst and vdst by
 * cp.async, 16 bytes per copy, threads lane0 .. lane0 + nthreads - 1 of
 * the block's copying threads; keys at or past kend and keys on unmapped
 * pages are zero-filled. */
__device__ __forceinline__ void cp_async_tile(const WgArgs &a, const BlockPlace &b, uint32_t kdst,
                                              uint32_t vdst, int j0, int lane0, int nthreads)
{
    const __nv_bfloat16 *k_pool = (const __nv_bfloat16 *)a.k_pool;
    const __nv_bfloat16 *v_pool = (const __nv_bfloat16 *)a.v_pool;
    for (int idx = lane0; idx < WB_N * 8; idx += nthreads) {
        const int r = idx >> 3, c = idx & 7, j = j0 + r;
        long long off = j < b.kend ? paged_kv_row(a.page_table, a.max_pages, a.n_pages, b.s, j, b.kvh,
                                                  a.n_kv_heads, WD, a.page_size)
                                   : -1;
        const int bytes = off >= 0 ? 16 : 0;
        if (off < 0)
            off = 0;
        const uint32_t at = kn_sw128_offset(r, c);
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
    if (!block_place(a, b, WB_M))
        return;
    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, wq = (tid >> 5) & 3;
    const int g = lane >> 2, t = lane & 3;
    const int n_tiles = (b.kend - b.kbeg + WB_N - 1) / WB_N;
    WgState w;
    wg_init<false>(a, b, wg, wq, g, t, w);

#pragma unroll
    for (int st = 0; st < STAGES - 1; st++) {
        if (st < n_tiles)
            cp_async_tile(a, b, smem + st * STAGE_BYTES, smem + st * STAGE_BYTES + TILE_BYTES,
                          b.kbeg + st * WB_N, tid, WB_THREADS);
        cp_async_commit();
    }
    for (int i = 0; i < n_tiles; i++) {
        cp_async_wait<STAGES - 2>(); /* this thread's copies of tile i landed */
        kn_fence_proxy_async_smem(); /* ... and are visible to wgmma */
        __syncthreads();             /* everyone's are; tile i - 1 is no longer read */
        if (i + STAGES - 1 < n_tiles) {
            const uint32_t st = smem + ((i + STAGES - 1) % STAGES) * STAGE_BYTES;
            cp_async_tile(a, b, st, st + TILE_BYTES, b.kbeg + (i + STAGES - 1) * WB_N, tid, WB_THREADS);
        }
        cp_async_commit();
        const int j0 = b.kbeg + i * WB_N;
        if (wg_sees(w, j0)) {
            const uint32_t kaddr = smem + (i % STAGES) * STAGE_BYTES;
            wg_tile(a, w, kaddr, kaddr + TILE_BYTES, j0, b.kend, t);
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
 * fill, as the other kernel), so unwritten slots never reach P V.
 *
 * Warps 0-7 are the two consumer warpgroups.
 * PIPE = false (mode 2): 288 threads, warp 8 the producer; one product
 * after the other per tile.
 * PIPE = true (mode 3): each warpgroup issues tile i's S = Q K^T before
 * tile i-1's O += P V and computes tile i's softmax while that product
 * runs. That needs more than the 168 registers a thread may hold when 9
 * warps share an SM's four register files (3 on one), and a producer
 * warpgroup handing its registers over with setmaxnreg did not help
 * (ptxas still allotted the consumers 168 and spilled). So mode 3 has 8
 * warps (up to 255 registers) and warp 0 also produces: at the top of
 * tile i it copies tile i + TMA_STAGES - 2, whose stage tile i - 2 freed
 * (tile i - 1's stage is held until its P V is done). */
const int TMA_STAGES = 4;
const int PIPE_AHEAD = TMA_STAGES - 2; /* modes 3, 4: tiles copied ahead of the one computed */
const int Q_TILE_BYTES = WG_ROWS * WD * 2;
/* The ring, mode 4's Q tiles (3 warpgroups), the barriers; 1024 bytes of
 * alignment slack. */
const size_t TMA_SMEM_BYTES = (size_t)TMA_STAGES * STAGE_BYTES + 3 * Q_TILE_BYTES + 1024 + 2 * TMA_STAGES * 8;

/* Tile i of the block into its stage of the ring, by one warp (after
 * waiting for the stage to be released when the ring has wrapped). */
__device__ __forceinline__ void tma_produce_tile(const WgArgs &a, const BlockPlace &b, const CUtensorMap *kmap,
                                                 const CUtensorMap *vmap, uint32_t smem, uint32_t bars, int i,
                                                 int lane)
{
    const int ps = a.page_size, np = WB_N / ps;
    const int st = i % TMA_STAGES;
    const uint32_t full = bars + 8 * st, empty = bars + 8 * (TMA_STAGES + st);
    const uint32_t kdst = smem + st * STAGE_BYTES, vdst = kdst + TILE_BYTES;
    if (i >= TMA_STAGES)
        mbar_wait(empty, ((i / TMA_STAGES) - 1) & 1);
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
            mbar_arrive_expect_tx(full, 2 * TILE_BYTES);
        __syncwarp();
        if (lane < np) {
            tma_load_2d(kdst + lane * ps * 128, kmap, row, full);
            tma_load_2d(vdst + lane * ps * 128, vmap, row, full);
        }
    } else {
        cp_async_tile(a, b, kdst, vdst, j0, lane, 32);
        cp_async_commit();
        cp_async_wait<0>();
        kn_fence_proxy_async_smem();
        __syncwarp();
        if (lane == 0)
            mbar_arrive(full);
    }
}

/* This warp's share of releasing a stage: after its wgmma have read it. */
__device__ __forceinline__ void release_stage(uint32_t bars, int st, int lane)
{
    __syncwarp();
    if (lane == 0)
        mbar_arrive(bars + 8 * (TMA_STAGES + st));
}

template <int NWG, bool PIPE, bool PWARP>
__global__ void __launch_bounds__(PWARP ? NWG * 128 + 32 : NWG * 128, 1)
attn_wgmma_tma_kernel(const WgArgs a, const __grid_constant__ CUtensorMap kmap,
                      const __grid_constant__ CUtensorMap vmap)
{
    /* modes 4 and 5 keep Q in shared memory: registers for a third
     * warpgroup (4), for the overlap under a producer warp's 168 cap (5) */
    const bool Q_SMEM = NWG == 3 || (PIPE && PWARP);
    extern __shared__ __align__(1024) uint8_t wg_smem[];
    const uint32_t smem = ((uint32_t)__cvta_generic_to_shared(wg_smem) + 1023u) & ~1023u;
    const uint32_t qsm = smem + TMA_STAGES * STAGE_BYTES; /* Q tiles, mode 4 */
    const uint32_t bars = qsm + 3 * Q_TILE_BYTES;         /* full[TMA_STAGES], empty[TMA_STAGES] */
    BlockPlace b;
    if (!block_place(a, b, NWG * WG_ROWS))
        return;
    b.kbeg -= b.kbeg % a.page_size; /* tiles of whole pages (the keys before kbeg are masked) */
    const int n_tiles = (b.kend - b.kbeg + WB_N - 1) / WB_N;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    if (tid == 0) {
        for (int st = 0; st < TMA_STAGES; st++) {
            mbar_init(bars + 8 * st, 1);
            mbar_init(bars + 8 * (TMA_STAGES + st), NWG * 4);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (PWARP && warp == NWG * 4) {
        for (int i = 0; i < n_tiles; i++)
            tma_produce_tile(a, b, &kmap, &vmap, smem, bars, i, lane);
        return;
    }
    if (!PWARP && warp == 0)
        for (int i = 0; i < PIPE_AHEAD && i < n_tiles; i++)
            tma_produce_tile(a, b, &kmap, &vmap, smem, bars, i, lane);

    const int wg = warp >> 2, wq = warp & 3, g = lane >> 2, t = lane & 3;
    const uint32_t qs = qsm + wg * Q_TILE_BYTES;
    WgState w;
    wg_init<Q_SMEM>(a, b, wg, wq, g, t, w, qs, tid & 127);
    if (Q_SMEM) /* this warpgroup's Q tile is written (named barrier 1 + wg) */
        asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
    if (!PIPE) {
        for (int i = 0; i < n_tiles; i++) {
            const int st = i % TMA_STAGES;
            const uint32_t kaddr = smem + st * STAGE_BYTES;
            /* wait even for a tile this warpgroup skips: the stage must not
             * be released before its copies have landed */
            mbar_wait(bars + 8 * st, (i / TMA_STAGES) & 1);
            const int j0 = b.kbeg + i * WB_N;
            if (wg_sees(w, j0))
                wg_tile(a, w, kaddr, kaddr + TILE_BYTES, j0, b.kend, t);
            release_stage(bars, st, lane);
        }
    } else {
        /* pending: tile prev_st's P (pa_prev) still has its P V to issue,
         * and its stage to release after that. This tile's P stays fp32 in
         * sc until that P V has read pa_prev (registers: one S, one P). */
        bool pending = false;
        int prev_st = 0;
        float sc[WB_N / 2], alpha[2];
        uint32_t pa_prev[WB_N / 16][4];
        for (int i = 0; i < n_tiles; i++) {
            const int st = i % TMA_STAGES, j0 = b.kbeg + i * WB_N;
            const uint32_t kaddr = smem + st * STAGE_BYTES;
            const bool sees = wg_sees(w, j0);
            if (!PWARP && warp == 0 && i + PIPE_AHEAD < n_tiles)
                tma_produce_tile(a, b, &kmap, &vmap, smem, bars, i + PIPE_AHEAD, lane);
            if (!sees && pending) { /* past this warpgroup's keys: finish the last tile */
                wg_pv_issue(w, pa_prev, smem + prev_st * STAGE_BYTES + TILE_BYTES);
                kn_wgmma_wait<0>();
                kn_wgmma_fence_regs(w.o);
                release_stage(bars, prev_st, lane);
                pending = false;
            }
            mbar_wait(bars + 8 * st, (i / TMA_STAGES) & 1);
            if (!sees) {
                release_stage(bars, st, lane);
                continue;
            }
            wg_scores_issue<Q_SMEM>(w, kaddr, sc, qs);
            if (pending) {
                wg_pv_issue(w, pa_prev, smem + prev_st * STAGE_BYTES + TILE_BYTES);
                kn_wgmma_wait<1>(); /* S of this tile; the previous P V may still run */
            } else {
                kn_wgmma_wait<0>();
            }
            kn_wgmma_fence_regs(sc);
            wg_softmax(a, w, sc, j0, b.kend, t, alpha);
            if (pending) {
                kn_wgmma_wait<0>();
                kn_wgmma_fence_regs(w.o);
                release_stage(bars, prev_st, lane);
            }
            pack_p(sc, pa_prev);
            wg_rescale(w, alpha);
            prev_st = st;
            pending = true;
        }
        if (pending) {
            wg_pv_issue(w, pa_prev, smem + prev_st * STAGE_BYTES + TILE_BYTES);
            kn_wgmma_wait<0>();
            kn_wgmma_fence_regs(w.o);
            release_stage(bars, prev_st, lane);
        }
    }
    if (w.active)
        wg_store(a, b, w, t);
}

} // namespace

bool kn_cuda_attention_wgmma_fits(const kn_seq_batch *b, int n_heads, int n_kv_heads, int head_dim,
                                  const float *out, const float *q, const kn_kv_pools *pools)
{
    long long nvec_max = (long long)b->max_q_len * (n_heads / n_kv_heads);
    return head_dim == WD && pools->dtype == KN_BF16 && nvec_max > 16 &&
           ((uintptr_t)out & 7) == 0 && ((uintptr_t)q & 7) == 0 &&
           kn_cuda_aligned16(pools->k) && kn_cuda_aligned16(pools->v);
}

bool kn_cuda_attention_wgmma_tma_fits(int page_size)
{
    return page_size >= 8 && page_size <= WB_N && WB_N % page_size == 0;
}

/* cuTensorMapEncodeTiled from the driver, looked up once per backend
 * (cudart does not export it; going through the runtime's entry point
 * keeps libcuda off the link line). */
typedef CUresult (*tensor_map_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                         const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                         const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                         CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static int tensor_map_encoder(const kn_backend *be, const char *op, tensor_map_encode_fn *fn)
{
    kn_cuda_ctx *ctx = kn_cuda_ctx_of(be);
    if (!ctx->tensor_map_encode) {
        cudaDriverEntryPointQueryResult q;
        void *p = NULL;
        cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                           cudaEnableDefault, &q);
        if (err != cudaSuccess)
            return kn_cuda_device_error(op, "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)", err);
        if (q != cudaDriverEntryPointSuccess || !p)
            return kn_arg_error(op, "the driver has no cuTensorMapEncodeTiled (query result %d)", (int)q);
        ctx->tensor_map_encode = p;
    }
    *fn = (tensor_map_encode_fn)ctx->tensor_map_encode;
    return TN_OK;
}

/* A pool as the 2D tensor [rows = n_pages * n_kv_heads * page_size][64]
 * bf16 with [page_size][64] boxes, 128-byte swizzled. */
static int pool_tensor_map(tensor_map_encode_fn encode, const char *op, CUtensorMap *map,
                           const void *pool, long long rows, int page_size)
{
    cuuint64_t dims[2] = { (cuuint64_t)WD, (cuuint64_t)rows };
    cuuint64_t strides[1] = { (cuuint64_t)WD * 2 };
    cuuint32_t box[2] = { (cuuint32_t)WD, (cuuint32_t)page_size };
    cuuint32_t elem_strides[2] = { 1, 1 };
    CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)pool, dims, strides, box,
                        elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "tandem: %s: cuTensorMapEncodeTiled failed (CUresult %d) for a pool of %lld rows, "
                        "page_size %d\n", op, (int)r, rows, page_size);
        return TN_ERR_DEVICE;
    }
    return TN_OK;
}

template <int NWG, bool PIPE, bool PWARP>
static int launch_tma(const kn_backend *be, const char *op, const WgArgs &a, const kn_seq_batch *b,
                      const CUtensorMap &kmap, const CUtensorMap &vmap)
{
    const int threads = PWARP ? NWG * 128 + 32 : NWG * 128;
    KN_CUDA_TRY(op, cudaFuncSetAttribute(attn_wgmma_tma_kernel<NWG, PIPE, PWARP>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)TMA_SMEM_BYTES));
    dim3 grid(kn_cuda_div_up((long long)b->max_q_len * a.group, NWG * WG_ROWS), a.n_kv_heads,
              b->n_seqs);
    attn_wgmma_tma_kernel<NWG, PIPE, PWARP><<<grid, threads, TMA_SMEM_BYTES, kn_cuda_stream(be)>>>(a, kmap, vmap);
    KN_CUDA_LAUNCH_CHECK(op, "attn_wgmma_tma_kernel");
    return TN_OK;
}

int kn_cuda_attention_wgmma(const kn_backend *be, const char *op, float *out, const float *q,
                            const kn_kv_pools *pools, const kn_seq_batch *b, int n_heads,
                            int n_kv_heads, int head_dim, int page_size, float scale,
                            const float *sinks, int window, int mode)
{
    if (head_dim != WD || pools->dtype != KN_BF16)
        return kn_arg_error(op, "the wgmma attention kernel takes head_dim %d over bf16 pools, "
                                "not head_dim %d over %s pools",
                            WD, head_dim, kn_dtype_name(pools->dtype));
    if (mode < 1 || mode > 5)
        return kn_arg_error(op, "wgmma attention mode %d is not 1..5", mode);
    if ((mode == 4 || mode == 5) && !kn_cuda_aligned16(q))
        mode = mode == 4 ? 3 : 2; /* modes 4, 5 read Q rows 16 bytes at a time */
    if (mode > 1 && !kn_cuda_attention_wgmma_tma_fits(page_size))
        return kn_arg_error(op, "the TMA attention kernel takes page sizes 8..%d dividing %d, not %d",
                            WB_N, WB_N, page_size);
    WgArgs a;
    kn_attn_args_fill(a, out, q, pools->k, pools->v, b, n_heads, n_kv_heads, page_size, scale,
                      sinks, window);
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
    tensor_map_encode_fn encode = NULL;
    int rc = tensor_map_encoder(be, op, &encode);
    if (rc != TN_OK)
        return rc;
    CUtensorMap kmap, vmap;
    long long rows = (long long)b->n_pages * n_kv_heads * page_size;
    if ((rc = pool_tensor_map(encode, op, &kmap, pools->k, rows, page_size)) != TN_OK ||
        (rc = pool_tensor_map(encode, op, &vmap, pools->v, rows, page_size)) != TN_OK)
        return rc;
    if (mode == 2)
        rc = launch_tma<N_WG, false, true>(be, op, a, b, kmap, vmap);
    else if (mode == 3)
        rc = launch_tma<N_WG, true, false>(be, op, a, b, kmap, vmap);
    else if (mode == 4)
        rc = launch_tma<3, true, false>(be, op, a, b, kmap, vmap);
    else
        rc = launch_tma<N_WG, true, true>(be, op, a, b, kmap, vmap);
    if (rc != TN_OK)
        return rc;
    ctx->attn_wgmma_launches[mode - 1]++;
    return TN_OK;
}
