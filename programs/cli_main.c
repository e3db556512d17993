/* tandem-cli: the router's RPC API from the shell.
 *
 *   tandem-cli generate --model M --prompt-ids 1,2,3 [--max-tokens N] [--stream] ...
 *       prints the generated ids as one comma-separated line (streamed as they
 *       arrive with --stream) and the finish reason on stderr; Ctrl-C or
 *       --cancel-after N cancels the request through the API.
 *   tandem-cli status
 *       prints the registered workers and their load. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>
#include "common/options.h"
#include "router/rpc_client.h"

typedef struct cli_args {
    char rpc[256];
    char api_key_file[OPT_PATH_MAX];
    char model[128];
    char prompt_ids[65536];
    char stop_ids[4096];
    int max_tokens;
    double temperature, top_p;
    int top_k;
    char seed[32];
    int stream, ignore_eos;
    int cancel_after;
    int timeout_ms;
} cli_args;

typedef struct gen_state {
    int n_printed;
    int cancel_after;
    int sig_fd;
    int stream;
} gen_state;

static const char *const INTRO =
    "Talks to the router's RPC API (protobuf over ZeroMQ).\n\n"
    "  tandem-cli generate --model M --prompt-ids 1,2,3 [flags]\n"
    "      prints the generated token ids as one comma-separated line (as they\n"
    "      arrive with --stream) and the finish reason on stderr. Ctrl-C, or\n"
    "      --cancel-after N tokens, cancels the request through the API.\n"
    "  tandem-cli status\n"
    "      prints the registered workers, their load and the active requests.\n\n"
    "Exit status: 0 finished (length/stop), 1 cancelled or failed, 2 bad arguments.";

static int parse_ids(const char *s, int32_t **out, int *n, const char *what)
{
    *out = NULL;
    *n = 0;
    if (!*s)
        return 0;
    size_t len = strlen(s);
    int cap = opts_list_len(s, len);
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids)
        return -1;
    if (opts_int_list(s, len, 0, INT32_MAX, ids, cap, n) != 0) {
        fprintf(stderr, "tandem-cli: %s must be comma-separated non-negative integers\n", what);
        free(ids);
        return -1;
    }
    *out = ids;
    return 0;
}

static int on_chunk(void *user, const Tandem__V1__TokenChunk *c)
{
    gen_state *g = user;
    for (size_t i = 0; i < c->n_tokens; i++)
        printf("%s%d", g->n_printed++ ? "," : "", (int)c->tokens[i]);
    if (g->stream)
        fflush(stdout);
    if (g->cancel_after > 0 && g->n_printed >= g->cancel_after)
        return 1;
    struct signalfd_siginfo si;
    if (g->sig_fd >= 0 && read(g->sig_fd, &si, sizeof si) == (ssize_t)sizeof si)
        return 1; /* Ctrl-C: cancel through the API, then drain */
    return 0;
}

static const char *reason_name(int r)
{
    switch (r) {
    case TANDEM__V1__FINISH_REASON__FINISH_REASON_LENGTH: return "length";
    case TANDEM__V1__FINISH_REASON__FINISH_REASON_STOP: return "stop";
    case TANDEM__V1__FINISH_REASON__FINISH_REASON_STOP_STRING: return "stop_string";
    case TANDEM__V1__FINISH_REASON__FINISH_REASON_CANCELLED: return "cancelled";
    case TANDEM__V1__FINISH_REASON__FINISH_REASON_ERROR: return "error";
    default: return "unknown";
    }
}

static int cmd_generate(rpc_client *rc, const cli_args *a)
{
    if (!a->model[0] || !a->prompt_ids[0]) {
        fprintf(stderr, "tandem-cli: generate needs --model and --prompt-ids\n");
        return 2;
    }
    rpc_generate_params p = {0};
    int32_t *prompt = NULL, *stops = NULL;
    if (parse_ids(a->prompt_ids, &prompt, &p.n_prompt, "--prompt-ids") != 0 ||
        parse_ids(a->stop_ids, &stops, &p.n_stop_ids, "--stop-ids") != 0) {
        free(prompt);
        return 2;
    }
    p.model = a->model;
    p.prompt = prompt;
    p.stop_ids = stops;
    p.max_tokens = a->max_tokens;
    p.temperature = (float)a->temperature;
    p.top_p = (float)a->top_p;
    p.top_k = a->top_k;
    if (a->seed[0]) {
        unsigned long long seed;
        if (opts_u64(a->seed, &seed) != 0) {
            fprintf(stderr, "tandem-cli: --seed must be a non-negative integer\n");
            free(prompt);
            free(stops);
            return 2;
        }
        p.seed = seed;
        p.has_seed = 1;
    }
    p.ignore_eos = a->ignore_eos;
    p.stream = a->stream;
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    gen_state g = {.cancel_after = a->cancel_after, .stream = a->stream,
                   .sig_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC)};
    char id[32], err[512] = "";
    int r = rpc_generate(rc, &p, on_chunk, &g, id, a->timeout_ms, err, sizeof err);
    printf("\n");
    fflush(stdout);
    if (g.sig_fd >= 0)
        close(g.sig_fd);
    free(prompt);
    free(stops);
    if (r < 0) {
        fprintf(stderr, "tandem-cli: %s\n", err);
        return 1;
    }
    fprintf(stderr, "tandem-cli: request %s: %d tokens, finish_reason %s%s%s\n", id, g.n_printed,
            reason_name(r), err[0] ? ": " : "", err);
    return (r == TANDEM__V1__FINISH_REASON__FINISH_REASON_LENGTH ||
            r == TANDEM__V1__FINISH_REASON__FINISH_REASON_STOP) ? 0 : 1;
}

