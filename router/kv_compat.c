#include "router/kv_compat.h"

#include <stdio.h>

kv_signature kv_signature_of(const Tandem__V1__Register *reg)
{
    kv_signature s = {(int)reg->kv_dtype, reg->kv_layers, reg->kv_heads, reg->kv_head_dim};
    return s;
}

int kv_signature_equal(const kv_signature *a, const kv_signature *b)
{
    return a->dtype == b->dtype && a->layers == b->layers && a->heads == b->heads &&
           a->head_dim == b->head_dim;
}

static const char *dtype_name(int d)
{
    switch (d) {
    case TANDEM__V1__KV_DTYPE__KV_DTYPE_F32: return "f32";
    case TANDEM__V1__KV_DTYPE__KV_DTYPE_BF16: return "bf16";
    case TANDEM__V1__KV_DTYPE__KV_DTYPE_FP8_E4M3: return "fp8";
    }
    return "unknown dtype";
}

void kv_signature_describe(const kv_signature *s, char *buf, size_t len)
{
    if (s->dtype == TANDEM__V1__KV_DTYPE__KV_DTYPE_UNSPECIFIED && !s->layers && !s->heads &&
        !s->head_dim)
        snprintf(buf, len, "not announced");
    else
        snprintf(buf, len, "%s (%d), %d layers x %d KV heads x %d", dtype_name(s->dtype),
                 s->dtype, s->layers, s->heads, s->head_dim);
}
