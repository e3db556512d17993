/* Internal to the CUDA backend (sm_90): TMA tensor maps of row-major 2D
 * tensors and the copy of one box of such a tensor into shared memory,
 * shared by the TMA kernels (attention_wgmma.cu, attention_decode_tma.cu,
 * moe_gemm_fp8_ws.cu). Every map here is 128-byte swizzled (chunk c of 16
 * bytes in box row r lands at chunk c ^ (r % 8) of a 1024-byte aligned
 * destination: the layout wgmma and conflict-free ldmatrix read), so a box
 * row is at most 128 bytes. */
#ifndef TANDEM_KERNELS_CUDA_TENSOR_MAP_CUH
#define TANDEM_KERNELS_CUDA_TENSOR_MAP_CUH
#include <cuda.h>
#include <stdint.h>
#include "kernels/cuda/cuda_common.cuh"

/* map := the tensor [rows][cols] of `type` at base (rows row_bytes apart, a
 * multiple of 16; base 16-byte aligned) in boxes of box_rows x box_cols
 * elements (box_cols * element size <= 128), zeros outside the tensor.
 * `what` names the tensor in the error message. The driver's
 * cuTensorMapEncodeTiled is looked up once per backend (cudart does not
 * export it; the runtime's entry point keeps libcuda off the link line). */
int kn_cuda_tensor_map_2d(const kn_backend *be, const char *op, const char *what, CUtensorMap *map,
                          CUtensorMapDataType type, const void *base, long long rows, long long cols,
                          long long row_bytes, int box_cols, int box_rows);

/* The bf16 KV pools' maps: each pool as the tensor [rows = n_pages *
 * n_kv_heads * page_size][head_dim] in boxes of box_rows x 64 (head_dim 128
 * takes two boxes a row). */
int kn_cuda_kv_pool_maps(const kn_backend *be, const char *op, const struct kn_kv_pools *pools, long long rows,
                         int head_dim, int box_rows, CUtensorMap *kmap, CUtensorMap *vmap);

/* Box (col, row) of the tensor behind map (a __grid_constant__ kernel
 * parameter) into shared memory at dst, its bytes completing on mbarrier
 * bar (kernels/cuda/mbarrier.cuh), whose expect_tx the caller raised by
 * them. */
static __device__ __forceinline__ void kn_tma_load_2d(uint32_t dst, const CUtensorMap *map, int col, int row,
                                                      uint32_t bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(col), "r"(row), "r"(bar)
                 : "memory");
}
#endif
