/* One prefill job: the prompt through the model in chunks, the first token,
 * the KV push to the decoder, the report to the router. */
#include "prefiller/prefiller.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/status.h"
#include "common/sys.h"
#include "transfer/transfer.h"

#define WHO "prefiller"

void prefill_job_free(prefill_job *job)
{
    if (!job)
        return;
    free(job->tokens);
    free(job->branch_ids);
    free(job->branch_seeds);
    free(job->prompt_lps);
    worker_sampling_free(&job->ws);
    if (job->dest)
        tandem__v1__kv_destination__free_unpacked(job->dest, NULL);
    free(job);
}

void prefiller_count_outcome(prefiller_ctx *ctx, int code)
{
    metrics_outcome o;
    switch (code) {
    case TANDEM__V1__ERROR_CODE__ERROR_CODE_NONE: o = OUTCOME_OK; break;
    case TANDEM__V1__ERROR_CODE__ERROR_CODE_CANCELLED: o = OUTCOME_CANCELLED; break;
    case TANDEM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT:
    case TANDEM__V1__ERROR_CODE__ERROR_CODE_CONTEXT_TOO_LONG: o = OUTCOME_CLIENT_ERROR; break;
    default: o = OUTCOME_ERROR; break;
    }
    ctx->loop.wm.prefill_requests[o]++;
}

/* The branches' first tokens (n > 1), drawn with the first token. */
typedef struct branch_draws {
    int n;
    int32_t *tokens;
    uint64_t *rngs;
    tm_token_logprobs *lp;    /* NULL: no logprobs asked */
} branch_draws;

static void branch_draws_free(branch_draws *b)
{
    free(b->tokens);
    free(b->rngs);
    free(b->lp);
    memset(b, 0, sizeof *b);
}

static void report(prefiller_ctx *ctx, const prefill_job *job, int32_t first, uint64_t rng,
                   tm_token_logprobs *first_lp, const branch_draws *br, int transfer, int code,
                   const char *msg, double t_prefill, double t_xfer)
{
    if (ctx->group.rank != 0) {   /* only rank 0 talks to the router */
        if (code)
            tn_log(WHO, "rank %d, request %s: %s", ctx->group.rank, job->id, msg);
        return;
    }
    prefiller_count_outcome(ctx, code);
    Tandem__V1__Error e = TANDEM__V1__ERROR__INIT;
    Tandem__V1__PrefillResult r = TANDEM__V1__PREFILL_RESULT__INIT;
    r.request_id = (char *)job->id;
    r.first_token = first;
    r.rng_state = rng;
    r.transfer = transfer;
    r.prompt_len = (uint32_t)job->n_tokens;
    r.prefill_seconds = t_prefill;
    r.transfer_seconds = t_xfer;
    Tandem__V1__TokenLogprobs lp;
    if (first_lp && !code) {
        worker_logprobs_to_wire(&lp, first_lp);
        r.first_logprobs = &lp;
    }
    /* echo's prompt logprobs: views of job->prompt_lps */
    Tandem__V1__TokenLogprobs *plp = NULL, **plp_ptrs = NULL;
    const size_t n_plp = job->n_tokens > 1 ? (size_t)job->n_tokens - 1 : 0;
    if (job->prompt_lps && !code && n_plp) {
        plp = malloc(n_plp * sizeof *plp);
        plp_ptrs = malloc(n_plp * sizeof *plp_ptrs);
        if (!plp || !plp_ptrs) {
            code = TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL;
            msg = "out of memory for the prompt's logprobs";
        } else {
            for (size_t i = 0; i < n_plp; i++) {
                worker_logprobs_to_wire(&plp[i], &job->prompt_lps[i]);
                plp_ptrs[i] = &plp[i];
            }
            r.prompt_logprobs = plp_ptrs;
            r.n_prompt_logprobs = n_plp;
        }
    }
    if (code) {
        e.code = code;
        e.message = (char *)msg;
        e.request_id = (char *)job->id;
        r.error = &e;
        tn_log(WHO, "request %s: %s", job->id, msg);
    }
    int nb = br && !code ? br->n : 0;
    char *ids[nb > 0 ? nb : 1];
    Tandem__V1__TokenLogprobs blp[nb > 0 ? nb : 1];
    Tandem__V1__TokenLogprobs *blp_ptrs[nb > 0 ? nb : 1];
    for (int i = 0; i < nb; i++) {
        ids[i] = (char *)job->branch_ids[i];
        if (br->lp) {
            worker_logprobs_to_wire(&blp[i], &br->lp[i]);
            blp_ptrs[i] = &blp[i];
        }
    }
    if (nb > 0) {
        r.branch_ids = ids;
        r.n_branch_ids = (size_t)nb;
        r.branch_first_tokens = br->tokens;
        r.n_branch_first_tokens = (size_t)nb;
        r.branch_rng_states = br->rngs;
        r.n_branch_rng_states = (size_t)nb;
        if (br->lp) {
            r.branch_first_logprobs = blp_ptrs;
            r.n_branch_first_logprobs = (size_t)nb;
        }
    }
    Tandem__V1__WorkerMessage m = TANDEM__V1__WORKER_MESSAGE__INIT;
    m.body_case = TANDEM__V1__WORKER_MESSAGE__BODY_PREFILL_RESULT;
    m.prefill_result = &r;
    link_send(&ctx->loop.link, &m);
    free(plp);
    free(plp_ptrs);
}

