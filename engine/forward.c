/* The forward pass: one call advances a batch of sequences by their new
 * tokens (prefill: many tokens of one sequence; decode: one token each of
 * many), writing their K/V into the paged cache on the way.
 *
 * All new tokens of all sequences are concatenated into one row dimension,
 * so every projection, norm and expert MLP runs once over the whole batch;
 * only attention needs to know where one sequence ends, and it gets that
 * from the kn_seq_batch built here. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/comm.h"
#include "engine/ep_dispatch.h"
#include "engine/model_internal.h"
#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/matmul.h"
#include "kernels/moe.h"
#include "kernels/moe_router.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope_kv.h"
#include "common/status.h"
#include "kernels/stopwatch.h"

static void buf_free(const kn_backend *be, tm_buf *b, int host)
{
    if (b->p) {
        if (host)
            kn_host_free(be, b->p);
        else
            kn_free(be, b->p);
    }
    b->p = NULL;
    b->cap = 0;
}

void tm_scratch_free(const kn_backend *be, tm_scratch *s)
{
    tm_buf *dev[] = {&s->x, &s->xn, &s->q, &s->k, &s->v, &s->att, &s->tmp,
                     &s->router, &s->eidx, &s->ew, &s->ids, &s->pos,
                     &s->last_rows, &s->last_h, &s->logits,
                     &s->q_offset, &s->kv_len, &s->page_table, &s->win_page_table};
    tm_buf *host[] = {&s->h_ids, &s->h_pos, &s->h_last, &s->h_q_offset,
                      &s->h_kv_len, &s->h_page_table, &s->h_win_page_table};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
        buf_free(be, dev[i], 0);
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++)
        buf_free(be, host[i], 1);
}

/* Makes b hold at least `bytes`; contents are not kept. Grows by half again
 * so a slowly growing batch does not reallocate every step. Host buffers
 * are pinned (kn_host_alloc): the batch arrays are copied from them without
 * a host wait, so one is freed only after the backend has caught up.
 * *grew is set when b moved. */
static int buf_need(const kn_backend *be, tm_buf *b, size_t bytes, int host, int *grew)
{
    if (bytes <= b->cap)
        return TN_OK;
    if (host && b->p) {
        int rc = kn_backend_sync(be);
        if (rc)
            return rc;
    }
    buf_free(be, b, host);
    *grew = 1;
    size_t cap = bytes + bytes / 2;
    b->p = host ? kn_host_alloc(be, cap) : kn_malloc(be, cap);
    if (!b->p)
        return TN_ERR_NOMEM;
    b->cap = cap;
    return TN_OK;
}

/* Grows the scratch for a step; *grew is set when any buffer moved (the
 * recorded decode graphs point into them). */
static int scratch_need(tm_model *m, size_t rows, size_t seqs, size_t pages,
                        size_t logit_rows, int *grew)
{
    const tm_config *c = &m->cfg;
    const kn_backend *be = m->be;
    tm_scratch *s = &m->s;
    const size_t F = sizeof(float), I = sizeof(int32_t);
    const size_t H = (size_t)c->hidden_size, qd = (size_t)m->shard.n_heads * c->head_dim,
                 kvd = (size_t)m->shard.n_kv_heads * c->head_dim, E = (size_t)c->n_experts,
                 K = (size_t)c->n_experts_per_tok, V = (size_t)c->vocab_size;
    struct { tm_buf *b; size_t bytes; int host; } want[] = {
        {&s->x, rows * H * F, 0},       {&s->xn, rows * H * F, 0},
        {&s->q, rows * qd * F, 0},      {&s->k, rows * kvd * F, 0},
        {&s->v, rows * kvd * F, 0},     {&s->att, rows * qd * F, 0},
        {&s->tmp, rows * H * F, 0},     {&s->router, rows * E * F, 0},
        {&s->eidx, rows * K * I, 0},    {&s->ew, rows * K * F, 0},
        {&s->ids, rows * I, 0},         {&s->pos, rows * I, 0},
        {&s->last_rows, seqs * I, 0},   {&s->last_h, seqs * H * F, 0},
        {&s->logits, logit_rows * V * F, 0},
        {&s->q_offset, (seqs + 1) * I, 0}, {&s->kv_len, seqs * I, 0},
        {&s->page_table, seqs * pages * I, 0}, {&s->win_page_table, seqs * pages * I, 0},
        {&s->h_ids, rows * I, 1},       {&s->h_pos, rows * I, 1},
        {&s->h_last, seqs * I, 1},      {&s->h_q_offset, (seqs + 1) * I, 1},
        {&s->h_kv_len, seqs * I, 1},    {&s->h_page_table, seqs * pages * I, 1},
        {&s->h_win_page_table, seqs * pages * I, 1},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        int rc = buf_need(be, want[i].b, want[i].bytes, want[i].host, grew);
        if (rc)
            return rc;
    }
    return TN_OK;
}

