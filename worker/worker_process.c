#include "worker/worker_process.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>
#include <zmq.h>
#include "engine/comm.h"
#include "engine/device.h"
#include "kernels/dtype.h"
#include "common/status.h"
#include "common/sock_auth.h"
#include "common/sys.h"

void worker_options_default(worker_options *o)
{
    memset(o, 0, sizeof *o);
    snprintf(o->router, sizeof o->router, "tcp://127.0.0.1:5555");
    o->page_size = 16;
    snprintf(o->device, sizeof o->device, "cpu");
    snprintf(o->weights, sizeof o->weights, "auto");
    snprintf(o->kv_dtype, sizeof o->kv_dtype, "auto");
    snprintf(o->kv_path, sizeof o->kv_path, "auto");
    snprintf(o->cuda_graphs, sizeof o->cuda_graphs, "on");
    snprintf(o->kv_same_host, sizeof o->kv_same_host, "tls");
    snprintf(o->tokenizer, sizeof o->tokenizer, "none");
    snprintf(o->metrics_host, sizeof o->metrics_host, "127.0.0.1");
    o->wedged_after_s = 60;
    o->ranks = o->ep = 1;
    o->comm_timeout_ms = COMM_DEFAULT_TIMEOUT_MS;
    o->local_ranks = 1;
    o->group_timeout_ms = 300000;
    snprintf(o->rank_comm, sizeof o->rank_comm, "auto");
}

enum { MAX_SPECS = 64 };

