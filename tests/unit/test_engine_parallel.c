/* Parallel layouts of the engine between real processes (forked ranks on
 * the host communicator), for both fixture families:
 *   prefill TP=2/EP=1, TP=2/EP=2, TP=4/EP=2, TP=4/EP=4 (TP=4 > the 2 KV heads,
 *     so KV heads are replicated), then a few decode steps in the same layout;
 *   decode DP=2 x EP=2, DP=4 x EP=4, DP=4 x EP=2 with all-to-all dispatch:
 *     every rank has its own sequences (rank 0 two of them), ranks start at
 *     different steps and one stops early, so idle ranks join steps empty.
 * Every rank compares each step's logits with the single-rank model run on
 * the same inputs in the same process (relative error <= 1e-4), and the
 * prefill logits also with HF's float64 golden (1e-3). A rank killed in the
 * middle of a run makes the others' tm_forward fail with TN_ERR_PEER naming
 * the dead rank. Ranks report through their exit status.
 * Synthetic weights (tm_model_synthetic) follow the same layouts: a rank's
 * random shard is a slice of the single-rank synthetic model, so the TP and
 * DP+EP runs match it too. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include "engine/comm.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/parallel.h"
#include "kernels/backend.h"
#include "common/status.h"
#include "tests/unit/engine_testutil.h"
#include "tests/unit/rank_testutil.h"

#define PAR_TOL 1e-4     /* parallel vs single-rank, both fp32 */
#define HF_TOL 1e-3      /* vs HF float64 */
#define WAIT_MS 300000   /* bound on one case; reaching it is a failure */
#define MAX_SEQ 96
#define PAGE 4
#define DECODE_STEPS 4
#define TAG "ep"

enum { PASS = 0, E_SETUP = 10, E_FORWARD, E_TOL, E_DIVERGE, E_EXPECTED_FAIL, E_MESSAGE };

typedef struct layout {
    const char *dir;
    int tp, ep, dp;
    int synthetic;   /* random weights of dir's config (seed SYN_SEED) */
} layout;

#define SYN_SEED 77

/* Everything one rank holds. */
typedef struct rank_ctx {
    const rt_rank *r;
    kn_backend be;
    comm *world;
    tm_groups groups;
    tm_model *ref, *par;
    tm_kv_cache kv_ref, kv_par;
    et_golden g;
    int V;
    float *lp, *lr;          /* logits scratch [MAX_SEQ][V] */
    double worst;
} rank_ctx;

static void rank_close(rank_ctx *x)
{
    free(x->lp);
    free(x->lr);
    tm_kv_cache_free(&x->kv_par);
    tm_kv_cache_free(&x->kv_ref);
    tm_model_free(x->par);
    tm_model_free(x->ref);
    tm_groups_free(&x->groups);
    comm_free(x->world);
    et_golden_free(&x->g);
    kn_backend_free(&x->be);
}

static int rank_open(rank_ctx *x, const rt_rank *r, const layout *lo, int timeout_ms)
{
    memset(x, 0, sizeof(*x));
    x->r = r;
    char err[512] = "";
    comm_options o = {.timeout_ms = timeout_ms};
    int rc = kn_backend_init_cpu(&x->be);
    if (!rc)
        rc = comm_host_init(&x->world, r->name, r->rank, r->world, &o, err, sizeof(err));
    if (!rc)
        rc = tm_groups_init(&x->groups, x->world, lo->tp, lo->ep, lo->dp, err, sizeof(err));
    tm_load_opts one = {.seed = SYN_SEED}, par = {.seed = SYN_SEED, .par = &x->groups.par};
    if (!rc)
        rc = lo->synthetic ? tm_model_synthetic(lo->dir, &x->be, &one, &x->ref, err, sizeof(err))
                           : tm_model_load(lo->dir, &x->be, &x->ref, err, sizeof(err));
    if (!rc)
        rc = lo->synthetic
                 ? tm_model_synthetic(lo->dir, &x->be, &par, &x->par, err, sizeof(err))
                 : tm_model_load_parallel(lo->dir, &x->be, &x->groups.par, &x->par, err,
                                          sizeof(err));
    if (!rc)
        rc = et_golden_load(lo->dir, &x->g, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "rank %d: setup: %s\n", r->rank, err);
        return E_SETUP;
    }
    const tm_config *c = tm_model_config(x->ref);
    const int pages = 4 * ((MAX_SEQ + PAGE - 1) / PAGE);
    x->V = c->vocab_size;
    if (tm_kv_cache_init(&x->kv_ref, &x->be, KN_F32, c->n_layers, c->n_kv_heads, c->head_dim, PAGE,
                         pages) ||
        tm_kv_cache_init(&x->kv_par, &x->be, KN_F32, c->n_layers, tm_model_kv_heads(x->par),
                         c->head_dim, PAGE, pages))
        return E_SETUP;
    x->lp = calloc((size_t)MAX_SEQ * x->V, sizeof(float));
    x->lr = calloc((size_t)MAX_SEQ * x->V, sizeof(float));
    return x->lp && x->lr ? PASS : E_SETUP;
}

