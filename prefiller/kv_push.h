/* The prefiller's side of the KV handoff: its TransferEngine, its KV pools
 * registered for one-sided puts, the decoders it has connected to, and the
 * pushes of finished prefills into a decoder's reserved pages
 * (transfer/transfer_kv.h does the resharding between the two caches'
 * layouts). The endpoint it publishes travels in Register.transfer_endpoint. */
#ifndef TANDEM_PREFILLER_KV_PUSH_H
#define TANDEM_PREFILLER_KV_PUSH_H
#include <stddef.h>
#include <stdint.h>
#include "engine/kv_cache.h"
#include "engine/kv_staging.h"
#include "proto/tandem.pb-c.h"
#include "transfer/transfer.h"

typedef struct kv_pusher kv_pusher;
typedef struct kv_push kv_push;

/* Creates the engine (UCX_TLS from tls when non-empty; same_host_shm:
 * worker/worker_transfer.h) and registers the
 * KV pools of rank `rank` of a TP group of `tp` whose caches hold its share
 * of the model's n_kv_heads (engine/parallel.h; tp 1, rank 0 for one
 * process); its pushes send that share, and the decoder assembles the
 * request from every rank's push. path says how device pools are handed to
 * UCX (engine/kv_staging.h). Returns 0 or -1 with a reason. */
int kv_pusher_open_rank(tm_kv_cache *kv, int n_kv_heads, int tp, int rank, const char *name,
                        const char *tls, int same_host_shm, tm_kv_path path,
                        kv_pusher **out, char *err, size_t errlen);
/* One line saying which KV path the pusher uses and why (for the log). */
const char *kv_pusher_path(const kv_pusher *p);
void kv_pusher_close(kv_pusher *p);
/* The packed hello decoders connect to. */
void kv_pusher_endpoint(const kv_pusher *p, const uint8_t **buf, size_t *len);

/* Runs the engine's progress (connection set-ups, acks) and looks after the
 * decoder connections: finishes their set-up in the background, retries a
 * failed set-up flush, reopens failed connections (bounded, with back-off),
 * closes those of decoders that left, and logs each set-up that finishes or
 * is slow. Call it often, also while idle. Returns the number of UCX events
 * handled (0: nothing moved). */
int kv_pusher_progress(kv_pusher *p);
/* The engine under the pusher (te_engine_arm before an idle sleep). */
te_engine *kv_pusher_engine(kv_pusher *p);

/* The router introduced decoder decoder_id (TransferPeer): connects to its
 * endpoint (a packed ControlMessage{hello}) now, unless already connected to
 * that engine, so the UCX connection set-up finishes before any push needs
 * it. removed: the decoder left; its connection is closed once no push uses
 * it and its set-up is over (kv_pusher_progress; never blocking on a
 * frozen decoder). Returns 0 or -1 with a reason. */
int kv_pusher_introduce(kv_pusher *p, const char *decoder_id, const uint8_t *endpoint,
                        size_t len, int removed, char *err, size_t errlen);

/* Starts moving the first n_tokens tokens (held in src_pages) into the
 * destination's pages, tagging the transfer with request_id. Connects to
 * the destination decoder if it was not introduced. On the staged path the
 * pages are copied to the host mirror first (the KV must be complete: call
 * after the prefill's forward passes). The transfer is submitted only once
 * the connection's set-up finished; until then the push waits
 * (kv_push_poll), and fails without sending anything if the set-up fails or
 * does not finish within timeout_ms. Returns 0 or -1 with a reason. */
int kv_push_start(kv_pusher *p, const Tandem__V1__KvDestination *dst, uint64_t request_id,
                  const int32_t *src_pages, int n_tokens, int timeout_ms, kv_push **out,
                  char *err, size_t errlen);
/* Advances every push; returns 1 when t finished (*ok: all bytes landed and
 * the decoder acknowledged; otherwise a reason in err), 0 while in flight.
 * *events: the UCX events this round handled (0: the caller may back off). */
int kv_push_poll(kv_pusher *p, kv_push *t, int *ok, int *events, char *err, size_t errlen);
/* Stops posting puts; the decoder is told no more writes follow. The push
 * then finishes (not ok) through kv_push_poll. */
void kv_push_cancel(kv_pusher *p, kv_push *t);
void kv_push_release(kv_pusher *p, kv_push *t);
/* Bytes the push moves (all its puts), for tandem_kv_transfer_bytes_total. */
uint64_t kv_push_bytes(const kv_push *t);

#endif
