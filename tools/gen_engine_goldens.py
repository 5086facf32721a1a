#!/usr/bin/env python3
"""Generate the tiny random-weight models and the engine goldens used by tests/engine.

Run from the repository root (needs network access to PyPI once):
    python3 -m venv .venv-goldens && .venv-goldens/bin/pip install torch transformers safetensors numpy
    .venv-goldens/bin/python tools/gen_engine_goldens.py [NAME ...]
(NAME ...: only those models, e.g. tiny-mistral; default all).

Writes tests/fixtures/models/<name>/{config.json, generation_config.json, model.safetensors}
and tests/fixtures/models/<name>/goldens.json holding, computed by transformers (f32, eager):
  - "prompts": fixed token-id prompts; "last_logits": last-position logits of each prompt;
  - "greedy": 64 greedy tokens after each prompt (model.generate, do_sample=False);
  - "last_logits_bf16w": last-position logits with every weight matrix rounded to bf16 (norms,
    biases and compute in f32),
    the reference for weights held as bf16 in memory;
  - "ragged": a prompt, per-(layer, kv_head) token indices evicted after the prompt, 6
    teacher-forced tokens and the logits after each of them, from an independent torch forward
    (validated against transformers to 1e-5 first) that masks exactly those tokens out of the
    attention of later queries of that kv head's query group.
"""
import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers import (Gemma2Config, Gemma2ForCausalLM, LlamaConfig, LlamaForCausalLM, MinistralConfig, MinistralForCausalLM, MistralConfig,
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "models")
torch.set_grad_enabled(False)

COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, attn_implementation="eager")

MODELS = {
    # Llama with llama3 RoPE scaling, untied embeddings, head_dim override (16 ≠ 64/4).
    "tiny-llama3": (LlamaConfig, LlamaForCausalLM, dict(
        head_dim=24, tie_word_embeddings=False,
        rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                             high_freq_factor=4.0, original_max_position_embeddings=32))),
    # Qwen2 with q/k/v bias, tied embeddings, linear RoPE scaling.
    "tiny-qwen2": (Qwen2Config, Qwen2ForCausalLM, dict(
        tie_word_embeddings=True, rope_parameters=dict(rope_type="linear", rope_theta=10000.0, factor=2.0))),
    # Qwen3 with q/k RMSNorm, untied, head_dim override, yarn RoPE scaling.
    "tiny-qwen3": (Qwen3Config, Qwen3ForCausalLM, dict(
        head_dim=32, tie_word_embeddings=False,
        rope_parameters=dict(rope_type="yarn", rope_theta=1000000.0, factor=4.0,
                             original_max_position_embeddings=64))),
    # Qwen3 tied, default RoPE.
    "tiny-qwen3-tied": (Qwen3Config, Qwen3ForCausalLM, dict(
        head_dim=16, tie_word_embeddings=True, rope_parameters=dict(rope_type="default", rope_theta=10000.0))),
    # Mistral: sliding-window attention on every layer, the window (8) shorter than prompts 2 and
    # 3, the 64 greedy tokens and the ragged prompt, and longer than the tests' prefill chunk (5).
    "tiny-mistral": (MistralConfig, MistralForCausalLM, dict(
        head_dim=16, tie_word_embeddings=False, sliding_window=8,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0))),
    # Ministral: the window (6) on the layers layer_types marks sliding only.
    "tiny-ministral": (MinistralConfig, MinistralForCausalLM, dict(
        head_dim=16, tie_word_embeddings=True, sliding_window=6, layer_types=["sliding_attention", "full_attention"],
        rope_parameters=dict(rope_type="default", rope_theta=10000.0))),
    # Gemma 2: (1 + w) sandwich norms, GeLU-tanh, √H embedding scale, query_pre_attn_scalar ≠
    # head_dim, soft-capping small enough to bite on these weights, sliding window (7) on the
    # even layers (Gemma2Config's default layer_types).
    "tiny-gemma2": (Gemma2Config, Gemma2ForCausalLM, dict(
        head_dim=16, query_pre_attn_scalar=24, tie_word_embeddings=True, sliding_window=7,
        attn_logit_softcapping=1.5, final_logit_softcapping=4.0, hidden_activation="gelu_pytorch_tanh",
        rope_parameters=dict(rope_type="default", rope_theta=10000.0))),
}

PROMPTS = [
    [1, 17, 42, 99, 5, 250, 3],
    [1] + [int(x) for x in np.random.RandomState(1).randint(3, 256, size=22)],
    [1] + [int(x) for x in np.random.RandomState(2).randint(3, 256, size=49)],
]


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
        elif name.endswith("bias"):
            p.copy_(0.1 * torch.randn(p.shape, generator=g))
        else:
            p.copy_(0.08 * torch.randn(p.shape, generator=g))


def rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def layer_window(cfg, li):
    """The sliding window of layer li as the model's attention module gets it (None: full)."""
    if cfg.model_type == "mistral":  # MistralAttention: config.sliding_window on every layer
        return cfg.sliding_window
    types = getattr(cfg, "layer_types", None)
    return cfg.sliding_window if types and types[li] == "sliding_attention" else None


def reference_forward(model, ids, evict=None, n_prompt=None):
    """Independent f32 forward of a Llama/Qwen2/Qwen3/Mistral/Ministral/Gemma2 model over `ids` [T].

    evict[(layer, kv_head)] = token indices (< n_prompt) that queries at positions >= n_prompt
    of that kv head's query group must not attend to. Returns logits [T, V].
    """
    cfg = model.config
    m = model.model
    T = len(ids)
    H, Hq, Hkv = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
    D = getattr(cfg, "head_dim", None) or H // Hq
    G = Hq // Hkv
    x = m.embed_tokens.weight[torch.tensor(ids)]
    pos = torch.arange(T)
    cos, sin = m.rotary_emb(x[None], pos[None])  # [1, T, D]
    cos, sin = cos[0], sin[0]

    def rope(v):  # v [heads, T, D]
        half = D // 2
        rot = torch.cat([-v[..., half:], v[..., :half]], dim=-1)
        return v * cos + rot * sin

    gemma = cfg.model_type == "gemma2"
    if gemma:  # Gemma2Model: embeddings times √H (an f32 tensor); Gemma2RMSNorm scales by 1 + w
        x = x * torch.tensor(cfg.hidden_size ** 0.5, dtype=torch.float32)

    def norm(v, mod):
        return rms(v, 1.0 + mod.weight if gemma else mod.weight, cfg.rms_norm_eps)

    scaling = cfg.query_pre_attn_scalar ** -0.5 if gemma else D ** -0.5
    softcap = getattr(cfg, "attn_logit_softcapping", None)
    for li, layer in enumerate(m.layers):
        a = layer.self_attn
        h = norm(x, layer.input_layernorm)
        q = a.q_proj(h).view(T, Hq, D).transpose(0, 1)
        k = a.k_proj(h).view(T, Hkv, D).transpose(0, 1)
        v = a.v_proj(h).view(T, Hkv, D).transpose(0, 1)
        if hasattr(a, "q_norm"):
            q = rms(q, a.q_norm.weight, cfg.rms_norm_eps)
            k = rms(k, a.k_norm.weight, cfg.rms_norm_eps)
        q, k = rope(q), rope(k)
        out = torch.zeros(Hq, T, D)
        for hq in range(Hq):
            hk = hq // G
            s = (q[hq] @ k[hk].T) * scaling
            if softcap:
                s = torch.tanh(s / softcap) * softcap
            mask = torch.ones(T, T, dtype=torch.bool).tril()
            W = layer_window(cfg, li)
            if W:  # sliding window: key j visible to query i when j > i - W
                mask &= torch.ones(T, T, dtype=torch.bool).triu(-(W - 1))
            if evict and (li, hk) in evict:
                for j in evict[(li, hk)]:
                    mask[n_prompt:, j] = False
            s = s.masked_fill(~mask, float("-inf"))
            out[hq] = torch.softmax(s, dim=-1) @ v[hk]
        o = a.o_proj(out.transpose(0, 1).reshape(T, Hq * D))
        if gemma:  # sandwich norms around attention and MLP
            x = x + norm(o, layer.post_attention_layernorm)
            h = norm(x, layer.pre_feedforward_layernorm)
            g = torch.nn.functional.gelu(layer.mlp.gate_proj(h), approximate="tanh")
            x = x + norm(layer.mlp.down_proj(g * layer.mlp.up_proj(h)), layer.post_feedforward_layernorm)
            continue
        x = x + o
        h = rms(x, layer.post_attention_layernorm.weight, cfg.rms_norm_eps)
        x = x + layer.mlp.down_proj(torch.nn.functional.silu(layer.mlp.gate_proj(h)) * layer.mlp.up_proj(h))
    x = norm(x, m.norm)
    logits = model.lm_head(x)
    cap = getattr(cfg, "final_logit_softcapping", None)
    return torch.tanh(logits / cap) * cap if cap else logits


