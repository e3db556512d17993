/* Dispatch for the scaler interface (autoscale/scaler.h). */
#include "autoscale/scaler.h"

#include <stdio.h>

int scaler_set_replicas(scaler *s, as_pool pool, int n, char *err, size_t errlen)
{
    if (!s || !s->ops) {
        if (err && errlen)
            snprintf(err, errlen, "scaler is not initialised");
        return -1;
    }
    if (!as_pool_name(pool) || n < 0) {
        if (err && errlen)
            snprintf(err, errlen, "%s scaler: bad pool %d or replica count %d", s->ops->kind, (int)pool, n);
        return -1;
    }
    return s->ops->set_replicas(s->impl, pool, n, err, errlen);
}

int scaler_get_replicas(scaler *s, as_pool pool, int *n, char *err, size_t errlen)
{
    if (!s || !s->ops || !n || !as_pool_name(pool)) {
        if (err && errlen)
            snprintf(err, errlen, "scaler_get_replicas: bad argument");
        return -1;
    }
    return s->ops->get_replicas(s->impl, pool, n, err, errlen);
}

int scaler_poll(scaler *s, char *err, size_t errlen)
{
    if (!s || !s->ops) {
        if (err && errlen)
            snprintf(err, errlen, "scaler is not initialised");
        return -1;
    }
    return s->ops->poll ? s->ops->poll(s->impl, err, errlen) : 0;
}

void scaler_destroy(scaler *s)
{
    if (!s || !s->ops)
        return;
    if (s->ops->destroy)
        s->ops->destroy(s->impl);
    s->ops = NULL;
    s->impl = NULL;
}

const char *scaler_kind(const scaler *s)
{
    return s && s->ops ? s->ops->kind : "none";
}
