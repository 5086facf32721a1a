#!/usr/bin/env python3
"""Generate KVzap keep-set goldens from kvpress (tests/fixtures/policies/kvzap_goldens.json).

How to run (from the repository root):

    tools/goldens_venv.sh        # torch, transformers, kvpress (tools/goldens-requirements.txt)
    .venv-goldens/bin/python tools/gen_kvzap_goldens.py [--kvpress DIR]

The reference is the installed kvpress 0.5.5 (the pinned goldens version); --kvpress DIR imports
kvpress from a checkout instead (NVIDIA/kvpress at commit 8bb29b9c3078452a86d692f29123fa6c793e2b05,
whose KVzap and DMS presses are the same code); only kvpress/presses/{kvzap,dms,scorer,base}_press.py, kvpress/utils.py and
kvpress/attention_patch.py are imported (not kvpress/__init__.py, which pulls optional packages).

What it does. For each tiny random-weight model of tools/gen_engine_goldens.py
(tests/fixtures/models/tiny-llama3, tiny-qwen3) it
  1. builds seeded KVzap scorers with kvpress's own KVzapModel (an MLP, hidden 16, and the linear
     form) and writes them with save_pretrained — the released checkpoints' format (config.json +
     model.safetensors) — into tests/fixtures/policies/kvzap_<form>_<model>/, which kvbench reads;
  2. runs kvpress's DMSPress(KVzapPress(...), threshold, sliding_window_size, decoding=True) — the
     kvzap README's usage — with kvpress's attention patch (masked keys get weight 0, which is what
     eviction does) on an sdpa instance of the model (transformers, f32): a seeded prompt of
     PROMPT_LEN (>= 800) tokens, then teacher-forced decode tokens one forward at a time;
  3. records, after the prompt and every SNAP_EVERY decode steps, the positions each (layer, kv
     head) still attends to (all cache positions minus the layer's masked_key_indices).
The threshold is a quantile of the first prompt's scores (rounded to 3 decimals). A prompt is
re-drawn when any score lies within MARGIN of the threshold, so float summation order cannot flip a
decision.
"""
import argparse
import json
import os

import goldens_env

goldens_env.ensure(["torch", "transformers", "safetensors"])  # kvpress: imported below without its __init__

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, DynamicCache  # noqa: E402

OUT = goldens_env.policy_goldens("kvzap")
MODELS = goldens_env.TINY_MODELS
KVPRESS_COMMIT = "8bb29b9c3078452a86d692f29123fa6c793e2b05"
PROMPT_LEN = 816
N_FORCED = 96
SNAP_EVERY = 16
MARGIN = 2e-5
torch.set_grad_enabled(False)


def load_kvpress(src):
    """kvpress's KVzap and DMS presses and attention patch, without kvpress/__init__.py."""
    goldens_env.kvpress_without_init(src)
    from kvpress.attention_patch import patch_attention_functions
    from kvpress.presses.dms_press import DMSPress
    from kvpress.presses.kvzap_press import KVzapConfig, KVzapModel, KVzapPress
    patch_attention_functions()
    return dict(DMSPress=DMSPress, KVzapPress=KVzapPress, KVzapConfig=KVzapConfig, KVzapModel=KVzapModel)


def make_scorer(kp, cfg, hidden, seed, out_dir):
    """A seeded KVzapModel for `cfg` (hidden None = linear), saved as the released checkpoints are."""
    torch.manual_seed(seed)
    conf = kp["KVzapConfig"](input_dim=cfg.hidden_size, output_dim=cfg.num_key_value_heads,
                             hidden_dim=hidden, n_modules=cfg.num_hidden_layers)
    m = kp["KVzapModel"](conf).eval()
    m.save_pretrained(out_dir)
    return kp["KVzapModel"].from_pretrained(out_dir).eval()


