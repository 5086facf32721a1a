#!/usr/bin/env python3
"""PyTorch checkpoint fixtures for kvbench's restricted .pth/.pt reader (engine/formats/
torch_checkpoint.h) and the learned-gate policies (docs/policies.md#gate-files), written by torch
itself, into tests/fixtures/pth/:

Released layouts (docs/policies.md#released-checkpoints), sized for the committed test model
tests/fixtures/models/tiny-qwen3 (2 layers, 2 kv heads, hidden 64, head_dim 32):
  trimkv_bf16/trimkv_weights.pth + config.json   TRIM-KV's release: torch.save of a plain dict
        {model.layers.{l}.self_attn.retention_gate.{linear1.weight, linear1.bias, linear2.weight,
        bias}} in bf16, next to a TRIM-KV config.json (memory_size, buffer_size, retention_gate...)
  trimkv_f32.pth     the same names in f32, saved as a module's state_dict() (an OrderedDict with
        _metadata: REDUCE + BUILD), the biases of both layers views of ONE storage (offsets)
  wgkv_f32.pt        WG-KV's release: a dict {model.layers.{l}.self_attn.g_predictors.*:
        nn.Parameter} in f32 (torch._utils._rebuild_parameter), conv weights [O, I, 1]
  wgkv_bf16.pt       the same in bf16
  fastkvzip_bf16.pt  the published Fast-KVzip gates' layout (Jang-Hyun/Fast-KVzip
        <model>/q<G>_dim16_sink16.pt, what kvpress's FastKVzipPress loads): {"module": [the
        state_dict() of kvpress's own FastKVzipGate for each layer]} in bf16, parameters drawn at
        random (tiny-qwen3: 2 layers, 2 kv heads, 2 query heads per kv head, 16 dims, 16 sinks)
  <name>.safetensors the same tensors (same dtype) written by safetensors.torch.save_file
        (fastkvzip_bf16.safetensors: flattened to module.{l}.<name>, as the policy documents)
Hostile or unsupported files, each of which kvbench must refuse with exit code 2 and one line:
  evil_os_system.pth       data.pkl = pickle of an object whose __reduce__ is os.system (GLOBAL)
  evil_eval.pth            builtins.eval via STACK_GLOBAL (protocol 4)
  evil_reduce_storage.pth  REDUCE of torch.FloatStorage (an allowed name that is not callable)
  evil_oversized.pth       a storage whose persistent id declares more elements than its member
  evil_outside.pth         a tensor whose elements lie past the end of its storage
  evil_overlap.pth         two tensors overlapping partially in one storage
  evil_truncated.pth       the first half of trimkv_f32.pth (a truncated ZIP)
  evil_truncated_pickle.pth  a valid archive whose data.pkl stops mid-stream
  evil_noncontiguous.pth   torch.save of a transposed (non-contiguous) view
  evil_bigendian.pth       byteorder "big"
  evil_not_a_dict.pth      a pickled list
Each hostile pickle's payload would create /tmp/kvb_pwned_<name> if executed; the tests check it
does not exist. The archives keep torch's member layout (stored, <top>/data.pkl, <top>/data/N,
<top>/byteorder, <top>/version); only data.pkl (or byteorder) is replaced.

Run from the repository root with the goldens venv (torch, safetensors):
    tools/goldens_venv.sh   (or: python3 -m venv .venv-goldens && .venv-goldens/bin/pip install torch safetensors)
    .venv-goldens/bin/python tools/gen_pth_fixtures.py
"""
import collections
import io
import json
import os
import pickle
import struct
import zipfile

import torch
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "pth")
L, HKV, H, D = 2, 2, 64, 32  # tiny-qwen3
I_TRIM = 16
I_WG = int(1.5 * D)  # WG-KV Qwen3 g_expand 1.5


def trimkv_tensors(gen):
    t = {}
    for l in range(L):
        p = f"model.layers.{l}.self_attn.retention_gate."
        t[p + "linear1.weight"] = torch.randn(I_TRIM, H, generator=gen) * 0.3
        t[p + "linear1.bias"] = torch.randn(I_TRIM, generator=gen) * 0.1
        t[p + "linear2.weight"] = torch.randn(HKV, I_TRIM, generator=gen) * 0.5
        t[p + "bias"] = 2.0 + torch.randn(HKV, generator=gen)
    return t


