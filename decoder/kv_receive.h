/* The decoder's side of the KV handoff: its TransferEngine with the KV pools
 * registered as write targets, the prefillers it is connected to (it must
 * be, to acknowledge their transfer notices), and the notices saying which
 * request's pages are complete. The endpoint it publishes travels in
 * Register.transfer_endpoint. */
#ifndef TANDEM_DECODER_KV_RECEIVE_H
#define TANDEM_DECODER_KV_RECEIVE_H
#include <stddef.h>
#include <stdint.h>
#include "engine/kv_cache.h"
#include "engine/kv_staging.h"
#include "transfer/transfer.h"

typedef struct kv_receiver kv_receiver;

/* Creates the engine (UCX_TLS from tls when non-empty; same_host_shm:
 * worker/worker_transfer.h) and registers kv's
 * pools as write targets, or their host mirror (path: engine/kv_staging.h).
 * Returns 0 or -1 with a reason. */
int kv_receiver_open(tm_kv_cache *kv, const char *name, const char *tls, int same_host_shm,
                     tm_kv_path path, kv_receiver **out, char *err, size_t errlen);
/* One line saying which KV path the receiver uses and why (for the log). */
const char *kv_receiver_path(const kv_receiver *r);
/* A request's pages whose transfer completed: on the staged path copies them
 * from the host mirror into the cache (a no-op on the direct path). Call
 * before the sequence reads them. Returns 0 or -1 with a reason. */
int kv_receiver_land(kv_receiver *r, const int32_t *pages, int n_pages, char *err,
                     size_t errlen);
void kv_receiver_close(kv_receiver *r);
void kv_receiver_endpoint(const kv_receiver *r, const uint8_t **buf, size_t *len);

/* Connects to a prefiller from its endpoint (TransferPeer): one engine, or
 * every rank's of a TP group (proto TransferGroupEndpoint); replaces an
 * earlier connection under the same worker id. Returns 0 or -1 with a
 * reason. */
int kv_receiver_add_peer(kv_receiver *r, const char *worker_id, const uint8_t *endpoint,
                         size_t len, char *err, size_t errlen);
void kv_receiver_remove_peer(kv_receiver *r, const char *worker_id);

/* Runs the engine's progress; returns 1 with a notice (which request,
 * whether all its bytes landed: complete = 0 means the sender stopped
 * early and writes no more, and how many bytes were written), 0 when none
 * is pending. A TP group's request gives one notice, once every rank's has
 * arrived (complete only if each rank's was; bytes summed over the ranks). */
int kv_receiver_next(kv_receiver *r, uint64_t *request_id, int *complete, uint64_t *bytes);
/* The engine under the receiver: te_engine_arm before an idle sleep, and
 * te_engine_progress while a decode step waits for the GPU. */
te_engine *kv_receiver_engine(kv_receiver *r);

#endif