/* A sequence with the same page ids in both caches (they are built alike). */
typedef struct seq {
    int32_t tokens[MAX_SEQ];
    int len, n_cached;
    int32_t pages[MAX_SEQ];
    int n_pages;
} seq;

static int seq_open(rank_ctx *x, seq *s, const int32_t *tokens, int n)
{
    memset(s, 0, sizeof(*s));
    memcpy(s->tokens, tokens, sizeof(int32_t) * (size_t)n);
    s->len = n;
    s->n_pages = (MAX_SEQ + PAGE - 1) / PAGE;
    int32_t other[MAX_SEQ];
    if (tm_kv_alloc_pages(&x->kv_ref, s->n_pages, s->pages) ||
        tm_kv_alloc_pages(&x->kv_par, s->n_pages, other) ||
        memcmp(other, s->pages, sizeof(int32_t) * (size_t)s->n_pages) != 0)
        return E_SETUP;
    return PASS;
}

static tm_seq_step seq_step(const seq *s)
{
    return (tm_seq_step){.tokens = s->tokens + s->n_cached, .n_tokens = s->len - s->n_cached,
                         .n_cached = s->n_cached, .pages = s->pages, .n_pages = s->n_pages};
}

static int check_close(rank_ctx *x, const float *got, const float *ref, size_t n,
                       double tol, const char *what, int step)
{
    double e = et_rel_err(got, ref, n);
    if (e > x->worst && tol == PAR_TOL)
        x->worst = e;
    if (!(e <= tol)) {
        fprintf(stderr, "rank %d: %s (step %d): relative error %.3g above %.3g\n",
                x->r->rank, what, step, e, tol);
        return E_TOL;
    }
    return PASS;
}

/* Runs one step of the given sequences on both models (the reference one
 * sequence at a time, so batching is checked too) and compares. With
 * all_rows, every prompt row is compared. Appends the reference's greedy
 * token to each sequence. n == 0: an idle step of the parallel model. */
static int step_both(rank_ctx *x, seq *const *ss, int n, int all_rows, int step)
{
    tm_seq_step st[4];
    int rows = 0;
    for (int i = 0; i < n; i++) {
        st[i] = seq_step(ss[i]);
        rows += st[i].n_tokens;
    }
    const int V = x->V;
    int rc = n ? tm_forward(x->par, &x->kv_par, st, n, all_rows ? NULL : x->lp,
                            all_rows ? x->lp : NULL)
               : tm_forward(x->par, NULL, NULL, 0, NULL, NULL);
    if (rc) {
        fprintf(stderr, "rank %d: parallel tm_forward (step %d): %s: %s\n", x->r->rank, step,
                tn_status_str(rc), comm_error(x->world));
        return rc == TN_ERR_PEER ? -TN_ERR_PEER : E_FORWARD;
    }
    if (n == 0)
        return PASS;
    int off = 0;
    for (int i = 0; i < n; i++) {
        float *ref = x->lr + (size_t)off * V;
        if (tm_forward(x->ref, &x->kv_ref, &st[i], 1, all_rows ? NULL : ref,
                       all_rows ? ref : NULL))
            return E_FORWARD;
        off += all_rows ? st[i].n_tokens : 1;
    }
    rc = check_close(x, x->lp, x->lr, (size_t)(all_rows ? rows : n) * V, PAR_TOL, "logits",
                     step);
    off = 0;
    for (int i = 0; i < n; i++) {
        int last = all_rows ? off + st[i].n_tokens - 1 : i;
        off += all_rows ? st[i].n_tokens : 1;
        ss[i]->n_cached = ss[i]->len;
        if (ss[i]->len < MAX_SEQ)
            ss[i]->tokens[ss[i]->len++] = et_argmax(x->lr + (size_t)last * V, V);
    }
    return rc;
}

