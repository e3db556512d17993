/* Which workers may exchange KV pages: the KV cache a worker announces at
 * registration (Register.kv_dtype, kv_layers, kv_heads, kv_head_dim). A
 * prefiller writes its pages' bytes straight into a decoder's pools, so
 * the two must hold the same element type and per-token geometry; page
 * sizes may differ (the TransferEngine re-pages). The router keeps one
 * signature per model: a worker whose signature differs from a registered
 * worker's of the same model is refused at registration with the reason. */
#ifndef TANDEM_ROUTER_KV_COMPAT_H
#define TANDEM_ROUTER_KV_COMPAT_H
#include <stddef.h>
#include "proto/tandem.pb-c.h"

typedef struct kv_signature {
    int dtype;   /* TANDEM__V1__KV_DTYPE__*; 0 = not announced */
    int layers, heads, head_dim;
} kv_signature;

/* The signature a Register announces (zeros when it announces none). */
kv_signature kv_signature_of(const Tandem__V1__Register *reg);
int kv_signature_equal(const kv_signature *a, const kv_signature *b);
/* "bf16, 24 layers x 8 KV heads x 64", or "not announced". */
void kv_signature_describe(const kv_signature *s, char *buf, size_t len);

#endif
