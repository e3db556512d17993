#include "engine/device.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef TANDEM_CUDA
#include <cuda_runtime.h>
#endif
#include "common/file.h"
#include "common/status.h"

int tm_device_parse(const char *arg, kn_backend_kind *kind, int *ordinal)
{
    if (!arg)
        return -1;
    if (strcmp(arg, "cpu") == 0) {
        *kind = KN_BACKEND_CPU;
        *ordinal = 0;
        return 0;
    }
    if (strcmp(arg, "cuda") == 0) {
        *kind = KN_BACKEND_CUDA;
        *ordinal = 0;
        return 0;
    }
    if (strncmp(arg, "cuda:", 5) != 0 || arg[5] < '0' || arg[5] > '9')
        return -1;
    char *end;
    errno = 0;
    long n = strtol(arg + 5, &end, 10);
    if (errno || *end != '\0' || n < 0 || n > 1023)
        return -1;
    *kind = KN_BACKEND_CUDA;
    *ordinal = (int)n;
    return 0;
}

int tm_device_open(const char *arg, kn_backend *be, char *err, size_t errlen)
{
    kn_backend_kind kind;
    int ordinal;
    memset(be, 0, sizeof(*be));
    if (tm_device_parse(arg, &kind, &ordinal) != 0) {
        tn_errf(err, errlen, "--device must be cpu, cuda or cuda:N, got '%s'", arg ? arg : "");
        return TN_ERR_ARG;
    }
    if (kind == KN_BACKEND_CPU) {
        int rc = kn_backend_init_cpu(be);
        if (rc)
            tn_errf(err, errlen, "cannot initialise the CPU backend: %s", tn_status_str(rc));
        return rc;
    }
    int rc = kn_backend_init_cuda(be, ordinal);
    if (rc == TN_ERR_UNSUPPORTED)
        tn_errf(err, errlen, "--device %s: this build has no CUDA backend (rebuild with "
                "`make CUDA=1`, which puts the programs in build-cuda/)", arg);
    else if (rc)
        tn_errf(err, errlen, "--device %s: cannot initialise CUDA device %d: %s", arg,
                ordinal, tn_status_str(rc));
    return rc;
}

int tm_device_id(const kn_backend *be, char out[TM_DEVICE_ID_MAX], char *err, size_t errlen)
{
    out[0] = '\0';
    if (!be)
        return tn_fail(err, errlen, TN_ERR_ARG, "tm_device_id: no backend");
    if (be->kind == KN_BACKEND_CPU) {
        snprintf(out, TM_DEVICE_ID_MAX, "cpu");
        return TN_OK;
    }
#ifdef TANDEM_CUDA
    struct cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, be->device);
    if (e != cudaSuccess)
        return tn_fail(err, errlen, TN_ERR_DEVICE, "cannot read CUDA device %d's UUID: %s",
                       be->device, cudaGetErrorString(e));
    const unsigned char *u = (const unsigned char *)p.uuid.bytes;
    snprintf(out, TM_DEVICE_ID_MAX,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
             u[13], u[14], u[15]);
    return TN_OK;
#else
    return tn_fail(err, errlen, TN_ERR_UNSUPPORTED, "this build has no CUDA backend");
#endif
}

int tm_weights_parse(const char *arg, tm_weight_dtype *out)
{
    if (!arg)
        return -1;
    if (strcmp(arg, "auto") == 0)
        *out = TM_WEIGHTS_AUTO;
    else if (strcmp(arg, "f32") == 0)
        *out = TM_WEIGHTS_F32;
    else if (strcmp(arg, "bf16") == 0)
        *out = TM_WEIGHTS_BF16;
    else if (strcmp(arg, "fp8") == 0)
        *out = TM_WEIGHTS_FP8;
    else
        return -1;
    return 0;
}

int tm_kv_dtype_parse(const char *arg, tm_kv_dtype *out, char *err, size_t errlen)
{
    if (arg && strcmp(arg, "auto") == 0)
        *out = TM_KV_AUTO;
    else if (arg && strcmp(arg, "f32") == 0)
        *out = TM_KV_F32;
    else if (arg && strcmp(arg, "bf16") == 0)
        *out = TM_KV_BF16;
    else if (arg && strcmp(arg, "fp8") == 0)
        *out = TM_KV_FP8;
    else {
        tn_errf(err, errlen, "--kv-dtype must be auto, f32, bf16 or fp8, got '%s'", arg ? arg : "");
        return -1;
    }
    return 0;
}

kn_dtype tm_kv_dtype_resolve(tm_kv_dtype d, kn_backend_kind kind)
{
    switch (d) {
    case TM_KV_F32: return KN_F32;
    case TM_KV_BF16: return KN_BF16;
    case TM_KV_FP8: return KN_FP8_E4M3;
    case TM_KV_AUTO: break;
    }
    return kind == KN_BACKEND_CPU ? KN_F32 : KN_BF16;
}