int worker_parse_flags(worker_options *o, const char *prog, const char *intro,
                       const char *ranks_flag, const opt_spec *role_specs, int n_role,
                       int argc, char **argv)
{
    const int tp = strcmp(ranks_flag, "tp") == 0;
    const opt_spec head[] = {
        {"router", OPT_STR, o->router, sizeof o->router, "the router's worker endpoint"},
        {"model", OPT_STR, o->model_dir, sizeof o->model_dir,
         "model directory (config.json + safetensors); this or --synthetic is required"},
        {"synthetic", OPT_STR, o->synthetic, sizeof o->synthetic,
         "instead of --model: random weights of this config.json's shapes (benchmarks: "
         "throughput does not depend on weight values)"},
        {"tokenizer", OPT_STR, o->tokenizer, sizeof o->tokenizer,
         "the router's --tokenizer (none, bytes or a tokenizer.json / o200k_base.tiktoken "
         "path): the vocabulary structured outputs constrain tokens over (default none: "
         "requests with response_format json or a forced tool call are refused)"},
        {"model-name", OPT_STR, o->model_name, sizeof o->model_name,
         "name clients request (default: the directory's base name)"},
        {"worker-id", OPT_STR, o->worker_id, sizeof o->worker_id,
         tp ? "unique id (default: prefiller-HOST-PID)" : "unique id (default: decoder-HOST-PID)"},
        {"page-size", OPT_INT, &o->page_size, 0, "KV cache tokens per page"},
        {"device", OPT_STR, o->device, sizeof o->device,
         "where the model and its KV cache live: cpu, cuda (GPU 0) or cuda:N (needs a "
         "`make CUDA=1` build); with several ranks, rank r of this process takes GPU N + r "
         "(see --rank-devices)"},
        {"weights", OPT_STR, o->weights, sizeof o->weights,
         "storage of the large weight matrices: auto (f32 on cpu, bf16 on cuda), f32, bf16 "
         "or fp8 (attention and experts FP8 e4m3 with 128x128 block scales)"},
        {"kv-dtype", OPT_STR, o->kv_dtype, sizeof o->kv_dtype,
         "KV cache element type: auto (f32 on cpu, bf16 on cuda), f32, bf16 or fp8 (e4m3, a "
         "scale per token and KV head); the "
         "prefillers and decoders of a model must agree (the router refuses a mismatch)"},
    };
    const opt_spec tail[] = {
        {"cuda-graphs", OPT_STR, o->cuda_graphs, sizeof o->cuda_graphs,
         "on (default) or off: decode steps recorded as CUDA graphs per batch-size bucket and "
         "replayed (--device cuda, one rank; engine/model.h)"},
        {"worker-secret-file", OPT_STR, o->worker_secret_file, sizeof o->worker_secret_file,
         "file with the secret shared with the router's --worker-secret-file: the router "
         "connection is then authenticated and encrypted (CURVE)"},
        {"ucx-tls", OPT_STR, o->ucx_tls, sizeof o->ucx_tls,
         "UCX transports for the TransferEngine (\"\": UCX_TLS from the environment)"},
        {"kv-same-host", OPT_STR, o->kv_same_host, sizeof o->kv_same_host,
         "KV transfers to a worker on this host (same boot, IPC and PID namespaces): tls "
         "(the transports UCX_TLS gives every peer, with UCX peer-failure detection) or shm "
         "(UCX shared memory when UCX_TLS allows it: much faster than loopback tcp, but a "
         "dead peer is then noticed only by the transfer timeout or the router)"},
        {"kv-path", OPT_STR, o->kv_path, sizeof o->kv_path,
         "how the KV pools meet UCX: auto (GPU memory registered directly when UCX has CUDA "
         "support, else staged through pinned host buffers), direct, or staged"},
        {"metrics-host", OPT_STR, o->metrics_host, sizeof o->metrics_host,
         "IPv4 address /metrics and /healthz bind (0.0.0.0 in a pod)"},
        {"metrics-port", OPT_INT, &o->metrics_port, 0,
         "port of /metrics and /healthz (0: any free port, logged and in --port-file; -1: none)"},
        {"port-file", OPT_STR, o->port_file, sizeof o->port_file,
         "write metrics_port=N here once serving"},
        {"wedged-after-s", OPT_DOUBLE, &o->wedged_after_s, 0,
         "/healthz answers 500 when the main loop made no progress this long"},
        {ranks_flag, OPT_INT, &o->ranks, 0,
         tp ? "tensor-parallel ranks: attention heads split over them (forked, or see --rank)"
            : "data-parallel ranks, each a decoder with its own requests and KV cache that "
              "registers as WORKER-ID-dpR (forked, or see --rank)"},
        {"ep", OPT_INT, &o->ep, 0,
         tp ? "expert-parallel ranks inside the TP group (divides --tp)"
            : "expert-parallel ranks among them (divides --dp)"},
        {"rank", OPT_INT, &o->rank, 0, "this process's rank when an orchestrator starts them"},
        {"world", OPT_INT, &o->world, 0,
         tp ? "ranks started by an orchestrator (= --tp; 0: this process forks them)"
            : "ranks started by an orchestrator (= --dp; 0: this process forks them)"},
        {"comm-name", OPT_STR, o->comm_name, sizeof o->comm_name,
         "the orchestrated ranks' rendezvous name"},
        {"comm-timeout-ms", OPT_INT, &o->comm_timeout_ms, 0,
         "longest wait for a peer rank inside a step"},
        {"rank-devices", OPT_STR, o->rank_devices, sizeof o->rank_devices,
         "CUDA ordinals of this process's ranks in order, e.g. 0,0 (two ranks sharing GPU "
         "0); default: --device's N + the rank"},
        {"rank-comm", OPT_STR, o->rank_comm, sizeof o->rank_comm,
         "the ranks' communicator for the model: auto (host on cpu; on cuda NCCL, or "
         "staged through host memory when two ranks share a GPU), host, nccl or staged"},
        {"group-leader", OPT_STR, o->group_leader, sizeof o->group_leader,
         "HOST[:PORT] (port 8092 by default) of rank 0's TCP rendezvous, for ranks on "
         "several machines (pods): --rank is this process's first rank of --world, rank 0 "
         "listens on PORT"},
        {"local-ranks", OPT_INT, &o->local_ranks, 0,
         "with --group-leader: ranks this process runs (--rank .. --rank + N - 1, forked)"},
        {"group-timeout-ms", OPT_INT, &o->group_timeout_ms, 0,
         "longest wait for every rank at the --group-leader rendezvous"},
    };
    const int n_head = (int)(sizeof head / sizeof *head), n_tail = (int)(sizeof tail / sizeof *tail);
    opt_spec specs[MAX_SPECS];
    int n = 0;
    if (n_head + n_role + n_tail > MAX_SPECS) {
        fprintf(stderr, "%s: too many flags\n", prog);
        return 2;
    }
    memcpy(specs, head, sizeof head);
    n += n_head;
    memcpy(specs + n, role_specs, (size_t)n_role * sizeof *specs);
    n += n_role;
    memcpy(specs + n, tail, sizeof tail);
    n += n_tail;

    char err[512];
    int prc = opts_parse(specs, n, argc, argv, err, sizeof err);
    if (prc == OPTS_HELP) {
        opts_print_help(stdout, prog, intro, specs, n);
        return 0;
    }
    if (prc != OPTS_OK) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return 2;
    }
    static const char BAD_VALUES[] =
        "exactly one of --model and --synthetic is required, sizes must be positive and "
        "--metrics-port in -1..65535";
    if (!o->model_dir[0] == !o->synthetic[0] || o->page_size <= 0 || o->ranks < 1 || o->ep < 1 || o->world < 0 ||
        o->comm_timeout_ms < 1 || o->metrics_port < -1 || o->metrics_port > 65535 ||
        !(o->wedged_after_s > 0)) {
        fprintf(stderr, "%s: %s\n", prog, BAD_VALUES);
        return 2;
    }
    kn_backend_kind kind;
    int ordinal;
    if (tm_device_parse(o->device, &kind, &ordinal) != 0) {
        fprintf(stderr, "%s: --device must be cpu, cuda or cuda:N, got '%s'\n", prog, o->device);
        return 2;
    }
    if (rank_comm_parse(o->rank_comm, &o->rank_comm_mode) != 0) {
        fprintf(stderr, "%s: --rank-comm must be auto, host, nccl or staged, got '%s'\n",
                prog, o->rank_comm);
        return 2;
    }
    if (o->local_ranks < 1 || o->group_timeout_ms < 1) {
        fprintf(stderr, "%s: %s\n", prog, BAD_VALUES);
        return 2;
    }
    if (o->rank_devices[0] && kind != KN_BACKEND_CUDA) {
        fprintf(stderr, "%s: --rank-devices needs --device cuda\n", prog);
        return 2;
    }
    if (tm_weights_parse(o->weights, &o->weight_dtype) != 0) {
        fprintf(stderr, "%s: --weights must be auto, f32, bf16 or fp8, got '%s'\n", prog, o->weights);
        return 2;
    }
    tm_kv_dtype kvd;
    char why[160];
    if (tm_kv_dtype_parse(o->kv_dtype, &kvd, why, sizeof why) != 0) {
        fprintf(stderr, "%s: %s\n", prog, why);
        return 2;
    }
    o->kv_elem = tm_kv_dtype_resolve(kvd, kind);
    if (tm_cuda_graphs_parse(o->cuda_graphs, &o->cuda_graphs_mode) != 0) {
        fprintf(stderr, "%s: --cuda-graphs must be on or off, got '%s'\n", prog, o->cuda_graphs);
        return 2;
    }
    if (tm_kv_path_parse(o->kv_path, &o->kv_path_mode) != 0) {
        fprintf(stderr, "%s: --kv-path must be auto, direct or staged, got '%s'\n", prog,
                o->kv_path);
        return 2;
    }
    if (strcmp(o->kv_same_host, "tls") && strcmp(o->kv_same_host, "shm")) {
        fprintf(stderr, "%s: --kv-same-host must be tls or shm, got '%s'\n", prog,
                o->kv_same_host);
        return 2;
    }
    o->same_host_shm = !strcmp(o->kv_same_host, "shm");
    /* the role's integer flags are sizes and time limits: positive */
    for (int i = 0; i < n_role; i++)
        if (role_specs[i].type == OPT_INT && *(const int *)role_specs[i].dst <= 0) {
            fprintf(stderr, "%s: %s\n", prog, BAD_VALUES);
            return 2;
        }
    return -1;
}

