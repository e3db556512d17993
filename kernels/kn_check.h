/* Argument checking shared by the op entry points and the CPU backend.
 * Internal to kernels/: not part of the op API. */
#ifndef TANDEM_KERNELS_KN_CHECK_H
#define TANDEM_KERNELS_KN_CHECK_H
#include <stddef.h>
#include "kernels/backend.h"

/* Prints "tandem: OP: <message>" on stderr and returns TN_ERR_ARG, so every
 * rejection is one line at the check and tells the caller what was wrong. */
int kn_arg_error(const char *op, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prints that OP needs the CUDA backend, which this build lacks, and returns
 * TN_ERR_UNSUPPORTED. */
int kn_no_cuda(const char *op);

/* 1 when the byte ranges [a, a+a_bytes) and [b, b+b_bytes) overlap. */
int kn_ranges_overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes);

#endif
