"""The demo models in plain torch, mirroring transformers' GptOssForCausalLM
and Qwen3MoeForCausalLM (eager attention) so that the exported bf16
safetensors load into Tandem's engine (and into transformers) unchanged.

Parameters are kept in the HF checkpoint layout and names, except the
embedding: only the rows of the tokens the training data uses are
parameters (`embed_rows`, tied to the output head). Every other token's row
is the mean of those rows, which the build writes into the full-vocabulary
tensor (models/demo/expand.py). Since a mean is a convex combination, an
unused token's logit h.mean(E) is never above the largest used-token logit:
unused tokens cannot win greedy sampling. The training softmax counts all of
them (one class with logit h.mean(E) + log(number of unused tokens)), so
sampling at temperature 1 gives them the probability the model learned.
"""
import json
import math
import struct

import numpy as np
import torch
import torch.nn.functional as F

# Sizes: "full" is what the GPU trains; "small" and "tiny" are CPU runs (the
# interim demo weights were trained as "tiny" on a shared 2-core machine).
# The hidden size stays small because the CPU engine's decode step is
# dominated by the tied output head, vocabulary x hidden (201088 x 128).
SIZES = {
    "gpt_oss": {
        "full": dict(hidden=128, layers=4, heads=4, kv_heads=2, head_dim=64, experts=8,
                     top_k=2, inter=256),
        "small": dict(hidden=128, layers=2, heads=4, kv_heads=2, head_dim=32, experts=4,
                      top_k=2, inter=128),
        "tiny": dict(hidden=64, layers=2, heads=2, kv_heads=1, head_dim=32, experts=4,
                     top_k=2, inter=128),
    },
    "qwen3_moe": {
        "full": dict(hidden=128, layers=4, heads=4, kv_heads=2, head_dim=64, experts=16,
                     top_k=4, inter=128),
        "small": dict(hidden=128, layers=2, heads=4, kv_heads=2, head_dim=32, experts=8,
                      top_k=2, inter=64),
        "tiny": dict(hidden=64, layers=2, heads=2, kv_heads=1, head_dim=32, experts=4,
                     top_k=2, inter=64),
    },
}

VOCAB = {"gpt_oss": 201088, "qwen3_moe": 151936}


def hf_config(arch, s):
    """config.json for transformers (and Tandem's engine)."""
    common = dict(hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                  num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
                  head_dim=s["head_dim"], num_experts_per_tok=s["top_k"],
                  tie_word_embeddings=True, attention_dropout=0.0, hidden_act="silu",
                  initializer_range=0.02, output_router_logits=False,
                  router_aux_loss_coef=0.0, use_cache=True, dtype="bfloat16",
                  vocab_size=VOCAB[arch])
    if arch == "gpt_oss":
        n = s["layers"]
        return dict(architectures=["GptOssForCausalLM"], model_type="gpt_oss",
                    attention_bias=True, intermediate_size=s["inter"],
                    num_local_experts=s["experts"], rms_norm_eps=1e-5, swiglu_limit=7.0,
                    sliding_window=128,
                    layer_types=["sliding_attention", "full_attention"] * (n // 2),
                    max_position_embeddings=131072,
                    rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                                  "beta_slow": 1.0, "truncate": False,
                                  "original_max_position_embeddings": 4096},
                    rope_theta=150000.0,
                    # <|return|>, <|endoftext|>, <|call|>
                    eos_token_id=[200002, 199999, 200012], pad_token_id=199999,
                    bos_token_id=199998, **common)
    return dict(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
                attention_bias=False, intermediate_size=4 * s["hidden"],
                moe_intermediate_size=s["inter"], num_experts=s["experts"],
                norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=1000000.0,
                use_sliding_window=False, sliding_window=None,
                # <|im_end|>, <|endoftext|>
                eos_token_id=[151645, 151643], bos_token_id=151643, pad_token_id=151643,
                **common)


