/* The grouped FP8 expert GEMMs: the prefill middle of kn_moe_experts for
 * FP8 weights, one launch per product over every local expert's rows.
 *
 * kernels/fp8.h's product on both products, as kn_moe_experts_cpu and
 * the decode grouped kernels (moe_grouped_fp8.cu) compute it:
 *   1. kn_cuda_moe_fp8_quant_x   x -> e4m3 codes + 1x128 scales per token
 *   2. moe_gemm_tile_offsets_kernel  (one warp) m-tiles per expert from the
 *        routing's device offsets -> tile_off[0..n_local] (exclusive scan)
 *   3. moe_gemm_fp8_kernel<true>   gate_up: A = the token rows of xq through
 *        perm, B = 128 gate rows and the matching 128 up rows of the
 *        expert's weight; the epilogue adds the bias, applies the
 *        activation (clamped SwiGLU or SwiGLU), and since a tile owns a
 *        whole 128-wide block of activation columns, takes each row's amax
 *        over its warps and writes the down product's e4m3 codes and 1x128
 *        scale (aq [pos][ld(inter)], as [pos][blocks(inter)], the decode
 *        kernels' layout)
 *   4. moe_gemm_fp8_kernel<false>  down: A = aq rows, B = 256 rows of the
 *        down weight; y[pos] fp32 (the combine adds the down bias and the
 *        routing weight, as for the other middles)
 * No host sync: tile counts come from offsets on the device.
 *
 * Tiles: 64 rows x 256 weight rows, K in steps of one 128-wide scale block.
 * Persistent: a grid of one block per SM walks the tiles
 * (m-tile, n-tile) in m-major order, the m-tiles of all experts one after
 * another (tile_off), so uneven experts (empty, one row, thousands) cost
 * their tiles and nothing more, and neighbouring blocks share an A tile
 * and an expert's weights in L2.
 *
 * Tensor cores, two forms of the same kernel (kn_cuda_ctx.moe_fp8_gemm):
 * mma.sync m16n8k32 with e4m3 operands (sm_89+; the default) and fp32
 * sums, 8 warps as 2 (rows) x 4 (columns), each 32 rows x 64 columns,
 * fragments by ldmatrix; or Hopper wgmma m64n64k32 e4m3 (both operands
 * K-major in shared memory, the 128-byte swizzle below is wgmma's), each
 * of the 2 warpgroups all 64 rows x two 64-column products (gate_up: the
 * gate and the up rows of the same 64 activation columns, so the
 * epilogue finds both in one thread), waited for at the end of each K
 * block for the scale promotion (Frag says where each thread's 64
 * accumulators sit in either form). Modes 7-9 run a third form,
 * warp-specialised (a TMA producer warpgroup, two consumer warpgroups
 * overlapping the promotion with the next block's wgmma), from
 * moe_gemm_fp8_ws.cu on the same quantized x and tile_off.
 * Each 128-wide K block is summed into a fresh fp32 fragment which is then
 * added to the totals times s_x[row] * s_w[col] (the block scales applied
 * per 128-K step, as cuBLASLt and the CPU do). Operands reach shared
 * memory by cp.async (16 bytes; zero-filled past the tile's rows or
 * columns) in a ring of 3 stages, each stage one K block of A, B and
 * their scales; rows are 128 bytes with 16-byte chunk c of row r stored at
 * chunk c ^ (r % 8), so the ldmatrix reads (8 rows of one chunk) hit 8
 * different bank groups. ldmatrix .b16 gives thread (g, t) the 4 bytes
 * 4t..4t+3 of row g, which is exactly mma's e4m3 A (row g, k 4t..) and B
 * (column g, k 4t..) fragment. Rows are padded to whole 128-blocks in both
 * operands (weight padding finite codes, activation padding zero codes). */
