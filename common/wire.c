#include "common/wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

int wire_send(void *sock, const void *rid, size_t rid_len,
              const ProtobufCMessage *msg, int flags)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        errno = ENOMEM;
        return -1;
    }
    protobuf_c_message_pack(msg, buf);
    int rc = 0;
    if (rid && zmq_send(sock, rid, rid_len, flags | ZMQ_SNDMORE) < 0)
        rc = -1;
    if (rc == 0 && zmq_send(sock, buf, n, flags) < 0)
        rc = -1;
    int saved = errno;
    free(buf);
    errno = saved;
    return rc;
}

/* Drops the remaining frames of a multipart message. */
static void drain_more(void *sock)
{
    int more = 1;
    size_t len = sizeof more;
    while (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &len) == 0 && more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, 0) < 0) {
            zmq_msg_close(&m);
            return;
        }
        zmq_msg_close(&m);
        len = sizeof more;
    }
}

static int has_more(void *sock)
{
    int more = 0;
    size_t len = sizeof more;
    return zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &len) == 0 && more;
}

int wire_recv(void *sock, void *rid, size_t rid_cap, size_t *rid_len,
              const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out,
              int flags)
{
    *out = NULL;
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, sock, flags) < 0) {
        int saved = errno;
        zmq_msg_close(&m);
        errno = saved;
        return -1;
    }
    if (rid) {
        size_t n = zmq_msg_size(&m);
        int bad = n > rid_cap || !has_more(sock);
        if (!bad) {
            memcpy(rid, zmq_msg_data(&m), n);
            *rid_len = n;
        } else {
            *rid_len = 0;
        }
        zmq_msg_close(&m);
        if (bad) {
            drain_more(sock);
            return -2;
        }
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, 0) < 0) {
            zmq_msg_close(&m);
            return -2;
        }
    }
    int extra = has_more(sock);
    if (extra || zmq_msg_size(&m) > WIRE_MAX_MESSAGE) {
        zmq_msg_close(&m);
        drain_more(sock);
        return -2;
    }
    *out = protobuf_c_message_unpack(desc, NULL, zmq_msg_size(&m),
                                     zmq_msg_data(&m));
    zmq_msg_close(&m);
    return *out ? 0 : -2;
}
