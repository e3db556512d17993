/* tandem-transfer-bench: TransferEngine bandwidth between two processes on
 * this machine, for each UCX transport and KV page size, next to a
 * single-process memcpy of the same copies measured in the same run.
 *
 * Each measurement starts a receiver and a sender (tandem-transfer-peer,
 * from the same directory as this program), lets the sender run warm-up
 * and timed transfers of the whole cache, and reads the sender's timing;
 * the receiver verifies the final contents byte for byte, so a fast but
 * wrong transport cannot produce a number. */
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "common/options.h"
#include "transfer/transfer.h"
#include "transfer/transfer_plan.h"

#define LAYERS 4
#define HEADS 8
#define HEAD_DIM 64
#define ELEM 4
#define TOKEN_BYTES (HEADS * HEAD_DIM * ELEM) /* one token, all heads: 2 KiB */

typedef struct bench_opts {
    char tls_list[256];
    char pages_list[256];
    int mib, repeat, warmup, timeout_ms;
    char helper[PATH_MAX];
} bench_opts;

typedef struct child {
    pid_t pid;
    int fd;
    char out[16384];
    size_t len;
    int status, done;
} child;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: tandem-transfer-bench [options]\n"
        "GB/s of TransferEngine KV transfers between two processes, per transport\n"
        "and page size, with a single-process memcpy of the same copies as reference.\n"
        "  --tls LIST        transports to measure, ';'-separated UCX_TLS values\n"
        "                    (default \"tcp;sm\")\n"
        "  --page-kib LIST   page sizes in KiB, ','-separated (default 16,32,64,128,256)\n"
        "  --mib N           KV cache size in MiB (default 64)\n"
        "  --repeat N        timed transfers per point (default 5)\n"
        "  --warmup N        untimed transfers first (default 1)\n"
        "  --timeout-ms MS   bound of each process (default 120000)\n"
        "  --helper PATH     tandem-transfer-peer to run (default: next to this program)\n");
}

/* --mib, --repeat, --warmup and --timeout-ms: 1..1000000 (--warmup from 0). */
static int set_count(void *ctx, const char *name, const char *v, char *err, size_t errlen)
{
    bench_opts *o = ctx;
    int *dst = !strcmp(name, "mib") ? &o->mib : !strcmp(name, "repeat") ? &o->repeat
             : !strcmp(name, "warmup") ? &o->warmup : &o->timeout_ms;
    if (opts_int(v, dst == &o->warmup ? 0 : 1, 1000000, dst) == 0)
        return 0;
    snprintf(err, errlen, "bad number '%s' for --%s", v, name);
    return -1;
}

static int parse_opts(int argc, char **argv, bench_opts *o)
{
    memset(o, 0, sizeof *o);
    snprintf(o->tls_list, sizeof o->tls_list, "tcp;sm");
    snprintf(o->pages_list, sizeof o->pages_list, "16,32,64,128,256");
    o->mib = 64;
    o->repeat = 5;
    o->warmup = 1;
    o->timeout_ms = 120000;
    opt_call count = {set_count, o};
    const opt_spec specs[] = {
        {"tls", OPT_STR, o->tls_list, sizeof o->tls_list, "';'-separated UCX_TLS values"},
        {"page-kib", OPT_STR, o->pages_list, sizeof o->pages_list, "','-separated KiB"},
        {"mib", OPT_CALL, &count, 0, "KV cache size in MiB"},
        {"repeat", OPT_CALL, &count, 0, "timed transfers per point"},
        {"warmup", OPT_CALL, &count, 0, "untimed transfers first"},
        {"timeout-ms", OPT_CALL, &count, 0, "bound of each process"},
        {"helper", OPT_STR, o->helper, sizeof o->helper, "tandem-transfer-peer to run"},
    };
    const opts_cli cli = {specs, (int)(sizeof specs / sizeof *specs), NULL, NULL, "option"};
    char err[512];
    switch (opts_parse_cli(&cli, argc, argv, err, sizeof err)) {
    case OPTS_HELP: usage(stdout); exit(0);
    case OPTS_ERROR: fprintf(stderr, "tandem-transfer-bench: %s\n", err); return -1;
    }
    if (!o->helper[0]) {
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0) {
            fprintf(stderr, "tandem-transfer-bench: cannot find myself; pass --helper\n");
            return -1;
        }
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash)
            *slash = '\0';
        if (snprintf(o->helper, sizeof o->helper, "%s/tandem-transfer-peer", self) >=
            (int)sizeof o->helper)
            return -1;
    }
    if (access(o->helper, X_OK) != 0) {
        fprintf(stderr, "tandem-transfer-bench: helper %s is not executable\n", o->helper);
        return -1;
    }
    return 0;
}

