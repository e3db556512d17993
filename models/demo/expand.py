#!/usr/bin/env python3
"""Builds a servable model directory from a committed compact demo checkpoint
(Python stdlib only; run by `make demo-models`).

  expand.py SRC_DIR OUT_DIR

SRC_DIR/weights.safetensors holds every tensor of the model in bf16 except
the embedding, which is stored as the trained rows (demo.embed_rows [R, H])
of the tokens the training data uses (demo.embed_ids [R]) and the row every
other token gets (demo.embed_unused [H]: the mean of the trained rows, see
demo_model.py). OUT_DIR/model.safetensors gets the full
model.embed_tokens.weight [vocab_size, H] (tied to the output head by
config.json) and the other tensors byte for byte; OUT_DIR/config.json is
SRC_DIR's. The output depends on nothing but the input bytes.
"""
import json
import os
import shutil
import struct
import sys


def read_header(data, path):
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    return header, 8 + n


def main():
    if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) == 2 else 2)
    src, out = sys.argv[1], sys.argv[2]
    cfg = json.load(open(os.path.join(src, "config.json")))
    path = os.path.join(src, "weights.safetensors")
    data = open(path, "rb").read()
    header, base = read_header(data, path)

    def raw(name, dtype):
        e = header.get(name)
        if not e or e["dtype"] != dtype:
            sys.exit(f"expand.py: {path}: no {dtype} tensor {name}")
        b, en = e["data_offsets"]
        return data[base + b:base + en], e["shape"]

    rows, (n_rows, hidden) = raw("demo.embed_rows", "BF16")
    unused, ushape = raw("demo.embed_unused", "BF16")
    ids_raw, ishape = raw("demo.embed_ids", "I32")
    vocab = cfg["vocab_size"]
    if cfg.get("hidden_size") != hidden or ushape != [hidden] or ishape != [n_rows]:
        sys.exit(f"expand.py: {path}: embedding shapes do not match config.json")
    ids = struct.unpack(f"<{n_rows}i", ids_raw)
    if any(not 0 <= i < vocab for i in ids) or len(set(ids)) != n_rows:
        sys.exit(f"expand.py: {path}: demo.embed_ids must be distinct ids below {vocab}")
    row = 2 * hidden
    embed = bytearray(unused * vocab)
    for r, i in enumerate(ids):
        embed[i * row:(i + 1) * row] = rows[r * row:(r + 1) * row]

    tensors = {"model.embed_tokens.weight": ("BF16", [vocab, hidden], bytes(embed))}
    for name, e in header.items():
        if name == "__metadata__" or name.startswith("demo."):
            continue
        b, en = e["data_offsets"]
        tensors[name] = (e["dtype"], e["shape"], data[base + b:base + en])
    hdr, off = {}, 0
    for name in sorted(tensors):
        dt, shape, blob = tensors[name]
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(blob)]}
        off += len(blob)
    hdr["__metadata__"] = {"format": "pt"}
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    os.makedirs(out, exist_ok=True)
    tmp = os.path.join(out, "model.safetensors.tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name in sorted(tensors):
            f.write(tensors[name][2])
    os.replace(tmp, os.path.join(out, "model.safetensors"))
    shutil.copyfile(os.path.join(src, "config.json"), os.path.join(out, "config.json"))


if __name__ == "__main__":
    main()
