#!/usr/bin/env python3
"""Drives headless Chromium over the DevTools protocol to test a live page.

    dashboard_cdp.py URL --step 'JS expression' [--step ...] [--timeout S]
                     [--screenshot out.png] [--chromium chromium]

Opens URL in one tab (no reload afterwards) and, for each --step in order,
evaluates the JavaScript expression in the page every 200 ms until it is
truthy, printing "step N ok" (flushed) when it is: a script driving the
cluster can wait for that line before its next move. A step that stays falsy
for --timeout seconds fails: the last value, the page's status line and a
screenshot are reported, exit status 1. Finally the page is captured to
--screenshot.

The protocol runs over --remote-debugging-pipe (file descriptors 3 and 4,
NUL-separated JSON), so nothing but the standard library is needed and no
debugging port is opened."""
import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


class Browser:
    def __init__(self, chromium, width, height):
        self.profile = tempfile.mkdtemp(prefix="tandem-chromium-")
        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        # The child needs them as fds 3 (commands in) and 4 (results out);
        # park them high first so the dup2s cannot clobber each other.
        hi_cmd = os.dup2(cmd_r, 100, inheritable=False)
        hi_res = os.dup2(res_w, 101, inheritable=False)
        os.close(cmd_r)
        os.close(res_w)

        def child_fds():  # dup2 targets are inheritable; everything else is CLOEXEC
            os.dup2(hi_cmd, 3)
            os.dup2(hi_res, 4)

        args = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--mute-audio", "--hide-scrollbars", "--remote-debugging-pipe",
                "--user-data-dir=" + self.profile, "--window-size=%d,%d" % (width, height),
                "about:blank"]
        self.log = open(os.path.join(self.profile, "chromium.log"), "wb")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=self.log, close_fds=False, preexec_fn=child_fds)
        os.close(hi_cmd)
        os.close(hi_res)
        self.w = cmd_w
        self.r = res_r
        self.buf = b""
        self.next_id = 0
        self.session = None

    def send(self, method, params=None, session=True, timeout=30):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        end = time.monotonic() + timeout
        while True:
            while b"\0" not in self.buf:
                if time.monotonic() > end:
                    raise TimeoutError("no answer to %s" % method)
                chunk = os.read(self.r, 1 << 20)
                if not chunk:
                    raise EOFError("chromium closed the pipe (see %s)" % self.log.name)
                self.buf += chunk
            raw, self.buf = self.buf.split(b"\0", 1)
            m = json.loads(raw)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError("%s: %s" % (method, m["error"]))
                return m.get("result", {})

    def open(self, url):
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)
        att = self.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True},
                        session=False)
        self.session = att["sessionId"]
        self.send("Page.enable")
        self.send("Page.navigate", {"url": url})

    def eval(self, expr):
        r = self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True})
        if "exceptionDetails" in r:
            return None
        return r.get("result", {}).get("value")

    def screenshot(self, path):
        r = self.send("Page.captureScreenshot", {"format": "png"})
        with open(path, "wb") as f:
            f.write(base64.b64decode(r["data"]))

    def close(self):
        try:
            self.send("Browser.close", session=False, timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        os.close(self.w)
        os.close(self.r)
        shutil.rmtree(self.profile, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--step", action="append", default=[])
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--screenshot", default="")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    ap.add_argument("--size", default="1400x1500")
    a = ap.parse_args()
    width, height = (int(x) for x in a.size.split("x"))
    b = Browser(a.chromium, width, height)
    rc = 0
    try:
        b.open(a.url)
        for i, expr in enumerate(a.step, 1):
            end = time.monotonic() + a.timeout
            value = None
            while time.monotonic() < end:
                value = b.eval(expr)
                if value:
                    break
                time.sleep(0.2)
            if not value:
                status = b.eval("(document.getElementById('status')||{}).textContent")
                print("step %d failed: %s stayed %r (page status: %r)" % (i, expr, value, status),
                      flush=True)
                rc = 1
                break
            print("step %d ok" % i, flush=True)
        if a.screenshot:
            b.screenshot(a.screenshot)
    except Exception as e:
        print("driver error: %s: %s" % (type(e).__name__, e), flush=True)
        rc = 1
    finally:
        b.close()
    sys.exit(rc)


if __name__ == "__main__":
    main()
