#!/usr/bin/env python3
"""Generate the threshold-budget goldens (tests/fixtures/policies/threshold_goldens.json).

How to run (from the repository root): `python3 tools/gen_threshold_goldens.py` (re-runs itself in
.venv-goldens, tools/goldens_venv.sh; only torch, transformers and kvpress==0.5.5 are needed).

What it checks. kvbench's `budget_kind=threshold` (engine/policies/scheduled.cpp) evicts, at the
end of the prompt and (decode=true) while decoding, every token outside the protected `window`
newest ones whose score is below `threshold`. The reference is kvpress 0.5.5's DMSPress wrapped
around KnormPress (score = -||k||, per kv head): its forward hook is called as transformers
would call it — once for the whole prompt (cache_position 0..L-1), then once per decoded token
(cache_position t) — on a stand-in attention module and cache that hold the keys below, and the
keep-set of every kv head is read from the module's `masked_key_indices` (the tokens DMSPress
evicts; kvpress masks them out of every later attention).

Each case holds the keys [Hkv, N, D] of N = prompt + decode tokens (positions 0..N-1), the prompt
length L (>= 800), DMSPress's threshold, sliding window and `decoding` flag, the keep-set after
the prompt, and the keep-sets after some decode steps (`checkpoints`: {length, keep}). The keys are
rounded to 6 significant digits before kvpress sees them, so the file holds exactly the keys
scored; cases where a score lies within 1e-4 (relative) of the threshold are re-drawn so that
float rounding cannot flip a decision.
"""
import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import goldens_env  # noqa: E402

# kvpress is checked by find_spec, not imported: its __init__ pulls optional packages (load_dms).
goldens_env.ensure(["torch", "transformers"], ["--no-deps", "kvpress==0.5.5"])

import torch  # noqa: E402

OUT = goldens_env.policy_goldens("threshold")


def load_dms():
    """kvpress.presses.{dms,knorm}_press without running kvpress/__init__.py (optional deps)."""
    goldens_env.kvpress_without_init()
    from kvpress.presses.dms_press import DMSPress
    from kvpress.presses.knorm_press import KnormPress
    return DMSPress, KnormPress


class Layer:
    """What extract_keys_and_values reads from a cache layer."""

    def __init__(self):
        self.keys = None
        self.values = None


class Cache:
    def __init__(self):
        self.layers = [Layer()]


def draw_keys(gen, hkv, n, d):
    """Keys whose norms spread (a per-token scale), rounded to 6 significant digits."""
    k = torch.randn(1, hkv, n, d, generator=gen) * (0.4 + 1.2 * torch.rand(1, hkv, n, 1, generator=gen))
    return torch.tensor([float("%.6g" % x) for x in k.reshape(-1).tolist()], dtype=torch.float32).reshape(k.shape)


def run_dms(DMSPress, KnormPress, keys, L, window, threshold, decoding, checkpoints):
    """Calls DMSPress's forward hook for the prompt and each decode step; returns the keep-set of
    every head after the prompt and at each checkpoint length."""
    press = DMSPress(press=KnormPress(), threshold=threshold, sliding_window_size=window, decoding=decoding)
    module = types.SimpleNamespace(layer_idx=0, masked_key_indices=None)
    cache = Cache()
    hkv, n = keys.shape[1], keys.shape[2]

    def keep_sets(length):
        masked = [set() for _ in range(hkv)]
        if module.masked_key_indices is not None:
            _, heads, pos = module.masked_key_indices
            for h, p in zip(heads.tolist(), pos.tolist()):
                masked[h].add(p)
        return [[p for p in range(length) if p not in masked[h]] for h in range(hkv)]

    def step(t0, t1):
        cache.layers[0].keys = keys[:, :, :t1]
        cache.layers[0].values = keys[:, :, :t1]
        kwargs = dict(hidden_states=torch.zeros(1, t1 - t0, 1), past_key_values=cache,
                      cache_position=torch.arange(t0, t1))
        press.forward_hook(module, [], kwargs, None)

    step(0, L)
    out = dict(keep_prefill=keep_sets(L), checkpoints=[])
    for t in range(L, n):
        step(t, t + 1)
        if t + 1 in checkpoints:
            out["checkpoints"].append(dict(length=t + 1, keep=keep_sets(t + 1)))
    return out


def main():
    DMSPress, KnormPress = load_dms()
    from importlib.metadata import version

    gen = torch.Generator().manual_seed(41)
    specs = [
        # name, Hkv, D, prompt L, decode steps, window, threshold quantile, decoding
        ("dms_knorm_decode", 2, 8, 900, 160, 64, 0.5, True),
        ("dms_knorm_prefill_only", 2, 8, 820, 48, 32, 0.35, False),
        ("dms_knorm_small_window", 3, 8, 1000, 96, 8, 0.7, True),
    ]
    cases = []
    for name, hkv, d, L, T, window, q, decoding in specs:
        for _ in range(100):
            keys = draw_keys(gen, hkv, L + T, d)
            scores = -torch.linalg.vector_norm(keys.double(), dim=-1)
            threshold = float("%.6g" % torch.quantile(scores.reshape(-1), q).item())
            if (scores - threshold).abs().min().item() > 1e-4 * abs(threshold):
                break
        else:
            sys.exit(f"{name}: no draw with a clear margin to the threshold")
        checkpoints = sorted({L + 1, L + T // 3, L + (2 * T) // 3, L + T})
        got = run_dms(DMSPress, KnormPress, keys, L, window, threshold, decoding, checkpoints)
        evicted = sum(L - len(k) for k in got["keep_prefill"])
        print(f"{name}: L={L} window={window} threshold={threshold} prefill evicted {evicted} of {hkv * L}; "
              f"final kept {[len(k) for k in got['checkpoints'][-1]['keep']]} of {L + T}")
        cases.append(dict(name=name, spec=f"knorm:budget_kind=threshold,threshold={threshold},window={window},"
                                           f"buffer=1,decode={'true' if decoding else 'false'}",
                          num_kv_heads=hkv, head_dim=d, prompt_len=L, total_len=L + T, window=window,
                          threshold=threshold, decoding=decoding,
                          keys=[float("%.6g" % x) for x in keys.reshape(-1).tolist()], **got))
    goldens_env.write_json(OUT, generator="tools/gen_threshold_goldens.py",
                           reference=f"kvpress {version('kvpress')} DMSPress(KnormPress); torch {version('torch')}; "
                                     f"transformers {version('transformers')}",
                           cases=cases)


if __name__ == "__main__":
    main()
