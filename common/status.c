#include "common/status.h"

const char *kn_status_str(int status)
{
    switch (status) {
    case KN_OK: return "ok";
    case KN_ERR_ARG: return "invalid argument";
    case KN_ERR_NOMEM: return "out of memory";
    case KN_ERR_UNSUPPORTED: return "not supported by this build or backend";
    case KN_ERR_DEVICE: return "device error";
    case KN_ERR_PEER: return "a peer rank failed or timed out";
    case KN_ERR_SYS: return "operating system call failed";
    default: return "unknown error";
    }
}
