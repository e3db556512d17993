/* How a KV cache's pools are handed to the TransferEngine, and the host
 * staging copy when they cannot be handed over as they are.
 *
 * The TransferEngine writes a prompt's KV pages from the prefiller's pools
 * straight into the decoder's (one-sided puts into registered memory). Host
 * pools (the CPU backend) are registered as they are. Device pools (CUDA)
 * can be registered only when the transport reads and writes GPU memory
 * (UCX built with its CUDA transports, GPUDirect RDMA); otherwise each side
 * keeps a host mirror of its pools in pinned memory, registers the mirror,
 * and copies the pages of a request across: device -> host on the
 * prefiller before the push, host -> device on the decoder once the
 * transfer's notice says every byte landed. The mirror has the pools'
 * layout and page ids, so the transfer plan does not change.
 *
 * No UCX here: the caller says whether its transport takes device memory. */
#ifndef TANDEM_ENGINE_KV_STAGING_H
#define TANDEM_ENGINE_KV_STAGING_H
#include <stddef.h>
#include <stdint.h>
#include "engine/kv_cache.h"

typedef enum {
    TM_KV_PATH_AUTO = 0,  /* direct when the transport can, else staged */
    TM_KV_PATH_DIRECT,    /* register the pools as they are (device pools need
                             a transport with GPU memory support) */
    TM_KV_PATH_STAGED,    /* always through a host mirror (on the CPU backend a
                             plain copy: tests use it to exercise the path) */
} tm_kv_path;

/* "auto", "direct" or "staged". Returns 0, or -1 for anything else. */
int tm_kv_path_parse(const char *arg, tm_kv_path *out);

typedef struct tm_kv_staging {
    const tm_kv_cache *kv;
    int staged;           /* pages go through the mirror */
    int device_memory;    /* the pools to register are device memory */
    void **k, **v;        /* [n_layers] the pools to register: the cache's own,
                             or the mirror's (the cache's dtype, its bytes) */
    void **mirror_k, **mirror_v; /* the host mirror (staged only) */
    char how[160];        /* one line for the log: which path and why */
} tm_kv_staging;

/* Chooses the path for kv's pools. transport_device: the transport can
 * register device memory. DIRECT with device pools and a transport without
 * GPU memory support is refused (TN_ERR_UNSUPPORTED, reason in err); a
 * mirror that cannot be allocated is TN_ERR_NOMEM. On failure *s is left
 * safe to tm_kv_staging_free. */
int tm_kv_staging_init(tm_kv_staging *s, const tm_kv_cache *kv, tm_kv_path path,
                       int transport_device, char *err, size_t errlen);
void tm_kv_staging_free(tm_kv_staging *s);

/* Staged only (no-ops otherwise): copies the given pages of every layer's
 * K and V pools from the device to the mirror (before a send), or from the
 * mirror to the device (after a receive). Runs of consecutive page ids go
 * as one copy. Page ids outside the cache are TN_ERR_ARG. */
int tm_kv_staging_to_host(tm_kv_staging *s, const int32_t *pages, int n_pages);
int tm_kv_staging_to_device(tm_kv_staging *s, const int32_t *pages, int n_pages);

#endif
