/* Internal to the CUDA backend: the set-up the attention kernels share
 * (attention.cu's fp32 flash, split-KV and decode kernels, attention_mma.cu's
 * bf16 kernel). Each kernel's argument struct has the fields filled by
 * kn_attn_args_fill (q, the pools, the batch arrays, sinks, sizes,
 * scale_log2); the device helpers read only those.
 *
 * Query vectors: row r of a sequence and query head kvh * group + g of KV
 * head kvh form vector v = r * group + g of that (sequence, KV head), at
 * position first_pos + r (first_pos = kv_len - rows). */
#ifndef TANDEM_KERNELS_CUDA_ATTENTION_SETUP_CUH
#define TANDEM_KERNELS_CUDA_ATTENTION_SETUP_CUH
#include <math.h>
#include "kernels/cuda/cuda_common.cuh"
extern "C" {
#include "kernels/attention.h"
}

/* log2(e): the kernels keep scores and the softmax max in the log2 domain
 * (exp2f), so q is scaled by scale * log2(e) and the sinks by log2(e). */
#define KN_ATTN_LOG2E 1.4426950408889634f

/* The fields every kernel's arguments share, from kn_attention's. */
template <class Args>
static inline void kn_attn_args_fill(Args &a, float *out, const float *q, const void *k_pool,
                                     const void *v_pool, const kn_seq_batch *b, int n_heads,
                                     int n_kv_heads, int page_size, float scale,
                                     const float *sinks, int window)
{
    a.out = out;
    a.q = q;
    a.k_pool = k_pool;
    a.v_pool = v_pool;
    a.q_offset = b->q_offset;
    a.kv_len = b->kv_len;
    a.page_table = b->page_table;
    a.sinks = sinks;
    a.max_pages = b->max_pages;
    a.n_pages = b->n_pages;
    a.n_heads = n_heads;
    a.n_kv_heads = n_kv_heads;
    a.group = n_heads / n_kv_heads;
    a.page_size = page_size;
    a.window = window;
    a.scale_log2 = scale * KN_ATTN_LOG2E;
}

/* Dims 4*c4..4*c4+3 of query vector v (of nvec; zeros past them) of KV head
 * kvh in the sequence whose rows start at q0, times scale_log2. */
template <int D, class Args>
static __device__ __forceinline__ float4 kn_attn_q4(const Args &a, int q0, int kvh, int v, int nvec,
                                                    int c4)
{
    float4 val = make_float4(0.f, 0.f, 0.f, 0.f);
    if (v < nvec) {
        int rl = v / a.group, g = v - rl * a.group;
        val = *(const float4 *)(a.q + ((size_t)(q0 + rl) * a.n_heads + kvh * a.group + g) * D +
                                c4 * 4);
        val.x *= a.scale_log2; val.y *= a.scale_log2;
        val.z *= a.scale_log2; val.w *= a.scale_log2;
    }
    return val;
}

/* The online-softmax state of query vector v before any key: its position
 * (-1 past nvec), and the running max m and sum l, which start from the
 * head's sink (m = sink in the log2 domain, l = 1 in the share of the
 * thread with sink_lane set) when the call has sinks, the vector is real
 * and with_sink holds (one split of several takes it), else -inf and 0. */
template <class Args>
static __device__ __forceinline__ void kn_attn_row_init(const Args &a, int kvh, int v, int nvec,
                                                        int first_pos, bool with_sink,
                                                        bool sink_lane, int &pos, float &m,
                                                        float &l)
{
    bool valid = v < nvec;
    pos = valid ? first_pos + v / a.group : -1;
    if (a.sinks && valid && with_sink) {
        m = a.sinks[kvh * a.group + v % a.group] * KN_ATTN_LOG2E;
        l = sink_lane ? 1.f : 0.f;
    } else {
        m = -INFINITY;
        l = 0.f;
    }
}

/* The keys [*kbeg, *kend) some vector of v0..v0+vb-1 (of nvec) may see:
 * tiles wholly before the window or after the causal bound are never
 * visited. */
template <class Args>
static __device__ __forceinline__ void kn_attn_key_range(const Args &a, int first_pos, int v0,
                                                         int vb, int nvec, int *kbeg, int *kend)
{
    const int pos_lo = first_pos + v0 / a.group;
    const int pos_hi = first_pos + (min(v0 + vb, nvec) - 1) / a.group;
    *kbeg = a.window > 0 ? max(0, pos_lo - a.window + 1) : 0;
    *kend = pos_hi + 1;
}

/* That range cut to split `split` of n_splits, split_keys keys each; the
 * last split runs to the end whatever max_kv_len said. */
static __device__ __forceinline__ void kn_attn_split_range(int split, int n_splits, int split_keys,
                                                           int *kbeg, int *kend)
{
    int split_beg = split * split_keys;
    if (split_beg > *kbeg)
        *kbeg = split_beg;
    if (split < n_splits - 1 && split_beg + split_keys < *kend)
        *kend = split_beg + split_keys;
}
#endif