/* Rejects a batch the kernels could not run safely: sizes, page tables too
 * short for the tokens, page ids outside the cache, bad token ids. */
static int check_batch(const tm_model *m, const tm_kv_cache *kv, const tm_seq_step *seqs,
                       int n_seqs, long long *rows_out, int *max_pages_out)
{
    const tm_config *c = &m->cfg;
    if (!kv || !seqs || n_seqs <= 0 || kv->n_layers != c->n_layers ||
        kv->n_kv_heads != m->shard.n_kv_heads || kv->head_dim != c->head_dim ||
        kv->page_size <= 0)
        return TN_ERR_ARG;
    long long rows = 0;
    int max_pages = 1;
    for (int s = 0; s < n_seqs; s++) {
        const tm_seq_step *q = &seqs[s];
        if (!q->tokens || q->n_tokens <= 0 || q->n_cached < 0 || !q->pages ||
            (long long)q->n_cached + q->n_tokens > INT_MAX)
            return TN_ERR_ARG;
        int len = q->n_cached + q->n_tokens;
        int need = (int)(((long long)len + kv->page_size - 1) / kv->page_size);
        if (q->n_pages < need)
            return TN_ERR_ARG;
        for (int p = 0; p < need; p++)
            if (q->pages[p] < 0 || q->pages[p] >= kv->n_pages)
                return TN_ERR_ARG;
        /* window pool: the pages this step's window layers read must still
         * hold their slots (tm_kv_window_trim gave back only older ones) */
        for (int p = kv->window > 0 && q->n_cached - kv->window + 1 > 0
                         ? (q->n_cached - kv->window + 1) / kv->page_size
                         : 0;
             kv->window > 0 && p < need; p++)
            if (kv->win_slot[q->pages[p]] < 0)
                return TN_ERR_ARG;
        for (int t = 0; t < q->n_tokens; t++)
            if (q->tokens[t] < 0 || q->tokens[t] >= c->vocab_size)
                return TN_ERR_ARG;
        if (need > max_pages)
            max_pages = need;
        rows += q->n_tokens;
    }
    if (rows > INT_MAX / 2)
        return TN_ERR_ARG;
    *rows_out = rows;
    *max_pages_out = max_pages;
    return TN_OK;
}

/* Queues the uploads of the host batch arrays (pinned; no host wait: the
 * step's final sync comes before they are written again). */
static int upload_batch(tm_model *m, const tm_kv_cache *kv, int rows, int n_seqs, int max_pages)
{
    tm_scratch *s = &m->s;
    const kn_backend *be = m->be;
    const size_t I = sizeof(int32_t);
    int rc = kn_copy_to_backend_async(be, s->ids.p, s->h_ids.p, (size_t)rows * I);
    if (!rc)
        rc = kn_copy_to_backend_async(be, s->pos.p, s->h_pos.p, (size_t)rows * I);
    if (!rc)
        rc = kn_copy_to_backend_async(be, s->last_rows.p, s->h_last.p, (size_t)n_seqs * I);
    if (!rc)
        rc = kn_copy_to_backend_async(be, s->q_offset.p, s->h_q_offset.p, (size_t)(n_seqs + 1) * I);
    if (!rc)
        rc = kn_copy_to_backend_async(be, s->kv_len.p, s->h_kv_len.p, (size_t)n_seqs * I);
    if (!rc)
        rc = kn_copy_to_backend_async(be, s->page_table.p, s->h_page_table.p,
                                      (size_t)n_seqs * max_pages * I);
    if (!rc && kv->window > 0) {
        tm_kv_window_table(kv, s->h_page_table.p, s->h_win_page_table.p, (size_t)n_seqs * max_pages);
        rc = kn_copy_to_backend_async(be, s->win_page_table.p, s->h_win_page_table.p,
                                      (size_t)n_seqs * max_pages * I);
    }
    return rc;
}

