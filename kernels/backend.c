/* Backend lifetime and buffers. The CPU backend's buffers are plain host
 * memory; the CUDA backend's live in kernels/cuda/ behind cuda_backend.h and
 * exist only when the build defines TANDEM_CUDA. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/backend.h"
#include "kernels/kn_check.h"
#include "common/status.h"
#ifdef TANDEM_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

/* Host buffers are cache-line aligned so the vectorised loops never split a
 * line at the start of a row. */
enum { CPU_ALIGN = 64 };

int kn_backend_init_cpu(kn_backend *be)
{
    if (!be)
        return kn_arg_error("kn_backend_init_cpu", "backend is NULL");
    memset(be, 0, sizeof *be);
    be->kind = KN_BACKEND_CPU;
    return TN_OK;
}

int kn_backend_init_cuda(kn_backend *be, int device)
{
    if (!be)
        return kn_arg_error("kn_backend_init_cuda", "backend is NULL");
    /* A failed init leaves an empty CPU backend, so kn_backend_free on it is safe. */
    memset(be, 0, sizeof *be);
    if (device < 0)
        return kn_arg_error("kn_backend_init_cuda", "device %d is negative", device);
#ifdef TANDEM_CUDA
    return kn_cuda_backend_init(be, device);
#else
    return kn_no_cuda("kn_backend_init_cuda");
#endif
}

void kn_backend_free(kn_backend *be)
{
    if (!be)
        return;
    if (be->kind == KN_BACKEND_CPU) {
        free(be->scratch);
    } else if (be->kind == KN_BACKEND_CUDA) {
#ifdef TANDEM_CUDA
        kn_cuda_backend_free(be);
#endif
    }
    memset(be, 0, sizeof *be);
}

int kn_backend_sync(const kn_backend *be)
{
    if (!be)
        return kn_arg_error("kn_backend_sync", "backend is NULL");
    switch (be->kind) {
    case KN_BACKEND_CPU:
        return TN_OK;
    case KN_BACKEND_CUDA:
#ifdef TANDEM_CUDA
        return kn_cuda_backend_sync(be);
#else
        return kn_no_cuda("kn_backend_sync");
#endif
    }
    return kn_arg_error("kn_backend_sync", "unknown backend kind %d", (int)be->kind);
}

int kn_backend_trim(const kn_backend *be)
{
    if (!be)
        return kn_arg_error("kn_backend_trim", "backend is NULL");
    switch (be->kind) {
    case KN_BACKEND_CPU:
        return TN_OK;
    case KN_BACKEND_CUDA:
#ifdef TANDEM_CUDA
        return kn_cuda_trim(be);
#else
        return kn_no_cuda("kn_backend_trim");
#endif
    }
    return kn_arg_error("kn_backend_trim", "unknown backend kind %d", (int)be->kind);
}

void *kn_malloc(const kn_backend *be, size_t bytes)
{
    if (!be) {
        kn_arg_error("kn_malloc", "backend is NULL");
        return NULL;
    }
    switch (be->kind) {
    case KN_BACKEND_CPU: {
        /* aligned_alloc wants a multiple of the alignment; 0 bytes still
         * returns a distinct pointer the caller can free. */
        if (bytes > SIZE_MAX - CPU_ALIGN)
            return NULL;
        size_t rounded = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
        return aligned_alloc(CPU_ALIGN, rounded ? rounded : CPU_ALIGN);
    }
    case KN_BACKEND_CUDA:
#ifdef TANDEM_CUDA
        return kn_cuda_malloc(be, bytes);
#else
        kn_no_cuda("kn_malloc");
        return NULL;
#endif
    }
    kn_arg_error("kn_malloc", "unknown backend kind %d", (int)be->kind);
    return NULL;
}

void kn_free(const kn_backend *be, void *ptr)
{
    if (!ptr)
        return;
    if (!be) {
        kn_arg_error("kn_free", "backend is NULL; buffer not freed");
        return;
    }
    if (be->kind == KN_BACKEND_CPU) {
        free(ptr);
        return;
    }
#ifdef TANDEM_CUDA
    if (be->kind == KN_BACKEND_CUDA) {
        kn_cuda_free(be, ptr);
        return;
    }
#endif
    kn_arg_error("kn_free", "backend kind %d has no buffers here; buffer not freed",
                 (int)be->kind);
}