/* ---- prefill TP (+EP) ---------------------------------------------------- */

static int tp_prefill_rank(const rt_rank *r, void *arg)
{
    const layout *lo = arg;
    rank_ctx x;
    int rc = rank_open(&x, r, lo, 0);
    seq s, *ss[1] = {&s};
    if (!rc)
        rc = seq_open(&x, &s, x.g.prompt, x.g.T);
    if (!rc)
        rc = step_both(&x, ss, 1, 1, 0);
    /* the prompt logits against HF too (the checkpoint's model) */
    if (!rc && !lo->synthetic)
        rc = check_close(&x, x.lp, x.g.prompt_logits, (size_t)x.g.T * x.V, HF_TOL,
                         "prompt logits vs HF", 0);
    for (int i = 1; !rc && i <= DECODE_STEPS; i++)
        rc = step_both(&x, ss, 1, 0, i);
    /* TP ranks replicate the activations: their logits must be bitwise equal */
    uint64_t h = 1469598103934665603ull, all[RT_MAX_RANKS];
    const unsigned char *b = (const unsigned char *)x.lp;
    for (size_t i = 0; !rc && i < sizeof(float) * (size_t)x.V; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    if (!rc && comm_all_gather(x.world, &h, all, sizeof(h)))
        rc = E_FORWARD;
    for (int q = 0; !rc && q < r->world; q++)
        if (all[q] != h) {
            fprintf(stderr, "rank %d: logits differ from rank %d's\n", r->rank, q);
            rc = E_DIVERGE;
        }
    if (!rc)
        fprintf(stderr, "rank %d: %s TP=%d EP=%d: prefill + %d decode steps, worst relative "
                "error vs single rank %.3g\n", r->rank, lo->dir, lo->tp, lo->ep, DECODE_STEPS,
                x.worst);
    rank_close(&x);
    return rc;
}

static void run_layout(const layout *lo, rt_rank_fn fn)
{
    rt_group g;
    int status[RT_MAX_RANKS];
    int world = lo->tp * lo->dp;
    assert_int_equal(rt_start(&g, world, TAG, fn, (void *)lo), 0);
    rt_wait(&g, WAIT_MS, status);
    for (int r = 0; r < world; r++) {
        if (status[r] != PASS)
            print_error("%s tp %d ep %d dp %d: rank %d status %d\n", lo->dir, lo->tp, lo->ep,
                        lo->dp, r, status[r]);
        assert_int_equal(status[r], PASS);
    }
    assert_int_equal(rt_shm_count_ours(TAG), 0);
}

static void tp_prefill_matches_single_rank(void **state)
{
    (void)state;
    const char *dirs[] = {ET_GPT_OSS, ET_QWEN3};
    const int shapes[][2] = {{2, 1}, {2, 2}, {4, 2}, {4, 4}};
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < 4; i++) {
            layout lo = {dirs[d], shapes[i][0], shapes[i][1], 1, 0};
            run_layout(&lo, tp_prefill_rank);
        }
}

/* ---- decode DP + EP ------------------------------------------------------ */

/* Rank r's sequences: variations of the golden prompt, of different
 * lengths. Rank 0 runs two at once. Rank r starts at step r (idle before);
 * rank 1 stops one step early (idle at the end). */
#define DP_STEPS 6

