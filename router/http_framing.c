#include "router/http_framing.h"

#include <string.h>

void http_framing_init(http_framing *f, uint64_t max_body)
{
    memset(f, 0, sizeof *f);
    f->max_body = max_body;
    f->state = FR_HEAD;
}

static int lower(int c)
{
    return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

/* s[0..n) equals the lower-case word w, ignoring case. */
static int word_is(const char *s, size_t n, const char *w)
{
    if (strlen(w) != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (lower((unsigned char)s[i]) != w[i])
            return 0;
    return 1;
}

static void trim(const char **s, size_t *n)
{
    while (*n && (**s == ' ' || **s == '\t'))
        (*s)++, (*n)--;
    while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t'))
        (*n)--;
}

static void reset_head(http_framing *f)
{
    f->n_lines = 0;
    f->head_bytes = 0;
    f->line_len = 0;
    f->cr = 0;
    f->cl_seen = f->cl_conflict = f->te_seen = f->te_chunked = f->fold = 0;
    f->cl = 0;
}

/* One header line (CR stripped), len bytes of which the first
 * sizeof f->line - 1 are in f->line. */
static void header_line(http_framing *f, size_t len)
{
    size_t kept = len < sizeof f->line ? len : sizeof f->line - 1;
    int cut = kept < len;
    if (f->n_lines++ == 0)
        return; /* the request line */
    if (kept && (f->line[0] == ' ' || f->line[0] == '\t')) {
        f->fold = 1; /* obsolete line folding: libmicrohttpd's business */
        return;
    }
    const char *colon = memchr(f->line, ':', kept);
    if (!colon)
        return;
    size_t name_len = (size_t)(colon - f->line);
    const char *v = colon + 1;
    size_t vn = kept - name_len - 1;
    trim(&v, &vn);
    if (word_is(f->line, name_len, "content-length")) {
        uint64_t x = 0;
        int ok = !cut && vn > 0;
        for (size_t i = 0; ok && i < vn; i++) {
            ok = v[i] >= '0' && v[i] <= '9' && x <= (UINT64_MAX - 9) / 10;
            x = x * 10 + (uint64_t)(v[i] - '0');
        }
        if (!ok || (f->cl_seen && x != f->cl))
            f->cl_conflict = 1;
        f->cl_seen = 1;
        f->cl = x;
    } else if (word_is(f->line, name_len, "transfer-encoding")) {
        if (f->te_seen)
            f->fold = 1; /* two codings headers: not ours to interpret */
        f->te_seen = 1;
        f->te_chunked = !cut && word_is(v, vn, "chunked");
    }
}

static void head_end(http_framing *f)
{
    f->heads++;
    if (f->fold || f->cl_conflict || (f->te_seen && (f->cl_seen || !f->te_chunked))) {
        f->state = FR_OPAQUE;
    } else if (f->te_chunked) {
        f->state = FR_CHUNK_SIZE;
        f->body_len = 0;
        f->chunk_size = 0;
        f->n_held = 0;
    } else if (f->cl_seen && f->cl > 0) {
        f->state = FR_BODY;
        f->remaining = f->cl;
    } else {
        f->state = FR_HEAD;
    }
    reset_head(f);
}

/* Head and trailer lines: appends c to the current line; returns the
 * line's length without its CR when c ends it, else -1. */
static long line_byte(http_framing *f, char c)
{
    if (c != '\n') {
        if (f->line_len < sizeof f->line - 1)
            f->line[f->line_len] = c;
        f->line_len++;
        f->cr = c == '\r';
        return -1;
    }
    size_t len = f->line_len - (f->cr && f->line_len ? 1 : 0);
    f->line_len = 0;
    f->cr = 0;
    return (long)len;
}

static void release_held(http_framing *f, char *out, size_t *o)
{
    memcpy(out + *o, f->held, f->n_held);
    *o += f->n_held;
    f->n_held = 0;
}

/* The body went over the limit: the request ends with the last chunk in
 * place of the chunk-size line held so far. */
static int refuse(http_framing *f, char *out, size_t *o)
{
    static const char last[] = "0\r\n\r\n";
    memcpy(out + *o, last, sizeof last - 1);
    *o += sizeof last - 1;
    f->n_held = 0;
    f->state = FR_REFUSED;
    return FR_EV_REFUSED;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (char)lower((unsigned char)c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static void chunk_line_done(http_framing *f)
{
    f->body_len += f->chunk_size;
    if (f->chunk_size == 0) {
        f->state = FR_TRAILERS;
        f->line_len = 0;
        f->cr = 0;
    } else {
        f->state = FR_CHUNK_DATA;
        f->remaining = f->chunk_size;
    }
    f->chunk_size = 0;
}

int http_framing_feed(http_framing *f, const char *in, size_t n, char *out, size_t *out_len)
{
    size_t o = 0;
    int ev = 0;
    for (size_t i = 0; i < n;) {
        char c = in[i];
        switch (f->state) {
        case FR_HEAD: {
            out[o++] = c;
            i++;
            f->head_bytes++;
            long len = line_byte(f, c);
            if (len < 0)
                break;
            if (len > 0)
                header_line(f, (size_t)len);
            else if (f->n_lines == 0)
                f->head_bytes = 0; /* an empty line before a request: ignored */
            else {
                head_end(f);
                ev |= FR_EV_HEAD;
            }
            break;
        }
        case FR_BODY:
        case FR_CHUNK_DATA:
        case FR_OPAQUE: {
            size_t k = n - i;
            if (f->state != FR_OPAQUE && k > f->remaining)
                k = (size_t)f->remaining;
            memcpy(out + o, in + i, k);
            o += k;
            i += k;
            if (f->state == FR_OPAQUE)
                break;
            f->remaining -= k;
            if (f->remaining == 0) {
                f->state = f->state == FR_BODY ? FR_HEAD : FR_CHUNK_END;
                f->cr = 0;
            }
            break;
        }
        case FR_CHUNK_SIZE: {
            int d = hex_value(c);
            i++;
            if (d >= 0) {
                /* Refused at the first digit that takes the body past the
                 * limit: no need to wait for the end of the line. */
                int over = f->n_held == sizeof f->held || f->chunk_size > (UINT64_MAX >> 4);
                if (!over) {
                    f->held[f->n_held++] = c;
                    f->chunk_size = f->chunk_size * 16 + (uint64_t)d;
                    over = f->chunk_size > f->max_body ||
                           f->body_len > f->max_body - f->chunk_size;
                }
                if (over) {
                    ev |= refuse(f, out, &o);
                    i = n;
                }
                break;
            }
            int digits = f->n_held > 0;
            release_held(f, out, &o);
            out[o++] = c;
            if (digits && c == '\n')
                chunk_line_done(f);
            else if (digits && (c == ';' || c == '\r'))
                f->state = FR_CHUNK_EXT;
            else
                f->state = FR_OPAQUE; /* malformed: libmicrohttpd answers 400 */
            break;
        }
        case FR_CHUNK_EXT:
            out[o++] = c;
            i++;
            if (c == '\n')
                chunk_line_done(f);
            break;
        case FR_CHUNK_END:
            out[o++] = c;
            i++;
            if (c == '\r' && !f->cr)
                f->cr = 1;
            else if (c == '\n')
                f->state = FR_CHUNK_SIZE;
            else
                f->state = FR_OPAQUE;
            break;
        case FR_TRAILERS:
            out[o++] = c;
            i++;
            if (line_byte(f, c) == 0) {
                f->state = FR_HEAD;
                reset_head(f);
            }
            break;
        case FR_REFUSED:
            i = n;
            break;
        }
    }
    *out_len = o;
    return ev;
}

int http_framing_mid_request(const http_framing *f)
{
    if (f->state == FR_HEAD)
        return f->head_bytes > 0;
    return f->state != FR_REFUSED;
}
