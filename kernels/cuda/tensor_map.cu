/* TMA tensor maps (tensor_map.cuh). */
#include <stdio.h>
#include "kernels/cuda/tensor_map.cuh"
extern "C" {
#include "kernels/attention.h"
}

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

int kn_cuda_tensor_map_2d(const kn_backend *be, const char *op, const char *what, CUtensorMap *map,
                          CUtensorMapDataType type, const void *base, long long rows, long long cols,
                          long long row_bytes, int box_cols, int box_rows)
{
    tensor_map_encode_fn encode = NULL;
    int rc = tensor_map_encoder(be, op, &encode);
    if (rc != TN_OK)
        return rc;
    cuuint64_t dims[2] = { (cuuint64_t)cols, (cuuint64_t)rows };
    cuuint64_t strides[1] = { (cuuint64_t)row_bytes };
    cuuint32_t box[2] = { (cuuint32_t)box_cols, (cuuint32_t)box_rows };
    cuuint32_t elem_strides[2] = { 1, 1 };
    CUresult r = encode(map, type, 2, (void *)base, dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "tandem: %s: cuTensorMapEncodeTiled failed (CUresult %d) for %s: %lld rows of %lld "
                        "elements, %lld bytes apart, boxes of %d x %d\n",
                op, (int)r, what, rows, cols, row_bytes, box_rows, box_cols);
        return TN_ERR_DEVICE;
    }
    return TN_OK;
}

int kn_cuda_kv_pool_maps(const kn_backend *be, const char *op, const kn_kv_pools *pools, long long rows,
                         int head_dim, int box_rows, CUtensorMap *kmap, CUtensorMap *vmap)
{
    int rc = kn_cuda_tensor_map_2d(be, op, "the K pool", kmap, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, pools->k, rows,
                                   head_dim, 2LL * head_dim, 64, box_rows);
    if (rc == TN_OK)
        rc = kn_cuda_tensor_map_2d(be, op, "the V pool", vmap, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, pools->v, rows,
                                   head_dim, 2LL * head_dim, 64, box_rows);
    return rc;
}
