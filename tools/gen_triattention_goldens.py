#!/usr/bin/env python3
"""Generate TriAttention keep-set goldens by running the authors' code (tests/fixtures/policies/triattention_goldens.json).

How to run (from the repository root), with a checkout of the reference repository:

    git clone https://github.com/WeianMao/triattention /tmp/triattention-ref
    git -C /tmp/triattention-ref checkout c3744ee6a50522a1559a577f85aef2b165a344f2
    .venv-goldens/bin/python tools/gen_triattention_goldens.py --reference /tmp/triattention-ref

(Only the reference's triattention/methods and triattention/common packages are imported; the
goldens virtualenv's torch + transformers + safetensors are all they need.)

What it does. For each tiny random-weight model of tools/gen_engine_goldens.py
(tests/fixtures/models/tiny-llama3: llama3 RoPE; tests/fixtures/models/tiny-qwen3: q/k RMSNorm,
yarn RoPE with attention scaling) it
  1. draws seeded random calibration statistics for every (layer, attention head) and saves them
     in the reference's own format (torch.save of {"metadata", "stats"}, as scripts/calibrate.py
     writes them), then converts that file with tools/convert_triattention_stats.py into the
     committed tests/fixtures/policies/triattention_stats_<model>.safetensors that kvbench reads;
  2. patches the model with the reference's apply_triattention_patch (transformers, f32, eager)
     with the paper runs' settings from the reference's scripts/cli.py (per_head_pruning,
     count_prompt_tokens, slack trigger, normalize_scores, mean over offsets up to 65536,
     pruning_seed 0) except divide_length, which is 32 so that a short run compresses several
     times;
  3. prefills a seeded prompt of PROMPT_LEN (>= 800) tokens and feeds seeded decode tokens one
     forward at a time (teacher forcing), and after every compression records the positions each
     kv head keeps (the reference's cache_positions_per_head; its keep-set applies to every layer),
     checking that every layer's cache holds that many tokens.
Cases: the prompt kept (allow_prefill_compression=False, budget = prompt + 48: generated tokens
compete) and the prompt competing too (allow_prefill_compression=True, budget 256).

Ties. The reference adds uniform noise of at most 1e-6 to the z-normalised scores (pruning_seed);
kvbench breaks ties by index instead. At every compression the generator recomputes each kv head's
aggregated score from the scores the reference selected on (its head_matrix) and requires the last
kept and the first dropped to differ by more than MARGIN, else it draws the next prompt.
"""
import argparse
import json
import os
import sys

import goldens_env

goldens_env.ensure(["torch", "transformers", "safetensors"])

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, DynamicCache  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convert_triattention_stats import convert  # noqa: E402

OUT = goldens_env.policy_goldens("triattention")
MODELS = goldens_env.TINY_MODELS
REF_COMMIT = "c3744ee6a50522a1559a577f85aef2b165a344f2"
PROMPT_LEN = 816
DIVIDE = 32
MARGIN = 1e-3
torch.set_grad_enabled(False)


