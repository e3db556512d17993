/* Backend lifetime and buffers. The CPU backend's buffers are plain host
 * memory; the CUDA backend's live in kernels/cuda/ behind cuda_ops.h and
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

/* The CUDA implementation of a backend-wide call, or NULL in a build
 * without the CUDA backend. */
#ifdef TANDEM_CUDA
#define CUDA_FN(fn) (fn)
#else
#define CUDA_FN(fn) NULL
#endif

/* A call that has nothing to do on the CPU and is cuda_fn on CUDA. */
static int cuda_only_call(const char *op, const kn_backend *be,
                          int (*cuda_fn)(const kn_backend *))
{
    if (!be)
        return kn_arg_error(op, "backend is NULL");
    switch (be->kind) {
    case KN_BACKEND_CPU:
        return TN_OK;
    case KN_BACKEND_CUDA:
        return cuda_fn ? cuda_fn(be) : kn_no_cuda(op);
    }
    return kn_arg_error(op, "unknown backend kind %d", (int)be->kind);
}

int kn_backend_sync(const kn_backend *be)
{
    return cuda_only_call("kn_backend_sync", be, CUDA_FN(kn_cuda_backend_sync));
}

void kn_backend_set_wait_hook(kn_backend *be, void (*hook)(void *arg), void *arg)
{
    be->wait_hook = hook;
    be->wait_arg = hook ? arg : NULL;
}

int kn_backend_trim(const kn_backend *be)
{
    return cuda_only_call("kn_backend_trim", be, CUDA_FN(kn_cuda_trim));
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

/* Every copy direction: to_backend 1 host -> backend, 0 backend -> host,
 * 2 backend -> backend (stream-ordered on CUDA); on the CPU all are a
 * memmove. */
static int copy_bytes(const char *op, const kn_backend *be, void *dst, const void *src,
                      size_t bytes, int to_backend)
{
    int rc = check_copy(op, be, dst, src, bytes);
    if (rc != TN_OK || bytes == 0)
        return rc;
    switch (be->kind) {
    case KN_BACKEND_CPU:
        memmove(dst, src, bytes);
        return TN_OK;
    case KN_BACKEND_CUDA:
#ifdef TANDEM_CUDA
        return to_backend == 2 ? kn_cuda_copy_on_device(be, dst, src, bytes)
               : to_backend ? kn_cuda_copy_to_device(be, dst, src, bytes)
                            : kn_cuda_copy_to_host(be, dst, src, bytes);
#else
        (void)to_backend;
        return kn_no_cuda(op);
#endif
    }
    return kn_arg_error(op, "unknown backend kind %d", (int)be->kind);
}

int kn_copy_to_backend(const kn_backend *be, void *dst, const void *host_src, size_t bytes)
{
    return copy_bytes("kn_copy_to_backend", be, dst, host_src, bytes, 1);
}

int kn_copy_to_host(const kn_backend *be, void *host_dst, const void *src, size_t bytes)
{
    return copy_bytes("kn_copy_to_host", be, host_dst, src, bytes, 0);
}

int kn_copy_on_backend(const kn_backend *be, void *dst, const void *src, size_t bytes)
{
    return copy_bytes("kn_copy_on_backend", be, dst, src, bytes, 2);
}

int kn_copy_to_backend_async(const kn_backend *be, void *dst, const void *host_src, size_t bytes)
{
    static const char op[] = "kn_copy_to_backend_async";
    int rc = check_copy(op, be, dst, host_src, bytes);
    if (rc != TN_OK || bytes == 0)
        return rc;
    switch (be->kind) {
    case KN_BACKEND_CPU:
        memmove(dst, host_src, bytes);
        return TN_OK;
    case KN_BACKEND_CUDA:
#ifdef TANDEM_CUDA
        return kn_cuda_copy_to_device_async(be, dst, host_src, bytes);
#else
        return kn_no_cuda(op);
#endif
    }
    return kn_arg_error(op, "unknown backend kind %d", (int)be->kind);
}

/* The graph calls: CUDA only; the CPU has nothing to record. */
static int graph_backend(const char *op, const kn_backend *be)
{
    if (!be)
        return kn_arg_error(op, "backend is NULL");
    if (be->kind == KN_BACKEND_CPU) {
        fprintf(stderr, "tandem: %s: the CPU backend has no graphs\n", op);
        return TN_ERR_UNSUPPORTED;
    }
    if (be->kind != KN_BACKEND_CUDA)
        return kn_arg_error(op, "unknown backend kind %d", (int)be->kind);
#ifdef TANDEM_CUDA
    return TN_OK;
#else
    return kn_no_cuda(op);
#endif
}

int kn_graph_begin(const kn_backend *be)
{
    int rc = graph_backend("kn_graph_begin", be);
#ifdef TANDEM_CUDA
    if (rc == TN_OK)
        rc = kn_cuda_graph_begin(be);
#endif
    return rc;
}

int kn_graph_end(const kn_backend *be, kn_graph **out)
{
    if (!out)
        return kn_arg_error("kn_graph_end", "out is NULL");
    *out = NULL;
    int rc = graph_backend("kn_graph_end", be);
#ifdef TANDEM_CUDA
    if (rc == TN_OK)
        rc = kn_cuda_graph_end(be, out);
#endif
    return rc;
}

int kn_graph_launch(const kn_backend *be, kn_graph *g)
{
    if (!g)
        return kn_arg_error("kn_graph_launch", "graph is NULL");
    int rc = graph_backend("kn_graph_launch", be);
#ifdef TANDEM_CUDA
    if (rc == TN_OK)
        rc = kn_cuda_graph_launch(be, g);
#endif
    return rc;
}

void kn_graph_free(kn_graph *g)
{
#ifdef TANDEM_CUDA
    kn_cuda_graph_free(g);
#else
    (void)g; /* no CUDA: no graph was ever made */
#endif
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
