#include "engine/kv_staging.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/file.h"
#include "common/status.h"

int tm_kv_path_parse(const char *arg, tm_kv_path *out)
{
    if (!arg)
        return -1;
    if (strcmp(arg, "auto") == 0)
        *out = TM_KV_PATH_AUTO;
    else if (strcmp(arg, "direct") == 0)
        *out = TM_KV_PATH_DIRECT;
    else if (strcmp(arg, "staged") == 0)
        *out = TM_KV_PATH_STAGED;
    else
        return -1;
    return 0;
}

void tm_kv_staging_free(tm_kv_staging *s)
{
    if (!s)
        return;
    for (int l = 0; s->kv && l < s->kv->n_layers; l++) {
        if (s->mirror_k)
            kn_host_free(s->kv->be, s->mirror_k[l]);
        if (s->mirror_v)
            kn_host_free(s->kv->be, s->mirror_v[l]);
    }
    free(s->mirror_k);
    free(s->mirror_v);
    memset(s, 0, sizeof *s);
}

int tm_kv_staging_init(tm_kv_staging *s, const tm_kv_cache *kv, tm_kv_path path,
                       int transport_device, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    if (!kv || !kv->be || !kv->k || !kv->v) {
        tn_errf(err, errlen, "KV staging: no KV cache");
        return TN_ERR_ARG;
    }
    s->kv = kv;
    const int on_device = kv->be->kind != KN_BACKEND_CPU;
    if (path == TM_KV_PATH_DIRECT && on_device && !transport_device) {
        tn_errf(err, errlen, "the KV cache is in GPU memory but UCX here has no CUDA memory "
                "support (no cuda_copy/cuda_ipc/GPUDirect transports): use the staged path");
        return TN_ERR_UNSUPPORTED;
    }
    s->staged = path == TM_KV_PATH_STAGED || (on_device && !transport_device);
    if (!s->staged) {
        s->device_memory = on_device;
        s->k = kv->k;
        s->v = kv->v;
        snprintf(s->how, sizeof s->how, "%s",
                 on_device ? "direct from GPU memory (UCX reports CUDA memory support)"
                           : "direct from host memory (CPU backend)");
        return TN_OK;
    }
    size_t pool = tm_kv_page_bytes(kv) * (size_t)kv->n_pages;
    s->mirror_k = calloc((size_t)kv->n_layers, sizeof *s->mirror_k);
    s->mirror_v = calloc((size_t)kv->n_layers, sizeof *s->mirror_v);
    for (int l = 0; s->mirror_k && s->mirror_v && l < kv->n_layers; l++) {
        s->mirror_k[l] = kn_host_alloc(kv->be, pool);
        s->mirror_v[l] = kn_host_alloc(kv->be, pool);
        if (!s->mirror_k[l] || !s->mirror_v[l])
            break;
        /* never-pushed slots are never read; zeroed for memory checkers */
        memset(s->mirror_k[l], 0, pool);
        memset(s->mirror_v[l], 0, pool);
    }
    if (!s->mirror_k || !s->mirror_v || !s->mirror_k[kv->n_layers - 1] ||
        !s->mirror_v[kv->n_layers - 1]) {
        tn_errf(err, errlen, "KV staging: cannot allocate a host mirror of %d x 2 pools of "
                "%zu bytes", kv->n_layers, pool);
        tm_kv_staging_free(s);
        return TN_ERR_NOMEM;
    }
    s->k = s->mirror_k;
    s->v = s->mirror_v;
    snprintf(s->how, sizeof s->how, "staged through %s host buffers (%s)",
             on_device ? "pinned" : "plain",
             !on_device ? "--kv-path staged on the CPU backend"
             : path == TM_KV_PATH_STAGED ? "--kv-path staged"
                                         : "UCX here has no CUDA memory support");
    return TN_OK;
}

/* Copies the pages' runs of every layer's pools in one direction. */
static int copy_pages(tm_kv_staging *s, const int32_t *pages, int n_pages, int to_host)
{
    if (!s->staged || n_pages <= 0)
        return TN_OK;
    const tm_kv_cache *kv = s->kv;
    if (!pages)
        return TN_ERR_ARG;
    for (int i = 0; i < n_pages; i++)
        if (pages[i] < 0 || pages[i] >= kv->n_pages)
            return TN_ERR_ARG;
    const size_t page = tm_kv_page_bytes(kv);
    for (int i = 0; i < n_pages;) {
        int run = 1;
        while (i + run < n_pages && pages[i + run] == pages[i] + run)
            run++;
        size_t off = (size_t)pages[i] * page, bytes = (size_t)run * page;
        for (int l = 0; l < kv->n_layers; l++)
            for (int which = 0; which < 2; which++) {
                char *dev = (char *)(which ? kv->v[l] : kv->k[l]) + off;
                char *host = (char *)(which ? s->mirror_v[l] : s->mirror_k[l]) + off;
                int rc = to_host ? kn_copy_to_host(kv->be, host, dev, bytes)
                                 : kn_copy_to_backend(kv->be, dev, host, bytes);
                if (rc != TN_OK)
                    return rc;
            }
        i += run;
    }
    return TN_OK;
}

int tm_kv_staging_to_host(tm_kv_staging *s, const int32_t *pages, int n_pages)
{
    return copy_pages(s, pages, n_pages, 1);
}

int tm_kv_staging_to_device(tm_kv_staging *s, const int32_t *pages, int n_pages)
{
    return copy_pages(s, pages, n_pages, 0);
}
