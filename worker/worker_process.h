/* The process plumbing tandem-prefiller and tandem-decoder share: their
 * common flags (router, model, --device, --weights, --kv-path, metrics
 * server, rank group), the model loaded on the chosen device, registration
 * with the router (authenticated when a secret is given) and the metrics
 * server, the wait on the router socket and the signals, heartbeats, and
 * the shutdown order. The main loop is worker/worker_loop.h; each
 * executable keeps what is its own: its flags, its messages, its
 * callbacks. */
#ifndef TANDEM_WORKER_WORKER_PROCESS_H
#define TANDEM_WORKER_WORKER_PROCESS_H
#include <stddef.h>
#include <stdint.h>
#include "engine/kv_staging.h"
#include "engine/model.h"
#include "engine/rank_group.h"
#include "kernels/backend.h"
#include "common/options.h"
#include "worker/worker_http.h"
#include "worker/worker_link.h"
#include "worker/worker_metrics.h"

typedef struct worker_options {
    char router[256];          /* the router's worker endpoint */
    char model_dir[OPT_PATH_MAX];
    char synthetic[OPT_PATH_MAX]; /* a config.json: random weights of its shapes instead of
                                     model_dir's checkpoint (benchmarks; tandem-bench's --synthetic) */
    char model_name[128];      /* "" = the model directory's base name */
    char tokenizer[OPT_PATH_MAX]; /* none, bytes or a vocabulary (worker/worker_vocab.h) */
    char worker_id[128];       /* "" = ROLE-HOST-PID */
    int page_size;
    char device[32];           /* cpu, cuda, cuda:N (engine/device.h) */
    char weights[16];          /* auto, f32, bf16 */
    char kv_dtype[16];         /* auto, f32, bf16 (engine/device.h) */
    char kv_path[16];          /* auto, direct, staged (engine/kv_staging.h) */
    char cuda_graphs[8];       /* on, off (engine/model.h tm_model_set_cuda_graphs) */
    char ucx_tls[128];         /* UCX_TLS for the TransferEngine ("" = environment) */
    char kv_same_host[16];     /* tls, shm: transports to peers on this host */
    char worker_secret_file[OPT_PATH_MAX]; /* shared secret of the worker socket ("" = none) */
    char metrics_host[64];     /* /metrics and /healthz (worker/worker_http.h) */
    int metrics_port;          /* 0: any free port; -1: no HTTP server */
    char port_file[OPT_PATH_MAX];       /* where the bound metrics port is written ("" = nowhere) */
    double wedged_after_s;     /* liveness fails after this long without progress */
    int ranks;                 /* --tp (prefiller) or --dp (decoder) */
    int ep;                    /* expert-parallel ranks among them */
    int rank, world;           /* orchestrated ranks: this one of world (0 = fork) */
    char comm_name[64];        /* orchestrated ranks' rendezvous name */
    int comm_timeout_ms;       /* longest wait for a peer rank inside a step */
    char group_leader[256];    /* rank 0's HOST[:PORT] for the TCP rendezvous ("" = none) */
    int local_ranks;           /* with a group leader: ranks this process runs */
    int group_timeout_ms;      /* longest wait for the whole group at the rendezvous */
    char rank_devices[256];    /* CUDA ordinals of this process's ranks, "0,0,1,1" */
    char rank_comm[16];        /* auto, host, nccl, staged (engine/rank_comm.h) */
    /* parsed from the strings above by worker_parse_flags */
    tm_weight_dtype weight_dtype;
    tm_kv_path kv_path_mode;
    tm_cuda_graphs cuda_graphs_mode;
    int same_host_shm;         /* --kv-same-host shm */
    kn_dtype kv_elem;          /* the KV cache's dtype, auto resolved for --device */
    rank_comm_kind rank_comm_mode;
} worker_options;

/* The defaults of every common flag. */
void worker_options_default(worker_options *o);

/* Parses argv into o (the common flags) and the role's own specs, which
 * --help lists after --page-size/--device/--weights. ranks_flag is "tp" or
 * "dp" (o->ranks). The role's OPT_INT flags are sizes and time limits: each
 * must be positive. Returns -1 to go on, or the exit status: 0 after
 * --help, 2 after a bad flag or value (message on stderr as "PROG:
 * reason"). */
