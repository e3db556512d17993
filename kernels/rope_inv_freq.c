/* RoPE inverse frequencies, computed on the host for both backends, following
 * HF's modeling_rope_utils: _compute_default_rope_parameters (plain) and
 * _compute_yarn_parameters (YaRN). HF evaluates base^(2i/d) in float32; we
 * evaluate everything in double and round once, which is within an ulp. */
#include <math.h>
#include "kernels/kn_check.h"
#include "kernels/rope.h"
#include "common/status.h"

/* The dimension index at which a frequency completes num_rotations turns
 * over the original context (YaRN's find_correction_dim). */
static double yarn_correction_dim(double num_rotations, int dim, double base, int orig_max_pos)
{
    return (dim * log(orig_max_pos / (num_rotations * 2.0 * M_PI))) / (2.0 * log(base));
}

int kn_rope_inv_freq(const kn_rope_config *cfg, float *inv_freq, float *attn_scale)
{
    static const char op[] = "kn_rope_inv_freq";
    if (!cfg || !inv_freq || !attn_scale)
        return kn_arg_error(op, "NULL %s", !cfg ? "cfg" : !inv_freq ? "inv_freq" : "attn_scale");
    int dim = cfg->head_dim;
    if (dim <= 0 || dim % 2 != 0)
        return kn_arg_error(op, "head_dim %d must be positive and even", dim);
    if (!(cfg->theta > 0.0) || cfg->theta == 1.0 || isinf(cfg->theta))
        return kn_arg_error(op, "rope_theta %g must be finite, positive and not 1", cfg->theta);
    int half = dim / 2;

    if (!cfg->yarn) {
        for (int i = 0; i < half; i++)
            inv_freq[i] = (float)(1.0 / pow(cfg->theta, (double)(2 * i) / dim));
        *attn_scale = 1.0f;
        return TN_OK;
    }

    double factor = cfg->factor;
    if (!(factor > 0.0) || isinf(factor))
        return kn_arg_error(op, "YaRN factor %g must be finite and positive", factor);
    if (!(cfg->beta_fast > 0.0) || !(cfg->beta_slow > 0.0) ||
        isinf(cfg->beta_fast) || isinf(cfg->beta_slow))
        return kn_arg_error(op, "YaRN beta_fast %g and beta_slow %g must be finite and positive",
                            cfg->beta_fast, cfg->beta_slow);
    if (cfg->original_max_position <= 0)
        return kn_arg_error(op, "original_max_position_embeddings %d must be positive",
                            cfg->original_max_position);
    if (isnan(cfg->attention_factor) || isinf(cfg->attention_factor))
        return kn_arg_error(op, "attention_factor %g is not finite", cfg->attention_factor);

    /* beta_fast (more rotations) bounds the low dimensions, beta_slow the high. */
    double low = yarn_correction_dim(cfg->beta_fast, dim, cfg->theta, cfg->original_max_position);
    double high = yarn_correction_dim(cfg->beta_slow, dim, cfg->theta, cfg->original_max_position);
    if (cfg->truncate) {
        low = floor(low);
        high = ceil(high);
    }
    if (low < 0.0)
        low = 0.0;
    if (high > dim - 1)
        high = dim - 1;
    if (low == high)
        high += 0.001; /* HF's guard against a zero-width ramp */

    for (int i = 0; i < half; i++) {
        double pos_freq = pow(cfg->theta, (double)(2 * i) / dim);
        double extrapolation = 1.0 / pos_freq;
        double interpolation = 1.0 / (factor * pos_freq);
        double ramp = (i - low) / (high - low);
        if (ramp < 0.0)
            ramp = 0.0;
        if (ramp > 1.0)
            ramp = 1.0;
        /* Low dimensions (fast rotations) keep the original frequency,
         * high ones are interpolated, with a linear blend in between. */
        double extrapolation_factor = 1.0 - ramp;
        inv_freq[i] = (float)(interpolation * (1.0 - extrapolation_factor) +
                              extrapolation * extrapolation_factor);
    }
    if (cfg->attention_factor > 0.0)
        *attn_scale = (float)cfg->attention_factor;
    else
        *attn_scale = factor > 1.0 ? (float)(0.1 * log(factor) + 1.0) : 1.0f;
    return TN_OK;
}