static int dp_decode_rank(const rt_rank *r, void *arg)
{
    const layout *lo = arg;
    rank_ctx x;
    int rc = rank_open(&x, r, lo, 0);
    seq s[2];
    int n_seqs = r->rank == 0 ? 2 : 1;
    for (int i = 0; !rc && i < n_seqs; i++) {
        int32_t prompt[MAX_SEQ];
        int len = x.g.T - 3 * r->rank - 5 * i;
        if (len < 4)
            len = 4;
        for (int t = 0; t < len; t++)
            prompt[t] = (x.g.prompt[t] + 37 * r->rank + 101 * i) % x.V;
        rc = seq_open(&x, &s[i], prompt, len);
    }
    seq *ss[2] = {&s[0], &s[1]};
    int start = r->rank % DP_STEPS, stop = r->rank == 1 ? DP_STEPS - 1 : DP_STEPS;
    for (int step = 0; !rc && step < DP_STEPS + 1; step++) {
        int active = step >= start && step < stop + start;
        int first = step == start;
        rc = step_both(&x, ss, active ? n_seqs : 0, first, step);
    }
    if (!rc)
        fprintf(stderr, "rank %d: %s DP=%d EP=%d: worst relative error vs single rank %.3g\n",
                r->rank, lo->dir, lo->dp, lo->ep, x.worst);
    rank_close(&x);
    return rc;
}

static void dp_ep_decode_matches_single_rank(void **state)
{
    (void)state;
    const char *dirs[] = {ET_GPT_OSS, ET_QWEN3};
    const int shapes[][2] = {{2, 2}, {4, 4}, {4, 2}};
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < 3; i++) {
            layout lo = {dirs[d], 1, shapes[i][1], shapes[i][0], 0};
            run_layout(&lo, dp_decode_rank);
        }
}

/* ---- a crashed rank ------------------------------------------------------ */

/* Every rank decodes in a loop (idle ranks in DP mode join empty); the
 * parent kills rank `victim` once everyone is running. The survivors must
 * get TN_ERR_PEER from tm_forward, with a message naming the death. */
typedef struct crash_case {
    layout lo;
    int victim;
} crash_case;

static int crash_rank(const rt_rank *r, void *arg)
{
    const crash_case *cc = arg;
    rank_ctx x;
    int rc = rank_open(&x, r, &cc->lo, 0);
    seq s, *ss[1] = {&s};
    if (!rc)
        rc = seq_open(&x, &s, x.g.prompt, 4);
    int idle = cc->lo.dp > 1 && r->rank == 1;   /* an idle DP rank fails the same way */
    for (int i = 0; !rc && i < 100000; i++) {
        if (s.len >= MAX_SEQ - 1) {   /* start over in the same pages */
            s.len = 4;
            s.n_cached = 0;
        }
        rc = step_both(&x, ss, idle ? 0 : 1, 0, i);
        if (i == 2)
            rt_signal_ready(r);
    }
    int code = E_EXPECTED_FAIL;
    if (rc == -TN_ERR_PEER) {
        code = strstr(comm_error(x.world), "died") ? PASS : E_MESSAGE;
        fprintf(stderr, "rank %d: tm_forward failed as expected: %s\n", r->rank,
                comm_error(x.world));
    }
    rank_close(&x);
    return code;
}

static void crashed_rank_fails_the_group(void **state)
{
    (void)state;
    const crash_case cases[] = {
        {{ET_QWEN3, 2, 2, 1, 0}, 1},
        {{ET_GPT_OSS, 4, 4, 1, 0}, 0},
        {{ET_QWEN3, 1, 2, 2, 0}, 0},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        const crash_case *cc = &cases[k];
        int world = cc->lo.tp * cc->lo.dp, status[RT_MAX_RANKS];
        rt_group g;
        assert_int_equal(rt_start(&g, world, TAG, crash_rank, (void *)cc), 0);
        for (int q = 0; q < world; q++)
            assert_int_equal(rt_wait_ready(&g, q, WAIT_MS), 0);
        rt_kill(&g, cc->victim, SIGKILL);
        rt_wait(&g, WAIT_MS, status);
        for (int q = 0; q < world; q++)
            assert_int_equal(status[q], q == cc->victim ? 128 + SIGKILL : PASS);
        assert_int_equal(rt_shm_count_ours(TAG), 0);
    }
}

/* A rank whose step fails locally (here: a token outside the vocabulary)
 * fails the group at once; the others get TN_ERR_PEER saying so, with no
 * timeout involved (the group has none). */
