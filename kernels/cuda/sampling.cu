/* Token sampling on the GPU with the CPU backend's semantics
 * (kernels/cpu/sampling.c): the same checks and messages, the same kept set
 * and order, the same generator use (greedy rows leave their generator
 * alone, every other row advances it exactly once, drawn on the host with
 * kn_rng_uniform), the same double-precision p_i = exp((l_i - max) / T).
 *
 * Steps:
 *  1. sample_check_kernel, one block per row: argmax over the finite logits
 *     (lowest id on ties) and the first NaN/+inf logit; copied back so the
 *     host reports the first bad row exactly as the CPU does, before any
 *     generator moves.
 *  2. Rows with top_k or top_p need the order "higher logit first, then
 *     lower id": one stable segmented radix sort (descending) of
 *     (logit, id) over the batch's rows.
 *  3. sample_draw_kernel, one block per random row, on that order (or id
 *     order when neither top_k nor top_p is set): total mass, the top-k
 *     and top-p cuts, and the first token whose running mass exceeds
 *     u * mass, with block-wide prefix sums in double.
 *
 * Exactness: the kept set, its order and u are identical to the CPU's; the
 * sums of p are taken in a different order (tree instead of left to right)
 * and CUDA's double exp may differ from glibc's in the last bit, so the
 * running mass differs from the CPU's by ~1e-16 relative. The drawn token
 * can differ only when u * mass falls within that distance of a boundary
 * between two tokens: about 1e-15 per draw. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_segmented_sort.cuh>
#include "kernels/cuda/cuda_common.cuh"
extern "C" {
#include "kernels/sampling.h"
#include "kernels/cuda/cuda_ops.h"
}

namespace {

const int SAMPLE_THREADS = 1024;

struct MinInt {
    __device__ int operator()(int a, int b) const { return a < b ? a : b; }
};
struct MaxInt {
    __device__ int operator()(int a, int b) const { return a > b ? a : b; }
};

/* Per-row draw parameters, filled on the host. */
struct RowDraw {
    double u;      /* kn_rng_uniform draw; unused for greedy rows */
    double inv_t;  /* 1 / temperature */
    double top_p;  /* as a double, the CPU's promotion */
    int top_k;     /* 0: no top-k cut (top_k <= 0 or >= vocab) */
    int random;    /* 0: greedy */
    int sorted;    /* reads the sorted order (top_k or top_p set) */
    int argmax;
};

__global__ void __launch_bounds__(SAMPLE_THREADS)
sample_check_kernel(const float *logits, int vocab, int *argmax, int *first_bad)
{
    typedef cub::BlockReduce<int, SAMPLE_THREADS> ReduceInt;
    __shared__ typename ReduceInt::TempStorage tmp;
    __shared__ float best_vals[SAMPLE_THREADS / 32];
    __shared__ int best_ids[SAMPLE_THREADS / 32];
    const float *l = logits + (size_t)blockIdx.x * vocab;
    float best = -INFINITY;
    int best_id = INT_MAX, bad = INT_MAX;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        float v = l[i];
        if (isnan(v) || v == INFINITY) {
            bad = min(bad, i);
        } else if (v != -INFINITY && (best_id == INT_MAX || v > best)) {
            best = v; /* ids rise along the loop, so ties keep the lower one */
            best_id = i;
        }
    }
    int bad_min = ReduceInt(tmp).Reduce(bad, MinInt());
    /* Warp then block argmax, larger value first, then lower id. */
    for (int off = 16; off > 0; off >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, off);
        int oi = __shfl_xor_sync(0xffffffffu, best_id, off);
        if (oi != INT_MAX && (best_id == INT_MAX || ov > best || (ov == best && oi < best_id))) {
            best = ov;
            best_id = oi;
        }
    }
    if ((threadIdx.x & 31) == 0) {
        best_vals[threadIdx.x >> 5] = best;
        best_ids[threadIdx.x >> 5] = best_id;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); w++) {
            float ov = best_vals[w];
            int oi = best_ids[w];
            if (oi != INT_MAX && (best_id == INT_MAX || ov > best || (ov == best && oi < best_id))) {
                best = ov;
                best_id = oi;
            }
        }
        argmax[blockIdx.x] = best_id == INT_MAX ? -1 : best_id;
        first_bad[blockIdx.x] = bad_min;
    }
}

