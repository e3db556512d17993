/* The NCCL communicator (engine/comm_nccl.c) on one GPU: world size 1,
 * bootstrapped through a host communicator, every collective on device
 * buffers checked against the host data, and the staged communicator both
 * ways (device buffers over the host communicator, host buffers over NCCL
 * started from a unique id). Built into a real test only when
 * the build defines TANDEM_NCCL (CUDA + NCCL); otherwise the build has no
 * NCCL, which the test checks is reported as "not built in". */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "engine/comm.h"
#include "kernels/backend.h"
#include "common/status.h"

#ifndef TANDEM_NCCL

static void nccl_is_reported_missing(void **state)
{
    (void)state;
    comm *c = (comm *)0x1;
    char err[256] = "";
    kn_backend be = {.kind = KN_BACKEND_CUDA};
    assert_int_equal(comm_nccl_init(&c, NULL, &be, err, sizeof(err)), TN_ERR_UNSUPPORTED);
    assert_null(c);
    assert_non_null(strstr(err, "not built in"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nccl_is_reported_missing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

#include <cuda_runtime.h>

typedef struct gpu {
    kn_backend be;
    cudaStream_t stream;
    comm *boot, *nc;
} gpu;

static int gpu_setup(void **state)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        print_error("no CUDA device\n");
        return -1;
    }
    gpu *g = calloc(1, sizeof(*g));
    if (!g)
        return -1;
    *state = g;
    if (cudaSetDevice(0) != cudaSuccess || cudaStreamCreate(&g->stream) != cudaSuccess)
        return -1;
    g->be = (kn_backend){.kind = KN_BACKEND_CUDA, .device = 0, .stream = g->stream};
    char name[64], err[256];
    snprintf(name, sizeof(name), "nccl-%ld", (long)getpid());
    if (comm_host_init(&g->boot, name, 0, 1, NULL, err, sizeof(err)) ||
        comm_nccl_init(&g->nc, g->boot, &g->be, err, sizeof(err))) {
        print_error("%s\n", err);
        return -1;
    }
    return 0;
}

static int gpu_teardown(void **state)
{
    gpu *g = *state;
    if (!g)
        return 0;
    comm_free(g->nc);
    comm_free(g->boot);
    if (g->stream)
        cudaStreamDestroy(g->stream);
    free(g);
    return 0;
}

static void *dev_copy(const void *host, size_t n)
{
    void *d = NULL;
    assert_int_equal(cudaMalloc(&d, n ? n : 1), cudaSuccess);
    if (n && host) /* dev_copy(NULL, n): an uninitialised device buffer */
        assert_int_equal(cudaMemcpy(d, host, n, cudaMemcpyHostToDevice), cudaSuccess);
    return d;
}

static void collectives_on_device_buffers(void **state)
{
    gpu *g = *state;
    comm *c = g->nc;
    assert_int_equal(comm_rank(c), 0);
    assert_int_equal(comm_size(c), 1);
    assert_int_equal(comm_memory(c), KN_BACKEND_CUDA);
    enum { N = 1000 };
    float h[N], back[N], gathered[N];
    for (int i = 0; i < N; i++)
        h[i] = (float)i * 0.25f - 100.0f;
    float *d = dev_copy(h, sizeof(h)), *d2 = dev_copy(NULL, sizeof(h));
    assert_int_equal(comm_all_reduce_sum(c, d, N), TN_OK);
    assert_int_equal(cudaMemcpy(back, d, sizeof(h), cudaMemcpyDeviceToHost), cudaSuccess);
    assert_memory_equal(back, h, sizeof(h));
    assert_int_equal(comm_all_gather(c, d, d2, sizeof(h)), TN_OK);
    assert_int_equal(cudaMemcpy(gathered, d2, sizeof(h), cudaMemcpyDeviceToHost), cudaSuccess);
    assert_memory_equal(gathered, h, sizeof(h));
    size_t n = 600 * sizeof(float);
    assert_int_equal(cudaMemset(d2, 0, sizeof(h)), cudaSuccess);
    assert_int_equal(comm_all_to_all_v(c, d, &n, d2, &n), TN_OK);
    assert_int_equal(cudaMemcpy(back, d2, n, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_memory_equal(back, h, n);
    size_t zero = 0;
    assert_int_equal(comm_all_to_all_v(c, d, &zero, d2, &zero), TN_OK);
    assert_int_equal(comm_broadcast(c, d, sizeof(h), 0), TN_OK);
    assert_int_equal(comm_barrier(c), TN_OK);
    /* a count the receiver does not expect fails instead of corrupting */
    size_t more = 8, less = 4;
    assert_int_equal(comm_all_to_all_v(c, d, &more, d2, &less), TN_ERR_PEER);
    assert_non_null(strstr(comm_error(c), "mismatch"));
    /* the counters saw every completed NCCL collective, not the failed one */
    comm_stats st;
    comm_get_stats(c, &st);
    assert_int_equal(st.calls[COMM_OP_ALL_REDUCE_SUM], 1);
    assert_int_equal(st.bytes[COMM_OP_ALL_REDUCE_SUM], sizeof(h));
    assert_int_equal(st.calls[COMM_OP_ALL_GATHER], 1);
    assert_int_equal(st.calls[COMM_OP_ALL_TO_ALL_V], 2);
    assert_int_equal(st.bytes[COMM_OP_ALL_TO_ALL_V], n);
    assert_int_equal(st.calls[COMM_OP_BROADCAST], 1);
    assert_int_equal(st.calls[COMM_OP_BARRIER], 1);
    cudaFree(d);
    cudaFree(d2);
}

static void split_makes_sub_communicators(void **state)
{
    gpu *g = *state;
    char err[256];
    /* a fresh NCCL communicator (the previous case aborted its own), this
     * time without a bootstrap group: a group of one needs none */
    comm *nc = NULL, *sub = (comm *)0x1, *none = (comm *)0x1;
    assert_int_equal(comm_nccl_init(&nc, NULL, &g->be, err, sizeof(err)), TN_OK);
    assert_int_equal(comm_split(nc, 0, 0, &sub), TN_OK);
    assert_non_null(sub);
    assert_int_equal(comm_size(sub), 1);
    float h = 3.5f, *d = dev_copy(&h, sizeof(h));
    assert_int_equal(comm_all_reduce_sum(sub, d, 1), TN_OK);
    float back = 0;
    assert_int_equal(cudaMemcpy(&back, d, sizeof(back), cudaMemcpyDeviceToHost), cudaSuccess);
    assert_true(back == 3.5f);
    assert_int_equal(comm_split(nc, -1, 0, &none), TN_OK);
    assert_null(none);
    assert_int_equal(comm_set_timeout(nc, 5000), TN_OK);
    assert_int_equal(comm_barrier(nc), TN_OK);
    cudaFree(d);
    comm_free(sub);
    comm_free(nc);
}

/* The staged communicator both ways on the GPU: device buffers over a host
 * communicator (ranks sharing a GPU) and host buffers over NCCL started
 * from a unique id (the control messages of a group across machines,
 * engine/rank_group.c). At world size 1 every result equals the input. */
static void staged_both_ways(void **state)
{
    (void)state;
    kn_backend be;
    assert_int_equal(kn_backend_init_cuda(&be, 0), TN_OK);
    char err[256], name[64];
    enum { N = 777 };
    float h[N], back[N];
    for (int i = 0; i < N; i++)
        h[i] = (float)i - 300.5f;
    /* device over host */
    comm *host = NULL, *dup = NULL, *dev = NULL;
    snprintf(name, sizeof(name), "nccls-%ld", (long)getpid());
    assert_int_equal(comm_host_init(&host, name, 0, 1, NULL, err, sizeof(err)), TN_OK);
    assert_int_equal(comm_split(host, 0, 0, &dup), TN_OK);
    assert_int_equal(comm_staged_init(&dev, dup, &be, err, sizeof(err)), TN_OK);
    assert_int_equal(comm_memory(dev), KN_BACKEND_CUDA);
    float *d = dev_copy(h, sizeof(h)), *d2 = dev_copy(NULL, sizeof(h));
    assert_int_equal(comm_all_reduce_sum(dev, d, N), TN_OK);
    assert_int_equal(comm_all_gather(dev, d, d2, sizeof(h)), TN_OK);
    assert_int_equal(cudaMemcpy(back, d2, sizeof(h), cudaMemcpyDeviceToHost), cudaSuccess);
    assert_memory_equal(back, h, sizeof(h));
    size_t n = 500 * sizeof(float);
    assert_int_equal(cudaMemset(d2, 0, sizeof(h)), cudaSuccess);
    assert_int_equal(comm_all_to_all_v(dev, d, &n, d2, &n), TN_OK);
    assert_int_equal(cudaMemcpy(back, d2, n, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_memory_equal(back, h, n);
    assert_int_equal(comm_broadcast(dev, d, sizeof(h), 0), TN_OK);
    assert_int_equal(cudaMemcpy(back, d, sizeof(h), cudaMemcpyDeviceToHost), cudaSuccess);
    assert_memory_equal(back, h, sizeof(h));
    assert_int_equal(comm_barrier(dev), TN_OK);
    comm_free(dev);
    comm_free(host);
    cudaFree(d);
    cudaFree(d2);
    /* host over NCCL, from an id */
    unsigned char id[COMM_NCCL_ID_BYTES];
    comm *nc = NULL, *ctl = NULL;
    assert_int_equal(comm_nccl_unique_id(id, err, sizeof(err)), TN_OK);
    assert_int_equal(comm_nccl_init_id(&nc, id, 0, 1, &be, err, sizeof(err)), TN_OK);
    assert_int_equal(comm_staged_init(&ctl, nc, &be, err, sizeof(err)), TN_OK);
    assert_int_equal(comm_memory(ctl), KN_BACKEND_CPU);
    float v[N];
    memcpy(v, h, sizeof(h));
    assert_int_equal(comm_all_reduce_sum(ctl, v, N), TN_OK);
    assert_memory_equal(v, h, sizeof(h));
    assert_int_equal(comm_all_gather(ctl, h, back, sizeof(h)), TN_OK);
    assert_memory_equal(back, h, sizeof(h));
    memset(back, 0, sizeof(back));
    assert_int_equal(comm_all_to_all_v(ctl, h, &n, back, &n), TN_OK);
    assert_memory_equal(back, h, n);
    assert_int_equal(comm_barrier(ctl), TN_OK);
    comm_free(ctl);   /* frees nc with it */
    kn_backend_free(&be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(collectives_on_device_buffers),
        cmocka_unit_test(split_makes_sub_communicators),
        cmocka_unit_test(staged_both_ways),
    };
    return cmocka_run_group_tests(tests, gpu_setup, gpu_teardown);
}

#endif
