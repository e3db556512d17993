#!/usr/bin/env python3
"""Trains a demo model on the token ids tandem-chat-data wrote, then writes
the compact checkpoint and its metrics (models/demo/README.md).

  train.py --arch gpt_oss --data DIR --out DIR [--size full|small] [--seconds S]

DIR holds FORMAT_train.{tok,idx} and FORMAT_heldout.{tok,idx} (FORMAT is
harmony for gpt_oss, qwen3 for qwen3_moe). The loss covers the assistant's
tokens (everything after the rendered prompt) and all of a plain-text
sample. The held-out metric is exact match: the teacher-forced argmax equals
the reference at every completion position, which is exactly "greedy
decoding reproduces the reference completion" (format, reasoning, answer).

Writes OUT/config.json, OUT/weights.safetensors (bf16; the embedding as the
used rows only) and OUT/metrics.json. Runs on CUDA when present (bf16
autocast), else on the CPU in float32.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from demo_model import (SIZES, DemoModel, export_tensors, hf_config, load_compact,  # noqa: E402
                        read_safetensors, write_safetensors)

FORMAT = {"gpt_oss": "harmony", "qwen3_moe": "qwen3"}


def load_split(d, fmt, split):
    tok = np.fromfile(os.path.join(d, f"{fmt}_{split}.tok"), dtype="<i4")
    idx = np.fromfile(os.path.join(d, f"{fmt}_{split}.idx"), dtype="<i8").reshape(-1, 3)
    tasks = []
    jl = os.path.join(d, f"{fmt}_{split}.jsonl")
    if split == "heldout" and os.path.exists(jl):
        tasks = [json.loads(line).get("task", "?") for line in open(jl, encoding="utf-8")]
    return tok, idx, tasks


def make_batches(idx, budget, rng):
    """Lists of sample numbers of similar length, about `budget` tokens each
    once padded."""
    order = np.argsort(idx[:, 2] + rng.random(len(idx)) * 8)
    batches, cur, longest = [], [], 0
    for i in order:
        n = int(idx[i, 2])
        if cur and max(longest, n) * (len(cur) + 1) > budget:
            batches.append(cur)
            cur, longest = [], 0
        cur.append(int(i))
        longest = max(longest, n)
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


def tensors_for(batch, tok, idx, remap, device):
    """ids [B, T], targets [B, T] (-1 where no loss)."""
    T = int(max(idx[i, 2] for i in batch))
    ids = np.zeros((len(batch), T), dtype=np.int64)
    tgt = np.full((len(batch), T), -1, dtype=np.int64)
    for r, i in enumerate(batch):
        s, p, n = (int(v) for v in idx[i])
        seq = remap[tok[s:s + n]]
        ids[r, :n] = seq
        first = max(p, 1)
        tgt[r, first - 1:n - 1] = seq[first:]
    return torch.from_numpy(ids).to(device), torch.from_numpy(tgt).to(device)


def loss_fn(model, ids, tgt):
    """Cross-entropy over the target positions only (the logits of the
    prompt positions are never computed), the MoE balance loss, and the
    target logits (used [N, R], unused [N]) for the exact-match count."""
    h, stats = model.hidden(ids)
    mask = tgt >= 0
    used, unused = model.logits(h[mask])
    allv = torch.cat([used, (unused + math.log(model.n_unused))[:, None]], dim=-1)
    ce = F.cross_entropy(allv, tgt[mask])
    aux = sum(model.E * (frac * prob).sum() for frac, prob in stats) / len(stats)
    return ce, aux, (used, unused, mask)


@torch.no_grad()
def evaluate(model, tok, idx, tasks, remap, device, budget, autocast):
    """Held-out target loss and exact match per task."""
    model.eval()
    tot_loss, tot_n = 0.0, 0
    per = {}
    for batch in make_batches(idx, budget, np.random.default_rng(0)):
        ids, tgt = tensors_for(batch, tok, idx, remap, device)
        with autocast():
            ce, _, (used, unused, mask) = loss_fn(model, ids, tgt)
        n = int(mask.sum())
        tot_loss += float(ce) * n
        tot_n += n
        # an unused token wins only where its shared logit is above every
        # used one, which the mean row rules out; counted as a miss anyway
        hit = (used.argmax(-1) == tgt[mask]) & ~(unused > used.max(-1).values)
        right = torch.ones_like(mask)
        right[mask] = hit
        for r, i in enumerate(batch):
            t = tasks[i] if tasks else "all"
            ok = bool(right[r].all())
            a = per.setdefault(t, [0, 0])
            a[0] += ok
            a[1] += 1
    model.train()
    exact = {t: {"correct": a[0], "total": a[1], "exact_match": round(a[0] / a[1], 4)}
             for t, a in sorted(per.items())}
    allc = sum(a[0] for a in per.values())
    alln = sum(a[1] for a in per.values())
    return tot_loss / max(tot_n, 1), exact, allc / max(alln, 1)


def init_from(model, src, used, cfg):
    """Loads a compact checkpoint of the same size into the model, mapping
    its embedding rows onto this run's token set."""
    with open(os.path.join(src, "config.json")) as f:
        old_cfg = json.load(f)
    if old_cfg != cfg:
        sys.exit(f"--init {src}: its config.json is not this size's")
    t = read_safetensors(os.path.join(src, "weights.safetensors"))
    old_ids = {int(v): i for i, v in enumerate(t["demo.embed_ids"])}
    rows = np.repeat(np.array(t["demo.embed_unused"])[None, :], len(used), axis=0)
    for r, tok in enumerate(used):
        if int(tok) in old_ids:
            rows[r] = t["demo.embed_rows"][old_ids[int(tok)]]
    t = dict(t)
    t["demo.embed_rows"] = rows
    load_compact(model, t)
    print(f"initialised from {src}: {sum(int(v) in old_ids for v in used)} of {len(used)} "
          "rows carried over", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", choices=["gpt_oss", "qwen3_moe"], required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--size", choices=["full", "small", "tiny"], default="full")
    ap.add_argument("--seconds", type=float, default=110.0, help="training time budget")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: time only)")
    ap.add_argument("--batch-tokens", type=int, default=0, help="padded tokens per step")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--init", help="continue from this compact checkpoint (same size); "
                    "tokens it has no row for start at its unused row")
    a = ap.parse_args()
    t_start = time.time()
    torch.manual_seed(a.seed)
    if a.threads:
        torch.set_num_threads(a.threads)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    budget = a.batch_tokens or (65536 if cuda else 6144)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True

        def autocast():
            return torch.autocast("cuda", dtype=torch.bfloat16)
    else:
        import contextlib

        def autocast():
            return contextlib.nullcontext()

    fmt = FORMAT[a.arch]
    tr_tok, tr_idx, _ = load_split(a.data, fmt, "train")
    he_tok, he_idx, he_tasks = load_split(a.data, fmt, "heldout")
    used = np.unique(np.concatenate([tr_tok, he_tok]))
    cfg = hf_config(a.arch, SIZES[a.arch][a.size])
    assert used[-1] < cfg["vocab_size"], "token id outside the vocabulary"
    remap = np.zeros(cfg["vocab_size"], dtype=np.int64)
    remap[used] = np.arange(len(used))
    print(f"{a.arch} ({a.size}) on {device}: {len(tr_idx)} training samples, "
          f"{len(tr_tok)} tokens, {len(used)} distinct tokens; {len(he_idx)} held out", flush=True)

    model = DemoModel(a.arch, cfg, len(used), seed=a.seed)
    if a.init:
        init_from(model, a.init, used, cfg)
    model = model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.01)
    rng = np.random.default_rng(a.seed)
    step, epoch, ema = 0, 0, None
    warm = 50
    t0 = time.time()
    done = False
    while not done:
        epoch += 1
        for batch in make_batches(tr_idx, budget, rng):
            frac = min((time.time() - t0) / a.seconds, 1.0)
            if a.max_steps:
                frac = max(frac, step / a.max_steps)
            if frac >= 1.0:
                done = True
                break
            lr = a.lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
            for g in opt.param_groups:
                g["lr"] = lr
            ids, tgt = tensors_for(batch, tr_tok, tr_idx, remap, device)
            with autocast():
                ce, aux, _ = loss_fn(model, ids, tgt)
                loss = ce + 0.01 * aux
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            ema = float(ce) if ema is None else 0.98 * ema + 0.02 * float(ce)
            if step % 50 == 0:
                print(f"step {step} epoch {epoch} {time.time() - t0:.0f}s lr {lr:.2e} "
                      f"loss {ema:.4f} aux {float(aux):.3f}", flush=True)
    train_s = time.time() - t0
    # evaluate the weights as exported: rounded to bf16
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    he_loss, exact, em = evaluate(model, he_tok, he_idx, he_tasks, remap, device, budget, autocast)
    print(f"held-out loss {he_loss:.4f}, exact match {em:.3f}: {json.dumps(exact)}", flush=True)

    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    write_safetensors(os.path.join(a.out, "weights.safetensors"), export_tensors(model, used),
                      metadata={"format": "tandem-demo-compact"})
    metrics = {
        "arch": a.arch, "size": a.size, "device": str(torch.cuda.get_device_name(0) if cuda else "cpu"),
        "torch": torch.__version__, "parameters": n_params, "distinct_tokens": int(len(used)),
        "steps": step, "epochs_started": epoch, "train_seconds": round(train_s, 1),
        "batch_tokens": budget, "lr": a.lr,
        "train_loss_ema": round(ema, 4), "heldout_loss": round(he_loss, 4),
        "heldout_exact_match": round(em, 4), "heldout_by_task": exact,
        "total_seconds": round(time.time() - t_start, 1),
    }
    with open(os.path.join(a.out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
        f.write("\n")
    print(json.dumps(metrics), flush=True)


if __name__ == "__main__":
    main()
