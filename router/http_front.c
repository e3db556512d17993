#include "router/http_front.h"
#include "common/status.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include "common/sys.h"
#include "router/http_framing.h"

#define WHO "router"
#define UP_CAP 16384     /* client -> libmicrohttpd, parsed */
#define DOWN_CAP 65536   /* libmicrohttpd -> client */
#define LINGER_MS 2000   /* reading (and dropping) a client's leftovers before the close */
#define SWEEP_MS 250

struct front_conn;

/* One side of a connection, as epoll reports it. */
typedef struct front_side {
    struct front_conn *c;
    int client;
} front_side;

typedef struct front_conn {
    struct front_conn *prev, *next;
    front_side cs, ms;
    int cfd;              /* the client's socket */
    int mfd;              /* our end of the pair to libmicrohttpd; -1 before the hand-over */
    int mhd_fd;           /* libmicrohttpd's end */
    uint32_t cev, mev;    /* interest registered in epoll (0 with the fd not added) */
    struct sockaddr_in addr;
    http_framing fr;
    char *up;             /* parsed client bytes not yet written to mfd */
    size_t up_len;
    char *down;           /* libmicrohttpd's bytes not yet written to the client */
    size_t down_off, down_len;
    int client_eof;       /* the client sent FIN */
    int up_dead;          /* libmicrohttpd stopped reading: drop client bytes */
    int mhd_eof;          /* libmicrohttpd closed its end, and all it sent was read */
    int mhd_hup;          /* it closed: read what is left as room allows, not via epoll */
    int lingering;        /* response done, FIN sent, dropping leftovers */
    uint64_t t_active;    /* last byte in either direction */
    uint64_t t_request;   /* first byte of the request being received */
    uint64_t t_linger;
    uint64_t heads_seen;
} front_conn;

struct http_front {
    http_front_config cfg;
    char host[64];
    int listen_fd, epfd, stop_fd, port;
    pthread_t thread;
    int thread_started;
    front_side listen_side, stop_side; /* what epoll reports for those fds */
    front_conn *head;     /* every open connection */
    front_conn *dead;     /* closed in this round of events, freed after it */
    int n_open;
    uint64_t listen_paused_until;
    pthread_mutex_t lock; /* the refused table and the stats */
    unsigned char *refused;
    int n_refused;
    http_front_stats stats;
};

/* ------------------------------------------------------------ the refused table */

static void set_refused(http_front *f, int fd, unsigned char v)
{
    pthread_mutex_lock(&f->lock);
    if (fd >= 0 && fd < f->n_refused)
        f->refused[fd] = v;
    if (v)
        f->stats.refused_bodies++;
    pthread_mutex_unlock(&f->lock);
}

int http_front_body_refused(http_front *f, int fd)
{
    if (!f)
        return 0;
    pthread_mutex_lock(&f->lock);
    int v = fd >= 0 && fd < f->n_refused && f->refused[fd];
    pthread_mutex_unlock(&f->lock);
    return v;
}

void http_front_get_stats(http_front *f, http_front_stats *s)
{
    memset(s, 0, sizeof *s);
    if (!f)
        return;
    pthread_mutex_lock(&f->lock);
    *s = f->stats;
    pthread_mutex_unlock(&f->lock);
}

static void count(http_front *f, uint64_t *field)
{
    pthread_mutex_lock(&f->lock);
    (*field)++;
    pthread_mutex_unlock(&f->lock);
}

/* ------------------------------------------------------------ connections */

static void set_interest(http_front *f, int fd, uint32_t *have, uint32_t want, front_side *side)
{
    if (fd < 0 || *have == want + 1)
        return;
    struct epoll_event ev = {.events = want, .data.ptr = side};
    /* have holds interest + 1, so 0 means "not added" */
    if (epoll_ctl(f->epfd, *have ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) == 0)
        *have = want + 1;
}

