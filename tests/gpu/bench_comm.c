/* The rank communicators' latency at the sizes the engine uses them
 * (docs/PERF.md "Rank communicators"): one process per rank, each on its
 * device, the model's communicator chosen as the workers choose it
 * (rank_comm_open: staged through host memory when ranks share a GPU, NCCL
 * on distinct GPUs, or --rank-comm), timed per call (median of --repeat
 * after two warm-up calls, every rank synchronised by a barrier first):
 *
 *   all-reduce  [rows][hidden] floats: the TP all-reduce after o_proj and
 *               the EP combine of a prefill (rows = prompt tokens), or of a
 *               decode step (rows = batch);
 *   all-to-all  the DP+EP dispatch and combine of a decode step as
 *               engine/ep_dispatch.c sends them: a fixed block of `batch`
 *               rows to every peer (dispatch: packed rows of hidden floats,
 *               4 expert ids and 4 weights; combine: hidden floats).
 * For the staged communicator the two parts it adds up are timed too: the
 * host collective alone on the same bytes (pinned buffers) and the device
 * copies alone (device -> host, host -> device), so the table shows what
 * staging costs over the host communicator.
 *
 * Usage: bench_comm [--ranks N] [--device N | --devices LIST] [--hidden H]
 *        [--rank-comm auto|staged|nccl] [--repeat R] [--cpu]
 * Prints a Markdown table (rank 0). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "engine/comm.h"
#include "engine/rank_comm.h"
#include "kernels/backend.h"
#include "tests/unit/engine_testutil.h"
#include "common/status.h"

#define MAX_RANKS 8
#define EP_K 4   /* experts per token (GPT-OSS): ids and weights in a dispatched row */

typedef struct opts {
    int ranks, hidden, repeat, cpu;
    int devices[MAX_RANKS];
    rank_comm_kind want;
} opts;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef enum { OP_REDUCE, OP_A2A, OP_HOST_REDUCE, OP_HOST_A2A, OP_COPIES } op_kind;

typedef struct bench {
    kn_backend be;
    comm *host, *model;
    void *dev_a, *dev_b;   /* model memory */
    void *pin_a, *pin_b;   /* pinned host memory */
    int W;
} bench;

/* One timed call of op on `bytes` per rank. */
static int one(bench *b, op_kind op, size_t bytes)
{
    size_t sb[MAX_RANKS], rb[MAX_RANKS];
    for (int p = 0; p < b->W; p++)
        sb[p] = rb[p] = bytes / (size_t)b->W / 4 * 4;
    switch (op) {
    case OP_REDUCE: return comm_all_reduce_sum(b->model, b->dev_a, bytes / 4);
    case OP_A2A: return comm_all_to_all_v(b->model, b->dev_a, sb, b->dev_b, rb);
    case OP_HOST_REDUCE: return comm_all_reduce_sum(b->host, b->pin_a, bytes / 4);
    case OP_HOST_A2A: return comm_all_to_all_v(b->host, b->pin_a, sb, b->pin_b, rb);
    case OP_COPIES: {
        int rc = kn_copy_to_host(&b->be, b->pin_a, b->dev_a, bytes);
        return rc ? rc : kn_copy_to_backend(&b->be, b->dev_a, b->pin_a, bytes);
    }
    }
    return TN_ERR_ARG;
}

/* Median microseconds of op; every rank runs it. */
static int timed(bench *b, const opts *o, op_kind op, size_t bytes, double *us)
{
    double t[64];
    const int R = o->repeat < 64 ? o->repeat : 64;
    for (int i = 0; i < 2; i++)
        if (one(b, op, bytes))
            return -1;
    for (int i = 0; i < R; i++) {
        if (comm_barrier(b->host))
            return -1;
        double t0 = now_us();
        if (one(b, op, bytes))
            return -1;
        t[i] = now_us() - t0;
    }
    qsort(t, (size_t)R, sizeof *t, cmp_d);
    *us = t[R / 2];
    return 0;
}

