/* Internal to the CUDA backend: the tensor-core and load wrappers (inline
 * PTX) that the mma kernels share: attention_mma.cu (bf16 attention),
 * moe_experts.cu (bf16 experts) and moe_grouped_fp8.cu (FP8 experts).
 *
 * mma.sync.aligned.m16n8k16 fragment layouts (PTX ISA; g = lane / 4,
 * t = lane % 4): A (16x16, row) a0 = (g, 2t..2t+1), a1 = (g+8, 2t..),
 * a2 = (g, 2t+8..), a3 = (g+8, 2t+8..); B (16x8, col) b0 = (k 2t..2t+1,
 * n g), b1 = (k 2t+8.., n g); C/D (16x8) c0..c1 = row g, cols 2t..2t+1,
 * c2..c3 = row g+8. */
#ifndef TANDEM_KERNELS_CUDA_MMA_CUH
#define TANDEM_KERNELS_CUDA_MMA_CUH
#include <cuda_bf16.h>
#include <stdint.h>

/* c += A B with bf16 A (a0..a3) and B (b0, b1), fp32 accumulation. */
static __device__ __forceinline__ void kn_mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1,
                                                   uint32_t a2, uint32_t a3, uint32_t b0,
                                                   uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* The same with f16 operands. */
static __device__ __forceinline__ void kn_mma_f16(float (&c)[4], uint32_t a0, uint32_t a1,
                                                  uint32_t a2, uint32_t a3, uint32_t b0,
                                                  uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* c += a * b, m16n8k32, e4m3 inputs (4 codes a register, lowest k in
 * the low byte), fp32 sums (sm_89+). Fragments: a0 row g k 4t..4t+3, a1
 * row g+8 the same k, a2 / a3 the same rows at k 16+4t..; b0 k 4t..4t+3
 * column g, b1 k 16+4t..; c as kn_mma_f16 (g = lane/4, t = lane%4). */
static __device__ __forceinline__ void kn_mma_e4m3(float (&c)[4], uint32_t a0, uint32_t a1,
                                                   uint32_t a2, uint32_t a3, uint32_t b0,
                                                   uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Four 8x8 b16 matrices from shared memory (ldmatrix .x4): lane l gives
 * the address of row l % 8 of matrix l / 8; register i holds matrix i. */
static __device__ __forceinline__ void kn_ldmatrix_x4(uint32_t (&r)[4], const void *p)
{
    unsigned addr = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* The same, transposed (ldmatrix .x4 .trans). */
static __device__ __forceinline__ void kn_ldmatrix_x4_trans(uint32_t (&r)[4], const void *p)
{
    unsigned addr = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* 16 bytes from global memory through the read-only path without
 * allocating in L1 (weights streamed once per pass, so the activation rows
 * re-read by every warp stay in L1). Not volatile: the data must not
 * change during the kernel. */
static __device__ __forceinline__ uint4 kn_ld_stream16(const void *p)
{
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

/* Two floats as a bf16x2 register (round to nearest even): lo in the low
 * half. */
static __device__ __forceinline__ uint32_t kn_pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
#endif
