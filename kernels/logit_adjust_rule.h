/* The one adjustment rule of kernels/logit_adjust.h, compiled into both
 * backends (host and device) so they cannot drift apart. Internal to
 * kernels/. */
#ifndef TANDEM_KERNELS_LOGIT_ADJUST_RULE_H
#define TANDEM_KERNELS_LOGIT_ADJUST_RULE_H
#include <math.h>
#include "kernels/logit_adjust.h"

#ifdef __CUDACC__
#define KN_HOST_DEVICE __host__ __device__
#else
#define KN_HOST_DEVICE
#endif

static inline KN_HOST_DEVICE float kn_logit_adjust_rule(float l, float presence, float frequency,
                                                        float repetition,
                                                        const kn_logit_entry *e)
{
    if (l == -INFINITY)
        return l;
    if ((e->out_count > 0 || e->in_prompt) && repetition != 1.0f)
        l = l > 0.0f ? l / repetition : l * repetition;
    l -= frequency * (float)e->out_count + (e->out_count > 0 ? presence : 0.0f);
    return l + e->bias;
}
#endif
