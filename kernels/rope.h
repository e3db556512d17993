/* Rotary position embedding, plain (Llama/Qwen3) or YaRN (GPT-OSS), applied
 * in place to x[n_tokens][n_heads][head_dim] with HF's half-split rotation
 * (not interleaved): for i < head_dim/2, with a = pos * inv_freq[i],
 *   x'[i]       = x[i] * cos(a)*s - x[i+d/2] * sin(a)*s
 *   x'[i + d/2] = x[i+d/2] * cos(a)*s + x[i] * sin(a)*s
 * where s is the attention scaling (1 for plain RoPE, YaRN's mscale). The
 * angle a is the float32 product (float)pos * inv_freq[i], as HF computes it;
 * a double product would shift large positions' angles away from HF's. */
#ifndef TANDEM_KERNELS_ROPE_H
#define TANDEM_KERNELS_ROPE_H
#include <stdint.h>
#include "kernels/backend.h"

typedef struct kn_rope_config {
    int head_dim;
    double theta;                 /* rope_theta */
    int yarn;                     /* 0: plain RoPE, 1: YaRN */
    double factor;                /* YaRN scaling factor */
    double beta_fast, beta_slow;  /* YaRN ramp bounds, in rotations */
    int original_max_position;    /* original_max_position_embeddings */
    int truncate;                 /* YaRN: floor/ceil the correction range (HF default 1) */
    double attention_factor;      /* explicit mscale; <= 0 means 0.1*ln(factor)+1 */
} kn_rope_config;

/* Host-side: fills inv_freq[head_dim/2] and *attn_scale from the config,
 * exactly as HF's rope init functions do (in double, rounded to float). */
int kn_rope_inv_freq(const kn_rope_config *cfg, float *inv_freq, float *attn_scale);

/* inv_freq is backend memory [head_dim/2]; pos is backend memory [n_tokens]. */
int kn_rope(const kn_backend *be, float *x, const int32_t *pos, int n_tokens,
            int n_heads, int head_dim, const float *inv_freq, float attn_scale);
#endif
