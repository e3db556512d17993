/* The --device, --weights and --kv-dtype command-line values shared by the
 * engine's executables (tandem-generate, tandem-bench, the prefiller and
 * decoder). */
#ifndef TANDEM_ENGINE_DEVICE_H
#define TANDEM_ENGINE_DEVICE_H
#include <stddef.h>
#include "engine/model.h"
#include "kernels/backend.h"
#include "kernels/dtype.h"

/* "cpu", "cuda" (device 0) or "cuda:N". Returns 0 and fills kind/ordinal,
 * or -1 for anything else. */
int tm_device_parse(const char *arg, kn_backend_kind *kind, int *ordinal);

/* Parses arg and initialises *be for it. On failure returns a negative
 * status, leaves *be safe to kn_backend_free, and writes a one-line reason
 * into err: a bad value, a build without the CUDA backend ("rebuild with
 * make CUDA=1"), or a device that does not exist or failed to start. */
int tm_device_open(const char *arg, kn_backend *be, char *err, size_t errlen);

/* A name of the physical device be runs on that is the same in every
 * process using it: "GPU-<uuid>" on CUDA (as `nvidia-smi -L` prints it;
 * ordinals differ between processes with different CUDA_VISIBLE_DEVICES),
 * "cpu" on the CPU backend. Rank groups compare them to find ranks that
 * share a GPU (engine/rank_comm.h). */
#define TM_DEVICE_ID_MAX 48
int tm_device_id(const kn_backend *be, char out[TM_DEVICE_ID_MAX], char *err, size_t errlen);

/* "auto", "f32", "bf16" or "fp8". Returns 0, or -1 for anything else. */
int tm_weights_parse(const char *arg, tm_weight_dtype *out);

/* --kv-dtype: the KV cache's element type. auto is f32 on the CPU backend
 * (the reference the other dtypes are measured against; docs/PERF.md "KV
 * cache dtype") and bf16 on CUDA; fp8 is e4m3 with a scale per (token,
 * KV head) row. */
typedef enum { TM_KV_AUTO = 0, TM_KV_F32, TM_KV_BF16, TM_KV_FP8 } tm_kv_dtype;
/* "auto", "f32", "bf16" or "fp8". Returns 0; -1 for anything else, with
 * the reason in err. */
int tm_kv_dtype_parse(const char *arg, tm_kv_dtype *out, char *err, size_t errlen);
/* The dtype the cache gets on a backend of this kind. */
kn_dtype tm_kv_dtype_resolve(tm_kv_dtype d, kn_backend_kind kind);

#endif
