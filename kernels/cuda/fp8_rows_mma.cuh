/* Internal to the CUDA backend: the tensor-core dot product of FP8 weight
 * rows with FP8 (1x128 block-scaled) activation rows that the decode-sized
 * FP8 kernels share: moe_grouped_fp8.cu (the grouped experts at a few
 * tokens per expert) and gemm_fp8_skinny.cu (the dense projections at a
 * few to a hundred rows).
 *
 * The products run as mma.sync m16n8k32 on the e4m3 codes themselves
 * (sm_89+): each product of two codes is exact, but the tensor cores' own
 * sum keeps fewer bits than fp32 (about 14 on Hopper, DeepSeek-V3's
 * report), so a block's four mmas start from zero and after each 128-wide
 * block the lane adds block_sum * s_x * s_w to its fp32 totals (the
 * promotion every 128 that report describes). The op cases hold the
 * result to the FP8 bound against float64 (tests/ops/ops_fp8.c, 1e-3).
 * Rows are padded to a multiple of 128 in both operands (weight padding
 * holds finite codes, the activation padding zero codes), so the loops run
 * over whole blocks. Each lane loads 16 contiguous bytes of its two weight
 * rows (g and g+8, g = lane/4) and of its token row at k = 16*(lane%4) of
 * each 64-wide chunk; since the k order inside a block's dot product is
 * free, the same registers feed A and B "virtual" k columns that map to
 * the same real k's (the mma's k 4t..4t+3 and 16+4t..16+4t+3 are bytes
 * 0-3 and 4-7 of the lane's chunk, then 8-11 and 12-15 in a second mma),
 * so no shared memory and no conversion is needed. (Until s12 the codes
 * were converted to f16 for m16n8k16, 1.5 conversions per byte of weight
 * and of x per tile: the kernels were issue-bound past a few rows.) */
#ifndef TANDEM_KERNELS_CUDA_FP8_ROWS_MMA_CUH
#define TANDEM_KERNELS_CUDA_FP8_ROWS_MMA_CUH
#include <stdint.h>
#include "kernels/cuda/mma.cuh"
extern "C" {
#include "kernels/fp8.h"
}

/* p += the products of one lane's 16-byte chunks: weight rows lo (w) and
 * hi (v) against the token row x, as two m16n8k32 e4m3 mmas. */
__device__ __forceinline__ void fp8_chunk_mma(float (&p)[4], const uint4 &w, const uint4 &v, const uint4 &x)
{
    kn_mma_e4m3(p, w.x, v.x, w.y, v.y, x.x, x.y);
    kn_mma_e4m3(p, w.z, v.z, w.w, v.w, x.z, x.w);
}

/* acc[j] += block-scaled products of this lane's weight rows wlo (row g)
 * and whi (row g+8), each ld codes with block scales slo[kb] / shi[kb],
 * with the activation rows of tile j: codes xq + xrow[j] * ld (xrow[j] < 0:
 * no row, zero codes) and scales xs + srow[j][h] * nkb for the tile's
 * tokens 2t + h (the mma C layout: acc[j][h] row g, acc[j][2+h] row g+8),
 * over the 128-wide k blocks kb_lo <= kb < kb_hi (nkb: blocks per row, the
 * stride of xs). U blocks of weight loads are issued before they are used. */
