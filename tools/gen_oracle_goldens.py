#!/usr/bin/env python3
"""Goldens for the `oracle` policy and the `kvbench fidelity` metrics (tests/fixtures/policies/oracle_goldens.json).

How to run (from the repository root). When torch/transformers are not importable the script
creates ./.venv-goldens, installs them there with pip and re-runs itself inside it:

    python3 tools/gen_oracle_goldens.py

What it writes.
  "oracle": for the tiny random-weight models of tests/fixtures/models (written by
    tools/gen_engine_goldens.py) and a fixed token trace, the Golden-eviction future scores of
    docs/policies.md, `oracle` (ForesightKV §3.1), recomputed in float64 from transformers'
    own attention probabilities (model.double(), attn_implementation="eager",
    output_attentions=True; the softmax of the UNCOMPRESSED model over the whole trace):
        bs[l, h', j, k]    = 1/(G·L) · Σ_{h in group(h')} Σ_{q in Q_j} A_l^h[q, k]
        alpha[l, h', t, k] = max (or sum / mean) over j >= t of bs[l, h', j, k]
    with blocks Q_j = [g0 + jL, min(g0 + (j+1)L, T)), g0 = P if P > B else B + L (oracle.h).
    Plus the keep-sets the schedule implies: starting from the full prompt, a head is compressed
    at the end of a prompt longer than B and whenever it reaches B + L tokens; it keeps its L
    most recent tokens and the B − L others with the highest alpha at that point (ties: lower
    position), t = ceil((s − g0)/L) for s tokens seen (alpha = 0 once no block is left).
    Cases whose kept/evicted alpha margin is below 1e-6 are reported (the test needs no near-ties).
  "metrics": random logit rows (including large offsets) with float64 KL(full || policy) of the
    softmaxes (torch.nn.functional.kl_div, log_target), NLL of a target id (cross_entropy) and
    argmax; and token sequences with the expected greedy-agreement percentages (common prefix
    and position-wise, over the reference length).
"""
import json
import math
import os

import goldens_env

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


goldens_env.ensure(["torch", "transformers"],
                   ["torch", "--index-url", "https://download.pytorch.org/whl/cpu"],
                   ["transformers", "safetensors", "numpy"])

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

torch.set_grad_enabled(False)
OUT = os.path.join(ROOT, "tests", "fixtures", "policies", "oracle_goldens.json")

T = 40
TRACE = [1] + [int(x) for x in np.random.RandomState(7).randint(3, 256, size=T - 1)]
# (model, prompt length P, budget B, block L, future)
CASES = [
    ("tiny-llama3", 6, 8, 4, "max"),   # P <= B: the note's own grid, C_0 = {0..B-1}
    ("tiny-llama3", 14, 8, 4, "max"),  # P > B: first compression at the end of the prompt
    ("tiny-qwen2", 6, 8, 4, "sum"),
    ("tiny-qwen3", 9, 8, 2, "mean"),
]


def attentions(name):
    d = os.path.join(ROOT, "tests", "fixtures", "models", name)
    m = AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager").eval().double()
    out = m(torch.tensor([TRACE]), output_attentions=True)
    cfg = m.config
    return [a[0].double() for a in out.attentions], cfg.num_attention_heads // cfg.num_key_value_heads