#include <cuda_fp8.h>
#include "kernels/cuda/fp8_cuda.cuh"
#include "kernels/cuda/moe_gemm_fp8.cuh"
#include "kernels/cuda/moe_gemm_fp8_ws.cuh"
#include "kernels/cuda/moe_grouped_fp8.cuh"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/cuda/expert_act.cuh"
extern "C" {
#include "kernels/fp8.h"
}

namespace {

constexpr int BM = 64;               /* rows (routed positions) per tile */
static_assert(BM == KN_MOE_WS_BM, "modes 7-9 walk the same m-tiles (tile_off)");
constexpr int BN = 256;              /* weight rows per tile */
constexpr int BK = KN_FP8_BLOCK;     /* K per stage: one scale block */
constexpr int STAGES = 3;
constexpr int THREADS = 256;         /* 8 warps: 2 x 4 */
constexpr int A_BYTES = BM * BK;
constexpr int B_BYTES = BN * BK;
constexpr int CODE_BYTES = A_BYTES + B_BYTES;            /* one stage's codes */
constexpr int SCALE_BYTES = (BM + BN) * (int)sizeof(float); /* one stage's scales */
constexpr int AMAX_BYTES = 4 * BM * (int)sizeof(float);
/* + 1024: the codes start 1024-byte aligned (wgmma's swizzle atoms) */
constexpr size_t SMEM_BYTES = (size_t)STAGES * (CODE_BYTES + SCALE_BYTES) + AMAX_BYTES + 1024;
static_assert(CODE_BYTES % 1024 == 0, "every stage's A and B tiles stay 1024-byte aligned");

struct GemmArgs {
    const uint8_t *a;   /* A codes: gate_up xq [n_tokens][lda], down aq [slots][lda] */
    const float *as;    /* A scales [row][nkb] */
    const int *perm;    /* gate_up: position -> slot (token = slot / k_routes) */
    int k_routes;
    const uint8_t *w;   /* the local experts' weights, w_bytes codes apart */
    const float *ws;    /* their block scales, w_scales floats apart, sld per row */
    size_t w_bytes, w_scales;
    int sld;
    const float *bias;  /* gate_up bias [n_local][2*n_out] or NULL */
    int lda, nkb;       /* codes per row (A and B), 128-blocks of K */
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

__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool ok)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void *src, bool ok)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 4 : 0)
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
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
/* c += A B, A 16x32 e4m3 (row), B 32x8 e4m3 (col), fp32 sums. */
__device__ __forceinline__ void mma_e4m3(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Byte offset of 16-byte chunk c of row r in a tile of 128-byte rows. */
__device__ __forceinline__ uint32_t swz(int r, int c)
{
    return (uint32_t)(r * BK + ((c ^ (r & 7)) << 4));
}

/* The weight row behind tile row R (0..BN-1) of n-tile base c0: gate_up
 * tiles hold activation columns c0..c0+127, gate rows then up rows; down
 * tiles hold output columns c0..c0+255. *ok: the row exists. */
template <bool GATE_UP>
__device__ __forceinline__ int weight_row(int R, int c0, int n_out, bool *ok)
{
    if (GATE_UP) {
        const int col = c0 + (R & (KN_FP8_BLOCK - 1));
        *ok = col < n_out;
        return R < KN_FP8_BLOCK ? col : n_out + col;
    }
    *ok = c0 + R < n_out;
    return c0 + R;
}

/* tile_off[e] = m-tiles of experts before e, tile_off[n_local] = all. */
__global__ void moe_gemm_tile_offsets_kernel(int *tile_off, const int *offsets, int n_local)
{
    const int lane = threadIdx.x;
    int run = 0;
    for (int base = 0; base < n_local; base += 32) {
        const int e = base + lane;
        const int n = e < n_local ? (offsets[e + 1] - offsets[e] + BM - 1) / BM : 0;
        int incl = n;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int v = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o)
                incl += v;
        }
        if (e < n_local)
            tile_off[e] = run + incl - n;
        run += __shfl_sync(0xffffffffu, incl, 31);
    }
    if (lane == 0)
        tile_off[n_local] = run;
}

