#!/usr/bin/env python3
"""Sink attention on the GPU: our CUDA kernel (fp32, paged HND KV, sink)
next to torch.nn.functional.scaled_dot_product_attention on the same shapes
in the same run, plus the two ceilings the floors are computed from.

GPT-OSS shapes: 64 query heads, 8 KV heads, head_dim 64, causal.
  ours      kn_attention, fp32 in/out, sink, paged (page 16, shuffled
            pages), window 0 (full) or 128 (sliding); fp32 FFMA (CUDA cores),
            and with TANDEM_CUDA_ATTN_BF16=1 the bf16 tensor-core kernel
            (mma.sync m16n8k16, fp32 accumulation); with
            TANDEM_CUDA_ATTN_WGMMA=1 (cp.async loads), 2 (TMA loads,
            producer warp), 3 (2 with each tile's softmax overlapping the
            previous P V), 4 (3 with three warpgroups), 5 (2 with 3's
            overlap), 6 (2 persistent: a block per SM looping over query
            tiles, unseen P V chunks skipped), 7 (2, head_dim 128 too), 8
            (6 with a window layer's keys streamed once per block) or 9 (5
            with FlashAttention-3's ping-pong between the warpgroups)
            too and a bf16 cache, the Hopper wgmma kernels
            (attention_wgmma.cu)
  sdpa-cudnn torch SDPA, CUDNN_ATTENTION backend, bf16, no sink (the peer
            issue 17's goal is measured against: "x cuDNN" column)
  sdpa-bf16 torch SDPA, FLASH_ATTENTION backend, bf16, GQA, no sink
  flex      torch flex_attention (compiled), bf16, GQA, with the sink folded
            in exactly through the returned log-sum-exp: softmax over the
            scores and the sink s gives out * sigmoid(lse - s); full causal
            and sliding window 128 (block mask skips the window's blocks)
  sdpa-fp32 torch SDPA, EFFICIENT_ATTENTION backend, fp32, no sink
Qwen3-30B-A3B shapes (32 query heads, 4 KV heads, head_dim 128, causal, no
sink): torch SDPA cuDNN and wgmma modes BENCH_QWEN3_MODES (default "7 6")
and the mma.sync kernel over a bf16 cache, prefill 8192 and 32768.
Floors: FLOPs / measured peak of the matching unit (fp32 cuBLAS SGEMM for
fp32, bf16 cuBLAS GEMM for bf16); decode: bytes / measured copy bandwidth.

Usage: bench_attention.py BUILD_DIR OUT_DIR
Environment: BENCH_DECODE=0 leaves the decode rows out, BENCH_FP32=0 the
fp32 rows (ours and mem-efficient), BENCH_ONLY_WGMMA=1 keeps only the
prefill rows of the bf16 kernels over a bf16 cache and torch's cuDNN and
flash SDPA, BENCH_WGMMA_MODES (default "9 8 6 5 4 3 2 1") the wgmma modes measured
on the GPT-OSS shape, BENCH_QWEN3=0 leaves the Qwen3 rows out.
"""
import json
import os
import statistics
import subprocess
import sys
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

H, HKV, D = 64, 8, 64
WARMUP, REPS = 3, 10
# the wgmma modes (TANDEM_CUDA_ATTN_WGMMA), as the table names them
hows = {9: "TMA + producer warp, overlap, warpgroup ping-pong",
        8: "TMA + producer warp, persistent, window keys streamed", 7: "TMA + producer warp (head_dim 128 too)", 6: "TMA + producer warp, persistent",
        5: "TMA + producer warp, softmax / PV overlap", 4: "TMA, overlap, 3 warpgroups",
        3: "TMA, softmax / PV overlap", 2: "TMA + producer warp", 1: "cp.async"}


def time_ms(fn):
    """Median of REPS event-timed calls after WARMUP calls."""
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def ceilings():
    """Copy bandwidth and the bf16 / fp32 GEMM rates, on random data."""
    n = 1 << 29  # 2 GiB of fp32
    x = torch.rand(n, device="cuda")
    y = torch.empty_like(x)
    ms = time_ms(lambda: y.copy_(x))
    bw = 2 * n * 4 / (ms * 1e-3)
    del x, y
    m = 8192
    a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    bf16 = 2 * m ** 3 / (time_ms(lambda: a @ b) * 1e-3)
    torch.backends.cuda.matmul.allow_tf32 = False
    a32, b32 = a.float(), b.float()
    fp32 = 2 * m ** 3 / (time_ms(lambda: a32 @ b32) * 1e-3)
    del a, b, a32, b32
    torch.cuda.empty_cache()
    return bw, bf16, fp32