def write_reference_stats(model, path, seed):
    """Seeded statistics in the reference's .pt layout: E[q] ~ N(0, 1), E|q| = |E[q]| + |N(0, 1)|."""
    cfg = model.config
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    gen = torch.Generator().manual_seed(seed)
    stats, heads = {}, []
    for layer in range(cfg.num_hidden_layers):
        for head in range(cfg.num_attention_heads):
            re = torch.randn(d // 2, generator=gen)
            im = torch.randn(d // 2, generator=gen)
            ab = torch.complex(re, im).abs() + torch.randn(d // 2, generator=gen).abs()
            stats[f"layer{layer:02d}_head{head:02d}"] = dict(q_mean_real=re, q_mean_imag=im, q_abs_mean=ab)
            heads.append([layer, head])
    meta = dict(num_traces=1, head_dim=d, dtype="float32", rope_style="half", sampled_heads=heads)
    torch.save(dict(metadata=meta, stats=stats), path)


def margin_of(comp, head_matrix, keep_count):
    """Smallest gap, over kv heads, between the last kept and the first dropped aggregated score
    (mean over layers of the max over the GQA group, as _select_per_head_independent)."""
    groups = {}
    for i, (layer, head) in enumerate(comp.sampled_heads):
        groups.setdefault((layer, head // comp.num_key_value_groups), []).append(i)
    layers = sorted({layer for layer, _ in comp.sampled_heads})
    worst = float("inf")
    for kv in range(comp.num_key_value_heads):
        agg = torch.stack([head_matrix[groups[(l, kv)]].max(dim=0).values for l in layers]).mean(dim=0)
        if keep_count >= agg.numel():
            continue
        top = agg.double().sort(descending=True).values
        worst = min(worst, (top[keep_count - 1] - top[keep_count]).item())
    return worst


def run_case(ref, model_dir, stats_pt, prompt, forced, budget, allow_prefill):
    """Runs the reference over prompt + forced tokens; returns (snapshots, smallest margin)."""
    path = goldens_env.fixture(model_dir)
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", dtype=torch.float32)
    model.eval()
    ref.apply_triattention_patch(
        model, stats_path=stats_pt, model_path=path, kv_budget=budget, offset_max_length=65536,
        score_aggregation="mean", pruning_seed=0, normalize_scores=True, count_prompt_tokens=True,
        allow_prefill_compression=allow_prefill, divide_length=DIVIDE, use_slack_trigger=True,
        per_head_pruning=True, per_layer_perhead_pruning=False)
    comp = model._triattention_compressor
    margins = []
    inner = comp._select_per_head_independent

    def select(head_matrix, keep_count, decode_start):
        margins.append(margin_of(comp, head_matrix, keep_count))
        return inner(head_matrix, keep_count, decode_start)

    comp._select_per_head_independent = select
    out = model(input_ids=torch.tensor([prompt]), past_key_values=DynamicCache(), use_cache=True)
    snaps = []
    for step, tok in enumerate(forced, start=1):
        before = len(margins)
        out = model(input_ids=torch.tensor([[tok]]), past_key_values=out.past_key_values, use_cache=True)
        if len(margins) == before:
            continue
        pos = comp.cache_positions_per_head
        assert pos is not None, "per-head compression did not record per-head positions"
        cache = out.past_key_values
        for layer in range(model.config.num_hidden_layers):
            keys = cache.layers[layer].keys
            assert keys.shape[2] == len(pos[0]), (keys.shape, len(pos[0]))
        snaps.append(dict(decode_step=step, keep=[sorted(int(p) for p in h) for h in pos]))
    return snaps, (min(margins) if margins else float("inf")), len(margins)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reference", required=True, help=f"checkout of WeianMao/triattention at {REF_COMMIT}")
    a = ap.parse_args()
    sys.path.insert(0, os.path.abspath(a.reference))
    import triattention.methods.triattention as ref  # the authors' module

    models = []
    for mi, model_dir in enumerate(MODELS):
        path = goldens_env.fixture(model_dir)
        probe = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        short = os.path.basename(model_dir)
        stats_pt = os.path.join("/tmp", f"triattention_stats_{short}.pt")
        write_reference_stats(probe, stats_pt, 77 + mi)
        stats_rel = f"policies/triattention_stats_{short}.safetensors"
        convert(stats_pt, goldens_env.fixture(stats_rel))
        vocab = probe.config.vocab_size
        gen = torch.Generator().manual_seed(4100 + mi)
        cases = []
        for name, budget, allow_prefill, n_forced in (("prompt_kept", PROMPT_LEN + 48, False, 160),
                                                      ("prompt_competes", 256, True, 110)):
            for attempt in range(50):
                prompt = [1] + torch.randint(3, vocab, (PROMPT_LEN - 1,), generator=gen).tolist()
                forced = torch.randint(3, vocab, (n_forced,), generator=gen).tolist()
                snaps, margin, n = run_case(ref, model_dir, stats_pt, prompt, forced, budget, allow_prefill)
                if margin > MARGIN:
                    break
                print(f"  {short} {name} attempt {attempt}: margin {margin:.2e} too small")
            else:
                raise RuntimeError(f"{short} {name}: no prompt with clear margins")
            assert len(snaps) >= 3, f"{short} {name}: only {len(snaps)} compressions"
            spec = f"triattention:stats={{stats}},buffer={DIVIDE},prompt={'compress' if allow_prefill else 'keep'}"
            cases.append(dict(name=name, spec=spec, budget=budget, prompt=prompt, forced=forced,
                              margin=margin, snapshots=snaps))
            print(f"  {short} {name}: {len(snaps)} compressions, margin {margin:.3e}, "
                  f"kept {[len(h) for h in snaps[-1]['keep']]}")
        models.append(dict(model=model_dir, stats=stats_rel, cases=cases))
    goldens_env.write_json(OUT, generator="tools/gen_triattention_goldens.py",
                           reference=f"WeianMao/triattention@{REF_COMMIT}", torch=torch.__version__,
                           transformers=transformers.__version__, models=models)


if __name__ == "__main__":
    main()