/* Where accumulator entry idx (0..63) of this thread lives: its tile row
 * (0..BM-1) and tile column (the B tile row, 0..BN-1).
 *   mma.sync (WG = false): warp (wm, wn) = (warp / 4, warp % 4) owns rows
 *     32wm.., two m16 tiles i, and 8 n8 tiles j; idx = (8i + j) * 4 + c
 *     with c the mma C register (row g + 8(c / 2), column 2t + c % 2).
 *     gate_up: n8 tiles 0-3 are gate columns 32wn + 8j, 4-7 the up rows
 *     128 further; down: columns 64wn + 8j.
 *   wgmma (WG = true): warpgroup wg = warp / 4, warp w = warp % 4 of it owns
 *     rows 16w + g (+8) of all 64, two n64 products h (idx = 32h + 4i + c,
 *     column 8i + 2t + c % 2 of product h's 64): gate_up h = 0 gate rows
 *     64wg.., h = 1 the up rows 128 further; down rows 128wg + 64h.
 * Either way the up entry of gate entry idx is idx + UP_OFF. */
template <bool GATE_UP, bool WG> struct Frag {
    static constexpr int UP_OFF = WG ? 32 : 16;
    static constexpr int N_COLGROUPS = WG ? 2 : 4; /* warps sharing one row's columns */
    __device__ static __forceinline__ int row(int idx, int warp, int g)
    {
        const int c = idx & 3;
        if (WG)
            return 16 * (warp & 3) + 8 * (c >> 1) + g;
        return 32 * (warp >> 2) + 16 * (idx >> 5) + 8 * (c >> 1) + g;
    }
    __device__ static __forceinline__ int col(int idx, int warp, int t)
    {
        const int c = idx & 3, lo = 2 * t + (c & 1);
        if (WG) {
            const int h = idx >> 5, i = (idx >> 2) & 7, wg = warp >> 2;
            return (GATE_UP ? 64 * wg + KN_FP8_BLOCK * h : 128 * wg + 64 * h) + 8 * i + lo;
        }
        const int j = (idx >> 2) & 7, wn = warp & 3;
        return (GATE_UP ? (j < 4 ? 32 * wn + 8 * j : KN_FP8_BLOCK + 32 * wn + 8 * (j - 4)) : 64 * wn + 8 * j) + lo;
    }
    __device__ static __forceinline__ bool is_gate(int idx)
    {
        return WG ? idx < 32 : ((idx >> 2) & 7) < 4;
    }
    /* 0..3 for the distinct rows of one thread (mma: 4, wgmma: 2) */
    __device__ static __forceinline__ int row_slot(int idx)
    {
        return WG ? (idx & 3) >> 1 : ((idx >> 5) << 1) | ((idx & 3) >> 1);
    }
    __device__ static __forceinline__ int col_group(int warp)
    {
        return WG ? warp >> 2 : warp & 3;
    }
};

/* wgmma m64n64k32, e4m3 A and B from shared memory (both K-major, 128-byte
 * swizzle), fp32 D += (scale_d) A B. */
__device__ __forceinline__ void wgmma_m64n64k32_e4m3(float (&d)[32], uint64_t da, uint64_t db, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
                 "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
                   "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
                   "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
                   "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(scale_d));
}