static int rank_main(const opts *o, const char *name, int rank)
{
    bench b;
    memset(&b, 0, sizeof b);
    b.W = o->ranks;
    char err[400] = "";
    rank_comm_kind kind;
    /* the largest size: a 8192-token prefill's all-reduce */
    const size_t max_bytes = (size_t)8192 * o->hidden * sizeof(float);
    int rc = o->cpu ? kn_backend_init_cpu(&b.be) : kn_backend_init_cuda(&b.be, o->devices[rank]);
    comm_options co = {.timeout_ms = 120000};
    if (rc || comm_host_init(&b.host, name, rank, b.W, &co, err, sizeof err) ||
        rank_comm_open(b.host, &b.be, o->want, &b.model, &kind, err, sizeof err)) {
        fprintf(stderr, "rank %d: setup: %s\n", rank, rc ? tn_status_str(rc) : err);
        return 1;
    }
    b.dev_a = kn_malloc(&b.be, max_bytes);
    b.dev_b = kn_malloc(&b.be, max_bytes);
    b.pin_a = kn_host_alloc(&b.be, max_bytes);
    b.pin_b = kn_host_alloc(&b.be, max_bytes);
    int v = 0;
    if (!b.dev_a || !b.dev_b || !b.pin_a || !b.pin_b) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        v = 1;
        goto out;
    }
    memset(b.pin_a, 0, max_bytes);
    if (kn_copy_to_backend(&b.be, b.dev_a, b.pin_a, max_bytes) ||
        kn_copy_to_backend(&b.be, b.dev_b, b.pin_a, max_bytes)) {
        v = 1;
        goto out;
    }
    if (rank == 0) {
        printf("# bench_comm: %d ranks on %s, model communicator %s, hidden %d, median of %d\n",
               b.W, o->cpu ? "the CPU" : "CUDA", rank_comm_name(kind), o->hidden, o->repeat);
        printf("| collective | use | bytes per rank | %s us | host alone us | copies alone us |\n",
               rank_comm_name(kind));
        printf("| --- | --- | --- | --- | --- | --- |\n");
    }
    /* The engine's uses (engine/ep_dispatch.c for the DP+EP rows): a
     * decode step's dispatch sends every peer `batch` packed rows (hidden
     * floats + GPT-OSS's 4 expert ids and 4 weights), the combine `batch`
     * rows of hidden floats back; bytes per rank are W times that. */
    const size_t packed = (size_t)o->hidden + 2 * EP_K, plain = (size_t)o->hidden;
    struct { op_kind op, host_op; const char *what, *use; size_t rows, row_words; } rows[] = {
        {OP_REDUCE, OP_HOST_REDUCE, "all-reduce", "decode, batch 1", 1, plain},
        {OP_REDUCE, OP_HOST_REDUCE, "all-reduce", "decode, batch 8", 8, plain},
        {OP_REDUCE, OP_HOST_REDUCE, "all-reduce", "decode, batch 32", 32, plain},
        {OP_REDUCE, OP_HOST_REDUCE, "all-reduce", "decode, batch 128", 128, plain},
        {OP_REDUCE, OP_HOST_REDUCE, "all-reduce", "prefill, 512 tokens", 512, plain},
        {OP_REDUCE, OP_HOST_REDUCE, "all-reduce", "prefill, 8192 tokens", 8192, plain},
        {OP_A2A, OP_HOST_A2A, "all-to-all-v", "EP dispatch, batch 1", 1, packed},
        {OP_A2A, OP_HOST_A2A, "all-to-all-v", "EP combine, batch 1", 1, plain},
        {OP_A2A, OP_HOST_A2A, "all-to-all-v", "EP dispatch, batch 8", 8, packed},
        {OP_A2A, OP_HOST_A2A, "all-to-all-v", "EP combine, batch 8", 8, plain},
        {OP_A2A, OP_HOST_A2A, "all-to-all-v", "EP dispatch, batch 32", 32, packed},
        {OP_A2A, OP_HOST_A2A, "all-to-all-v", "EP combine, batch 32", 32, plain},
        {OP_A2A, OP_HOST_A2A, "all-to-all-v", "EP dispatch, batch 128", 128, packed},
        {OP_A2A, OP_HOST_A2A, "all-to-all-v", "EP combine, batch 128", 128, plain},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows && !v; i++) {
        size_t bytes = rows[i].rows * rows[i].row_words * sizeof(float);
        if (rows[i].op == OP_A2A)
            bytes *= (size_t)b.W;   /* `rows` to every peer */
        double us = 0, host_us = 0, copy_us = 0;
        if (timed(&b, o, rows[i].op, bytes, &us) || timed(&b, o, rows[i].host_op, bytes, &host_us) ||
            (kind == RANK_COMM_STAGED && timed(&b, o, OP_COPIES, bytes, &copy_us))) {
            fprintf(stderr, "rank %d: %s: %s\n", rank, rows[i].what, comm_error(b.model));
            v = 1;
            break;
        }
        if (rank == 0) {
            printf("| %s | %s | %zu | %.1f | %.1f | ", rows[i].what, rows[i].use, bytes, us,
                   host_us);
            if (kind == RANK_COMM_STAGED)
                printf("%.1f |\n", copy_us);
            else
                printf("- |\n");
            fflush(stdout);
        }
    }
