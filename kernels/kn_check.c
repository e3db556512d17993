#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include "kernels/kn_check.h"
#include "common/status.h"

int kn_arg_error(const char *op, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "tandem: %s: ", op);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return TN_ERR_ARG;
}

int kn_no_cuda(const char *op)
{
    fprintf(stderr, "tandem: %s: this build has no CUDA backend "
                    "(built without CUDA=1)\n", op);
    return TN_ERR_UNSUPPORTED;
}

int kn_ranges_overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes)
{
    uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    if (a_bytes == 0 || b_bytes == 0)
        return 0;
    return pa < pb + b_bytes && pb < pa + a_bytes;
}