/* The window layers' batch: b with the window page table and pool size
 * (b itself without a window pool). */
static kn_seq_batch window_batch(const tm_kv_cache *kv, const tm_scratch *s, const kn_seq_batch *b)
{
    kn_seq_batch w = *b;
    if (kv->window > 0) {
        w.page_table = s->win_page_table.p;
        w.n_pages = kv->n_win_slots;
    }
    return w;
}

/* Fills the host batch arrays and uploads them with the token ids and
 * positions. */
static int build_batch(tm_model *m, const tm_kv_cache *kv, const tm_seq_step *seqs,
                       int n_seqs, int rows, int max_pages, kn_seq_batch *b, kn_seq_batch *bw)
{
    tm_scratch *s = &m->s;
    int32_t *ids = s->h_ids.p, *pos = s->h_pos.p, *last = s->h_last.p;
    int32_t *qo = s->h_q_offset.p, *kl = s->h_kv_len.p, *pt = s->h_page_table.p;
    int r = 0, max_q = 0, max_kv = 0;
    for (int i = 0; i < n_seqs; i++) {
        const tm_seq_step *q = &seqs[i];
        int len = q->n_cached + q->n_tokens;
        int need = (len + kv->page_size - 1) / kv->page_size;
        qo[i] = r;
        kl[i] = len;
        for (int t = 0; t < q->n_tokens; t++, r++) {
            ids[r] = q->tokens[t];
            pos[r] = q->n_cached + t;
        }
        last[i] = r - 1;
        for (int p = 0; p < max_pages; p++)   /* unused tail: any valid page id */
            pt[(size_t)i * max_pages + p] = p < need ? q->pages[p] : q->pages[0];
        if (q->n_tokens > max_q)
            max_q = q->n_tokens;
        if (len > max_kv)
            max_kv = len;
    }
    qo[n_seqs] = r;
    int rc = upload_batch(m, kv, rows, n_seqs, max_pages);
    *b = (kn_seq_batch){
        .n_seqs = n_seqs, .n_rows = rows, .max_pages = max_pages,
        .max_q_len = max_q, .max_kv_len = max_kv,
        .q_offset = s->q_offset.p, .kv_len = s->kv_len.p, .page_table = s->page_table.p,
        .n_pages = kv->n_pages,
    };
    *bw = window_batch(kv, s, b);
    return rc;
}

/* An attention projection's weight (its dtype and, for FP8, scales). */
static kn_weight wt_attn(const tm_model *m, const void *p, const float *scale)
{
    return (kn_weight){.dtype = m->w.types.attn, .data = p, .scale = scale};
}

/* Ends a stretch of timed work when a stopwatch is set (model.h). */
static int lap(tm_model *m, tm_prof_group g)
{
    return m->sw ? kn_stopwatch_lap(m->sw, (int)g) : TN_OK;
}

/* One decoder layer over all rows, updating the residual stream s->x.
 * The MoE block's output is left in s->tmp, not yet added to s->x: the next
 * norm (layer l+1's attention norm, or the final norm) adds it in the same
 * pass with kn_add_rmsnorm, saving a pass over the stream per layer. Every
 * collective that completes tmp (EP all-reduce, EP dispatch) has run by then.
 * residual_pending says whether layer l-1 left such an output in s->tmp. */