int worker_parse_flags(worker_options *o, const char *prog, const char *intro,
                       const char *ranks_flag, const opt_spec *role_specs, int n_role,
                       int argc, char **argv);

/* The defaults that depend on the process: the model name from the
 * directory (or the --synthetic config file's name without ".json"), the
 * worker id ROLE-HOST-PID. */
void worker_fill_names(worker_options *o, const char *role);

/* The rank group's spec from the flags: tp x dp ranks with ep expert
 * ranks; prefix names forked groups. */
void worker_group_spec(const worker_options *o, int tp, int dp, const char *prefix,
                       rank_group_spec *spec);

/* The device of local rank `local` of a group of `size` ranks: --device
 * for one rank; with CUDA, --rank-devices' entry or cuda:(N + local) for
 * --device cuda:N. 0, or -1 with the reason in err. */
int worker_rank_device(const worker_options *o, int local, int size, char *out, size_t len,
                       char *err, size_t errlen);

/* Opens the rank's device (worker_rank_device), builds the group's
 * communicators on it (rank_group_layout) and loads the model there with
 * the chosen weight storage and the group's layout (with --synthetic:
 * random weights of the config's shapes, seed 1, so a prefiller and a
 * decoder made from one config hold the same weights). Logs the device,
 * the weights and the rank communicator. Returns 0, or -1 with the reason
 * in err. */
int worker_load_model(const worker_options *o, const char *who, rank_group *g, kn_backend *be,
                      tm_model **out, char *err, size_t errlen);

/* The Register fields every worker sends (the role fills the rest). */
void worker_register_init(Tandem__V1__Register *reg, const worker_options *o,
                          Tandem__V1__WorkerRole role, const tm_config *mc, int max_context,
                          int kv_pages, const uint8_t *endpoint, size_t endpoint_len);

/* Connects to the router (authenticated when --worker-secret-file is set),
 * sends the registration, and starts the metrics server. Returns 0, or -1
 * with the reason in err. */
int worker_join(const worker_options *o, const char *who, const Tandem__V1__Register *reg,
                worker_link *link, worker_metrics *wm, worker_http **http, char *err,
                size_t errlen);

/* Waits up to timeout_ms for the router socket, the signal fd (sig_fd < 0:
 * none) or wake_fd becoming readable (the TransferEngine's armed event
 * descriptor: te_engine_arm; < 0: none; the caller progresses after).
 * Returns 1 when a signal came (*sig: its number, 0 if unreadable), else
 * 0. */
int worker_wait(worker_link *link, int sig_fd, int wake_fd, int timeout_ms, const char *who,
                unsigned *sig);

/* The role's handler of one router message: returns 1 when it knew the
 * message's kind, 0 for one it does not expect (logged by the caller). */
typedef int (*worker_message_fn)(void *ctx, const Tandem__V1__WorkerMessage *m);
/* Handles every message waiting on the link: router Errors are logged,
 * the rest go to handle. Work given in an earlier session is no longer
 * wanted (the router restarted, or dropped us and placed it elsewhere;
 * link_recv registered again): new_session runs, before the first message
 * of the new session, whenever link->session differs from *session, and
 * must bring *session up to date. */
void worker_receive(worker_link *link, const char *who, const int *session,
                    worker_message_fn handle, void (*new_session)(void *ctx), void *ctx);

/* Sends hb (the role filled its load and draining flag) with the worker's
 * metrics series attached, and restarts the heartbeat clock. */
void worker_send_heartbeat(worker_link *link, Tandem__V1__Heartbeat *hb,
                           const worker_metrics *wm, uint64_t now_ms);

/* The end of main: frees the model first (it borrows the group's
 * communicators), leaves the group (rank 0 of a forked group reaps the
 * others, which may turn status into a failure) and returns the exit
 * status. */
int worker_finish(const worker_options *o, const char *prog, rank_group *g, tm_model **model,
                  int status);

#endif