def wgkv_tensors(gen):
    t = {}
    for l in range(L):
        p = f"model.layers.{l}.self_attn.g_predictors."
        t[p + "pre_key_norm.weight"] = 1.0 + 0.1 * torch.randn(D, generator=gen)
        t[p + "post_key_norm.weight"] = 1.0 + 0.1 * torch.randn(D, generator=gen)
        t[p + "conv1.weight"] = torch.randn(HKV * I_WG, 2 * D, 1, generator=gen) / (2 * D) ** 0.5
        t[p + "conv1.bias"] = 0.1 * torch.randn(HKV * I_WG, generator=gen)
        t[p + "conv2.weight"] = torch.randn(HKV, I_WG, 1, generator=gen)
        t[p + "conv2.bias"] = -2.2 + 0.3 * torch.randn(HKV, generator=gen)  # σ ≈ τ = 0.1: about half admitted
    return t


class Gate(torch.nn.Module):
    """TRIM-KV's retention gate module names (seed note §2.1), for a real state_dict()."""

    def __init__(self):
        super().__init__()
        self.linear1 = torch.nn.Linear(H, I_TRIM)
        self.linear2 = torch.nn.Linear(I_TRIM, HKV, bias=False)
        self.bias = torch.nn.Parameter(torch.zeros(HKV))


class Attn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.retention_gate = Gate()


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = Attn()


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([Layer() for _ in range(L)])


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = Inner()


def members(path):
    with zipfile.ZipFile(path) as z:
        return [(i, z.read(i.filename)) for i in z.infolist()]


def rewrite(src, dst, replace):
    """Copies the torch archive `src` to `dst` (stored, same member order), replacing the bytes of
    members whose name ends with a key of `replace`."""
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as z:
        for info, data in members(src):
            for suffix, new in replace.items():
                if info.filename.endswith(suffix):
                    data = new
            z.writestr(info, data)


class Evil:
    def __init__(self, fn, arg):
        self.fn, self.arg = fn, arg

    def __reduce__(self):
        return (self.fn, (self.arg,))


def pwn(name):
    return f"touch /tmp/kvb_pwned_{name}"


def pickle_tensor_dict(entries, proto=2):
    """A data.pkl of {name: _rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())}
    written opcode by opcode (as torch's pickler does), for layouts torch.save never writes.
    entries: (name, storage_key, storage_class, storage_numel, offset, size, stride)."""
    out = io.BytesIO()
    w = out.write

    def s(x):
        b = x.encode()
        w(b"X" + struct.pack("<I", len(b)) + b)

    def i(x):
        w(b"J" + struct.pack("<i", x))

    def tup(xs):
        w(b"(")
        for x in xs:
            i(x)
        w(b"t")

    w(b"\x80" + bytes([proto]))
    w(b"}(")
    for name, key, cls, numel, off, size, stride in entries:
        s(name)
        w(b"ctorch._utils\n_rebuild_tensor_v2\n(")
        w(b"(")
        s("storage")
        w(f"ctorch\n{cls}\n".encode())
        s(key)
        s("cpu")
        i(numel)
        w(b"tQ")
        i(off)
        tup(size)
        tup(stride)
        w(b"\x89ccollections\nOrderedDict\n)R")
        w(b"tR")
    w(b"u.")
    return out.getvalue()