/* Each branch's first token from the same logits (left unchanged by the
 * sampler), with its own generator: what a prefill of its own would draw. */
static int draw_branches(prefiller_ctx *ctx, const prefill_job *job, branch_draws *b)
{
    memset(b, 0, sizeof b[0]);
    if (job->n_branches == 0 || ctx->group.rank != 0)
        return TN_OK;
    b->tokens = calloc((size_t)job->n_branches, sizeof *b->tokens);
    b->rngs = calloc((size_t)job->n_branches, sizeof *b->rngs);
    b->lp = job->ws.top_logprobs >= 0 ? calloc((size_t)job->n_branches, sizeof *b->lp) : NULL;
    if (!b->tokens || !b->rngs || (job->ws.top_logprobs >= 0 && !b->lp)) {
        branch_draws_free(b);
        return TN_ERR_NOMEM;
    }
    b->n = job->n_branches;
    const tm_penalties *pen = &job->ws.pen;
    for (int i = 0; i < b->n; i++) {
        b->rngs[i] = kn_rng_seed(job->branch_seeds[i]);
        /* the prompt's last row (with echo's logprobs every row is there) */
        const float *row = tm_model_last_logits(ctx->model) +
                           (size_t)job->last_row * (size_t)ctx->mc->vocab_size;
        int rc = tm_sample_rows(&ctx->sampler, row, 1,
                                ctx->mc->vocab_size, &job->ws.params, &b->rngs[i], &pen,
                                &job->ws.con, &job->ws.top_logprobs, &b->tokens[i],
                                b->lp ? &b->lp[i] : NULL);
        if (rc != TN_OK) {
            branch_draws_free(b);
            return rc;
        }
    }
    return TN_OK;
}

/* In a TP group every rank runs every step of a job; rank 0, which talks to
 * the router, decides and the others follow through these broadcasts. */
enum { CMD_STOP = 0, CMD_JOB = 1 };
typedef struct group_cmd {
    int32_t op, n_tokens, dest_len, chunk;
    uint64_t key;
    int32_t prompt_lp;    /* every rank computes the full logits for echo's logprobs */
    int32_t pad;
} group_cmd;

static int in_group(const prefiller_ctx *ctx)
{
    return ctx->group.world != NULL;
}

/* A collective failed: the group is broken, the process reports and exits. */
static int group_broken(prefiller_ctx *ctx, int rc, char *err, size_t errlen)
{
    ctx->group_failed = 1;
    snprintf(err, errlen, "prefiller group failed: %s", comm_error(ctx->group.world));
    return rc;
}

/* Rank 0's verdict (1: cancelled) reaches every rank. */
static int share_flag(prefiller_ctx *ctx, int *flag, char *err, size_t errlen)
{
    if (!in_group(ctx))
        return TN_OK;
    int32_t f = *flag;
    int rc = comm_broadcast(ctx->group.world, &f, sizeof f, 0);
    if (rc)
        return group_broken(ctx, rc, err, errlen);
    *flag = f;
    return TN_OK;
}

/* Runs the prompt through the model, a chunk per forward call, answering
 * the router between chunks. Returns 0, 1 if cancelled, or a negative
 * status (message in err). */
