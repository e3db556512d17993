#!/usr/bin/env python3
"""Independent recomputation of tandem-servebench's report from its trace.

usage: servebench_ref.py TRACE REPORT_JSON [--expect-exact-output]

Reads the per-request trace (one JSON line per request: outcome, token
counts, send / chunk / end timestamps) and recomputes, per point, what the
JSON report says: outcome counts, input and output token totals, the point's
duration, throughputs, TTFT / TPOT / ITL / E2E mean, p50, p90, p99 and max
(linear interpolation between order statistics, written here from the
definition rather than taken from the C code), goodput against the report's
SLOs, tokens/s per GPU and the cost per million tokens. Prints one TAP-ish
line per mismatch and exits 1 on any; 0 when every figure agrees.
With --expect-exact-output every completed request must have produced
exactly the output length it asked for (ignore_eos) and its prompt tokens
must equal the input length (token-id prompts).
"""
import json
import math
import sys


def percentile(sorted_vals, p):
    # rank h = (n - 1) p / 100 between the order statistics floor(h) and
    # floor(h) + 1, linearly
    n = len(sorted_vals)
    h = (n - 1) * p / 100.0
    lo = int(math.floor(h))
    if lo + 1 >= n:
        return sorted_vals[-1]
    return sorted_vals[lo] + (h - lo) * (sorted_vals[lo + 1] - sorted_vals[lo])


def dist(vals):
    if not vals:
        return {"n": 0, "mean": 0, "p50": 0, "p90": 0, "p99": 0, "max": 0}
    v = sorted(vals)
    return {"n": len(v), "mean": sum(v) / len(v) * 1e3, "p50": percentile(v, 50) * 1e3,
            "p90": percentile(v, 90) * 1e3, "p99": percentile(v, 99) * 1e3, "max": v[-1] * 1e3}


def main():
    trace_path, report_path = sys.argv[1], sys.argv[2]
    exact = "--expect-exact-output" in sys.argv[3:]
    report = json.load(open(report_path))
    rows = [json.loads(line) for line in open(trace_path) if line.strip()]
    slo = {k: v / 1e3 for k, v in report["config"]["slo_ms"].items()}
    problems = []

    def close(what, got, want, tol=1e-5):
        if not (abs(got - want) <= tol * max(1.0, abs(want))):
            problems.append("%s: report %r, recomputed %r" % (what, got, want))

    for k, point in enumerate(report["points"]):
        reqs = [r for r in rows if r["point"] == k]
        where = "point %d" % k
        close(where + " requests", point["requests"], len(reqs))
        for name, count in point["outcomes"].items():
            close(where + " outcome " + name, count, sum(1 for r in reqs if r["outcome"] == name))
        done = [r for r in reqs if r["outcome"] == "ok"]
        started = [r for r in reqs if r["outcome"] != "not_sent"]
        duration = max((r["t_end"] for r in started), default=0.0)
        close(where + " duration_s", point["duration_s"], duration)

        def out_tokens(r):
            return r["completion_tokens"] if r["completion_tokens"] >= 0 else r["token_ids"]

        def in_tokens(r):
            return r["prompt_tokens"] if r["prompt_tokens"] >= 0 else r["input_len"]

        tin = sum(in_tokens(r) for r in done)
        tout = sum(out_tokens(r) for r in done)
        close(where + " input_tokens", point["input_tokens"], tin)
        close(where + " output_tokens", point["output_tokens"], tout)
        if exact:
            for r in done:
                if out_tokens(r) != r["output_len"] or r["token_ids"] != r["output_len"]:
                    problems.append("%s request %d: %d output tokens (%d ids), asked %d" % (
                        where, r["request"], out_tokens(r), r["token_ids"], r["output_len"]))
                if in_tokens(r) != r["input_len"]:
                    problems.append("%s request %d: %d prompt tokens, sent %d" % (
                        where, r["request"], in_tokens(r), r["input_len"]))
        ttft, tpot, itl, e2e = [], [], [], []
        good = 0
        for r in done:
            c = r["chunks"]
            e = r["t_end"] - r["t_send"]
            e2e.append(e)
            gaps = [b - a for a, b in zip(c, c[1:])]
            itl.extend(gaps)
            t = c[0] - r["t_send"] if c else None
            n_out = out_tokens(r)
            tp = (e - t) / (n_out - 1) if c and n_out > 1 else None
            if t is not None:
                ttft.append(t)
            if tp is not None:
                tpot.append(tp)
            ok = True
            if slo["e2e"] > 0 and e > slo["e2e"]:
                ok = False
            if not c:
                ok = ok and not (slo["ttft"] > 0 or slo["tpot"] > 0 or slo["itl"] > 0)
            else:
                if slo["ttft"] > 0 and t > slo["ttft"]:
                    ok = False
                if slo["tpot"] > 0 and tp is not None and tp > slo["tpot"]:
                    ok = False
                if slo["itl"] > 0 and any(g > slo["itl"] for g in gaps):
                    ok = False
            good += ok
        streamed = [r for r in reqs if r["outcome"] in ("ok", "aborted")]
        ttft_s = [r["chunks"][0] - r["t_send"] for r in streamed if r["chunks"]]
        itl_s = [b - a for r in streamed for a, b in zip(r["chunks"], r["chunks"][1:])]
        tok_s = sum(out_tokens(r) if r["outcome"] == "ok" else r["token_ids"] for r in streamed)
        close(where + " streamed_output_tokens", point["streamed_output_tokens"], tok_s)
        close(where + " streamed_output_token_throughput",
              point["streamed_output_token_throughput"], tok_s / duration if duration > 0 else 0)
        for name, vals in (("ttft_ms", ttft), ("tpot_ms", tpot), ("itl_ms", itl), ("e2e_ms", e2e),
                           ("ttft_streamed_ms", ttft_s), ("itl_streamed_ms", itl_s)):
            want = dist(vals)
            for key in ("n", "mean", "p50", "p90", "p99", "max"):
                close("%s %s.%s" % (where, name, key), point[name][key], want[key])
        close(where + " good_requests", point["good_requests"], good)
        per_s = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)
        close(where + " request_throughput", point["request_throughput"], per_s(len(done)))
        close(where + " request_goodput", point["request_goodput"], per_s(good))
        close(where + " input_token_throughput", point["input_token_throughput"], per_s(tin))
        close(where + " output_token_throughput", point["output_token_throughput"], per_s(tout))
        close(where + " total_token_throughput", point["total_token_throughput"], per_s(tin + tout))
        gpus, price = point["gpus"], point["usd_per_gpu_hour"]
        close(where + " total_tokens_per_s_per_gpu", point["total_tokens_per_s_per_gpu"],
              per_s(tin + tout) / gpus)
        for name, rate in (("input", per_s(tin)), ("output", per_s(tout)),
                           ("total", per_s(tin + tout))):
            want = gpus * price / (rate * 3600) * 1e6 if rate > 0 else 0
            close(where + " usd_per_million_%s_tokens" % name,
                  point["usd_per_million_%s_tokens" % name], want)
    for p in problems:
        print("# mismatch: " + p)
    print("# recomputed %d points, %d requests: %d mismatches" % (
        len(report["points"]), len(rows), len(problems)))
    sys.exit(1 if problems else 0)


main()
