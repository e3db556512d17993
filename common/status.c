#include "common/status.h"

#include <stdarg.h>
#include <stdio.h>

const char *tn_status_str(int status)
{
    switch (status) {
    case TN_OK: return "ok";
    case TN_IN_PROGRESS: return "in progress";
    case TN_ERR_ARG: return "invalid argument";
    case TN_ERR_NOMEM: return "out of memory";
    case TN_ERR_UNSUPPORTED: return "not supported by this build or backend";
    case TN_ERR_DEVICE: return "device error";
    case TN_ERR_PEER: return "a peer failed or is gone";
    case TN_ERR_SYS: return "operating system call failed";
    case TN_ERR_TRANSPORT: return "transport (UCX) error";
    case TN_ERR_REFUSED: return "refused before sending";
    case TN_ERR_TIMEOUT: return "timed out";
    case TN_ERR_CANCELED: return "canceled";
    case TN_ERR_PROTO: return "malformed message";
    case TN_ERR_BUSY: return "in use";
    case TN_ERR_NEVER_FITS: return "larger than the whole resource";
    case TN_ERR_TOO_LONG: return "too long";
    default: return "unknown error";
    }
}

static void verrf(char *err, size_t errlen, const char *fmt, va_list ap)
{
    if (!err || errlen == 0)
        return;
    vsnprintf(err, errlen, fmt, ap);
}

void tn_errf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verrf(err, errlen, fmt, ap);
    va_end(ap);
}

int tn_fail(char *err, size_t errlen, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verrf(err, errlen, fmt, ap);
    va_end(ap);
    return status;
}
