/* The grouped FP8 expert GEMMs, warp-specialised for Hopper
 * (kn_cuda_moe_gemm_fp8's modes 7-9; moe_gemm_fp8.cu has modes 1-6 and
 * the shared steps: the per-token quantization of x and the m-tile
 * offsets from the routing's device offsets).
 *
 * Same function and tiles as mode 4 (64 routed rows x 256 weight rows,
 * K in steps of one 128-wide scale block, a persistent grid walking the
 * (m-tile, n-tile) pairs of all experts in m-major order, no host sync),
 * but the work is split by role, each block 3 warpgroups:
 *   - warpgroup 2, the producer: one thread issues the TMA copies
 *     (cp.async.bulk.tensor 2D, 128-byte swizzle: the layout wgmma reads)
 *     of every K block's A tile (64 x 128 codes) and its B tile (four
 *     64 x 128 boxes) into a ring of STAGES stages, each guarded by a
 *     `full` mbarrier (the copies' bytes) and an `empty` mbarrier (the 8
 *     consumer warps). It gives its registers away (setmaxnreg 40).
 *   - warpgroups 0 and 1, the consumers (setmaxnreg 232): all 64 rows of
 *     the tile times 128 of its weight rows each, one wgmma m64n128k32
 *     e4m3 chain per K block. Each K block is summed into a fresh
 *     accumulator set, and two sets alternate: the promotion of block
 *     kb - 1 (its sums times s_x[row] * s_w[col], added to the totals)
 *     runs while block kb's wgmma are in flight, so the tensor cores do
 *     not wait for the scale arithmetic.
 * A must be a plain 2D tensor for TMA, which cannot gather rows: gate_up's
 * token rows are first copied into position order (moe_ws_gather_kernel,
 * codes only; the consumers read the token scales through perm). The
 * down product's A is gate_up's output, already in position order.
 *
 * B's shared-memory tile: gate_up boxes are [gate 64w.., up 64w..] for
 * w = 0, 1 (activation columns c0 + 64w ..), so consumer w's 128 weight
 * rows are contiguous and its accumulator holds the gate and the up sums
 * of the same 64 activation columns (entry i gate, i + 32 up: mode 4's
 * wgmma fragment, moe_gemm_fp8.cu's Frag); down boxes are 64 consecutive
 * output rows each (consumer w: columns c0 + 128w ..). Rows past a box's
 * tensor read zeros (TMA's out-of-bounds fill) or a neighbour's rows:
 * finite codes whose products land in rows or columns the epilogue
 * masks. The epilogues are mode 4's: gate_up adds the bias, applies the
 * activation, takes each row's amax over the 128 activation columns of the
 * tile (both consumers, through shared memory and a named barrier of the
 * 256 consumer threads) and writes the down product's e4m3 codes and 1x128
 * scale; down writes fp32 rows.
 *
 * Deadlock freedom: the producer and both consumers walk the same tile
 * sequence and the same K blocks, so the i-th use of the ring (stage
 * i % STAGES, phase (i / STAGES) & 1) is the same copy for all of them.
 * The producer waits for `empty` of the phase before (a fresh mbarrier
 * counts as having completed it, so the first round passes), the
 * consumers wait for `full` of the phase and arrive on `empty` once each
 * of their warps' wgmma have read the stage. Every wait is bounded (a trap
 * after about 2^34 cycles, seconds), so a broken pipeline fails the
 * launch instead of hanging the GPU. */
#include <cuda.h>
#include <cuda_fp8.h>
#include <stdio.h>
#include "kernels/cuda/fp8_cuda.cuh"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/tensor_map.cuh"
#include "kernels/cuda/moe_gemm_fp8_ws.cuh"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/cuda/expert_act.cuh"
extern "C" {
#include "kernels/fp8.h"
}