/* part = this K block's sums (fresh), mma.sync: the warp's 32 x 64. */
template <bool GATE_UP>
__device__ __forceinline__ void kblock_mma(float (&part)[64], uint32_t st, int warp, int lane)
{
    const int wm = warp >> 2, wn = warp & 3, lrow = lane & 7, lmat = lane >> 3;
#pragma unroll
    for (int i = 0; i < 64; i++)
        part[i] = 0.f;
#pragma unroll
    for (int s = 0; s < BK / 32; s++) {
        uint32_t af[2][4];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            /* matrices: rows +0/+8 (lmat&1), k chunk 2s / 2s+1 (lmat>>1) */
            const int r = 32 * wm + 16 * i + 8 * (lmat & 1) + lrow;
            ldmatrix_x4(af[i], st + swz(r, 2 * s + (lmat >> 1)));
        }
#pragma unroll
        for (int q = 0; q < 4; q++) {
            /* n8 tiles 2q, 2q+1: rows +0/+8 (lmat>>1), chunk 2s / 2s+1 (lmat&1) */
            const int nb = GATE_UP ? (q < 2 ? 32 * wn + 16 * q : KN_FP8_BLOCK + 32 * wn + 16 * (q - 2))
                                   : 64 * wn + 16 * q;
            uint32_t bf[4];
            ldmatrix_x4(bf, st + A_BYTES + swz(nb + 8 * (lmat >> 1) + lrow, 2 * s + (lmat & 1)));
#pragma unroll
            for (int i = 0; i < 2; i++) {
                float(&p0)[4] = *reinterpret_cast<float(*)[4]>(&part[(8 * i + 2 * q) * 4]);
                float(&p1)[4] = *reinterpret_cast<float(*)[4]>(&part[(8 * i + 2 * q + 1) * 4]);
                mma_e4m3(p0, af[i], bf[0], bf[1]);
                mma_e4m3(p1, af[i], bf[2], bf[3]);
            }
        }
    }
}

/* part = this K block's sums (fresh), wgmma: the warpgroup's 64 rows x two
 * 64-column products. Waits for them (the block scales need the sums). */
template <bool GATE_UP>
__device__ __forceinline__ void kblock_wgmma(float (&part)[64], uint32_t st, int warp)
{
    const int wg = warp >> 2;
    const int nb0 = GATE_UP ? 64 * wg : 128 * wg, nb1 = GATE_UP ? KN_FP8_BLOCK + 64 * wg : 128 * wg + 64;
    float(&p0)[32] = *reinterpret_cast<float(*)[32]>(&part[0]);
    float(&p1)[32] = *reinterpret_cast<float(*)[32]>(&part[32]);
    kn_wgmma_fence();
#pragma unroll
    for (int s = 0; s < BK / 32; s++) {
        const uint64_t da = kn_wgmma_desc_sw128(st + 32 * s, 16, 1024);
        wgmma_m64n64k32_e4m3(p0, da, kn_wgmma_desc_sw128(st + A_BYTES + nb0 * BK + 32 * s, 16, 1024), s > 0);
        wgmma_m64n64k32_e4m3(p1, da, kn_wgmma_desc_sw128(st + A_BYTES + nb1 * BK + 32 * s, 16, 1024), s > 0);
    }
    kn_wgmma_commit();
    kn_wgmma_wait<0>();
    kn_wgmma_fence_regs(p0);
    kn_wgmma_fence_regs(p1);
}

