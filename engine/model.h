/* The model runtime: weights on a backend and the forward pass.
 *
 * One forward call advances a batch of sequences. Each sequence brings the
 * tokens it adds this step (a whole prompt for prefill, one token for
 * decode) and its page table; the pass appends their K/V to the paged cache
 * and returns the logits of each sequence's last new token. Prefill and
 * decode are the same call with different shapes, so continuous batching can
 * mix them. */
#ifndef TANDEM_ENGINE_MODEL_H
#define TANDEM_ENGINE_MODEL_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/backend.h"
#include "kernels/dtype.h"
#include "engine/config.h"
#include "engine/kv_cache.h"
#include "engine/parallel.h"

typedef struct tm_model tm_model;

/* How the large products' weight matrices are stored (engine/weights.h).
 * A model loaded with bf16 weights on CUDA also turns the backend's bf16
 * attention on (kn_backend_set_attn_bf16; TANDEM_CUDA_ATTN_BF16=0 keeps it
 * fp32): the products' operands are bf16 already. */
typedef enum {
    TM_WEIGHTS_AUTO = 0,  /* f32 on the CPU backend, bf16 on CUDA; on CUDA a
                             quantized checkpoint's quantized matrices (MXFP4
                             experts, block-FP8 attention/experts) load as FP8 */
    TM_WEIGHTS_F32,       /* everything f32 (quantized matrices decoded) */
    TM_WEIGHTS_BF16,      /* everything bf16 */
    TM_WEIGHTS_FP8,       /* attention q/k/v/o and experts FP8 e4m3 with
                             128x128 block scales (kernels/fp8.h), quantized
                             at load when the checkpoint is not; the LM head
                             as AUTO (f32 on the CPU, bf16 on CUDA) */
} tm_weight_dtype;

/* Load options; a zeroed struct means the defaults. */
typedef struct tm_load_opts {
    tm_weight_dtype weights;
    uint64_t seed;            /* tm_model_synthetic only */
    const tm_parallel *par;   /* a parallel layout (see tm_model_load_parallel),
                                 NULL for the single-rank model */
} tm_load_opts;

/* Loads dir/config.json and the weights (model.safetensors, or the shards
 * named by model.safetensors.index.json) onto the backend. On failure returns
 * a negative status and a one-line reason in err; nothing is leaked. */
int tm_model_load(const char *dir, const kn_backend *be, tm_model **out,
                  char *err, size_t errlen);
/* Loads only this rank's shard for a parallel layout (engine/parallel.h):
 * its attention heads, its experts, everything else whole. par NULL (or
 * all groups of one) is tm_model_load. The communicators are borrowed and
 * must take the backend's kind of memory (comm_memory). Loading does not
 * communicate; every forward pass does, so all ranks of the layout must
 * call tm_forward the same number of times. */
int tm_model_load_parallel(const char *dir, const kn_backend *be, const tm_parallel *par,
                           tm_model **out, char *err, size_t errlen);
/* The general form: weight dtype and layout from opts (NULL: defaults, one
 * rank). tm_model_load and tm_model_load_parallel call this. */
int tm_model_load_opts(const char *dir, const kn_backend *be, const tm_load_opts *opts,
                       tm_model **out, char *err, size_t errlen);
/* A model of the config in config_path (a config.json file, or a directory
 * holding one) with random weights made on the backend from opts->seed
 * (engine/weights.h, tm_weights_synthetic): real shapes and real work for
 * benchmarks, no checkpoint. Under a layout (opts->par) each rank makes
 * only its shard. */
int tm_model_synthetic(const char *config_path, const kn_backend *be,
                       const tm_load_opts *opts, tm_model **out, char *err, size_t errlen);
void tm_model_free(tm_model *m);
const tm_config *tm_model_config(const tm_model *m);
/* The dtype the large products' weights were stored in (the LM head's;
 * tm_model_expert_dtype: the experts'; tm_model_attn_dtype: the attention
 * q/k/v/o projections'), and the bytes of weights the model holds on its
 * backend. */
kn_dtype tm_model_expert_dtype(const tm_model *m);
kn_dtype tm_model_attn_dtype(const tm_model *m);
kn_dtype tm_model_weight_dtype(const tm_model *m);
size_t tm_model_weight_bytes(const tm_model *m);
/* Frees the forward pass's working buffers (they grow to the largest batch
 * seen, e.g. a 32k-token prefill) and the backend's cached temporaries;
 * the next tm_forward allocates what it needs again. */
void tm_model_trim(tm_model *m);

/* Optional per-group timing of tm_forward (kernels/stopwatch.h): while a
 * stopwatch is set, every forward call starts it and laps it after each
 * group of ops below; the caller collects. NULL turns it off. The
 * stopwatch needs max_laps >= 8 * n_layers + 8 per forward. Collectives
 * (TP/EP all-reduces, EP dispatch) count in the group they follow. */