/* keys = logits with -0 turned into +0 (the CPU compares them equal, the
 * radix sort would not), vals = token ids, offsets = row starts. */
__global__ void sample_sort_prep_kernel(float *keys, int *vals, int *offsets, const float *logits,
                                        int n_rows, int vocab)
{
    size_t total = (size_t)n_rows * vocab;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        keys[i] = logits[i] + 0.0f;
        vals[i] = (int)(i % vocab);
        if (i % vocab == 0)
            offsets[i / vocab] = (int)i;
        if (i == total - 1)
            offsets[n_rows] = (int)total;
    }
}

struct DrawShared {
    typename cub::BlockReduce<double, SAMPLE_THREADS>::TempStorage red_d;
    typename cub::BlockReduce<int, SAMPLE_THREADS>::TempStorage red_i;
    typename cub::BlockScan<double, SAMPLE_THREADS>::TempStorage scan;
};

/* Entry i of the row in the order the draw walks: its logit and token id. */
struct RowView {
    const float *logit;
    const int *id; /* NULL: id order */
    __device__ float l(int i) const { return logit[i]; }
    __device__ int tok(int i) const { return id ? id[i] : i; }
};

__device__ __forceinline__ double row_p(const RowView &v, int i, double max_logit, double inv_t)
{
    return exp(((double)v.l(i) - max_logit) * inv_t);
}

/* Sum of p over entries [0, n). */
__device__ double block_mass(DrawShared &sh, const RowView &v, int n, double max_logit, double inv_t)
{
    double part = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        double p = row_p(v, i, max_logit, inv_t);
        if (p > 0.0)
            part += p;
    }
    double total = cub::BlockReduce<double, SAMPLE_THREADS>(sh.red_d).Sum(part);
    __shared__ double bcast;
    if (threadIdx.x == 0)
        bcast = total;
    __syncthreads();
    total = bcast;
    __syncthreads();
    return total;
}

/* First i in [0, n) whose running mass (p of entries 0..i, p <= 0 counted
 * as 0) is > x (strict) or >= x; n when none. */
__device__ int block_first_crossing(DrawShared &sh, const RowView &v, int n, double max_logit,
                                    double inv_t, double x, bool strict)
{
    __shared__ double carry_sh;
    __shared__ int found_sh;
    double carry = 0.0;
    for (int start = 0; start < n; start += blockDim.x) {
        int i = start + threadIdx.x;
        double p = 0.0;
        if (i < n) {
            p = row_p(v, i, max_logit, inv_t);
            if (!(p > 0.0))
                p = 0.0;
        }
        double run, chunk_total;
        cub::BlockScan<double, SAMPLE_THREADS>(sh.scan).InclusiveSum(p, run, chunk_total);
        run += carry;
        /* p > 0: an entry adding nothing cannot be where the mass crosses. */
        bool hit = i < n && p > 0.0 && (strict ? run > x : run >= x);
        int first = cub::BlockReduce<int, SAMPLE_THREADS>(sh.red_i).Reduce(hit ? i : INT_MAX, MinInt());
        if (threadIdx.x == 0) {
            found_sh = first;
            carry_sh = carry + chunk_total;
        }
        __syncthreads();
        first = found_sh;
        carry = carry_sh;
        __syncthreads();
        if (first != INT_MAX)
            return first;
    }
    return n;
}

/* Last entry in [0, n) with p > 0 (the CPU's fallback when u * mass rounds
 * up to the whole mass); -1 when none. */