/* Shared checks of the two copy directions. */
static int check_copy(const char *op, const kn_backend *be, const void *dst,
                      const void *src, size_t bytes)
{
    if (!be)
        return kn_arg_error(op, "backend is NULL");
    if (bytes > 0 && (!dst || !src))
        return kn_arg_error(op, "%s pointer is NULL for a %zu-byte copy",
                            dst ? "source" : "destination", bytes);
    return TN_OK;
}

int kn_copy_to_backend(const kn_backend *be, void *dst, const void *host_src, size_t bytes)
{
    int rc = check_copy("kn_copy_to_backend", be, dst, host_src, bytes);
    if (rc != TN_OK || bytes == 0)
        return rc;
    switch (be->kind) {
    case KN_BACKEND_CPU:
        memmove(dst, host_src, bytes);
        return TN_OK;
    case KN_BACKEND_CUDA:
#ifdef TANDEM_CUDA
        return kn_cuda_copy_to_device(be, dst, host_src, bytes);
#else
        return kn_no_cuda("kn_copy_to_backend");
#endif
    }
    return kn_arg_error("kn_copy_to_backend", "unknown backend kind %d", (int)be->kind);
}

int kn_copy_to_host(const kn_backend *be, void *host_dst, const void *src, size_t bytes)
{
    int rc = check_copy("kn_copy_to_host", be, host_dst, src, bytes);
    if (rc != TN_OK || bytes == 0)
        return rc;
    switch (be->kind) {
    case KN_BACKEND_CPU:
        memmove(host_dst, src, bytes);
        return TN_OK;
    case KN_BACKEND_CUDA:
#ifdef TANDEM_CUDA
        return kn_cuda_copy_to_host(be, host_dst, src, bytes);
#else
        return kn_no_cuda("kn_copy_to_host");
#endif
    }
    return kn_arg_error("kn_copy_to_host", "unknown backend kind %d", (int)be->kind);
}

void *kn_host_alloc(const kn_backend *be, size_t bytes)
{
    if (!be) {
        kn_arg_error("kn_host_alloc", "backend is NULL");
        return NULL;
    }
#ifdef TANDEM_CUDA
    if (be->kind == KN_BACKEND_CUDA)
        return kn_cuda_host_alloc(be, bytes);
#endif
    if (be->kind != KN_BACKEND_CPU) {
        kn_no_cuda("kn_host_alloc");
        return NULL;
    }
    /* the CPU backend's host memory is its own */
    return kn_malloc(be, bytes);
}

void kn_host_free(const kn_backend *be, void *ptr)
{
    if (!ptr)
        return;
    if (!be) {
        kn_arg_error("kn_host_free", "backend is NULL; buffer not freed");
        return;
    }
#ifdef TANDEM_CUDA
    if (be->kind == KN_BACKEND_CUDA) {
        kn_cuda_host_free(be, ptr);
        return;
    }
#endif
    free(ptr);
}

int kn_backend_set_attn_bf16(const kn_backend *be, int on)
{
    static const char op[] = "kn_backend_set_attn_bf16";
    if (!be)
        return kn_arg_error(op, "backend is NULL");
    switch (be->kind) {
    case KN_BACKEND_CPU:
        if (on) {
            fprintf(stderr, "tandem: %s: the CPU backend computes attention in fp32 only\n", op);
            return TN_ERR_UNSUPPORTED;
        }
        return TN_OK;
    case KN_BACKEND_CUDA:
#ifdef TANDEM_CUDA
        kn_cuda_set_attn_bf16(be, on);
        return TN_OK;
#else
        return kn_no_cuda(op);
#endif
    }
    return kn_arg_error(op, "unknown backend kind %d", (int)be->kind);
}

int kn_backend_attn_bf16(const kn_backend *be)
{
#ifdef TANDEM_CUDA
    if (be && be->kind == KN_BACKEND_CUDA && be->blas)
        return kn_cuda_attn_bf16(be);
#else
    (void)be;
#endif
    return 0;
}