def run(kp, model, scorer, form, prompt, forced, threshold, window):
    """kvpress over prompt + forced; returns (snapshots, all scores)."""
    press = kp["DMSPress"](kp["KVzapPress"](model_type=form), threshold=threshold, sliding_window_size=window,
                           decoding=True)
    inner = press.press
    inner.kvzap_model_name = f"nvidia/KVzap-{form}-{model.config.name_or_path.split('/')[-1]}"
    inner.kvzap_model = scorer
    scores = []
    score = inner.score

    def recording(module, hidden_states, keys, values, attentions, kwargs):
        s = score(module, hidden_states, keys, values, attentions, kwargs)
        scores.append(s.flatten().clone())
        return s

    object.__setattr__(inner, "score", recording)
    layers = model.model.layers
    heads = model.config.num_key_value_heads

    def held(n):
        out = []
        for layer in layers:
            masked = [set() for _ in range(heads)]
            mk = layer.self_attn.masked_key_indices
            if mk is not None:
                for b, h, i in zip(*(t.tolist() for t in mk)):
                    masked[h].add(i)
            out.append([[i for i in range(n) if i not in masked[h]] for h in range(heads)])
        return out

    snaps = []
    with press(model):
        for layer in layers:
            layer.self_attn.masked_key_indices = None
        cache = DynamicCache()
        model(input_ids=torch.tensor([prompt]), past_key_values=cache, use_cache=True)
        snaps.append(dict(decode_step=0, keep=held(len(prompt))))
        for step, tok in enumerate(forced, start=1):
            model(input_ids=torch.tensor([[tok]]), past_key_values=cache, use_cache=True)
            if step % SNAP_EVERY == 0 or step == len(forced):
                snaps.append(dict(decode_step=step, keep=held(len(prompt) + step)))
    return snaps, torch.cat(scores)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvpress", default="", help=f"checkout of NVIDIA/kvpress (commit {KVPRESS_COMMIT})")
    a = ap.parse_args()
    kp = load_kvpress(a.kvpress)
    models = []
    for mi, model_dir in enumerate(MODELS):
        path = goldens_env.fixture(model_dir)
        model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa", dtype=torch.float32).eval()
        short = os.path.basename(model_dir)
        cfg = model.config
        gen = torch.Generator().manual_seed(5200 + mi)
        cases = []
        for form, hidden, window, quantile in (("mlp", 16, 64, 0.4), ("linear", None, 128, 0.5)):
            rel = f"policies/kvzap_{form}_{short}"
            scorer = make_scorer(kp, cfg, hidden, 31 + mi, goldens_env.fixture(rel))
            threshold = None
            for attempt in range(60):
                prompt = [1] + torch.randint(3, cfg.vocab_size, (PROMPT_LEN - 1,), generator=gen).tolist()
                forced = torch.randint(3, cfg.vocab_size, (N_FORCED,), generator=gen).tolist()
                if threshold is None:  # from a dry run that evicts nothing
                    _, s = run(kp, model, scorer, form, prompt, forced, -1e30, window)
                    threshold = round(float(s.quantile(quantile)), 3)
                snaps, s = run(kp, model, scorer, form, prompt, forced, threshold, window)
                gap = float((s - threshold).abs().min())
                if gap > MARGIN * max(1.0, abs(threshold)):
                    break
                print(f"  {short} {form} attempt {attempt}: a score within {gap:.1e} of the threshold")
            else:
                raise RuntimeError(f"{short} {form}: no prompt with clear margins")
            last = snaps[-1]["keep"]
            total = PROMPT_LEN + N_FORCED
            assert any(len(h) < total for layer in last for h in layer), "the golden must evict"
            spec = f"kvzap:scorer={{scorer}},threshold={threshold},window={window}"
            cases.append(dict(name=f"{form}_w{window}", form=form, scorer=rel, spec=spec, prompt=prompt,
                              forced=forced, threshold=threshold, margin=gap, snapshots=snaps))
            print(f"  {short} {form}: threshold {threshold}, margin {gap:.2e}, kept "
                  f"{[[len(h) for h in layer] for layer in last]} of {total}")
        models.append(dict(model=model_dir, cases=cases))
    goldens_env.write_json(OUT, generator="tools/gen_kvzap_goldens.py",
                           kvpress=(f"NVIDIA/kvpress@{KVPRESS_COMMIT}" if a.kvpress else "0.5.5"),
                           torch=torch.__version__, transformers=transformers.__version__, models=models)


if __name__ == "__main__":
    main()
