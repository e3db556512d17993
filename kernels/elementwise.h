/* Small element-wise ops the forward pass needs between the big ones. */
#ifndef TANDEM_KERNELS_ELEMENTWISE_H
#define TANDEM_KERNELS_ELEMENTWISE_H
#include <stddef.h>
#include "kernels/backend.h"

/* out[i] = a[i] + b[i]; out may alias a or b (the residual add). */
int kn_add(const kn_backend *be, float *out, const float *a, const float *b, size_t n);
#endif
