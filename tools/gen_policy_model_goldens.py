#!/usr/bin/env python3
"""Generate model-level keep-set goldens from kvpress (tests/fixtures/policies/policy_model_goldens.json).

How to run (from the repository root):

    python3 -m venv .venv-goldens
    .venv-goldens/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu
    .venv-goldens/bin/pip install transformers kvpress==0.5.5 cachetools
    .venv-goldens/bin/python tools/gen_policy_model_goldens.py

(Where only PyPI is reachable, `.venv-goldens/bin/pip install torch transformers kvpress==0.5.5
cachetools` works too: the script runs on the CPU.)

What it does. It loads two tiny random-weight models of tools/gen_engine_goldens.py
(tests/fixtures/models/tiny-llama3: 2 layers, 4 query heads, 2 kv heads, head_dim 24, llama3 RoPE;
tests/fixtures/models/tiny-qwen3: the same shape with head_dim 32, q/k RMSNorm and yarn RoPE; no
new weights are written) with transformers (f32, eager attention), and runs one forward pass of
a 200-token prompt under each kvpress 0.5.5 press — kvpress's own
context manager `with press(model)`, which hooks every attention layer and compresses the
DynamicCache once, at the end of the prefill. The kept positions of every (layer, kv head) are
read back by matching each compressed key row to the uncompressed keys of that layer
(keys.gather copies rows, so each kept row equals exactly one original row).

Each case records the kvbench spec and budget that mirror the press (docs/policies.md):
  * StreamingLLMPress(n_sink=4)      -> streamingllm:sinks=4,decode=false at budget n_kept
  * TOVAPress                        -> tova:decode=false at budget n_kept (window 1: the last token)
  * KnormPress                       -> knorm:decode=false at budget n_kept
  * ExpectedAttentionPress           -> expected_attention:decode=false at budget n_kept (4 sinks,
                                        512 future positions; the query statistics see the whole
                                        prompt, kvbench accumulates them chunk by chunk)
  * AdaKVPress(SnapKVPress(w, 5))    -> adakv:window=w,kernel=5,pool=avg,gqa=mean,decode=false at
                                        budget n_kept (the AVERAGE per head: heads differ)
  * DuoAttentionPress(r) with the pattern of tests/fixtures/policies/duo_pattern_tiny (written here:
    seeded gate values for 2 layers x 2 kv heads, sink_size 8, recent_size 64)
                                     -> duoattention:pattern=<that dir>,sparsity=r,decode=false
  * KeyDiffPress                     -> keydiff:window=0,decode=false at budget n_kept
  * SnapKVPress(window_size, kernel_size=5)
                                     -> snapkv:window=w,kernel=5,pool=avg,gqa=mean,decode=false
                                        at budget n_kept (window counted inside the budget)
  * PyramidKVPress(window_size, kernel_size=5, beta)
                                     -> pyramidkv:...,beta=b,layer_budget=kvpress,align=1,decode=false at
                                        budget L * (1 - ratio); layer totals in `layer_total`
AdaKVPress and DuoAttentionPress only mask keys (`module.masked_key_indices`, read back here) and
refuse eager attention, so they run on an sdpa instance of the same model; kvpress's
duo_attention_press imports `datasets` (used only by its on-the-fly scoring) and `requests`, which
are stubbed when absent, and the pattern is passed by replacing the press's loader.
with n_kept = int(L * (1 - ratio)) (kvpress.utils.compute_n_kept); the ratios are chosen so that
L * (1 - ratio) is exact. kvbench's test (tests/policies/test_policy_model_goldens.cpp) runs the
prompt with prefill chunk 64 and with the whole prompt and compares every (layer, kv head).

Ties. The press scores are captured too. Each case takes the first prompt of a seeded sequence
(BOS + 199 pseudo-random ids; recorded in the case as `prompt`) on which, for every layer and kv
head, the last kept and the first evicted score differ by more than 1e-4 relative (window tokens
excluded; AdaKV: over the layer's competing tokens), so that float summation order cannot flip
the selection.
"""
import json
import math
import os
import sys
import types

import numpy as np

import torch
import transformers
from transformers import AutoModelForCausalLM, DynamicCache