def rope_tables(cfg, T, device):
    """cos, sin [T, head_dim/2] as HF computes them (YaRN for GPT-OSS)."""
    d = cfg["head_dim"]
    base = cfg["rope_theta"]
    i = torch.arange(0, d, 2, dtype=torch.float64, device=device)
    pos_freqs = base ** (i / d)
    scale = 1.0
    rs = cfg.get("rope_scaling")
    if rs and rs.get("rope_type") == "yarn":
        factor = rs["factor"]
        omax = rs["original_max_position_embeddings"]

        def corr(rot):
            return (d * math.log(omax / (rot * 2 * math.pi))) / (2 * math.log(base))
        low, high = corr(rs["beta_fast"]), corr(rs["beta_slow"])
        if rs.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, d - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(d // 2, dtype=torch.float64, device=device) - low) /
                (high - low)).clamp(0, 1)
        extra = 1 - ramp
        inv = (1 / (factor * pos_freqs)) * (1 - extra) + (1 / pos_freqs) * extra
        scale = 0.1 * math.log(factor) + 1.0
    else:
        inv = 1.0 / pos_freqs
    inv = inv.float().double()  # HF keeps inv_freq in float32
    t = torch.arange(T, dtype=torch.float64, device=device)
    f = torch.outer(t, inv)
    return torch.cos(f) * scale, torch.sin(f) * scale


