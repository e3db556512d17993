/* RMSNorm over the last dimension, as HF computes it in float32:
 *   out[r,i] = x[r,i] / sqrt(mean_i(x[r,:]^2) + eps) * weight[i]
 * Used for the layer norms (rows = tokens, dim = hidden) and for Qwen3's
 * per-head q/k norms (rows = tokens * heads, dim = head_dim).
 * out may alias x. */
#ifndef TANDEM_KERNELS_RMSNORM_H
#define TANDEM_KERNELS_RMSNORM_H
#include "kernels/backend.h"

int kn_rmsnorm(const kn_backend *be, float *out, const float *x,
               const float *weight, int rows, int dim, float eps);

/* The residual add fused with the norm that follows it, saving a pass over
 * the residual stream:
 *   x[r,:] += delta[r,:]   (in place, x is the residual stream)
 *   xn[r,:] = rmsnorm(x[r,:]) * weight
 * with exactly the arithmetic of kn_add then kn_rmsnorm on the same backend,
 * so the results are bit-identical to that unfused pair. xn may alias x (then
 * only the normed rows remain); delta must not overlap x or xn. */
int kn_add_rmsnorm(const kn_backend *be, float *x, float *xn, const float *delta,
                   const float *weight, int rows, int dim, float eps);
#endif
