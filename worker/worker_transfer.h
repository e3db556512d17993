/* The TransferEngine set-up the prefiller and the decoder share: the engine
 * (UCX_TLS from tls when non-empty), the KV pools registered for one-sided
 * puts (or their host mirror: engine/kv_staging.h) and the packed hello the
 * other side connects to, which travels in Register.transfer_endpoint.
 * prefiller/kv_push.c pushes through it, decoder/kv_receive.c receives. */
#ifndef TANDEM_WORKER_WORKER_TRANSFER_H
#define TANDEM_WORKER_WORKER_TRANSFER_H
#include <stddef.h>
#include <stdint.h>
#include "engine/kv_cache.h"
#include "engine/kv_staging.h"
#include "transfer/transfer.h"
#include "transfer/transfer_kv.h"

typedef struct worker_transfer {
    te_engine *e;
    tm_kv_staging staging;    /* the pools registered, or their host mirror */
    te_kv_local local;
    uint8_t *hello;           /* packed ControlMessage{hello} */
    size_t hello_len;
} worker_transfer;

/* Creates the engine named name and registers kv's pools as rank `rank` of
 * a TP group of `tp` whose caches hold its share of n_kv_heads (tp 1, rank
 * 0 for one process); same_host_shm: te_engine_config.same_host_shm
 * (--kv-same-host shm). Returns 0, or -1 with a reason and *t left closed. */
int worker_transfer_open(worker_transfer *t, tm_kv_cache *kv, int n_kv_heads, int tp,
                         int rank, const char *name, const char *tls, int same_host_shm,
                         tm_kv_path path, char *err, size_t errlen);
/* Deregisters the pools and destroys the engine (the caller closed its
 * connections first). A zeroed t is fine. */
void worker_transfer_close(worker_transfer *t);

#endif