out:
    kn_free(&b.be, b.dev_a);
    kn_free(&b.be, b.dev_b);
    kn_host_free(&b.be, b.pin_a);
    kn_host_free(&b.be, b.pin_b);
    comm_free(b.model);
    comm_free(b.host);
    kn_backend_free(&b.be);
    return v;
}

int main(int argc, char **argv)
{
    opts o = {.ranks = 2, .hidden = 2880, .repeat = 20};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: bench_comm [--ranks N] [--device N | --devices LIST] [--hidden H]\n"
                   "                  [--rank-comm auto|staged|nccl] [--repeat R] [--cpu]\n"
                   "  the rank communicator's all-reduce and all-to-all-v at prefill and\n"
                   "  decode sizes, one process per rank (default 2 ranks on GPU 0, hidden\n"
                   "  2880 as GPT-OSS); Markdown table\n");
            return 0;
        } else if (!strcmp(a, "--ranks") && v) {
            o.ranks = atoi(argv[++i]);
        } else if ((!strcmp(a, "--device") || !strcmp(a, "--devices")) && v) {
            if (et_device_list(argv[++i], o.devices, MAX_RANKS))
                return fprintf(stderr, "bench_comm: bad %s\n", a), 2;
        } else if (!strcmp(a, "--hidden") && v) {
            o.hidden = atoi(argv[++i]);
        } else if (!strcmp(a, "--repeat") && v) {
            o.repeat = atoi(argv[++i]);
        } else if (!strcmp(a, "--rank-comm") && v) {
            if (rank_comm_parse(argv[++i], &o.want))
                return fprintf(stderr, "bench_comm: bad --rank-comm\n"), 2;
        } else if (!strcmp(a, "--cpu")) {
            o.cpu = 1;
        } else {
            fprintf(stderr, "bench_comm: unknown argument '%s' (--help)\n", a);
            return 2;
        }
    }
    if (o.ranks < 2 || o.ranks > MAX_RANKS || o.hidden < 64 || o.repeat < 1) {
        fprintf(stderr, "bench_comm: --ranks 2..%d, --hidden >= 64, --repeat >= 1\n", MAX_RANKS);
        return 2;
    }
    char name[48];
    snprintf(name, sizeof name, "bcomm-%ld", (long)getpid());
    pid_t pid[MAX_RANKS];
    fflush(NULL);
    /* the parent never touches the device: CUDA does not survive fork */
    for (int r = 0; r < o.ranks; r++) {
        pid[r] = fork();
        if (pid[r] == 0)
            _exit(rank_main(&o, name, r));
        if (pid[r] < 0) {
            perror("fork");
            return 1;
        }
    }
    int bad = 0;
    for (int r = 0; r < o.ranks; r++) {
        int st;
        if (waitpid(pid[r], &st, 0) != pid[r] || !WIFEXITED(st) || WEXITSTATUS(st))
            bad = 1;
    }
    return bad;
}
