#!/usr/bin/env python3
"""Generate keep-set goldens for the KV policies (tests/fixtures/policies/policy_goldens.json).

How to run (from the repository root):

    python3 -m venv .venv-goldens
    .venv-goldens/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu
    .venv-goldens/bin/pip install transformers kvpress==0.5.5 cachetools
    .venv-goldens/bin/python tools/gen_policy_goldens.py

(An existing venv with torch + transformers also works: `pip install --no-deps kvpress==0.5.5
cachetools` into it. The script loads only the kvpress press modules it needs, so kvpress's
optional dependencies — datasets, pandas, peft, accelerate, fire — are not required.)

What it writes. Each case holds hand-built keys [Hkv, L, D] and post-RoPE window queries
[Hq, w, D] (the tokens have positions 0..L-1; window query r has position L - w + r), and the
expected keep-set of every kv head (sorted indices). The expected sets come from:
  * kvpress (NVIDIA/kvpress 0.5.5 on PyPI): StreamingLLMPress, SnapKVPress, KeyDiffPress and
    PyramidKVPress scores + torch.topk, exactly as ScorerPress.compress / PyramidKVPress.compress
    keep tokens. SnapKV queries are fed through kvpress's own compute_window_attention by an
    attention module whose q_proj is the identity and whose RoPE is the identity (cos = 1,
    sin = 0), so the queries it computes are the ones in the file.
  * torch re-statements of the seed papers' formulas for policies kvpress does not implement
    (R-KV, G-KV's first compression, TRIM-KV), written from the reference notes
    (docs/policies.md: trimkv, rkv, gkv), not from the
    C++ code.
  * float64 re-statements of MorphKV (arXiv 2503.00979 §3: recent-window attention fused by sum or
    max) and CAKE (arXiv 2503.12491 §3.2-3.3: layer preference entropy^(1/tau1) * shift^(1/tau2),
    budgets B_l = P_l / sum P * total adjusted as the reference's adjust_budgets, indicator
    mean + gamma * var over the window, avg-pooled), written from the papers (docs/policies.md).
    CAKE's cases hold several layers (`layers`: keys and queries per layer) and the expected
    per-layer selected budgets.
Cases whose kept/evicted score margin is below 1e-4 (relative) are re-drawn so that float
summation order cannot flip a tie.
"""
import json
import math
import os

import torch
import torch.nn.functional as F
from torch import nn

import goldens_env

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "policies",
                   "policy_goldens.json")


def load_kvpress():
    """Import kvpress.presses.* without running kvpress/__init__.py (which pulls optional deps)."""
    goldens_env.kvpress_without_init(install="pip install --no-deps kvpress==0.5.5 cachetools")
    from kvpress.presses.keydiff_press import KeyDiffPress
    from kvpress.presses.pyramidkv_press import PyramidKVPress
    from kvpress.presses.snapkv_press import SnapKVPress
    from kvpress.presses.streaming_llm_press import StreamingLLMPress
    from kvpress.utils import compute_n_kept
    return dict(KeyDiff=KeyDiffPress, PyramidKV=PyramidKVPress, SnapKV=SnapKVPress,
                StreamingLLM=StreamingLLMPress, compute_n_kept=compute_n_kept)


class FakeConfig:
    def __init__(self, hq, hkv, layers):
        self.num_attention_heads = hq
        self.num_key_value_heads = hkv
        self.num_hidden_layers = layers


class IdentityAttention(nn.Module):
    """Llama-like attention module for kvpress: q_proj = identity, so hidden states ARE the queries."""

    def __init__(self, hq, hkv, d, layers, layer_idx):
        super().__init__()
        self.config = FakeConfig(hq, hkv, layers)
        self.head_dim = d
        self.layer_idx = layer_idx
        self.q_proj = nn.Linear(hq * d, hq * d, bias=False)
        with torch.no_grad():
            self.q_proj.weight.copy_(torch.eye(hq * d))


