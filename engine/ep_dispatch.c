#include "engine/ep_dispatch.h"
#include <stdlib.h>
#include <string.h>
#include "engine/comm.h"
#include "engine/model_internal.h"
#include "kernels/ep_exchange.h"
#include "kernels/moe.h"
#include "common/status.h"

struct tm_ep_state {
    int cap;                  /* this step's rows per peer (0: nobody has tokens) */
    tm_buf counts;            /* [1 + W] int32: own T, then everyone's (device comms) */
    tm_buf send, recv;        /* [W][cap] packed rows */
    tm_buf slot;              /* [W][T] row of each token in each peer's block, or -1 */
    tm_buf rx, reidx, rew;    /* the received rows, unpacked */
    tm_buf shares;            /* [W * cap][H] this rank's shares of the received rows */
    tm_buf back;              /* [W * cap][H] the peers' shares of this rank's rows */
};

/* Grows b (backend memory) to at least `bytes` (at least 1, so empty
 * exchanges still have a valid pointer); contents are not kept. */
static int ep_buf_need(const kn_backend *be, tm_buf *b, size_t bytes)
{
    if (bytes == 0)
        bytes = 1;
    if (bytes <= b->cap)
        return TN_OK;
    if (b->p)
        kn_free(be, b->p);
    b->cap = 0;
    size_t cap = bytes + bytes / 2;
    b->p = kn_malloc(be, cap);
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
    tm_buf *bufs[] = {&s->counts, &s->send, &s->recv, &s->slot, &s->rx,
                      &s->reidx, &s->rew, &s->shares, &s->back};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        if (bufs[i]->p)
            kn_free(be, bufs[i]->p);
    free(s);
}

/* s->cap = the largest T over the group: one all-gather of an int per
 * step. A device communicator takes device buffers, so its result comes
 * back with one small copy (a sync) per step. */
static int agree_cap(tm_model *m, int T)
{
    comm *ep = m->par.ep;
    tm_ep_state *s = m->ep;
    const int W = comm_size(ep);
    int32_t mine = T, all[COMM_MAX_WORLD];
    int rc;
    if (comm_memory(ep) == KN_BACKEND_CPU) {
        rc = comm_all_gather(ep, &mine, all, sizeof(int32_t));
    } else {
        const size_t n = sizeof(int32_t) * (size_t)(1 + W);
        rc = ep_buf_need(m->be, &s->counts, n);
        int32_t *dev = s->counts.p;
        if (!rc)
            rc = kn_copy_to_backend(m->be, dev, &mine, sizeof(int32_t));
        if (!rc)
            rc = comm_all_gather(ep, dev, dev + 1, sizeof(int32_t));
        if (!rc)
            rc = kn_copy_to_host(m->be, all, dev + 1, (size_t)W * sizeof(int32_t));
    }
    if (rc)
        return rc;
    int cap = 0;
    for (int p = 0; p < W; p++) {
        if (all[p] < 0)
            return TN_ERR_PEER;   /* not a count: the group is out of step */
        if (all[p] > cap)
            cap = all[p];
    }
    s->cap = cap;
    return TN_OK;
}

int tm_ep_dispatch_moe(tm_model *m, int layer, const float *xn, const int32_t *eidx,
                       const float *ew, int T, float *out)
{
    tm_ep_state *s = m->ep;
    comm *ep = m->par.ep;
    const kn_backend *be = m->be;
    if (!s || !ep || T < 0 || (T > 0 && (!xn || !eidx || !ew || !out)))
        return TN_ERR_ARG;
    int rc = TN_OK;
#define TRY(call) do { if ((rc = (call)) != TN_OK) return rc; } while (0)
    if (layer == 0)
        TRY(agree_cap(m, T));
    const int W = comm_size(ep), K = m->cfg.n_experts_per_tok, H = m->cfg.hidden_size;
    const int cap = s->cap;
    if (T > cap)
        return TN_ERR_ARG;   /* a layer called with another T than layer 0 */
    if (cap == 0)
        return TN_OK;        /* no rank has tokens this step */
    const size_t F = sizeof(float), rows = (size_t)W * cap;
    const size_t row_bytes = KN_EP_ROW_WORDS(H, K) * 4;
    TRY(ep_buf_need(be, &s->send, rows * row_bytes));
    TRY(ep_buf_need(be, &s->recv, rows * row_bytes));
    TRY(ep_buf_need(be, &s->slot, (size_t)W * T * sizeof(int32_t)));
    TRY(ep_buf_need(be, &s->rx, rows * H * F));
    TRY(ep_buf_need(be, &s->reidx, rows * K * sizeof(int32_t)));
    TRY(ep_buf_need(be, &s->rew, rows * K * F));
    TRY(ep_buf_need(be, &s->shares, rows * H * F));
    TRY(ep_buf_need(be, &s->back, rows * H * F));

    /* experts are split evenly, in order: rank p holds
     * [p * per_rank, (p + 1) * per_rank) */
    TRY(kn_ep_pack(be, s->send.p, s->slot.p, xn, eidx, ew, T, K, H, W, m->shard.n_experts,
                   cap));
    size_t block[COMM_MAX_WORLD];
    for (int p = 0; p < W; p++)
        block[p] = (size_t)cap * row_bytes;
    TRY(comm_all_to_all_v(ep, s->send.p, block, s->recv.p, block));
    TRY(kn_ep_unpack(be, s->rx.p, s->reidx.p, s->rew.p, s->recv.p, (int)rows, K, H));
    TRY(kn_moe_experts(be, s->shares.p, s->rx.p, s->reidx.p, s->rew.p, (int)rows, K,
                       &m->moe[layer]));
    for (int p = 0; p < W; p++)
        block[p] = (size_t)cap * H * F;
    TRY(comm_all_to_all_v(ep, s->shares.p, block, s->back.p, block));
    if (T > 0)
        TRY(kn_ep_combine(be, out, s->back.p, s->slot.p, T, H, W, cap));
#undef TRY
    return TN_OK;
}
