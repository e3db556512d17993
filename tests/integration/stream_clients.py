#!/usr/bin/env python3
"""Concurrent streaming clients with a deadline each, for the fault tests.

    stream_clients.py URL MODEL --streams N --prompts FILE --max-tokens M
                      [--deadline S] [--ready-file F --ready-after K]
                      [--expect FILE] [--out results.json]

N streams start at once (POST /v1/completions, stream, greedy, ignore_eos,
max_tokens M, token ids returned); stream i uses prompt i % P of the JSON
list of prompts (lists of token ids) in FILE. Each stream is read on a raw
socket until the server closes it or S seconds have passed since it began:
a stream still open at its deadline is *never ended* (the failure the
tests exist to catch: a hang is reported, not waited for). A stream
*completed* when it got HTTP 200, well-formed SSE events, exactly M tokens,
finish_reason "length", no error event and `[DONE]` last; otherwise it
*failed* (HTTP error, error event, short output, malformed framing).
With --expect (a JSON list, one expected token list per prompt) a
completed stream whose tokens differ is *mismatched*.

Once K streams have each received at least one token, F is created, so a
test can strike while streams are mid-flight. Prints one JSON line with the
counts and the first few problems; exits 0 only if every stream completed
and matched."""
import argparse
import json
import select
import socket
import sys
import threading
import time
import urllib.parse


def dechunk(body):
    out, i = bytearray(), 0
    while True:
        j = body.find(b"\r\n", i)
        if j < 0:
            raise ValueError("truncated chunk header")
        size = int(body[i:j].split(b";")[0], 16)
        if size == 0:
            return bytes(out)
        out += body[j + 2:j + 2 + size]
        if len(body) < j + 2 + size + 2:
            raise ValueError("truncated chunk")
        i = j + 2 + size + 2


def parse_stream(raw, max_tokens):
    """(outcome, tokens, why): outcome is ok or failed."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        return "failed", [], "no HTTP header"
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        try:
            body = dechunk(body)
        except ValueError as e:
            return "failed", [], "HTTP %d: %s" % (status, e)
    if status != 200:
        return "failed", [], "HTTP %d %s" % (status, body[:200].decode("utf-8", "replace"))
    events = body.decode("utf-8").split("\n\n")
    if events[-2:] != ["data: [DONE]", ""]:
        return "failed", [], "no [DONE] at the end: %r" % events[-3:]
    toks, finish = [], None
    for e in events[:-2]:
        if not e.startswith("data: "):
            return "failed", toks, "malformed event %r" % e[:100]
        j = json.loads(e[6:])
        if "error" in j:
            return "failed", toks, "error event: %s" % j["error"].get("message")
        for c in j["choices"]:
            toks += c.get("token_ids", [])
            finish = c.get("finish_reason") or finish
    if finish != "length" or len(toks) != max_tokens:
        return "failed", toks, "finish_reason %s after %d tokens" % (finish, len(toks))
    return "ok", toks, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("model")
    ap.add_argument("--streams", type=int, required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--deadline", type=float, default=40)
    ap.add_argument("--ready-file", default="")
    ap.add_argument("--ready-after", type=int, default=1)
    ap.add_argument("--expect", default="")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    prompts = json.load(open(a.prompts))
    expect = json.load(open(a.expect)) if a.expect else None
    lock = threading.Lock()
    st = {"streams": a.streams, "ok": 0, "failed": 0, "never_ended": 0, "mismatched": 0,
          "problems": []}
    started = [0]

    def note(kind, why):
        with lock:
            st[kind] += 1
            if len(st["problems"]) < 8:
                st["problems"].append("%s: %s" % (kind, why))

    def client(i):
        prompt = prompts[i % len(prompts)]
        body = json.dumps({"model": a.model, "prompt": prompt, "max_tokens": a.max_tokens,
                           "temperature": 0, "ignore_eos": True, "stream": True,
                           "return_token_ids": True}).encode()
        req = (b"POST /v1/completions HTTP/1.1\r\nHost: %s:%d\r\n"
               b"Content-Type: application/json\r\nContent-Length: %d\r\n"
               b"Connection: close\r\n\r\n" % (u.hostname.encode(), u.port, len(body))) + body
        end = time.monotonic() + a.deadline
        raw, got_token = bytearray(), False
        try:
            s = socket.create_connection((u.hostname, u.port), timeout=a.deadline)
        except OSError as e:
            note("failed", "stream %d: connect: %s" % (i, e))
            return
        with s:
            try:
                s.sendall(req)
                s.setblocking(False)
                while True:
                    left = end - time.monotonic()
                    if left <= 0:
                        note("never_ended", "stream %d: open after %.0f s with %d bytes" %
                             (i, a.deadline, len(raw)))
                        return
                    r, _, _ = select.select([s], [], [], min(left, 0.5))
                    if not r:
                        continue
                    data = s.recv(65536)
                    if not data:
                        break
                    raw += data
                    if not got_token and b'"token_ids":[' in raw:
                        got_token = True
                        with lock:
                            started[0] += 1
                            if a.ready_file and started[0] == a.ready_after:
                                open(a.ready_file, "w").close()
            except OSError as e:
                note("failed", "stream %d: %s" % (i, e))
                return
        outcome, toks, why = parse_stream(bytes(raw), a.max_tokens)
        if outcome != "ok":
            note("failed", "stream %d: %s" % (i, why))
        elif expect is not None and toks != expect[i % len(prompts)]:
            note("mismatched", "stream %d (prompt %d): got %s want %s" %
                 (i, i % len(prompts), toks, expect[i % len(prompts)]))
        else:
            with lock:
                st["ok"] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(a.streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    line = json.dumps(st)
    if a.out:
        with open(a.out, "w") as f:
            f.write(line + "\n")
    print(line)
    sys.exit(0 if st["ok"] == a.streams else 1)


if __name__ == "__main__":
    main()