def margin_ok(scores, n_kept):
    """True when the n_kept-th and (n_kept+1)-th largest scores of every head differ clearly."""
    s = scores.reshape(-1, scores.shape[-1])
    for row in s:
        v, _ = torch.sort(row.double(), descending=True)
        if n_kept < len(v) and n_kept > 0:
            a, b = v[n_kept - 1].item(), v[n_kept].item()
            if not math.isfinite(a) or abs(a - b) <= 1e-4 * max(abs(a), abs(b), 1e-6):
                return False
    return True


def keep_from_scores(scores, n_kept):
    idx = scores.topk(n_kept, dim=-1).indices  # [1, Hkv, n_kept]
    return [sorted(int(i) for i in row) for row in idx[0]]


def f32(x):
    """Shortest decimal that round-trips the float32 value x (keeps the file small)."""
    return float("%.9g" % x)


def flat(t):
    return [f32(x) for x in t.reshape(-1).tolist()]


def make_case(name, spec, budget, hq, hkv, d, L, w, keys, queries, keep, layers=1, layer=0, extra=None):
    c = dict(name=name, spec=spec, budget=budget, num_q_heads=hq, num_kv_heads=hkv, head_dim=d,
             length=L, window_queries=w, num_layers=layers, layer=layer,
             keys=flat(keys), queries=flat(queries), keep=keep)
    if extra:
        c.update(extra)
    return c


def rand_case(gen, hq, hkv, d, L, w):
    keys = torch.randn(1, hkv, L, d, generator=gen)
    queries = torch.randn(1, hq, w, d, generator=gen) * 1.5
    return keys, queries


def kvpress_window_scores(kp, press, keys, queries, L, w):
    hq, d = queries.shape[1], queries.shape[3]
    hidden = torch.zeros(1, L, hq * d)
    hidden[0, L - w:] = queries[0].permute(1, 0, 2).reshape(w, hq * d)
    cos = torch.ones(1, L, d)
    sin = torch.zeros(1, L, d)
    module = IdentityAttention(hq, keys.shape[1], d, 1, 0)
    return module, hidden, dict(position_embeddings=(cos, sin))


def kvpress_margin_check(kp, press, L, w, n_kept):
    """A draw() check: the kvpress press's scores of (keys, queries), or None when the n_kept - w
    best older tokens of a head are not separated by a clear margin (margin_ok)."""
    def chk(keys, queries):
        module, hidden, kw = kvpress_window_scores(kp, press, keys, queries, L, w)
        sc = press.score(module, hidden, keys, keys, None, kw)
        return sc if margin_ok(sc[..., : L - w], n_kept - w) else None
    return chk


