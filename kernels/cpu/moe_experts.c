/* MoE expert MLPs on the CPU.
 *
 * Routes are grouped by expert so each expert's weights are read once per
 * call: its tokens are gathered into a dense block, multiplied by gate_up and
 * then by down with one sgemm each, and scattered back scaled by the routing
 * weight. The sgemm calls run outside OpenMP regions (OpenBLAS has its own
 * threads); the gathers and the activation use OpenMP between them. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/fp8.h"
#include "kernels/kn_check.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/moe.h"
#include "common/status.h"

/* Routes to this rank's experts, grouped by local expert: the routes of
 * expert e are entries [start[e], start[e+1]) of token/weight. */
typedef struct expert_routes {
    int *start;   /* [n_experts + 1] */
    int *token;   /* [n_routes] */
    float *weight;
    int max_count; /* most routes any one expert has */
} expert_routes;

static void expert_routes_free(expert_routes *g)
{
    free(g->start);
    free(g->token);
    free(g->weight);
}

static int expert_routes_build(expert_routes *g, const int32_t *expert_idx,
                               const float *expert_w, int n_tokens, int k,
                               const kn_moe_weights *w)
{
    memset(g, 0, sizeof *g);
    size_t n_routes = (size_t)n_tokens * k;
    g->start = calloc((size_t)w->n_experts + 1, sizeof *g->start);
    g->token = malloc((n_routes ? n_routes : 1) * sizeof *g->token);
    g->weight = malloc((n_routes ? n_routes : 1) * sizeof *g->weight);
    int *cursor = malloc((size_t)w->n_experts * sizeof *cursor);
    if (!g->start || !g->token || !g->weight || !cursor) {
        free(cursor);
        expert_routes_free(g);
        return TN_ERR_NOMEM;
    }
    /* Count per expert, prefix-sum into starts, then place each route. */
    for (size_t i = 0; i < n_routes; i++) {
        int e = expert_idx[i] - w->expert_offset;
        if (e >= 0 && e < w->n_experts)
            g->start[e + 1]++;
    }
    for (int e = 0; e < w->n_experts; e++) {
        if (g->start[e + 1] > g->max_count)
            g->max_count = g->start[e + 1];
        g->start[e + 1] += g->start[e];
        cursor[e] = g->start[e];
    }
    for (size_t i = 0; i < n_routes; i++) {
        int e = expert_idx[i] - w->expert_offset;
        if (e >= 0 && e < w->n_experts) {
            g->token[cursor[e]] = (int)(i / k);
            g->weight[cursor[e]] = expert_w[i];
            cursor[e]++;
        }
    }
    free(cursor);
    return TN_OK;
}

/* act[r][j] from h[r] = [gate | up] for rows [0, rows). */
static void expert_activation(float *act, const float *h, int rows, int inter,
                              const kn_moe_weights *w)
{
    #pragma omp parallel for schedule(static) if ((size_t)rows * inter > 16384)
    for (int r = 0; r < rows; r++) {
        const float *gate = h + (size_t)r * 2 * inter;
        const float *up = gate + inter;
        float *ar = act + (size_t)r * inter;
        if (w->act == KN_ACT_SWIGLU) {
            for (int j = 0; j < inter; j++)
                ar[j] = gate[j] / (1.0f + expf(-gate[j])) * up[j];
        } else {
            /* GPT-OSS: gate clamped above only, up clamped both sides, and
             * the +1 on up keeps a linear path through the gate. */
            for (int j = 0; j < inter; j++) {
                float g = fminf(gate[j], w->limit);
                float u = fminf(fmaxf(up[j], -w->limit), w->limit);
                ar[j] = g / (1.0f + expf(-w->alpha * g)) * (u + 1.0f);
            }
        }
    }
}

/* Copies `bias` into each of `rows` rows of out[rows][n] (sgemm then adds
 * onto it with beta = 1); returns the beta to use. */
static float bias_rows(float *out, const float *bias, int rows, int n)
{
    if (!bias)
        return 0.0f;
    for (int r = 0; r < rows; r++)
        memcpy(out + (size_t)r * n, bias, (size_t)n * sizeof(float));
    return 1.0f;
}

/* The routes' data (kn_moe_experts checked everything else). */
static int check_routes(const int32_t *expert_idx, const float *expert_w, int n_tokens, int k)
{
    static const char op[] = "kn_moe_experts";
    for (size_t i = 0; i < (size_t)n_tokens * k; i++) {
        if (expert_idx[i] < 0)
            return kn_arg_error(op, "token %zu route %zu has negative expert id %d", i / k,
                                i % k, (int)expert_idx[i]);
        if (!isfinite(expert_w[i]))
            return kn_arg_error(op, "token %zu route %zu has a non-finite weight", i / k, i % k);
    }
    return TN_OK;
}

