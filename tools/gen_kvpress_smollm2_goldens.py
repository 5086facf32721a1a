#!/usr/bin/env python3
"""Keep-set goldens of kvpress 0.5.5's method presses on the real SmolLM2-135M-Instruct weights
(tests/fixtures/policies/kvpress_smollm2_goldens.json), for the kvbench policies that reproduce
them (docs/policies.md, "kvpress method presses").

How to run (from the repository root; the default model must be cached, tools/fetch_default_model.sh):

    python3 tools/gen_kvpress_smollm2_goldens.py [--model PATH.gguf]

It re-runs itself inside .venv-goldens (tools/goldens_env.py; kvpress==0.5.5 pinned in
tools/goldens-requirements.txt).

Model. transformers loads the default model's GGUF (Q4_1) dequantised to f32, eager attention
(kvbench's test loads the same file with `--weights f32`). Only the first LAYERS layers' keep-sets
are recorded: at the end of a prefill a layer's compression cannot change what any layer computes
in that forward pass, so the kvbench test runs the same weights truncated to LAYERS layers, and so
does this generator (four times faster).

Prompt (query-aware, as kvbench's default protocol and kvpress's `*_question` use): GSM8K test
problems with their worked answers as few-shot context (tests/data, unpacked by cmake into
build/test-data) until the context is at least 850 tokens, then one more question and "Answer:";
the whole prompt is prefilled and compressed at its end, so the observation window of the
query-aware presses holds the question. The prompt ids are recorded, the test needs no tokenizer.

Each case runs one forward pass under kvpress's own hook (`with press(model)`), which compresses
every layer's DynamicCache once at the end of the prefill. The kept positions of each (layer, kv
head) are read back by matching each kept key row against the layer's uncompressed keys (the
presses gather rows, so each kept row equals exactly one original row). Two compression ratios per
press; budget = kvpress.utils.compute_n_kept(L, ratio).

Near-ties. On a real model some kept/evicted boundaries are closer than f32 summation order can
resolve. Each head records, beside its kept set, the tokens whose press score lies within TIE
(relative) of the boundary between the last kept and the first evicted score (for chunk
selection: every token of a chunk whose chunk score lies within TIE of the chunk boundary). The
test requires equality everywhere else and equal kept counts. Sets are stored as hex bitmasks over
positions (bit i of the big-endian hex number = position i, most significant digit first: digit j
holds positions 4j..4j+3, position 4j in its bit 3).
"""
import argparse
import json
import os
import sys

import goldens_env

goldens_env.ensure(["torch", "transformers", "kvpress", "gguf"])

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache  # noqa: E402

ROOT = goldens_env.ROOT
OUT = os.path.join(ROOT, "tests", "fixtures", "policies", "kvpress_smollm2_goldens.json")
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
LAYERS = 8
MIN_CONTEXT = 850
TIE = 1e-3
torch.set_grad_enabled(False)
transformers.utils.logging.disable_progress_bar()


def default_model():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "kvbench", "models", "smollm2-135m-instruct", GGUF)


