/* metrics-only scaler: the router acts on nothing itself and publishes the
 * policy's desired replica counts, so a HorizontalPodAutoscaler (external
 * metric through prometheus-adapter) or a KEDA ScaledObject (prometheus
 * trigger) does the scaling. With target AverageValue 1 either of them sets
 * replicas = ceil(desired / 1) = desired (deploy/components/). */
#include "autoscale/scaler.h"

#include <stdio.h>
#include <string.h>

void scaler_metrics_init(scaler_metrics *m)
{
    memset(m, 0, sizeof(*m));
}

int scaler_metrics_set_replicas(scaler_metrics *m, as_pool pool, int n, char *err, size_t errlen)
{
    if (!m || !as_pool_name(pool) || n < 0) {
        if (err && errlen)
            snprintf(err, errlen, "metrics-only scaler: bad pool or replica count %d", n);
        return -1;
    }
    m->desired[pool] = n;
    m->published[pool] = 1;
    return 0;
}

int scaler_metrics_format(const scaler_metrics *m, char *buf, size_t len)
{
    if (!m || !buf)
        return -1;
    size_t used = 0;
    int w = snprintf(buf, len,
                     "# HELP tandem_pool_desired_replicas Replicas the autoscaler wants per pool.\n"
                     "# TYPE tandem_pool_desired_replicas gauge\n");
    if (w < 0 || (size_t)w >= len)
        return -1;
    used = (size_t)w;
    for (int p = 0; p < AS_POOL_COUNT; p++) {
        /* A pool the policy has not decided on yet is left out rather than
         * published as 0, which an HPA would act on. */
        if (!m->published[p])
            continue;
        w = snprintf(buf + used, len - used, "tandem_pool_desired_replicas{pool=\"%s\"} %d\n",
                     as_pool_name((as_pool)p), m->desired[p]);
        if (w < 0 || (size_t)w >= len - used)
            return -1;
        used += (size_t)w;
    }
    return (int)used;
}

static int metrics_set(void *impl, as_pool pool, int n, char *err, size_t errlen)
{
    return scaler_metrics_set_replicas(impl, pool, n, err, errlen);
}

static int metrics_get(void *impl, as_pool pool, int *n, char *err, size_t errlen)
{
    (void)impl;
    (void)n;
    if (err && errlen)
        snprintf(err, errlen,
                 "metrics-only scaler does not know the current %s replicas (count the registered workers)",
                 as_pool_name(pool));
    return -1;
}

SCALER_DEFINE_AS_SCALER(scaler_metrics_as_scaler, scaler_metrics, "metrics-only",
                        metrics_set, metrics_get, NULL, NULL)
