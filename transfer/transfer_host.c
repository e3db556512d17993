/* Which peers share this engine's shared memory: the host key that goes
 * into the hello, and whether UCX_TLS lets UCX use shared memory at all.
 * UCX's posix/sysv transports need the same IPC namespace (and /proc/PID of
 * the peer: the same PID namespace), cma needs the same PID namespace; all
 * need the same running kernel. Two pods on one node differ in their
 * namespaces, so they never count as same-host. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "transfer/transfer_internal.h"

/* The first line of a /proc file without its newline; 0 when unreadable. */
static int read_line(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int ok = fgets(buf, (int)len, f) != NULL;
    fclose(f);
    if (!ok)
        return 0;
    buf[strcspn(buf, "\n")] = '\0';
    return buf[0] != '\0';
}

static int read_link(const char *path, char *buf, size_t len)
{
    ssize_t n = readlink(path, buf, len - 1);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return 1;
}

void te_host_key_fill(char *key, size_t len)
{
    char boot[64], ipc[48], pid[48];
    key[0] = '\0';
    if (read_line("/proc/sys/kernel/random/boot_id", boot, sizeof boot) &&
        read_link("/proc/self/ns/ipc", ipc, sizeof ipc) &&
        read_link("/proc/self/ns/pid", pid, sizeof pid)) {
        int w = snprintf(key, len, "%s/%s/%s", boot, ipc, pid);
        if (w < 0 || (size_t)w >= len)
            key[0] = '\0';
    }
}

int te_tls_allows_shm(const char *tls)
{
    if (!tls || !*tls)
        return 1; /* UCX's default: every transport */
    static const char *const shm[] = {"sm", "shm", "posix", "sysv", "cma", "knem", "xpmem", "all"};
    int negated = tls[0] == '^';
    char buf[256];
    snprintf(buf, sizeof buf, "%s", tls + negated);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (negated) {
            /* "^sm" / "^shm" exclude them all; "^posix" leaves the others */
            if (!strcmp(tok, "sm") || !strcmp(tok, "shm"))
                return 0;
            continue;
        }
        for (size_t i = 0; i < sizeof shm / sizeof *shm; i++)
            if (!strcmp(tok, shm[i]))
                return 1;
    }
    return negated;
}

const char *te_engine_host_key(const te_engine *e) { return e->host_key; }

int te_engine_peer_is_same_host(const te_engine *e, const char *host_key)
{
    return e && e->same_host_shm && e->tls_allows_shm && e->peer_failure_mode &&
           e->host_key[0] && host_key && !strcmp(host_key, e->host_key);
}
