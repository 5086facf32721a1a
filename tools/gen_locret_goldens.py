#!/usr/bin/env python3
"""Generate LocRet keep-set goldens and retaining-head checkpoints (tests/fixtures/policies/locret_*).

How to run (from the repository root; tools/goldens_venv.sh makes the venv):

    .venv-goldens/bin/python tools/gen_locret_goldens.py

What it writes, for each tiny random-weight model of tools/gen_engine_goldens.py
(tests/fixtures/models/tiny-llama3: llama3 RoPE; tiny-qwen3: q/k RMSNorm, yarn RoPE):
  * tests/fixtures/policies/locret_<model>/model.safetensors — seeded retaining heads in the
    released layout (huangyuxiang03/Locret: model.layers.{l}.self_attn.fc1.weight [I, (Hq+2Hkv)D],
    model.layers.{l}.self_attn.fc2.weight [Hkv, I], no biases; BF16 as the released checkpoints are
    trained in bf16; I = 64 here instead of the released 1024, to keep the fixture small), plus the
    model's config.json (a save_pretrained directory holds the model config next to the weights);
  * tests/fixtures/policies/locret_<model>/retaining_heads.bin — the same tensors as torch.save
    writes them (the README's `--retaining_head_path <*.bin>` form);
  * tests/fixtures/policies/locret_goldens.json — per model: the prompt, the policy parameters, and
    the positions every (layer, kv head) holds at the end of the prompt.

The golden is a float64 restatement of LocRet's protocol (locret/inference/infer.py `generate` and
the attention blocks' fc1/fc2 of locret/models/*/modeling_*.py, commit bbd27bc), written here with
its own forward pass of the model (weights from the model's safetensors, cast to float64; RoPE
frequencies and attention scaling from transformers' rotary embedding), checked against
transformers' own forward on the whole prompt:
  score s[t, h] = (W2 · SiLU(W1 · [q_t; k_t; v_t]))[h], q/k/v the projections before RoPE (after
  Qwen3's q/k norm), computed once when token t is computed;
  the first P − local_len prompt tokens in chunks of chunk_size; after each chunk every (layer, kv
  head) keeps its min(budget, L) highest-scoring tokens in temporal order, the last `stabilizers`
  cached tokens scoring +inf unless it is the last chunk; the last local_len tokens without eviction.
As kvbench (docs/policies.md#locret), cached keys keep their original positions (the reference
re-rotates the compressed cache with positions 0..L-1; see the docs for this difference).
Ties: the seeded prompt is accepted only when, at every eviction, the last kept and the first
evicted score of every head differ by more than 1e-4 relative to the head's largest |score|.
"""
import json
import os

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

import goldens_env

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MODELS = ["models/tiny-llama3", "models/tiny-qwen3"]
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "policies")
PROMPT_LEN = 240
PARAMS = dict(chunk_size=48, stabilizers=12, local_len=20)
BUDGET = 40
HIDDEN = 64
MARGIN = 1e-4
torch.set_grad_enabled(False)