def main():
    os.makedirs(OUT, exist_ok=True)
    only = sys.argv[1:]
    for name in only:
        assert name in MODELS, f"unknown model {name} (known: {', '.join(MODELS)})"
    for i, (name, (Cfg, Model, extra)) in enumerate(MODELS.items()):
        if only and name not in only:
            continue
        cfg = Cfg(**COMMON, **extra)
        cfg.torch_dtype = "float32"
        torch.manual_seed(0)
        model = Model(cfg).eval().float()
        randomize(model, 1000 + i)
        d = os.path.join(OUT, name)
        model.save_pretrained(d, safe_serialization=True)
        model = Model.from_pretrained(d, attn_implementation="eager").eval().float()
        gold = {"transformers": transformers.__version__, "torch": torch.__version__,
                "prompts": PROMPTS, "last_logits": [], "greedy": []}
        for p in PROMPTS:
            ids = torch.tensor([p])
            logits = model(ids).logits[0]
            ref = reference_forward(model, p)
            err = (ref - logits).abs().max().item() / logits.abs().max().item()
            assert err < 1e-5, f"{name}: reference forward differs from transformers by {err}"
            gold["last_logits"].append([float(v) for v in logits[-1]])
            out = model.generate(ids, max_new_tokens=64, do_sample=False, eos_token_id=None,
                                 pad_token_id=0, attention_mask=torch.ones_like(ids))
            gold["greedy"].append([int(t) for t in out[0, len(p):]])
        bf = Model.from_pretrained(d, attn_implementation="eager").eval().float()
        for _, w in bf.named_parameters():
            if w.dim() == 2:  # matrices (and embeddings) held as bf16; norms/biases stay f32
                w.copy_(w.to(torch.bfloat16).float())
        gold["last_logits_bf16w"] = [[float(v) for v in bf(torch.tensor([p])).logits[0, -1]] for p in PROMPTS]
        # Ragged heads: evict different tokens per (layer, kv_head) after a 20-token prompt.
        rs = np.random.RandomState(7 + i)
        prompt = [1] + [int(x) for x in rs.randint(3, 256, size=19)]
        forced = [int(x) for x in rs.randint(3, 256, size=6)]
        evict = {}
        for li in range(cfg.num_hidden_layers):
            for hk in range(cfg.num_key_value_heads):
                n = int(rs.randint(2, 9))
                evict[(li, hk)] = sorted(int(j) for j in rs.choice(np.arange(1, 20), size=n, replace=False))
        logits = reference_forward(model, prompt + forced, evict, len(prompt))
        gold["ragged"] = {
            "prompt": prompt, "forced": forced,
            "evict": [{"layer": l, "kv_head": h, "indices": v} for (l, h), v in evict.items()],
            # logits after the prompt, then after each forced token: [len(forced) + 1, V]
            "logits": [[float(v) for v in logits[len(prompt) - 1 + j]] for j in range(len(forced) + 1)],
        }
        with open(os.path.join(d, "goldens.json"), "w") as f:
            json.dump(gold, f)
        print(name, "ok", sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d)), "bytes")


if __name__ == "__main__":
    sys.exit(main())