static int local_error_rank(const rt_rank *r, void *arg)
{
    const layout *lo = arg;
    rank_ctx x;
    int rc = rank_open(&x, r, lo, 0);
    seq s, *ss[1] = {&s};
    if (!rc)
        rc = seq_open(&x, &s, x.g.prompt, 8);
    if (!rc)
        rc = step_both(&x, ss, 1, 0, 0);   /* one good step first */
    int code = rc;
    if (!rc && r->rank == 1) {
        int32_t bad = x.V;   /* one past the vocabulary */
        tm_seq_step st = {.tokens = &bad, .n_tokens = 1, .n_cached = s.n_cached,
                          .pages = s.pages, .n_pages = s.n_pages};
        code = tm_forward(x.par, &x.kv_par, &st, 1, x.lp, NULL) == TN_ERR_ARG
                   ? PASS : E_EXPECTED_FAIL;
    } else if (!rc) {
        rc = step_both(&x, ss, 1, 0, 1);
        code = rc == -TN_ERR_PEER && strstr(comm_error(x.world),
                                            "aborted: tm_forward failed locally")
                   ? PASS : E_MESSAGE;
    }
    rank_close(&x);
    return code;
}

static void local_error_fails_the_group_at_once(void **state)
{
    (void)state;
    const layout cases[] = {{ET_GPT_OSS, 2, 2, 1, 0}, {ET_QWEN3, 1, 4, 4, 0}};
    for (int i = 0; i < 2; i++)
        run_layout(&cases[i], local_error_rank);
}

/* ---- layouts that cannot work --------------------------------------------- */

static int bad_layout_rank(const rt_rank *r, void *arg)
{
    (void)arg;
    kn_backend be;
    comm *w = NULL;
    char err[512] = "";
    tm_groups g;
    tm_model *m = NULL;
    if (kn_backend_init_cpu(&be) ||
        comm_host_init(&w, r->name, r->rank, r->world, NULL, err, sizeof(err)))
        return E_SETUP;
    int code = PASS;
    /* 3 ranks of TP: the fixtures have 4 heads */
    if (tm_groups_init(&g, w, 3, 1, 1, err, sizeof(err)) != TN_OK) {
        code = E_SETUP;
    } else {
        int rc = tm_model_load_parallel(ET_QWEN3, &be, &g.par, &m, err, sizeof(err));
        if (rc != TN_ERR_ARG || m || !strstr(err, "TP 3 does not divide the 4 attention heads"))
            code = E_MESSAGE;
        tm_groups_free(&g);
    }
    /* EP groups must tile the TP group; tp x dp must be the world size */
    if (!code && (tm_groups_init(&g, w, 3, 2, 1, err, sizeof(err)) != TN_ERR_ARG ||
                  !strstr(err, "EP 2 does not divide the 3 TP ranks")))
        code = E_MESSAGE;
    if (!code && (tm_groups_init(&g, w, 2, 1, 1, err, sizeof(err)) != TN_ERR_ARG ||
                  !strstr(err, "needs 2 ranks")))
        code = E_MESSAGE;
    if (code)
        fprintf(stderr, "rank %d: unexpected: %s\n", r->rank, err);
    comm_free(w);
    kn_backend_free(&be);
    return code;
}

static void impossible_layouts_are_refused(void **state)
{
    (void)state;
    rt_group g;
    int status[RT_MAX_RANKS];
    assert_int_equal(rt_start(&g, 3, TAG, bad_layout_rank, NULL), 0);
    rt_wait(&g, WAIT_MS, status);
    for (int q = 0; q < 3; q++)
        assert_int_equal(status[q], PASS);
    assert_int_equal(rt_shm_count_ours(TAG), 0);
}

/* Synthetic weights under a layout: each rank makes only its slice, and
 * the slices are the single-rank synthetic model's. */
static void synthetic_shards_match_single_rank(void **state)
{
    (void)state;
    const char *dirs[] = {ET_GPT_OSS, ET_QWEN3};
    for (int d = 0; d < 2; d++) {
        layout tp = {dirs[d], 2, 2, 1, 1};
        run_layout(&tp, tp_prefill_rank);
        layout dp = {dirs[d], 1, 2, 2, 1};
        run_layout(&dp, dp_decode_rank);
    }
}

