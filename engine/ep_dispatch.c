#include "engine/ep_dispatch.h"
#include <stdlib.h>
#include <string.h>
#include "engine/comm.h"
#include "engine/model_internal.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/moe.h"
#include "common/status.h"

struct tm_ep_state {
    /* host */
    tm_buf h_eidx, h_ew;             /* [T][k] the routes */
    tm_buf h_send_rows;              /* [S] token of each dispatched row */
    tm_buf h_send_eidx, h_send_ew;   /* [S][k] */
    tm_buf h_slot, h_n_dest;         /* [J][T] combine rows per slot, [T] */
    tm_buf h_zero;                   /* [H] */
    /* backend */
    tm_buf send_rows, send_x, send_eidx, send_ew;
    tm_buf recv_x, recv_eidx, recv_ew, recv_out;
    tm_buf comb;                     /* [S + 1][H]: the shares back, then a zero row */
    tm_buf slot, part;               /* [T], [T][H] */
    tm_buf counts;                   /* [2][W] int64, only for device communicators */
};

static void ep_buf_free(const kn_backend *be, tm_buf *b, int host)
{
    if (b->p) {
        if (host)
            free(b->p);
        else
            kn_free(be, b->p);
    }
    b->p = NULL;
    b->cap = 0;
}

/* Grows b to at least `bytes` (at least 1, so empty exchanges still have a
 * valid pointer); contents are not kept. */
static int ep_buf_need(const kn_backend *be, tm_buf *b, size_t bytes, int host)
{
    if (bytes == 0)
        bytes = 1;
    if (bytes <= b->cap)
        return TN_OK;
    ep_buf_free(be, b, host);
    size_t cap = bytes + bytes / 2;
    b->p = host ? malloc(cap) : kn_malloc(be, cap);
    if (!b->p)
        return TN_ERR_NOMEM;
    b->cap = cap;
    return TN_OK;
}

tm_ep_state *tm_ep_state_new(void)
{
    return calloc(1, sizeof(tm_ep_state));
}

void tm_ep_state_free(const kn_backend *be, tm_ep_state *s)
{
    if (!s)
        return;
    tm_buf *host[] = {&s->h_eidx, &s->h_ew, &s->h_send_rows, &s->h_send_eidx,
                      &s->h_send_ew, &s->h_slot, &s->h_n_dest, &s->h_zero};
    tm_buf *dev[] = {&s->send_rows, &s->send_x, &s->send_eidx, &s->send_ew, &s->recv_x,
                     &s->recv_eidx, &s->recv_ew, &s->recv_out, &s->comb, &s->slot,
                     &s->part, &s->counts};
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++)
        ep_buf_free(be, host[i], 1);
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
        ep_buf_free(be, dev[i], 0);
    free(s);
}

/* Row counts to every peer in, row counts from every peer out. A device
 * communicator needs them in device memory. */
static int exchange_counts(tm_model *m, const int64_t *to, int64_t *from)
{
    comm *ep = m->par.ep;
    const int W = comm_size(ep);
    size_t eight[COMM_MAX_WORLD];
    for (int p = 0; p < W; p++)
        eight[p] = sizeof(int64_t);
    if (comm_memory(ep) == KN_BACKEND_CPU)
        return comm_all_to_all_v(ep, to, eight, from, eight);
    tm_ep_state *s = m->ep;
    const size_t n = sizeof(int64_t) * (size_t)W;
    int rc = ep_buf_need(m->be, &s->counts, 2 * n, 0);
    int64_t *dev = s->counts.p;
    if (!rc)
        rc = kn_copy_to_backend(m->be, dev, to, n);
    if (!rc)
        rc = comm_all_to_all_v(ep, dev, eight, dev + W, eight);
    if (!rc)
        rc = kn_copy_to_host(m->be, from, dev + W, n);
    return rc;
}

