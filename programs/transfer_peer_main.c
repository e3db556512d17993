/* tandem-transfer-peer: one process of a KV transfer over the TransferEngine,
 * used by the multi-process tests and the bench, and handy as a smoke test
 * of a cluster's network (`recv` on the decoder node, `send` elsewhere).
 *
 * Both sides derive the KV contents from --seed (transfer_pattern.h), so the
 * receiver verifies every byte of every page it received, and that nothing
 * outside the request's pages changed, without seeing the sender's memory. */
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>
#include "common/options.h"
#include "transfer/transfer.h"
#include "transfer/transfer_kv.h"
#include "transfer/transfer_pattern.h"
#include "transfer/transfer_session.h"

#define MAX_RECEIVERS 8
#define SENTINEL 0xA5

typedef struct options {
    int is_sender;
    char tls[256];                    /* "": UCX's choice */
    int tp, rank, senders;
    int layers, kv_heads, head_dim, page_size, tokens, spare_pages;
    uint64_t seed, request_id;
    int seed_arg, request_id_arg, kill_pid_arg, stop_pid_arg;   /* as given */
    int repeat, warmup, timeout_ms, window;
    int shrink;                       /* receiver: register only half of each pool */
    int same_host_shm;                /* te_engine_config.same_host_shm */
    char connect[MAX_RECEIVERS][256];
    int n_connect;
    pid_t kill_pid;                   /* sender: SIGKILL this receiver mid-transfer */
    double kill_fraction;
    pid_t stop_pid;                   /* sender: freeze this receiver, then die */
    double die_fraction;
    int expect_failure;
    char data_path[16];               /* auto, puts, messages */
} options;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: tandem-transfer-peer recv|send [options]\n"
        "Moves a random-content paged HND KV cache between processes with the\n"
        "TransferEngine and verifies it byte for byte on the receiver.\n"
        "\n"
        "common:\n"
        "  --tls LIST          UCX transports (UCX_TLS), default: UCX's choice\n"
        "  --tp N --rank R     this process's TP group size and rank (default 1 / 0)\n"
        "  --layers L --kv-heads H --head-dim D --page-size P --tokens T\n"
        "                      KV geometry (default 2 / 4 / 16 / 16 / 300)\n"
        "  --seed S            content seed, equal on both sides (default 1)\n"
        "  --request-id ID     (default 1)\n"
        "  --repeat N          transfers of the same request (default 1)\n"
        "  --timeout-ms MS     bound of every wait (default 20000)\n"
        "  --window N          puts in flight per transfer (default 64)\n"
        "  --same-host-shm     a peer on this host gets a shared-memory endpoint (no UCX\n"
        "                      failure detection) when --tls allows shared memory\n"
        "  --data-path P       auto, puts or messages (te_data_path; default auto:\n"
        "                      messages where UCX would emulate puts, e.g. tcp)\n"
        "recv:\n"
        "  --senders N         sender ranks to wait for (default 1)\n"
        "  --shrink-region     register only half of each pool and expect the sender\n"
        "                      to refuse: succeed if no notice comes within the\n"
        "                      timeout and every pool byte is untouched\n"
        "  prints 'endpoint tcp://127.0.0.1:PORT' first, then the verification\n"
        "send:\n"
        "  --connect ENDPOINT  a receiver rank's endpoint (repeat for several)\n"
        "  --warmup N          untimed transfers before the --repeat timed ones (the\n"
        "                      receiver's --repeat must count both)\n"
        "  --kill-pid PID --kill-after F\n"
        "                      SIGKILL process PID once a fraction F of the puts\n"
        "                      is posted (failure test); implies --expect-failure\n"
        "  --expect-failure    exit 0 only if the transfer fails with an error\n"
        "  --stop-pid PID --die-after F\n"
        "                      once a fraction F of the copies is posted, SIGSTOP\n"
        "                      process PID (the receiver), post what the socket\n"
        "                      takes, SIGCONT it and SIGKILL this sender: the\n"
        "                      receiver then handles data of a dead sender\n");
}

/* The integer flags and their ranges. */
typedef struct int_flag {
    const char *name;
    int lo, hi;
    size_t offset;   /* of the int in options */
} int_flag;