void worker_fill_names(worker_options *o, const char *role)
{
    if (!o->model_name[0]) {
        char tmp[sizeof o->model_dir];
        snprintf(tmp, sizeof tmp, "%s", o->synthetic[0] ? o->synthetic : o->model_dir);
        snprintf(o->model_name, sizeof o->model_name, "%s", basename(tmp));
        size_t n = strlen(o->model_name);
        if (o->synthetic[0] && n > 5 && strcmp(o->model_name + n - 5, ".json") == 0)
            o->model_name[n - 5] = '\0';
    }
    if (!o->worker_id[0]) {
        char host[64] = "host";
        gethostname(host, sizeof host - 1);
        snprintf(o->worker_id, sizeof o->worker_id, "%s-%s-%d", role, host, (int)getpid());
    }
}

void worker_group_spec(const worker_options *o, int tp, int dp, const char *prefix,
                       rank_group_spec *spec)
{
    *spec = (rank_group_spec){
        .tp = tp, .ep = o->ep, .dp = dp, .rank = o->rank, .world = o->world,
        .name = o->comm_name, .leader = o->group_leader, .local_ranks = o->local_ranks,
        .prefix = prefix, .timeout_ms = o->comm_timeout_ms,
        .join_timeout_ms = o->group_timeout_ms, .comm = o->rank_comm_mode,
    };
}

