/* The op table's runner and the helpers its cases share (op_harness.h). */
#include "tests/ops/op_harness.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/status.h"

typedef struct op_case {
    const char *op;
    unsigned backends, groups;
    op_fn fn;
    void *param;
    char name[200];
} op_case;

struct op_mem {
    void *p;
    int dev;
};

static op_case *g_cases;
static size_t g_n_cases, g_cap_cases;
static op_run *g_runs;
static size_t g_n_runs;
static kn_backend g_cpu, g_cuda;
static int g_have_cuda, g_tf32;
static uint64_t g_seed;

void op_case_add(const char *op, unsigned backends, unsigned groups, op_fn fn,
                 const void *param, size_t param_bytes, const char *fmt, ...)
{
    if (g_n_cases == g_cap_cases) {
        g_cap_cases = g_cap_cases ? 2 * g_cap_cases : 256;
        g_cases = realloc(g_cases, g_cap_cases * sizeof *g_cases);
        if (!g_cases)
            abort();
    }
    op_case *c = &g_cases[g_n_cases++];
    memset(c, 0, sizeof *c);
    c->op = op;
    c->backends = backends;
    c->groups = groups;
    c->fn = fn;
    c->param = tu_xcalloc(1, param_bytes);
    memcpy(c->param, param, param_bytes);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->name, sizeof c->name, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------ */

static void mem_track(op_env *e, void *p, int dev)
{
    if (e->n_mem == e->cap_mem) {
        e->cap_mem = e->cap_mem ? 2 * e->cap_mem : 32;
        e->mem = realloc(e->mem, e->cap_mem * sizeof *e->mem);
        if (!e->mem)
            abort();
    }
    e->mem[e->n_mem++] = (struct op_mem){ p, dev };
}

static void die(const char *what, int rc)
{
    printf("Bail out! %s failed: %s\n", what, tn_status_str(rc));
    fflush(stdout);
    exit(1);
}

void *op_host(op_env *e, size_t bytes)
{
    void *p = tu_xcalloc(1, bytes ? bytes : 1);
    mem_track(e, p, 0);
    return p;
}

void *op_dev(op_env *e, size_t bytes)
{
    void *p = kn_malloc(e->be, bytes ? bytes : 1);
    if (!p)
        die("kn_malloc", TN_ERR_NOMEM);
    mem_track(e, p, 1);
    return p;
}

void op_put(op_env *e, void *dev, const void *host, size_t bytes)
{
    int rc = bytes ? kn_copy_to_backend(e->be, dev, host, bytes) : TN_OK;
    if (rc != TN_OK)
        die("kn_copy_to_backend", rc);
}

void *op_up(op_env *e, const void *host, size_t bytes)
{
    void *p = op_dev(e, bytes);
    op_put(e, p, host, bytes);
    return p;
}

void op_down(op_env *e, void *host, const void *dev, size_t bytes)
{
    int rc = bytes ? kn_copy_to_host(e->be, host, dev, bytes) : TN_OK;
    if (rc != TN_OK)
        die("kn_copy_to_host", rc);
}

float *op_get(op_env *e, const void *dev, size_t n)
{
    float *h = op_host(e, n * sizeof(float));
    op_down(e, h, dev, n * sizeof(float));
    return h;
}

void op_poison(op_env *e, void *dev, size_t n)
{
    float *nan_buf = tu_xcalloc(n ? n : 1, sizeof(float));
    for (size_t i = 0; i < n; i++)
        nan_buf[i] = NAN;
    op_put(e, dev, nan_buf, n * sizeof(float));
    free(nan_buf);
}

float *op_nan(op_env *e, size_t n)
{
    float *p = op_dev(e, n * sizeof(float));
    op_poison(e, p, n);
    return p;
}

float *op_rand(op_env *e, size_t n, float lo, float hi)
{
    float *x = op_host(e, n * sizeof(float));
    tu_rand_fill(&e->rng, x, n, lo, hi);
    return x;
}

double op_normal(op_env *e)
{
    double u1 = tu_rand_uniform(&e->rng), u2 = tu_rand_uniform(&e->rng);
    return sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
}

static void vfail(op_env *e, const char *fmt, va_list ap)
{
    char msg[sizeof e->first];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (!e->failed)
        memcpy(e->first, msg, sizeof msg);
    e->failed = 1;
    if (e->n_msgs++ < 8)
        printf("# %s\n", msg);
}

void op_fail(op_env *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(e, fmt, ap);
    va_end(ap);
}

int op_check(op_env *e, int ok, const char *fmt, ...)
{
    if (!ok) {
        va_list ap;
        va_start(ap, fmt);
        vfail(e, fmt, ap);
        va_end(ap);
    }
    return ok;
}

int op_check_err(op_env *e, double err, double tol, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (!(err <= tol)) {
        op_fail(e, "%s: rel err %.3g (bound %.2g)", what, err, tol);
        return 0;
    }
    return 1;
}

int op_ok(op_env *e, int rc, const char *what)
{
    return op_check(e, rc == TN_OK, "%s returned %s", what, tn_status_str(rc));
}

double op_tol_fp32(const op_env *e, int product)
{
    if (!e->cuda)
        return TU_FP32_REL_TOL;
    return product && e->tf32 ? OP_CUDA_TF32_TOL : OP_CUDA_FP32_TOL;
}

size_t op_count_unequal(const float *a, const float *b, size_t n)
{
    size_t diff = 0;
    for (size_t i = 0; i < n; i++)
        diff += !(a[i] == b[i]);
    return diff;
}

/* ------------------------------------------------------------------ */

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

int ops_init(int argc, char **argv, uint64_t default_seed)
{
    g_seed = argc > 1 ? strtoull(argv[1], NULL, 0) : default_seed ? default_seed : (uint64_t)time(NULL);
    unsigned groups = OP_G_DEFAULT;
    const char *filter = getenv("OPS_FILTER");
    if (argc > 2) {
        if (strcmp(argv[2], "moe") == 0)
            groups = OP_G_MOE;
        else if (strcmp(argv[2], "moe-fp8") == 0)
            groups = OP_G_MOE_FP8;
        else
            filter = argv[2];
    }
    const char *tf32 = getenv("TANDEM_CUDA_TF32");
    g_tf32 = tf32 && strcmp(tf32, "1") == 0;
    int rc = kn_backend_init_cpu(&g_cpu);
    if (rc != TN_OK)
        die("kn_backend_init_cpu", rc);
    rc = kn_backend_init_cuda(&g_cuda, 0);
    g_have_cuda = rc == TN_OK;
    if (g_have_cuda) {
        /* attention starts in fp32 whatever TANDEM_CUDA_ATTN_BF16 says: the
         * bf16 cases turn it on themselves */
        kn_backend_set_attn_bf16(&g_cuda, 0);
    } else {
        printf("# CUDA backend not available (%s): CUDA cases skipped\n", tn_status_str(rc));
    }
    printf("# ops seed=%llu tf32=%d backends=cpu%s groups=%u filter=%s\n", (unsigned long long)g_seed,
           g_tf32, g_have_cuda ? ",cuda" : "", groups, filter ? filter : "-");

    ops_register_add();
    ops_register_norm();
    ops_register_embedding();
    ops_register_ep_exchange();
    ops_register_fill();
    ops_register_matmul();
    ops_register_fp8();
    ops_register_gemv_fp8();
    ops_register_rope();
    ops_register_attention();
    ops_register_moe();
    ops_register_moe_paths();
    ops_register_sampling();
    ops_register_logprobs();
    ops_register_logit_mask();
    ops_register_fused_decode();

    g_runs = tu_xcalloc(2 * g_n_cases, sizeof *g_runs);
    for (size_t i = 0; i < g_n_cases; i++) {
        const op_case *c = &g_cases[i];
        if (!(c->groups & groups))
            continue;
        for (int b = OP_CPU; b <= OP_CUDA; b <<= 1) {
            if (!(c->backends & b) || (b == OP_CUDA && !g_have_cuda))
                continue;
            char name[300];
            snprintf(name, sizeof name, "%s/%s/%s", c->op, c->name, b == OP_CPU ? "cpu" : "cuda");
            if (filter && !strstr(name, filter))
                continue;
            g_runs[g_n_runs++] = (op_run){ strdup(name), (int)i, b };
        }
    }
    return 0;
}

size_t ops_runs(const op_run **runs)
{
    *runs = g_runs;
    return g_n_runs;
}

int ops_run_one(const op_run *r, const char **why)
{
    static op_env e;
    const op_case *c = &g_cases[r->case_idx];
    memset(&e, 0, sizeof e);
    e.cuda = r->backend == OP_CUDA;
    e.be = e.cuda ? &g_cuda : &g_cpu;
    e.cpu = &g_cpu;
    e.tf32 = g_tf32;
    tu_rng_init(&e.rng, mix64(g_seed ^ mix64((uint64_t)r->case_idx + 1)));
    c->fn(&e, c->param);
    for (size_t i = e.n_mem; i-- > 0;) {
        if (e.mem[i].dev)
            kn_free(e.be, e.mem[i].p);
        else
            free(e.mem[i].p);
    }
    free(e.mem);
    if (e.cuda && kn_backend_sync(e.be) != TN_OK && !e.failed)
        op_fail(&e, "the CUDA backend reports an error after the case");
    *why = e.first;
    return e.failed ? -1 : 0;
}

void ops_finish(void)
{
    if (g_have_cuda)
        kn_backend_free(&g_cuda);
    kn_backend_free(&g_cpu);
    for (size_t i = 0; i < g_n_runs; i++)
        free((char *)g_runs[i].name);
    free(g_runs);
    for (size_t i = 0; i < g_n_cases; i++)
        free(g_cases[i].param);
    free(g_cases);
    g_runs = NULL;
    g_cases = NULL;
    g_n_runs = g_n_cases = g_cap_cases = 0;
}

int ops_main_tap(int argc, char **argv)
{
    ops_init(argc, argv, 0);
    const op_run *runs;
    size_t n = ops_runs(&runs);
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        const char *why;
        int rc = ops_run_one(&runs[i], &why);
        failed += rc != 0;
        printf("%s %zu - %s\n", rc ? "not ok" : "ok", i + 1, runs[i].name);
        fflush(stdout);
    }
    printf("1..%zu\n# %zu cases, %d failed\n", n, n, failed);
    ops_finish();
    return failed ? 1 : 0;
}