/* Echo's prompt logprobs: every position's logits (the LM head over the
 * whole chunk, so chunks this short bound the logits' memory) give the
 * next prompt token's logprob and the top alternatives (rank 0). */
#define PROMPT_LP_CHUNK 32

static int prompt_logprobs(prefiller_ctx *ctx, prefill_job *job, int off, int n, char *err,
                           size_t errlen)
{
    if (ctx->group.rank != 0)
        return TN_OK;
    const int V = ctx->mc->vocab_size, k = job->prompt_lp;
    int32_t next[PROMPT_LP_CHUNK], ids[PROMPT_LP_CHUNK * KN_LOGPROBS_MAX_TOP];
    float lp[PROMPT_LP_CHUNK], tops[PROMPT_LP_CHUNK * KN_LOGPROBS_MAX_TOP];
    for (int i = 0; i < n; i++) /* the last prompt token has no next one */
        next[i] = off + i + 1 < job->n_tokens ? job->tokens[off + i + 1] : -1;
    int rc = kn_logprobs(&ctx->be, tm_model_last_logits(ctx->model), n, V, next, lp, k, ids, tops);
    if (rc != TN_OK) {
        snprintf(err, errlen, "the prompt's logprobs at token %d: %s", off, tn_status_str(rc));
        return rc;
    }
    for (int i = 0; i < n && off + i + 1 < job->n_tokens; i++) {
        tm_token_logprobs *d = &job->prompt_lps[off + i];
        d->logprob = lp[i];
        d->n_top = k;
        for (int j = 0; j < k; j++) {
            d->top_ids[j] = ids[i * k + j];
            d->top_logprobs[j] = tops[i * k + j];
        }
    }
    return TN_OK;
}

static int run_chunks(prefiller_ctx *ctx, prefill_job *job, const int32_t *pages, int n_pages,
                      int chunk, float *all, char *err, size_t errlen);

static int run_prompt(prefiller_ctx *ctx, prefill_job *job, const int32_t *pages, int n_pages,
                      char *err, size_t errlen)
{
    int chunk = ctx->cfg.chunk_tokens;
    float *all = NULL;
    if (job->prompt_lp >= 0) {
        if (chunk > PROMPT_LP_CHUNK)
            chunk = PROMPT_LP_CHUNK;
        all = malloc((size_t)chunk * (size_t)ctx->mc->vocab_size * sizeof *all);
        if (ctx->group.rank == 0 && job->n_tokens > 1 && !job->prompt_lps)
            job->prompt_lps = calloc((size_t)job->n_tokens - 1, sizeof *job->prompt_lps);
        if (!all || (ctx->group.rank == 0 && job->n_tokens > 1 && !job->prompt_lps)) {
            free(all);
            if (in_group(ctx)) { /* the other ranks are about to run it: stop them */
                comm_abort(ctx->group.world, "out of memory for the prompt's logits");
                ctx->group_failed = 1;
            }
            snprintf(err, errlen, "out of memory for the prompt's logits (%d x %d)", chunk,
                     ctx->mc->vocab_size);
            return TN_ERR_NOMEM;
        }
    }
    int rc = run_chunks(ctx, job, pages, n_pages, chunk, all, err, errlen);
    free(all);
    return rc;
}

static int run_chunks(prefiller_ctx *ctx, prefill_job *job, const int32_t *pages, int n_pages,
                      int chunk, float *all, char *err, size_t errlen)
{
    for (int off = 0; off < job->n_tokens; off += chunk) {
        int n = job->n_tokens - off < chunk ? job->n_tokens - off : chunk;
        tm_seq_step step = {.tokens = job->tokens + off, .n_tokens = n, .n_cached = off,
                            .pages = pages, .n_pages = n_pages};
        int rc = tm_forward(ctx->model, &ctx->kv, &step, 1, NULL, all);
        /* with every row's logits the first token is drawn from the last row */
        job->last_row = all ? n - 1 : 0;
        if (rc == TN_OK && all && (rc = prompt_logprobs(ctx, job, off, n, err, errlen)) != TN_OK) {
            ctx->group_failed = in_group(ctx);
            if (in_group(ctx))
                comm_abort(ctx->group.world, "the prompt's logprobs failed");
            return rc;
        }
        if (rc == TN_ERR_PEER)
            return group_broken(ctx, rc, err, errlen);
        if (rc != TN_OK) {
            /* tm_forward has failed the group already if there is one */
            ctx->group_failed = in_group(ctx);
            snprintf(err, errlen, "forward pass failed at prompt token %d: %s", off,
                     tn_status_str(rc));
            return rc;
        }
        if (ctx->group.rank == 0)
            prefiller_service(ctx, 0);
        int cancelled = job->cancelled;
        if ((rc = share_flag(ctx, &cancelled, err, errlen)) != TN_OK)
            return rc;
        if (cancelled)
            return 1;
    }
    return 0;
}