/* The shard plan for the replicated-KV case, without processes. */
static void shard_plan_replicates_kv_heads(void **state)
{
    (void)state;
    tm_config c;
    memset(&c, 0, sizeof(c));
    c.n_heads = 64;
    c.n_kv_heads = 4;   /* Qwen3-235B: TP=8 puts each KV head on two ranks */
    c.n_experts = 128;
    tm_shard s;
    char err[256];
    for (int r = 0; r < 8; r++) {
        assert_int_equal(tm_shard_plan(&c, r, 8, r, 8, &s, err, sizeof(err)), TN_OK);
        assert_int_equal(s.n_heads, 8);
        assert_int_equal(s.head0, 8 * r);
        assert_int_equal(s.n_kv_heads, 1);
        assert_int_equal(s.kv_head0, r / 2);
        assert_int_equal(s.n_experts, 16);
        assert_int_equal(s.expert0, 16 * r);
        assert_int_equal(s.o_bias, r == 0);
    }
    assert_int_equal(tm_shard_plan(&c, 1, 2, 0, 1, &s, err, sizeof(err)), TN_OK);
    assert_int_equal(s.n_kv_heads, 2);
    assert_int_equal(s.kv_head0, 2);
    c.n_kv_heads = 6;
    assert_int_equal(tm_shard_plan(&c, 0, 4, 0, 1, &s, err, sizeof(err)), TN_ERR_ARG);
    assert_non_null(strstr(err, "KV heads"));
    c.n_kv_heads = 4;
    assert_int_equal(tm_shard_plan(&c, 0, 1, 0, 3, &s, err, sizeof(err)), TN_ERR_ARG);
    assert_non_null(strstr(err, "128 experts"));
}

/* A world of one: its groups are "not split" and never communicate,
 * unless keep_single asks to run every collective anyway (what the NCCL
 * world-size-1 run on one GPU, tests/gpu/test_parallel_nccl.c, relies on);
 * the communicators' counters say which collectives ran. In-process, host
 * communicator. */
