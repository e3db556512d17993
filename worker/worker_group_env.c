#include "worker/worker_group_env.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/comm.h"
#include "engine/rendezvous.h"

/* A positive integer variable; -1 (reason in err) when unset or bad. */
static long positive(const char *(*env)(const char *), const char *name, char *err,
                     size_t errlen)
{
    const char *v = env(name);
    char *end = NULL;
    errno = 0;
    long n = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || errno || *end || n < 1 || n > COMM_MAX_WORLD) {
        snprintf(err, errlen, "--group-from-env: %s must be 1..%d, got '%s'", name,
                 COMM_MAX_WORLD, v ? v : "(unset)");
        return -1;
    }
    return n;
}

int worker_group_from_env(worker_options *o, const char *(*env)(const char *name),
                          char *err, size_t errlen)
{
    const long G = positive(env, "TANDEM_DECODER_PODS_PER_GROUP", err, errlen);
    const long L = G > 0 ? positive(env, "TANDEM_DECODER_GPUS_PER_POD", err, errlen) : -1;
    if (G < 0 || L < 0)
        return -1;
    const long W = G * L;
    if (W > COMM_MAX_WORLD) {
        snprintf(err, errlen, "--group-from-env: %ld pods x %ld GPUs exceed %d ranks", G, L,
                 COMM_MAX_WORLD);
        return -1;
    }
    if ((o->ranks != 1 && o->ranks != W) || o->world || o->rank || o->group_leader[0] ||
        o->local_ranks != 1) {
        snprintf(err, errlen, "--group-from-env sets --dp %ld, --rank, --world, --local-ranks "
                 "and --group-leader itself: give none of them (or --dp %ld)", W, W);
        return -1;
    }
    o->ranks = (int)W;
    if (o->ep == 1)
        o->ep = (int)W;   /* a decoder group is DP = EP (docs/AUTOSCALING.md) */
    if (G == 1)
        return 0;         /* one pod: it forks the whole group */
    const char *pod = env("POD_NAME"), *svc = env("TANDEM_DECODER_HEADLESS_SERVICE");
    const char *ns = env("POD_NAMESPACE");
    const char *dash = pod ? strrchr(pod, '-') : NULL;
    char *end = NULL;
    long k = dash ? strtol(dash + 1, &end, 10) : -1;
    if (!dash || dash == pod || !end || end == dash + 1 || *end || k < 0) {
        snprintf(err, errlen, "--group-from-env: POD_NAME must end in -ORDINAL (a "
                 "StatefulSet pod), got '%s'", pod ? pod : "(unset)");
        return -1;
    }
    if (!svc || !*svc) {
        snprintf(err, errlen, "--group-from-env: TANDEM_DECODER_HEADLESS_SERVICE is unset");
        return -1;
    }
    o->world = (int)W;
    o->rank = (int)((k % G) * L);
    o->local_ranks = (int)L;
    int n = snprintf(o->group_leader, sizeof o->group_leader, "%.*s-%ld.%s%s%s%s:%d",
                     (int)(dash - pod), pod, k - k % G, svc, ns && *ns ? "." : "",
                     ns && *ns ? ns : "", ns && *ns ? ".svc" : "", RDV_DEFAULT_PORT);
    if (n < 0 || (size_t)n >= sizeof o->group_leader) {
        snprintf(err, errlen, "--group-from-env: the leader's name is too long");
        return -1;
    }
    return 0;
}