static const int_flag INT_FLAGS[] = {
    {"tp", 1, 64, offsetof(options, tp)},
    {"rank", 0, 63, offsetof(options, rank)},
    {"senders", 1, 64, offsetof(options, senders)},
    {"layers", 1, 512, offsetof(options, layers)},
    {"kv-heads", 1, 1024, offsetof(options, kv_heads)},
    {"head-dim", 1, 4096, offsetof(options, head_dim)},
    {"page-size", 1, 1 << 16, offsetof(options, page_size)},
    {"tokens", 0, 1 << 24, offsetof(options, tokens)},
    {"seed", 0, 1 << 30, offsetof(options, seed_arg)},
    {"request-id", 0, 1 << 30, offsetof(options, request_id_arg)},
    {"repeat", 1, 100000, offsetof(options, repeat)},
    {"timeout-ms", 1, 3600000, offsetof(options, timeout_ms)},
    {"window", 1, 1 << 16, offsetof(options, window)},
    {"warmup", 0, 1000, offsetof(options, warmup)},
    {"kill-pid", 2, 1 << 30, offsetof(options, kill_pid_arg)},
    {"stop-pid", 2, 1 << 30, offsetof(options, stop_pid_arg)},
};
#define N_INT_FLAGS (int)(sizeof INT_FLAGS / sizeof *INT_FLAGS)

static int set_flag(void *ctx, const char *name, const char *v, char *err, size_t errlen)
{
    options *o = ctx;
    int bad = 1;
    for (int i = 0; i < N_INT_FLAGS; i++)
        if (!strcmp(name, INT_FLAGS[i].name))
            bad = opts_int(v, INT_FLAGS[i].lo, INT_FLAGS[i].hi,
                           (int *)((char *)o + INT_FLAGS[i].offset)) != 0;
    if (!strcmp(name, "connect")) {
        bad = o->n_connect == MAX_RECEIVERS || strlen(v) >= sizeof o->connect[0];
        if (!bad)
            memcpy(o->connect[o->n_connect++], v, strlen(v) + 1);
    } else if (!strcmp(name, "kill-after")) {
        bad = opts_double(v, &o->kill_fraction) != 0 || o->kill_fraction < 0 ||
              o->kill_fraction >= 1;
    } else if (!strcmp(name, "die-after")) {
        bad = opts_double(v, &o->die_fraction) != 0 || o->die_fraction < 0 ||
              o->die_fraction >= 1;
    }
    if (bad)
        snprintf(err, errlen, "bad value '%s' for --%s", v, name);
    return bad ? -1 : 0;
}

static int parse_options(int argc, char **argv, options *o)
{
    *o = (options){.tp = 1, .senders = 1, .layers = 2, .kv_heads = 4, .head_dim = 16,
                   .page_size = 16, .tokens = 300, .spare_pages = 3, .seed_arg = 1,
                   .request_id_arg = 1, .repeat = 1, .timeout_ms = 20000, .window = 64};
    if (argc < 2) {
        usage(stderr);
        return -1;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(stdout);
        exit(0);
    }
    if (!strcmp(argv[1], "send"))
        o->is_sender = 1;
    else if (strcmp(argv[1], "recv")) {
        fprintf(stderr, "tandem-transfer-peer: first argument must be recv or send, not '%s'\n",
                argv[1]);
        return -1;
    }
    opt_call call = {set_flag, o};
    opt_spec specs[N_INT_FLAGS + 8] = {
        {"tls", OPT_STR, o->tls, sizeof o->tls, "UCX transports (UCX_TLS)"},
        {"same-host-shm", OPT_BOOL, &o->same_host_shm, 0, "shared memory to same-host peers"},
        {"data-path", OPT_STR, o->data_path, sizeof o->data_path, "auto, puts or messages"},
        {"die-after", OPT_CALL, &call, 0, "send: die after this fraction (--stop-pid)"},
        {"shrink-region", OPT_BOOL, &o->shrink, 0, "recv: register half of each pool"},
        {"connect", OPT_CALL, &call, 0, "send: a receiver rank's endpoint (repeatable)"},
        {"kill-after", OPT_CALL, &call, 0, "send: kill --kill-pid after this fraction"},
        {"expect-failure", OPT_BOOL, &o->expect_failure, 0, "send: exit 0 only on failure"},
    };
    for (int i = 0; i < N_INT_FLAGS; i++)
        specs[8 + i] = (opt_spec){INT_FLAGS[i].name, OPT_CALL, &call, 0, "an integer"};
    const opts_cli cli = {specs, N_INT_FLAGS + 8, NULL, NULL, "option"};
    char err[512];
    switch (opts_parse_cli(&cli, argc - 1, argv + 1, err, sizeof err)) {
    case OPTS_HELP: usage(stdout); exit(0);
    case OPTS_ERROR: fprintf(stderr, "tandem-transfer-peer: %s\n", err); return -1;
    }
    o->seed = (uint64_t)o->seed_arg;
    o->request_id = (uint64_t)o->request_id_arg;
    o->kill_pid = (pid_t)o->kill_pid_arg;
    o->stop_pid = (pid_t)o->stop_pid_arg;
    if (o->data_path[0] && strcmp(o->data_path, "auto") && strcmp(o->data_path, "puts") &&
        strcmp(o->data_path, "messages")) {
        fprintf(stderr, "tandem-transfer-peer: --data-path must be auto, puts or messages, not "
                "'%s'\n", o->data_path);
        return -1;
    }
    if (o->rank >= o->tp) {
        fprintf(stderr, "tandem-transfer-peer: --rank %d must be below --tp %d\n", o->rank, o->tp);
        return -1;
    }
    if (o->is_sender && o->n_connect == 0) {
        fprintf(stderr, "tandem-transfer-peer: send needs --connect ENDPOINT\n");
        return -1;
    }
    if (o->kill_pid)
        o->expect_failure = 1;
    return 0;
}