/* Rank 0 hands the job to the other ranks. */
static int share_job(prefiller_ctx *ctx, const prefill_job *job, char *err, size_t errlen)
{
    size_t dlen = tandem__v1__kv_destination__get_packed_size(job->dest);
    uint8_t *dbuf = malloc(dlen ? dlen : 1);
    if (!dbuf) {
        snprintf(err, errlen, "out of memory");
        return TN_ERR_NOMEM;
    }
    tandem__v1__kv_destination__pack(job->dest, dbuf);
    group_cmd cmd = {CMD_JOB, job->n_tokens, (int32_t)dlen, ctx->cfg.chunk_tokens, job->key,
                     job->prompt_lp, 0};
    comm *w = ctx->group.world;
    int rc = comm_broadcast(w, &cmd, sizeof cmd, 0);
    if (!rc)
        rc = comm_broadcast(w, job->tokens, sizeof(int32_t) * (size_t)job->n_tokens, 0);
    if (!rc)
        rc = comm_broadcast(w, dbuf, dlen, 0);
    free(dbuf);
    return rc ? group_broken(ctx, rc, err, errlen) : TN_OK;
}

void prefiller_group_stop(prefiller_ctx *ctx)
{
    if (!in_group(ctx) || ctx->group_failed)
        return;
    group_cmd cmd = {.op = CMD_STOP};
    comm_broadcast(ctx->group.world, &cmd, sizeof cmd, 0);
}

/* Every rank's push outcome reaches rank 0, which reports the first
 * failure. */
typedef struct push_outcome {
    uint64_t bytes;        /* the rank's KV heads, for tandem_kv_transfer_bytes_total */
    int32_t ok;
    char err[252];
} push_outcome;

static int gather_outcomes(prefiller_ctx *ctx, int *ok, uint64_t *bytes, char *err,
                           size_t errlen)
{
    if (!in_group(ctx))
        return TN_OK;
    push_outcome mine = {.bytes = *bytes, .ok = *ok}, all[COMM_MAX_WORLD];
    snprintf(mine.err, sizeof mine.err, "%s", *ok ? "" : err);
    int rc = comm_all_gather(ctx->group.world, &mine, all, sizeof mine);
    if (rc)
        return group_broken(ctx, rc, err, errlen);
    *bytes = 0;
    for (int r = 0; r < ctx->group.size; r++)
        *bytes += all[r].bytes;
    for (int r = 0; r < ctx->group.size; r++) {
        if (!all[r].ok) {
            *ok = 0;
            snprintf(err, errlen, "TP rank %d: %s", r, all[r].err);
            break;
        }
    }
    return TN_OK;
}

