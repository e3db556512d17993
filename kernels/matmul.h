/* Linear layer: out[m,n] = sum_k x[m,k] * w[n,k] + bias[n].
 * w is row-major [n, k] (HF nn.Linear orientation); bias may be NULL.
 * out must not alias x. */
#ifndef TANDEM_KERNELS_MATMUL_H
#define TANDEM_KERNELS_MATMUL_H
#include "kernels/backend.h"

int kn_matmul(const kn_backend *be, float *out, const float *x, const float *w,
              const float *bias, int m, int n, int k);
int kn_matmul_cpu(float *out, const float *x, const float *w, const float *bias,
                  int m, int n, int k);
int kn_matmul_cuda(const kn_backend *be, float *out, const float *x,
                   const float *w, const float *bias, int m, int n, int k);
#endif