def rms(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rope(x, pos, inv_freq, scale):
    """Rotate-half RoPE of x [..., n, D] at positions pos [n] (float64)."""
    ang = pos[:, None].double() * inv_freq[None, :]
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos() * scale, emb.sin() * scale
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rot * sin


def qkv_proj(w, l, x, Hq, Hk, D, eps):
    """Layer l's q [n, Hq, D], k and v [n, Hk, D] of hidden states x [n, H] (float64): input RMSNorm,
    the three projections, and Qwen3's q/k RMSNorm when the layer has one; before RoPE.
    w(l, name) gives the layer's tensor `model.layers.{l}.<name>` or None."""
    n = x.shape[0]
    xn = rms(x, w(l, "input_layernorm.weight"), eps)
    q = (xn @ w(l, "self_attn.q_proj.weight").T).view(n, Hq, D)
    k = (xn @ w(l, "self_attn.k_proj.weight").T).view(n, Hk, D)
    v = (xn @ w(l, "self_attn.v_proj.weight").T).view(n, Hk, D)
    if w(l, "self_attn.q_norm.weight") is not None:
        q = rms(q, w(l, "self_attn.q_norm.weight"), eps)
        k = rms(k, w(l, "self_attn.k_norm.weight"), eps)
    return q, k, v


class Restatement:
    """LocRet's chunked prefill on the model, float64, with per-(layer, kv head) caches."""

    def __init__(self, model_dir, heads):
        cfg = json.load(open(os.path.join(model_dir, "config.json")))
        self.w = {k: v.double() for k, v in load_file(os.path.join(model_dir, "model.safetensors")).items()}
        self.L, self.Hq, self.Hk = cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.D, self.eps = cfg["head_dim"], cfg["rms_norm_eps"]
        hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        self.inv_freq = hf.model.rotary_emb.inv_freq.double()
        self.scale = float(hf.model.rotary_emb.attention_scaling)
        self.hf = hf
        self.heads = heads

    def layer_w(self, l, name):
        return self.w.get(f"model.layers.{l}.{name}")

    def run(self, prompt, budget, chunk, stab, local, evict=True):
        """Kept positions [layer][head] after the prompt, the logits of the last token, and the
        smallest relative kept/evicted score margin seen at an eviction."""
        P = len(prompt)
        tail = P - local
        bounds = list(range(0, max(tail, 0), chunk)) if tail > 0 else []
        steps = [(b, min(b + chunk, tail), True) for b in bounds] + [(tail if tail > 0 else 0, P, False)]
        # cache[l][h]: list of (pos, k_rot [D], v [D], score)
        cache = [[[] for _ in range(self.Hk)] for _ in range(self.L)]
        min_margin = float("inf")
        emb = self.w["model.embed_tokens.weight"]
        G = self.Hq // self.Hk
        for b, e, evicting in steps:
            ids = torch.tensor(prompt[b:e])
            pos = torch.arange(b, e)
            x = emb[ids]
            n = e - b
            for l in range(self.L):
                q, k, v = qkv_proj(self.layer_w, l, x, self.Hq, self.Hk, self.D, self.eps)
                # retaining head on [q; k; v] before RoPE
                feat = torch.cat([q.reshape(n, -1), k.reshape(n, -1), v.reshape(n, -1)], -1)
                w1, w2 = self.heads[f"model.layers.{l}.self_attn.fc1.weight"], self.heads[f"model.layers.{l}.self_attn.fc2.weight"]
                s = torch.nn.functional.silu(feat @ w1.T) @ w2.T  # [n, Hk]
                qr = rope(q.transpose(0, 1), pos, self.inv_freq, self.scale)  # [Hq, n, D]
                kr = rope(k.transpose(0, 1), pos, self.inv_freq, self.scale)  # [Hk, n, D]
                out = torch.zeros(n, self.Hq, self.D, dtype=torch.float64)
                for h in range(self.Hk):
                    for t in range(n):
                        cache[l][h].append((b + t, kr[h, t], v[t, h], float(s[t, h])))
                    K = torch.stack([c[1] for c in cache[l][h]])
                    V = torch.stack([c[2] for c in cache[l][h]])
                    P_ = torch.tensor([c[0] for c in cache[l][h]])
                    for g in range(G):
                        hq = h * G + g
                        logits = qr[hq] @ K.T / (self.D ** 0.5)
                        logits = logits.masked_fill(P_[None, :] > pos[:, None], float("-inf"))
                        out[:, hq] = torch.softmax(logits, -1) @ V
                x = x + out.reshape(n, -1) @ self.layer_w(l, "self_attn.o_proj.weight").T
                xn = rms(x, self.layer_w(l, "post_attention_layernorm.weight"), self.eps)
                gate = xn @ self.layer_w(l, "mlp.gate_proj.weight").T
                up = xn @ self.layer_w(l, "mlp.up_proj.weight").T
                x = x + (torch.nn.functional.silu(gate) * up) @ self.layer_w(l, "mlp.down_proj.weight").T
                if not (evict and evicting):
                    continue
                stabilize = e < tail
                for h in range(self.Hk):
                    c = cache[l][h]
                    if len(c) <= budget:
                        continue
                    sc = torch.tensor([t[3] for t in c], dtype=torch.float64)
                    if stabilize:
                        sc[len(c) - stab:] = float("inf")
                    order = torch.argsort(sc, descending=True, stable=True)
                    kept, dropped = sc[order[budget - 1]], sc[order[budget]]
                    finite = sc[torch.isfinite(sc)]
                    if torch.isfinite(kept):
                        min_margin = min(min_margin, float((kept - dropped) / finite.abs().max()))
                    keep = sorted(order[:budget].tolist())
                    cache[l][h] = [c[i] for i in keep]
        xf = rms(x[-1], self.w["model.norm.weight"], self.eps)
        logits = xf @ self.w["lm_head.weight"].T
        return [[[c[0] for c in cache[l][h]] for h in range(self.Hk)] for l in range(self.L)], logits, min_margin


def make_heads(cfg, seed):
    gen = torch.Generator().manual_seed(seed)
    inp = (cfg["num_attention_heads"] + 2 * cfg["num_key_value_heads"]) * cfg["head_dim"]
    heads = {}
    for l in range(cfg["num_hidden_layers"]):
        heads[f"model.layers.{l}.self_attn.fc1.weight"] = (torch.randn(HIDDEN, inp, generator=gen) * 0.5).to(torch.bfloat16)
        heads[f"model.layers.{l}.self_attn.fc2.weight"] = (torch.randn(cfg["num_key_value_heads"], HIDDEN, generator=gen) * 0.5).to(torch.bfloat16)
    return heads


def golden_for(model, seed):
    model_dir = os.path.join(ROOT, "tests", "fixtures", model)
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    heads = make_heads(cfg, seed)
    r = Restatement(model_dir, {k: v.double() for k, v in heads.items()})
    gen = torch.Generator().manual_seed(seed)
    for attempt in range(200):
        prompt = [1] + torch.randint(3, cfg["vocab_size"], (PROMPT_LEN - 1,), generator=gen).tolist()
        if attempt == 0:  # the restated forward must be the model's: compare with transformers, no eviction
            _, mine, _ = r.run(prompt, 10**9, PARAMS["chunk_size"], PARAMS["stabilizers"], PARAMS["local_len"], evict=False)
            ref = r.hf(torch.tensor([prompt])).logits[0, -1].double()
            err = float((mine - ref).abs().max() / ref.abs().max())
            assert err < 1e-4, f"{model}: restated forward differs from transformers by {err}"
            print(f"{model}: restated forward vs transformers (f32): max rel err {err:.2e}")
        keep, _, margin = r.run(prompt, BUDGET, PARAMS["chunk_size"], PARAMS["stabilizers"], PARAMS["local_len"])
        if margin > MARGIN:
            break
        print(f"{model} prompt {attempt}: margin {margin:.2e} too small")
    else:
        raise RuntimeError(f"{model}: no prompt with clear margins")
    out = os.path.join(OUT_DIR, "locret_" + model.split("/")[-1])
    os.makedirs(out, exist_ok=True)
    save_file(heads, os.path.join(out, "model.safetensors"))
    torch.save(heads, os.path.join(out, "retaining_heads.bin"))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    print(f"{model}: prompt {attempt}, min margin {margin:.2e}, head sizes {[[len(h) for h in l] for l in keep]}")
    return dict(model=model, heads="policies/" + os.path.basename(out), budget=BUDGET, params=PARAMS,
                prompt=prompt, keep=keep, min_margin=margin)


def main():
    goldens = [golden_for(m, 31 + i) for i, m in enumerate(MODELS)]
    path = os.path.join(OUT_DIR, "locret_goldens.json")
    goldens_env.write_json(path, generator="tools/gen_locret_goldens.py", reference="huangyuxiang03/Locret@bbd27bc",
                           torch=torch.__version__, models=goldens)


if __name__ == "__main__":
    main()
