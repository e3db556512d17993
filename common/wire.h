/* The control-plane wire format shared by the router, the workers and RPC
 * clients: one protobuf envelope (tandem.v1.WorkerMessage or ClientMessage,
 * passed as its ProtobufCMessage base) per ZeroMQ frame, preceded by the
 * peer's routing id frame on ROUTER sockets. Nothing else travels on these
 * sockets. */
#ifndef TANDEM_COMMON_WIRE_H
#define TANDEM_COMMON_WIRE_H
#include <stddef.h>
#include <stdint.h>
#include <protobuf-c/protobuf-c.h>

#define WIRE_MAX_ID 256          /* longest routing id we accept */
#define WIRE_MAX_MESSAGE (256u << 20) /* larger frames are refused unread */

/* Serializes msg and sends it as one frame; with rid (a ROUTER socket) the
 * routing id frame goes first. flags are zmq_send flags (ZMQ_DONTWAIT).
 * Returns 0, or -1 with errno from zmq (EAGAIN, EHOSTUNREACH) or ENOMEM. */
int wire_send(void *sock, const void *rid, size_t rid_len,
              const ProtobufCMessage *msg, int flags);

/* Receives one message. On a ROUTER socket (rid != NULL) the routing id is
 * copied to rid[rid_cap] and its length to *rid_len. Returns 0 with *out
 * unpacked (free with protobuf_c_message_free_unpacked), -1 with errno
 * EAGAIN when nothing is waiting (ZMQ_DONTWAIT), or -2 for a malformed
 * message (wrong frame count, undecodable protobuf): it was consumed and
 * dropped, *out is NULL and rid holds its sender when known. */
int wire_recv(void *sock, void *rid, size_t rid_cap, size_t *rid_len,
              const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out,
              int flags);

#endif
