/* Internal to the CUDA backend: Hopper warpgroup matrix multiply (wgmma,
 * sm_90a) wrappers in inline PTX, used by attention_wgmma.cu.
 *
 * A warpgroup is 4 consecutive warps starting at a warp index divisible by
 * 4; every wgmma here is issued by all 128 of its threads together.
 *
 * Register fragments (PTX ISA "Register Fragments and Shared Memory Matrix
 * Layouts" for wgmma; g = lane / 4, t = lane % 4, warp w of the
 * warpgroup owns rows 16w..16w+15 of the 64):
 *   A 64x16 bf16, four 32-bit registers: a0 (row g, k 2t..2t+1),
 *     a1 (row g+8, k 2t..), a2 (row g, k 2t+8..), a3 (row g+8, k 2t+8..):
 *     the mma.sync m16n8k16 A layout (mma.cuh), one per warp.
 *   D 64xN fp32, N/2 registers: d[4i + c] is row g + 8*(c >= 2), column
 *     8i + 2t + (c & 1).
 * So two adjacent 8-column D blocks, rounded to bf16, are one A fragment
 * of the next product (P = softmax(S) feeding O += P V).
 *
 * Shared-memory operands are described by a 64-bit matrix descriptor.
 * Only the 128-byte swizzle is used: rows of 128 bytes (64 bf16), 8-row
 * atoms of 1024 bytes that start 1024-byte aligned, the 16-byte chunk c of
 * row r stored at chunk c ^ (r % 8) -- the layout a TMA copy with
 * CU_TENSOR_MAP_SWIZZLE_128B writes, and the one attention_wgmma.cu's
 * cp.async loads write by hand (kn_sw128_offset). */
#ifndef TANDEM_KERNELS_CUDA_WGMMA_CUH
#define TANDEM_KERNELS_CUDA_WGMMA_CUH
#include <stdint.h>

/* Byte offset of 16-byte chunk c (0..7) of row r in a 128-byte-swizzled
 * tile whose base is 1024-byte aligned. */
static __device__ __forceinline__ uint32_t kn_sw128_offset(int r, int c)
{
    return (uint32_t)(r * 128 + ((c ^ (r & 7)) << 4));
}

/* Descriptor of a 128-byte-swizzled operand at shared address addr:
 * bits 0-13 start address >> 4, 16-29 leading-dimension byte offset >> 4,
 * 32-45 stride-dimension byte offset >> 4, 49-51 base offset (0: atoms are
 * 1024-byte aligned), 62-63 swizzle mode (1 = 128 bytes).
 * K-major (rows along N, K contiguous): sbo = 1024 (next 8 rows), lbo
 * unused for this swizzle. MN-major (rows along K, N contiguous): sbo =
 * 1024 (next 8 K rows), lbo = distance between 64-element N blocks. */
static __device__ __forceinline__ uint64_t kn_wgmma_desc_sw128(uint32_t addr, uint32_t lbo_bytes,
                                                               uint32_t sbo_bytes)
{
    uint64_t d = (uint64_t)((addr & 0x3FFFFu) >> 4);
    d |= (uint64_t)((lbo_bytes >> 4) & 0x3FFFu) << 16;
    d |= (uint64_t)((sbo_bytes >> 4) & 0x3FFFu) << 32;
    d |= (uint64_t)1 << 62;
    return d;
}

/* Orders this warpgroup's earlier register and shared-memory accesses
 * before the wgmma that follow (needed before the first wgmma and whenever
 * the accumulators or A registers were touched by other instructions). */
static __device__ __forceinline__ void kn_wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
static __device__ __forceinline__ void kn_wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
/* Waits until at most N committed wgmma groups are pending. */
template <int N> static __device__ __forceinline__ void kn_wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Keeps the compiler from moving accesses of r across the wgmma waits. */
template <int N> static __device__ __forceinline__ void kn_wgmma_fence_regs(float (&r)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(r[i])::"memory");
}
/* Orders this thread's generic-proxy shared-memory writes (ordinary
 * stores, cp.async) before later async-proxy reads (wgmma, TMA). */
static __device__ __forceinline__ void kn_fence_proxy_async_smem()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* d (64x128 fp32, accumulator layout) = A (64x16 bf16 in registers) x B
 * (16x128 bf16 behind desc) + (scale_d ? d : 0); TRANS_B = 1 reads B
 * MN-major (rows of B contiguous along N). */
template <int TRANS_B>
static __device__ __forceinline__ void kn_wgmma_m64n128k16_rs(float (&d)[64], const uint32_t (&a)[4],
                                                            uint64_t desc, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d), "n"(TRANS_B));
}

/* d (64x64 fp32, accumulator layout) = A (64x16 bf16 in registers) x B
 * (16x64 bf16 behind desc) + (scale_d ? d : 0); TRANS_B = 1 reads B
 * MN-major (rows of B contiguous along N). */
template <int TRANS_B>
static __device__ __forceinline__ void kn_wgmma_m64n64k16_rs(float (&d)[32], const uint32_t (&a)[4],
                                                            uint64_t desc, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d), "n"(TRANS_B));
}

/* d (64x128 fp32) = A (64x16 bf16 behind desc_a, K-major) x B (16x128 bf16
 * behind desc_b, K-major) + (scale_d ? d : 0). */
static __device__ __forceinline__ void kn_wgmma_m64n128k16_ss(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                            int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "%64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

/* d (64x64 fp32) = A (64x16 bf16 behind desc_a, K-major) x B (16x64 bf16
 * behind desc_b, K-major) + (scale_d ? d : 0): the left half of the
 * m64n128k16 form, for a key tile whose right half no row sees. */
static __device__ __forceinline__ void kn_wgmma_m64n64k16_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                           int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

#endif