__device__ int block_last_positive(DrawShared &sh, const RowView &v, int n, double max_logit,
                                   double inv_t)
{
    int last = -1;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        if (row_p(v, i, max_logit, inv_t) > 0.0)
            last = i;
    int r = cub::BlockReduce<int, SAMPLE_THREADS>(sh.red_i).Reduce(last, MaxInt());
    __shared__ int bcast;
    if (threadIdx.x == 0)
        bcast = r;
    __syncthreads();
    r = bcast;
    __syncthreads();
    return r;
}

/* Number of entries in [0, n) with p > 0 (they come first in sorted order). */
__device__ int block_count_positive(DrawShared &sh, const RowView &v, int n, double max_logit,
                                    double inv_t)
{
    int c = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        if (row_p(v, i, max_logit, inv_t) > 0.0)
            c++;
    int r = cub::BlockReduce<int, SAMPLE_THREADS>(sh.red_i).Sum(c);
    __shared__ int bcast;
    if (threadIdx.x == 0)
        bcast = r;
    __syncthreads();
    r = bcast;
    __syncthreads();
    return r;
}

/* Number of entries in [0, n) with p >= cut: a prefix of the sorted order. */
__device__ int block_count_at_least(DrawShared &sh, const RowView &v, int n, double max_logit,
                                    double inv_t, double cut)
{
    int c = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        if (row_p(v, i, max_logit, inv_t) >= cut)
            c++;
    int r = cub::BlockReduce<int, SAMPLE_THREADS>(sh.red_i).Sum(c);
    __shared__ int bcast;
    if (threadIdx.x == 0)
        bcast = r;
    __syncthreads();
    r = bcast;
    __syncthreads();
    return r;
}

__global__ void __launch_bounds__(SAMPLE_THREADS)
sample_draw_kernel(int *tokens, const float *logits, const float *sorted_keys,
                   const int *sorted_ids, const RowDraw *rows, int vocab)
{
    __shared__ DrawShared sh;
    const RowDraw rd = rows[blockIdx.x];
    if (!rd.random) {
        if (threadIdx.x == 0)
            tokens[blockIdx.x] = rd.argmax;
        return;
    }
    const size_t base = (size_t)blockIdx.x * vocab;
    const double max_logit = logits[base + rd.argmax];
    RowView v;
    if (rd.sorted) {
        v.logit = sorted_keys + base;
        v.id = sorted_ids + base;
    } else {
        v.logit = logits + base;
        v.id = NULL;
    }
    int n = vocab;
    double mass;
    if (!rd.sorted) {
        mass = block_mass(sh, v, n, max_logit, rd.inv_t);
    } else {
        /* Tokens with p > 0 lead the sorted order; only they are candidates. */
        int n_pos = block_count_positive(sh, v, vocab, max_logit, rd.inv_t);
        n = rd.top_k && rd.top_k < n_pos ? rd.top_k : n_pos;
        mass = block_mass(sh, v, n, max_logit, rd.inv_t);
        if (rd.top_p < 1.0) {
            double target = rd.top_p * mass;
            if (!rd.top_k) {
                double cut = (1.0 - rd.top_p) * mass / n;
                n = block_count_at_least(sh, v, n, max_logit, rd.inv_t, cut);
            }
            int last = block_first_crossing(sh, v, n, max_logit, rd.inv_t, target, false);
            if (last < n)
                n = last + 1;
            mass = block_mass(sh, v, n, max_logit, rd.inv_t);
        }
    }
    int pick = block_first_crossing(sh, v, n, max_logit, rd.inv_t, rd.u * mass, true);
    if (pick >= n)
        pick = rd.sorted ? n - 1 : block_last_positive(sh, v, n, max_logit, rd.inv_t);
    if (threadIdx.x == 0)
        tokens[blockIdx.x] = v.tok(pick);
}

} // namespace