static int cmd_status(rpc_client *rc, const cli_args *a)
{
    Tandem__V1__ClusterStatus *st = NULL;
    char err[256];
    if (rpc_status(rc, a->timeout_ms, &st, err, sizeof err) != 0) {
        fprintf(stderr, "tandem-cli: %s\n", err);
        return 1;
    }
    printf("models:");
    for (size_t i = 0; i < st->n_models; i++)
        printf(" %s", st->models[i]);
    printf("\nrequests: %u active, %llu total\nworkers: %zu\n", st->requests_active,
           (unsigned long long)st->requests_total, st->n_workers);
    for (size_t i = 0; i < st->n_workers; i++) {
        const Tandem__V1__WorkerStatus *w = st->workers[i];
        if (w->load_case == TANDEM__V1__WORKER_STATUS__LOAD_PREFILLER)
            printf("  prefiller %-28s model=%s in_flight=%u queued_input_tokens=%llu "
                   "input_tokens_per_s=%.1f heartbeat=%ums ago\n",
                   w->worker_id, w->model, w->requests_in_flight,
                   (unsigned long long)w->prefiller->queued_input_tokens,
                   w->prefiller->input_tokens_per_s, w->ms_since_heartbeat);
        else if (w->load_case == TANDEM__V1__WORKER_STATUS__LOAD_DECODER)
            printf("  decoder   %-28s model=%s in_flight=%u batch=%u waiting=%u "
                   "kv_pages_free=%u/%u tokens_per_s=%.1f heartbeat=%ums ago\n",
                   w->worker_id, w->model, w->requests_in_flight, w->decoder->batch_size,
                   w->decoder->waiting, w->decoder->kv_pages_free, w->decoder->kv_pages_total,
                   w->decoder->tokens_per_s, w->ms_since_heartbeat);
    }
    tandem__v1__cluster_status__free_unpacked(st, NULL);
    return 0;
}

int main(int argc, char **argv)
{
    static cli_args a;
    snprintf(a.rpc, sizeof a.rpc, "tcp://127.0.0.1:5556");
    a.top_p = 1.0;
    a.timeout_ms = 60000;
    const opt_spec specs[] = {
        {"rpc", OPT_STR, a.rpc, sizeof a.rpc, "the router's RPC endpoint"},
        {"model", OPT_STR, a.model, sizeof a.model, "generate: model name"},
        {"prompt-ids", OPT_STR, a.prompt_ids, sizeof a.prompt_ids,
         "generate: prompt token ids, e.g. 1,2,3"},
        {"max-tokens", OPT_INT, &a.max_tokens, 0, "generate: tokens to generate (0: default)"},
        {"temperature", OPT_DOUBLE, &a.temperature, 0, "generate: 0 is greedy"},
        {"top-p", OPT_DOUBLE, &a.top_p, 0, "generate: nucleus mass in (0, 1]"},
        {"top-k", OPT_INT, &a.top_k, 0, "generate: 0 keeps every token"},
        {"seed", OPT_STR, a.seed, sizeof a.seed, "generate: sampling seed (default: random)"},
        {"stop-ids", OPT_STR, a.stop_ids, sizeof a.stop_ids, "generate: extra stop token ids"},
        {"ignore-eos", OPT_BOOL, &a.ignore_eos, 0, "generate: do not stop at EOS"},
        {"stream", OPT_BOOL, &a.stream, 0, "generate: print tokens as they arrive"},
        {"cancel-after", OPT_INT, &a.cancel_after, 0,
         "generate: cancel after this many tokens (0: never)"},
        {"timeout-ms", OPT_INT, &a.timeout_ms, 0, "longest wait for any reply"},
        {"api-key-file", OPT_STR, a.api_key_file, sizeof a.api_key_file,
         "the router's --api-key-file, when it has one"},
    };
    const int n_specs = (int)(sizeof specs / sizeof *specs);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        opts_print_help(argc < 2 ? stderr : stdout, "tandem-cli generate|status", INTRO, specs,
                        n_specs);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "generate") && strcmp(cmd, "status")) {
        fprintf(stderr, "tandem-cli: unknown command '%s' (generate or status; see --help)\n", cmd);
        return 2;
    }
    char err[512];
    int prc = opts_parse(specs, n_specs, argc - 1, argv + 1, err, sizeof err);
    if (prc == OPTS_HELP) {
        opts_print_help(stdout, "tandem-cli generate|status", INTRO, specs, n_specs);
        return 0;
    }
    if (prc != OPTS_OK) {
        fprintf(stderr, "tandem-cli: %s\n", err);
        return 2;
    }
    if (a.timeout_ms <= 0) {
        fprintf(stderr, "tandem-cli: --timeout-ms must be positive\n");
        return 2;
    }
    sock_auth auth = {0};
    if (a.api_key_file[0] && sock_auth_load(&auth, a.api_key_file, "rpc", err, sizeof err) != 0) {
        fprintf(stderr, "tandem-cli: %s\n", err);
        return 2;
    }
    rpc_client rc;
    int orc = rpc_client_open_auth(&rc, a.rpc, &auth, err, sizeof err);
    sock_auth_wipe(&auth);
    if (orc != 0) {
        fprintf(stderr, "tandem-cli: %s\n", err);
        return 1;
    }
    int status = !strcmp(cmd, "generate") ? cmd_generate(&rc, &a) : cmd_status(&rc, &a);
    rpc_client_close(&rc);
    return status;
}