template <int NT, int U>
__device__ __forceinline__ void fp8_rows_dot(float (&acc)[NT][4], const uint8_t *wlo, const uint8_t *whi,
                                             const float *slo, const float *shi, const uint8_t *xq,
                                             const float *xs, const int (&xrow)[NT], const int (&srow)[NT][2],
                                             int kb_lo, int kb_hi, int nkb, int ld, int nr, int lane)
{
    const int t = lane & 3;
    wlo += 16 * t;
    whi += 16 * t;
    for (int kb0 = kb_lo; kb0 < kb_hi; kb0 += U) {
        uint4 wa[U][2], wb[U][2];
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (kb0 + u < kb_hi) {
                const size_t o = (size_t)(kb0 + u) * KN_FP8_BLOCK;
                wa[u][0] = kn_ld_stream16(wlo + o);
                wa[u][1] = kn_ld_stream16(wlo + o + 64);
                wb[u][0] = kn_ld_stream16(whi + o);
                wb[u][1] = kn_ld_stream16(whi + o + 64);
            } else {
                wa[u][0] = wa[u][1] = wb[u][0] = wb[u][1] = make_uint4(0u, 0u, 0u, 0u);
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int kb = kb0 + u;
            if (kb >= kb_hi) /* warp-uniform */
                break;
            const float sl = slo[kb], sh = shi[kb];
#pragma unroll
            for (int j = 0; j < NT; j++) {
                if (8 * j >= nr) /* warp-uniform: no tokens in this tile */
                    break;
                uint4 xv[2];
                if (xrow[j] >= 0) {
                    const uint8_t *xp = xq + (size_t)xrow[j] * ld + (size_t)kb * KN_FP8_BLOCK + 16 * t;
                    xv[0] = *(const uint4 *)xp;
                    xv[1] = *(const uint4 *)(xp + 64);
                } else {
                    xv[0] = xv[1] = make_uint4(0u, 0u, 0u, 0u);
                }
                float p[4] = { 0.f, 0.f, 0.f, 0.f };
                fp8_chunk_mma(p, wa[u][0], wb[u][0], xv[0]);
                fp8_chunk_mma(p, wa[u][1], wb[u][1], xv[1]);
                const float s0 = xs[(size_t)srow[j][0] * nkb + kb], s1 = xs[(size_t)srow[j][1] * nkb + kb];
                acc[j][0] = fmaf(p[0], s0 * sl, acc[j][0]);
                acc[j][1] = fmaf(p[1], s1 * sl, acc[j][1]);
                acc[j][2] = fmaf(p[2], s0 * sh, acc[j][2]);
                acc[j][3] = fmaf(p[3], s1 * sh, acc[j][3]);
            }
        }
    }
}
/* The product of one 16-column tile split over K: the block's WARPS warps
 * each take a contiguous range of 128-wide k blocks of the tile's weight
 * rows c0..c0+15 (of n: w, [n][ld] codes; ws, scale rows sld floats apart,
 * nkb blocks) against rows row0 .. row0 + rows - 1 of xq / xs (8 NT rows a
 * pass: fp8_rows_dot), warps 1.. leave their sums in red and warp 0 adds
 * them in warp order (deterministic), adds bias (or nothing: NULL) and
 * writes out[r][c0..] for r < rows, out rows ldo floats apart. Every
 * thread of the block calls it (block barriers). */
template <int NT, int U, int WARPS>
__device__ __forceinline__ void fp8_tile_ksplit(float (&red)[WARPS - 1][NT * 4][32], const uint8_t *w,
                                                const float *ws, int n, int c0, int ld, int sld, int nkb,
                                                const uint8_t *xq, const float *xs, int row0, int rows,
                                                float *out, size_t ldo, const float *bias)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, t = lane & 3;
    /* columns past n compute a copy of the last one, never stored */
    const int lo = min(c0 + gq, n - 1), hi = min(c0 + gq + 8, n - 1);
    const uint8_t *wlo = w + (size_t)lo * ld, *whi = w + (size_t)hi * ld;
    const float *slo = ws + (size_t)(lo / KN_FP8_BLOCK) * sld, *shi = ws + (size_t)(hi / KN_FP8_BLOCK) * sld;
    const int per = (nkb + WARPS - 1) / WARPS;
    const int kb_lo = min(warp * per, nkb), kb_hi = min(kb_lo + per, nkb); /* may be empty */
    const float b_lo = bias && c0 + gq < n ? bias[c0 + gq] : 0.f;
    const float b_hi = bias && c0 + gq + 8 < n ? bias[c0 + gq + 8] : 0.f;
    for (int r0 = 0; r0 < rows; r0 += 8 * NT) {
        const int nr = min(8 * NT, rows - r0), base = row0 + r0;
        int xrow[NT], srow[NT][2];
#pragma unroll
        for (int j = 0; j < NT; j++) {
            xrow[j] = 8 * j + gq < nr ? base + 8 * j + gq : -1;
            srow[j][0] = base + min(8 * j + 2 * t, nr - 1);
            srow[j][1] = base + min(8 * j + 2 * t + 1, nr - 1);
        }
        float acc[NT][4];
#pragma unroll
        for (int j = 0; j < NT; j++)
            acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
        fp8_rows_dot<NT, U>(acc, wlo, whi, slo, shi, xq, xs, xrow, srow, kb_lo, kb_hi, nkb, ld, nr, lane);
        if (warp > 0)
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int q = 0; q < 4; q++)
                    red[warp - 1][4 * j + q][lane] = acc[j][q];
        __syncthreads();
        if (warp == 0) {
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int q = 0; q < 4; q++)
                    for (int v = 0; v < WARPS - 1; v++)
                        acc[j][q] += red[v][4 * j + q][lane];
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = 8 * j + 2 * t + h;
                    if (r < nr) {
                        float *o = out + (size_t)(r0 + r) * ldo;
                        if (c0 + gq < n)
                            o[c0 + gq] = acc[j][h] + b_lo;
                        if (c0 + gq + 8 < n)
                            o[c0 + gq + 8] = acc[j][2 + h] + b_hi;
                    }
                }
        }
        __syncthreads(); /* red is rewritten by the next pass */
    }
}
#endif
