#!/usr/bin/env python3
"""The peer for Tandem's prefill expert GEMMs: torch._grouped_mm (bf16, one
launch over all experts) and, where this torch has it,
torch._scaled_grouped_mm (FP8 e4m3, row-wise scales) on the expert shapes
bench_moe and tandem-bench use, at prefill sizes (8192 tokens).

One MoE layer = gate_up (rows x hidden -> 2*inter per expert) then down
(rows x inter -> hidden). Routes are uniform: every expert gets
tokens * top_k / experts rows (rounded to 16, as grouped GEMMs want
aligned groups). The activation between the two GEMMs is not timed: this
is the GEMM peer, to put next to bench_moe's "experts" rows and the
experts share of tandem-bench's prefill profile.

Usage: bench_moe_peer.py OUT_DIR
Prints a markdown table; writes OUT_DIR/bench_moe_peer.json.
"""
import json
import os
import sys

import torch

# the same event-timed median as the attention benchmark (same directory)
from bench_attention import time_ms

MODELS = [  # name, experts, top_k, hidden, inter, layers
    ("gpt-oss-20b", 32, 4, 2880, 2880, 24),
    ("gpt-oss-120b", 128, 4, 2880, 2880, 36),
    ("qwen3-30b-a3b", 128, 8, 2048, 768, 48),
]
TOKENS = 8192


def layer_bf16(e, k, hidden, inter):
    per = max(16, (TOKENS * k // e) // 16 * 16)
    rows = per * e
    offs = torch.arange(per, rows + 1, per, device="cuda", dtype=torch.int32)
    x = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16)
    h = torch.randn(rows, inter, device="cuda", dtype=torch.bfloat16)
    # weights as [E, K, N] column-major views (what _grouped_mm wants for B)
    w_gu = torch.randn(e, 2 * inter, hidden, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)
    w_dn = torch.randn(e, hidden, inter, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)

    def fn():
        torch._grouped_mm(x, w_gu, offs=offs)
        torch._grouped_mm(h, w_dn, offs=offs)

    ms = time_ms(fn)
    flops = 2.0 * rows * hidden * 2 * inter + 2.0 * rows * inter * hidden
    return ms, flops, rows


def layer_fp8(e, k, hidden, inter):
    if not hasattr(torch, "_scaled_grouped_mm"):
        return None, "no torch._scaled_grouped_mm"
    f8 = torch.float8_e4m3fn
    per = max(16, (TOKENS * k // e) // 16 * 16)
    rows = per * e
    offs = torch.arange(per, rows + 1, per, device="cuda", dtype=torch.int32)
    x = torch.randn(rows, hidden, device="cuda").to(f8)
    h = torch.randn(rows, inter, device="cuda").to(f8)
    w_gu = torch.randn(e, 2 * inter, hidden, device="cuda").to(f8).transpose(-2, -1)
    w_dn = torch.randn(e, hidden, inter, device="cuda").to(f8).transpose(-2, -1)
    sx = torch.ones(rows, device="cuda", dtype=torch.float32)
    sgu = torch.ones(e, 2 * inter, device="cuda", dtype=torch.float32)
    sdn = torch.ones(e, hidden, device="cuda", dtype=torch.float32)
    try:
        def fn():
            torch._scaled_grouped_mm(x, w_gu, sx, sgu, offs=offs, out_dtype=torch.bfloat16)
            torch._scaled_grouped_mm(h, w_dn, sx, sdn, offs=offs, out_dtype=torch.bfloat16)
        return time_ms(fn), "row-wise scales"
    except Exception as ex:  # noqa: BLE001 - an unsupported build is a note, not a crash
        return None, f"_scaled_grouped_mm failed: {type(ex).__name__}: {str(ex)[:80]}"


def main():
    out_dir = sys.argv[1]
    rows = []
    for name, e, k, hidden, inter, layers in MODELS:
        ms, flops, n = layer_bf16(e, k, hidden, inter)
        rows.append(dict(model=name, precision="bf16", op="torch._grouped_mm", ms=ms,
                         tflops=flops / ms / 1e9, model_ms=ms * layers, rows=n, note=""))
        ms8, note = layer_fp8(e, k, hidden, inter)
        if ms8 is not None:
            rows.append(dict(model=name, precision="fp8", op="torch._scaled_grouped_mm", ms=ms8,
                             tflops=flops / ms8 / 1e9, model_ms=ms8 * layers, rows=n, note=note))
        else:
            print(f"{name}: {note}")
        torch.cuda.empty_cache()
    with open(os.path.join(out_dir, "bench_moe_peer.json"), "w") as f:
        json.dump(dict(gpu=torch.cuda.get_device_name(0), torch=torch.__version__, tokens=TOKENS,
                       rows=rows), f, indent=1)
    print(f"torch {torch.__version__}, {TOKENS} tokens, uniform routes, gate_up + down GEMMs only")
    print("| model | precision | op | ms per layer | TFLOP/s | ms all layers | rows | note |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['model']} | {r['precision']} | {r['op']} | {r['ms']:.3f} | {r['tflops']:.0f} | "
              f"{r['model_ms']:.1f} | {r['rows']} | {r['note']} |")


if __name__ == "__main__":
    main()