def oracle_case(name, P, B, L, future):
    A, G = attentions(name)
    layers, Hq = len(A), A[0].shape[0]
    Hkv = Hq // G
    g0 = P if P > B else B + L
    nb = max(0, -(-(T - g0) // L))
    bs = torch.zeros(layers, Hkv, nb, T, dtype=torch.float64)
    for j in range(nb):
        q0, q1 = g0 + j * L, min(g0 + (j + 1) * L, T)
        for l in range(layers):
            s = A[l][:, q0:q1, :].sum(dim=1)  # [Hq, T]
            bs[l, :, j] = s.view(Hkv, G, T).sum(dim=1) / (G * L)
    alpha = torch.zeros_like(bs)
    for t in range(nb):
        fut = bs[:, :, t:, :]
        if future == "max":
            alpha[:, :, t] = fut.max(dim=2).values
        elif future == "sum":
            alpha[:, :, t] = fut.sum(dim=2)
        else:
            alpha[:, :, t] = fut.mean(dim=2)

    def alpha_at(l, h, pos, s):
        t = 0 if s <= g0 else -(-(s - g0) // L)
        return 0.0 if t >= nb else float(alpha[l, h, t, pos])

    snapshots, min_margin = [], math.inf
    for l in range(layers):
        for h in range(Hkv):
            held = []
            for s in range(1, T + 1):  # s tokens seen after feeding position s-1
                held.append(s - 1)
                due = (s == P and len(held) > B) or (s > P and len(held) >= B + L)
                if not due:
                    continue
                recent, older = held[-L:], held[:-L]
                sc = [(-alpha_at(l, h, p, s), i) for i, p in enumerate(older)]
                order = sorted(sc)
                k = B - L
                if 0 < k < len(order) and alpha_at(l, h, older[order[k - 1][1]], s) > 0:
                    min_margin = min(min_margin, order[k][0] - order[k - 1][0])
                keep = sorted(i for _, i in order[:k])
                held = [older[i] for i in keep] + recent
                snapshots.append({"layer": l, "head": h, "seq_len": s, "positions": list(held)})
    print(f"{name} P={P} B={B} L={L} {future}: {len(snapshots)} compressions, min alpha margin {min_margin:.3g}")
    return {"model": name, "prompt_len": P, "budget": B, "block": L, "future": future, "grid0": g0,
            "num_blocks": nb, "group": G, "trace": TRACE,
            "bs": bs.flatten().tolist(), "alpha": alpha.flatten().tolist(), "compressions": snapshots,
            "min_margin": min_margin}


def metrics_goldens():
    rng = np.random.RandomState(3)
    rows = []
    V = 50
    for scale, shift in [(1.0, 0.0), (4.0, 0.0), (10.0, 1000.0), (30.0, -500.0)]:
        for _ in range(3):
            a = rng.randn(V) * scale + shift
            b = a + rng.randn(V) * scale * 0.3
            if rng.rand() < 0.3:
                b = a.copy()
            target = int(rng.randint(V))
            ta, tb = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
            la, lb = F.log_softmax(ta, -1), F.log_softmax(tb, -1)
            kl = float(F.kl_div(lb, la, log_target=True, reduction="sum"))  # KL(p_a || p_b)
            rows.append({"full": a.astype(np.float32).tolist(), "policy": b.astype(np.float32).tolist(),
                         "target": target,
                         "kl": kl, "nll_full": float(F.cross_entropy(ta[None], torch.tensor([target]))),
                         "nll_policy": float(F.cross_entropy(tb[None], torch.tensor([target]))),
                         "argmax_full": int(ta.argmax()), "argmax_policy": int(tb.argmax())})
    # f32-rounded inputs: recompute the references from the rounded values so they are exact.
    for r in rows:
        ta = torch.tensor(np.array(r["full"], dtype=np.float32), dtype=torch.float64)
        tb = torch.tensor(np.array(r["policy"], dtype=np.float32), dtype=torch.float64)
        la, lb = F.log_softmax(ta, -1), F.log_softmax(tb, -1)
        r["kl"] = float(F.kl_div(lb, la, log_target=True, reduction="sum"))
        r["nll_full"] = float(-la[r["target"]])
        r["nll_policy"] = float(-lb[r["target"]])
    seqs = []
    for ref, got in [([5, 6, 7, 8], [5, 6, 7, 8]), ([5, 6, 7, 8], [5, 9, 7, 8]), ([5, 6, 7, 8], [5, 6]),
                     ([5, 6, 7, 8], [1, 6, 7, 8, 9, 9]), ([3, 3, 3], [3, 3, 3, 4])]:
        prefix = 0
        while prefix < len(ref) and prefix < len(got) and ref[prefix] == got[prefix]:
            prefix += 1
        same = sum(1 for i in range(len(ref)) if i < len(got) and ref[i] == got[i])
        seqs.append({"ref": ref, "got": got, "prefix_pct": 100.0 * prefix / len(ref),
                     "overall_pct": 100.0 * same / len(ref)})
    return {"rows": rows, "sequences": seqs}


def main():
    out = {"oracle": [oracle_case(*c) for c in CASES], "metrics": metrics_goldens()}
    with open(OUT, "w") as f:
        json.dump(out, f)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