def presses():
    """kvpress's press classes, imported without kvpress/__init__.py (tools/gen_policy_goldens.py)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gen_policy_goldens import load_kvpress
    kp = load_kvpress()
    from kvpress.presses.chunkkv_press import ChunkKVPress
    from kvpress.presses.cur_press import CURPress
    from kvpress.presses.lagkv_press import LagKVPress
    from kvpress.presses.non_causal_attention_press import NonCausalAttnPress
    from kvpress.presses.simlayerkv_press import SimLayerKVPress
    from kvpress.presses.observed_attention_press import ObservedAttentionPress
    from kvpress.presses.snapkv_press import SnapKVPress
    from kvpress.utils import compute_n_kept
    return dict(ObservedAttentionPress=ObservedAttentionPress, ChunkKVPress=ChunkKVPress, SnapKVPress=SnapKVPress,
                LagKVPress=LagKVPress, CURPress=CURPress, NonCausalAttnPress=NonCausalAttnPress,
                SimLayerKVPress=SimLayerKVPress,
                compute_n_kept=compute_n_kept, **{k: v for k, v in kp.items() if k not in ("compute_n_kept",)})


def build_prompt(tok):
    """Few-shot GSM8K context (>= MIN_CONTEXT tokens) + one question: (ids, context token count)."""
    rows = [json.loads(x) for x in open(goldens_env.test_data("datasets/gsm8k/test.jsonl"))]
    text, i = "", 0
    while len(tok(text, add_special_tokens=False)["input_ids"]) < MIN_CONTEXT:
        text += f"Question: {rows[i]['question']}\nAnswer: {rows[i]['answer']}\n\n"
        i += 1
    n_ctx = len(tok(text, add_special_tokens=False)["input_ids"])
    text += f"Question: {rows[i]['question']}\nAnswer:"
    return tok(text, add_special_tokens=False)["input_ids"], n_ctx


def cases(kp, L):
    """(name, press, kvbench spec, budget, tie rule) of every case."""
    out = []
    for r in (0.5, 0.75):
        n = kp["compute_n_kept"](L, r)
        out.append((f"observed_attention_r{r}", kp["ObservedAttentionPress"](compression_ratio=r),
                    "observed_attention:decode=false", n, "score"))
    for r in (0.5, 0.75):  # kvpress's examples wrap SnapKVPress (window 64, kernel 5) in ChunkKVPress
        out.append((f"chunkkv_r{r}", kp["ChunkKVPress"](press=kp["SnapKVPress"](compression_ratio=r), chunk_length=20),
                    f"chunkkv:budget_kind=ratio,ratio={1 - r},decode=false", 0, ("chunks", 20, r)))
    for r in (0.5, 0.75):  # defaults n_sink 4, lag_size 128: 7 scored partitions of the 1,098 tokens
        n = kp["compute_n_kept"](L, r)
        out.append((f"lagkv_r{r}", kp["LagKVPress"](compression_ratio=r), "lagkv:decode=false", n, "score"))
    for r in (0.5, 0.75):  # defaults: kv_product, 16-token local windows, 4 sinks
        n = kp["compute_n_kept"](L, r)
        out.append((f"cur_r{r}", kp["CURPress"](compression_ratio=r), "cur:decode=false", n, "score"))
    for r in (0.5, 0.75):  # chunk_size 256: four whole chunks and a padded one of L mod 256 tokens
        n = kp["compute_n_kept"](L, r)
        out.append((f"noncausal_attn_r{r}", kp["NonCausalAttnPress"](compression_ratio=r), "noncausal_attn", n,
                    "score"))
    # SimLayerKV keeps a lazy layer's first 4 and last n_recent - 1 tokens and every token of the
    # others. The default threshold 1.0 never compresses and n_recent 1024 of 1,098 tokens would keep
    # nearly all, so both are set to give lazy and busy layers among the first LAYERS (the layers'
    # attention shares are recorded; each must be at least TIE from the threshold).
    for thr, recent in ((0.5, 256), (0.56, 512)):
        out.append((f"simlayerkv_t{thr}_n{recent}", kp["SimLayerKVPress"](lazy_threshold=thr, n_recent=recent),
                    f"simlayerkv:lazy_threshold={thr},n_recent={recent}", 0, "lazy"))
    return out


def record_lazy_shares(press, snapkv):
    """Wraps SimLayerKVPress.is_lazy to record each layer's attention share (kvpress's own formula)."""
    shares, inner = {}, press.is_lazy

    def is_lazy(module, hidden_states, keys, position_embeddings):
        a = snapkv.compute_window_attention(module, hidden_states, keys, press.n_last, position_embeddings)
        a = a.mean((0, 1, 2))
        shares[module.layer_idx] = (a[:press.n_initial].sum() + a[-press.n_recent:].sum()).item()
        return inner(module, hidden_states, keys, position_embeddings)

    press.is_lazy = is_lazy
    return shares


def run_case(model, press, ids):
    """One prefill under `press`: ([layer][head] kept positions, [layer] score tensors [Hkv, L])."""
    orig, scores = {}, {}
    scorer = press.press if hasattr(press, "press") else press
    inner_compress, inner_score = press.compress, None

    def compress(module, hidden_states, keys, values, attentions, kwargs):
        orig[module.layer_idx] = keys.clone()
        return inner_compress(module, hidden_states, keys, values, attentions, kwargs)

    def score(module, hidden_states, keys, values, attentions, kwargs):
        s = inner_score(module, hidden_states, keys, values, attentions, kwargs)
        scores[module.layer_idx] = s[0].clone().double()
        return s

    object.__setattr__(press, "compress", compress)
    if hasattr(scorer, "score"):  # SimLayerKVPress has no per-token score
        inner_score = scorer.score
        object.__setattr__(scorer, "score", score)
    cache = DynamicCache()
    with press(model):
        model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
    keep = []
    for layer in range(LAYERS):
        k0, k1 = orig[layer][0], cache.layers[layer].keys[0]
        heads = []
        for h in range(k0.shape[0]):
            eq = (k1[h][:, None, :] == k0[h][None, :, :]).all(-1)
            assert bool((eq.sum(-1) == 1).all()), "a kept key row does not match exactly one original row"
            heads.append(sorted(int(i) for i in eq.float().argmax(-1).tolist()))
        keep.append(heads)
    return keep, scores


def band_score(s, n):
    """Tokens in doubt at a top-n cut of scores s: when the last kept (a) and first evicted (b) score
    differ by at most TIE relative, every token scoring within [b - tol, a + tol]; else none."""
    v = s.sort(descending=True).values
    if n >= len(v):
        return []
    a, b = v[n - 1].item(), v[n].item()
    tol = TIE * max(abs(a), abs(b), 1e-30)
    if a - b > tol:
        return []
    return [i for i in range(len(s)) if b - tol <= s[i].item() <= a + tol]


def band_chunks(s, chunk, ratio):
    """ChunkKVPress: the tokens of every chunk whose mean head-summed score is in doubt at the cut."""
    t = s.sum(0)
    L = len(t)
    bounds = [(c, min(L, c + chunk)) for c in range(0, L, chunk)]
    means = torch.stack([t[a:b].mean() for a, b in bounds])
    k = max(1, int(len(bounds) * (1 - ratio)))
    chunks = band_score(means, k)
    return [i for c in chunks for i in range(*bounds[c])]


def hexmask(positions, L):
    bits = ["0"] * (((L + 3) // 4) * 4)
    for p in positions:
        bits[p] = "1"
    return "".join("%x" % int("".join(bits[j:j + 4]), 2) for j in range(0, len(bits), 4))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=default_model())
    args = ap.parse_args()
    d, f = os.path.split(args.model)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, attn_implementation="eager", dtype=torch.float32)
    # ChunkKVPress refuses attention weights (eager passes them): it runs on an sdpa instance.
    sdpa = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, attn_implementation="sdpa", dtype=torch.float32)
    for m in (model, sdpa):  # the later layers cannot change the first LAYERS' keep-sets: dropped
        m.model.layers = m.model.layers[:LAYERS]
        m.config.num_hidden_layers = LAYERS
        m.eval()
    ids, n_ctx = build_prompt(tok)
    L = len(ids)
    print(f"prompt {L} tokens (context {n_ctx})")
    kp = presses()
    out = []
    for name, press, spec, budget, tie in cases(kp, L):
        shares = record_lazy_shares(press, kp["SnapKVPress"]) if tie == "lazy" else None
        keep, scores = run_case(sdpa if isinstance(tie, tuple) else model, press, ids)
        extra = {}
        if shares is not None:
            extra["lazy_shares"] = [shares[layer] for layer in range(LAYERS)]
            margin = min(abs(v - press.lazy_threshold) for v in extra["lazy_shares"])
            assert margin > TIE, (name, extra["lazy_shares"])
            lazy = [v > press.lazy_threshold for v in extra["lazy_shares"]]
            assert any(lazy) and not all(lazy), (name, extra["lazy_shares"])
        layers = []
        for layer in range(LAYERS):
            heads = []
            for h, kept in enumerate(keep[layer]):
                if tie == "score":
                    assert len(kept) == budget, (name, layer, h, len(kept), budget)
                    band = band_score(scores[layer][h], budget)
                elif tie == "lazy":
                    band = []
                else:
                    band = band_chunks(scores[layer], tie[1], tie[2])
                heads.append(dict(keep=hexmask(kept, L), tie=hexmask(band, L), n_tie=len(band)))
            layers.append(heads)
        n_tie = sum(h["n_tie"] for lay in layers for h in lay)
        print(f"  {name}: budget {budget}, kept {len(keep[0][0])}, near-tie tokens {n_tie}")
        args_ = {k: v for k, v in press.__dict__.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if hasattr(press, "press"):
            args_.update({"press." + k: v for k, v in press.press.__dict__.items()
                          if isinstance(v, (int, float)) and not isinstance(v, bool)})
        out.append(dict(name=name, press=type(press).__name__, kvpress_args=args_, spec=spec, budget=budget,
                        layers=layers, **extra))
    goldens_env.write_json(OUT, generator="tools/gen_kvpress_smollm2_goldens.py", kvpress="0.5.5",
                           torch=torch.__version__, transformers=transformers.__version__, model=GGUF,
                           weights="f32 (dequantised by transformers)", num_layers=LAYERS, prompt=ids,
                           context_tokens=n_ctx, tie_relative=TIE, cases=out)


if __name__ == "__main__":
    main()