/* Bytes per peer for `rows[p]` rows of `row_bytes`. */
static void row_bytes(size_t *out, const int64_t *rows, int W, size_t row_bytes_)
{
    for (int p = 0; p < W; p++)
        out[p] = (size_t)rows[p] * row_bytes_;
}

int tm_ep_dispatch_moe(tm_model *m, int layer, const float *xn, const int32_t *eidx,
                       const float *ew, int T, float *out)
{
    tm_ep_state *s = m->ep;
    comm *ep = m->par.ep;
    const kn_backend *be = m->be;
    if (!s || !ep || T < 0 || (T > 0 && (!xn || !eidx || !ew || !out)))
        return TN_ERR_ARG;
    const int W = comm_size(ep), K = m->cfg.n_experts_per_tok, H = m->cfg.hidden_size;
    const int per_rank = m->shard.n_experts;   /* experts are split evenly, in order */
    const int J = K < W ? K : W;               /* most ranks one token can reach */
    const size_t I = sizeof(int32_t), F = sizeof(float), Tz = (size_t)T;
    int rc = TN_OK;
#define TRY(call) do { if ((rc = (call)) != TN_OK) return rc; } while (0)
    TRY(ep_buf_need(be, &s->h_eidx, Tz * K * I, 1));
    TRY(ep_buf_need(be, &s->h_ew, Tz * K * F, 1));
    TRY(ep_buf_need(be, &s->h_n_dest, Tz * I, 1));
    TRY(ep_buf_need(be, &s->h_slot, (size_t)J * Tz * I, 1));
    int32_t *h_eidx = s->h_eidx.p, *n_dest = s->h_n_dest.p;
    float *h_ew = s->h_ew.p;
    if (T > 0) {
        TRY(kn_copy_to_host(be, h_eidx, eidx, Tz * K * I));
        TRY(kn_copy_to_host(be, h_ew, ew, Tz * K * F));
    }

    /* Which ranks each token goes to, as a bit set (W <= 64). */
    int64_t to[COMM_MAX_WORLD] = {0}, from[COMM_MAX_WORLD] = {0};
    for (int t = 0; t < T; t++) {
        uint64_t dest = 0;
        for (int j = 0; j < K; j++) {
            int e = h_eidx[(size_t)t * K + j];
            if (e < 0 || e >= m->cfg.n_experts)
                return TN_ERR_ARG;
            dest |= 1ull << (e / per_rank);
        }
        for (int p = 0; p < W; p++)
            to[p] += (dest >> p) & 1;
    }
    int64_t S = 0;
    for (int p = 0; p < W; p++)
        S += to[p];
    TRY(ep_buf_need(be, &s->h_send_rows, (size_t)S * I, 1));
    TRY(ep_buf_need(be, &s->h_send_eidx, (size_t)S * K * I, 1));
    TRY(ep_buf_need(be, &s->h_send_ew, (size_t)S * K * F, 1));
    int32_t *send_rows = s->h_send_rows.p, *send_eidx = s->h_send_eidx.p;
    int32_t *slot = s->h_slot.p;
    float *send_ew = s->h_send_ew.p;
    /* Rows grouped by destination rank (the all-to-all wants each peer's
     * run contiguous); a token's j-th destination's share comes back to
     * combine row slot[j][t]; unused slots point at the zero row S. */
    for (size_t i = 0; i < (size_t)J * Tz; i++)
        slot[i] = (int32_t)S;
    memset(n_dest, 0, Tz * I);
    int64_t r = 0;
    for (int p = 0; p < W; p++) {
        for (int t = 0; t < T; t++) {
            int hit = 0;
            for (int j = 0; j < K && !hit; j++)
                hit = h_eidx[(size_t)t * K + j] / per_rank == p;
            if (!hit)
                continue;
            send_rows[r] = t;
            memcpy(send_eidx + (size_t)r * K, h_eidx + (size_t)t * K, (size_t)K * I);
            memcpy(send_ew + (size_t)r * K, h_ew + (size_t)t * K, (size_t)K * F);
            slot[(size_t)n_dest[t] * Tz + (size_t)t] = (int32_t)r;
            n_dest[t]++;
            r++;
        }
    }
    TRY(exchange_counts(m, to, from));
    int64_t R = 0;
    for (int p = 0; p < W; p++)
        R += from[p];

    /* dispatch */
    TRY(ep_buf_need(be, &s->send_rows, (size_t)S * I, 0));
    TRY(ep_buf_need(be, &s->send_x, (size_t)S * H * F, 0));
    TRY(ep_buf_need(be, &s->send_eidx, (size_t)S * K * I, 0));
    TRY(ep_buf_need(be, &s->send_ew, (size_t)S * K * F, 0));
    TRY(ep_buf_need(be, &s->recv_x, (size_t)R * H * F, 0));
    TRY(ep_buf_need(be, &s->recv_eidx, (size_t)R * K * I, 0));
    TRY(ep_buf_need(be, &s->recv_ew, (size_t)R * K * F, 0));
    TRY(ep_buf_need(be, &s->recv_out, (size_t)R * H * F, 0));
    TRY(ep_buf_need(be, &s->comb, (size_t)(S + 1) * H * F, 0));
    if (S > 0) {
        TRY(kn_copy_to_backend(be, s->send_rows.p, send_rows, (size_t)S * I));
        TRY(kn_copy_to_backend(be, s->send_eidx.p, send_eidx, (size_t)S * K * I));
        TRY(kn_copy_to_backend(be, s->send_ew.p, send_ew, (size_t)S * K * F));
        /* a row gather is an embedding lookup into the activations */
        TRY(kn_embedding(be, s->send_x.p, xn, s->send_rows.p, (int)S, T, H));
    }
    size_t sb[COMM_MAX_WORLD], rb[COMM_MAX_WORLD];
    row_bytes(sb, to, W, (size_t)H * F);
    row_bytes(rb, from, W, (size_t)H * F);
    TRY(comm_all_to_all_v(ep, s->send_x.p, sb, s->recv_x.p, rb));
    row_bytes(sb, to, W, (size_t)K * I);
    row_bytes(rb, from, W, (size_t)K * I);
    TRY(comm_all_to_all_v(ep, s->send_eidx.p, sb, s->recv_eidx.p, rb));
    TRY(comm_all_to_all_v(ep, s->send_ew.p, sb, s->recv_ew.p, rb));

    /* this rank's experts on every token it received */
    if (R > 0)
        TRY(kn_moe_experts(be, s->recv_out.p, s->recv_x.p, s->recv_eidx.p, s->recv_ew.p,
                           (int)R, K, &m->moe[layer]));

    /* combine: the shares go back where they came from */
    row_bytes(sb, to, W, (size_t)H * F);
    row_bytes(rb, from, W, (size_t)H * F);
    TRY(comm_all_to_all_v(ep, s->recv_out.p, rb, s->comb.p, sb));
    if (T == 0)
        return TN_OK;
    TRY(ep_buf_need(be, &s->h_zero, (size_t)H * F, 1));
    memset(s->h_zero.p, 0, (size_t)H * F);
    TRY(kn_copy_to_backend(be, (float *)s->comb.p + (size_t)S * H, s->h_zero.p, (size_t)H * F));
    TRY(ep_buf_need(be, &s->slot, Tz * I, 0));
    TRY(ep_buf_need(be, &s->part, Tz * H * F, 0));
    int used = 0;
    for (int t = 0; t < T; t++)
        if (n_dest[t] > used)
            used = n_dest[t];
    for (int j = 0; j < used; j++) {
        TRY(kn_copy_to_backend(be, s->slot.p, slot + (size_t)j * Tz, Tz * I));
        TRY(kn_embedding(be, j ? s->part.p : out, s->comb.p, s->slot.p, T, (int)S + 1, H));
        if (j)
            TRY(kn_add(be, out, out, s->part.p, Tz * H));
    }
#undef TRY
    return TN_OK;
}