static int spawn(child *c, const char *helper, char *const *args)
{
    memset(c, 0, sizeof *c);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    c->pid = fork();
    if (c->pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (c->pid == 0) {
        /* stdout and stderr both come back: the table stays clean and a
         * failure shows everything the helper said. */
        dup2(fds[1], STDOUT_FILENO);
        dup2(fds[1], STDERR_FILENO);
        execv(helper, args);
        _exit(127);
    }
    close(fds[1]);
    c->fd = fds[0];
    fcntl(c->fd, F_SETFL, O_NONBLOCK);
    return 0;
}

static void drain(child *c)
{
    while (c->fd >= 0 && c->len + 1 < sizeof c->out) {
        ssize_t r = read(c->fd, c->out + c->len, sizeof c->out - 1 - c->len);
        if (r > 0) {
            c->len += (size_t)r;
            c->out[c->len] = '\0';
        } else {
            if (r == 0) {
                close(c->fd);
                c->fd = -1;
            }
            return;
        }
    }
}

/* Waits for children to exit before the deadline; kills them after it. */
static int reap(child *cs, int n, double deadline)
{
    int left;
    do {
        left = 0;
        for (int i = 0; i < n; i++) {
            drain(&cs[i]);
            if (cs[i].done)
                continue;
            if (waitpid(cs[i].pid, &cs[i].status, WNOHANG) == cs[i].pid) {
                cs[i].done = 1;
                drain(&cs[i]);
            } else {
                left++;
            }
        }
        if (left) {
            struct timespec ts = {0, 5000000};
            nanosleep(&ts, NULL);
        }
    } while (left && te_now_seconds() < deadline);
    for (int i = 0; i < n; i++) {
        if (!cs[i].done) {
            kill(cs[i].pid, SIGKILL);
            waitpid(cs[i].pid, &cs[i].status, 0);
            cs[i].done = 1;
        }
        if (cs[i].fd >= 0)
            close(cs[i].fd);
        cs[i].fd = -1;
    }
    return left ? -1 : 0;
}

static int exited_ok(const child *c)
{
    return WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0;
}

/* One transfer measurement; returns GB/s or -1. */
static double measure_transfer(const bench_opts *o, const char *tls, int page_size, int tokens)
{
    char ps[16], tok[16], rep_recv[16], rep[16], warm[16], tmo[16], layers[16], heads[16], dim[16];
    snprintf(ps, sizeof ps, "%d", page_size);
    snprintf(tok, sizeof tok, "%d", tokens);
    snprintf(rep_recv, sizeof rep_recv, "%d", o->repeat + o->warmup);
    snprintf(rep, sizeof rep, "%d", o->repeat);
    snprintf(warm, sizeof warm, "%d", o->warmup);
    snprintf(tmo, sizeof tmo, "%d", o->timeout_ms);
    snprintf(layers, sizeof layers, "%d", LAYERS);
    snprintf(heads, sizeof heads, "%d", HEADS);
    snprintf(dim, sizeof dim, "%d", HEAD_DIM);
    char *rargs[] = {(char *)o->helper, "recv", "--tls", (char *)tls, "--layers", layers,
                     "--kv-heads", heads, "--head-dim", dim, "--page-size", ps, "--tokens", tok,
                     "--repeat", rep_recv, "--timeout-ms", tmo, NULL};
    child cs[2];
    double deadline = te_now_seconds() + o->timeout_ms / 1000.0 + 10;
    if (spawn(&cs[0], o->helper, rargs) != 0)
        return -1;
    char endpoint[256] = "";
    while (te_now_seconds() < deadline && cs[0].fd >= 0) {
        drain(&cs[0]);
        char *line = strstr(cs[0].out, "endpoint ");
        if (line && strchr(line, '\n') && sscanf(line, "endpoint %255s", endpoint) == 1)
            break;
        struct pollfd pfd = {cs[0].fd, POLLIN, 0};
        poll(&pfd, 1, 50);
    }
    if (!endpoint[0]) {
        reap(cs, 1, te_now_seconds());
        fprintf(stderr, "tandem-transfer-bench: receiver gave no endpoint\n");
        return -1;
    }
    char *sargs[] = {(char *)o->helper, "send", "--tls", (char *)tls, "--connect", endpoint,
                     "--layers", layers, "--kv-heads", heads, "--head-dim", dim, "--page-size",
                     ps, "--tokens", tok, "--warmup", warm, "--repeat", rep, "--timeout-ms", tmo,
                     NULL};
    if (spawn(&cs[1], o->helper, sargs) != 0) {
        reap(cs, 1, te_now_seconds());
        return -1;
    }
    if (reap(cs, 2, deadline) != 0 || !exited_ok(&cs[0]) || !exited_ok(&cs[1]) ||
        !strstr(cs[0].out, "byte exact")) {
        fprintf(stderr, "tandem-transfer-bench: %s page %d failed\n  receiver: %s\n  sender: %s\n",
                tls, page_size, cs[0].out, cs[1].out);
        return -1;
    }
    unsigned long long bytes;
    double secs;
    const char *sent = strstr(cs[1].out, "sent ");
    if (!sent || sscanf(sent, "sent %llu bytes in %lf s", &bytes, &secs) != 2 || secs <= 0)
        return -1;
    return (double)bytes / secs / 1e9;
}

/* The same plan applied with memcpy in this process: the ceiling a
 * transfer between two processes on this machine is compared with. */
static double measure_memcpy(const bench_opts *o, int page_size, int tokens, size_t *n_copies)
{
    int pages = (tokens + page_size - 1) / page_size;
    int n_pages = pages + 3;
    te_kv_geometry g = {HEADS, HEAD_DIM, ELEM};
    size_t pool = (size_t)n_pages * te_kv_page_bytes(&g, HEADS, page_size);
    int32_t *src_pt = malloc((size_t)n_pages * sizeof *src_pt);
    int32_t *dst_pt = malloc((size_t)n_pages * sizeof *dst_pt);
    uint8_t *src[2 * LAYERS] = {0}, *dst[2 * LAYERS] = {0};
    double gbs = -1;
    te_reshard_plan plan = {0};
    if (!src_pt || !dst_pt)
        goto out;
    /* Scattered pages like the transfer's (xorshift shuffles). */
    uint64_t s1 = 0x1234567, s2 = 0x7654321;
    for (int i = 0; i < n_pages; i++)
        src_pt[i] = dst_pt[i] = i;
    for (int i = n_pages - 1; i > 0; i--) {
        s1 ^= s1 << 13, s1 ^= s1 >> 7, s1 ^= s1 << 17;
        s2 ^= s2 << 13, s2 ^= s2 >> 7, s2 ^= s2 << 17;
        int a = (int)(s1 % (uint64_t)(i + 1)), b = (int)(s2 % (uint64_t)(i + 1));
        int32_t t = src_pt[i];
        src_pt[i] = src_pt[a];
        src_pt[a] = t;
        t = dst_pt[i];
        dst_pt[i] = dst_pt[b];
        dst_pt[b] = t;
    }
    const int32_t *sp[1] = {src_pt}, *dp[1] = {dst_pt};
    te_kv_sharding ss = {1, page_size, n_pages, sp}, ds = {1, page_size, n_pages, dp};
    char err[256];
    if (te_reshard_plan_build(&g, tokens, &ss, &ds, -1, -1, &plan, err, sizeof err) != 0) {
        fprintf(stderr, "tandem-transfer-bench: %s\n", err);
        goto out;
    }
    for (int i = 0; i < 2 * LAYERS; i++) {
        src[i] = malloc(pool);
        dst[i] = malloc(pool);
        if (!src[i] || !dst[i])
            goto out;
        memset(src[i], i + 1, pool);
        memset(dst[i], 0, pool);
    }
    double start = 0;
    uint64_t bytes = 0;
    for (int r = 0; r < o->warmup + o->repeat; r++) {
        if (r == o->warmup) {
            start = te_now_seconds();
            bytes = 0;
        }
        for (int p = 0; p < 2 * LAYERS; p++)
            for (size_t i = 0; i < plan.n_copies; i++) {
                const te_plan_copy *c = &plan.copies[i];
                memcpy(dst[p] + c->dst_offset, src[p] + c->src_offset, c->length);
                bytes += c->length;
            }
    }
    double secs = te_now_seconds() - start;
    /* Read the result so the copies cannot be optimised away. */
    volatile uint8_t sink = dst[0][plan.copies[0].dst_offset];
    (void)sink;
    gbs = secs > 0 ? (double)bytes / secs / 1e9 : -1;
    *n_copies = plan.n_copies * 2 * LAYERS;
out:
    for (int i = 0; i < 2 * LAYERS; i++) {
        free(src[i]);
        free(dst[i]);
    }
    te_reshard_plan_free(&plan);
    free(src_pt);
    free(dst_pt);
    return gbs;
}

int main(int argc, char **argv)
{
    bench_opts o;
    if (parse_opts(argc, argv, &o))
        return 2;
    int kib[16], n_kib = 0;
    char pages[256];
    snprintf(pages, sizeof pages, "%s", o.pages_list);
    for (char *save = NULL, *t = strtok_r(pages, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end;
        long v = strtol(t, &end, 10);
        /* A page must hold whole tokens of all heads (2 KiB each). */
        if (*end || v < 2 || v > 65536 || (v * 1024) % TOKEN_BYTES || n_kib == 16) {
            fprintf(stderr, "tandem-transfer-bench: bad page size '%s' KiB (even KiB, <= 16 "
                    "sizes)\n", t);
            return 2;
        }
        kib[n_kib++] = (int)v;
    }
    size_t pool_bytes = (size_t)o.mib * 1024 * 1024 / (2 * LAYERS);
    printf("TransferEngine bench: %d MiB KV cache = %d layers x (K, V) pools of %zu MiB; "
           "%d KV heads x %d dims x fp32; TP1 -> TP1, scattered page tables;\n"
           "GB/s = 1e9 bytes/s over %d timed transfers after %d warm-up, each from submit to "
           "the receiver's ack;\nmemcpy = the same copies in one process, one thread.\n\n",
           o.mib, LAYERS, pool_bytes >> 20, HEADS, HEAD_DIM, o.repeat, o.warmup);
    printf("%-10s %8s %8s %14s %12s %8s\n", "transport", "page", "copies", "transfer GB/s",
           "memcpy GB/s", "ratio");
    int failures = 0;
    char tls_buf[256];
    snprintf(tls_buf, sizeof tls_buf, "%s", o.tls_list);
    for (char *save = NULL, *tls = strtok_r(tls_buf, ";", &save); tls;
         tls = strtok_r(NULL, ";", &save)) {
        for (int k = 0; k < n_kib; k++) {
            int page_size = kib[k] * 1024 / TOKEN_BYTES;
            int tokens = (int)(pool_bytes / ((size_t)kib[k] * 1024)) * page_size;
            size_t copies = 0;
            double mem = measure_memcpy(&o, page_size, tokens, &copies);
            double xfer = measure_transfer(&o, tls, page_size, tokens);
            if (mem <= 0 || xfer <= 0) {
                printf("%-10s %5d KiB %8s %14s %12s %8s\n", tls, kib[k], "-", "failed", "-", "-");
                failures++;
                continue;
            }
            printf("%-10s %5d KiB %8zu %14.2f %12.2f %8.3f\n", tls, kib[k], copies, xfer, mem,
                   xfer / mem);
            fflush(stdout);
        }
    }
    return failures ? 1 : 0;
}
