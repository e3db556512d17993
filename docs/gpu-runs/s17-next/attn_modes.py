# s17: wgmma attention modes 2 and 4 next to torch SDPA cuDNN, same call.
# usage: python3 attn_modes.py BIN_DIR OUT_JSON [TOKENS ...] (default 8192 32768)
import json, os, subprocess, sys
sys.path.insert(0, "tests/gpu")
import torch
from torch.nn.attention import SDPBackend
import bench_attention as ba
bin_dir, out_json = sys.argv[1], sys.argv[2]
lens = [int(a) for a in sys.argv[3:]] or [8192, 32768]
rows = []
for n in lens:
    cud, _ = ba.sdpa(n, torch.bfloat16, SDPBackend.CUDNN_ATTENTION)
    rows.append({"kernel": "cudnn", "n": n, "window": 0, "ms": cud})
    for mode in (2, 4):
        for w in (0, 128):
            env = dict(os.environ, TANDEM_CUDA_ATTN_BF16="1", TANDEM_CUDA_ATTN_WGMMA=str(mode))
            out = subprocess.run([os.path.join(bin_dir, "bench_attention"), "prefill", str(n), str(w), "bf16"],
                                 capture_output=True, text=True, env=env, timeout=60)
            line = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
            if not line:
                rows.append({"kernel": f"mode{mode}", "n": n, "window": w, "error": out.stderr[-300:]})
                continue
            r = dict(kv.split("=") for kv in line[-1].split()[1:])
            rows.append({"kernel": f"mode{mode}", "attn": r["attn"], "n": n, "window": w, "ms": float(r["ms"])})
json.dump(rows, open(out_json, "w"), indent=1)
cud = {r["n"]: r["ms"] for r in rows if r["kernel"] == "cudnn"}
print("| kernel | attn | tokens | window | ms | vs cuDNN |")
for r in rows:
    if "error" in r:
        print(f"| {r['kernel']} | error | {r['n']} | {r['window']} | {r['error'][-120:]!r} | |")
        continue
    ratio = f"{cud[r['n']] / r['ms']:.2f}x" if r["window"] == 0 else ""
    print(f"| {r['kernel']} | {r.get('attn', '')} | {r['n']} | {r['window']} | {r['ms']:.3f} | {ratio} |")
