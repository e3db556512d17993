/* Internal to the CUDA backend: 16-byte cp.async copies from global to
 * shared memory (sm_80+), cached in L2 only (.cg), and their groups. The
 * decode attention's K/V ring (attention_decode_mma.cu) and the grouped FP8
 * experts' staged token rows (moe_grouped_fp8.cu) use them. */
#ifndef TANDEM_KERNELS_CUDA_CP_ASYNC_CUH
#define TANDEM_KERNELS_CUDA_CP_ASYNC_CUH
#include <stdint.h>

/* Copies src_bytes (0..16; the rest of the 16 zero-filled) from src to the
 * shared address dst (__cvta_generic_to_shared). */
__device__ __forceinline__ void kn_cp_async16(uint32_t dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void kn_cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/* Waits until at most N of this thread's committed groups are in flight. */
template <int N> __device__ __forceinline__ void kn_cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif
