/* Log-probabilities on the GPU (kernels/logprobs.h), with the CPU
 * backend's semantics (kernels/cpu/logprobs.c): one block per row finds the
 * max and the first bad value, sums exp(l - max) in double, then picks the
 * top_n tokens one at a time: pick j is the best token ranking strictly
 * after pick j - 1 in the order "higher logit first, then lower id", so no
 * set of excluded ids is kept. top_n <= 20 passes over the row (a row of
 * the 201k o200k vocabulary is 0.8 MB, read from L2 after the first pass).
 *
 * Exactness against the CPU: the same max and the same picks (comparisons
 * only); the double sum is taken in a different order, so log_z and every
 * logprob differ by ~1e-16 relative before the final rounding to float. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <cub/block/block_reduce.cuh>
#include "kernels/cuda/cuda_common.cuh"
extern "C" {
#include "kernels/kn_check.h"
#include "kernels/logprobs.h"
#include "kernels/cuda/cuda_ops.h"
}

namespace {

const int LP_THREADS = 512;

struct Cand {
    float v;
    int id; /* INT_MAX: none */
};

/* 1 when a ranks before b (a real candidate always ranks before none). */
__device__ __forceinline__ bool before(const Cand &a, const Cand &b)
{
    if (a.id == INT_MAX)
        return false;
    if (b.id == INT_MAX)
        return true;
    return a.v > b.v || (a.v == b.v && a.id < b.id);
}

struct Best {
    __device__ Cand operator()(const Cand &a, const Cand &b) const { return before(b, a) ? b : a; }
};
struct MinInt {
    __device__ int operator()(int a, int b) const { return a < b ? a : b; }
};
struct SumDouble {
    __device__ double operator()(double a, double b) const { return a + b; }
};

/* out_lp [n_rows][1 + top_n]: the chosen token's logprob then the top's;
 * bad[r]: INT_MAX when the row is fine, the first NaN/+inf index, or -1
 * when every logit is -inf. */
__global__ void __launch_bounds__(LP_THREADS)
logprobs_kernel(const float *logits, int vocab, const int *tokens, int top_n, float *out_lp,
                int *out_ids, int *bad)
{
    typedef cub::BlockReduce<Cand, LP_THREADS> ReduceCand;
    typedef cub::BlockReduce<int, LP_THREADS> ReduceInt;
    typedef cub::BlockReduce<double, LP_THREADS> ReduceDouble;
    __shared__ union {
        typename ReduceCand::TempStorage cand;
        typename ReduceInt::TempStorage i;
        typename ReduceDouble::TempStorage d;
    } tmp;
    __shared__ Cand s_pick;
    __shared__ double s_log_z;
    __shared__ int s_bad;
    const int r = blockIdx.x;
    const float *l = logits + (size_t)r * vocab;

    Cand best = { -INFINITY, INT_MAX };
    int first_bad = INT_MAX;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        float v = l[i];
        if (isnan(v) || v == INFINITY)
            first_bad = min(first_bad, i);
        else if (v != -INFINITY && (best.id == INT_MAX || v > best.v))
            best = Cand{ v, i };
    }
    Cand mx = ReduceCand(tmp.cand).Reduce(best, Best());
    __syncthreads();
    int b = ReduceInt(tmp.i).Reduce(first_bad, MinInt());
    if (threadIdx.x == 0) {
        s_pick = mx;
        s_bad = b != INT_MAX ? b : mx.id == INT_MAX ? -1 : INT_MAX;
        bad[r] = s_bad;
    }
    __syncthreads();
    if (s_bad != INT_MAX)
        return;
    const double m = (double)s_pick.v;
    double part = 0.0;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x)
        part += exp((double)l[i] - m);
    __syncthreads();
    double sum = ReduceDouble(tmp.d).Reduce(part, SumDouble());
    if (threadIdx.x == 0) {
        s_log_z = m + log(sum);
        float *o = out_lp + (size_t)r * (1 + top_n);
        o[0] = tokens && tokens[r] >= 0 ? (float)((double)l[tokens[r]] - s_log_z) : NAN;
    }
    __syncthreads();
    Cand prev = { INFINITY, -1 }; /* ranks before every token */
    for (int j = 0; j < top_n; j++) {
        Cand c = { -INFINITY, INT_MAX };
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
            Cand x = { l[i], i };
            bool after_prev = x.v < prev.v || (x.v == prev.v && x.id > prev.id);
            if (after_prev && before(x, c))
                c = x;
        }
        Cand pick = ReduceCand(tmp.cand).Reduce(c, Best());
        if (threadIdx.x == 0) {
            s_pick = pick;
            out_ids[(size_t)r * top_n + j] = pick.id;
            out_lp[(size_t)r * (1 + top_n) + 1 + j] = (float)((double)pick.v - s_log_z);
        }
        __syncthreads();
        prev = s_pick;
        __syncthreads();
    }
}

} // namespace

extern "C" int kn_logprobs_cuda(const kn_backend *be, const float *logits, int n_rows, int vocab,
                                const int32_t *tokens, float *token_logprob, int top_n,
                                int32_t *top_ids, float *top_logprobs)
{
    static const char op[] = "kn_logprobs";
    int rc = kn_cuda_check_backend(op, be);
    if (rc != TN_OK || n_rows == 0)
        return rc;
    cudaStream_t s = kn_cuda_stream(be);
    cudaError_t err = cudaSuccess;
    const size_t n_lp = (size_t)n_rows * (1 + top_n), n_ids = (size_t)n_rows * top_n;
    const size_t bytes = n_lp * sizeof(float) + (n_ids + 2 * (size_t)n_rows) * sizeof(int);
    char *d = (char *)kn_cuda_tmp_alloc(be, op, bytes);
    char *h = (char *)malloc(bytes);
    if (!d || !h) {
        kn_cuda_tmp_free(be, d);
        free(h);
        return TN_ERR_NOMEM;
    }
    float *d_lp = (float *)d, *h_lp = (float *)h;
    int *d_ids = (int *)(d_lp + n_lp), *h_ids = (int *)(h_lp + n_lp);
    int *d_bad = d_ids + n_ids, *h_bad = h_ids + n_ids;
    int *d_tok = d_bad + n_rows;
    if (token_logprob)
        err = cudaMemcpyAsync(d_tok, tokens, (size_t)n_rows * sizeof(int), cudaMemcpyHostToDevice, s);
    if (err == cudaSuccess) {
        logprobs_kernel<<<n_rows, LP_THREADS, 0, s>>>(logits, vocab, token_logprob ? d_tok : NULL,
                                                      top_n, d_lp, d_ids, d_bad);
        if ((err = cudaGetLastError()) == cudaSuccess &&
            (err = cudaMemcpyAsync(h, d, bytes - (size_t)n_rows * sizeof(int),
                                   cudaMemcpyDeviceToHost, s)) == cudaSuccess)
            err = cudaStreamSynchronize(s);
    }
    for (int r = 0; err == cudaSuccess && rc == TN_OK && r < n_rows; r++) {
        if (h_bad[r] == -1) {
            rc = kn_arg_error(op, "row %d: every logit is -inf", r);
        } else if (h_bad[r] != INT_MAX) {
            float v = 0.0f;
            if ((err = cudaMemcpy(&v, logits + (size_t)r * vocab + h_bad[r], sizeof v,
                                  cudaMemcpyDeviceToHost)) == cudaSuccess)
                rc = kn_arg_error(op, "row %d: logit %d is %g", r, h_bad[r], (double)v);
        }
    }
    if (err == cudaSuccess && rc == TN_OK) {
        for (int r = 0; r < n_rows; r++) {
            const float *row = h_lp + (size_t)r * (1 + top_n);
            if (token_logprob)
                token_logprob[r] = row[0];
            for (int j = 0; j < top_n; j++) {
                top_ids[(size_t)r * top_n + j] = h_ids[(size_t)r * top_n + j];
                top_logprobs[(size_t)r * top_n + j] = row[1 + j];
            }
        }
    }
    kn_cuda_tmp_free(be, d);
    free(h);
    if (err != cudaSuccess)
        return kn_cuda_device_error(op, "logprobs", err);
    return rc;
}