namespace {

constexpr int BM = KN_MOE_WS_BM;  /* rows per tile */
constexpr int BN = 256;           /* weight rows per tile */
constexpr int BK = KN_FP8_BLOCK;  /* K per stage: one scale block, one 128-byte swizzled row */
constexpr int STAGES = 5;
constexpr int BOX_ROWS = 64;      /* rows per TMA box */
constexpr int A_BYTES = BM * BK;
constexpr int BOX_BYTES = BOX_ROWS * BK;
constexpr int STAGE_BYTES = A_BYTES + BN * BK;
constexpr int CONSUMER_THREADS = 256;
constexpr int THREADS = CONSUMER_THREADS + 128;
/* Registers per thread: what the compiler gets for 384 threads in one
 * block (65536 / 384, rounded down to 8), then the producer's 40 hand the
 * consumers enough for 232 (128 * 40 + 256 * 232 <= 65536). */
constexpr int LAUNCH_REGS = 168;
constexpr int PRODUCER_REGS = 40;
constexpr int CONSUMER_REGS = 232;
static_assert(128 * PRODUCER_REGS + CONSUMER_THREADS * CONSUMER_REGS <= 65536, "register split fits the SM");
static_assert((LAUNCH_REGS - PRODUCER_REGS) * 128 >= (CONSUMER_REGS - LAUNCH_REGS) * CONSUMER_THREADS,
              "the producer frees what the consumers take");
constexpr int AMAX_BYTES = 2 * 2 * BM * (int)sizeof(float); /* [tile parity][consumer][row] */
constexpr int BAR_BYTES = 2 * STAGES * 8;
/* + 1024: the stages start 1024-byte aligned (the swizzle atoms) */
constexpr size_t SMEM_BYTES = (size_t)STAGES * STAGE_BYTES + AMAX_BYTES + BAR_BYTES + 1024;
static_assert(STAGE_BYTES % 1024 == 0 && A_BYTES % 1024 == 0 && BOX_BYTES % 1024 == 0,
              "every box starts on a swizzle atom");
static_assert(SMEM_BYTES <= 227 * 1024, "fits an H100/H200 block's shared memory");

struct WsArgs {
    const float *as;    /* A scales: gate_up xs [token][nkb] (through perm), down aqs [pos][nkb] */
    const int *perm;    /* gate_up: position -> slot (token = slot / k_routes) */
    int k_routes;
    const float *ws;    /* the local experts' block scales, w_scales floats apart, sld per row */
    size_t w_scales;
    int sld;
    int w_rows;         /* weight rows per expert: gate_up 2*inter, down dim */
    int w_blocks;       /* 128-blocks of w_rows (scale rows per expert) */
    const float *bias;  /* gate_up bias [n_local][2*n_out] or NULL */
    int nkb;            /* 128-blocks of K */
    int n_out;          /* gate_up: inter (activation columns); down: dim */
    int n_tiles_n;
    const int *offsets, *tile_off;
    int n_local;
    uint8_t *aq;        /* gate_up out: codes [pos][ldq], scales [pos][kbq] */
    float *aqs;
    int ldq, kbq;
    float *y;           /* down out: [pos][n_out] */
    int act;
    float alpha, limit;
};

/* The 256 consumer threads only (barrier 0 is __syncthreads). */
__device__ __forceinline__ void consumers_sync()
{
    asm volatile("bar.sync 1, %0;\n" ::"n"(CONSUMER_THREADS) : "memory");
}

/* wgmma m64n128k32, e4m3 A and B from shared memory (both K-major,
 * 128-byte swizzle), fp32 D = A B + (scale_d ? D : 0). */
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t da, uint64_t db, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
                 "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "
                 "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
                 "%56, %57, %58, %59, %60, %61, %62, %63}, "
                 "%64, %65, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
                   "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
                   "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
                   "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
                   "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
                   "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
                   "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
                   "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(scale_d));
}

/* Tile `tile` of the m-major walk: its expert, first position and n-tile. */
struct TilePlace {
    int e, row0, rows, nt;
};
__device__ __forceinline__ TilePlace tile_place(const WsArgs &p, int tile)
{
    const int mt = tile / p.n_tiles_n;
    int lo = 0, hi = p.n_local - 1;
    while (lo < hi) { /* the expert of m-tile mt: last e with tile_off[e] <= mt */
        const int mid = (lo + hi + 1) >> 1;
        if (p.tile_off[mid] <= mt)
            lo = mid;
        else
            hi = mid - 1;
    }
    TilePlace t;
    t.e = lo;
    t.nt = tile - mt * p.n_tiles_n;
    t.row0 = p.offsets[lo] + (mt - p.tile_off[lo]) * BM;
    t.rows = min(BM, p.offsets[lo + 1] - t.row0);
    return t;
}

