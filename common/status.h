/* The one status type of the whole tree: 0 is success, negative values are
 * errors, and no two meanings share a value, so a code can cross a layer
 * (a kernel's into the engine, the TransferEngine's into a worker) and still
 * say what happened. Functions that fail with a message take a caller's
 * buffer (char *err, size_t errlen) and fill it with tn_errf / tn_fail. */
#ifndef TANDEM_COMMON_STATUS_H
#define TANDEM_COMMON_STATUS_H
#include <stddef.h>

enum tn_status {
    TN_OK = 0,
    TN_IN_PROGRESS = 1,       /* an asynchronous operation has not finished yet */
    TN_ERR_ARG = -1,          /* bad argument: null pointer, bad size, id out of range */
    TN_ERR_NOMEM = -2,        /* allocation failed */
    TN_ERR_UNSUPPORTED = -3,  /* op or backend not built in (e.g. CUDA without nvcc) */
    TN_ERR_DEVICE = -4,       /* the device runtime reported an error */
    TN_ERR_PEER = -5,         /* a peer (rank, process, connection) failed, left or is gone */
    TN_ERR_SYS = -6,          /* an operating-system call failed (shm, mmap, fork) */
    TN_ERR_TRANSPORT = -7,    /* the transport library (UCX) reported an error */
    TN_ERR_REFUSED = -8,      /* refused before anything was sent (e.g. outside a registered region) */
    TN_ERR_TIMEOUT = -9,      /* a deadline passed */
    TN_ERR_CANCELED = -10,    /* canceled by the caller */
    TN_ERR_PROTO = -11,       /* a malformed message from a peer */
    TN_ERR_BUSY = -12,        /* still in use */
    TN_ERR_NEVER_FITS = -13,  /* larger than the whole resource (e.g. the KV cache) */
    TN_ERR_TOO_LONG = -14,    /* exceeds a length limit (e.g. the model's context) */
};

/* A short fixed description of a status ("invalid argument"). */
const char *tn_status_str(int status);

/* snprintf into err (when err and errlen are non-zero); always terminates. */
void tn_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* tn_errf, then returns status: `return tn_fail(err, errlen, TN_ERR_ARG, ...)`. */
int tn_fail(char *err, size_t errlen, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