int kn_moe_experts_cpu(float *out, const float *x, const int32_t *expert_idx,
                       const float *expert_w, int n_tokens, int k,
                       const kn_moe_weights *w)
{
    int rc = check_routes(expert_idx, expert_w, n_tokens, k);
    if (rc != TN_OK)
        return rc;
    int dim = w->dim, inter = w->inter;
    memset(out, 0, (size_t)n_tokens * dim * sizeof(float));

    expert_routes g;
    rc = expert_routes_build(&g, expert_idx, expert_w, n_tokens, k, w);
    if (rc != TN_OK)
        return rc;
    const int bf16 = w->wdtype == KN_BF16, fp8 = w->wdtype == KN_FP8_E4M3;
    const int narrow = bf16 || fp8;
    size_t max_rows = (size_t)(g.max_count ? g.max_count : 1);
    float *xs = malloc(max_rows * dim * sizeof(float));        /* gathered tokens */
    float *h = malloc(max_rows * 2 * inter * sizeof(float));   /* [gate | up] */
    float *act = malloc(max_rows * inter * sizeof(float));
    float *y = malloc(max_rows * dim * sizeof(float));         /* expert output */
    /* bf16 weights: one expert's matrices widened to fp32 at a time */
    float *gu_f = narrow ? malloc((size_t)2 * inter * dim * sizeof(float)) : NULL;
    float *dn_f = narrow ? malloc((size_t)dim * inter * sizeof(float)) : NULL;
    if (!xs || !h || !act || !y || (narrow && (!gu_f || !dn_f))) {
        rc = TN_ERR_NOMEM;
        goto done;
    }

    for (int e = 0; e < w->n_experts; e++) {
        int first = g.start[e], rows = g.start[e + 1] - first;
        if (rows == 0)
            continue;
        const float *gate_up, *down;
        if (bf16) {
            kn_bf16_to_f32_n(gu_f, (const uint16_t *)w->gate_up + (size_t)e * 2 * inter * dim,
                             (size_t)2 * inter * dim);
            kn_bf16_to_f32_n(dn_f, (const uint16_t *)w->down + (size_t)e * dim * inter,
                             (size_t)dim * inter);
            gate_up = gu_f;
            down = dn_f;
        } else if (fp8) {
            kn_fp8_dequantize_weight(gu_f, (const uint8_t *)w->gate_up +
                                     (size_t)e * kn_fp8_data_bytes(2 * (size_t)inter, dim),
                                     w->gate_up_scale +
                                     (size_t)e * kn_fp8_scale_count(2 * (size_t)inter, dim),
                                     2 * (size_t)inter, (size_t)dim);
            kn_fp8_dequantize_weight(dn_f, (const uint8_t *)w->down +
                                     (size_t)e * kn_fp8_data_bytes(dim, inter),
                                     w->down_scale + (size_t)e * kn_fp8_scale_count(dim, inter),
                                     (size_t)dim, (size_t)inter);
            gate_up = gu_f;
            down = dn_f;
        } else {
            gate_up = (const float *)w->gate_up + (size_t)e * 2 * inter * dim;
            down = (const float *)w->down + (size_t)e * dim * inter;
        }
        const float *gate_up_bias = w->gate_up_bias ? w->gate_up_bias + (size_t)e * 2 * inter : NULL;
        const float *down_bias = w->down_bias ? w->down_bias + (size_t)e * dim : NULL;

        #pragma omp parallel for schedule(static) if ((size_t)rows * dim > 65536)
        for (int r = 0; r < rows; r++) {
            float *dst = xs + (size_t)r * dim;
            const float *src = x + (size_t)g.token[first + r] * dim;
            if (fp8)
                kn_fp8_round_act_row(dst, src, (size_t)dim);
            else
                memcpy(dst, src, (size_t)dim * sizeof(float));
            for (int d = 0; bf16 && d < dim; d++)
                dst[d] = kn_round_bf16(dst[d]);
        }

        float beta = bias_rows(h, gate_up_bias, rows, 2 * inter);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, 2 * inter, dim, 1.0f,
                    xs, dim, gate_up, dim, beta, h, 2 * inter);
        expert_activation(act, h, rows, inter, w);
        for (size_t i = 0; bf16 && i < (size_t)rows * inter; i++)
            act[i] = kn_round_bf16(act[i]);
        for (int r = 0; fp8 && r < rows; r++)
            kn_fp8_round_act_row(act + (size_t)r * inter, act + (size_t)r * inter, (size_t)inter);
        beta = bias_rows(y, down_bias, rows, dim);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, dim, inter, 1.0f,
                    act, inter, down, inter, beta, y, dim);

        /* Serial over rows: a token listed twice for one expert must not race. */
        for (int r = 0; r < rows; r++) {
            float *ot = out + (size_t)g.token[first + r] * dim;
            const float *yr = y + (size_t)r * dim;
            float wr = g.weight[first + r];
            for (int d = 0; d < dim; d++)
                ot[d] += wr * yr[d];
        }
    }
done:
    free(gu_f);
    free(dn_f);
    free(xs);
    free(h);
    free(act);
    free(y);
    expert_routes_free(&g);
    return rc;
}