static void world_of_one_communicates_only_when_asked(void **state)
{
    (void)state;
    kn_backend be;
    comm *world = NULL, *tp = NULL, *ep = NULL;
    char name[64], err[512] = "";
    snprintf(name, sizeof(name), "%s-%ld-one", TAG, (long)getpid());
    assert_int_equal(kn_backend_init_cpu(&be), TN_OK);
    assert_int_equal(comm_host_init(&world, name, 0, 1, NULL, err, sizeof(err)), TN_OK);
    assert_int_equal(comm_split(world, 0, 0, &tp), TN_OK);
    assert_int_equal(comm_split(world, 0, 0, &ep), TN_OK);
    et_golden g;
    assert_int_equal(et_golden_load(ET_QWEN3, &g, err, sizeof(err)), 0);
    tm_model *ref = NULL;
    assert_int_equal(tm_model_load(ET_QWEN3, &be, &ref, err, sizeof(err)), TN_OK);
    const tm_config *c = tm_model_config(ref);
    const int L = c->n_layers, H = c->hidden_size, K = c->n_experts_per_tok, V = c->vocab_size;
    float *lp = calloc((size_t)V, sizeof(float)), *lr = calloc((size_t)V, sizeof(float));
    assert_non_null(lp);
    assert_non_null(lr);
    /* TP+EP prefill, DP x EP decode with an idle step; each without and
     * with keep_single */
    for (int dp = 0; dp < 2; dp++)
        for (int keep = 0; keep < 2; keep++) {
            tm_parallel par = {.tp = dp ? NULL : tp, .ep = ep,
                               .ep_mode = dp ? TM_EP_DISPATCH : TM_EP_REPLICATED,
                               .keep_single = keep};
            tm_model *m = NULL;
            assert_int_equal(tm_model_load_parallel(ET_QWEN3, &be, &par, &m, err, sizeof(err)),
                             TN_OK);
            tm_kv_cache kp, kr;
            int32_t pp[MAX_SEQ / PAGE], pr[MAX_SEQ / PAGE];
            const int np = (g.T + PAGE - 1) / PAGE;
            assert_int_equal(tm_kv_cache_init(&kp, &be, KN_F32, L, tm_model_kv_heads(m), c->head_dim,
                                              PAGE, np), TN_OK);
            assert_int_equal(tm_kv_cache_init(&kr, &be, KN_F32, L, c->n_kv_heads, c->head_dim, PAGE,
                                              np), TN_OK);
            assert_int_equal(tm_kv_alloc_pages(&kp, np, pp), TN_OK);
            assert_int_equal(tm_kv_alloc_pages(&kr, np, pr), TN_OK);
            comm_stats t0, e0, t1, e1;
            comm_get_stats(tp, &t0);
            comm_get_stats(ep, &e0);
            tm_seq_step sp = {g.prompt, g.T, 0, pp, np}, sr = {g.prompt, g.T, 0, pr, np};
            assert_int_equal(tm_forward(m, &kp, &sp, 1, lp, NULL), TN_OK);
            if (dp && keep)   /* an idle DP rank's step (kept groups only) */
                assert_int_equal(tm_forward(m, NULL, NULL, 0, NULL, NULL), TN_OK);
            assert_int_equal(tm_forward(ref, &kr, &sr, 1, lr, NULL), TN_OK);
            assert_true(et_rel_err(lp, lr, (size_t)V) <= PAR_TOL);
            comm_get_stats(tp, &t1);
            comm_get_stats(ep, &e1);
            unsigned long long want_ar = keep ? (unsigned long long)L : 0;
            unsigned long long act = (unsigned long long)g.T * H * sizeof(float);
            unsigned long long tp_ar = t1.calls[COMM_OP_ALL_REDUCE_SUM] -
                                       t0.calls[COMM_OP_ALL_REDUCE_SUM];
            unsigned long long ep_ar = e1.calls[COMM_OP_ALL_REDUCE_SUM] -
                                       e0.calls[COMM_OP_ALL_REDUCE_SUM];
            unsigned long long ep_a2a = e1.calls[COMM_OP_ALL_TO_ALL_V] -
                                        e0.calls[COMM_OP_ALL_TO_ALL_V];
            unsigned long long a2a_bytes = e1.bytes[COMM_OP_ALL_TO_ALL_V] -
                                           e0.bytes[COMM_OP_ALL_TO_ALL_V];
            if (dp) {
                /* per step one all-gather of the token counts (the
                 * capacity); per layer of the active step the packed rows
                 * (activations, ids, weights) and the shares back; the
                 * idle step (capacity 0 on the whole group) moves nothing */
                unsigned long long ep_ag = e1.calls[COMM_OP_ALL_GATHER] -
                                           e0.calls[COMM_OP_ALL_GATHER];
                assert_int_equal(tp_ar + ep_ar, 0);
                assert_int_equal(ep_ag, keep ? 2 : 0);
                assert_int_equal(ep_a2a, keep ? 2ull * L : 0);
                assert_int_equal(a2a_bytes, keep ? L * (2 * act + 2ull * g.T * K * 4) : 0);
            } else {
                assert_int_equal(tp_ar, want_ar);
                assert_int_equal(ep_ar, want_ar);
                assert_int_equal(t1.bytes[COMM_OP_ALL_REDUCE_SUM] -
                                 t0.bytes[COMM_OP_ALL_REDUCE_SUM], want_ar * act);
                assert_int_equal(ep_a2a, 0);
            }
            tm_kv_cache_free(&kp);
            tm_kv_cache_free(&kr);
            tm_model_free(m);
        }
    free(lp);
    free(lr);
    tm_model_free(ref);
    et_golden_free(&g);
    comm_free(ep);
    comm_free(tp);
    comm_free(world);
    kn_backend_free(&be);
    assert_int_equal(rt_shm_count_ours(TAG), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shard_plan_replicates_kv_heads),
        cmocka_unit_test(tp_prefill_matches_single_rank),
        cmocka_unit_test(dp_ep_decode_matches_single_rank),
        cmocka_unit_test(crashed_rank_fails_the_group),
        cmocka_unit_test(local_error_fails_the_group_at_once),
        cmocka_unit_test(impossible_layouts_are_refused),
        cmocka_unit_test(synthetic_shards_match_single_rank),
        cmocka_unit_test(world_of_one_communicates_only_when_asked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
