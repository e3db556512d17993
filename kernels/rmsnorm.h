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

/* The norm in front of an op that reads normalized rows (the
 * kn_..._normed ops: kn_matmul_w_multi_normed, kn_moe_router_normed).
 * Before the op reads them, exactly
 *   kn_add_rmsnorm(be, x, xn, delta, weight, rows, dim, eps)   delta set
 *   kn_rmsnorm(be, xn, x, weight, rows, dim, eps)              delta NULL
 * (x += delta in place, xn = the normed rows, both written), and the op
 * then reads xn. Why an op takes it: at decode the norm of a few rows is
 * one block's latency, a launch of its own per norm (two a layer), while
 * a kernel that reads the rows anyway can normalize them itself; the CUDA
 * decode kernels do (each block from x and delta, see the op), and other
 * calls run the pair then the op. xn must not overlap x or delta (the
 * fused kernels read x while xn is written). */
typedef struct kn_norm_in {
    float *x;            /* [rows][dim] the residual stream */
    const float *delta;  /* [rows][dim] added to x first, or NULL */
    float *xn;           /* [rows][dim] the normed rows, written */
    const float *weight; /* [dim] */
    float eps;
} kn_norm_in;
#endif