/* gate_up's A: xg[pos] = xq[perm[pos] / k] for the routed positions, one
 * warp per row, 16 bytes per lane per step (ld is a multiple of 128). */
__global__ void moe_ws_gather_kernel(uint8_t *xg, const uint8_t *xq, const int *perm, const int *offsets,
                                     int n_local, int k, int ld)
{
    const int lane = threadIdx.x & 31;
    const int first = offsets[0], last = offsets[n_local];
    const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
    for (long long pos = first + blockIdx.x * (long long)(blockDim.x >> 5) + (threadIdx.x >> 5); pos < last;
         pos += warps) {
        const uint4 *src = (const uint4 *)(xq + (size_t)(perm[pos] / k) * ld);
        uint4 *dst = (uint4 *)(xg + (size_t)pos * ld);
        for (int c = lane; c < ld / 16; c += 32)
            dst[c] = src[c];
    }
}

/* This consumer's promotion of one K block: acc += part * s_x[row] * s_w[col].
 * sx[h]: the scale of row g + 8h of the warp's 16; gate_up: sw0 for the
 * gate columns (entries < 32), the up columns j < split sw0u, the others
 * sw1u; down: sw0 for all. */
template <bool GATE_UP, bool SPLIT>
__device__ __forceinline__ void promote_as(float (&acc)[64], const float (&part)[64], const float (&sx)[2],
                                           float sw0, float sw0u, float sw1u, int split, int t)
{
#pragma unroll
    for (int i = 0; i < 64; i++) {
        const int c = i & 3, n = 8 * (i >> 2) + 2 * t + (c & 1);
        float sw = sw0;
        if (GATE_UP && i >= 32)
            sw = !SPLIT || n - 64 < split ? sw0u : sw1u;
        acc[i] = fmaf(part[i], sx[c >> 1] * sw, acc[i]);
    }
}
/* The up rows straddle a scale block only when inter is not a multiple of
 * 64 (split < 64; no real model's shape): that form alone compares each
 * column (and may spill registers). */
template <bool GATE_UP>
__device__ __forceinline__ void promote(float (&acc)[64], const float (&part)[64], const float (&sx)[2], float sw0,
                                        float sw0u, float sw1u, int split, int t)
{
    if (GATE_UP && split < 64)
        promote_as<GATE_UP, true>(acc, part, sx, sw0, sw0u, sw1u, split, t);
    else
        promote_as<GATE_UP, false>(acc, part, sx, sw0, sw0u, sw1u, split, t);
}

/* The scales of K block kb for this thread: its two rows' activation
 * scales and its columns' weight scales. */
struct KbScales {
    float sx[2], sw0, sw0u, sw1u;
};

