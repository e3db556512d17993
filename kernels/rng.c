/* The per-request sampling generator: SplitMix64 (Steele, Lea, Flood 2014),
 * whose whole state is one 64-bit word, so a request carries its generator
 * between processes and backends as a plain integer. */
#include <math.h>
#include "kernels/sampling.h"

#define SPLITMIX64_GAMMA 0x9E3779B97F4A7C15ULL

static uint64_t splitmix64_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

uint64_t kn_rng_seed(uint64_t seed)
{
    /* Mixing the seed keeps nearby user seeds (0, 1, 2...) on unrelated
     * points of the sequence. */
    return splitmix64_mix(seed + SPLITMIX64_GAMMA);
}

double kn_rng_uniform(uint64_t *state)
{
    if (!state)
        return NAN; /* a caller bug; NaN fails every comparison it meets */
    *state += SPLITMIX64_GAMMA;
    /* The top 53 bits give every double in [0, 1) on a 2^-53 grid. */
    return (double)(splitmix64_mix(*state) >> 11) * 0x1.0p-53;
}
