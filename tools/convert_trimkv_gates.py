#!/usr/bin/env python3
"""Convert released TRIM-KV retention gates (.pth) to safetensors for `--policy trimkv:gates=FILE`.

How to run (from the repository root):

    python3 -m venv .venv-convert
    .venv-convert/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu
    .venv-convert/bin/pip install safetensors
    # download ngocbh/TrimKV-<model>/trimkv_weights.pth (e.g. with huggingface-cli) first
    .venv-convert/bin/python tools/convert_trimkv_gates.py trimkv_weights.pth gates.safetensors \
        [--config config.json] [--dtype f32|bf16]

Input: the dict that TRIM-KV's train script torch.save()s (seed-trimkv-and-baselines.md §2.4):
parameter name -> tensor, for every layer l:

    model.layers.{l}.self_attn.retention_gate.linear1.weight   [I, H]   W1 (I = 512 released)
    model.layers.{l}.self_attn.retention_gate.linear1.bias     [I]      b1
    model.layers.{l}.self_attn.retention_gate.linear2.weight   [Hkv, I] W2 (no bias)
    model.layers.{l}.self_attn.retention_gate.bias             [Hkv]    b (init retention_gate_bias_init)

H = the base model's hidden size, Hkv = its number of KV heads; the gate computes
log beta = logsigmoid(W2 · SiLU(W1·x + b1) + b) on the attention block's (RMSNormed) input x.
The released files are bf16. Output: the same names and shapes in one .safetensors file (f32 by
default, bf16 with --dtype bf16), plus metadata (source file, and memory_size / buffer_size /
base_model from the checkpoint's config.json when --config is given). The script refuses files
whose key set is not exactly those four tensors per layer, or whose shapes disagree across layers.
"""
import argparse
import json
import re
import sys

import torch
from safetensors.torch import save_file

KEY = re.compile(r"^model\.layers\.(\d+)\.self_attn\.retention_gate\.(linear1\.weight|linear1\.bias|linear2\.weight|bias)$")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pth")
    ap.add_argument("out")
    ap.add_argument("--config", help="the checkpoint's config.json (recorded as metadata)")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    a = ap.parse_args()

    sd = torch.load(a.pth, map_location="cpu", weights_only=True)
    if not isinstance(sd, dict):
        sys.exit(f"{a.pth}: expected a dict of tensors, got {type(sd).__name__}")
    layers = {}
    for k, v in sd.items():
        m = KEY.match(k)
        if not m:
            sys.exit(f"{a.pth}: unexpected tensor '{k}' (not a TRIM-KV 'rg' retention gate)")
        layers.setdefault(int(m.group(1)), {})[m.group(2)] = v
    if not layers:
        sys.exit(f"{a.pth}: no retention-gate tensors")
    n = max(layers) + 1
    ref = None
    for l in range(n):
        g = layers.get(l, {})
        if set(g) != {"linear1.weight", "linear1.bias", "linear2.weight", "bias"}:
            sys.exit(f"{a.pth}: layer {l}: has {sorted(g)}; needs linear1.weight, linear1.bias, linear2.weight, bias")
        I, H = g["linear1.weight"].shape
        hkv = g["linear2.weight"].shape[0]
        shapes = (tuple(g["linear1.weight"].shape), tuple(g["linear1.bias"].shape),
                  tuple(g["linear2.weight"].shape), tuple(g["bias"].shape))
        if shapes != ((I, H), (I,), (hkv, I), (hkv,)):
            sys.exit(f"{a.pth}: layer {l}: inconsistent shapes {shapes}")
        if ref is None:
            ref = shapes
        elif shapes != ref:
            sys.exit(f"{a.pth}: layer {l}: shapes {shapes} differ from layer 0 {ref}")
    dtype = torch.float32 if a.dtype == "f32" else torch.bfloat16
    out = {k: v.to(dtype).contiguous() for k, v in sd.items()}
    meta = {"source": a.pth, "format": "trimkv-rg", "layers": str(n), "hidden_size": str(ref[0][1]),
            "gate_hidden": str(ref[0][0]), "num_kv_heads": str(ref[2][0])}
    if a.config:
        cfg = json.load(open(a.config))
        for key in ("base_model", "memory_size", "buffer_size", "retention_gate_bias_init"):
            if key in cfg:
                meta[key] = str(cfg[key])
    save_file(out, a.out, metadata=meta)
    print(f"wrote {a.out}: {n} layers, W1 {ref[0]}, W2 {ref[2]}, dtype {a.dtype}")


if __name__ == "__main__":
    main()
