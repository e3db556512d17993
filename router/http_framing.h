/* Where HTTP/1.1 requests begin and end in a client's byte stream, for the
 * router's connection front (http_front.c): request heads, Content-Length
 * bodies, and chunked bodies with their chunk-size lines and trailers.
 *
 * It exists because libmicrohttpd 0.9.75 keeps a chunk's declared size to
 * itself: a request declaring a chunk of 2^64-1 bytes and sending nothing
 * would hold its connection with no answer. The front feeds every byte a
 * client sends through this parser before libmicrohttpd sees it; a
 * chunk-size line that would take the body past the limit is replaced by
 * the last chunk ("0\r\n\r\n"), so libmicrohttpd sees a complete request at
 * once and the router answers it 413, and the rest of the client's bytes
 * are dropped.
 *
 * The parser only needs to agree with libmicrohttpd on framing. Where a
 * request is one libmicrohttpd refuses and closes (two different
 * Content-Length values, Content-Length with Transfer-Encoding, a transfer
 * coding other than chunked, a malformed chunk line, obsolete line folding)
 * it stops interpreting and passes the bytes through unchanged ("opaque"):
 * the router refuses such a request before its body, and the body limit
 * still holds in the handler. Pure code, no I/O: tests/unit/test_http_framing.c. */
#ifndef TANDEM_ROUTER_HTTP_FRAMING_H
#define TANDEM_ROUTER_HTTP_FRAMING_H
#include <stddef.h>
#include <stdint.h>

/* Output may exceed input by at most this much in one call (a held
 * chunk-size line released, or the last chunk written in place of one). */
#define HTTP_FRAMING_SLACK 320

typedef enum {
    FR_HEAD = 0,       /* request line and header lines */
    FR_BODY,           /* Content-Length body: `remaining` bytes */
    FR_CHUNK_SIZE,     /* hex digits of a chunk-size line (held) */
    FR_CHUNK_EXT,      /* the rest of a chunk-size line (extensions, CR) */
    FR_CHUNK_DATA,     /* `remaining` bytes of chunk data */
    FR_CHUNK_END,      /* the CRLF after chunk data */
    FR_TRAILERS,       /* trailer lines after the last chunk */
    FR_OPAQUE,         /* passing everything through, no longer interpreting */
    FR_REFUSED,        /* the body went over the limit: dropping everything */
} http_framing_state;

/* What a call saw. */
enum {
    FR_EV_HEAD = 1,    /* a request head ended (the first makes the front hand over) */
    FR_EV_REFUSED = 2, /* a chunked body went over max_body: the request ends here */
};

typedef struct http_framing {
    http_framing_state state;
    uint64_t max_body;
    uint64_t remaining;    /* FR_BODY, FR_CHUNK_DATA */
    uint64_t body_len;     /* chunked: sizes declared so far in this request */
    uint64_t chunk_size;   /* FR_CHUNK_SIZE: the digits so far */
    char held[64];         /* FR_CHUNK_SIZE: the line's bytes, released at its end */
    size_t n_held;
    char line[256];        /* head / trailer line so far (the first 255 bytes) */
    size_t line_len;       /* the whole line's length */
    int n_lines;           /* lines of the current head */
    size_t head_bytes;     /* bytes of the current head; 0 between requests */
    int cr;                /* the previous byte of a chunk line was CR */
    int cl_seen, cl_conflict, te_seen, te_chunked, fold;
    uint64_t cl;
    uint64_t heads;        /* request heads completed */
} http_framing;

void http_framing_init(http_framing *f, uint64_t max_body);

/* Consumes in[0..n) and appends what the server should receive to out,
 * which has room for n + HTTP_FRAMING_SLACK bytes; *out_len is set. Returns
 * FR_EV_* bits. */
int http_framing_feed(http_framing *f, const char *in, size_t n, char *out, size_t *out_len);

/* 1 while a request is partly received (head begun, or body not done). */
int http_framing_mid_request(const http_framing *f);

#endif