void prefiller_run_job(prefiller_ctx *ctx, prefill_job *job)
{
    const int INTERNAL = TANDEM__V1__ERROR_CODE__ERROR_CODE_INTERNAL;
    const int CANCELLED = TANDEM__V1__ERROR_CODE__ERROR_CODE_CANCELLED;
    const int NONE = TANDEM__V1__TRANSFER_STATUS__TRANSFER_STATUS_NONE;
    char err[512] = "";
    double t0 = tn_now_s();
    if (in_group(ctx) && ctx->group.rank == 0 && share_job(ctx, job, err, sizeof err) != 0) {
        report(ctx, job, 0, 0, NULL, NULL, NONE, INTERNAL, err, 0, 0);
        return;
    }
    int n_pages = tm_kv_pages_for(&ctx->kv, job->n_tokens);
    int32_t *pages = malloc((size_t)(n_pages > 0 ? n_pages : 1) * sizeof *pages);
    if (!pages || n_pages <= 0 || tm_kv_alloc_pages(&ctx->kv, n_pages, pages) != TN_OK) {
        /* Jobs run one at a time and were checked against the cache's size. */
        if (in_group(ctx)) {   /* the other ranks are about to run it: stop them */
            comm_abort(ctx->group.world, "cannot allocate KV pages for a prompt");
            ctx->group_failed = 1;
        }
        report(ctx, job, 0, 0, NULL, NULL, NONE, INTERNAL,
               "cannot allocate KV pages for the prompt", 0, 0);
        free(pages);
        return;
    }
    int rc = run_prompt(ctx, job, pages, n_pages, err, sizeof err);
    double t1 = tn_now_s();
    if (rc != 0) {
        report(ctx, job, 0, 0, NULL, NULL, NONE, rc > 0 ? CANCELLED : INTERNAL,
               rc > 0 ? "cancelled during prefill" : err, t1 - t0, 0);
        tm_kv_release_pages(&ctx->kv, pages, n_pages);
        free(pages);
        return;
    }
    worker_loop_count_tokens(&ctx->loop, (uint64_t)job->n_tokens);
    /* Tokens and busy time of completed prefills only, so tokens / busy is
     * the replica's throughput (the autoscaler's measurement). */
    ctx->loop.wm.prefill_input_tokens += (uint64_t)job->n_tokens;
    ctx->loop.wm.prefill_busy_s += t1 - t0;
    histogram_observe(&ctx->loop.wm.prefill_duration, t1 - t0);
    uint64_t rng = kn_rng_seed(job->ws.seed);
    int32_t first = 0;
    tm_token_logprobs first_lp;
    const tm_penalties *pen = &job->ws.pen;
    /* TP ranks hold identical logits: rank 0 samples them where they are (on
     * the GPU only the token id and any logprobs come back) */
    rc = ctx->group.rank == 0
             ? tm_sample_rows(&ctx->sampler,
                              tm_model_last_logits(ctx->model) +
                                  (size_t)job->last_row * (size_t)ctx->mc->vocab_size,
                              1,
                              ctx->mc->vocab_size, &job->ws.params, &rng, &pen, &job->ws.con,
                              &job->ws.top_logprobs, &first, &first_lp)
             : TN_OK;
    branch_draws br;
    if (rc == TN_OK)
        rc = draw_branches(ctx, job, &br);
    if (rc != TN_OK) {
        if (in_group(ctx)) {   /* the other ranks would push without us */
            comm_abort(ctx->group.world, "sampling the first token failed");
            ctx->group_failed = 1;
        }
        snprintf(err, sizeof err, "sampling the first token failed: %s", tn_status_str(rc));
        report(ctx, job, 0, 0, NULL, NULL, NONE, INTERNAL, err, t1 - t0, 0);
        tm_kv_release_pages(&ctx->kv, pages, n_pages);
        free(pages);
        return;
    }
    /* The decoder's pages get the prompt's KV; it continues from there,
     * within the lease of its pages: no push starts after it, and the
     * transfer ends by then (the decoder frees the pages after it). */
    kv_push *push = NULL;
    int ok = 0;
    uint64_t bytes = 0;
    int timeout_ms = ctx->cfg.transfer_timeout_ms;
    double lease_left_ms = job->lease_end_ms ? (double)job->lease_end_ms - (double)tn_wall_ms() : 0;
    if (job->lease_end_ms && lease_left_ms < timeout_ms)
        timeout_ms = lease_left_ms > 0 ? (int)lease_left_ms : 0;
    if (job->lease_end_ms && timeout_ms <= 0)
        snprintf(err, sizeof err, "the decoder's KV lease ended %.0f ms before the push could "
                 "start; nothing was sent", -lease_left_ms);
    else if (kv_push_start(ctx->pusher, job->dest, job->key, pages, job->n_tokens,
                           timeout_ms, &push, err, sizeof err) == 0) {
        /* UCX moves data only inside progress calls, and over shared memory
         * one call moves at most a FIFO's worth: drive it without pause
         * while it reports events (te_idle_backoff naps only once it has
         * not for a while), and look at the router at most once a
         * millisecond, without waiting (issue 20: a 1 ms wait per round
         * held a 4096-token push to 0.17 GB/s). */
        int cancel_sent = 0, idle = 0, events = 0;
        uint64_t served_ms = tn_now_ms();
        while (!kv_push_poll(ctx->pusher, push, &ok, &events, err, sizeof err)) {
            if (events)
                idle = 0;
            uint64_t now = tn_now_ms();
            if (ctx->group.rank == 0 && now != served_ms) {
                prefiller_service(ctx, 0);
                served_ms = now;
            }
            if (job->cancelled && !cancel_sent) {
                kv_push_cancel(ctx->pusher, push);
                cancel_sent = 1;
            }
            te_idle_backoff(&idle);
        }
        bytes = kv_push_bytes(push);
        kv_push_release(ctx->pusher, push);
    }
    /* every rank pushed its KV heads; the request is whole only if all did */
    gather_outcomes(ctx, &ok, &bytes, err, sizeof err);
    double t2 = tn_now_s();
    ctx->loop.wm.kv_transfers[ok ? OUTCOME_OK : job->cancelled ? OUTCOME_CANCELLED : OUTCOME_ERROR]++;
    if (ok) {
        ctx->loop.wm.kv_transfer_bytes += bytes;
        histogram_observe(&ctx->loop.wm.kv_transfer_duration, t2 - t1);
    }
    tm_kv_release_pages(&ctx->kv, pages, n_pages);
    free(pages);
    if (!ok) {
        int code = job->cancelled ? CANCELLED : TANDEM__V1__ERROR_CODE__ERROR_CODE_TRANSFER_FAILED;
        char msg[600];
        snprintf(msg, sizeof msg, "KV transfer to %s failed: %s", job->dest->decoder_id, err);
        report(ctx, job, first, rng, NULL, NULL, TANDEM__V1__TRANSFER_STATUS__TRANSFER_STATUS_FAILED,
               code, job->cancelled ? "cancelled during the KV transfer" : msg, t1 - t0, t2 - t1);
        branch_draws_free(&br);
        return;
    }
    report(ctx, job, first, rng, job->ws.top_logprobs >= 0 ? &first_lp : NULL, &br,
           TANDEM__V1__TRANSFER_STATUS__TRANSFER_STATUS_COMPLETE, 0, NULL,
           t1 - t0, t2 - t1);
    branch_draws_free(&br);
}

