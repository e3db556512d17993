#include "engine/rendezvous.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "common/status.h"

#define MAGIC "TNRV"
#define VERSION 1u
#define MSG_MAX 256
#define NAME_FIELD 52                     /* COMM_NAME_MAX + 1, padded to 4 */
#define HELLO_BYTES (8 + 7 * 4 + RDV_HOST_MAX + TM_DEVICE_ID_MAX)
#define REPLY_BYTES (8 + 3 * 4 + MSG_MAX + NAME_FIELD + COMM_NCCL_ID_BYTES)
#define HELLO_WAIT_MS 5000                /* a connection that says nothing is dropped */
#define VERDICT_GRACE_MS 2000            /* see join() */
#define RETRY_MS 200                      /* between a non-leader's connection attempts */

_Static_assert(COMM_NAME_MAX + 1 <= NAME_FIELD, "name field");

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int rdv_parse_address(const char *addr, char *host, size_t host_len, int *port)
{
    if (!addr || !addr[0])
        return -1;
    const char *colon = strrchr(addr, ':');
    size_t n = colon ? (size_t)(colon - addr) : strlen(addr);
    if (n == 0 || n >= host_len)
        return -1;
    memcpy(host, addr, n);
    host[n] = '\0';
    *port = RDV_DEFAULT_PORT;
    if (colon) {
        char *end;
        errno = 0;
        long p = strtol(colon + 1, &end, 10);
        if (errno || end == colon + 1 || *end || p < 1 || p > 65535)
            return -1;
        *port = (int)p;
    }
    return 0;
}

/* ---- frames --------------------------------------------------------------- */

static void put_u32(unsigned char **p, uint32_t v)
{
    uint32_t be = htonl(v);
    memcpy(*p, &be, 4);
    *p += 4;
}

static uint32_t get_u32(const unsigned char **p)
{
    uint32_t be;
    memcpy(&be, *p, 4);
    *p += 4;
    return ntohl(be);
}

static void put_str(unsigned char **p, const char *s, size_t field)
{
    memset(*p, 0, field);
    size_t n = strnlen(s, field - 1);
    memcpy(*p, s, n);
    *p += field;
}

static void get_str(const unsigned char **p, char *s, size_t field)
{
    memcpy(s, *p, field);
    s[field - 1] = '\0';
    *p += field;
}

static void pack_hello(unsigned char *b, const rdv_hello *h)
{
    unsigned char *p = b;
    memcpy(p, MAGIC, 4);
    p += 4;
    put_u32(&p, VERSION);
    const int v[7] = {h->rank, h->world, h->tp, h->ep, h->dp, h->backend, h->want};
    for (int i = 0; i < 7; i++)
        put_u32(&p, (uint32_t)v[i]);
    put_str(&p, h->host, RDV_HOST_MAX);
    put_str(&p, h->device, TM_DEVICE_ID_MAX);
}

/* 0, or -1 for a frame that is not a hello of this version. */
static int unpack_hello(const unsigned char *b, rdv_hello *h, uint32_t *version)
{
    const unsigned char *p = b;
    if (memcmp(p, MAGIC, 4) != 0)
        return -1;
    p += 4;
    *version = get_u32(&p);
    int v[7];
    for (int i = 0; i < 7; i++)
        v[i] = (int)get_u32(&p);
    h->rank = v[0], h->world = v[1], h->tp = v[2], h->ep = v[3], h->dp = v[4];
    h->backend = v[5], h->want = v[6];
    get_str(&p, h->host, RDV_HOST_MAX);
    get_str(&p, h->device, TM_DEVICE_ID_MAX);
    return *version == VERSION ? 0 : -1;
}