template <bool GATE_UP, bool WG>
__global__ void __launch_bounds__(THREADS, 1) moe_gemm_fp8_kernel(const GemmArgs p)
{
    using F = Frag<GATE_UP, WG>;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    /* codes: STAGES x (A, B) from a 1024-byte aligned base (wgmma's swizzle
     * atoms), then STAGES x (A scales, B scales), then the row amaxes */
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t sbase = (raw + 1023u) & ~1023u;
    unsigned char *smem = smem_raw + (sbase - raw);
    const uint32_t scale_base = sbase + STAGES * CODE_BYTES;
    const float *scales = (const float *)(smem + (size_t)STAGES * CODE_BYTES);
    float *amax_s = (float *)(smem + (size_t)STAGES * (CODE_BYTES + SCALE_BYTES)); /* [4][BM] */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int total = p.tile_off[p.n_local] * p.n_tiles_n;
    const int ntile_w = GATE_UP ? KN_FP8_BLOCK : BN;

    float part[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        part[i] = 0.f;

    for (int tile = blockIdx.x; tile < total; tile += gridDim.x) {
        const int mt = tile / p.n_tiles_n, nt = tile - mt * p.n_tiles_n;
        int lo = 0, hi = p.n_local - 1;
        while (lo < hi) { /* the expert of m-tile mt: last e with tile_off[e] <= mt */
            const int mid = (lo + hi + 1) >> 1;
            if (p.tile_off[mid] <= mt)
                lo = mid;
            else
                hi = mid - 1;
        }
        const int e = lo;
        const int row0 = p.offsets[e] + (mt - p.tile_off[e]) * BM;
        const int rows = min(BM, p.offsets[e + 1] - row0);
        const int c0 = nt * ntile_w;
        const uint8_t *we = p.w + (size_t)e * p.w_bytes;
        const float *wse = p.ws + (size_t)e * p.w_scales;

        /* This thread's copies: A rows tid/8 and tid/8 + 32, B rows tid/8 +
         * 32j (j < 8), chunk tid%8 of each; the scale of A row tid (tid <
         * BM) and of B row tid. Sources at K block 0. */
        const int cr = tid >> 3, cc = tid & 7;
        const uint8_t *a_src[2];
        bool a_ok[2];
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int r = cr + 32 * j;
            a_ok[j] = r < rows;
            const int arow = !a_ok[j] ? 0 : GATE_UP ? p.perm[row0 + r] / p.k_routes : row0 + r;
            a_src[j] = p.a + (size_t)arow * p.lda + cc * 16;
        }
        /* B: rows cr + 32j of the tile; j < 4 and j >= 4 are the gate and
         * up halves of a gate_up tile (weight rows 128 apart in a down
         * tile), each half's rows 32 weight rows apart. Offsets from the
         * expert's codes (an expert's weights are far below 4 GiB);
         * missing rows read nothing (zero-filled). */
        bool ok0, ok1;
        const uint32_t b_off0 = (uint32_t)weight_row<GATE_UP>(cr, c0, p.n_out, &ok0) * (uint32_t)p.lda + cc * 16;
        const uint32_t b_off1 =
            (uint32_t)weight_row<GATE_UP>(cr + KN_FP8_BLOCK, c0, p.n_out, &ok1) * (uint32_t)p.lda + cc * 16;
        const uint32_t b_step = 32u * (uint32_t)p.lda;
        unsigned b_ok = 0;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            bool ok;
            weight_row<GATE_UP>(cr + 32 * j, c0, p.n_out, &ok);
            b_ok |= (unsigned)ok << j;
        }
        bool as_ok = false, bs_ok;
        const float *as_src = p.as;
        if (tid < BM) {
            as_ok = tid < rows;
            const int arow = !as_ok ? 0 : GATE_UP ? p.perm[row0 + tid] / p.k_routes : row0 + tid;
            as_src = p.as + (size_t)arow * p.nkb;
        }
        const int bsr = weight_row<GATE_UP>(tid, c0, p.n_out, &bs_ok);
        const float *bs_src = wse + (size_t)((bs_ok ? bsr : 0) / KN_FP8_BLOCK) * p.sld;

        auto load_stage = [&](int kb) {
            const uint32_t st = sbase + (uint32_t)((kb % STAGES) * CODE_BYTES);
            const uint32_t ss = scale_base + (uint32_t)((kb % STAGES) * SCALE_BYTES);
            const size_t ko = (size_t)kb * BK;
#pragma unroll
            for (int j = 0; j < 2; j++)
                cp_async16(st + swz(cr + 32 * j, cc), a_src[j] + ko, a_ok[j]);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const bool ok = (b_ok >> j) & 1u;
                const uint8_t *src = we + (ok ? (j < 4 ? b_off0 : b_off1) + (uint32_t)(j & 3) * b_step + ko : 0);
                cp_async16(st + A_BYTES + swz(cr + 32 * j, cc), src, ok);
            }
            if (tid < BM)
                cp_async4(ss + 4 * tid, as_src + kb, as_ok);
            cp_async4(ss + 4 * BM + 4 * tid, bs_src + kb, bs_ok);
        };

        float acc[64];