/* A rank's page table: a seeded shuffle of its pool, so pages of one request
 * are scattered the way a busy cache scatters them. */
static int32_t *shuffled_pages(int n_pages, uint64_t seed)
{
    int32_t *p = malloc((size_t)n_pages * sizeof *p);
    if (!p)
        return NULL;
    for (int i = 0; i < n_pages; i++)
        p[i] = i;
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int i = n_pages - 1; i > 0; i--) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        int j = (int)(s % (uint64_t)(i + 1));
        int32_t t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    return p;
}

/* This process's pools and page table. */
typedef struct pools {
    te_kv_layout layout;
    size_t bytes;
    void **k, **v;
    int32_t *pages;
    int used_pages;
} pools;

static int pools_init(pools *p, const options *o, int fill)
{
    memset(p, 0, sizeof *p);
    p->used_pages = (o->tokens + o->page_size - 1) / o->page_size;
    te_kv_layout l = {o->tp, o->rank, o->layers, o->kv_heads, o->head_dim, 4, o->page_size,
                      p->used_pages + o->spare_pages};
    p->layout = l;
    char why[256];
    p->bytes = te_kv_pool_bytes(&l, why, sizeof why);
    if (!p->bytes) {
        fprintf(stderr, "tandem-transfer-peer: %s\n", why);
        return -1;
    }
    p->k = calloc((size_t)o->layers, sizeof *p->k);
    p->v = calloc((size_t)o->layers, sizeof *p->v);
    p->pages = shuffled_pages(l.n_pages, o->seed * 131 + (uint64_t)o->rank * 7 + (uint64_t)o->is_sender);
    if (!p->k || !p->v || !p->pages)
        return -1;
    for (int i = 0; i < o->layers; i++) {
        p->k[i] = malloc(p->bytes);
        p->v[i] = malloc(p->bytes);
        if (!p->k[i] || !p->v[i])
            return -1;
        memset(p->k[i], fill ? 0 : SENTINEL, p->bytes);
        memset(p->v[i], fill ? 0 : SENTINEL, p->bytes);
        if (fill) {
            te_pattern_fill(&l, p->k[i], i, 0, p->pages, o->tokens, o->seed);
            te_pattern_fill(&l, p->v[i], i, 1, p->pages, o->tokens, o->seed);
        }
    }
    return 0;
}

static void pools_free(pools *p, int layers)
{
    for (int i = 0; i < layers && p->k && p->v; i++) {
        free(p->k[i]);
        free(p->v[i]);
    }
    free(p->k);
    free(p->v);
    free(p->pages);
}