static void pack_reply(unsigned char *b, const char *refusal, const rdv_result *r)
{
    static const rdv_result none;
    if (!r)
        r = &none;
    unsigned char *p = b;
    memcpy(p, MAGIC, 4);
    p += 4;
    put_u32(&p, VERSION);
    put_u32(&p, refusal ? 1u : 0u);
    put_u32(&p, (uint32_t)r->kind);
    put_u32(&p, (uint32_t)r->same_host);
    put_str(&p, refusal ? refusal : "", MSG_MAX);
    put_str(&p, r->comm_name, NAME_FIELD);
    memcpy(p, r->nccl_id, COMM_NCCL_ID_BYTES);
}

/* ---- sockets -------------------------------------------------------------- */

static int set_nonblocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Moves n bytes (write or read) before the deadline. 0; -1 on an error or
 * the deadline (errno ETIMEDOUT); a read that meets end of file: -1 with
 * errno ECONNRESET. */
static int io_all(int fd, void *buf, size_t n, long long deadline, int writing)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k == 0) {
            errno = ECONNRESET;
            return -1;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -1;
        long long left = deadline - now_ms();
        if (left <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        struct pollfd pf = {fd, writing ? POLLOUT : POLLIN, 0};
        if (poll(&pf, 1, (int)(left > 1000 ? 1000 : left)) < 0 && errno != EINTR)
            return -1;
    }
    return 0;
}

/* A listening socket on the first address of ai that binds; -1 (errno
 * saved in *saved) when none does. */
static int bind_first(struct addrinfo *ai, int *saved)
{
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            *saved = errno;
            continue;
        }
        int one = 1, zero = 0;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (a->ai_family == AF_INET6)   /* IPv4 clients too, where the stack allows */
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 64) == 0 &&
            set_nonblocking(fd) == 0)
            return fd;
        *saved = errno;
        close(fd);
    }
    return -1;
}

/* The leader's listening socket: on host when it is a numeric address,
 * else on every interface (IPv6 and IPv4, or IPv4 alone where the pod has
 * no IPv6). */
static int listen_on(const char *host, int port, char *err, size_t errlen)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
    const int numeric = getaddrinfo(host, ps, &hints, &ai) == 0;
    int fd = -1, saved = EADDRNOTAVAIL;
    if (numeric) {
        fd = bind_first(ai, &saved);
        freeaddrinfo(ai);
    } else {
        const int families[2] = {AF_INET6, AF_INET};
        hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
        for (int i = 0; i < 2 && fd < 0; i++) {
            hints.ai_family = families[i];
            ai = NULL;
            if (getaddrinfo(NULL, ps, &hints, &ai) != 0)
                continue;
            fd = bind_first(ai, &saved);
            freeaddrinfo(ai);
        }
    }
    if (fd < 0)
        return tn_fail(err, errlen, TN_ERR_SYS, "rendezvous: rank 0 cannot listen on %s:%d: "
                       "%s", numeric ? host : "*", port, strerror(saved));
    return fd;
}

/* ---- leader --------------------------------------------------------------- */

typedef struct leader_state {
    int fd[COMM_MAX_WORLD];         /* per rank, -1 until it joined */
    rdv_hello hello[COMM_MAX_WORLD];
    int world;
    unsigned char refusal[REPLY_BYTES];  /* the last refusal sent, for latecomers */
} leader_state;