#pragma unroll
        for (int i = 0; i < 64; i++)
            acc[i] = 0.f;

        /* The previous tile's warps are done with every stage. */
        __syncthreads();
#pragma unroll
        for (int s = 0; s < STAGES - 1; s++) {
            if (s < p.nkb)
                load_stage(s);
            cp_async_commit();
        }
        for (int kb = 0; kb < p.nkb; kb++) {
            cp_async_wait<STAGES - 2>(); /* this thread's copies of stage kb landed */
            if (WG)
                kn_fence_proxy_async_smem(); /* ... and are visible to wgmma */
            __syncthreads(); /* everyone's are; stage kb-1 is no longer read */
            if (kb + STAGES - 1 < p.nkb)
                load_stage(kb + STAGES - 1);
            cp_async_commit();

            const uint32_t st = sbase + (uint32_t)((kb % STAGES) * CODE_BYTES);
            if (WG)
                kblock_wgmma<GATE_UP>(part, st, warp);
            else
                kblock_mma<GATE_UP>(part, st, warp, lane);
            /* the block scales of this K block: s_x[row] * s_w[col] */
            const float *sa = scales + (size_t)(kb % STAGES) * (SCALE_BYTES / 4);
            const float *sb = sa + BM;
#pragma unroll
            for (int i = 0; i < 64; i++)
                acc[i] = fmaf(part[i], sa[F::row(i, warp, g)] * sb[F::col(i, warp, t)], acc[i]);
        }
        cp_async_wait<0>(); /* only empty groups are left; none stays in flight */

        if (GATE_UP) {
            /* gate entries become the activation of activation column
             * c0 + col (0 past inter or past the tile's rows) */
            const float *bias = p.bias ? p.bias + (size_t)e * 2 * p.n_out : nullptr;
            float m[4] = { 0.f, 0.f, 0.f, 0.f };
#pragma unroll
            for (int i = 0; i < 64; i++) {
                if (!F::is_gate(i))
                    continue;
                const int col = c0 + F::col(i, warp, t), r = F::row(i, warp, g);
                const bool ok = col < p.n_out && r < rows;
                const float bg = ok && bias ? bias[col] : 0.f, bu = ok && bias ? bias[p.n_out + col] : 0.f;
                acc[i] = ok ? kn_cuda_expert_act(acc[i] + bg, acc[i + F::UP_OFF] + bu, p.act, p.alpha, p.limit) : 0.f;
                m[F::row_slot(i)] = fmaxf(m[F::row_slot(i)], fabsf(acc[i]));
            }
#pragma unroll
            for (int q = 0; q < 4; q++) {
                m[q] = fmaxf(m[q], __shfl_xor_sync(0xffffffffu, m[q], 1));
                m[q] = fmaxf(m[q], __shfl_xor_sync(0xffffffffu, m[q], 2));
            }
            if (t == 0) {
#pragma unroll
                for (int i = 0; i < 64; i += 2) /* each row slot once: entries c = 0 and c = 2 of the first tiles */
                    if (F::is_gate(i) && ((i >> 2) & 7) == 0)
                        amax_s[F::col_group(warp) * BM + F::row(i, warp, g)] = m[F::row_slot(i)];
            }
            __syncthreads();
            float sc[4];
#pragma unroll
            for (int q = 0; q < 4; q++)
                sc[q] = 1.f;
#pragma unroll
            for (int i = 0; i < 64; i += 2) {
                if (!F::is_gate(i) || ((i >> 2) & 7) != 0)
                    continue;
                const int r = F::row(i, warp, g);
                float mm = amax_s[r];
#pragma unroll
                for (int w2 = 1; w2 < F::N_COLGROUPS; w2++)
                    mm = fmaxf(mm, amax_s[w2 * BM + r]);
                sc[F::row_slot(i)] = mm > 0.f && isfinite(mm) ? mm / KN_E4M3_MAX : 1.f;
                if (F::col_group(warp) == 0 && t == 0 && r < rows)
                    p.aqs[(size_t)(row0 + r) * p.kbq + nt] = sc[F::row_slot(i)];
            }
#pragma unroll
            for (int i = 0; i < 64; i += 2) { /* entries i, i+1: adjacent columns of one row */
                if (!F::is_gate(i))
                    continue;
                const int r = F::row(i, warp, g);
                if (r >= rows)
                    continue;
                const float s = sc[F::row_slot(i)];
                const unsigned lo8 = kn_cuda_fp8_to_e4m3(acc[i] / s), hi8 = kn_cuda_fp8_to_e4m3(acc[i + 1] / s);
                *(uint16_t *)(p.aq + (size_t)(row0 + r) * p.ldq + c0 + F::col(i, warp, t)) =
                    (uint16_t)(lo8 | (hi8 << 8));
            }
        } else {
#pragma unroll
            for (int i = 0; i < 64; i++) {
                const int r = F::row(i, warp, g), col = c0 + F::col(i, warp, t);
                if (r < rows && col < p.n_out)
                    p.y[(size_t)(row0 + r) * p.n_out + col] = acc[i];
            }
        }
    }
}

