#!/usr/bin/env python3
"""Checks a demo checkpoint in Tandem's engine against the torch model it
was trained as: for held-out prompts, build/bin/tandem-generate's greedy
tokens and the full-vocabulary logits behind each (--logits-out) are
compared with the torch model's, recomputed in float64 from the same bf16
weights over the whole sequence (no cache).

  check_engine.py --arch gpt_oss --src models/demo/gpt_oss_demo \
      --model build/models/gpt_oss_demo --data DIR [--prompts 4] [--tokens 24]

Exit status 0 when every greedy token agrees and the largest logit
difference is below 1e-3 of the logits' range.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from demo_model import DemoModel, load_compact, read_safetensors  # noqa: E402
import json  # noqa: E402

FORMAT = {"gpt_oss": "harmony", "qwen3_moe": "qwen3"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", choices=list(FORMAT), required=True)
    ap.add_argument("--src", required=True, help="compact checkpoint directory")
    ap.add_argument("--model", required=True, help="expanded model directory")
    ap.add_argument("--data", required=True)
    ap.add_argument("--bin", default="build/bin/tandem-generate")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=24)
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(a.src, "config.json")))
    t = read_safetensors(os.path.join(a.src, "weights.safetensors"))
    used = t["demo.embed_ids"]
    model = DemoModel(a.arch, cfg, len(used)).double()
    load_compact(model, t)
    model.eval()
    unused_row = torch.from_numpy(np.array(t["demo.embed_unused"])).double()
    fmt = FORMAT[a.arch]
    tok = np.fromfile(os.path.join(a.data, f"{fmt}_heldout.tok"), dtype="<i4")
    idx = np.fromfile(os.path.join(a.data, f"{fmt}_heldout.idx"), dtype="<i8").reshape(-1, 3)
    remap = {int(v): i for i, v in enumerate(used)}
    V = cfg["vocab_size"]
    worst, bad = 0.0, 0
    step_idx = np.linspace(0, len(idx) - 1, a.prompts).astype(int)
    for k in step_idx:
        s, p, _ = (int(v) for v in idx[k])
        prompt = [int(x) for x in tok[s:s + p]]
        with tempfile.NamedTemporaryFile(suffix=".f32") as lf:
            r = subprocess.run([a.bin, "--model", a.model, "--prompt-ids",
                                ",".join(map(str, prompt)), "--max-tokens", str(a.tokens),
                                "--logits-out", lf.name], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"tandem-generate failed: {r.stderr}")
            engine_ids = [int(x) for x in r.stdout.strip().split(",")]
            engine_logits = np.fromfile(lf.name, dtype="<f4").reshape(-1, V)
        seq = [remap[i] for i in prompt]
        torch_ids = []
        with torch.no_grad():
            for step in range(len(engine_ids)):
                h, _ = model.hidden(torch.tensor([seq]))
                hl = h[0, -1].double()
                full = torch.full((V,), float(hl @ unused_row), dtype=torch.float64)
                full[torch.from_numpy(used.astype(np.int64))] = hl @ model.p["embed_rows"].double().t()
                e = torch.from_numpy(engine_logits[step].astype(np.float64))
                rng = float(full.max() - full.min())
                worst = max(worst, float((full - e).abs().max()) / rng)
                nxt = int(full.argmax())
                torch_ids.append(nxt)
                if engine_ids[step] not in remap:
                    break
                seq.append(remap[engine_ids[step]])
        same = torch_ids == engine_ids[:len(torch_ids)]
        bad += not same
        print(f"held-out sample {k}: {len(prompt)} prompt tokens, engine {engine_ids}, "
              f"torch {'same' if same else torch_ids}", flush=True)
    print(f"largest |logit difference| / logit range: {worst:.2e}; greedy mismatches: {bad}")
    sys.exit(0 if bad == 0 and worst < 1e-3 else 1)


if __name__ == "__main__":
    main()
