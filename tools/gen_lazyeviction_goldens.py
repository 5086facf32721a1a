#!/usr/bin/env python3
"""Generate LazyEviction goldens from a Python port of the reference (tests/fixtures/policies/lazyeviction_goldens.json).

How to run (from the repository root):

    KVB_GOLDENS_VENV=.venv-goldens python3 tools/gen_lazyeviction_goldens.py

The reference is the authors' code, copied in WeianMao/triattention @
e7a0eb18d056659570035708cda25f6bb6cda333, folder LazyEviction/: model/temp_cacheobs.py
(TempCache.record_recurrence) and model/kv_utils.py (Window_LAZYKVCluster.update_kv_in_decoding),
driven by model/llama_model.py's eager attention (keys and values are repeat_kv'd BEFORE they are
cached, so the cache, the tracking and the eviction are per QUERY head; the prompt is stored
whole; observation_counter t = 1, 2, ... counts decode steps). Both classes are ported below, line
for line, with two stated changes that kvbench makes too (docs/policies.md#lazyeviction):
  * the clocks `last` / `mri` are int64 tensors (the reference's are zeros_like(attn_weights), the
    model dtype: fp16 in its evaluation.py, which rounds steps above 2048), and the importance is
    computed in float64 with math.exp (libm, as the C++ std::exp);
  * torch.topk's unspecified tie order is replaced by a total order: higher score first, then the
    NEWER token (larger position) first.
The port also carries each cached row's position, gathered with the same indices, to read the
keep-sets back.

What it does. It runs transformers' Llama (f32, tests/fixtures/models/tiny-llama3: 2 layers, 4
query heads, 2 kv heads, so every kv head serves 2 query heads that evict independently) with
every attention forward replaced by the ported one, prefills a seeded prompt and feeds seeded
tokens one forward at a time (teacher forcing), and records, after every decode step, each
(layer, query head)'s positions, `last` and `mri` in position order, and the logits. Margin:
a hit flips only when an attention probability crosses alpha; the generator requires every
|a - alpha| > MARGIN, else it draws the next prompt. kvbench's test
(tests/policies/test_policy_lazyeviction.cpp) runs Engine::score under
`lazyeviction:buffer=W,alpha=A` at budget C and compares every step.
"""
import math
import os
import sys

import goldens_env

goldens_env.ensure(["torch", "transformers"])

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from transformers.models.llama import modeling_llama as ml  # noqa: E402

OUT = goldens_env.policy_goldens("lazyeviction")
MODEL = "models/tiny-llama3"
REF = "WeianMao/triattention@e7a0eb18d056659570035708cda25f6bb6cda333:LazyEviction/model/{kv_utils,temp_cacheobs}.py"
PROMPT_LEN = 24
N_FORCED = 32
C, W = 20, 4  # max_kv_capacity, decoding_recent_size (= obs_size)
ALPHAS = (0.04, 0.05, 0.03, 0.045, 0.035)
MARGIN = 1e-6
torch.set_grad_enabled(False)
transformers.logging.set_verbosity_error()


class TempCache:
    """temp_cacheobs.py TempCache, with int64 clocks."""

    def __init__(self, alpha):
        self.alpha = alpha
        self.layer_max_period = {}
        self.layer_last_recurrent = {}
        self.min_margin = math.inf

    def record_recurrence(self, weights, layer_idx, current_decoding_step):
        bsz, num_heads, _, k_len = weights.shape
        if layer_idx not in self.layer_last_recurrent:
            self.layer_last_recurrent[layer_idx] = torch.zeros((bsz, num_heads, k_len), dtype=torch.int64)
            self.layer_max_period[layer_idx] = torch.zeros((bsz, num_heads, k_len), dtype=torch.int64)
        else:
            padding = (current_decoding_step - 1) * torch.ones((bsz, num_heads, 1), dtype=torch.int64)
            padding_period = torch.zeros((bsz, num_heads, 1), dtype=torch.int64)
            self.layer_last_recurrent[layer_idx] = torch.cat([self.layer_last_recurrent[layer_idx], padding], dim=2)
            self.layer_max_period[layer_idx] = torch.cat([self.layer_max_period[layer_idx], padding_period], dim=2)
        old = self.layer_last_recurrent[layer_idx].clone()
        w = weights.squeeze(2)
        self.min_margin = min(self.min_margin, (w - self.alpha).abs().min().item())
        important_mask = w >= self.alpha
        self.layer_last_recurrent[layer_idx][important_mask] = current_decoding_step
        period = self.layer_last_recurrent[layer_idx] - old
        self.layer_max_period[layer_idx] = torch.maximum(self.layer_max_period[layer_idx], period)


