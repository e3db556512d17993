#!/usr/bin/env python3
"""Bounded synthetic load for the autoscaling tests (loopback only).

    load_gen.py URL MODEL --clients C --prompt-len L --max-tokens M
                [--until-file F] [--max-requests N] [--max-seconds S] [--vocab V]
                [--pause-s P] [--out results.json]

C client threads each send POST /v1/completions (prompt of L token ids,
max_tokens M, ignore_eos, temperature 0) back to back (or P seconds apart:
a paced trickle whose rate does not depend on how fast the build serves
requests) until F exists, N
requests have been sent in all, or S seconds have passed, whichever comes
first. Every response is checked to be complete: HTTP 200, finish_reason
"length" and exactly M token ids. Prints one JSON line with the totals and
the first failures, and exits 1 if any request failed."""
import argparse
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("model")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--until-file", default="")
    ap.add_argument("--max-requests", type=int, default=1000)
    ap.add_argument("--max-seconds", type=float, default=60)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--pause-s", type=float, default=0)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    lock = threading.Lock()
    stats = {"sent": 0, "ok": 0, "failed": 0, "failures": [], "prompt_tokens": 0}
    deadline = time.monotonic() + a.max_seconds

    def take_ticket():
        with lock:
            if stats["sent"] >= a.max_requests or time.monotonic() > deadline:
                return None
            if a.until_file and os.path.exists(a.until_file):
                return None
            stats["sent"] += 1
            return stats["sent"]

    def client(k):
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
        while True:
            n = take_ticket()
            if n is None:
                break
            # Different prompts per request (ids stay inside the vocabulary).
            prompt = [(n * 7 + i * 13 + k) % (a.vocab - 3) + 3 for i in range(a.prompt_len)]
            body = json.dumps({"model": a.model, "prompt": prompt, "max_tokens": a.max_tokens,
                               "temperature": 0, "ignore_eos": True})
            why = None
            try:
                conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
                if r.status != 200:
                    why = "HTTP %d %s" % (r.status, data[:300].decode("utf-8", "replace"))
                else:
                    j = json.loads(data)
                    c = j["choices"][0]
                    if c["finish_reason"] != "length" or len(c["token_ids"]) != a.max_tokens:
                        why = "incomplete: finish_reason %s, %d tokens" % (c["finish_reason"],
                                                                          len(c["token_ids"]))
            except Exception as e:  # a dropped connection is a lost request
                why = "%s: %s" % (type(e).__name__, e)
                conn.close()
                conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
            with lock:
                if why:
                    stats["failed"] += 1
                    if len(stats["failures"]) < 5:
                        stats["failures"].append(why)
                else:
                    stats["ok"] += 1
                    stats["prompt_tokens"] += a.prompt_len
            if a.pause_s > 0:
                time.sleep(a.pause_s)
        conn.close()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    line = json.dumps(stats)
    if a.out:
        with open(a.out, "w") as f:
            f.write(line + "\n")
    print(line)
    sys.exit(0 if stats["failed"] == 0 and stats["sent"] > 0 else 1)


if __name__ == "__main__":
    main()