int worker_rank_device(const worker_options *o, int local, int size, char *out, size_t len,
                       char *err, size_t errlen)
{
    kn_backend_kind kind;
    int base;
    if (tm_device_parse(o->device, &kind, &base) != 0)
        return tn_fail(err, errlen, TN_ERR_ARG, "--device must be cpu, cuda or cuda:N, got '%s'",
                       o->device);
    if (kind != KN_BACKEND_CUDA || size <= 1) {
        snprintf(out, len, "%s", o->device);
        return 0;
    }
    int ordinal = base + local;
    if (o->rank_devices[0]) {
        const char *p = o->rank_devices;
        for (int i = 0;; i++) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p || v < 0 || v > 1023 || (*end && *end != ','))
                return tn_fail(err, errlen, TN_ERR_ARG, "--rank-devices must be CUDA ordinals "
                               "separated by commas, got '%s'", o->rank_devices);
            if (i == local) {
                ordinal = (int)v;
                break;
            }
            if (!*end)
                return tn_fail(err, errlen, TN_ERR_ARG, "--rank-devices '%s' names fewer "
                               "devices than this process has ranks", o->rank_devices);
            p = end + 1;
        }
    }
    snprintf(out, len, "cuda:%d", ordinal);
    return 0;
}

int worker_load_model(const worker_options *o, const char *who, rank_group *g, kn_backend *be,
                      tm_model **out, char *err, size_t errlen)
{
    *out = NULL;
    char why[400], device[32];
    if (worker_rank_device(o, g->local_rank, g->size, device, sizeof device, err, errlen))
        return TN_ERR_ARG;
    if (tm_device_open(device, be, why, sizeof why) != TN_OK) {
        if (strcmp(device, o->device) != 0 && !o->rank_devices[0])
            snprintf(err, errlen, "rank %d: %s (rank r of a process defaults to --device's "
                     "N + r; --rank-devices 0,0 puts two ranks on GPU 0)", g->rank, why);
        else
            snprintf(err, errlen, "%s", why);
        return TN_ERR_ARG;
    }
    if (rank_group_layout(g, be, why, sizeof why) != TN_OK) {
        snprintf(err, errlen, "rank %d: the rank group on %s: %s", g->rank, device, why);
        return TN_ERR_ARG;
    }
    tm_load_opts opts = {.weights = o->weight_dtype, .par = &g->groups.par, .seed = 1};
    if ((o->synthetic[0] ? tm_model_synthetic(o->synthetic, be, &opts, out, why, sizeof why)
                         : tm_model_load_opts(o->model_dir, be, &opts, out, why, sizeof why)) !=
        TN_OK) {
        snprintf(err, errlen, "cannot load model: %s", why);
        return TN_ERR_ARG;
    }
    tm_model_set_cuda_graphs(*out, o->cuda_graphs_mode);
    /* named by the experts' dtype, most of an MoE model's bytes: an FP8
     * model keeps bf16 norms and LM head and must not read "bf16 weights" */
    tn_log(who, "rank %d: model on %s, %s weights (attention %s, experts %s, other %s; %.1f MiB)%s%s",
           g->rank, device, kn_dtype_name(tm_model_expert_dtype(*out)),
           kn_dtype_name(tm_model_attn_dtype(*out)), kn_dtype_name(tm_model_expert_dtype(*out)),
           kn_dtype_name(tm_model_weight_dtype(*out)),
           (double)tm_model_weight_bytes(*out) / (1024.0 * 1024.0),
           g->size > 1 ? ", rank communicator " : "",
           g->size > 1 ? rank_comm_name(g->comm_kind) : "");
    return 0;
}