static void update_interest(http_front *f, front_conn *c)
{
    uint32_t cw = 0, mw = 0;
    int dropping = c->up_dead || c->lingering || c->fr.state == FR_REFUSED;
    if (!c->client_eof && (dropping || UP_CAP - c->up_len > HTTP_FRAMING_SLACK + 512))
        cw |= EPOLLIN;
    if (c->down_len > c->down_off)
        cw |= EPOLLOUT;
    set_interest(f, c->cfd, &c->cev, cw, &c->cs);
    if (c->mfd >= 0) {
        if (!c->mhd_eof && c->down_len == c->down_off)
            mw |= EPOLLIN;
        if (c->up_len && !c->up_dead)
            mw |= EPOLLOUT;
        if (c->mhd_hup) {
            /* A hang-up is reported whatever the interest: polled in settle
             * instead, or the loop would spin while the client is slow. */
            if (c->mev)
                epoll_ctl(f->epfd, EPOLL_CTL_DEL, c->mfd, NULL);
            c->mev = 0;
        } else {
            set_interest(f, c->mfd, &c->mev, mw, &c->ms);
        }
    }
}

/* Closes c's sockets; c itself is freed after the current round of epoll
 * events (free_dead), which may still name it. */
static void conn_close(http_front *f, front_conn *c)
{
    /* Leave epoll explicitly: close() alone removes an fd only once every
     * descriptor of its open file is closed, and a worker the local scaler
     * forks holds copies until its exec; events for this connection would
     * then arrive after it is freed. */
    if (c->cfd >= 0) {
        if (c->cev)
            epoll_ctl(f->epfd, EPOLL_CTL_DEL, c->cfd, NULL);
        close(c->cfd);
    }
    if (c->mfd >= 0) {
        if (c->mev)
            epoll_ctl(f->epfd, EPOLL_CTL_DEL, c->mfd, NULL);
        close(c->mfd); /* libmicrohttpd's end sees the hang-up */
    }
    c->cev = c->mev = 0;
    c->cfd = c->mfd = -1;
    if (c->prev)
        c->prev->next = c->next;
    else
        f->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = NULL;
    c->next = f->dead;
    f->dead = c;
    f->n_open--;
    pthread_mutex_lock(&f->lock);
    f->stats.open = f->n_open;
    pthread_mutex_unlock(&f->lock);
}

static void free_dead(http_front *f)
{
    while (f->dead) {
        front_conn *c = f->dead;
        f->dead = c->next;
        free(c->up);
        free(c->down);
        free(c);
    }
}

/* Gives the connection to libmicrohttpd: its first request head is in. */
static int hand_over(http_front *f, front_conn *c)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) {
        tn_log(WHO, "HTTP front: socketpair: %s", strerror(errno));
        return -1;
    }
    if (!(c->down = malloc(DOWN_CAP))) {
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    set_refused(f, sv[1], 0);
    c->mfd = sv[0];
    c->mhd_fd = sv[1];
    /* libmicrohttpd owns sv[1] from here, and closes it on failure. */
    if (MHD_add_connection(f->cfg.mhd, sv[1], (const struct sockaddr *)&c->addr,
                           sizeof c->addr) != MHD_YES) {
        tn_log(WHO, "HTTP front: the HTTP server took no more connections (%s)", strerror(errno));
        c->mhd_fd = -1;
        return -1;
    }
    count(f, &f->stats.handed_over);
    return 0;
}

/* libmicrohttpd would not take the connection (its limit: --max-active-requests
 * + 64 requests in progress): a 503 straight from here, then the close. */