template <bool GATE_UP>
__global__ void __launch_bounds__(THREADS, 1)
moe_gemm_fp8_ws_kernel(const WsArgs p, const __grid_constant__ CUtensorMap amap,
                       const __grid_constant__ CUtensorMap bmap)
{
    extern __shared__ __align__(1024) unsigned char ws_smem[];
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(ws_smem);
    const uint32_t sbase = (raw + 1023u) & ~1023u;
    unsigned char *smem = ws_smem + (sbase - raw);
    float *amax_s = (float *)(smem + (size_t)STAGES * STAGE_BYTES); /* [2][2][BM] */
    const uint32_t bars = sbase + STAGES * STAGE_BYTES + AMAX_BYTES;  /* full[STAGES], empty[STAGES] */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
    const int total = p.tile_off[p.n_local] * p.n_tiles_n;
    if (tid == 0) {
        for (int s = 0; s < STAGES; s++) {
            kn_mbar_init(bars + 8 * s, 1);                           /* the producer's expect_tx arrive */
            kn_mbar_init(bars + 8 * (STAGES + s), CONSUMER_THREADS / 32); /* one arrive per consumer warp */
        }
        kn_mbar_init_fence();
    }
    __syncthreads(); /* the last block-wide barrier: the producer's warps leave below */

    if (wg == 2) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
        if (warp != 8 || lane != 0)
            return;
        int it = 0; /* uses of the ring so far */
        for (int tile = blockIdx.x; tile < total; tile += gridDim.x) {
            const TilePlace tp = tile_place(p, tile);
            const int wrow = tp.e * p.w_rows; /* the expert's first weight row */
            int brow[4];
#pragma unroll
            for (int q = 0; q < 4; q++)
                brow[q] = GATE_UP ? wrow + ((q & 1) ? p.n_out : 0) + KN_FP8_BLOCK * tp.nt + 64 * (q >> 1)
                                  : wrow + BN * tp.nt + 64 * q;
            for (int kb = 0; kb < p.nkb; kb++, it++) {
                const int s = it % STAGES, ph = (it / STAGES) & 1;
                const uint32_t full = bars + 8 * s, empty = bars + 8 * (STAGES + s);
                const uint32_t st = sbase + (uint32_t)(s * STAGE_BYTES);
                kn_mbar_wait(empty, ph ^ 1); /* the consumers released the stage's previous use */
                kn_mbar_arrive_expect_tx(full, STAGE_BYTES);
                kn_tma_load_2d(st, &amap, kb * BK, tp.row0, full);
#pragma unroll
                for (int q = 0; q < 4; q++)
                    kn_tma_load_2d(st + A_BYTES + q * BOX_BYTES, &bmap, kb * BK, brow[q], full);
            }
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
    const int wq = warp & 3, g = lane >> 2, t = lane & 3;
    const int r_lo = 16 * wq + g; /* this thread's rows: r_lo, r_lo + 8 */
    float acc[64], pa[64], pb[64];
    int it = 0, tile_i = 0;
    for (int tile = blockIdx.x; tile < total; tile += gridDim.x, tile_i++) {
        const TilePlace tp = tile_place(p, tile);
        const int c0 = GATE_UP ? KN_FP8_BLOCK * tp.nt : BN * tp.nt;
        const float *sa[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int pos = tp.row0 + min(r_lo + 8 * h, tp.rows - 1); /* missing rows: any valid row's scale */
            sa[h] = p.as + (size_t)(GATE_UP ? p.perm[pos] / p.k_routes : pos) * p.nkb;
        }
        /* weight scale rows of this consumer's columns */
        const float *wse = p.ws + (size_t)tp.e * p.w_scales;
        int blk0, blk0u = 0, blk1u = 0, split = 64;
        if (GATE_UP) {
            blk0 = (c0 + 64 * wg) / KN_FP8_BLOCK;
            const int u0 = p.n_out + c0 + 64 * wg; /* the first up row */
            blk0u = u0 / KN_FP8_BLOCK;
            split = (blk0u + 1) * KN_FP8_BLOCK - u0; /* up columns j >= split are in the next block */
            blk1u = min(blk0u + 1, p.w_blocks - 1);
            blk0u = min(blk0u, p.w_blocks - 1);
        } else {
            blk0 = (c0 + 128 * wg) / KN_FP8_BLOCK;
        }
        blk0 = min(blk0, p.w_blocks - 1); /* past the weight's rows: masked columns */
        const float *sw0p = wse + (size_t)blk0 * p.sld, *sw0up = wse + (size_t)blk0u * p.sld,
                    *sw1up = wse + (size_t)blk1u * p.sld;

#pragma unroll
        for (int i = 0; i < 64; i++)
            acc[i] = 0.f;

        auto load_scales = [&](int kb) {
            KbScales s;
            s.sx[0] = sa[0][kb];
            s.sx[1] = sa[1][kb];
            s.sw0 = sw0p[kb];
            s.sw0u = GATE_UP ? sw0up[kb] : 0.f;
            s.sw1u = GATE_UP ? sw1up[kb] : 0.f;
            return s;
        };
        /* The K block in ring use `it` into part: committed, not waited for. */
        auto issue = [&](float (&part)[64]) {
            const int s = it % STAGES;
            kn_mbar_wait(bars + 8 * s, (it / STAGES) & 1);
            const uint32_t st = sbase + (uint32_t)(s * STAGE_BYTES);
            const uint32_t bst = st + A_BYTES + (uint32_t)(wg * 2 * BOX_BYTES);
            kn_wgmma_fence();
#pragma unroll
            for (int k32 = 0; k32 < BK / 32; k32++)
                wgmma_m64n128k32_e4m3(part, kn_wgmma_desc_sw128(st + 32 * k32, 16, 1024),
                                      kn_wgmma_desc_sw128(bst + 32 * k32, 16, 1024), k32 > 0);
            kn_wgmma_commit();
            kn_wgmma_fence_regs(part);
        };
        /* The stage of ring use `use` has been read by this warp's wgmma. */
        auto release = [&](int use) {
            if (lane == 0)
                kn_mbar_arrive(bars + 8 * (STAGES + use % STAGES));
        };

        /* Two accumulator sets in turn: block kb into one while kb - 1's
         * (waited for with wait_group 1) is promoted from the other. */
        KbScales prev = load_scales(0);
        issue(pa);
        it++;
        int kb = 1;
        for (;;) {
            if (kb >= p.nkb)
                break;
            KbScales cur = load_scales(kb);
            issue(pb);
            it++;
            kn_wgmma_wait<1>();
            kn_wgmma_fence_regs(pa);
            release(it - 2);
            promote<GATE_UP>(acc, pa, prev.sx, prev.sw0, prev.sw0u, prev.sw1u, split, t);
            prev = cur;
            kb++;
            if (kb >= p.nkb)
                break;
            cur = load_scales(kb);
            issue(pa);
            it++;
            kn_wgmma_wait<1>();
            kn_wgmma_fence_regs(pb);
            release(it - 2);
            promote<GATE_UP>(acc, pb, prev.sx, prev.sw0, prev.sw0u, prev.sw1u, split, t);
            prev = cur;
            kb++;
        }
        /* the last block: in pa when nkb is odd, pb when even */
        kn_wgmma_wait<0>();
        release(it - 1);
        if (p.nkb & 1) {
            kn_wgmma_fence_regs(pa);
            promote<GATE_UP>(acc, pa, prev.sx, prev.sw0, prev.sw0u, prev.sw1u, split, t);
        } else {
            kn_wgmma_fence_regs(pb);
            promote<GATE_UP>(acc, pb, prev.sx, prev.sw0, prev.sw0u, prev.sw1u, split, t);
        }

        if (GATE_UP) {
            /* gate entries (< 32) become the activation of column
             * c0 + 64wg + n (0 past inter or past the tile's rows) */
            const float *bias = p.bias ? p.bias + (size_t)tp.e * 2 * p.n_out : nullptr;
            float m[2] = { 0.f, 0.f };
#pragma unroll
            for (int i = 0; i < 32; i++) {
                const int c = i & 3;
                const int col = c0 + 64 * wg + 8 * (i >> 2) + 2 * t + (c & 1), r = r_lo + 8 * (c >> 1);
                const bool ok = col < p.n_out && r < tp.rows;
                const float bg = ok && bias ? bias[col] : 0.f, bu = ok && bias ? bias[p.n_out + col] : 0.f;
                acc[i] = ok ? kn_cuda_expert_act(acc[i] + bg, acc[i + 32] + bu, p.act, p.alpha, p.limit) : 0.f;
                m[c >> 1] = fmaxf(m[c >> 1], fabsf(acc[i]));
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                m[h] = fmaxf(m[h], __shfl_xor_sync(0xffffffffu, m[h], 1));
                m[h] = fmaxf(m[h], __shfl_xor_sync(0xffffffffu, m[h], 2));
            }
            /* The amax buffers alternate by tile: a consumer writing
             * tile j + 2's buffer has passed tile j + 1's barrier, so the
             * other consumer has finished its reads of tile j. */
            float *am = amax_s + (tile_i & 1) * 2 * BM;
            if (t == 0) {
                am[wg * BM + r_lo] = m[0];
                am[wg * BM + r_lo + 8] = m[1];
            }
            consumers_sync();
            float sc[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = r_lo + 8 * h;
                const float mm = fmaxf(am[r], am[BM + r]);
                sc[h] = mm > 0.f && isfinite(mm) ? mm / KN_E4M3_MAX : 1.f;
                if (wg == 0 && t == 0 && r < tp.rows)
                    p.aqs[(size_t)(tp.row0 + r) * p.kbq + tp.nt] = sc[h];
            }
#pragma unroll
            for (int i = 0; i < 32; i += 2) { /* entries i, i+1: adjacent columns of one row */
                const int c = i & 3, r = r_lo + 8 * (c >> 1);
                if (r >= tp.rows)
                    continue;
                const float s = sc[c >> 1];
                const unsigned lo8 = kn_cuda_fp8_to_e4m3(acc[i] / s), hi8 = kn_cuda_fp8_to_e4m3(acc[i + 1] / s);
                *(uint16_t *)(p.aq + (size_t)(tp.row0 + r) * p.ldq + c0 + 64 * wg + 8 * (i >> 2) + 2 * t) =
                    (uint16_t)(lo8 | (hi8 << 8));
            }
        } else {
            /* entries i, i+1: adjacent columns of one row, one 8-byte store
             * where both exist and n_out is even (8-byte aligned) */
            const bool pairs = (p.n_out & 1) == 0;
#pragma unroll
            for (int i = 0; i < 64; i += 2) {
                const int c = i & 3;
                const int r = r_lo + 8 * (c >> 1), col = c0 + 128 * wg + 8 * (i >> 2) + 2 * t;
                if (r >= tp.rows || col >= p.n_out)
                    continue;
                float *yp = p.y + (size_t)(tp.row0 + r) * p.n_out + col;
                if (pairs) {
                    *(float2 *)yp = make_float2(acc[i], acc[i + 1]);
                } else {
                    yp[0] = acc[i];
                    if (col + 1 < p.n_out)
                        yp[1] = acc[i + 1];
                }
            }
        }
    }
}

/* codes [rows][ld] (e4m3 bytes) as a 2D tensor of 64-row x 128-byte boxes,
 * 128-byte swizzled, zeros outside. */
int codes_tensor_map(const kn_backend *be, const char *op, const char *what, CUtensorMap *map, const void *codes,
                     long long rows, int ld)
{
    return kn_cuda_tensor_map_2d(be, op, what, map, CU_TENSOR_MAP_DATA_TYPE_UINT8, codes, rows, ld, ld, BK, BOX_ROWS);
}

template <bool GATE_UP>
int launch_ws(const kn_backend *be, const char *op, const WsArgs &a, const CUtensorMap &amap,
              const CUtensorMap &bmap, long long max_tiles)
{
    const char *what = GATE_UP ? "moe_gemm_fp8_ws_kernel gate_up" : "moe_gemm_fp8_ws_kernel down";
    cudaFuncAttributes attr;
    cudaError_t err = cudaFuncGetAttributes(&attr, moe_gemm_fp8_ws_kernel<GATE_UP>);
    if (err != cudaSuccess)
        return kn_cuda_device_error(op, what, err);
    /* setmaxnreg.inc waits until the producer's registers are free: with
     * fewer than LAUNCH_REGS at launch the consumers would wait forever */
    if (attr.numRegs != LAUNCH_REGS)
        return kn_arg_error(op, "%s compiled to %d registers per thread, the producer/consumer split needs %d",
                            what, attr.numRegs, LAUNCH_REGS);
    err = cudaFuncSetAttribute(moe_gemm_fp8_ws_kernel<GATE_UP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)SMEM_BYTES);
    if (err != cudaSuccess)
        return kn_cuda_device_error(op, what, err);
    const long long sms = kn_cuda_ctx_of(be)->sm_count;
    const unsigned grid = (unsigned)(max_tiles < sms ? (max_tiles > 0 ? max_tiles : 1) : sms);
    moe_gemm_fp8_ws_kernel<GATE_UP><<<grid, THREADS, SMEM_BYTES, kn_cuda_stream(be)>>>(a, amap, bmap);
    err = cudaGetLastError();
    return err == cudaSuccess ? TN_OK : kn_cuda_device_error(op, what, err);
}

} // namespace

