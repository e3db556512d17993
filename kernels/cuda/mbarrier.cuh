/* Internal to the CUDA backend (sm_90): mbarriers and bulk copies into
 * shared memory (inline PTX), shared by the TMA kernels (attention_wgmma.cu,
 * moe_gemm_fp8_ws.cu) and the FP8 GEMVs (gemv_fp8.cuh). Addresses are
 * shared-state-space addresses (kn_smem_addr), as the instructions take. */
#ifndef TANDEM_KERNELS_CUDA_MBARRIER_CUH
#define TANDEM_KERNELS_CUDA_MBARRIER_CUH
#include <stdint.h>

static __device__ __forceinline__ uint32_t kn_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}
static __device__ __forceinline__ void kn_mbar_init(uint32_t bar, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
/* After the inits, before another thread or the copy engine uses them. */
static __device__ __forceinline__ void kn_mbar_init_fence()
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
static __device__ __forceinline__ void kn_mbar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
static __device__ __forceinline__ void kn_mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
static __device__ __forceinline__ bool kn_mbar_try_wait(uint32_t bar, int parity)
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
/* Until the phase of this parity has completed. A wait past about 2^34
 * cycles (seconds; every use here completes in microseconds) traps: a
 * broken pipeline shows as a launch failure, not a hang. */
static __device__ __forceinline__ void kn_mbar_wait(uint32_t bar, int parity)
{
    if (kn_mbar_try_wait(bar, parity))
        return;
    const long long t0 = clock64();
    while (!kn_mbar_try_wait(bar, parity))
        if (clock64() - t0 > (1LL << 34))
            __trap();
}
/* bytes (a multiple of 16; src and dst 16-byte aligned) from global src to
 * shared dst by the copy engine, completing on mbarrier bar (whose
 * expect_tx the caller raised by them). */
static __device__ __forceinline__ void kn_bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}
#endif
