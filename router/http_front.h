/* The router's HTTP connection front: the API port's listening socket and
 * every client connection on it live here, in one epoll thread, and reach
 * libmicrohttpd (http_server.c, thread per connection) through a socket
 * pair only once a request head has arrived.
 *
 * Why a front instead of libmicrohttpd's own listener (docs/RELIABILITY.md,
 * "Connections"):
 *   - an idle or slow client costs a file descriptor and a few hundred
 *     bytes here, not a thread and a slot of libmicrohttpd's connection
 *     limit, so a flood of idle connections cannot lock the API (or
 *     /healthz) out; connections that send nothing are closed after the
 *     idle timeout, a request head or body that does not arrive in time
 *     after the request timeout, and at the connection limit a new
 *     connection evicts the one idle the longest;
 *   - every byte a client sends passes through http_framing.c, which sees
 *     the chunk-size lines libmicrohttpd 0.9.75 hides from the handler: a
 *     chunk that would take the body past --max-body-bytes ends the request
 *     at once (the handler asks http_front_body_refused and answers 413).
 * Responses pass through unchanged; a client that hangs up is passed on as
 * a hang-up of the socket pair, which the handler notices as before. */
#ifndef TANDEM_ROUTER_HTTP_FRONT_H
#define TANDEM_ROUTER_HTTP_FRONT_H
#include <stddef.h>
#include <stdint.h>

struct MHD_Daemon;
typedef struct http_front http_front;

typedef struct http_front_config {
    const char *host;          /* IPv4 address to bind */
    int port;                  /* 0: any free port */
    int max_connections;       /* client connections held at once */
    int idle_timeout_ms;       /* no byte before the first request / within a request */
    int request_timeout_ms;    /* a request's head and body must arrive within this */
    uint64_t max_body_bytes;   /* chunked bodies past this end at once */
    struct MHD_Daemon *mhd;    /* started with MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC */
} http_front_config;

typedef struct http_front_stats {
    uint64_t accepted, timed_out, evicted, refused_bodies, handed_over;
    int open;                  /* client connections now */
} http_front_stats;

/* Binds, listens and starts the thread. Returns TN_OK or an error with a
 * reason (address, port in use, no memory). */
int http_front_start(http_front **out, const http_front_config *cfg, char *err, size_t errlen);
int http_front_port(const http_front *f);
/* 1 if the front ended the request arriving on fd (libmicrohttpd's end of
 * the pair, MHD_CONNECTION_INFO_CONNECTION_FD) because its chunked body
 * declared more than max_body_bytes. */
int http_front_body_refused(http_front *f, int fd);
void http_front_get_stats(http_front *f, http_front_stats *s);
/* Stops the thread and closes every connection (libmicrohttpd's ends see a
 * hang-up). NULL is fine. */
void http_front_stop(http_front *f);

#endif
