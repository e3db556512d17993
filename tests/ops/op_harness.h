/* The op case table and what its cases share (in the style of ggml's
 * test-backend-ops): every case of tests/ops/ops_*.c runs on every backend
 * the build has (the CPU always, CUDA when built with CUDA=1 and a device
 * is found), draws fresh random inputs from a seed of its own (the run's
 * seed mixed with the case's number, so the CPU and CUDA runs of a case see
 * the same inputs), poisons its outputs with NaN before the op runs, and
 * checks the result against a float64 recomputation (normwise relative
 * error, max|got - ref| / max|ref|, where NaN never passes) and, on CUDA,
 * against the CPU backend where that says more. One TAP line per case and
 * backend, named op/case/backend.
 *
 * Cases call only the public op API (the kn_ functions of kernels/ that take a kn_backend) and, for
 * the CUDA backend's switches, kernels/cuda/cuda_backend.h. */
#ifndef TANDEM_TESTS_OPS_OP_HARNESS_H
#define TANDEM_TESTS_OPS_OP_HARNESS_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/backend.h"
#include "tests/unit/testutil.h"

/* Backends a case runs on. */
enum { OP_CPU = 1, OP_CUDA = 2, OP_ALL = 3 };
/* Groups: the default run, and the CUDA expert-path runs selected by name
 * (test_cuda_ops SEED moe | moe-fp8). */
enum { OP_G_DEFAULT = 1, OP_G_MOE = 2, OP_G_MOE_FP8 = 4 };

/* fp32 ops on CUDA land near 1e-6 normwise; TF32 products (only with
 * TANDEM_CUDA_TF32=1 at init) near 3e-4. The CPU keeps TU_FP32_REL_TOL. */
#define OP_CUDA_FP32_TOL 2e-5
#define OP_CUDA_TF32_TOL 2e-3

struct op_mem;
typedef struct op_env {
    const kn_backend *be;   /* the backend under test */
    const kn_backend *cpu;  /* the CPU backend (be itself on the CPU run) */
    int cuda;               /* be is the CUDA backend */
    int tf32;               /* TANDEM_CUDA_TF32=1: CUDA fp32 products in TF32 */
    tu_rng rng;
    int failed, n_msgs;
    char first[320];        /* the first failure, for the case's report */
    struct op_mem *mem;     /* what the case allocated, freed after it */
    size_t n_mem, cap_mem;
} op_env;

typedef void (*op_fn)(op_env *e, const void *param);

/* Adds a case: op name, backends and groups it runs in, the function and a
 * copy of its parameters, and its name (printf format). */
void op_case_add(const char *op, unsigned backends, unsigned groups, op_fn fn,
                 const void *param, size_t param_bytes, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
#define OP_CASE(op, backends, fn, param, ...) \
    op_case_add(op, backends, OP_G_DEFAULT, fn, &(param), sizeof(param), __VA_ARGS__)

/* The per-op tables (tests/ops/ops_*.c). */
void ops_register_add(void);
void ops_register_norm(void);
void ops_register_embedding(void);
void ops_register_ep_exchange(void);
void ops_register_fill(void);
void ops_register_matmul(void);
void ops_register_fp8(void);
void ops_register_gemv_fp8(void);
void ops_register_rope(void);
void ops_register_attention(void);
void ops_register_moe(void);
void ops_register_moe_paths(void);
void ops_register_sampling(void);
void ops_register_logprobs(void);
void ops_register_logit_mask(void);
void ops_register_fused_decode(void);

/* The runner (op_runner.c). ops_init parses `[seed [moe|moe-fp8|FILTER]]`
 * (seed: decimal or 0x..; default default_seed, or the time when
 * default_seed is 0; FILTER: a substring of op/case names), registers every
 * table and starts the backends; a missing CUDA device is a `#` line, never
 * a failure. */
typedef struct op_run {
    const char *name;       /* op/case/backend */
    int case_idx, backend;  /* backend: OP_CPU or OP_CUDA */
} op_run;
int ops_init(int argc, char **argv, uint64_t default_seed);
/* The runs selected, in order (case by case, each on its backends). */
size_t ops_runs(const op_run **runs);
/* Runs one: 0 when it passed, else -1 with *why the first failure. */
int ops_run_one(const op_run *r, const char **why);
void ops_finish(void);
/* The whole table as plain TAP (the GPU binary): returns the exit status. */
int ops_main_tap(int argc, char **argv);

/* Memory the case owns, freed when it ends: host (zeroed) and backend
 * buffers. */
void *op_host(op_env *e, size_t bytes);
void *op_dev(op_env *e, size_t bytes);
/* A backend copy of host data (bytes may be 0: a 1-byte buffer). */
void *op_up(op_env *e, const void *host, size_t bytes);
/* A backend buffer of n floats, all NaN. */
float *op_nan(op_env *e, size_t n);
/* Sets n floats of a backend buffer to NaN. */
void op_poison(op_env *e, void *dev, size_t n);
void op_down(op_env *e, void *host, const void *dev, size_t bytes);
/* Host copy of n floats of a backend buffer (owned by the case). */
float *op_get(op_env *e, const void *dev, size_t n);
/* Uploads host data over an existing backend buffer. */
void op_put(op_env *e, void *dev, const void *host, size_t bytes);
/* Host arrays of random floats in [lo, hi) from the case's generator. */
float *op_rand(op_env *e, size_t n, float lo, float hi);
double op_normal(op_env *e);

/* Checks: a failure marks the case failed, prints a `#` line (the first
 * few) and keeps going. */
void op_fail(op_env *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* ok must be true. */
int op_check(op_env *e, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* err <= tol (NaN fails). */
int op_check_err(op_env *e, double err, double tol, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The op returned TN_OK. */
int op_ok(op_env *e, int rc, const char *what);
/* The backend under test's fp32 bound: TU_FP32_REL_TOL on the CPU,
 * OP_CUDA_FP32_TOL (products: OP_CUDA_TF32_TOL under TF32) on CUDA. */
double op_tol_fp32(const op_env *e, int product);
/* How many of a[i], b[i] (i < n) are not equal as floats: a NaN on either
 * side counts, so two runs that should agree bit for bit compare to 0 only
 * when every output is a number and the same. */
size_t op_count_unequal(const float *a, const float *b, size_t n);

#define OP_TRUE(e, cond) op_check(e, (cond) != 0, "%s:%d: %s", __FILE__, __LINE__, #cond)
#define OP_INT_EQ(e, a, b)                                                                      \
    do {                                                                                        \
        long long op_a_ = (long long)(a), op_b_ = (long long)(b);                               \
        op_check(e, op_a_ == op_b_, "%s:%d: %s = %lld, want %lld", __FILE__, __LINE__, #a, op_a_, \
                 op_b_);                                                                        \
    } while (0)
#define OP_MEM_EQ(e, a, b, n)                                                                   \
    op_check(e, memcmp((a), (b), (n)) == 0, "%s:%d: %s differs from %s", __FILE__, __LINE__, #a, #b)
#define OP_STR_EQ(e, a, b) op_check(e, strcmp((a), (b)) == 0, "%s:%d: %s", __FILE__, __LINE__, #a)

#endif