int prefiller_rank_serve(prefiller_ctx *ctx)
{
    comm *w = ctx->group.world;
    /* waiting for work has no time limit; a dead rank 0 still ends it */
    comm_set_timeout(w, 0);
    for (;;) {
        group_cmd cmd;
        int rc = comm_broadcast(w, &cmd, sizeof cmd, 0);
        if (rc) {
            tn_log(WHO, "rank %d: prefiller group failed: %s", ctx->group.rank, comm_error(w));
            return -1;
        }
        if (cmd.op == CMD_STOP)
            return 0;
        prefill_job *job = calloc(1, sizeof *job);
        uint8_t *dbuf = malloc(cmd.dest_len > 0 ? (size_t)cmd.dest_len : 1);
        if (job)
            job->tokens = malloc(sizeof(int32_t) * (size_t)(cmd.n_tokens > 0 ? cmd.n_tokens : 1));
        /* join the broadcasts even without memory, then fail the group */
        int32_t scratch;
        rc = comm_broadcast(w, job && job->tokens ? (void *)job->tokens : (void *)&scratch,
                            job && job->tokens ? sizeof(int32_t) * (size_t)cmd.n_tokens : 0, 0);
        if (!rc && !(job && job->tokens && dbuf))
            rc = TN_ERR_NOMEM;
        if (!rc)
            rc = comm_broadcast(w, dbuf, (size_t)cmd.dest_len, 0);
        if (!rc) {
            job->dest = tandem__v1__kv_destination__unpack(NULL, (size_t)cmd.dest_len, dbuf);
            if (!job->dest)
                rc = TN_ERR_NOMEM;
        }
        free(dbuf);
        if (rc) {
            if (rc != TN_ERR_PEER)
                comm_abort(w, "cannot take a job (out of memory)");
            tn_log(WHO, "rank %d: prefiller group failed: %s", ctx->group.rank, comm_error(w));
            prefill_job_free(job);
            return -1;
        }
        job->n_tokens = cmd.n_tokens;
        job->key = cmd.key;
        job->prompt_lp = cmd.prompt_lp;
        snprintf(job->id, sizeof job->id, "%016llx", (unsigned long long)cmd.key);
        ctx->cfg.chunk_tokens = cmd.chunk;
        comm_set_timeout(w, ctx->cfg.w.comm_timeout_ms);
        prefiller_run_job(ctx, job);
        comm_set_timeout(w, 0);
        prefill_job_free(job);
        if (ctx->group_failed)
            return -1;
    }
}