static void refuse_busy(front_conn *c)
{
    static const char body[] =
        "{\"error\":{\"message\":\"The router has too many connections in progress; retry "
        "later.\",\"type\":\"server_error\",\"param\":null,\"code\":\"server_busy\"}}";
    char resp[512];
    int n = snprintf(resp, sizeof resp,
                     "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                     "Retry-After: 1\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
                     sizeof body - 1, body);
    if (n > 0 && send(c->cfd, resp, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        return; /* the client is gone or its window is full: the close says enough */
}

static void client_readable(http_front *f, front_conn *c)
{
    char in[UP_CAP];
    for (int rounds = 0; rounds < 4; rounds++) {
        int dropping = c->up_dead || c->lingering || c->fr.state == FR_REFUSED;
        size_t room = dropping ? sizeof in : UP_CAP - c->up_len;
        if (!dropping && room <= HTTP_FRAMING_SLACK + 512)
            return;
        if (!dropping)
            room -= HTTP_FRAMING_SLACK;
        ssize_t n = recv(c->cfd, in, room, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        if (n <= 0) {
            c->client_eof = 1;
            if (n < 0 || c->mfd < 0 || c->lingering) {
                c->client_eof = 2; /* nothing more to do for it */
                return;
            }
            return;
        }
        uint64_t now = tn_now_ms();
        c->t_active = now;
        if (dropping)
            continue;
        if (!c->up && !(c->up = malloc(UP_CAP))) {
            c->client_eof = 2;
            return;
        }
        int was_mid = http_framing_mid_request(&c->fr);
        uint64_t heads = c->fr.heads;
        size_t out = 0;
        int ev = http_framing_feed(&c->fr, in, (size_t)n, c->up + c->up_len, &out);
        c->up_len += out;
        if (http_framing_mid_request(&c->fr) && (!was_mid || c->fr.heads != heads))
            c->t_request = now;
        /* A head that fills the buffer goes to libmicrohttpd as it is
         * (which refuses it when too long). */
        if (c->mfd < 0 && ((ev & FR_EV_HEAD) || UP_CAP - c->up_len <= HTTP_FRAMING_SLACK + 512)) {
            if (hand_over(f, c) != 0) {
                refuse_busy(c);
                c->client_eof = 2;
                return;
            }
        }
        if (ev & FR_EV_REFUSED) {
            set_refused(f, c->mhd_fd, 1);
            tn_log(WHO, "HTTP front: a chunked body declares more than %llu bytes: refused",
                   (unsigned long long)f->cfg.max_body_bytes);
        }
    }
}

static void mhd_writable(front_conn *c)
{
    while (c->up_len && !c->up_dead) {
        ssize_t n = send(c->mfd, c->up, c->up_len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            c->up_dead = 1; /* it closed: its response (if any) still comes */
            c->up_len = 0;
            return;
        }
        memmove(c->up, c->up + n, c->up_len - (size_t)n);
        c->up_len -= (size_t)n;
    }
}

static void mhd_readable(front_conn *c)
{
    if (c->down_len == c->down_off)
        c->down_off = c->down_len = 0;
    if (c->down_len == DOWN_CAP)
        return;
    ssize_t n = recv(c->mfd, c->down + c->down_len, DOWN_CAP - c->down_len, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n <= 0) {
        c->mhd_eof = 1;
        return;
    }
    c->down_len += (size_t)n;
    c->t_active = tn_now_ms();
}

/* Returns -1 when the client is gone. */
static int client_writable(front_conn *c)
{
    while (c->down_len > c->down_off) {
        ssize_t n = send(c->cfd, c->down + c->down_off, c->down_len - c->down_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        c->down_off += (size_t)n;
        c->t_active = tn_now_ms();
    }
    c->down_off = c->down_len = 0;
    return 0;
}

/* After any event: moves bytes, passes hang-ups on, decides whether the
 * connection is over. Returns 1 when c was closed. */
static int settle(http_front *f, front_conn *c)
{
    if (c->mfd >= 0) {
        mhd_writable(c);
        for (int i = 0; i < 8; i++) {
            if (client_writable(c) != 0) {
                c->client_eof = 2;
                break;
            }
            if (!c->mhd_hup || c->mhd_eof || c->down_len)
                break;
            mhd_readable(c);
        }
    }
    if (c->client_eof == 2 || (c->client_eof && c->mfd < 0)) {
        conn_close(f, c);
        return 1;
    }
    /* A client's FIN: libmicrohttpd gets it once what came before it did,
     * so a handler waiting on the request sees the client leave. */
    if (c->client_eof && c->mfd >= 0 && !c->up_len && !c->lingering)
        shutdown(c->mfd, SHUT_WR);
    if (c->mhd_eof && c->down_len == c->down_off && !c->lingering) {
        /* The response is out: FIN to the client, then read and drop what
         * it still sends for a moment, so that unread request bytes do not
         * turn the close into a reset that could destroy the response. */
        shutdown(c->cfd, SHUT_WR);
        c->lingering = 1;
        c->t_linger = tn_now_ms() + LINGER_MS;
        if (c->mev) {
            epoll_ctl(f->epfd, EPOLL_CTL_DEL, c->mfd, NULL);
            c->mev = 0;
        }
        close(c->mfd);
        c->mfd = -1;
        if (c->client_eof) {
            conn_close(f, c);
            return 1;
        }
    }
    update_interest(f, c);
    return 0;
}

/* At the connection limit: the connection idle the longest that
 * libmicrohttpd does not have yet makes room. */
static int evict_one(http_front *f)
{
    front_conn *victim = NULL;
    for (front_conn *c = f->head; c; c = c->next)
        if (c->mfd < 0 && !c->lingering && (!victim || c->t_active < victim->t_active))
            victim = c;
    if (!victim)
        return -1;
    conn_close(f, victim);
    count(f, &f->stats.evicted);
    return 0;
}

static void accept_some(http_front *f)
{
    for (int i = 0; i < 64; i++) {
        struct sockaddr_in addr;
        socklen_t len = sizeof addr;
        int fd = accept4(f->listen_fd, (struct sockaddr *)&addr, &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS) {
                /* Out of descriptors: make room, or stop accepting a moment
                 * (the epoll loop would spin on the pending connection). */
                if (evict_one(f) != 0) {
                    f->listen_paused_until = tn_now_ms() + SWEEP_MS;
                    epoll_ctl(f->epfd, EPOLL_CTL_DEL, f->listen_fd, NULL);
                    return;
                }
                continue;
            }
            return; /* EAGAIN, or the client left already */
        }
        if (f->n_open >= f->cfg.max_connections && evict_one(f) != 0) {
            close(fd);
            continue;
        }
        front_conn *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->cs = (front_side){c, 1};
        c->ms = (front_side){c, 0};
        c->cfd = fd;
        c->mfd = c->mhd_fd = -1;
        c->addr = addr;
        http_framing_init(&c->fr, f->cfg.max_body_bytes);
        c->t_active = tn_now_ms();
        c->next = f->head;
        if (f->head)
            f->head->prev = c;
        f->head = c;
        f->n_open++;
        pthread_mutex_lock(&f->lock);
        f->stats.accepted++;
        f->stats.open = f->n_open;
        pthread_mutex_unlock(&f->lock);
        update_interest(f, c);
    }
}

/* Timeouts: idle before the first request, a request's head or body too
 * slow, a lingering close done. */
static void sweep(http_front *f)
{
    uint64_t now = tn_now_ms();
    if (f->listen_paused_until && now >= f->listen_paused_until) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &f->listen_side};
        epoll_ctl(f->epfd, EPOLL_CTL_ADD, f->listen_fd, &ev);
        f->listen_paused_until = 0;
    }
    front_conn *next;
    for (front_conn *c = f->head; c; c = next) {
        next = c->next;
        int mid = http_framing_mid_request(&c->fr) && c->fr.state != FR_OPAQUE;
        int idle = now - c->t_active >= (uint64_t)f->cfg.idle_timeout_ms;
        int expired = 0;
        if (c->lingering)
            expired = now >= c->t_linger;
        else if (mid)
            expired = idle || now - c->t_request >= (uint64_t)f->cfg.request_timeout_ms;
        else if (c->mfd < 0)
            expired = idle; /* libmicrohttpd times out its own idle keep-alives */
        if (expired) {
            if (!c->lingering)
                count(f, &f->stats.timed_out);
            conn_close(f, c);
        }
    }
}

static void *front_thread(void *arg)
{
    http_front *f = arg;
    struct epoll_event evs[128];
    uint64_t next_sweep = tn_now_ms() + SWEEP_MS;
    for (;;) {
        uint64_t now = tn_now_ms();
        int wait = now >= next_sweep ? 0 : (int)(next_sweep - now);
        int n = epoll_wait(f->epfd, evs, 128, wait);
        if (n < 0 && errno != EINTR) {
            tn_log(WHO, "HTTP front: epoll_wait: %s", strerror(errno));
            break;
        }
        int stop = 0;
        for (int i = 0; i < n; i++) {
            front_side *s = evs[i].data.ptr;
            if (s == &f->listen_side) {
                accept_some(f);
                continue;
            }
            if (s == &f->stop_side) {
                stop = 1;
                continue;
            }
            front_conn *c = s->c;
            if (c->cfd < 0)
                continue; /* closed earlier in this round */
            if (s->client && (evs[i].events & (EPOLLHUP | EPOLLERR)))
                c->client_eof = 2; /* reset, or both directions shut */
            else if (s->client && (evs[i].events & EPOLLIN))
                client_readable(f, c);
            if (!s->client && c->mfd >= 0) {
                if (evs[i].events & (EPOLLHUP | EPOLLERR))
                    c->mhd_hup = 1;
                if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                    mhd_readable(c);
            }
            settle(f, c);
        }
        if (tn_now_ms() >= next_sweep) {
            sweep(f);
            next_sweep = tn_now_ms() + SWEEP_MS;
        }
        free_dead(f);
        if (stop)
            break;
    }
    return NULL;
}

/* ------------------------------------------------------------ start / stop */

int http_front_start(http_front **out, const http_front_config *cfg, char *err, size_t errlen)
{
    *out = NULL;
    http_front *f = calloc(1, sizeof *f);
    if (!f)
        return tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory");
    f->cfg = *cfg;
    snprintf(f->host, sizeof f->host, "%s", cfg->host);
    f->cfg.host = f->host;
    f->listen_fd = f->epfd = f->stop_fd = -1;
    pthread_mutex_init(&f->lock, NULL);
    struct rlimit rl;
    int n_fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
                        rl.rlim_cur < (1u << 22)
                    ? (int)rl.rlim_cur
                    : 1 << 22;
    f->n_refused = n_fds;
    f->refused = calloc((size_t)n_fds, 1);
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)cfg->port);
    int rc = TN_OK;
    int one = 1;
    if (!f->refused) {
        rc = tn_fail(err, errlen, TN_ERR_NOMEM, "out of memory");
    } else if (inet_pton(AF_INET, cfg->host, &addr.sin_addr) != 1) {
        rc = tn_fail(err, errlen, TN_ERR_ARG, "--host '%s' is not an IPv4 address", cfg->host);
    } else if ((f->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0 ||
               setsockopt(f->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
               bind(f->listen_fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
               listen(f->listen_fd, 4096) != 0) {
        rc = tn_fail(err, errlen, TN_ERR_ARG, "cannot start the HTTP server on %s:%d: %s",
                     cfg->host, cfg->port, strerror(errno));
    } else if ((f->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0 || (f->stop_fd = tn_wakefd_open()) < 0) {
        rc = tn_fail(err, errlen, TN_ERR_SYS, "HTTP front: epoll / eventfd: %s", strerror(errno));
    }
    if (rc == TN_OK) {
        socklen_t len = sizeof addr;
        getsockname(f->listen_fd, (struct sockaddr *)&addr, &len);
        f->port = ntohs(addr.sin_port);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &f->listen_side};
        struct epoll_event sev = {.events = EPOLLIN, .data.ptr = &f->stop_side};
        if (epoll_ctl(f->epfd, EPOLL_CTL_ADD, f->listen_fd, &ev) != 0 ||
            epoll_ctl(f->epfd, EPOLL_CTL_ADD, f->stop_fd, &sev) != 0 ||
            pthread_create(&f->thread, NULL, front_thread, f) != 0)
            rc = tn_fail(err, errlen, TN_ERR_SYS, "HTTP front: cannot start its thread: %s",
                         strerror(errno));
        else
            f->thread_started = 1;
    }
    if (rc != TN_OK) {
        http_front_stop(f);
        return rc;
    }
    *out = f;
    return TN_OK;
}

int http_front_port(const http_front *f)
{
    return f ? f->port : -1;
}

void http_front_stop(http_front *f)
{
    if (!f)
        return;
    if (f->thread_started) {
        tn_wakefd_signal(f->stop_fd);
        pthread_join(f->thread, NULL);
    }
    while (f->head)
        conn_close(f, f->head);
    free_dead(f);
    if (f->listen_fd >= 0)
        close(f->listen_fd);
    if (f->epfd >= 0)
        close(f->epfd);
    if (f->stop_fd >= 0)
        close(f->stop_fd);
    pthread_mutex_destroy(&f->lock);
    free(f->refused);
    free(f);
}