typedef enum {
    TM_PROF_ATTN_PROJ = 0,  /* q/k/v/o projections (q/k/v with the attention norm) */
    TM_PROF_ATTENTION,      /* kn_attention (the attention kernels) */
    TM_PROF_ROPE_KV,        /* q/k norms, RoPE, KV cache append */
    TM_PROF_ROUTER,         /* the MoE norm (and residual add), router logits, top-k routing */
    TM_PROF_EXPERTS,        /* kn_moe_experts: permutation, expert GEMMs, combine */
    TM_PROF_NORM_ADD,       /* the last residual add and final norm, embedding, batch upload */
    TM_PROF_HEAD,           /* final norm, LM head, logits to the host */
    TM_PROF_N_GROUPS
} tm_prof_group;
struct kn_stopwatch;
void tm_model_set_stopwatch(tm_model *m, struct kn_stopwatch *sw);
/* A short name for a group ("attention kernel", ...). */
const char *tm_prof_group_name(int group);
/* This rank's slice (the whole model for tm_model_load). */
const tm_shard *tm_model_shard(const tm_model *m);
/* KV heads this rank's cache must hold: the config's on one rank, the
 * rank's share (or its one replicated head) under TP. */
int tm_model_kv_heads(const tm_model *m);

typedef struct tm_seq_step {
    const int32_t *tokens;  /* host: the tokens this sequence adds */
    int n_tokens;
    int n_cached;           /* tokens already in the cache (= first new position) */
    const int32_t *pages;   /* host: page table, enough pages for n_cached + n_tokens */
    int n_pages;
} tm_seq_step;

/* Runs one step for n_seqs sequences. logits: host [n_seqs][vocab], the
 * last new token's logits of each sequence (may be NULL). If all_logits is
 * non-NULL it receives host [sum n_tokens][vocab] (every new token; tests
 * use it). Returns TN_ERR_ARG, touching nothing, when a token id is outside
 * the vocabulary, a page table does not cover n_cached + n_tokens or names a
 * page outside the cache, or the cache was built for another model's shape.
 * Not reentrant on one model: the scratch buffers live in tm_model.
 *
 * Parallel models (tm_model_load_parallel) communicate inside the pass and
 * return TN_ERR_PEER (comm_error says why) when a peer fails. In the DP+EP
 * layout a rank with nothing to run calls tm_forward(m, NULL, NULL, 0, NULL,
 * NULL) instead: it serves its experts to the other ranks' tokens for one
 * step. */
int tm_forward(tm_model *m, tm_kv_cache *kv, const tm_seq_step *seqs,
               int n_seqs, float *logits, float *all_logits);

/* CUDA graphs for decode steps. A tm_forward call on a single-rank CUDA
 * model where every sequence brings one token (and no all_logits, no
 * stopwatch) runs as a fixed-shape step: the batch padded to the next
 * power of two (padding sequences map no page, so they write and read no
 * cache), the page table to a power-of-two capacity, the attention
 * launches sized for that capacity (each kernel finds its sequence's real
 * length on the device), the inputs copied from pinned host memory
 * without a host wait, one host wait at the end. With
 * TM_CUDA_GRAPHS_ON (the default on CUDA) that step is recorded as a CUDA
 * graph the second time its shape is seen and replayed after, so the host
 * queues one launch instead of hundreds; a shape whose recording fails
 * (an op that needs the host) runs eagerly, with one line on stderr.
 * TM_CUDA_GRAPHS_EAGER runs the same padded step without graphs (what a
 * replay must equal bit for bit: tests), TM_CUDA_GRAPHS_OFF the unpadded
 * step of any other call. No effect on the CPU backend. */
typedef enum {
    TM_CUDA_GRAPHS_OFF = 0,
    TM_CUDA_GRAPHS_ON,
    TM_CUDA_GRAPHS_EAGER,
} tm_cuda_graphs;
void tm_model_set_cuda_graphs(tm_model *m, tm_cuda_graphs mode);
/* "on" or "off" (flags --cuda-graphs); -1 for anything else. */
int tm_cuda_graphs_parse(const char *s, tm_cuda_graphs *out);
/* Decode steps so far by how they ran: recorded (then replayed once),
 * replayed, recordings that failed, and padded steps run eagerly. */
typedef struct tm_graph_stats {
    long long captures, replays, capture_failures, eager_steps;
} tm_graph_stats;
tm_graph_stats tm_model_graph_stats(const tm_model *m);

/* The last tm_forward's logits where they were computed, on the backend:
 * [n_seqs][vocab] after a call without all_logits (pass logits NULL to skip
 * the copy to the host), so they can be sampled where they are (kn_sample
 * on the model's backend) and only token ids come back. Valid until the
 * next tm_forward or tm_model_trim; NULL before the first. */
const float *tm_model_last_logits(const tm_model *m);

#endif