def rkv_reference(keys, queries, budget, w, lam=0.1, kernel=7, thr=0.5):
    """R-KV per docs/policies.md, `rkv` (R-KV §3, steps 1-4), in float64."""
    keys = keys[0].double()
    queries = queries[0].double()
    hkv, L, d = keys.shape
    g = queries.shape[0] // hkv
    keep = []
    scores_all = []
    for h in range(hkv):
        k = keys[h]
        q = queries[h * g:(h + 1) * g]  # [g, w, d]
        logits = (q @ k[: L - w].T) / math.sqrt(d)  # [g, w, L-w]
        a = torch.softmax(logits.max(dim=0).values, dim=-1)  # [w, L-w]
        imp = a.mean(dim=0)
        imp = F.max_pool1d(imp[None, None], kernel_size=kernel, stride=1, padding=kernel // 2)[0, 0]
        kn = k / (k.norm(dim=-1, keepdim=True) + 1e-8)
        s = kn @ kn.T
        s.fill_diagonal_(0)
        for i in range(L):
            above = (s[i] > thr).nonzero()
            j = int(above[-1]) if len(above) else 0
            s[i, j] = 0
        red = torch.softmax(s.mean(dim=0), dim=-1)[: L - w]
        sc = lam * imp - (1 - lam) * red
        scores_all.append(sc)
        top = sc.topk(budget - w).indices.tolist()
        keep.append(sorted(top) + list(range(L - w, L)))
    return keep, torch.stack(scores_all)


def gkv_reference(keys, queries, budget, w, lam=0.5, thr=0.5):
    """G-KV's first compression per docs/policies.md, `gkv` (steps 1-6) (no history yet), float64."""
    keys = keys[0].double()
    queries = queries[0].double()
    hkv, L, d = keys.shape
    g = queries.shape[0] // hkv
    keep, scores_all, glob = [], [], []
    for h in range(hkv):
        k = keys[h]
        q = queries[h * g:(h + 1) * g]
        logits = (q @ k.T) / math.sqrt(d)  # [g, w, L]
        qpos = torch.arange(L - w, L)[:, None]
        mask = torch.arange(L)[None, :] > qpos
        logits = logits.masked_fill(mask[None], float("-inf"))
        p = torch.softmax(logits, dim=-1).max(dim=0).values.mean(dim=0)[: L - w]
        p = p / p.max()
        kn = k / (k.norm(dim=-1, keepdim=True) + 1e-8)
        c = kn @ kn.T
        c.fill_diagonal_(0)
        for n in range(L):  # exclude each key's most recent other key above the threshold
            above = (c[:, n] > thr).nonzero()
            if len(above):
                c[int(above[-1]), n] = 0
        cm = c.sum(dim=1) / L
        r = torch.exp(cm[: L - w] - cm[: L - w].max())
        sc = lam * p - (1 - lam) * r
        scores_all.append(sc)
        glob.append(p)
        top = sc.topk(budget - w).indices.tolist()
        keep.append(sorted(top) + list(range(L - w, L)))
    return keep, torch.stack(scores_all), glob


def trimkv_reference(x, w1, b1, w2, b, positions, seen, budget):
    """TRIM-KV gate + score per docs/policies.md, `trimkv` (TRIM-KV §3), float64."""
    x, w1, b1, w2, b = (t.double() for t in (x, w1, b1, w2, b))
    log_beta = F.logsigmoid(F.silu(x @ w1.T + b1) @ w2.T + b)  # [L, Hkv]
    score = (seen + 1 - positions.double())[:, None] * log_beta
    keep = [sorted(score[:, h].topk(budget).indices.tolist()) for h in range(score.shape[1])]
    return keep, score.T, log_beta


def causal_probs(k, q, L, w):
    """[g, w, L] softmax of q k^T / sqrt(d), query r at position L - w + r (causal), float64."""
    d = k.shape[-1]
    logits = (q @ k.T) / math.sqrt(d)
    qpos = torch.arange(L - w, L)[:, None]
    mask = torch.arange(L)[None, :] > qpos
    return torch.softmax(logits.masked_fill(mask[None], float("-inf")), dim=-1)


def morphkv_reference(keys, queries, budget, w, fusion, gqa):
    """MorphKV (arXiv 2503.00979 §3): window queries' attention fused (sum/max), GQA max/mean, float64."""
    keys, queries = keys[0].double(), queries[0].double()
    hkv, L, _ = keys.shape
    g = queries.shape[0] // hkv
    keep, scores_all = [], []
    for h in range(hkv):
        p = causal_probs(keys[h], queries[h * g:(h + 1) * g], L, w)  # [g, w, L]
        f = p.sum(dim=1) if fusion == "sum" else p.max(dim=1).values  # [g, L]
        sc = (f.max(dim=0).values if gqa == "max" else f.mean(dim=0))[: L - w]
        scores_all.append(sc)
        keep.append(sorted(sc.topk(budget - w).indices.tolist()) + list(range(L - w, L)))
    return keep, torch.stack(scores_all)


def cake_adjust_budgets(budget_list, total_budget, seq_len):
    """CAKE's budget adjustment (antgroup/cakekv cake/utils.py adjust_budgets), restated in numpy."""
    import numpy as np
    b = np.array(budget_list, dtype=int)
    excess = np.maximum(b - seq_len, 0)
    b = np.minimum(b, seq_len)
    tot_ex = int(excess.sum())
    if tot_ex > 0:
        valid = b < seq_len
        nv = int(valid.sum())
        if nv > 0:
            b[valid] += tot_ex // nv
            b[np.where(valid)[0][: tot_ex % nv]] += 1
    diff = int(total_budget - b.sum())
    if diff != 0:
        valid = b < seq_len if diff > 0 else b > 1
        nv = int(valid.sum())
        if nv > 0:
            step, rem = abs(diff) // nv, abs(diff) % nv
            sign = 1 if diff > 0 else -1
            b[valid] += sign * step
            b[np.where(valid)[0][:rem]] += sign
    return [int(v) for v in b]


def cake_reference(layers, budget, w, tau1=1.6, tau2=0.6, gamma=200.0, kernel=5):
    """CAKE (arXiv 2503.12491 §3.2-3.3) one allocation + eviction over all layers, float64.

    layers: list of (keys [1, Hkv, L, D], queries [1, Hq, w, D]). Returns keep [layer][head],
    the per-layer selected budgets, the indicator scores [layer] [Hkv, L - w] and the raw budgets."""
    prefs, inds = [], []
    for keys, queries in layers:
        k, q = keys[0].double(), queries[0].double()
        hkv, L, _ = k.shape
        g = q.shape[0] // hkv
        probs = torch.cat([causal_probs(k[h], q[h * g:(h + 1) * g], L, w) for h in range(hkv)])  # [Hq, w, L]
        old = probs[..., : L - w]
        entropy = -(old * torch.log(old + 1e-10)).sum()
        shift = old.var(dim=1, unbiased=True).sum()
        prefs.append((entropy ** (1 / tau1) * shift ** (1 / tau2)).item())
        ind = probs.mean(dim=1) + gamma * probs.var(dim=1, unbiased=True)  # [Hq, L]
        ind = F.avg_pool1d(ind[:, None, : L - w], kernel_size=kernel, padding=kernel // 2, stride=1)[:, 0]
        inds.append(ind.view(hkv, g, -1).mean(dim=1))
    n = len(layers)
    L = layers[0][0].shape[2]
    total = (budget - w) * n
    raw = [p / sum(prefs) * total for p in prefs]
    sel = cake_adjust_budgets(raw, total, L - w)
    keep = []
    for l, ind in enumerate(inds):
        keep.append([sorted(ind[h].topk(min(sel[l], L - w)).indices.tolist()) + list(range(L - w, L))
                     for h in range(ind.shape[0])])
    return keep, sel, inds, raw


def main():
    kp = load_kvpress()
    gen = torch.Generator().manual_seed(1234)
    cases = []

    def draw(hq, hkv, d, L, w, check):
        for _ in range(100):
            keys, queries = rand_case(gen, hq, hkv, d, L, w)
            res = check(keys, queries)
            if res is not None:
                return keys, queries, res
        raise RuntimeError("could not draw a case with clear margins")

    # StreamingLLM (kvpress): ratio 0.5 of L = 40 -> keep 20 = 4 sinks + 16 recent.
    for (L, ratio) in [(40, 0.5), (33, 0.7)]:
        hq, hkv, d, w = 4, 2, 8, 1
        keys, queries = rand_case(gen, hq, hkv, d, L, w)
        press = kp["StreamingLLM"](compression_ratio=ratio, n_sink=4)
        sc = press.score(None, None, keys, keys, None, {})
        n_kept = kp["compute_n_kept"](L, ratio)
        cases.append(make_case(f"streamingllm_kvpress_L{L}", "streamingllm:buffer=1", n_kept, hq, hkv, d, L, w,
                               keys, queries, keep_from_scores(sc, n_kept)))

    # KeyDiff (kvpress): no window, no sinks.
    for (L, ratio, hkv) in [(48, 0.5, 2), (37, 0.25, 3)]:
        hq, d, w = hkv * 2, 16, 1
        press = kp["KeyDiff"](compression_ratio=ratio)
        n_kept = kp["compute_n_kept"](L, ratio)

        def chk(keys, queries):
            sc = press.score(None, None, keys, keys, None, {})
            return sc if margin_ok(sc, n_kept) else None
        keys, queries, sc = draw(hq, hkv, d, L, w, chk)
        cases.append(make_case(f"keydiff_kvpress_L{L}", "keydiff:window=0,buffer=1", n_kept, hq, hkv, d, L, w,
                               keys, queries, keep_from_scores(sc, n_kept)))

    # SnapKV (kvpress): per-head softmax (causal in the window), mean over window, avg-pool 5,
    # mean over the GQA group, window kept.
    for (L, ratio, hq, hkv, w) in [(40, 0.5, 4, 2, 6), (57, 0.6, 6, 2, 8), (30, 0.3, 2, 2, 4)]:
        d = 16
        n_kept = kp["compute_n_kept"](L, ratio)
        press = kp["SnapKV"](compression_ratio=ratio, window_size=w, kernel_size=5)
        keys, queries, sc = draw(hq, hkv, d, L, w, kvpress_margin_check(kp, press, L, w, n_kept))
        cases.append(make_case(f"snapkv_kvpress_L{L}_w{w}",
                               f"snapkv:window={w},kernel=5,pool=avg,gqa=mean,buffer=1", n_kept, hq, hkv, d, L, w,
                               keys, queries, keep_from_scores(sc, n_kept)))

    # PyramidKV (kvpress): layer budgets from get_layer_budget, SnapKV scores.
    L, ratio, hq, hkv, w, layers, d = 60, 0.5, 4, 2, 6, 4, 16
    kept_mean = int(round(L * (1 - ratio)))
    for layer in range(layers):
        press = kp["PyramidKV"](compression_ratio=ratio, window_size=w, kernel_size=5, beta=20)
        module_probe = IdentityAttention(hq, hkv, d, layers, layer)
        n_kept = press.get_layer_budget(module_probe, L)
        keys, queries, sc = draw(hq, hkv, d, L, w, kvpress_margin_check(kp, press, L, w, n_kept))
        cases.append(make_case(f"pyramidkv_kvpress_layer{layer}",
                               f"pyramidkv:window={w},kernel=5,pool=avg,gqa=mean,layer_budget=kvpress,align=1,buffer=1",
                               kept_mean, hq, hkv, d, L, w, keys, queries, keep_from_scores(sc, n_kept),
                               layers=layers, layer=layer, extra=dict(layer_total=n_kept)))

    # R-KV (torch re-statement of the reference formula).
    for (L, budget, hq, hkv, w) in [(48, 24, 4, 2, 8), (70, 40, 8, 2, 8)]:
        d = 16

        def chk(keys, queries):
            keep, sc = rkv_reference(keys, queries, budget, w)
            return keep if margin_ok(sc, budget - w) else None
        keys, queries, keep = draw(hq, hkv, d, L, w, chk)
        cases.append(make_case(f"rkv_reference_L{L}", "rkv:buffer=1", budget, hq, hkv, d, L, w,
                               keys, queries, keep))
    # Make near-duplicate keys so the redundancy term matters: copy some keys with small noise.
    L, budget, hq, hkv, w, d = 40, 20, 4, 2, 8, 16

    def chk_dup(keys, queries):
        keys = keys.clone()
        for h in range(hkv):
            for i in range(0, 24, 3):
                keys[0, h, i + 1] = keys[0, h, i] + 0.05 * torch.randn(d, generator=gen)
        keep, sc = rkv_reference(keys, queries, budget, w, lam=0.1)
        return (keys, keep) if margin_ok(sc, budget - w) else None
    _, queries, (keys, keep) = draw(hq, hkv, d, L, w, chk_dup)
    cases.append(make_case("rkv_reference_duplicates", "rkv:buffer=1", budget, hq, hkv, d, L, w,
                           keys, queries, keep))

    # G-KV first compression (torch re-statement).
    for (L, budget, hq, hkv, w) in [(48, 28, 4, 2, 16), (64, 30, 6, 3, 16)]:
        d = 16

        def chk(keys, queries):
            keep, sc, glob = gkv_reference(keys, queries, budget, w)
            return (keep, glob) if margin_ok(sc, budget - w) else None
        keys, queries, (keep, glob) = draw(hq, hkv, d, L, w, chk)
        cases.append(make_case(f"gkv_reference_L{L}", "gkv:buffer=1", budget, hq, hkv, d, L, w,
                               keys, queries, keep,
                               extra=dict(global_score=[[f32(v) for v in g.tolist()] for g in glob])))

    # TRIM-KV (torch re-statement): gates on layer inputs, score (seen + 1 - pos) * log beta.
    hidden_size, inter, hkv, L, budget = 12, 10, 2, 30, 11
    for seed_case in range(2):
        for _ in range(100):
            x = torch.randn(L, hidden_size, generator=gen)
            w1 = torch.randn(inter, hidden_size, generator=gen) * 0.5
            b1 = torch.randn(inter, generator=gen) * 0.1
            w2 = torch.randn(hkv, inter, generator=gen) * 0.5
            b = torch.tensor([3.0, 4.0]) + torch.randn(hkv, generator=gen)
            positions = torch.arange(L)
            keep, sc, log_beta = trimkv_reference(x, w1, b1, w2, b, positions, L, budget)
            if margin_ok(sc, budget):
                break
        cases.append(dict(name=f"trimkv_reference_{seed_case}", spec="trimkv:buffer=1", budget=budget,
                          num_kv_heads=hkv, hidden_size=hidden_size, length=L,
                          layer_input=flat(x), w1=flat(w1), b1=flat(b1), w2=flat(w2), b=flat(b),
                          w1_shape=[inter, hidden_size], w2_shape=[hkv, inter],
                          log_beta=[[f32(v) for v in log_beta[:, h].tolist()] for h in range(hkv)],
                          keep=keep))

    # MorphKV (float64 re-statement of the paper).
    for (L, budget, hq, hkv, w, fusion, gqa) in [(48, 24, 4, 2, 8, "sum", "max"), (56, 30, 6, 2, 8, "max", "max"),
                                                 (40, 20, 4, 2, 6, "sum", "mean")]:
        d = 16

        def chk(keys, queries):
            keep, sc = morphkv_reference(keys, queries, budget, w, fusion, gqa)
            return keep if margin_ok(sc, budget - w) else None
        keys, queries, keep = draw(hq, hkv, d, L, w, chk)
        cases.append(make_case(f"morphkv_reference_{fusion}_{gqa}_L{L}",
                               f"morphkv:window={w},fusion={fusion},gqa={gqa}", budget, hq, hkv, d, L, w,
                               keys, queries, keep))

    # CAKE (float64 re-statement of the paper): several layers, one allocation at the prompt end.
    for (n_layers, L, budget, hq, hkv, w) in [(3, 60, 24, 4, 2, 8), (4, 50, 20, 4, 2, 6)]:
        d = 16
        for _ in range(200):
            layers = [rand_case(gen, hq, hkv, d, L, w) for _ in range(n_layers)]
            # vary the layers' attention sharpness so their preferences differ
            layers = [(k, q * (0.5 + 1.5 * i / max(n_layers - 1, 1))) for i, (k, q) in enumerate(layers)]
            keep, sel, inds, raw = cake_reference(layers, budget, w)
            frac_ok = all(abs(r - round(r)) > 1e-6 for r in raw)
            if frac_ok and all(margin_ok(ind, min(s, L - w)) for ind, s in zip(inds, sel)):
                break
        else:
            raise RuntimeError("could not draw a CAKE case with clear margins")
        cases.append(dict(name=f"cake_reference_{n_layers}layers_L{L}", spec=f"cake:window={w}", budget=budget,
                          num_q_heads=hq, num_kv_heads=hkv, head_dim=d, length=L, window_queries=w,
                          num_layers=n_layers,
                          layers=[dict(keys=flat(k), queries=flat(q)) for k, q in layers],
                          layer_selected=sel, keep=keep))

    # CAKE's budget adjustment alone, including layers above the cap (excess spread) and deficits.
    adjust = []
    for (n, total, seq_len) in [(4, 100, 60), (5, 120, 30), (3, 90, 31), (6, 40, 100), (4, 200, 48)]:
        w = torch.rand(n, generator=gen, dtype=torch.float64) ** 3
        raw = (w / w.sum() * total).tolist()
        adjust.append(dict(raw=raw, total=total, seq_len=seq_len, want=cake_adjust_budgets(raw, total, seq_len)))
    adjust.append(dict(raw=[0.5, 0.5, 99.0], total=100, seq_len=40, want=cake_adjust_budgets([0.5, 0.5, 99.0], 100, 40)))

    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(dict(generator="tools/gen_policy_goldens.py", kvpress="0.5.5", torch=torch.__version__,
                       cases=cases, cake_adjust_budgets=adjust), f, separators=(",", ":"))
    print(f"wrote {len(cases)} cases to {os.path.relpath(OUT)} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
