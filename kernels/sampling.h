/* Token sampling from logits [n_rows][vocab], one token per row.
 * temperature == 0: greedy (argmax, lowest id on ties).
 * Otherwise: softmax(logits / temperature), keep the top_k most likely
 * (top_k <= 0: all), keep the smallest prefix whose mass reaches top_p
 * (top_p >= 1: all), renormalise and draw with the row's generator.
 * top_p's mass is measured after the top_k cut (HF's warper order). A
 * non-greedy row advances its generator by exactly one kn_rng_uniform; a
 * greedy row leaves it alone. kernels/cpu/sampling.c states the draw order
 * a backend must follow for seeded requests to give the same tokens.
 * The generator is a per-request 64-bit state (seeded from the request's
 * seed), so a seeded request draws the same tokens wherever it runs. */
#ifndef TANDEM_KERNELS_SAMPLING_H
#define TANDEM_KERNELS_SAMPLING_H
#include <stdint.h>
#include "kernels/backend.h"

typedef struct kn_sampling {
    float temperature;
    float top_p;
    int top_k;
} kn_sampling;

/* Seeds a generator state from a user seed. */
uint64_t kn_rng_seed(uint64_t seed);
/* Next uniform double in [0, 1); advances *state. */
double kn_rng_uniform(uint64_t *state);

/* params and rng_state are host arrays [n_rows]; tokens is host [n_rows];
 * logits is backend memory. Returns TN_ERR_ARG for NaN/negative temperature,
 * top_p outside (0, 1], or a row of non-finite logits. */
int kn_sample(const kn_backend *be, int32_t *tokens, const float *logits,
              int n_rows, int vocab, const kn_sampling *params,
              uint64_t *rng_state);
#endif