import goldens_env

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MODELS = ["models/tiny-llama3", "models/tiny-qwen3"]
OUT = os.path.join(ROOT, "tests", "fixtures", "policies", "policy_model_goldens.json")
PROMPT_LEN = 200
MARGIN = 1e-4
torch.set_grad_enabled(False)


DUO_DIR = os.path.join(ROOT, "tests", "fixtures", "policies", "duo_pattern_tiny")
DUO_SINK, DUO_RECENT = 8, 64


def load_kvpress():
    """kvpress's presses, imported as tools/gen_policy_goldens.py does (without kvpress/__init__.py)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gen_policy_goldens import load_kvpress as load
    kp = load()
    kp = {(k + "Press" if k != "compute_n_kept" else k): v for k, v in kp.items()}
    for mod in ("datasets", "requests"):  # imported at module level by duo_attention_press, unused here
        try:
            __import__(mod)
        except ImportError:
            stub = types.ModuleType(mod)
            stub.load_dataset = stub.get = None
            sys.modules[mod] = stub
    from kvpress.presses.adakv_press import AdaKVPress
    from kvpress.presses.duo_attention_press import DuoAttentionPress
    from kvpress.presses.expected_attention_press import ExpectedAttentionPress
    from kvpress.presses.knorm_press import KnormPress
    from kvpress.presses.tova_press import TOVAPress
    kp.update(AdaKVPress=AdaKVPress, DuoAttentionPress=DuoAttentionPress,
              ExpectedAttentionPress=ExpectedAttentionPress, KnormPress=KnormPress, TOVAPress=TOVAPress)
    return kp


def write_duo_pattern(layers, heads, seed=7):
    """The given DuoAttention pattern (released layout: full_attention_heads.tsv + config.json)."""
    gen = torch.Generator().manual_seed(seed)
    gates = torch.rand(layers, heads, generator=gen, dtype=torch.float64)
    os.makedirs(DUO_DIR, exist_ok=True)
    with open(os.path.join(DUO_DIR, "full_attention_heads.tsv"), "w") as f:
        for row in gates.tolist():
            f.write("\t".join("%.6f" % v for v in row) + "\n")
    with open(os.path.join(DUO_DIR, "config.json"), "w") as f:
        json.dump(dict(sink_size=DUO_SINK, recent_size=DUO_RECENT), f)
    return np.loadtxt(os.path.join(DUO_DIR, "full_attention_heads.tsv"), dtype=float, delimiter="\t")


def cases_for(kp, L):
    """(name, press, kvbench spec, kvbench budget, protected window) for every golden case."""
    out = []
    for ratio in (0.5, 0.75):
        n = kp["compute_n_kept"](L, ratio)
        out.append((f"streamingllm_r{ratio}", kp["StreamingLLMPress"](compression_ratio=ratio, n_sink=4),
                    "streamingllm:sinks=4,decode=false", n, None))
    for ratio in (0.5, 0.75):
        n = kp["compute_n_kept"](L, ratio)
        out.append((f"keydiff_r{ratio}", kp["KeyDiffPress"](compression_ratio=ratio),
                    "keydiff:window=0,decode=false", n, 0))
    for ratio, w in ((0.5, 64), (0.25, 64), (0.75, 16)):  # kvpress's default window 64, and 16
        n = kp["compute_n_kept"](L, ratio)
        out.append((f"snapkv_r{ratio}_w{w}", kp["SnapKVPress"](compression_ratio=ratio, window_size=w, kernel_size=5),
                    f"snapkv:window={w},kernel=5,pool=avg,gqa=mean,decode=false", n, w))
    # kvpress's defaults (window 64, beta 20: at L = 200 the pyramid falls back to the uniform
    # budget) and a setting where the layer budgets differ (window 8, beta 2).
    for ratio, w, beta in ((0.5, 64, 20), (0.5, 8, 2), (0.75, 8, 2)):
        B = int(L * (1 - ratio))
        out.append((f"pyramidkv_r{ratio}_w{w}_beta{beta}",
                    kp["PyramidKVPress"](compression_ratio=ratio, window_size=w, kernel_size=5, beta=beta),
                    f"pyramidkv:window={w},kernel=5,pool=avg,gqa=mean,beta={beta},layer_budget=kvpress,align=1,decode=false",
                    B, w))
    for ratio in (0.5, 0.75):
        n = kp["compute_n_kept"](L, ratio)
        out.append((f"tova_r{ratio}", kp["TOVAPress"](compression_ratio=ratio), "tova:decode=false", n, 1))
    for ratio in (0.5, 0.75):
        n = kp["compute_n_kept"](L, ratio)
        out.append((f"knorm_r{ratio}", kp["KnormPress"](compression_ratio=ratio), "knorm:decode=false", n, 0))
    for ratio in (0.5, 0.75):
        n = kp["compute_n_kept"](L, ratio)
        out.append((f"expected_attention_r{ratio}", kp["ExpectedAttentionPress"](compression_ratio=ratio),
                    "expected_attention:decode=false", n, 0))
    for ratio, w in ((0.5, 16), (0.75, 16), (0.5, 64)):
        n = kp["compute_n_kept"](L, ratio)
        out.append((f"adakv_r{ratio}_w{w}",
                    kp["AdaKVPress"](kp["SnapKVPress"](compression_ratio=ratio, window_size=w, kernel_size=5)),
                    f"adakv:window={w},kernel=5,pool=avg,gqa=mean,decode=false", n, ("adakv", w)))
    for ratio in (0.25, 0.5, 0.75):
        out.append((f"duoattention_s{ratio}", kp["DuoAttentionPress"](head_compression_ratio=ratio),
                    f"duoattention:pattern={{duo_pattern}},sparsity={ratio},decode=false", 0, "mask"))
    return out


def run_masked(model, press, ids, duo_gates):
    """One prefill under a masking press (AdaKV, DuoAttention) on an sdpa model: kept = not masked."""
    scores = {}
    inner = getattr(press, "press", None)
    if inner is not None:
        inner_score = inner.score

        def score(module, hidden_states, keys, values, attentions, kwargs):
            s = inner_score(module, hidden_states, keys, values, attentions, kwargs)
            scores[module.layer_idx] = s.clone()
            return s
        object.__setattr__(inner, "score", score)
    else:
        press.load_attention_pattern = lambda model: (DUO_SINK, DUO_RECENT, duo_gates)
    layers = model.model.layers
    for layer in layers:
        layer.self_attn.masked_key_indices = None
    with press(model):
        model(input_ids=ids, past_key_values=DynamicCache(), use_cache=True)
    L = ids.shape[1]
    keep = []
    for layer in layers:
        heads = model.config.num_key_value_heads
        masked = [set() for _ in range(heads)]
        mk = layer.self_attn.masked_key_indices
        if mk is not None:
            for b, h, i in zip(*(t.tolist() for t in mk)):
                assert b == 0
                masked[h].add(i)
        keep.append([[i for i in range(L) if i not in masked[h]] for h in range(heads)])
        layer.self_attn.masked_key_indices = None
    return keep, scores


def adakv_margin_ok(press, scores, keep, window, L):
    """AdaKV: per layer, the competing tokens (not window, not safeguarded) kept vs pruned differ clearly."""
    n_kept = press.press.compression_ratio
    n_kept = int(L * (1 - n_kept))
    n_safe = max(1, int(n_kept * press.alpha_safeguard))
    for layer, s in scores.items():
        s = s[0].double()
        kept_sc, ev_sc = [], []
        for h in range(s.shape[0]):
            safe = set(s[h].topk(n_safe).indices.tolist())
            for i in range(L - window):
                if i in safe:
                    continue
                (kept_sc if i in set(keep[layer][h]) else ev_sc).append(s[h, i].item())
        if kept_sc and ev_sc:
            a, b = min(kept_sc), max(ev_sc)
            if not (a - b > MARGIN * max(abs(a), abs(b), 1e-12)):
                return False, (layer, a, b)
    return True, None


def run_press(model, press, ids):
    """One prefill under the press; returns ([layer][head] kept positions, [layer] scores, [layer] n_kept)."""
    orig_keys, scores = {}, {}
    inner_compress, inner_score = press.compress, press.score

    def compress(module, hidden_states, keys, values, attentions, kwargs):
        orig_keys[module.layer_idx] = keys.clone()
        return inner_compress(module, hidden_states, keys, values, attentions, kwargs)

    def score(module, hidden_states, keys, values, attentions, kwargs):
        s = inner_score(module, hidden_states, keys, values, attentions, kwargs)
        scores[module.layer_idx] = s.clone()
        return s

    object.__setattr__(press, "compress", compress)
    object.__setattr__(press, "score", score)
    cache = DynamicCache()
    with press(model):
        model(input_ids=ids, past_key_values=cache, use_cache=True)
    keep = []
    for layer in range(model.config.num_hidden_layers):
        k0 = orig_keys[layer][0]  # [Hkv, L, D]
        k1 = cache.layers[layer].keys[0]  # [Hkv, n, D]
        per_head = []
        for h in range(k0.shape[0]):
            eq = (k1[h][:, None, :] == k0[h][None, :, :]).all(-1)  # [n, L]
            assert bool((eq.sum(-1) == 1).all()), "a kept key row does not match exactly one original row"
            per_head.append(sorted(int(i) for i in eq.float().argmax(-1).tolist()))
        keep.append(per_head)
    return keep, scores


def margin_ok(scores, keep, window, L):
    """Every head: the smallest kept and the largest evicted score (window excluded) differ clearly."""
    for layer, s in scores.items():
        for h in range(s.shape[1]):
            row = s[0, h, : L - window].double()
            kept = [i for i in keep[layer][h] if i < L - window]
            ev = sorted(set(range(L - window)) - set(kept))
            if not kept or not ev:
                continue
            a, b = row[kept].min().item(), row[ev].max().item()
            if not (a - b > MARGIN * max(abs(a), abs(b), 1e-12)):
                return False, (layer, h, a, b)
    return True, None


def golden_for(kp, model_dir, seed):
    """Per case, the first prompt of the model's seeded sequence on which the case has clear margins."""
    path = os.path.join(ROOT, "tests", "fixtures", model_dir)
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", dtype=torch.float32)
    model.eval()
    sdpa = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa", dtype=torch.float32)
    sdpa.eval()
    duo_gates = write_duo_pattern(model.config.num_hidden_layers, model.config.num_key_value_heads)
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(seed)
    prompts = []

    def prompt_at(i):
        while len(prompts) <= i:
            prompts.append([1] + torch.randint(3, vocab, (PROMPT_LEN - 1,), generator=gen).tolist())
        return prompts[i]

    cases = []
    for name, press, spec, budget, window in cases_for(kp, PROMPT_LEN):
        for attempt in range(400):
            prompt = prompt_at(attempt)
            ids = torch.tensor([prompt])
            w = window
            if isinstance(w, tuple) or w == "mask":
                keep, scores = run_masked(sdpa, press, ids, duo_gates)
                good, where = (adakv_margin_ok(press, scores, keep, w[1], PROMPT_LEN) if isinstance(w, tuple)
                               else (True, None))
            else:
                keep, scores = run_press(model, press, ids)
                good, where = margin_ok(scores, keep, w, PROMPT_LEN) if w is not None else (True, None)
            if good:
                break
            print(f"{model_dir} prompt {attempt}: {name} margin too small at {where}")
        else:
            raise RuntimeError(f"{model_dir}: {name}: no prompt with clear margins")
        c = dict(name=name, press=type(press).__name__, spec=spec, budget=budget, prompt_index=attempt,
                 prompt=prompt, layer_total=[len(k[0]) for k in keep], keep=keep)
        c["kvpress_args"] = {k: v for k, v in press.__dict__.items()
                             if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if hasattr(press, "press"):
            c["kvpress_args"].update({"press." + k: v for k, v in press.press.__dict__.items()
                                      if isinstance(v, (int, float)) and not isinstance(v, bool)})
        cases.append(c)
        print(f"  {model_dir} {name}: prompt {attempt}, budget {budget}, head sizes "
              f"{[[len(h) for h in l] for l in keep]}")
    return dict(model=model_dir, cases=cases)


def main():
    kp = load_kvpress()
    models = [golden_for(kp, m, 2024 + i) for i, m in enumerate(MODELS)]
    goldens_env.write_json(OUT, generator="tools/gen_policy_model_goldens.py", kvpress="0.5.5",
                           torch=torch.__version__, transformers=transformers.__version__, models=models)


if __name__ == "__main__":
    main()
