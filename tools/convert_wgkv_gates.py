#!/usr/bin/env python3
"""Convert released WG-KV write gates (.pt) to safetensors for `--policy wgkv:gates=FILE`.

How to run (from the repository root):

    python3 -m venv .venv-convert
    .venv-convert/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu
    .venv-convert/bin/pip install safetensors
    # download WG-KV/checkpoints/<model>-<lambda>.pt first, e.g. qwen3-4b-instruct-2507-0.16.pt
    .venv-convert/bin/python tools/convert_wgkv_gates.py qwen3-4b-instruct-2507-0.16.pt gates.safetensors

Input (seed-wgkv.md §6; the checkpoint is a torch.save'd dict of the trainable parameters, fp32):
for every layer l, under model.layers.{l}.self_attn.g_predictors.:

    pre_key_norm.weight    [D]            RMSNorm weight of the pre-RoPE key (shared by the heads)
    post_key_norm.weight   [D]            RMSNorm weight of the post-RoPE key
    conv1.weight           [Hkv*I, 2D, 1] W1 of all heads, head-major (rows h*I..(h+1)*I-1 = head h);
                                          input columns 0..D-1 = normed pre-RoPE key, D..2D-1 = post
    conv1.bias             [Hkv*I]
    conv2.weight           [Hkv, I, 1]    W2 (row h = head h)
    conv2.bias             [Hkv]

D = head_dim, Hkv = KV heads, I = g_expand * D (192 for Qwen3-4B, 512 for Llama-3.1-8B). The
output keeps these names and shapes (values as nn.Parameter are unwrapped), in f32 or bf16, so
`kvbench` reads them directly; the checkpoint stores no W / tau (kvbench defaults: 256 / 0.1).
"""
import argparse
import re
import sys

import torch
from safetensors.torch import save_file

KEY = re.compile(r"^model\.layers\.(\d+)\.self_attn\.g_predictors\."
                 r"(pre_key_norm\.weight|post_key_norm\.weight|conv1\.weight|conv1\.bias|conv2\.weight|conv2\.bias)$")
NEEDED = {"pre_key_norm.weight", "post_key_norm.weight", "conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pt")
    ap.add_argument("out")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    a = ap.parse_args()
    sd = torch.load(a.pt, map_location="cpu", weights_only=False)
    if not isinstance(sd, dict):
        sys.exit(f"{a.pt}: expected a dict of parameters, got {type(sd).__name__}")
    layers = {}
    for k, v in sd.items():
        m = KEY.match(k)
        if not m:
            sys.exit(f"{a.pt}: unexpected tensor '{k}' (not a WG-KV g_predictors parameter)")
        layers.setdefault(int(m.group(1)), {})[m.group(2)] = torch.as_tensor(v.detach() if hasattr(v, "detach") else v)
    if not layers:
        sys.exit(f"{a.pt}: no g_predictors tensors")
    n = max(layers) + 1
    for l in range(n):
        g = layers.get(l, {})
        if set(g) != NEEDED:
            sys.exit(f"{a.pt}: layer {l}: has {sorted(g)}; needs {sorted(NEEDED)}")
        d = g["pre_key_norm.weight"].shape[0]
        hkv = g["conv2.bias"].shape[0]
        hi = g["conv1.weight"].shape[0]
        if hi % hkv or tuple(g["conv1.weight"].shape) != (hi, 2 * d, 1) or \
                tuple(g["conv2.weight"].shape) != (hkv, hi // hkv, 1):
            sys.exit(f"{a.pt}: layer {l}: inconsistent shapes conv1 {tuple(g['conv1.weight'].shape)} "
                     f"conv2 {tuple(g['conv2.weight'].shape)} for D={d}, Hkv={hkv}")
    dtype = torch.float32 if a.dtype == "f32" else torch.bfloat16
    out = {f"model.layers.{l}.self_attn.g_predictors.{k}": v.to(dtype).contiguous()
           for l, g in layers.items() for k, v in g.items()}
    save_file(out, a.out, metadata={"source": a.pt, "format": "wgkv-gate", "layers": str(n)})
    print(f"wrote {a.out}: {n} layers, head_dim {d}, kv heads {hkv}, hidden {hi // hkv} per head")


if __name__ == "__main__":
    main()
