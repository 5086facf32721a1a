#!/usr/bin/env python3
"""Convert a TriAttention calibration file (.pt) into the stats file kvbench reads (.safetensors).

    .venv-goldens/bin/python tools/convert_triattention_stats.py IN.pt OUT.safetensors

The reference (WeianMao/triattention: scripts/calibrate.py writes it, triattention/calibration/
holds the released ones) saves with torch.save a dict {"metadata": {..., "head_dim", "rope_style",
"sampled_heads": [[layer, head], ...]}, "stats": {"layer03_head07": {"q_mean_real", "q_mean_imag",
"q_abs_mean"}}} with one f32 vector of head_dim / 2 values per field. kvbench's restricted
unpickler reads flat tensor dicts only, so this writes the same tensors flat, named
"layer03_head07.q_mean_real" and so on, F32, with head_dim and rope_style as safetensors metadata
(docs/policies.md, `triattention`). It refuses a file whose rope_style is not "half" (kvbench's
rotate-half RoPE) and a file that does not cover every (layer, head) pair from 0 up to its largest
layer and head.
"""
import argparse
import sys


def convert(src, dst):
    """Reads the reference stats file `src` and writes kvbench's `dst`; returns the tensor count."""
    import torch
    from safetensors.torch import save_file

    payload = torch.load(src, map_location="cpu", weights_only=True)
    meta, stats = payload["metadata"], payload["stats"]
    style = str(meta.get("rope_style", "half"))
    if style != "half":
        sys.exit(f"{src}: metadata.rope_style: {style!r}; kvbench's RoPE is rotate-half ('half')")
    heads = [tuple(int(x) for x in p) for p in meta["sampled_heads"]]
    layers = 1 + max(l for l, _ in heads)
    per_layer = 1 + max(h for _, h in heads)
    out = {}
    for layer in range(layers):
        for head in range(per_layer):
            key = f"layer{layer:02d}_head{head:02d}"
            if key not in stats:
                sys.exit(f"{src}: stats.{key}: missing (kvbench needs every head of every layer)")
            for field in ("q_mean_real", "q_mean_imag", "q_abs_mean"):
                out[f"{key}.{field}"] = stats[key][field].to(torch.float32).contiguous()
    info = {"head_dim": str(int(meta.get("head_dim", 2 * out["layer00_head00.q_mean_real"].numel()))),
            "rope_style": style, "source": "TriAttention calibration (converted)"}
    save_file(out, dst, metadata=info)
    return len(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", help="the reference's .pt stats file")
    ap.add_argument("dst", help="the .safetensors file to write")
    a = ap.parse_args()
    n = convert(a.src, a.dst)
    print(f"wrote {a.dst} ({n} tensors)")


if __name__ == "__main__":
    main()
