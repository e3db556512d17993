/* Internal to the CUDA backend: the cuBLASLt plan cache that the FP8
 * block-scaled GEMM (gemm_fp8.cu) and the bf16 GEMM (gemm_bf16_lt.cu)
 * share, so neither pays cuBLASLt's algorithm search on every call.
 *
 * Why: cuBLAS(Lt) picks an algorithm per (m, n, k) on the host. The MoE
 * experts' row counts m differ on every forward (24 layers x 32 experts x
 * 2 GEMMs of fresh shapes), so a per-shape search runs on nearly every call
 * while the GPU waits. Plans are therefore looked up for a bucket of rows
 * (four per octave; the bucket's top size is what the heuristic sees) and run
 * with the real m; where cuBLASLt refuses that pairing, the caller asks for
 * a plan of the exact m (kn_lt_key.m = m).
 *
 * The table is direct-mapped (KN_LT_PLAN_SLOTS slots, a newer key evicts
 * the older one in its slot), so it is bounded whatever shapes come; it
 * lives in the backend's ctx (one backend per thread, like the rest of
 * it) and is freed with the backend. */
#ifndef TANDEM_KERNELS_CUDA_LT_PLAN_CACHE_CUH
#define TANDEM_KERNELS_CUDA_LT_PLAN_CACHE_CUH
#include <cublasLt.h>
#include "kernels/cuda/cuda_common.cuh"

#define KN_LT_PLAN_SLOTS 1024

/* What a plan is for. Fields a kind does not use stay zero; keys are
 * compared bytewise, so build them from a memset. */
enum { KN_LT_KIND_FP8_BLOCK = 1, KN_LT_KIND_BF16 = 2 };
typedef struct kn_lt_key {
    int kind;
    int m;              /* row bucket (kn_lt_row_bucket) or the exact rows */
    int n, k;
    int trans_a, trans_b;
    int out_type;       /* cudaDataType_t of C/D */
    int has_bias;
    int align[4];       /* A, B, C/D, bias: kn_lt_align_of of each pointer */
} kn_lt_key;

typedef struct kn_lt_plan {
    int valid;          /* 1 a plan; -1 cuBLASLt has none for key (a cached refusal); 0 empty */
    kn_lt_key key;
    cublasLtMatmulAlgo_t algo;
    int epilogue_bias;  /* FP8: 1 bias fused in the epilogue, 0 broadcast */
    /* Descriptors a kind keeps with its plan (NULL when it builds them per
     * call); owned by the slot, destroyed on eviction and on free. */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
} kn_lt_plan;

struct kn_lt_cache {
    cublasLtHandle_t lt;
    long long searches;   /* heuristic queries so far (tests, benchmarks) */
    kn_lt_plan plans[KN_LT_PLAN_SLOTS];
};

/* The backend's cache, made on first use (NULL and a message on failure). */
struct kn_lt_cache *kn_lt_cache_of(const kn_backend *be, const char *op);
/* Destroys every slot's descriptors, the handle and the cache; NULL is fine. */
void kn_lt_cache_free(struct kn_lt_cache *c);

/* The slot of key: *hit = 1 when it holds key's plan or key's cached
 * refusal (valid -1); otherwise the slot
 * has been emptied (its descriptors destroyed) for the caller to fill. */
kn_lt_plan *kn_lt_cache_slot(struct kn_lt_cache *c, const kn_lt_key *key, int *hit);
/* Empties a slot (destroys what it owns). */
void kn_lt_plan_reset(kn_lt_plan *p);

/* Largest power of two (<= 256) dividing the address: what the heuristic's
 * MIN_ALIGNMENT preferences want. */
int kn_lt_align_of(const void *p);
/* The row bucket of m (at least min_rows): up to 16 the next power of two;
 * above, the smallest of 1.25, 1.5, 1.75, 2 x 2^j (rounded up to a
 * multiple of 16) that is >= m, so the bucket is within 25% of m and a
 * multiple of 16 (the FP8 GEMM's row alignment). */
int kn_lt_row_bucket(int m, int min_rows);

#endif