void worker_register_init(Tandem__V1__Register *reg, const worker_options *o,
                          Tandem__V1__WorkerRole role, const tm_config *mc, int max_context,
                          int kv_pages, const uint8_t *endpoint, size_t endpoint_len)
{
    tandem__v1__register__init(reg);
    reg->worker_id = (char *)o->worker_id;
    reg->role = role;
    reg->model = (char *)o->model_name;
    reg->model_type = (char *)mc->model_type;
    reg->vocab_size = mc->vocab_size;
    reg->max_context = max_context;
    reg->page_size = o->page_size;
    reg->kv_pages_total = kv_pages;
    reg->eos_token_ids = (int32_t *)mc->eos_ids;
    reg->n_eos_token_ids = (size_t)mc->n_eos;
    reg->transfer_endpoint.data = (uint8_t *)endpoint;
    reg->transfer_endpoint.len = endpoint_len;
    reg->kv_dtype = o->kv_elem == KN_BF16       ? TANDEM__V1__KV_DTYPE__KV_DTYPE_BF16
                  : o->kv_elem == KN_FP8_E4M3 ? TANDEM__V1__KV_DTYPE__KV_DTYPE_FP8_E4M3
                                              : TANDEM__V1__KV_DTYPE__KV_DTYPE_F32;
    reg->kv_layers = mc->n_layers;
    reg->kv_heads = mc->n_kv_heads;
    reg->kv_head_dim = mc->head_dim;
    /* One per process: the router tells a restart under the same id (a
     * scaler replacing a dead worker) from a repeated registration. */
    do
        reg->incarnation = tn_random_u64();
    while (reg->incarnation == 0);
}

int worker_join(const worker_options *o, const char *who, const Tandem__V1__Register *reg,
                worker_link *link, worker_metrics *wm, worker_http **http, char *err,
                size_t errlen)
{
    sock_auth auth = {0};
    if (o->worker_secret_file[0] &&
        sock_auth_load(&auth, o->worker_secret_file, "workers", err, errlen) != 0)
        return TN_ERR_ARG;
    int rc = link_open_auth(link, who, o->router, o->worker_id, reg, &auth, err, errlen);
    sock_auth_wipe(&auth);
    if (rc != 0)
        return TN_ERR_ARG;
    return worker_http_serve(o->metrics_host, o->metrics_port, o->port_file, who, o->worker_id,
                             o->wedged_after_s, wm, http, err, errlen) == 0 ? 0 : -1;
}

int worker_wait(worker_link *link, int sig_fd, int wake_fd, int timeout_ms, const char *who,
                unsigned *sig)
{
    zmq_pollitem_t items[3] = {{link->sock, 0, ZMQ_POLLIN, 0}};
    int n = 1, sig_item = -1;
    if (sig_fd >= 0) {
        sig_item = n;
        items[n++] = (zmq_pollitem_t){NULL, sig_fd, ZMQ_POLLIN, 0};
    }
    if (wake_fd >= 0)
        items[n++] = (zmq_pollitem_t){NULL, wake_fd, ZMQ_POLLIN, 0};
    if (zmq_poll(items, n, timeout_ms) < 0 && errno != EINTR)
        tn_log(who, "zmq_poll failed: %s", zmq_strerror(errno));
    *sig = 0;
    if (sig_item < 0 || !items[sig_item].revents)
        return 0;
    struct signalfd_siginfo si;
    if (read(sig_fd, &si, sizeof si) == (ssize_t)sizeof si)
        *sig = si.ssi_signo;
    return 1;
}

void worker_receive(worker_link *link, const char *who, const int *session,
                    worker_message_fn handle, void (*new_session)(void *ctx), void *ctx)
{
    Tandem__V1__WorkerMessage *m;
    while (link_recv(link, &m)) {
        /* a re-registration happened inside link_recv before this message
         * (which belongs to the new session) */
        if (*session != link->session)
            new_session(ctx);
        if (m->body_case == TANDEM__V1__WORKER_MESSAGE__BODY_ERROR)
            tn_log(who, "router error for request %s: %s", m->error->request_id,
                   m->error->message);
        else if (!handle(ctx, m))
            tn_log(who, "unexpected message from the router (case %d)", (int)m->body_case);
        tandem__v1__worker_message__free_unpacked(m, NULL);
    }
    if (*session != link->session)
        new_session(ctx);
}

void worker_send_heartbeat(worker_link *link, Tandem__V1__Heartbeat *hb,
                           const worker_metrics *wm, uint64_t now_ms)
{
    worker_metrics_wire wire;
    hb->metrics = worker_metrics_to_wire(wm, &wire);
    Tandem__V1__WorkerMessage m = TANDEM__V1__WORKER_MESSAGE__INIT;
    m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_HEARTBEAT;
    m.heartbeat = hb;
    link_send(link, &m);
    link_heartbeat_sent(link, now_ms);
}

int worker_finish(const worker_options *o, const char *prog, rank_group *g, tm_model **model,
                  int status)
{
    tm_model_free(*model);
    *model = NULL;
    char why[256] = "";
    status = rank_group_finish(g, status, o->comm_timeout_ms + 10000, why, sizeof why);
    if (why[0])
        fprintf(stderr, "%s: %s\n", prog, why);
    return status;
}
