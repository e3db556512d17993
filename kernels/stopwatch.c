/* kn_stopwatch (kernels/stopwatch.h): laps as host clock readings on the
 * CPU backend, as CUDA events (kernels/cuda/stopwatch.cu) on the GPU. */
#include "kernels/stopwatch.h"
#include <stdlib.h>
#include <time.h>
#include "kernels/kn_check.h"
#include "common/status.h"
#ifdef TANDEM_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

struct kn_stopwatch {
    const kn_backend *be;
    int n_groups, max_laps;
    int n_marks;        /* marks taken: the start, then one per lap */
    int *group;         /* [max_laps + 1]: group of the stretch ending at mark i */
    double *host_ms;    /* CPU: clock reading at mark i */
    void **events;      /* CUDA: event recorded at mark i */
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

void kn_stopwatch_free(kn_stopwatch *sw)
{
    if (!sw)
        return;
#ifdef TANDEM_CUDA
    for (int i = 0; sw->events && i <= sw->max_laps; i++)
        kn_cuda_event_destroy(sw->be, sw->events[i]);
#endif
    free(sw->events);
    free(sw->host_ms);
    free(sw->group);
    free(sw);
}

int kn_stopwatch_create(const kn_backend *be, int n_groups, int max_laps, kn_stopwatch **out)
{
    static const char op[] = "kn_stopwatch_create";
    if (!out)
        return kn_arg_error(op, "out is NULL");
    *out = NULL;
    if (!be || n_groups <= 0 || max_laps <= 0)
        return kn_arg_error(op, "need a backend, n_groups > 0 and max_laps > 0");
    if (be->kind != KN_BACKEND_CPU && be->kind != KN_BACKEND_CUDA)
        return kn_arg_error(op, "unknown backend kind %d", (int)be->kind);
#ifndef TANDEM_CUDA
    if (be->kind == KN_BACKEND_CUDA)
        return kn_no_cuda(op);
#endif
    kn_stopwatch *sw = calloc(1, sizeof *sw);
    if (!sw)
        return TN_ERR_NOMEM;
    sw->be = be;
    sw->n_groups = n_groups;
    sw->max_laps = max_laps;
    sw->group = calloc((size_t)max_laps + 1, sizeof *sw->group);
    if (be->kind == KN_BACKEND_CPU)
        sw->host_ms = calloc((size_t)max_laps + 1, sizeof *sw->host_ms);
    else
        sw->events = calloc((size_t)max_laps + 1, sizeof *sw->events);
    if (!sw->group || (!sw->host_ms && !sw->events)) {
        kn_stopwatch_free(sw);
        return TN_ERR_NOMEM;
    }
#ifdef TANDEM_CUDA
    for (int i = 0; sw->events && i <= max_laps; i++) {
        int rc = kn_cuda_event_create(be, &sw->events[i]);
        if (rc != TN_OK) {
            kn_stopwatch_free(sw);
            return rc;
        }
    }
#endif
    *out = sw;
    return TN_OK;
}

static int mark(kn_stopwatch *sw)
{
    if (sw->host_ms) {
        sw->host_ms[sw->n_marks++] = now_ms();
        return TN_OK;
    }
#ifdef TANDEM_CUDA
    int rc = kn_cuda_event_record(sw->be, sw->events[sw->n_marks]);
    if (rc == TN_OK)
        sw->n_marks++;
    return rc;
#else
    return kn_no_cuda("kn_stopwatch");
#endif
}

int kn_stopwatch_start(kn_stopwatch *sw)
{
    if (!sw)
        return kn_arg_error("kn_stopwatch_start", "stopwatch is NULL");
    sw->n_marks = 0;
    return mark(sw);
}

int kn_stopwatch_lap(kn_stopwatch *sw, int group)
{
    static const char op[] = "kn_stopwatch_lap";
    if (!sw)
        return kn_arg_error(op, "stopwatch is NULL");
    if (sw->n_marks == 0)
        return kn_arg_error(op, "lap before kn_stopwatch_start");
    if (group < 0 || group >= sw->n_groups)
        return kn_arg_error(op, "group %d outside [0, %d)", group, sw->n_groups);
    if (sw->n_marks > sw->max_laps)
        return kn_arg_error(op, "more than %d laps before a collect", sw->max_laps);
    sw->group[sw->n_marks] = group;
    return mark(sw);
}

int kn_stopwatch_collect(kn_stopwatch *sw, double *ms)
{
    static const char op[] = "kn_stopwatch_collect";
    if (!sw || !ms)
        return kn_arg_error(op, "NULL %s", !sw ? "stopwatch" : "ms");
    for (int i = 1; i < sw->n_marks; i++) {
        double d;
        if (sw->host_ms) {
            d = sw->host_ms[i] - sw->host_ms[i - 1];
        } else {
#ifdef TANDEM_CUDA
            float f = 0;
            int rc = kn_cuda_event_elapsed_ms(sw->be, sw->events[i - 1], sw->events[i], &f);
            if (rc != TN_OK)
                return rc;
            d = f;
#else
            return kn_no_cuda(op);
#endif
        }
        ms[sw->group[i]] += d;
    }
    sw->n_marks = 0;
    return TN_OK;
}