def main():
    os.makedirs(OUT, exist_ok=True)
    gen = torch.Generator().manual_seed(20260117)

    # TRIM-KV release layout: plain dict, bf16, + config.json.
    trim = trimkv_tensors(gen)
    d = os.path.join(OUT, "trimkv_bf16")
    os.makedirs(d, exist_ok=True)
    bf = {k: v.to(torch.bfloat16).contiguous() for k, v in trim.items()}
    torch.save(bf, os.path.join(d, "trimkv_weights.pth"))
    save_file(bf, os.path.join(OUT, "trimkv_bf16.safetensors"))
    cfg = {
        "architectures": ["TrimKVQwen3ForCausalLM"], "base_model": "kvbench/tiny-qwen3",
        "retention_gate": "rg", "retention_gate_bias_init": 8.0, "retention_gate_intermediate_size": I_TRIM,
        "memory_size": 16.0, "buffer_size": 8, "compress_memory": True, "compress_strategy": "alpha",
        "hidden_act": "silu", "hidden_size": H, "num_hidden_layers": L, "num_key_value_heads": HKV,
        "num_attention_heads": 4, "head_dim": D, "torch_dtype": "bfloat16",
    }
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)

    # TRIM-KV names, f32, as a module's state_dict() (OrderedDict + _metadata), biases sharing one storage.
    m = Model()
    with torch.no_grad():
        for name, p in m.named_parameters():
            p.copy_(trim[name])
    sd = m.state_dict()
    shared = torch.stack([trim[f"model.layers.{l}.self_attn.retention_gate.bias"] for l in range(L)])
    for l in range(L):
        sd[f"model.layers.{l}.self_attn.retention_gate.bias"] = shared[l]  # views: offsets 0, HKV
    torch.save(sd, os.path.join(OUT, "trimkv_f32.pth"))
    save_file({k: v.contiguous() for k, v in sd.items()}, os.path.join(OUT, "trimkv_f32.safetensors"))

    # WG-KV release layout: dict of nn.Parameter, f32 (and bf16).
    wg = wgkv_tensors(gen)
    torch.save({k: torch.nn.Parameter(v) for k, v in wg.items()}, os.path.join(OUT, "wgkv_f32.pt"))
    save_file(wg, os.path.join(OUT, "wgkv_f32.safetensors"))
    wgb = {k: v.to(torch.bfloat16) for k, v in wg.items()}
    torch.save({k: torch.nn.Parameter(v, requires_grad=False) for k, v in wgb.items()}, os.path.join(OUT, "wgkv_bf16.pt"))
    save_file(wgb, os.path.join(OUT, "wgkv_bf16.safetensors"))

    # The published Fast-KVzip gates' layout, written with kvpress's own gate module.
    from kvpress.presses.fastkvzip_press import FastKVzipGate

    gates = []
    for l in range(L):
        g = FastKVzipGate(l, H, HKV, 2, torch.bfloat16, output_dim=16, sink=16)
        with torch.no_grad():
            for _, prm in g.named_parameters():
                prm.copy_((torch.randn(prm.shape, generator=gen) * (1.0 / H**0.5 if prm.dim() == 2 else 1.0)).to(prm.dtype))
        gates.append(g.to(torch.bfloat16).state_dict())
    torch.save({"module": gates}, os.path.join(OUT, "fastkvzip_bf16.pt"))
    save_file({f"module.{l}.{k}": v.contiguous() for l, sd in enumerate(gates) for k, v in sd.items()},
              os.path.join(OUT, "fastkvzip_bf16.safetensors"))

    # Hostile / unsupported files.
    base = os.path.join(OUT, "trimkv_f32.pth")
    # The hostile pickles reference storage "0" of trimkv_f32.pth (its f32 member <top>/data/0).
    data0 = [(i, d) for i, d in members(base) if i.filename.endswith("/data/0")]
    assert len(data0) == 1 and len(data0[0][1]) % 4 == 0
    numel0 = len(data0[0][1]) // 4
    assert numel0 >= 4, numel0
    first = "model.layers.0.self_attn.retention_gate.bias"

    def ev(name, pkl):
        rewrite(base, os.path.join(OUT, f"evil_{name}.pth"), {"/data.pkl": pkl})

    ev("os_system", pickle.dumps(Evil(os.system, pwn("os_system")), protocol=2))
    ev("eval", pickle.dumps(Evil(eval, f"__import__('os').system('{pwn('eval')}')"), protocol=4))
    ev("reduce_storage", b"\x80\x02ctorch\nFloatStorage\n(X\x01\x00\x00\x00xtR.")
    # Storage member 0 holds numel0 f32 elements; these pickles reference it.
    ev("oversized", pickle_tensor_dict([(first, "0", "FloatStorage", numel0 * 4, 0, [numel0 * 4], [1])]))
    ev("outside", pickle_tensor_dict([(first, "0", "FloatStorage", numel0, numel0 - 2, [4], [1])]))
    ev("overlap", pickle_tensor_dict([("a", "0", "FloatStorage", numel0, 0, [3], [1]),
                                      ("b", "0", "FloatStorage", numel0, 2, [2], [1])]))
    pkl = [d for i, d in members(base) if i.filename.endswith("/data.pkl")][0]
    ev("truncated_pickle", pkl[: len(pkl) // 2])
    ev("not_a_dict", pickle.dumps([1, 2, 3], protocol=2))
    with open(base, "rb") as f:
        raw = f.read()
    with open(os.path.join(OUT, "evil_truncated.pth"), "wb") as f:
        f.write(raw[: len(raw) // 2])
    torch.save({"w": torch.randn(4, 6, generator=gen).t()}, os.path.join(OUT, "evil_noncontiguous.pth"))
    rewrite(base, os.path.join(OUT, "evil_bigendian.pth"), {"/byteorder": b"big"})
    print("wrote", sorted(os.listdir(OUT)))


if __name__ == "__main__":
    main()