def apply_rope(x, cos, sin):
    """x [B, T, heads, d]; the half-split rotation of both HF models."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    c, s = cos[None, :, None, :].to(x.dtype), sin[None, :, None, :].to(x.dtype)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def rms_norm(x, w, eps):
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (w.float() * xf).to(x.dtype)


class DemoModel(torch.nn.Module):
    def __init__(self, arch, cfg, n_rows, seed=0):
        super().__init__()
        self.arch, self.cfg = arch, cfg
        g = torch.Generator().manual_seed(seed)
        H, nh, nkv, hd = (cfg["hidden_size"], cfg["num_attention_heads"],
                          cfg["num_key_value_heads"], cfg["head_dim"])
        L = cfg["num_hidden_layers"]
        E = cfg["num_local_experts"] if arch == "gpt_oss" else cfg["num_experts"]
        I = cfg["intermediate_size"] if arch == "gpt_oss" else cfg["moe_intermediate_size"]
        self.E, self.I = E, I
        std = 0.02
        out_std = std / math.sqrt(2 * L)

        def P(shape, s=std, fill=None):
            t = torch.full(shape, fill) if fill is not None else torch.randn(shape, generator=g) * s
            return torch.nn.Parameter(t)
        # HF names contain dots, which module attributes may not: the
        # parameters are registered under mangled keys and used through self.p
        self.params = torch.nn.ParameterDict()
        self.p = {}
        self.p["embed_rows"] = P((n_rows, H), 0.05)
        self.p["model.norm.weight"] = P((H,), fill=1.0)
        bias = arch == "gpt_oss"
        for l in range(L):
            pre = f"model.layers.{l}."
            self.p[pre + "input_layernorm.weight"] = P((H,), fill=1.0)
            self.p[pre + "post_attention_layernorm.weight"] = P((H,), fill=1.0)
            a = pre + "self_attn."
            self.p[a + "q_proj.weight"] = P((nh * hd, H))
            self.p[a + "k_proj.weight"] = P((nkv * hd, H))
            self.p[a + "v_proj.weight"] = P((nkv * hd, H))
            self.p[a + "o_proj.weight"] = P((H, nh * hd), out_std)
            if bias:
                for n, k in (("q", nh * hd), ("k", nkv * hd), ("v", nkv * hd), ("o", H)):
                    self.p[a + f"{n}_proj.bias"] = P((k,), fill=0.0)
                self.p[a + "sinks"] = P((nh,), fill=0.0)
            else:
                self.p[a + "q_norm.weight"] = P((hd,), fill=1.0)
                self.p[a + "k_norm.weight"] = P((hd,), fill=1.0)
            m = pre + "mlp."
            if arch == "gpt_oss":
                self.p[m + "router.weight"] = P((E, H))
                self.p[m + "router.bias"] = P((E,), fill=0.0)
                self.p[m + "experts.gate_up_proj"] = P((E, H, 2 * I))
                self.p[m + "experts.gate_up_proj_bias"] = P((E, 2 * I), fill=0.0)
                self.p[m + "experts.down_proj"] = P((E, I, H), out_std)
                self.p[m + "experts.down_proj_bias"] = P((E, H), fill=0.0)
            else:
                self.p[m + "gate.weight"] = P((E, H))
                # stacked here; exported per expert (experts.N.*_proj.weight)
                self.p[m + "experts.gate_proj"] = P((E, I, H))
                self.p[m + "experts.up_proj"] = P((E, I, H))
                self.p[m + "experts.down_proj"] = P((E, H, I), out_std)
        for name, v in self.p.items():
            self.params[name.replace(".", "|")] = v
        self.n_unused = cfg["vocab_size"] - n_rows
        self._tables = {}

    # ---- blocks -----------------------------------------------------------
    def attention(self, l, x, cos, sin, mask):
        c, p = self.cfg, self.p
        a = f"model.layers.{l}.self_attn."
        B, T, _ = x.shape
        nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        b = (lambda n: p[a + n + "_proj.bias"]) if self.arch == "gpt_oss" else (lambda n: None)
        q = F.linear(x, p[a + "q_proj.weight"], b("q")).view(B, T, nh, hd)
        k = F.linear(x, p[a + "k_proj.weight"], b("k")).view(B, T, nkv, hd)
        v = F.linear(x, p[a + "v_proj.weight"], b("v")).view(B, T, nkv, hd)
        if self.arch == "qwen3_moe":
            q = rms_norm(q, p[a + "q_norm.weight"], c["rms_norm_eps"])
            k = rms_norm(k, p[a + "k_norm.weight"], c["rms_norm_eps"])
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = nh // nkv
        q = q.transpose(1, 2)
        k = k.transpose(1, 2).repeat_interleave(rep, dim=1)
        v = v.transpose(1, 2).repeat_interleave(rep, dim=1)
        s = (q @ k.transpose(-1, -2)).float() * (hd ** -0.5) + mask
        if self.arch == "gpt_oss":
            sink = p[a + "sinks"].float().view(1, nh, 1, 1).expand(B, nh, T, 1)
            s = torch.cat([s, sink], dim=-1)
            s = s - s.max(dim=-1, keepdim=True).values
            w = torch.softmax(s, dim=-1)[..., :-1]
        else:
            w = torch.softmax(s, dim=-1)
        o = (w.to(v.dtype) @ v).transpose(1, 2).reshape(B, T, nh * hd)
        return F.linear(o, p[a + "o_proj.weight"], b("o"))

    def moe(self, l, x):
        """Returns the output and the load-balancing statistics (fraction of
        tokens per expert, mean router probability per expert)."""
        c, p = self.cfg, self.p
        m = f"model.layers.{l}.mlp."
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        k = c["num_experts_per_tok"]
        if self.arch == "gpt_oss":
            logits = F.linear(x, p[m + "router.weight"], p[m + "router.bias"])
            top_v, top_i = torch.topk(logits, k, dim=-1)
            top_w = torch.softmax(top_v.float(), dim=-1)
            probs = torch.softmax(logits.float(), dim=-1)
        else:
            logits = F.linear(x, p[m + "gate.weight"])
            probs = torch.softmax(logits.float(), dim=-1)
            top_w, top_i = torch.topk(probs, k, dim=-1)
            if c["norm_topk_prob"]:
                top_w = top_w / top_w.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(x)
        limit, alpha = 7.0, 1.702
        for e in range(self.E):
            rows, slot = (top_i == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            xe = x[rows]
            if self.arch == "gpt_oss":
                gu = xe @ p[m + "experts.gate_up_proj"][e] + p[m + "experts.gate_up_proj_bias"][e]
                gate, up = gu[:, ::2], gu[:, 1::2]
                gate = gate.clamp(max=limit)
                up = up.clamp(min=-limit, max=limit)
                h = (up + 1) * (gate * torch.sigmoid(gate * alpha))
                y = h @ p[m + "experts.down_proj"][e] + p[m + "experts.down_proj_bias"][e]
            else:
                h = F.silu(F.linear(xe, p[m + "experts.gate_proj"][e])) * \
                    F.linear(xe, p[m + "experts.up_proj"][e])
                y = F.linear(h, p[m + "experts.down_proj"][e])
            out.index_add_(0, rows, (y * top_w[rows, slot, None].to(y.dtype)).to(out.dtype))
        frac = F.one_hot(top_i, self.E).float().sum(1).mean(0) / k
        return out.view(shape), (frac, probs.mean(0))

    def tables(self, T, device):
        """RoPE cos/sin and the causal and sliding-window masks for length T
        (cached: batches repeat lengths)."""
        key = (T, str(device))
        if key not in self._tables:
            c = self.cfg
            cos, sin = rope_tables(c, T, device)
            i = torch.arange(T, device=device)
            causal = i[None, :] <= i[:, None]
            full = torch.zeros(T, T, device=device).masked_fill(~causal, float("-inf"))
            sliding = full
            if self.arch == "gpt_oss":
                win = causal & (i[None, :] > i[:, None] - c["sliding_window"])
                sliding = torch.zeros(T, T, device=device).masked_fill(~win, float("-inf"))
            if len(self._tables) > 512:
                self._tables.clear()
            self._tables[key] = (cos, sin, full, sliding)
        return self._tables[key]

    def hidden(self, ids):
        """Final-norm hidden states [B, T, H] and the MoE balance statistics."""
        c, p = self.cfg, self.p
        B, T = ids.shape
        x = p["embed_rows"][ids]
        cos, sin, full, sliding = self.tables(T, ids.device)
        stats = []
        for l in range(c["num_hidden_layers"]):
            mask = full
            if self.arch == "gpt_oss" and c["layer_types"][l] == "sliding_attention":
                mask = sliding
            pre = f"model.layers.{l}."
            x = x + self.attention(l, rms_norm(x, p[pre + "input_layernorm.weight"],
                                               c["rms_norm_eps"]), cos, sin, mask)
            y, st = self.moe(l, rms_norm(x, p[pre + "post_attention_layernorm.weight"],
                                         c["rms_norm_eps"]))
            x = x + y
            stats.append(st)
        return rms_norm(x, p["model.norm.weight"], c["rms_norm_eps"]), stats

    def logits(self, h):
        """Used-token logits [.., R] and the logit every unused token has."""
        with torch.autocast(device_type=h.device.type, enabled=False):  # logits in float32
            E = self.p["embed_rows"].float()
            return h.float() @ E.t(), h.float() @ E.mean(0)


# ---- safetensors (written by hand: no safetensors package needed) ----------

def bf16_bytes(t):
    """Round to bf16 (nearest even) and return the raw little-endian bytes."""
    return t.detach().to(torch.bfloat16).view(torch.int16).cpu().numpy().astype("<i2").tobytes()


def write_safetensors(path, tensors, metadata=None):
    """tensors: name -> (dtype string, shape, bytes)."""
    header, off = {}, 0
    for name in sorted(tensors):
        dt, shape, raw = tensors[name]
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name in sorted(tensors):
            f.write(tensors[name][2])


def read_safetensors(path):
    """name -> numpy array (BF16 as float32, I32 as int32)."""
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, en = e["data_offsets"]
        raw = data[8 + n + b:8 + n + en]
        if e["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif e["dtype"] == "I32":
            a = np.frombuffer(raw, dtype="<i4")
        else:
            raise ValueError(f"{path}: {name}: dtype {e['dtype']} not expected")
        out[name] = a.reshape(e["shape"])
    return out


def export_tensors(model, used_ids):
    """The compact checkpoint: HF-named tensors plus the used embedding rows,
    their token ids and the row every other token gets."""
    t = {}
    for name, v in model.p.items():
        if name == "embed_rows":
            continue
        if model.arch == "qwen3_moe" and ".experts." in name:
            base, which = name.rsplit(".experts.", 1)
            for e in range(v.shape[0]):
                w = v[e]
                t[f"{base}.experts.{e}.{which}.weight"] = ("BF16", w.shape, bf16_bytes(w))
            continue
        t[name] = ("BF16", v.shape, bf16_bytes(v))
    rows = model.p["embed_rows"].detach().to(torch.bfloat16).float()
    t["demo.embed_rows"] = ("BF16", rows.shape, bf16_bytes(rows))
    # the mean of the bf16 rows the engine will see, rounded once
    t["demo.embed_unused"] = ("BF16", rows.shape[1:], bf16_bytes(rows.mean(0)))
    ids = np.asarray(used_ids, dtype="<i4")
    t["demo.embed_ids"] = ("I32", ids.shape, ids.tobytes())
    return t


def load_compact(model, tensors):
    """Loads a compact checkpoint (read_safetensors) into the model."""
    with torch.no_grad():
        for name, v in model.p.items():
            if name == "embed_rows":
                v.copy_(torch.from_numpy(np.array(tensors["demo.embed_rows"])))
            elif model.arch == "qwen3_moe" and ".experts." in name:
                base, which = name.rsplit(".experts.", 1)
                for e in range(v.shape[0]):
                    v[e].copy_(torch.from_numpy(np.array(tensors[f"{base}.experts.{e}.{which}.weight"])))
            else:
                v.copy_(torch.from_numpy(np.array(tensors[name])))
