#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "testutil.h"

void tu_rng_init(tu_rng *r, uint64_t seed)
{
    /* xorshift must not start at 0; the odd constant keeps seed 0 usable. */
    r->state = seed * 0x2545F4914F6CDD1DULL + 0x9E3779B97F4A7C15ULL;
    if (r->state == 0)
        r->state = 1;
}

uint64_t tu_rand_u64(tu_rng *r)
{
    uint64_t x = r->state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

double tu_rand_uniform(tu_rng *r)
{
    return (double)(tu_rand_u64(r) >> 11) * 0x1.0p-53;
}

int tu_rand_int(tu_rng *r, int n)
{
    return (int)(tu_rand_uniform(r) * n);
}

void tu_rand_fill(tu_rng *r, float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(lo + (hi - lo) * tu_rand_uniform(r));
}

void tu_rand_shuffle_i32(tu_rng *r, int32_t *a, int n)
{
    for (int i = n - 1; i > 0; i--) {
        int j = tu_rand_int(r, i + 1);
        int32_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

double tu_max_rel_err(const float *got, const double *ref, size_t n)
{
    double max_err = 0.0, max_ref = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]);
        if (!(e <= max_err)) /* also catches NaN */
            max_err = isnan(e) ? INFINITY : e;
        if (fabs(ref[i]) > max_ref)
            max_ref = fabs(ref[i]);
    }
    return max_ref > 0.0 ? max_err / max_ref : max_err;
}

double tu_max_rel_err_f32(const float *got, const float *ref, size_t n)
{
    double *r = tu_xcalloc(n ? n : 1, sizeof *r);
    for (size_t i = 0; i < n; i++)
        r[i] = ref[i];
    double e = tu_max_rel_err(got, r, n);
    free(r);
    return e;
}

void *tu_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "test: out of memory allocating %zu x %zu bytes\n", n, size);
        abort();
    }
    return p;
}

void tu_tap_line(tu_tap *t, int ok, const char *fmt, ...)
{
    va_list ap;
    t->n_checks++;
    t->n_failed += !ok;
    printf("%s %d - ", ok ? "ok" : "not ok", t->n_checks);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

int tu_tap_finish(const tu_tap *t)
{
    printf("1..%d\n", t->n_checks);
    printf("# %d checks, %d failed\n", t->n_checks, t->n_failed);
    return t->n_failed ? 1 : 0;
}
