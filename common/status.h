/* Status codes shared by every op and by the engine: 0 is success, negative
 * values are errors. Ops validate their arguments and return KN_ERR_ARG
 * instead of touching memory out of range. */
#ifndef TANDEM_COMMON_STATUS_H
#define TANDEM_COMMON_STATUS_H

enum kn_status {
    KN_OK = 0,
    KN_ERR_ARG = -1,         /* bad argument: null pointer, bad size, id out of range */
    KN_ERR_NOMEM = -2,       /* allocation failed */
    KN_ERR_UNSUPPORTED = -3, /* op or backend not built in (e.g. CUDA without nvcc) */
    KN_ERR_DEVICE = -4,      /* the device runtime reported an error */
    KN_ERR_PEER = -5,        /* a peer rank died, left or timed out (engine/comm.h) */
    KN_ERR_SYS = -6,         /* an operating-system call failed (shm, mmap, fork) */
};

const char *kn_status_str(int status);

#endif