extern "C" int kn_sample_cuda(const kn_backend *be, int32_t *tokens, const float *logits,
                              int n_rows, int vocab, const kn_sampling *params,
                              uint64_t *rng_state)
{
    static const char op[] = "kn_sample";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK)
        return rc;
    if (n_rows == 0)
        return TN_OK;
    if ((size_t)n_rows * vocab > (size_t)INT_MAX)
        return kn_arg_error(op, "%d rows x %d vocab is over the CUDA kernel's limit", n_rows, vocab);

    cudaStream_t s = kn_cuda_stream(be);
    cudaError_t err = cudaSuccess;
    int *d_argmax = NULL, *d_bad = NULL, *d_tokens = NULL, *h_ints = NULL;
    int *sort_vals = NULL, *sort_ids = NULL, *sort_off = NULL;
    float *sort_in = NULL, *sort_keys = NULL;
    void *sort_tmp = NULL;
    RowDraw *h_rows = NULL, *d_rows = NULL;
    bool any_random = false, any_sorted = false;

    h_ints = (int *)malloc((size_t)n_rows * 2 * sizeof(int));
    h_rows = (RowDraw *)calloc((size_t)n_rows, sizeof(RowDraw));
    d_argmax = (int *)kn_cuda_tmp_alloc(be, op, (size_t)n_rows * 2 * sizeof(int));
    if (!h_ints || !h_rows || !d_argmax) {
        rc = TN_ERR_NOMEM;
        goto done;
    }
    d_bad = d_argmax + n_rows;
    sample_check_kernel<<<n_rows, SAMPLE_THREADS, 0, s>>>(logits, vocab, d_argmax, d_bad);
    if ((err = cudaGetLastError()) != cudaSuccess ||
        (err = cudaMemcpyAsync(h_ints, d_argmax, (size_t)n_rows * 2 * sizeof(int),
                               cudaMemcpyDeviceToHost, s)) != cudaSuccess ||
        (err = cudaStreamSynchronize(s)) != cudaSuccess)
        goto done;

    /* Every row is checked, in row order, before any generator moves. */
    for (int r = 0; r < n_rows; r++) {
        const kn_sampling *sp = &params[r];
        if (!(sp->temperature >= 0.0f) || isinf(sp->temperature)) {
            rc = kn_arg_error(op, "row %d: temperature %g must be finite and >= 0", r,
                                   (double)sp->temperature);
            goto done;
        }
        if (!(sp->top_p > 0.0f && sp->top_p <= 1.0f)) {
            rc = kn_arg_error(op, "row %d: top_p %g must be in (0, 1]", r, (double)sp->top_p);
            goto done;
        }
        int bad = h_ints[n_rows + r];
        if (bad != INT_MAX) {
            float v = 0.f;
            if ((err = cudaMemcpy(&v, logits + (size_t)r * vocab + bad, sizeof v,
                                  cudaMemcpyDeviceToHost)) != cudaSuccess)
                goto done;
            rc = kn_arg_error(op, "row %d: logit %d is %g", r, bad, (double)v);
            goto done;
        }
        if (h_ints[r] < 0) {
            rc = kn_arg_error(op, "row %d: no finite logit", r);
            goto done;
        }
    }
    for (int r = 0; r < n_rows; r++) {
        const kn_sampling *sp = &params[r];
        RowDraw *rd = &h_rows[r];
        tokens[r] = h_ints[r];
        rd->argmax = h_ints[r];
        if (sp->temperature == 0.0f)
            continue;
        rd->random = 1;
        rd->inv_t = 1.0 / sp->temperature;
        rd->top_p = sp->top_p;
        rd->top_k = sp->top_k > 0 && sp->top_k < vocab ? sp->top_k : 0;
        rd->sorted = rd->top_k || sp->top_p < 1.0f;
        rd->u = kn_rng_uniform(&rng_state[r]);
        any_random = true;
        any_sorted |= rd->sorted != 0;
    }
    if (!any_random)
        goto done;

    d_rows = (RowDraw *)kn_cuda_tmp_alloc(be, op, (size_t)n_rows * sizeof(RowDraw));
    d_tokens = (int *)kn_cuda_tmp_alloc(be, op, (size_t)n_rows * sizeof(int));
    if (!d_rows || !d_tokens) {
        rc = TN_ERR_NOMEM;
        goto done;
    }
    if ((err = cudaMemcpyAsync(d_rows, h_rows, (size_t)n_rows * sizeof(RowDraw),
                               cudaMemcpyHostToDevice, s)) != cudaSuccess)
        goto done;
    if (any_sorted) {
        /* The whole batch is sorted when any row needs it: simpler than
         * gathering the rows that do, and a decode batch usually shares
         * its sampling settings. */
        int total = n_rows * vocab;
        size_t tmp_bytes = 0;
        sort_in = (float *)kn_cuda_tmp_alloc(be, op, (size_t)total * sizeof(float));
        sort_keys = (float *)kn_cuda_tmp_alloc(be, op, (size_t)total * sizeof(float));
        sort_vals = (int *)kn_cuda_tmp_alloc(be, op, (size_t)total * sizeof(int));
        sort_ids = (int *)kn_cuda_tmp_alloc(be, op, (size_t)total * sizeof(int));
        sort_off = (int *)kn_cuda_tmp_alloc(be, op, (size_t)(n_rows + 1) * sizeof(int));
        if (!sort_in || !sort_keys || !sort_vals || !sort_ids || !sort_off) {
            rc = TN_ERR_NOMEM;
            goto done;
        }
        int blocks = kn_cuda_div_up(total, 256);
        int cap = kn_cuda_ctx_of(be)->sm_count * 16;
        sample_sort_prep_kernel<<<blocks < cap ? blocks : cap, 256, 0, s>>>(sort_in, sort_vals, sort_off,
                                                                          logits, n_rows, vocab);
        if ((err = cudaGetLastError()) != cudaSuccess)
            goto done;
        if ((err = cub::DeviceSegmentedSort::StableSortPairsDescending(
                 NULL, tmp_bytes, sort_in, sort_keys, sort_vals, sort_ids, total, n_rows, sort_off,
                 sort_off + 1, s)) != cudaSuccess)
            goto done;
        sort_tmp = kn_cuda_tmp_alloc(be, op, tmp_bytes);
        if (!sort_tmp) {
            rc = TN_ERR_NOMEM;
            goto done;
        }
        if ((err = cub::DeviceSegmentedSort::StableSortPairsDescending(
                 sort_tmp, tmp_bytes, sort_in, sort_keys, sort_vals, sort_ids, total, n_rows,
                 sort_off, sort_off + 1, s)) != cudaSuccess)
            goto done;
    }
    sample_draw_kernel<<<n_rows, SAMPLE_THREADS, 0, s>>>(d_tokens, logits, sort_keys, sort_ids,
                                                         d_rows, vocab);
    if ((err = cudaGetLastError()) != cudaSuccess ||
        (err = cudaMemcpyAsync(h_ints, d_tokens, (size_t)n_rows * sizeof(int),
                               cudaMemcpyDeviceToHost, s)) != cudaSuccess ||
        (err = cudaStreamSynchronize(s)) != cudaSuccess)
        goto done;
    for (int r = 0; r < n_rows; r++)
        tokens[r] = h_ints[r];

done:
    kn_cuda_tmp_free(be, d_argmax);
    kn_cuda_tmp_free(be, d_rows);
    kn_cuda_tmp_free(be, d_tokens);
    kn_cuda_tmp_free(be, sort_in);
    kn_cuda_tmp_free(be, sort_keys);
    kn_cuda_tmp_free(be, sort_vals);
    kn_cuda_tmp_free(be, sort_ids);
    kn_cuda_tmp_free(be, sort_off);
    kn_cuda_tmp_free(be, sort_tmp);
    free(h_ints);
    free(h_rows);
    if (err != cudaSuccess)
        return kn_cuda_device_error(op, "sampling", err);
    return rc;
}