template <bool GATE_UP, bool WG>
cudaError_t launch_gemm(const kn_backend *be, const GemmArgs &a, long long max_tiles)
{
    cudaError_t err = cudaFuncSetAttribute(moe_gemm_fp8_kernel<GATE_UP, WG>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM_BYTES);
    if (err != cudaSuccess)
        return err;
    const long long sms = kn_cuda_ctx_of(be)->sm_count;
    const unsigned grid = (unsigned)(max_tiles < sms ? (max_tiles > 0 ? max_tiles : 1) : sms);
    moe_gemm_fp8_kernel<GATE_UP, WG><<<grid, THREADS, SMEM_BYTES, kn_cuda_stream(be)>>>(a);
    return cudaGetLastError();
}

} // namespace

int kn_cuda_moe_gemm_fp8(const kn_backend *be, const char *op, const kn_moe_weights *w, float *y,
                         const float *x, const int *perm, const int *offsets, int n_tokens, int k, int mode)
{
    if (n_tokens == 0)
        return TN_OK;
    const int n_local = w->n_experts, dim = w->dim, inter = w->inter;
    const size_t n_slots = (size_t)n_tokens * k;
    const int ldx = (int)kn_fp8_ld((size_t)dim), kbx = (int)kn_fp8_blocks((size_t)dim);
    const int ldi = (int)kn_fp8_ld((size_t)inter), kbi = (int)kn_fp8_blocks((size_t)inter);
    int rc = TN_OK;
    cudaError_t err = cudaSuccess;
    const char *what = "moe_fp8_quant_x_kernel";
    uint8_t *xq = (uint8_t *)kn_cuda_tmp_alloc(be, op, (size_t)n_tokens * ldx);
    float *xs = (float *)kn_cuda_tmp_alloc(be, op, (size_t)n_tokens * kbx * sizeof(float));
    uint8_t *aq = (uint8_t *)kn_cuda_tmp_alloc(be, op, n_slots * ldi);
    float *aqs = (float *)kn_cuda_tmp_alloc(be, op, n_slots * kbi * sizeof(float));
    int *tile_off = (int *)kn_cuda_tmp_alloc(be, op, ((size_t)n_local + 1) * sizeof(int));
    /* Upper bound on the m-tiles: every expert may end in a partial tile. */
    const long long max_mtiles = (long long)(n_slots / BM) + n_local;
    GemmArgs a = {};
    /* modes 1-3 mma.sync, 4-6 wgmma, 7-9 the warp-specialised TMA + wgmma
     * kernel; within each: both products, gate_up only, down only (the
     * other from the decode kernels) */
    const bool wg = mode >= KN_MOE_FP8_GEMM_WGMMA;
    const bool ws = mode >= KN_MOE_FP8_GEMM_WS;
    const int part = (mode - 1) % 3;
    const bool gemm_gate_up = part != 2, gemm_down = part != 1;
    if (!xq || !xs || !aq || !aqs || !tile_off) {
        rc = TN_ERR_NOMEM;
        goto done;
    }
    if ((err = kn_cuda_moe_fp8_quant_x(be, xq, xs, x, n_tokens, dim)) != cudaSuccess)
        goto done;
    what = "moe_gemm_tile_offsets_kernel";
    moe_gemm_tile_offsets_kernel<<<1, 32, 0, kn_cuda_stream(be)>>>(tile_off, offsets, n_local);
    if ((err = cudaGetLastError()) != cudaSuccess)
        goto done;

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

    what = "moe_gemm_fp8_kernel gate_up";
    if (!gemm_gate_up) {
        err = kn_cuda_moe_fp8_decode_product(be, w, 0, y, aq, aqs, xq, xs, perm, offsets, k);
    } else if (ws) {
        rc = kn_cuda_moe_gemm_fp8_ws(be, op, w, 0, y, aq, aqs, xq, xs, perm, offsets, tile_off, n_tokens, k);
        if (rc != TN_OK)
            goto done;
    } else {
        a.a = xq;
        a.as = xs;
        a.perm = perm;
        a.k_routes = k;
        a.w = (const uint8_t *)w->gate_up;
        a.ws = w->gate_up_scale;
        a.w_bytes = kn_fp8_data_bytes(2 * (size_t)inter, (size_t)dim);
        a.w_scales = kn_fp8_scale_count(2 * (size_t)inter, (size_t)dim);
        a.sld = (int)kn_fp8_scale_ld((size_t)dim);
        a.bias = w->gate_up_bias;
        a.lda = ldx;
        a.nkb = kbx;
        a.n_out = inter;
        a.n_tiles_n = kbi;
        err = wg ? launch_gemm<true, true>(be, a, max_mtiles * a.n_tiles_n)
                 : launch_gemm<true, false>(be, a, max_mtiles * a.n_tiles_n);
    }
    if (err != cudaSuccess)
        goto done;

    what = "moe_gemm_fp8_kernel down";
    if (!gemm_down) {
        err = kn_cuda_moe_fp8_decode_product(be, w, 1, y, aq, aqs, xq, xs, perm, offsets, k);
    } else if (ws) {
        rc = kn_cuda_moe_gemm_fp8_ws(be, op, w, 1, y, aq, aqs, xq, xs, perm, offsets, tile_off, n_tokens, k);
    } else {
        a.a = aq;
        a.as = aqs;
        a.perm = nullptr;
        a.k_routes = 1;
        a.w = (const uint8_t *)w->down;
        a.ws = w->down_scale;
        a.w_bytes = kn_fp8_data_bytes((size_t)dim, (size_t)inter);
        a.w_scales = kn_fp8_scale_count((size_t)dim, (size_t)inter);
        a.sld = (int)kn_fp8_scale_ld((size_t)inter);
        a.bias = nullptr;
        a.lda = ldi;
        a.nkb = kbi;
        a.n_out = dim;
        a.n_tiles_n = kn_cuda_div_up(dim, BN);
        err = wg ? launch_gemm<false, true>(be, a, max_mtiles * a.n_tiles_n)
                 : launch_gemm<false, false>(be, a, max_mtiles * a.n_tiles_n);
    }
done:
    kn_cuda_tmp_free(be, xq);
    kn_cuda_tmp_free(be, xs);
    kn_cuda_tmp_free(be, aq);
    kn_cuda_tmp_free(be, aqs);
    kn_cuda_tmp_free(be, tile_off);
    if (err != cudaSuccess)
        return kn_cuda_device_error(op, what, err);
    return rc;
}