static int layer_forward(tm_model *m, tm_kv_cache *kv, int l, const kn_seq_batch *full_b,
                         const kn_seq_batch *win_b, int residual_pending)
{
    /* a window layer of a window-pool cache reads its own page table */
    const kn_seq_batch *b = tm_kv_layer_windowed(kv, l) ? win_b : full_b;
    const tm_config *c = &m->cfg;
    const tm_layer_weights *w = &m->w.layers[l];
    const kn_backend *be = m->be;
    tm_scratch *s = &m->s;
    const int T = b->n_rows, H = c->hidden_size, hd = c->head_dim;
    /* this rank's heads (all of them on one rank) */
    const int nh = m->shard.n_heads, nkv = m->shard.n_kv_heads;
    const int qd = nh * hd, kvd = nkv * hd;
    float *x = s->x.p, *xn = s->xn.p, *q = s->q.p, *k = s->k.p, *v = s->v.p;
    float *att = s->att.p, *tmp = s->tmp.p;
    int rc;
#define TRY(call) do { if ((rc = (call)) != TN_OK) return rc; } while (0)
    /* attention block */
    const kn_weight q_w = wt_attn(m, w->q_w, w->q_s), k_w = wt_attn(m, w->k_w, w->k_s),
                    v_w = wt_attn(m, w->v_w, w->v_s), o_w = wt_attn(m, w->o_w, w->o_s);
    /* the norm (adding the previous layer's MoE output) and q, k, v in one
     * call: one launch at batch 1 on CUDA (kernels/matmul.h) */
    const kn_norm_in attn_in = {x, residual_pending ? tmp : NULL, xn, w->attn_norm, c->rms_eps};
    const kn_linear qkv[3] = { { q, &q_w, w->q_b, qd }, { k, &k_w, w->k_b, kvd }, { v, &v_w, w->v_b, kvd } };
    TRY(kn_matmul_w_multi_normed(be, qkv, 3, &attn_in, T, H));
    TRY(lap(m, TM_PROF_ATTN_PROJ));
    /* Qwen3's per-head q/k RMSNorm, RoPE and the KV append: one op (one
     * kernel at decode on CUDA, kernels/rope_kv.h) */
    const kn_kv_pools pools = tm_kv_layer_pools(kv, l);
    const kn_qk_rope qk = {.q_norm = c->qk_norm ? w->q_norm : NULL,
                           .k_norm = c->qk_norm ? w->k_norm : NULL, .eps = c->rms_eps,
                           .pos = s->pos.p, .inv_freq = m->inv_freq,
                           .attn_scale = m->rope_scale};
    TRY(kn_rope_kv_append(be, q, k, v, &pools, b, nh, nkv, hd, kv->page_size, &qk));
    TRY(lap(m, TM_PROF_ROPE_KV));
    TRY(kn_attention(be, att, q, &pools, b, nh, nkv, hd,
                     kv->page_size, (float)(1.0 / sqrt((double)hd)), w->sinks,
                     c->layer_window[l]));
    TRY(lap(m, TM_PROF_ATTENTION));
    TRY(kn_matmul_w(be, tmp, att, &o_w, w->o_b, T, H, qd));
    if (m->par.tp)   /* each TP rank has its heads' share of o_proj: sum them */
        TRY(comm_all_reduce_sum(m->par.tp, tmp, (size_t)T * H));
    TRY(lap(m, TM_PROF_ATTN_PROJ));
    /* MoE block; the TP all-reduce above has completed tmp. The residual
     * add, the norm (xn, the experts' input), the router product and the
     * routing: one kernel at decode on CUDA (kernels/moe_router.h) */
    const kn_norm_in mlp_in = {x, tmp, xn, w->mlp_norm, c->rms_eps};
    TRY(kn_moe_router_normed(be, s->eidx.p, s->ew.p, s->router.p, &mlp_in, w->router_w, w->router_b, T,
                             H, c->n_experts, c->n_experts_per_tok, c->route_mode, c->norm_topk_prob));
    TRY(lap(m, TM_PROF_ROUTER));
    if (m->par.ep_mode == TM_EP_DISPATCH) {
        TRY(tm_ep_dispatch_moe(m, l, xn, s->eidx.p, s->ew.p, T, tmp));
    } else {
        TRY(kn_moe_experts(be, tmp, xn, s->eidx.p, s->ew.p, T, c->n_experts_per_tok,
                           &m->moe[l]));
        if (m->par.ep_mode == TM_EP_REPLICATED)   /* local experts' share of every token */
            TRY(comm_all_reduce_sum(m->par.ep, tmp, (size_t)T * H));
    }
    TRY(lap(m, TM_PROF_EXPERTS));
    /* the residual add of tmp is the next norm's (see above) */
#undef TRY
    return TN_OK;
}