int kn_cuda_moe_gemm_fp8_ws(const kn_backend *be, const char *op, const kn_moe_weights *w, int which,
                            float *y, uint8_t *aq, float *aqs, const uint8_t *xq, const float *xs,
                            const int *perm, const int *offsets, const int *tile_off, int n_tokens, int k)
{
    const int n_local = w->n_experts, dim = w->dim, inter = w->inter;
    const long long n_slots = (long long)n_tokens * k;
    const int ldx = (int)kn_fp8_ld((size_t)dim), kbx = (int)kn_fp8_blocks((size_t)dim);
    const int ldi = (int)kn_fp8_ld((size_t)inter), kbi = (int)kn_fp8_blocks((size_t)inter);
    /* Upper bound on the m-tiles: every expert may end in a partial tile. */
    const long long max_mtiles = n_slots / BM + n_local;
    int rc = TN_OK;
    WsArgs a = {};
    a.offsets = offsets;
    a.tile_off = tile_off;
    a.n_local = n_local;
    a.act = (int)w->act;
    a.alpha = w->alpha;
    a.limit = w->limit;
    a.aq = aq;
    a.aqs = aqs;
    a.ldq = ldi;
    a.kbq = kbi;
    a.y = y;
    CUtensorMap amap, bmap;
    if (which == 0) {
        uint8_t *xg = (uint8_t *)kn_cuda_tmp_alloc(be, op, (size_t)n_slots * ldx);
        if (!xg)
            return TN_ERR_NOMEM;
        const long long cap = (long long)kn_cuda_ctx_of(be)->sm_count * 8, blocks = (n_slots + 7) / 8;
        moe_ws_gather_kernel<<<(unsigned)(blocks < cap ? (blocks > 0 ? blocks : 1) : cap), 256, 0,
                               kn_cuda_stream(be)>>>(xg, xq, perm, offsets, n_local, k, ldx);
        cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess)
            rc = kn_cuda_device_error(op, "moe_ws_gather_kernel", err);
        if (rc == TN_OK)
            rc = codes_tensor_map(be, op, "gate_up A (routed token codes)", &amap, xg, n_slots, ldx);
        if (rc == TN_OK)
            rc = codes_tensor_map(be, op, "gate_up weights", &bmap, w->gate_up,
                                  (long long)n_local * 2 * inter, ldx);
        a.as = xs;
        a.perm = perm;
        a.k_routes = k;
        a.ws = w->gate_up_scale;
        a.w_scales = kn_fp8_scale_count(2 * (size_t)inter, (size_t)dim);
        a.sld = (int)kn_fp8_scale_ld((size_t)dim);
        a.w_rows = 2 * inter;
        a.w_blocks = (int)kn_fp8_blocks(2 * (size_t)inter);
        a.bias = w->gate_up_bias;
        a.nkb = kbx;
        a.n_out = inter;
        a.n_tiles_n = kbi;
        if (rc == TN_OK)
            rc = launch_ws<true>(be, op, a, amap, bmap, max_mtiles * a.n_tiles_n);
        /* stream-ordered: the kernel has read xg before the pool reuses it */
        kn_cuda_tmp_free(be, xg);
        return rc;
    }
    rc = codes_tensor_map(be, op, "down A (activation codes)", &amap, aq, n_slots, ldi);
    if (rc == TN_OK)
        rc = codes_tensor_map(be, op, "down weights", &bmap, w->down, (long long)n_local * dim, ldi);
    if (rc != TN_OK)
        return rc;
    a.as = aqs;
    a.perm = nullptr;
    a.k_routes = 1;
    a.ws = w->down_scale;
    a.w_scales = kn_fp8_scale_count((size_t)dim, (size_t)inter);
    a.sld = (int)kn_fp8_scale_ld((size_t)inter);
    a.w_rows = dim;
    a.w_blocks = (int)kn_fp8_blocks((size_t)dim);
    a.bias = nullptr;
    a.nkb = kbi;
    a.n_out = dim;
    a.n_tiles_n = kn_cuda_div_up(dim, BN);
    return launch_ws<false>(be, op, a, amap, bmap, max_mtiles * a.n_tiles_n);
}
