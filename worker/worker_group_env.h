/* A decoder group's layout from its pod's environment, as the decoder
 * StatefulSet sets it (deploy/base/decoder-statefulset.yaml,
 * docs/AUTOSCALING.md "Decoder groups on Kubernetes"):
 *
 *   POD_NAME                          NAME-K (K: the pod's ordinal)
 *   TANDEM_DECODER_PODS_PER_GROUP     G, pods per group
 *   TANDEM_DECODER_GPUS_PER_POD       L, ranks (GPUs) per pod
 *   TANDEM_DECODER_HEADLESS_SERVICE   the headless service's name
 *   POD_NAMESPACE                     optional: the leader's DNS name
 *                                     gets ".NS.svc"
 *
 * The group has G x L ranks (DP; EP too unless --ep says otherwise). With
 * G = 1 the pod forks its L ranks (--dp L). With G > 1 the pod runs ranks
 * (K mod G) x L .. + L - 1 (--rank, --local-ranks L, --world G x L) and
 * meets the others at rank 0's pod, NAME-(K - K mod G).SERVICE[.NS.svc],
 * port 8092 (--group-leader). */
#ifndef TANDEM_WORKER_WORKER_GROUP_ENV_H
#define TANDEM_WORKER_WORKER_GROUP_ENV_H
#include <stddef.h>
#include "worker/worker_process.h"

/* Reads the variables through env (getenv in the decoder; a table in the
 * tests) into o's --dp, --ep, --rank, --world, --local-ranks and
 * --group-leader. A flag given explicitly that contradicts the environment
 * is refused. 0, or -1 with the reason in err. */
int worker_group_from_env(worker_options *o, const char *(*env)(const char *name),
                          char *err, size_t errlen);

#endif