static int forward_step(tm_model *m, tm_kv_cache *kv, const tm_seq_step *seqs,
                        int n_seqs, float *logits, float *all_logits);

int tm_forward(tm_model *m, tm_kv_cache *kv, const tm_seq_step *seqs,
               int n_seqs, float *logits, float *all_logits)
{
    if (!m)
        return TN_ERR_ARG;
    int rc = forward_step(m, kv, seqs, n_seqs, logits, all_logits);
    if (rc && rc != TN_ERR_PEER && (m->par.tp || m->par.ep)) {
        /* the peers are inside this step's collectives, which this rank will
         * not finish: fail the group now rather than at their timeout */
        char why[96];
        snprintf(why, sizeof(why), "tm_forward failed locally: %s", tn_status_str(rc));
        if (m->par.tp)
            comm_abort(m->par.tp, why);
        if (m->par.ep)
            comm_abort(m->par.ep, why);
    }
    return rc;
}

/* Each sequence's last row through the final norm and the LM head into
 * s->logits [n_seqs][vocab]. Only those rows feed the head: gather them
 * (a row gather from the hidden states) so a long prefill never pays for
 * T x vocab logits. */
static int head_last_rows(tm_model *m, int n_seqs, int T)
{
    const tm_config *c = &m->cfg;
    const kn_backend *be = m->be;
    tm_scratch *s = &m->s;
    const int H = c->hidden_size, V = c->vocab_size;
    const kn_weight head = {.dtype = m->w.wdtype, .data = m->w.lm_head, .scale = NULL};
    int rc = kn_gather_rows(be, s->last_h.p, s->x.p, s->last_rows.p, n_seqs, T, H);
    /* ...and the same rows of the pending MoE output into xn (free now), so
     * only those rows pay for the last residual add (it is element-wise) */
    if (!rc)
        rc = kn_gather_rows(be, s->xn.p, s->tmp.p, s->last_rows.p, n_seqs, T, H);
    if (!rc)
        rc = kn_add_rmsnorm(be, s->last_h.p, s->last_h.p, s->xn.p, m->w.final_norm,
                            n_seqs, H, c->rms_eps);
    if (!rc)
        rc = lap(m, TM_PROF_NORM_ADD);
    if (!rc)
        rc = kn_matmul_w(be, s->logits.p, s->last_h.p, &head, NULL, n_seqs, V, H);
    return rc;
}

/* Embedding (the ids were checked on the host) and every layer; the last
 * layer's MoE output waits in s->tmp (n_layers >= 1, config). */