def causal_flops(n, h=H, d=D):
    return 4.0 * d * h * (n * (n + 1) / 2)


def sdpa(n, dtype, backend, h=H, hkv=HKV, d=D):
    q = torch.randn(1, h, n, d, device="cuda", dtype=dtype)
    k = torch.randn(1, hkv, n, d, device="cuda", dtype=dtype)
    v = torch.randn(1, hkv, n, d, device="cuda", dtype=dtype)
    note = "gqa"
    warnings.filterwarnings("ignore", category=UserWarning)  # backend probing is noisy
    try:
        with sdpa_kernel(backend):
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    except RuntimeError:
        # This backend takes no GQA: give it the KV heads repeated (same FLOPs).
        k = k.repeat_interleave(h // hkv, dim=1)
        v = v.repeat_interleave(h // hkv, dim=1)
        note = "kv repeated"
        fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    with sdpa_kernel(backend):
        ms = time_ms(fn)
    del q, k, v
    torch.cuda.empty_cache()
    return ms, note


def flex(n, window):
    """flex_attention with a per-head sink through its LSE; None if this
    torch has no flex_attention or it fails to compile here."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        return None, "no flex_attention in this torch"
    q = torch.randn(1, H, n, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, HKV, n, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, HKV, n, D, device="cuda", dtype=torch.bfloat16)
    sink = torch.randn(H, device="cuda", dtype=torch.float32)

    def causal(b, h, qi, ki):
        return qi >= ki

    def windowed(b, h, qi, ki):
        return (qi >= ki) & (qi - ki < window)

    try:
        mask = create_block_mask(windowed if window else causal, None, None, n, n, device="cuda")
        compiled = torch.compile(flex_attention)

        def fn():
            out, lse = compiled(q, k, v, block_mask=mask, enable_gqa=True, return_lse=True)
            # lse is natural-log based over the scaled scores; fold the sink in
            return out * torch.sigmoid(lse - sink[None, :, None]).unsqueeze(-1).to(out.dtype)

        ms = time_ms(fn)
    except Exception as e:  # noqa: BLE001 - report any compile/run failure as a row note
        return None, f"flex_attention failed: {type(e).__name__}: {str(e)[:80]}"
    finally:
        del q, k, v
        torch.cuda.empty_cache()
    return ms, "sink via LSE, compiled"


def ours(build, *args, bf16=False, kv="f32", wgmma=0, shape="gpt-oss"):
    exe = os.path.join(build, "tests", "gpu", "bench_attention")
    env = dict(os.environ, TANDEM_CUDA_ATTN_BF16="1" if bf16 or wgmma else "0",
               TANDEM_CUDA_ATTN_WGMMA=str(wgmma))
    out = subprocess.run([exe, *map(str, args), kv, shape], check=True, capture_output=True, text=True,
                         env=env).stdout
    line = [l for l in out.splitlines() if l.startswith("RESULT ")][-1]
    r = {kv.split("=")[0]: kv.split("=")[1] for kv in line.split()[1:]}
    want = {1: "wgmma", 2: "wgmma-tma", 3: "wgmma-tma-pipe", 4: "wgmma-tma-pipe-3wg", 5: "wgmma-tma-pipe-pw",
            6: "wgmma-tma-persist", 7: "wgmma-tma-d128", 8: "wgmma-tma-window",
            9: "wgmma-tma-pingpong"}.get(wgmma, "bf16" if bf16 else "f32")
    if bf16 and not wgmma and args[0] == "decode" and kv in ("bf16", "fp8"):
        # the tensor-core decode kernels take these: bf16 and FP8 pages with
        # TMA / bulk copies by default (cp.async with
        # TANDEM_CUDA_ATTN_DECODE_TMA=0)
        tma = os.environ.get("TANDEM_CUDA_ATTN_DECODE_TMA") != "0"
        want = "decode-tma" if tma else "decode-mma"
    if r["attn"] != want:
        raise SystemExit(f"bench_attention ran attn={r['attn']}, wanted {want}")
    if r.get("kv") != kv:
        raise SystemExit(f"bench_attention read a {r.get('kv')} cache, wanted {kv}")
    return r


def main():
    build, out_dir = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    gpu = torch.cuda.get_device_name(0)
    bw, bf16_peak, fp32_peak = ceilings()
    rows = []

    def add(name, precision, shape, ms, flops, floor_ms, note=""):
        rows.append(dict(name=name, precision=precision, shape=shape, ms=ms,
                         tflops=flops / (ms * 1e-3) / 1e12 if flops else None,
                         floor_ms=floor_ms, note=note))

    only_wgmma = os.environ.get("BENCH_ONLY_WGMMA", "0") == "1"
    fp32_rows = os.environ.get("BENCH_FP32", "1") != "0" and not only_wgmma
    cudnn_ms = {}
    for n in (8192, 32768):
        fl = causal_flops(n)
        try:
            ms, note = sdpa(n, torch.bfloat16, SDPBackend.CUDNN_ATTENTION)
            cudnn_ms[n] = ms
            add("torch SDPA cuDNN", "bf16", f"prefill {n}", ms, fl, fl / bf16_peak * 1e3, note + ", no sink")
        except RuntimeError as e:
            print(f"cuDNN SDPA unavailable: {str(e)[:120]}")
        for window in (0, 128) if not only_wgmma else ():
            ms, note = flex(n, window)
            if ms is not None:
                fl_w = fl if not window else 4.0 * D * H * n * min(window, n)
                add("torch flex_attention", "bf16", f"prefill {n}" + (f" win {window}" if window else ""),
                    ms, fl_w, fl_w / bf16_peak * 1e3, note)
            else:
                print(note)
        ms, note = sdpa(n, torch.bfloat16, SDPBackend.FLASH_ATTENTION)
        add("torch SDPA flash", "bf16", f"prefill {n}", ms, fl, fl / bf16_peak * 1e3, note + ", no sink")
        if fp32_rows:
            ms, note = sdpa(n, torch.float32, SDPBackend.EFFICIENT_ATTENTION)
            add("torch SDPA mem-efficient", "fp32", f"prefill {n}", ms, fl, fl / fp32_peak * 1e3,
                note + ", no sink")
        for window in (0, 128):
            shape = f"prefill {n}" + (f" win {window}" if window else "")
            for mode in [int(m) for m in os.environ.get("BENCH_WGMMA_MODES", "9 8 6 5 4 3 2 1").split()]:
                try:
                    r = ours(build, "prefill", n, window, kv="bf16", wgmma=mode)
                except (subprocess.CalledProcessError, SystemExit) as e:
                    # one broken kernel must not hide the other rows
                    print(f"wgmma mode {mode} prefill {n} window {window} failed: {e}")
                    continue
                fl_o = float(r["flops"])
                # a window layer moves more than it computes: its fp32 q and
                # out alone take longer than its FLOPs at the bf16 peak
                by_floor = f", bytes floor {float(r['bytes']) / bw * 1e3:.3f} ms" if window else ""
                add("tandem kn_attention wgmma", "bf16, bf16 KV", shape, float(r["ms"]), fl_o,
                    fl_o / bf16_peak * 1e3, f"sink, paged, wgmma, {hows[mode]}{by_floor}")
            r = ours(build, "prefill", n, window, bf16=True, kv="bf16")
            fl_o = float(r["flops"])
            add("tandem kn_attention", "bf16, bf16 KV", shape, float(r["ms"]), fl_o, fl_o / bf16_peak * 1e3,
                "sink, paged, mma.sync")
            if only_wgmma:
                continue
            r = ours(build, "prefill", n, window, bf16=True)
            add("tandem kn_attention", "bf16", shape, float(r["ms"]), fl_o, fl_o / bf16_peak * 1e3,
                "sink, paged, mma.sync")
            if fp32_rows:
                r = ours(build, "prefill", n, window)
                add("tandem kn_attention", "fp32", shape, float(r["ms"]), fl_o, fl_o / fp32_peak * 1e3,
                    "sink, paged")
    # Qwen3-30B-A3B's attention: head_dim 128, 32/4 heads, no sink
    for n in (8192, 32768) if os.environ.get("BENCH_QWEN3", "1") != "0" else ():
        fl = causal_flops(n, 32, 128)
        shape = f"qwen3 prefill {n}"
        try:
            ms, note = sdpa(n, torch.bfloat16, SDPBackend.CUDNN_ATTENTION, 32, 4, 128)
            cudnn_ms[shape] = ms
            add("torch SDPA cuDNN", "bf16", shape, ms, fl, fl / bf16_peak * 1e3, note + ", no sink")
        except RuntimeError as e:
            print(f"cuDNN SDPA unavailable: {str(e)[:120]}")
        for mode in [int(m) for m in os.environ.get("BENCH_QWEN3_MODES", "7 6").split()]:
            try:
                r = ours(build, "prefill", n, 0, kv="bf16", wgmma=mode, shape="qwen3")
            except (subprocess.CalledProcessError, SystemExit) as e:
                print(f"wgmma mode {mode} qwen3 prefill {n} failed: {e}")
                continue
            add("tandem kn_attention wgmma", "bf16, bf16 KV", shape, float(r["ms"]), float(r["flops"]),
                float(r["flops"]) / bf16_peak * 1e3, f"paged, wgmma, {hows[mode]}")
        r = ours(build, "prefill", n, 0, bf16=True, kv="bf16", shape="qwen3")
        add("tandem kn_attention", "bf16, bf16 KV", shape, float(r["ms"]), float(r["flops"]),
            float(r["flops"]) / bf16_peak * 1e3, "paged, mma.sync")
    # BENCH_DECODE=0 leaves the (split-KV) decode rows out: fp32 arithmetic
    # over an fp32, a bf16 and an FP8 cache (the floor computed from the
    # bytes each reads: FP8 rows carry a 4-byte scale).
    for batch in (1, 32, 128) if os.environ.get("BENCH_DECODE", "1") != "0" and not only_wgmma else ():
        for kv in ("f32", "bf16", "fp8"):
            r = ours(build, "decode", batch, 8192, kv=kv)
            by = float(r["bytes"])
            add("tandem kn_attention", f"fp32, {kv} KV", f"decode b{batch} ctx 8192", float(r["ms"]),
                float(r["flops"]), by / bw * 1e3,
                f"split-KV, {by / (float(r['ms']) * 1e-3) / 1e12:.2f} TB/s")
    # The bf16 tensor-core decode kernel (attention_decode_mma.cu: bf16
    # precision over a bf16 cache, what the engine runs): GB/s and the
    # share of the measured copy bandwidth (issue 16's goal: >= 80% at
    # batch >= 32).
    # The same kernel over an FP8 cache (rows of 64 e4m3 codes + a 4-byte
    # scale, widened to bf16 in shared memory): the floor counts those 68
    # bytes per row.
    for kv in ("bf16", "fp8"):
        for batch in (1, 8, 32, 64, 128) if os.environ.get("BENCH_DECODE", "1") != "0" and not only_wgmma else ():
            r = ours(build, "decode", batch, 8192, bf16=True, kv=kv)
            by, ms = float(r["bytes"]), float(r["ms"])
            add("tandem kn_attention", f"bf16, {kv} KV", f"decode paged {kv} batch {batch} ctx 8192", ms,
                float(r["flops"]), by / bw * 1e3,
                f"{r['attn']}, {by / (ms * 1e-3) / 1e9:.0f} GB/s, {100 * by / (ms * 1e-3) / bw:.0f}% of copy")
    # the bf16 prefill kernel reading an FP8 cache (bf16: the rows above)
    for kv in ("fp8",) if not only_wgmma else ():
        r = ours(build, "prefill", 8192, 0, bf16=True, kv=kv)
        fl_o = float(r["flops"])
        add("tandem kn_attention", f"bf16, {kv} KV", "prefill 8192", float(r["ms"]), fl_o,
            fl_o / bf16_peak * 1e3, "sink, paged, mma.sync")

    with open(os.path.join(out_dir, "bench_attention.json"), "w") as f:
        json.dump(dict(gpu=gpu, copy_bw=bw, bf16_peak=bf16_peak, fp32_peak=fp32_peak, rows=rows), f, indent=1)
    print(f"\nGPU: {gpu}; measured ceilings: copy {bw / 1e12:.2f} TB/s, "
          f"bf16 GEMM {bf16_peak / 1e12:.0f} TFLOP/s, fp32 GEMM {fp32_peak / 1e12:.1f} TFLOP/s")
    print("| kernel | precision | shape | median ms | TFLOP/s | floor ms | x floor | speed vs cuDNN | note |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        tf = f"{r['tflops']:.1f}" if r["tflops"] else "-"
        # full-causal prefill rows only: cuDNN time / this time (> 1: faster than cuDNN)
        parts = r["shape"].split()
        vs = "-"
        if parts[0] == "prefill" and len(parts) == 2 and int(parts[1]) in cudnn_ms:
            vs = f"{cudnn_ms[int(parts[1])] / r['ms']:.2f}x"
        elif r["shape"] in cudnn_ms:  # the Qwen3 shape's own cuDNN row
            vs = f"{cudnn_ms[r['shape']] / r['ms']:.2f}x"
        print(f"| {r['name']} | {r['precision']} | {r['shape']} | {r['ms']:.3f} | {tf} | "
              f"{r['floor_ms']:.3f} | {r['ms'] / r['floor_ms']:.1f} | {vs} | {r['note']} |")


if __name__ == "__main__":
    main()