static int run_receiver(const options *o, te_engine *e, void *zctx, pools *pp)
{
    pools p;
    te_kv_local kv = {0};
    void *sock = NULL;
    te_kv_remote senders[64];
    int n_senders = 0, rc = 1;
    char err[512];
    memset(senders, 0, sizeof senders);
    if (pools_init(&p, o, 0)) {
        fprintf(stderr, "tandem-transfer-peer: out of memory for the pools\n");
        goto out;
    }
    te_kv_layout advertised = p.layout;
    if (o->shrink)
        advertised.n_pages = p.layout.n_pages / 2;
    if (te_kv_register(e, &advertised, p.k, p.v, TE_MEM_HOST, &kv) != TN_OK) {
        fprintf(stderr, "tandem-transfer-peer: registering pools: %s\n", te_engine_error(e));
        goto out;
    }
    /* The layout in the hello still says the full pool: only the registered
     * (and advertised) region length is short, as a buggy decoder would do. */
    kv.layout = p.layout;
    char endpoint[256];
    if (te_session_bind(zctx, &sock, endpoint, sizeof endpoint, err, sizeof err) != TN_OK) {
        fprintf(stderr, "tandem-transfer-peer: %s\n", err);
        goto out;
    }
    printf("endpoint %s\n", endpoint);
    fflush(stdout);
    if (te_session_accept(sock, e, &kv, o->senders, o->request_id, o->tokens, p.pages,
                          p.used_pages, o->timeout_ms, senders, err, sizeof err) != TN_OK) {
        fprintf(stderr, "tandem-transfer-peer: rendezvous: %s\n", err);
        goto out;
    }
    n_senders = o->senders;
    /* Every sender rank sends one notice per repetition. */
    int want = o->senders * o->repeat, got = 0, canceled = 0;
    double deadline = te_now_seconds() + o->timeout_ms / 1000.0;
    while (got < want) {
        te_notice note;
        int left = (int)((deadline - te_now_seconds()) * 1000);
        if (left <= 0 || !te_engine_wait_notice(e, &note, left)) {
            if (o->shrink)
                break;
            fprintf(stderr, "tandem-transfer-peer: only %d of %d notices within %d ms\n", got,
                    want, o->timeout_ms);
            goto out;
        }
        got++;
        canceled += note.status != TN_OK;
    }
    if (o->shrink) {
        /* The senders must have refused: no notice, not one byte written. */
        size_t touched = 0;
        for (int i = 0; i < o->layers; i++)
            for (size_t b = 0; b < p.bytes; b++)
                touched += (((uint8_t *)p.k[i])[b] != SENTINEL) + (((uint8_t *)p.v[i])[b] != SENTINEL);
        if (got || touched) {
            fprintf(stderr, "tandem-transfer-peer: expected a refusal, got %d notices and %zu "
                    "written bytes\n", got, touched);
            goto out;
        }
        printf("no notice and every pool byte untouched: the transfer was refused\n");
        rc = 0;
        goto out;
    }
    size_t bad = 0, bytes = 0;
    for (int i = 0; i < o->layers; i++)
        for (int kvi = 0; kvi < 2; kvi++) {
            char why[256] = "";
            size_t b = te_pattern_verify(&p.layout, kvi ? p.v[i] : p.k[i], i, kvi, p.pages,
                                         o->tokens, o->seed, SENTINEL, why, sizeof why);
            if (b && !bad)
                fprintf(stderr, "tandem-transfer-peer: mismatch: %s\n", why);
            bad += b;
            bytes += p.bytes;
        }
    if (bad) {
        fprintf(stderr, "tandem-transfer-peer: %zu of %zu pool bytes wrong\n", bad, bytes);
        goto out;
    }
    printf("verified %zu pool bytes of request %llu from %d sender(s): byte exact\n", bytes,
           (unsigned long long)o->request_id, o->senders);
    rc = 0;
out:
    /* Senders close first: our force close right after acking could cut
     * the ack off in flight. Wait (bounded) until every sender has gone.
     * Peers without failure detection are closed with a flush, which
     * delivers the ack, and could not tell us they left anyway. */
    for (double until = te_now_seconds() + 3.0; te_now_seconds() < until;) {
        int open = 0;
        te_engine_progress(e);
        for (int i = 0; i < n_senders; i++)
            open += te_peer_status(senders[i].peer) == TN_OK &&
                    te_peer_detects_failure(senders[i].peer);
        if (!open)
            break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < n_senders; i++)
        te_kv_disconnect(e, &senders[i]);
    if (sock)
        zmq_close(sock);
    te_kv_deregister(e, &kv);
    *pp = p; /* freed after the engine: see main */
    return rc;
}