static int embed_and_layers(tm_model *m, tm_kv_cache *kv, const kn_seq_batch *b,
                            const kn_seq_batch *bw)
{
    const tm_config *c = &m->cfg;
    int rc = kn_gather_rows(m->be, m->s.x.p, m->w.embed, m->s.ids.p, b->n_rows, c->vocab_size,
                            c->hidden_size);
    for (int l = 0; l < c->n_layers && !rc; l++)
        rc = layer_forward(m, kv, l, b, bw, l > 0);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Decode steps of a fixed shape, recorded as CUDA graphs (model.h).   */

enum { TM_GRAPH_MAX_BATCH = 256 };

static int pow2_at_least(int n)
{
    int p = 1;
    while (p < n)
        p *= 2;
    return p;
}

/* Whether this call takes the fixed-shape decode step: CUDA, one rank (no
 * collectives inside the step), no stopwatch, one token per sequence,
 * only the last rows' logits, and experts whose CUDA path keeps the row
 * counts on the device (f32 experts run per-expert cuBLAS GEMMs sized on
 * the host: a sync that no graph can record). */
static int fixed_decode_step(const tm_model *m, const tm_seq_step *seqs, int n_seqs,
                             const float *all_logits)
{
    if (m->graphs.mode == TM_CUDA_GRAPHS_OFF || m->be->kind != KN_BACKEND_CUDA || all_logits ||
        m->sw || m->par.tp || m->par.ep || m->par.ep_mode == TM_EP_DISPATCH ||
        (m->cfg.n_experts > 0 && m->w.types.experts == KN_F32) ||
        n_seqs > TM_GRAPH_MAX_BATCH)
        return 0;
    for (int i = 0; i < n_seqs; i++)
        if (seqs[i].n_tokens != 1)
            return 0;
    return 1;
}

/* Records the step into e's graph (the batch arrays are uploaded already,
 * outside it); on failure the shape is marked to run eagerly. */
static void record_step(tm_model *m, tm_kv_cache *kv, const kn_seq_batch *b,
                        const kn_seq_batch *bw, tm_decode_graph *e, int n_seqs)
{
    const kn_backend *be = m->be;
    kn_graph *g = NULL;
    int rc = kn_graph_begin(be);
    if (rc == TN_OK) {
        int body = embed_and_layers(m, kv, b, bw);
        if (!body)
            body = head_last_rows(m, b->n_seqs, b->n_rows);
        rc = kn_graph_end(be, &g);
        if (rc == TN_OK && body != TN_OK) {
            kn_graph_free(g);
            g = NULL;
            rc = body;
        }
    }
    if (rc == TN_OK) {
        e->g = g;
        e->state = TM_GRAPH_READY;
        m->graphs.stats.captures++;
    } else {
        e->state = TM_GRAPH_FAILED;
        m->graphs.stats.capture_failures++;
        fprintf(stderr, "tandem: tm_forward: the decode step of %d sequences (padded to %d, %d "
                "pages) could not be recorded as a CUDA graph (%s); that shape runs without one\n",
                n_seqs, b->n_seqs, b->max_pages, tn_status_str(rc));
    }
}

/* One token for each of n_seqs sequences as the padded fixed-shape step
 * (model.h tm_model_set_cuda_graphs); the batch is checked already. */
static int forward_fixed_decode(tm_model *m, tm_kv_cache *kv, const tm_seq_step *seqs, int n_seqs,
                                float *logits, int max_pages)
{
    const kn_backend *be = m->be;
    tm_scratch *s = &m->s;
    const int B = pow2_at_least(n_seqs), P = pow2_at_least(max_pages), ps = kv->page_size;
    int grew = 0;
    int rc = scratch_need(m, (size_t)B, (size_t)B, (size_t)P, (size_t)B, &grew);
    if (grew)
        tm_graphs_drop(&m->graphs);
    if (rc)
        return rc;
    int32_t *ids = s->h_ids.p, *pos = s->h_pos.p, *last = s->h_last.p;
    int32_t *qo = s->h_q_offset.p, *kl = s->h_kv_len.p, *pt = s->h_page_table.p;
    /* padding sequences: token 0 at position 0, no page (-1: the kernels
     * neither write nor read any cache row for them) */
    for (int i = 0; i < B; i++) {
        const tm_seq_step *q = i < n_seqs ? &seqs[i] : NULL;
        const int len = q ? q->n_cached + 1 : 1, need = q ? (len + ps - 1) / ps : 0;
        ids[i] = q ? q->tokens[0] : 0;
        pos[i] = len - 1;
        kl[i] = len;
        qo[i] = i;
        last[i] = i;
        for (int p = 0; p < P; p++)
            pt[(size_t)i * P + p] = p < need ? q->pages[p] : -1;
    }
    qo[B] = B;
    rc = upload_batch(m, kv, B, B, P);
    if (rc)
        return rc;
    /* launches sized for P pages whatever the sequences' lengths: the
     * kernels read each sequence's own length on the device */
    const kn_seq_batch b = {
        .n_seqs = B, .n_rows = B, .max_pages = P, .max_q_len = 1,
        .max_kv_len = P * ps, .q_offset = s->q_offset.p, .kv_len = s->kv_len.p,
        .page_table = s->page_table.p, .n_pages = kv->n_pages,
    };
    const kn_seq_batch bw = window_batch(kv, s, &b);
    tm_decode_graphs *gs = &m->graphs;
    tm_decode_graph *e = NULL;
    int recorded_now = 0;
    if (gs->mode == TM_CUDA_GRAPHS_ON) {
        int added = 0;
        e = tm_graphs_get(gs, B, P, kn_backend_attn_bf16(be), tm_graph_kv_sig(kv), &added);
        if (!e)
            return TN_ERR_NOMEM;
        /* the first step of a shape runs eagerly: the ops' one-time set-up
         * (plans, side streams) must not happen inside a recording */
        if (!added && e->state == TM_GRAPH_SEEN) {
            record_step(m, kv, &b, &bw, e, n_seqs);
            recorded_now = 1;
        }
    }
    if (e && e->state == TM_GRAPH_READY) {
        rc = kn_graph_launch(be, e->g);
        if (!recorded_now)
            gs->stats.replays++;
    } else {
        rc = embed_and_layers(m, kv, &b, &bw);
        if (!rc)
            rc = head_last_rows(m, B, B);
        gs->stats.eager_steps++;
    }
    if (!rc && logits)
        rc = kn_copy_to_host(be, logits, s->logits.p,
                             (size_t)n_seqs * m->cfg.vocab_size * sizeof(float));
    if (!rc)
        rc = kn_backend_sync(be);
    return rc;
}

static int forward_step(tm_model *m, tm_kv_cache *kv, const tm_seq_step *seqs,
                        int n_seqs, float *logits, float *all_logits)
{
    if (n_seqs == 0 && m->par.ep_mode == TM_EP_DISPATCH) {
        /* an idle DP rank still serves its experts in every layer */
        int rc = TN_OK;
        for (int l = 0; l < m->cfg.n_layers && !rc; l++)
            rc = tm_ep_dispatch_moe(m, l, NULL, NULL, NULL, 0, NULL);
        return rc;
    }
    long long rows_ll;
    int max_pages;
    int rc = check_batch(m, kv, seqs, n_seqs, &rows_ll, &max_pages);
    if (rc)
        return rc;
    if (fixed_decode_step(m, seqs, n_seqs, all_logits))
        return forward_fixed_decode(m, kv, seqs, n_seqs, logits, max_pages);
    const tm_config *c = &m->cfg;
    const kn_backend *be = m->be;
    tm_scratch *s = &m->s;
    const int T = (int)rows_ll, H = c->hidden_size, V = c->vocab_size;
    int grew = 0;
    rc = scratch_need(m, (size_t)T, (size_t)n_seqs, (size_t)max_pages,
                      all_logits ? (size_t)T : (size_t)n_seqs, &grew);
    if (grew)
        tm_graphs_drop(&m->graphs);
    if (rc)
        return rc;
    if (m->sw && (rc = kn_stopwatch_start(m->sw)) != TN_OK)
        return rc;
    kn_seq_batch b, bw;
    rc = build_batch(m, kv, seqs, n_seqs, T, max_pages, &b, &bw);
    if (!rc)
        rc = embed_and_layers(m, kv, &b, &bw);
    if (rc)
        return rc;

    const size_t row_bytes = (size_t)V * sizeof(float);
    if (all_logits) {
        const kn_weight head = {.dtype = m->w.wdtype, .data = m->w.lm_head, .scale = NULL};
        rc = kn_add_rmsnorm(be, s->x.p, s->xn.p, s->tmp.p, m->w.final_norm, T, H,
                            c->rms_eps);
        if (!rc)
            rc = lap(m, TM_PROF_NORM_ADD);
        if (!rc)
            rc = kn_matmul_w(be, s->logits.p, s->xn.p, &head, NULL, T, V, H);
        if (!rc)
            rc = kn_copy_to_host(be, all_logits, s->logits.p, (size_t)T * row_bytes);
        if (!rc)
            rc = lap(m, TM_PROF_HEAD);
        const int32_t *last = s->h_last.p;
        for (int i = 0; !rc && logits && i < n_seqs; i++)
            memcpy(logits + (size_t)i * V, all_logits + (size_t)last[i] * V, row_bytes);
        return rc;
    }
    rc = head_last_rows(m, n_seqs, T);
    if (!rc && logits)
        rc = kn_copy_to_host(be, logits, s->logits.p, (size_t)n_seqs * row_bytes);
    if (!rc)
        rc = lap(m, TM_PROF_HEAD);
    if (!rc)
        rc = kn_backend_sync(be);
    return rc;
}
