#!/usr/bin/env python3
"""Writes the seed corpus of the router_messages fuzz target
(tests/fuzz/corpus/router_messages/): frame sequences that walk requests
through the router's state machine (register, generate, KvReady,
PrefillResult, TokenBatch, cancel, errors, expiry). The protobuf encoding
is written out by hand (field numbers from proto/tandem.proto) so the
script needs nothing but Python. Frame layout: fuzz_router_messages.c."""
import os
import struct
import sys


def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(field, wt):
    return varint(field << 3 | wt)


def vi(field, v):
    return key(field, 0) + varint(v)


def ln(field, data):
    if isinstance(data, str):
        data = data.encode()
    return key(field, 2) + varint(len(data)) + data


def f32(field, v):
    return key(field, 5) + struct.pack('<f', v)


def f64(field, v):
    return key(field, 1) + struct.pack('<d', v)


def packed(field, vals):
    return ln(field, b''.join(varint(v) for v in vals))


def frame(payload, rpc=False, sender=0, expire=False):
    hdr = (1 if rpc else 0) | (sender << 1) | (0x80 if expire else 0)
    return bytes([hdr]) + struct.pack('<H', len(payload)) + payload


def register(wid, role, pages=64):
    # role 1 prefiller, 2 decoder
    body = (ln(1, wid) + vi(2, role) + ln(3, 'm') + ln(4, 'gpt_oss') + vi(5, 512) +
            vi(6, 4096) + vi(7, 16) + vi(8, pages) + packed(9, [2]) + ln(10, b'ep'))
    return ln(1, body)


def generate(prompt, max_tokens=4, stream=True, tag='t', stops=()):
    sampling = f32(1, 0.0) + f32(2, 1.0) + vi(3, 0) + vi(4, 7)
    g = (ln(1, 'm') + packed(2, prompt) + ln(3, sampling) + vi(4, 1) + vi(5, max_tokens) +
         (packed(6, stops) if stops else b'') + vi(7, 1) + vi(8, 1 if stream else 0) + ln(9, tag))
    return ln(1, g)


def rid(n):
    return '%016x' % n


def kv_ready(n, pages):
    dest = ln(1, 'w0') + packed(2, pages) + vi(3, 16)
    return ln(5, ln(1, rid(n)) + ln(2, dest))


def prefill_result(n, first, ok=True):
    r = ln(1, rid(n)) + vi(2, first) + vi(3, 12345) + vi(4, 1 if ok else 2) + vi(5, 3) + f64(6, 0.01)
    return ln(7, r)


def token_batch(chunks):
    body = b''
    for n, toks, finish in chunks:
        c = ln(1, rid(n)) + packed(2, toks) + vi(3, finish)
        body += ln(1, c)
    return ln(9, body)


def heartbeat_decoder(free):
    return ln(3, ln(2, vi(1, 1) + vi(2, 0) + vi(3, free) + vi(4, 64) + f64(5, 10.0) + vi(6, 100)))


def cancel_client(n):
    return ln(4, ln(1, rid(n)))


def worker_error(n, code, msg):
    return ln(11, vi(1, code) + ln(2, msg) + ln(3, rid(n)))


def main(out):
    os.makedirs(out, exist_ok=True)
    setup = frame(register('w0', 2), sender=0) + frame(register('w1', 1), sender=1)
    seeds = {
        # a request all the way through: tokens, then a stop token
        'complete': setup + frame(generate([1, 2, 3]), rpc=True) +
        frame(kv_ready(1, [0]), sender=0) + frame(prefill_result(1, 5), sender=1) +
        frame(token_batch([(1, [6, 7], 0)]), sender=0) +
        frame(token_batch([(1, [2], 2)]), sender=0) + frame(heartbeat_decoder(64), sender=0),
        # the client cancels while the prefill runs; the prefiller reports after
        'cancel_prefilling': setup + frame(generate([1, 2, 3, 4], 8), rpc=True) +
        frame(kv_ready(1, [0]), sender=0) + frame(cancel_client(1), rpc=True) +
        frame(prefill_result(1, 5), sender=1),
        # the transfer fails; a second request is refused by the decoder
        'transfer_failed': setup + frame(generate([1], 2, False), rpc=True) +
        frame(generate([9, 9], 2, True, 'u'), rpc=True, sender=1) +
        frame(kv_ready(1, [3]), sender=0) + frame(prefill_result(1, 5, ok=False), sender=1) +
        frame(worker_error(2, 4, 'never fits'), sender=0),
        # every worker stops heartbeating mid-request
        'expire': setup + frame(generate([1, 2]), rpc=True) + frame(kv_ready(1, [1]), sender=0) +
        frame(ln(5, b''), sender=2, expire=True) + frame(generate([1]), rpc=True),
        # a router restart: messages from workers it does not know, then registration
        'unknown_worker': frame(heartbeat_decoder(3), sender=2) + frame(token_batch([(7, [1], 0)]), sender=0) +
        setup + frame(ln(5, b''), rpc=True) + frame(b'\x2a\x00', rpc=True, sender=3),
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), 'wb') as f:
            f.write(data)


if __name__ == '__main__':
    main(sys.argv[1] if len(sys.argv) > 1 else 'tests/fuzz/corpus/router_messages')
