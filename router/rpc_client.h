/* A small C client for the router's RPC API (tandem.v1.ClientMessage over a
 * ZeroMQ DEALER socket): generate with a token stream, cancel, cluster
 * status. One client, one thread; several requests may share a client. */
#ifndef TANDEM_ROUTER_RPC_CLIENT_H
#define TANDEM_ROUTER_RPC_CLIENT_H
#include <stddef.h>
#include <stdint.h>
#include "proto/tandem.pb-c.h"
#include "common/sock_auth.h"

typedef struct rpc_client {
    void *zctx;
    void *sock;
    uint64_t next_tag;
} rpc_client;

typedef struct rpc_generate_params {
    const char *model;
    const int32_t *prompt;
    int n_prompt;
    int max_tokens;           /* 0: the router's default */
    float temperature;        /* 0: greedy */
    float top_p;              /* 0 or 1: off */
    int top_k;                /* <= 0: off */
    int has_seed;
    uint64_t seed;
    const int32_t *stop_ids;
    int n_stop_ids;
    int ignore_eos;
    int stream;               /* 0: one chunk at the end */
} rpc_generate_params;

/* Called for every chunk of the request (tokens and, last, the finish).
 * Return non-zero to cancel the request; chunks keep coming until its end. */
typedef int (*rpc_chunk_fn)(void *user, const Tandem__V1__TokenChunk *chunk);

int rpc_client_open(rpc_client *c, const char *endpoint, char *err, size_t errlen);
/* The same through an authenticated, encrypted connection when auth is not
 * NULL and enabled (keys from the router's --api-key-file, label "rpc"). */
int rpc_client_open_auth(rpc_client *c, const char *endpoint, const sock_auth *auth, char *err,
                         size_t errlen);
void rpc_client_close(rpc_client *c);

/* Sends one ClientMessage; receives one within timeout_ms (1: got one,
 * 0: timeout, -1: error). Free what rpc_client_recv returns with
 * tandem__v1__client_message__free_unpacked. */
int rpc_client_send(rpc_client *c, const Tandem__V1__ClientMessage *m);
int rpc_client_recv(rpc_client *c, int timeout_ms, Tandem__V1__ClientMessage **out);

/* Runs one request to its end, calling fn for each chunk. request_id (at
 * least 24 bytes) receives the router's id. idle_timeout_ms bounds the wait
 * for each reply. Returns the finish reason (TANDEM__V1__FINISH_REASON__*)
 * or -1 with a reason in err (refused, timeout, socket error). */
int rpc_generate(rpc_client *c, const rpc_generate_params *p, rpc_chunk_fn fn, void *user,
                 char *request_id, int idle_timeout_ms, char *err, size_t errlen);

/* Asks the router to cancel one of this client's requests. */
int rpc_cancel(rpc_client *c, const char *request_id);

/* Fetches the cluster status (free with tandem__v1__cluster_status__free_unpacked). */
int rpc_status(rpc_client *c, int timeout_ms, Tandem__V1__ClusterStatus **out, char *err,
               size_t errlen);

#endif