/* Tells every joined rank why the group cannot form and closes them. */
static int refuse_all(leader_state *L, int status, char *err, size_t errlen,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int refuse_all(leader_state *L, int status, char *err, size_t errlen,
                      const char *fmt, ...)
{
    char msg[MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    unsigned char *frame = L->refusal;
    pack_reply(frame, msg, NULL);
    long long d = now_ms() + 1000;  /* a refusal is best effort, briefly */
    for (int r = 0; r < L->world; r++)
        if (L->fd[r] >= 0) {
            io_all(L->fd[r], frame, REPLY_BYTES, d, 1);
            close(L->fd[r]);
            L->fd[r] = -1;
        }
    tn_errf(err, errlen, "rendezvous: %s", msg);
    return status;
}

/* After a refusal: ranks whose connections wait in the listen queue get
 * the same reason (closing the socket would reset them without one). Their
 * hello is read first: closing with unread data would reset the reply. */
static void refuse_pending(leader_state *L, int lfd)
{
    int fd;
    while ((fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0) {
        unsigned char hello[HELLO_BYTES];
        long long d = now_ms() + 500;
        if (io_all(fd, hello, sizeof hello, d, 0) == 0)
            io_all(fd, L->refusal, REPLY_BYTES, d, 1);
        close(fd);
    }
}

/* The ranks that have not joined, as "2, 3". */
static void missing_list(const leader_state *L, char *out, size_t len)
{
    size_t at = 0;
    out[0] = '\0';
    for (int r = 1; r < L->world && at + 8 < len; r++)
        if (L->fd[r] < 0)
            at += (size_t)snprintf(out + at, len - at, "%s%d", at ? ", " : "", r);
}

/* A field of a joining rank that must equal the leader's. */
static int same_field(leader_state *L, const rdv_hello *h, const char *name, int theirs,
                      int ours, char *err, size_t errlen)
{
    if (theirs == ours)
        return TN_OK;
    return refuse_all(L, TN_ERR_ARG, err, errlen, "rank %d (host %s) has %s %d, "
                      "rank 0 has %d: every rank of a group must be started with the same "
                      "layout", h->rank, h->host, name, theirs, ours);
}

static int lead(const char *host, int port, const rdv_hello *me, long long deadline,
                int timeout_ms, rdv_result *out, char *err, size_t errlen)
{
    leader_state L;
    L.world = me->world;
    for (int r = 0; r < COMM_MAX_WORLD; r++)
        L.fd[r] = -1;
    L.hello[0] = *me;
    int lfd = listen_on(host, port, err, errlen);
    if (lfd < 0)
        return lfd;
    int joined = 1, rc = TN_OK;
    while (joined < L.world && !rc) {
        long long left = deadline - now_ms();
        if (left <= 0) {
            char miss[200];
            missing_list(&L, miss, sizeof miss);
            rc = refuse_all(&L, TN_ERR_TIMEOUT, err, errlen,
                            "rank%s %s of %d did not join rank 0 on port %d within %d ms",
                            L.world - joined > 1 ? "s" : "", miss, L.world, port, timeout_ms);
            break;
        }
        struct pollfd pf = {lfd, POLLIN, 0};
        if (poll(&pf, 1, (int)(left > 1000 ? 1000 : left)) <= 0)
            continue;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            continue;
        unsigned char frame[HELLO_BYTES];
        rdv_hello h;
        uint32_t version = 0;
        long long hd = now_ms() + HELLO_WAIT_MS;
        if (io_all(fd, frame, sizeof frame, hd < deadline ? hd : deadline, 0) != 0) {
            close(fd);   /* not one of ours, or gone: keep waiting for the ranks */
            continue;
        }
        if (unpack_hello(frame, &h, &version) != 0) {
            if (memcmp(frame, MAGIC, 4) == 0) {
                L.fd[0] = fd;   /* borrow slot 0 (the leader's own) to answer it */
                rc = refuse_all(&L, TN_ERR_PROTO, err, errlen,
                                "a rank speaks rendezvous version %u, rank 0 version %u "
                                "(different builds in one group)", version, VERSION);
                break;
            }
            close(fd);
            continue;
        }
        if (h.rank <= 0 || h.rank >= L.world || L.fd[h.rank] >= 0) {
            L.fd[0] = fd;
            rc = refuse_all(&L, TN_ERR_ARG, err, errlen,
                            h.rank > 0 && h.rank < L.world
                                ? "rank %d joined twice (again from host %s)"
                                : "a rank says it is rank %d (host %s), outside 1..world-1",
                            h.rank, h.host);
            break;
        }
        L.fd[h.rank] = fd;
        L.hello[h.rank] = h;
        joined++;
        if ((rc = same_field(&L, &h, "world", h.world, me->world, err, errlen)) ||
            (rc = same_field(&L, &h, "tp", h.tp, me->tp, err, errlen)) ||
            (rc = same_field(&L, &h, "ep", h.ep, me->ep, err, errlen)) ||
            (rc = same_field(&L, &h, "dp", h.dp, me->dp, err, errlen)) ||
            (rc = same_field(&L, &h, "backend", h.backend, me->backend, err,
                             errlen)) ||
            (rc = same_field(&L, &h, "rank communicator", h.want, me->want, err,
                             errlen)))
            break;
    }
    if (rc)
        refuse_pending(&L, lfd);
    close(lfd);
    if (rc)
        return rc;
    memset(out, 0, sizeof *out);
    char ids[COMM_MAX_WORLD][TM_DEVICE_ID_MAX];
    out->same_host = 1;
    for (int r = 0; r < L.world; r++) {
        memcpy(ids[r], L.hello[r].device, TM_DEVICE_ID_MAX);
        if (strcmp(L.hello[r].host, me->host) != 0)
            out->same_host = 0;
    }
    rank_comm_kind kind;
    char why[MSG_MAX - 16];
    if (rank_comm_choose((kn_backend_kind)me->backend, (rank_comm_kind)me->want,
                         (const char (*)[TM_DEVICE_ID_MAX])ids, L.world, out->same_host, &kind,
                         why, sizeof why) != TN_OK)
        return refuse_all(&L, TN_ERR_ARG, err, errlen, "%s", why);
    out->kind = (int)kind;
    if (kind == RANK_COMM_NCCL && comm_nccl_unique_id(out->nccl_id, why, sizeof why) != TN_OK)
        return refuse_all(&L, TN_ERR_DEVICE, err, errlen, "rank 0: %s", why);
    if (out->same_host) {
        /* a name nobody else uses: this leader's pid and the clock */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        snprintf(out->comm_name, sizeof out->comm_name, "rdv-%d-%lx", (int)getpid(),
                 (unsigned long)(ts.tv_nsec ^ (ts.tv_sec << 20)));
    }
    unsigned char frame[REPLY_BYTES];
    pack_reply(frame, NULL, out);
    for (int r = 1; r < L.world; r++) {
        if (!rc && io_all(L.fd[r], frame, sizeof frame, deadline, 1) != 0)
            rc = tn_fail(err, errlen, TN_ERR_PEER, "rendezvous: rank %d (host %s) left before "
                         "rank 0 could answer: %s", r, L.hello[r].host, strerror(errno));
    }
    for (int r = 1; r < L.world; r++)
        close(L.fd[r]);
    return rc;
}

/* ---- the other ranks ------------------------------------------------------ */

/* Connects to host:port, retrying until the deadline (the leader may not
 * listen yet, its name may not resolve yet). */
static int connect_leader(const char *host, int port, long long deadline, int timeout_ms,
                          char *err, size_t errlen)
{
    char ps[16], last[400] = "no attempt";
    snprintf(ps, sizeof ps, "%d", port);
    for (;;) {
        struct addrinfo hints = {0}, *ai = NULL;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_NUMERICSERV;
        int g = getaddrinfo(host, ps, &hints, &ai);
        if (g != 0)
            snprintf(last, sizeof last, "cannot resolve %s: %s", host, gai_strerror(g));
        for (struct addrinfo *a = ai; a; a = a->ai_next) {
            int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                            a->ai_protocol);
            if (fd < 0)
                continue;
            int c = connect(fd, a->ai_addr, a->ai_addrlen);
            if (c != 0 && errno == EINPROGRESS) {
                long long left = deadline - now_ms();
                struct pollfd pf = {fd, POLLOUT, 0};
                int soerr = ETIMEDOUT;
                socklen_t sl = sizeof soerr;
                if (left > 0 && poll(&pf, 1, (int)(left > 2000 ? 2000 : left)) == 1)
                    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
                c = soerr ? -1 : 0;
                errno = soerr;
            }
            if (c == 0) {
                freeaddrinfo(ai);
                return fd;
            }
            snprintf(last, sizeof last, "%s", strerror(errno));
            close(fd);
        }
        if (ai)
            freeaddrinfo(ai);
        if (now_ms() + RETRY_MS >= deadline)
            return tn_fail(err, errlen, TN_ERR_TIMEOUT, "rendezvous: cannot reach rank 0 at "
                           "%s:%d within %d ms (last attempt: %s)", host, port, timeout_ms,
                           last);
        nap_ms(RETRY_MS);
    }
}

static int join(const char *host, int port, const rdv_hello *me, long long deadline,
                int timeout_ms, rdv_result *out, char *err, size_t errlen)
{
    int fd = connect_leader(host, port, deadline, timeout_ms, err, errlen);
    if (fd < 0)
        return fd;
    unsigned char hello[HELLO_BYTES], reply[REPLY_BYTES];
    pack_hello(hello, me);
    int rc = TN_OK;
    /* the leader's verdict may come at its own deadline, a little after
     * ours: wait for it a moment longer, so every rank reports its reason */
    if (io_all(fd, hello, sizeof hello, deadline, 1) != 0 ||
        io_all(fd, reply, sizeof reply, deadline + VERDICT_GRACE_MS, 0) != 0) {
        rc = tn_fail(err, errlen, errno == ETIMEDOUT ? TN_ERR_TIMEOUT : TN_ERR_PEER,
                     "rendezvous: rank %d: rank 0 at %s:%d %s", me->rank, host, port,
                     errno == ETIMEDOUT ? "did not answer in time"
                                        : "closed the connection (it gave up or died)");
    }
    close(fd);
    if (rc)
        return rc;
    const unsigned char *p = reply;
    if (memcmp(p, MAGIC, 4) != 0)
        return tn_fail(err, errlen, TN_ERR_PROTO, "rendezvous: %s:%d is not a Tandem group "
                       "leader", host, port);
    p += 4;
    uint32_t version = get_u32(&p), refused = get_u32(&p);
    memset(out, 0, sizeof *out);
    out->kind = (int)get_u32(&p);
    out->same_host = (int)get_u32(&p);
    char msg[MSG_MAX];
    get_str(&p, msg, MSG_MAX);
    get_str(&p, out->comm_name, NAME_FIELD);
    memcpy(out->nccl_id, p, COMM_NCCL_ID_BYTES);
    if (version != VERSION)
        return tn_fail(err, errlen, TN_ERR_PROTO, "rendezvous: rank 0 speaks version %u, "
                       "this rank %u (different builds in one group)", version, VERSION);
    if (refused)
        return tn_fail(err, errlen, TN_ERR_PEER, "rendezvous: %s", msg);
    return TN_OK;
}

int rdv_run(const char *leader, const rdv_hello *me, int timeout_ms, rdv_result *out,
            char *err, size_t errlen)
{
    char host[256];
    int port;
    if (!me || !out || timeout_ms <= 0 || me->world < 2 || me->world > COMM_MAX_WORLD ||
        me->rank < 0 || me->rank >= me->world)
        return tn_fail(err, errlen, TN_ERR_ARG, "rendezvous: rank %d of world %d is out of "
                       "range (world 2..%d)", me ? me->rank : -1, me ? me->world : 0,
                       COMM_MAX_WORLD);
    if (rdv_parse_address(leader, host, sizeof host, &port) != 0)
        return tn_fail(err, errlen, TN_ERR_ARG, "rendezvous: the group leader's address must "
                       "be HOST[:PORT], got '%s'", leader ? leader : "");
    const long long deadline = now_ms() + timeout_ms;
    return me->rank == 0 ? lead(host, port, me, deadline, timeout_ms, out, err, errlen)
                         : join(host, port, me, deadline, timeout_ms, out, err, errlen);
}