/* --stop-pid: freezes the receiver, lets the socket fill with the copies
 * posted while it is frozen (at most 2 s), thaws it and dies: the receiver
 * then reads data whose sender is gone, and must survive it. */
static void die_with_data_in_flight(te_engine *e, te_transfer *t, pid_t receiver)
{
    kill(receiver, SIGSTOP);
    double until = te_now_seconds() + 2.0;
    size_t posted = 0;
    while (te_now_seconds() < until && te_transfer_status(t) == TN_IN_PROGRESS) {
        te_engine_progress(e);
        te_transfer_counts(t, &posted, NULL);
        if (posted == te_transfer_n_copies(t))
            break;
    }
    printf("dying with %zu of %zu copies posted (%s)\n", posted, te_transfer_n_copies(t),
           te_transfer_over_messages(t) ? "data messages" : "puts");
    fflush(stdout);
    kill(receiver, SIGCONT);
    raise(SIGKILL);
}

/* Waits until `pid` is dead (a zombie or gone), so "killed mid-transfer"
 * really means before the rest of the puts and the notice go out. */
static void wait_dead(pid_t pid)
{
    char path[64], state = 0;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    for (int i = 0; i < 5000; i++) {
        FILE *f = fopen(path, "r");
        if (!f)
            return;
        int n = fscanf(f, "%*d (%*[^)]) %c", &state);
        fclose(f);
        if (n == 1 && (state == 'Z' || state == 'X'))
            return;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static int run_sender(const options *o, te_engine *e, void *zctx, pools *pp)
{
    pools p;
    te_kv_local kv = {0};
    te_session_offer offers[MAX_RECEIVERS];
    te_transfer *t[MAX_RECEIVERS] = {0};
    int n_offers = 0, rc = 1;
    char err[512];
    memset(offers, 0, sizeof offers);
    if (pools_init(&p, o, 1)) {
        fprintf(stderr, "tandem-transfer-peer: out of memory for the pools\n");
        goto out;
    }
    if (te_kv_register(e, &p.layout, p.k, p.v, TE_MEM_HOST, &kv) != TN_OK) {
        fprintf(stderr, "tandem-transfer-peer: registering pools: %s\n", te_engine_error(e));
        goto out;
    }
    for (int i = 0; i < o->n_connect; i++) {
        if (te_session_connect(zctx, o->connect[i], e, &kv, o->timeout_ms, &offers[i], err,
                               sizeof err) != TN_OK) {
            fprintf(stderr, "tandem-transfer-peer: rendezvous with %s: %s\n", o->connect[i], err);
            goto out;
        }
        n_offers++;
        /* No transfer starts on a connection still being set up. */
        if (te_peer_wireup_wait(e, offers[i].remote.peer, o->timeout_ms) != TN_OK) {
            fprintf(stderr, "tandem-transfer-peer: connecting to %s: %s\n", o->connect[i],
                    te_engine_error(e));
            goto out;
        }
    }
    uint64_t bytes = 0;
    double start = te_now_seconds();
    for (int r = 0; r < o->warmup + o->repeat; r++) {
        if (r == o->warmup) {
            start = te_now_seconds();
            bytes = 0;
        }
        for (int i = 0; i < n_offers; i++) {
            const te_session_offer *of = &offers[i];
            if (te_kv_send(e, &kv, p.pages, &of->remote, of->pages, of->n_tokens, of->request_id,
                           o->timeout_ms, &t[i]) != TN_OK) {
                /* Refused before anything moved: say so plainly. */
                printf("transfer refused: %s\n", te_engine_error(e));
                fflush(stdout);
                rc = o->expect_failure ? 0 : 1;
                goto out;
            }
        }
        int killed = 0, idle = 0, failed = 0;
        for (int i = 0; i < n_offers; i++) {
            while (te_transfer_status(t[i]) == TN_IN_PROGRESS) {
                if (te_engine_progress(e))
                    idle = 0;
                if (o->stop_pid) {
                    size_t posted;
                    te_transfer_counts(t[i], &posted, NULL);
                    if ((double)posted >= o->die_fraction * (double)te_transfer_n_copies(t[i]) &&
                        posted >= 1)
                        die_with_data_in_flight(e, t[i], o->stop_pid);
                }
                if (o->kill_pid && !killed) {
                    size_t posted;
                    te_transfer_counts(t[i], &posted, NULL);
                    if ((double)posted >= o->kill_fraction * (double)te_transfer_n_copies(t[i]) &&
                        posted >= 1) {
                        kill(o->kill_pid, SIGKILL);
                        wait_dead(o->kill_pid);
                        printf("killed receiver %d after %zu posted puts\n", (int)o->kill_pid,
                               posted);
                        fflush(stdout);
                        killed = 1;
                    }
                }
                te_idle_backoff(&idle);
            }
            if (te_transfer_status(t[i]) != TN_OK) {
                printf("transfer failed: %s: %s (UCX requests in flight: %zu, left to engine "
                       "destroy: %zu)\n", tn_status_str(te_transfer_status(t[i])),
                       te_transfer_error(t[i]), te_engine_outstanding(e), te_engine_abandoned(e));
                failed = 1;
            } else {
                bytes += te_transfer_bytes(t[i]);
            }
        }
        for (int i = 0; i < n_offers; i++) {
            if (!failed && r == 0)
                printf("request %llu to receiver %d: %llu bytes via %s as %s (NIC %s)\n",
                       (unsigned long long)offers[i].request_id, i,
                       (unsigned long long)te_transfer_bytes(t[i]), te_transfer_nic(t[i]),
                       te_transfer_over_messages(t[i]) ? "data messages" : "puts",
                       te_engine_nic(e));
            te_transfer_release(e, t[i]);
            t[i] = NULL;
        }
        if (failed) {
            /* Expected failures must not leave requests the engine does not
             * account for; the abandoned ones go with te_engine_destroy
             * (ASan/valgrind check that nothing leaks then). */
            rc = o->expect_failure && te_engine_outstanding(e) == te_engine_abandoned(e) ? 0 : 1;
            goto out;
        }
    }
    double secs = te_now_seconds() - start;
    printf("sent %llu bytes in %.6f s (%.3f GB/s) over %d timed transfer(s)\n",
           (unsigned long long)bytes, secs, secs > 0 ? (double)bytes / secs / 1e9 : 0.0,
           o->repeat);
    rc = o->expect_failure ? 1 : 0;
    if (o->expect_failure)
        fprintf(stderr, "tandem-transfer-peer: expected the transfer to fail, it succeeded\n");
out:
    for (int i = 0; i < MAX_RECEIVERS; i++)
        if (t[i])
            te_transfer_release(e, t[i]);
    for (int i = 0; i < n_offers; i++)
        te_session_offer_free(e, &offers[i]);
    te_kv_deregister(e, &kv);
    *pp = p; /* freed after the engine: see main */
    return rc;
}

int main(int argc, char **argv)
{
    options o;
    if (parse_options(argc, argv, &o))
        return 2;
    te_engine_config cfg;
    te_engine_config_default(&cfg);
    char name[64];
    snprintf(name, sizeof name, "%s[rank %d]", o.is_sender ? "sender" : "receiver", o.rank);
    cfg.name = name;
    cfg.tls = o.tls[0] ? o.tls : NULL;
    cfg.max_puts_in_flight = o.window;
    cfg.same_host_shm = o.same_host_shm;
    cfg.data_path = !strcmp(o.data_path, "puts")       ? TE_DATA_PUTS
                    : !strcmp(o.data_path, "messages") ? TE_DATA_MESSAGES
                                                       : TE_DATA_AUTO;
    te_engine *e;
    char err[512];
    if (te_engine_create(&cfg, &e, err, sizeof err) != TN_OK) {
        fprintf(stderr, "tandem-transfer-peer: %s\n", err);
        return 1;
    }
    void *zctx = zmq_ctx_new();
    if (!zctx) {
        fprintf(stderr, "tandem-transfer-peer: zmq_ctx_new failed\n");
        te_engine_destroy(e);
        return 1;
    }
    pools p;
    memset(&p, 0, sizeof p);
    int rc = o.is_sender ? run_sender(&o, e, zctx, &p) : run_receiver(&o, e, zctx, &p);
    /* The pools outlive the engine: after a transfer UCX could not cancel
     * (shared-memory transports, dead peer) it may reference them until
     * the engine is destroyed. */
    te_engine_destroy(e);
    pools_free(&p, o.layers);
    zmq_ctx_term(zctx);
    return rc;
}
