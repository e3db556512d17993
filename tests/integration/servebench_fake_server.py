#!/usr/bin/env python3
"""A scripted OpenAI-style streaming server for tandem-servebench's test.

usage: servebench_fake_server.py PORT_FILE

Answers POST /v1/completions in arrival order with one scripted behaviour
each (SCRIPT below), so the client's outcome accounting and token counting
can be checked against known answers: token ids several to a chunk, text
chunks without token ids, an HTTP error, an error event, a usage count
that disagrees with the ids, a stream without [DONE], and a request that
never ends (the client's time bound must abort it). Writes the bound port
to PORT_FILE and serves until killed. Each request's body is checked for
the fields the benchmark must send; a bad one is answered 400.
"""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GAP = 0.01  # seconds between chunks


def chunk(ids=None, text="", finish=None):
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    if ids is not None:
        choice["token_ids"] = ids
    return {"id": "cmpl-fake", "object": "text_completion", "choices": [choice], "usage": None}


def usage(prompt, completion):
    return {"id": "cmpl-fake", "object": "text_completion", "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion}}


# (name, events): an event is a JSON object, "DONE", or "HANG"; prompt
# tokens in usage are the request's own prompt length.
SCRIPT = [
    ("ok, one id per chunk", [chunk([5]), chunk([6]), chunk([7]), chunk([], finish="length"), "USAGE 3", "DONE"]),
    ("ok, two ids in the first chunk", [chunk([5, 6]), chunk([7]), chunk([], finish="length"), "USAGE 3", "DONE"]),
    ("ok, text chunks without ids", [chunk(None, "a"), chunk(None, "b"), chunk(None, "c"),
                                     chunk(None, "", "length"), "USAGE 3", "DONE"]),
    ("http error", "429"),
    ("error event", [chunk([5]), {"error": {"message": "scripted failure", "type": "server_error"}}, "DONE"]),
    ("usage disagrees with the ids", [chunk([5]), chunk([6]), chunk([], finish="length"), "USAGE 3", "DONE"]),
    ("no [DONE]", [chunk([5]), chunk([6]), chunk([7]), chunk([], finish="length"), "USAGE 3"]),
    ("never ends", [chunk([5]), "HANG"]),
]

lock = threading.Lock()
served = [0]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # the body ends when the connection closes

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with lock:
            k = served[0]
            served[0] += 1
        want = (body.get("stream") is True and body.get("ignore_eos") is True and
                body.get("stream_options") == {"include_usage": True} and
                isinstance(body.get("prompt"), list) and isinstance(body.get("max_tokens"), int))
        if not want or k >= len(SCRIPT):
            self.reply_error(400, "unexpected request %d: %s" % (k, json.dumps(body)[:200]))
            return
        name, events = SCRIPT[k]
        if events == "429":
            self.reply_error(429, "scripted: too many requests")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            for ev in events:
                time.sleep(GAP)
                if ev == "HANG":
                    time.sleep(120)
                    return
                if ev == "DONE":
                    data = "[DONE]"
                elif isinstance(ev, str) and ev.startswith("USAGE "):
                    data = json.dumps(usage(len(body["prompt"]), int(ev.split()[1])))
                else:
                    data = json.dumps(ev)
                self.wfile.write(("data: %s\n\n" % data).encode())
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def reply_error(self, code, msg):
        data = json.dumps({"error": {"message": msg, "type": "invalid_request_error",
                                     "param": None, "code": None}}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    import os
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    srv.serve_forever()


main()