def importance(delta, mri):
    """kv_utils.py's importance_scores for one token, in float64."""
    s = 0.0 if mri == 0 else 2 / (1 + math.exp(mri - 1))
    try:
        e = math.exp(1 + delta / (mri + 1e-5))
    except OverflowError:  # exp overflows to inf in C++ (and in torch): the term is 0
        return s
    return 2 / (1 + e) + s


def topk_newer_first(scores, pos, k):
    """Per head, the indices of the k largest scores, ties to the larger position (replaces torch.topk)."""
    out = []
    for h in range(len(scores)):
        order = sorted(range(len(scores[h])), key=lambda j: (-scores[h][j], -pos[h][j]))
        out.append(order[:k])
    return torch.tensor(out, dtype=torch.int64)


class WindowLazyKVCluster:
    """kv_utils.py Window_LAZYKVCluster.update_kv_in_decoding (batch 1), carrying positions."""

    def __init__(self, temp, decoding_recent_size, max_kv_capacity):
        self.temp, self.obs_size, self.max_kv_capacity = temp, decoding_recent_size, max_kv_capacity

    def update_kv_in_decoding(self, key_states, query_states, value_states, pos, layer_idx, obs_count):
        bsz, num_heads, k_len, head_dim = key_states.shape
        T = self.temp
        attn = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(head_dim)
        attn = torch.softmax(attn, dim=-1, dtype=torch.float32).to(query_states.dtype)
        T.record_recurrence(attn, layer_idx, obs_count)
        if k_len <= self.max_kv_capacity or obs_count % self.obs_size != 0:
            return key_states, value_states, pos, attn
        mp, lr = T.layer_max_period[layer_idx], T.layer_last_recurrent[layer_idx]
        scores = [[importance(obs_count - lr[0, h, j].item(), mp[0, h, j].item()) for j in range(k_len - self.obs_size)]
                  for h in range(num_heads)]
        top = topk_newer_first(scores, pos[0].tolist(), self.max_kv_capacity - self.obs_size)[None]  # [1, H, C-W]
        T.layer_max_period[layer_idx] = torch.cat([mp.gather(2, top), mp[:, :, -self.obs_size:]], dim=2)
        T.layer_last_recurrent[layer_idx] = torch.cat([lr.gather(2, top), lr[:, :, -self.obs_size:]], dim=2)
        idx = top.unsqueeze(-1).expand(-1, -1, -1, head_dim)
        key_states = torch.cat([key_states.gather(2, idx), key_states[:, :, -self.obs_size:]], dim=2)
        value_states = torch.cat([value_states.gather(2, idx), value_states[:, :, -self.obs_size:]], dim=2)
        pos = torch.cat([pos.gather(2, top), pos[:, :, -self.obs_size:]], dim=2)
        return key_states, value_states, pos, attn


def install(model, cluster):
    """Replaces every attention forward with llama_model.py's eager LazyEviction path (ported)."""
    caches = {}

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, **kw):
        bsz, q_len, _ = hidden_states.shape
        shape = (bsz, q_len, -1, self.head_dim)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        cos, sin = position_embeddings
        q, k = ml.apply_rotary_pos_emb(q, k, cos, sin)
        k, v = ml.repeat_kv(k, self.num_key_value_groups), ml.repeat_kv(v, self.num_key_value_groups)
        H = q.shape[1]
        st = caches.setdefault(self.layer_idx, {"t": 0})
        if q_len > 1:  # prefill: update_kv stores the prompt untouched; plain causal attention
            st.update(k=k, v=v, pos=torch.arange(q_len).expand(1, H, q_len).clone(), t=0)
            a = torch.matmul(q, k.transpose(2, 3)) * self.scaling
            a = a.masked_fill(torch.ones(q_len, q_len, dtype=torch.bool).triu(1), float("-inf"))
            out = torch.matmul(torch.softmax(a, dim=-1, dtype=torch.float32), v)
        else:
            st["t"] += 1
            new_pos = st["pos"].max() + 1 if st["t"] > 1 else st["pos"].shape[2]
            kk, vv = torch.cat([st["k"], k], 2), torch.cat([st["v"], v], 2)
            pp = torch.cat([st["pos"], torch.full((1, H, 1), int(new_pos))], 2)
            k2, v2, p2, attn = cluster.update_kv_in_decoding(kk, q, vv, pp, self.layer_idx, st["t"])
            out = torch.matmul(attn, vv)  # this step reads the pre-eviction cache
            st.update(k=k2, v=v2, pos=p2)
        out = out.transpose(1, 2).reshape(bsz, q_len, -1)
        return self.o_proj(out), None

    for layer in model.model.layers:
        layer.self_attn.forward = forward.__get__(layer.self_attn)
    return caches


def run(model, alpha, prompt, forced):
    temp = TempCache(alpha)
    cluster = WindowLazyKVCluster(temp, W, C)
    caches = install(model, cluster)
    cfg = model.config
    logits, steps = [], []
    past = transformers.DynamicCache(config=cfg)  # only position bookkeeping; our caches hold K/V
    out = model(torch.tensor([prompt]), use_cache=False)
    logits.append(out.logits[0, -1].tolist())
    for i, tok in enumerate(forced):
        position = torch.tensor([[len(prompt) + i]])
        out = model(torch.tensor([[tok]]), position_ids=position, use_cache=False)
        logits.append(out.logits[0, -1].tolist())
        step = []
        for layer in range(cfg.num_hidden_layers):
            pos = caches[layer]["pos"][0]
            heads = []
            for h in range(pos.shape[0]):
                order = torch.argsort(pos[h])
                heads.append([pos[h][order].tolist(), temp.layer_last_recurrent[layer][0, h][order].tolist(),
                              temp.layer_max_period[layer][0, h][order].tolist()])
            step.append(heads)
        steps.append(step)
    del past
    return logits, steps, temp.min_margin


def main():
    model = AutoModelForCausalLM.from_pretrained(goldens_env.fixture(MODEL), dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(45)
    for attempt in range(8):
        prompt = [1] + torch.randint(3, vocab, (PROMPT_LEN - 1,), generator=gen).tolist()
        forced = torch.randint(3, vocab, (N_FORCED,), generator=gen).tolist()
        for alpha in ALPHAS:
            logits, steps, margin = run(model, alpha, prompt, forced)
            mris = [m for s in steps for l in s for h in l for m in h[2]]
            evicted = any(len(h[0]) < PROMPT_LEN + i + 1 for i, s in enumerate(steps) for l in s for h in l)
            varied = len(set(mris)) >= 4 and mris.count(0) > 0
            differ = any(l[0][0] != l[1][0] for s in steps for l in s)  # query heads of a group evict apart
            if margin > MARGIN and evicted and varied and differ:
                print(f"attempt {attempt}, alpha {alpha}, margin {margin:.3g}, mri values {sorted(set(mris))}")
                goldens_env.write_json(
                    OUT, generator="tools/gen_lazyeviction_goldens.py", reference=REF, torch=torch.__version__,
                    transformers=transformers.__version__, model=MODEL, spec=f"lazyeviction:buffer={W},alpha={alpha}",
                    budget=C, tie_rule="higher score first, then the newer token", margin=MARGIN, min_margin=margin,
                    prompt=prompt, forced=forced, logits=[[round(x, 6) for x in r] for r in logits], steps=steps)
                return
    sys.exit("no prompt with clear alpha margins")


if __name__ == "__main__":
    main()
