#include "worker/worker_transfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/status.h"

int worker_transfer_open(worker_transfer *t, tm_kv_cache *kv, int n_kv_heads, int tp,
                         int rank, const char *name, const char *tls, int same_host_shm,
                         tm_kv_path path, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    te_engine_config cfg;
    te_engine_config_default(&cfg);
    cfg.name = name;
    cfg.tls = tls && tls[0] ? tls : NULL;
    cfg.same_host_shm = same_host_shm;
    if (te_engine_create(&cfg, &t->e, err, errlen) != TN_OK) {
        t->e = NULL;
        return TN_ERR_ARG;
    }
    if (tm_kv_staging_init(&t->staging, kv, path, te_engine_cuda_memory(t->e), err,
                           errlen) != TN_OK) {
        worker_transfer_close(t);
        return TN_ERR_ARG;
    }
    /* the TransferEngine moves rows of bytes: an FP8 row (codes and its
     * scale) goes as head_dim + 4 one-byte elements, so scales travel with
     * their rows whatever the two sides' page sizes */
    const int fp8 = kv->dtype == KN_FP8_E4M3;
    te_kv_layout l = {.tp = tp, .rank = rank, .n_layers = kv->n_layers, .n_kv_heads = n_kv_heads,
                      .head_dim = fp8 ? (int)kn_kv_row_bytes(kv->dtype, kv->head_dim) : kv->head_dim,
                      .elem_bytes = fp8 ? 1 : (int)kn_dtype_size(kv->dtype),
                      .page_size = kv->page_size, .n_pages = kv->n_pages};
    if (te_kv_register(t->e, &l, (void *const *)t->staging.k, (void *const *)t->staging.v,
                       t->staging.device_memory ? TE_MEM_CUDA : TE_MEM_HOST,
                       &t->local) != TN_OK ||
        te_kv_hello_pack(t->e, &t->local, &t->hello, &t->hello_len) != TN_OK) {
        snprintf(err, errlen, "%s", te_engine_error(t->e));
        worker_transfer_close(t);
        return TN_ERR_ARG;
    }
    return 0;
}

void worker_transfer_close(worker_transfer *t)
{
    if (!t->e)
        return;
    te_kv_deregister(t->e, &t->local);
    free(t->hello);
    te_engine_destroy(t->e);
    tm_kv_staging_free(&t->staging);
    memset(t, 0, sizeof *t);
}
