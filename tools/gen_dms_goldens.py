#!/usr/bin/env python3
"""Generate DMS goldens by running NVIDIA's reference code (tests/fixtures/policies/dms_goldens.json).

How to run (from the repository root), with a checkout of the reference repository:

    git clone https://github.com/NVIDIA/Model-Optimizer /tmp/mo-ref
    git -C /tmp/mo-ref checkout a2fbac7ba
    .venv-goldens/bin/python tools/gen_dms_goldens.py --reference /tmp/mo-ref

(Only the reference's experimental/dms/dms package is imported, plus the CPU stand-in for
flash_attn_with_kvcache that its own tests define, fake_flash_attn_with_kvcache in
experimental/dms/tests/test_prefill_and_generate.py, read from that file without importing
pytest. torch.compile is disabled: the reference's compiled functions run eagerly on the CPU.)

What it does. For tests/fixtures/models/tiny-qwen3 (q/k RMSNorm, yarn RoPE with attention
scaling) it
  1. draws seeded DMS decision weights in the checkpoint layout of a model trained with
     dms_separate_alpha (model.layers.{l}.self_attn.dms_proj_alpha_norm.weight [H],
     dms_proj_alpha.weight [Hkv, H]) and saves them as
     tests/fixtures/policies/dms_alpha_tiny-qwen3.safetensors;
  2. runs transformers' Qwen3 (f32) with every attention block's forward replaced by the
     reference's own pieces, as its Qwen3AttentionDMS.forward chains them: prepare_attention_input
     (q/k/v, q/k norm, RoPE and the decision logits from the residual stream, which a forward
     pre-hook on the decoder layer hands over), dms_attn_eval_mode over the reference's DMSCache
     (prefill: dms_run_prefill_flex, the whole prompt in one call with its eviction mask;
     decode: the paged cache), post_process_attention_output;
  3. prefills a seeded prompt of PROMPT_LEN (>= 800) tokens and feeds seeded decode tokens one
     forward at a time (teacher forcing), recording the logits after the prompt and after every
     decode token, and every decision logit of every (layer, kv head, token).
From the decisions it derives, after every step, the positions each (layer, kv head) can still be
read by the next query (a token j marked by the decision of token j + 1 is readable by queries
q with q - j <= WINDOW), and checks them against the reference's own paged cache lengths.
Margin: a decision flips only when its logit crosses 0; the generator requires every |logit| >
MARGIN, else it draws the next prompt.
"""
import argparse
import ast
import json
import os
import sys

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # the reference's @torch.compile functions run eagerly

import goldens_env

goldens_env.ensure(["torch", "transformers", "safetensors"])

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from transformers.models.qwen3 import modeling_qwen3 as mq  # noqa: E402

OUT = goldens_env.policy_goldens("dms")
MODEL = "models/tiny-qwen3"
REF_COMMIT = "a2fbac7ba"
PROMPT_LEN = 816
N_FORCED = 64
WINDOW = 48  # dms_window_size; the paper's 512 would evict nothing in a prompt this short
BLOCK = 16  # dms_paged_attention_block_size (< WINDOW, as the config requires)
SCALE, OFFSET = 100.0, 5.0
MARGIN = 0.05
HELD_STEPS = (0, 16, 32, 48, N_FORCED)  # steps whose readable sets are stored in full
torch.set_grad_enabled(False)
transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()


def fake_flash_attn(reference):
    """The reference tests' fake_flash_attn_with_kvcache, compiled from its source alone."""
    path = os.path.join(reference, "experimental", "dms", "tests", "test_prefill_and_generate.py")
    tree = ast.parse(open(path).read())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "fake_flash_attn_with_kvcache")
    ns = {"torch": torch}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), path, "exec"), ns)
    return ns["fake_flash_attn_with_kvcache"]


def draw_alpha(model, seed):
    """Seeded decision weights: norm 1 + 0.1 N(0, 1), projection U(+-1/sqrt(H)) (nn.Linear's range)."""
    cfg = model.config
    H, Hkv = cfg.hidden_size, cfg.num_key_value_heads
    gen = torch.Generator().manual_seed(seed)
    t = {}
    for layer in range(cfg.num_hidden_layers):
        p = f"model.layers.{layer}.self_attn."
        t[p + "dms_proj_alpha_norm.weight"] = 1 + 0.1 * torch.randn(H, generator=gen)
        t[p + "dms_proj_alpha.weight"] = (torch.rand(Hkv, H, generator=gen) * 2 - 1) / H**0.5
    return t


def run(ref, fake, model, alpha, prompt, forced):
    """Reference run over prompt + forced; returns (logits per step, decision logits [layer][head][token],
    the reference's readable-token count per (layer, head) after every decode step)."""
    core, attention, attention_prefill, cache_mod = ref
    cfg = model.config
    cache = cache_mod.DMSCache(dms_window_size=WINDOW + 1, max_context_length=4096,
                               accommodate_min_initial_context_length=1024, block_size=BLOCK)
    decisions = [[] for _ in range(cfg.num_hidden_layers)]
    for layer, dl in enumerate(model.model.layers):
        attn = dl.self_attn
        attn.dms_proj_alpha_norm = mq.Qwen3RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        attn.dms_proj_alpha_norm.weight.copy_(alpha[f"model.layers.{layer}.self_attn.dms_proj_alpha_norm.weight"])
        attn.dms_proj_alpha = torch.nn.Linear(cfg.hidden_size, cfg.num_key_value_heads, bias=False)
        attn.dms_proj_alpha.weight.copy_(alpha[f"model.layers.{layer}.self_attn.dms_proj_alpha.weight"])

        def pre_hook(module, args, kwargs):
            module.self_attn._dms_pre = args[0] if args else kwargs["hidden_states"]

        dl.register_forward_pre_hook(pre_hook, with_kwargs=True)

    def forward(self, hidden_states, position_embeddings, attention_mask=None, past_key_values=None, **kw):
        cos, sin = position_embeddings
        q, k, v, dec, logits = core.prepare_attention_input(
            pre_attn_norm_hidden_states=self._dms_pre, post_attn_norm_hidden_states=hidden_states,
            q_proj_fn=self.q_proj, k_proj_fn=self.k_proj, v_proj_fn=self.v_proj, q_norm_fn=self.q_norm,
            k_norm_fn=self.k_norm, head_dim=self.head_dim, cos=cos, sin=sin,
            dms_proj_alpha_norm_fn=self.dms_proj_alpha_norm, dms_proj_alpha_fn=self.dms_proj_alpha,
            dms_alpha_per="head", dms_decision_scale=SCALE, dms_initial_decision_offset=OFFSET, dms_training=False,
            dms_disable_eviction=False, dms_tau=0.1, apply_rotary_pos_emb_fn=mq.apply_rotary_pos_emb,
            dms_teacher_mode=False)
        decisions[self.layer_idx].append(logits[0])  # [Hkv, n]
        out = attention.dms_attn_eval_mode(
            new_q_flash=q, new_k=k, new_v=v, decisions=dec.to(torch.long), attention_mask=None,
            layer_idx=self.layer_idx, dms_cache=cache, attn_scaling=self.scaling, flash_attn_fn=fake,
            prefill_attn_fn=attention_prefill.dms_run_prefill_flex,
            prefill_attn_fn_kwargs={"flex_attention_fn": attention_prefill.wrapped_flex_attention})
        return core.post_process_attention_output(out, self.o_proj), None

    old = mq.Qwen3Attention.forward
    mq.Qwen3Attention.forward = forward
    try:
        cache.prefill_mode()
        n = len(prompt)
        out = model(input_ids=torch.tensor([prompt]), position_ids=torch.arange(n)[None], use_cache=False)
        step_logits = [out.logits[0, -1].tolist()]
        cache.inference_mode()
        counts = []
        for i, tok in enumerate(forced):
            out = model(input_ids=torch.tensor([[tok]]), position_ids=torch.tensor([[n + i]]), use_cache=False)
            step_logits.append(out.logits[0, -1].tolist())
            counts.append([cache[layer].paged_cache.get_seq_lengths().tolist() for layer in range(cfg.num_hidden_layers)])
    finally:
        mq.Qwen3Attention.forward = old
    dl = [torch.cat(d, dim=1).tolist() for d in decisions]  # [layer][head][token]
    return step_logits, dl, counts


def readable(dlog, upto, next_query):
    """Positions j <= upto of one (layer, head) that query `next_query` may read."""
    return [j for j in range(upto + 1) if not (j + 1 <= upto and dlog[j + 1] > 0 and next_query - j > WINDOW)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reference", required=True, help=f"checkout of NVIDIA/Model-Optimizer at {REF_COMMIT}")
    a = ap.parse_args()
    ref_dir = os.path.abspath(a.reference)
    sys.path.insert(0, os.path.join(ref_dir, "experimental", "dms"))
    from dms import attention, attention_prefill, core  # the reference's modules
    from dms import cache as cache_mod

    ref = (core, attention, attention_prefill, cache_mod)
    fake = fake_flash_attn(ref_dir)
    path = goldens_env.fixture(MODEL)
    probe = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", dtype=torch.float32)
    alpha = draw_alpha(probe, 5306)
    alpha_rel = "policies/dms_alpha_tiny-qwen3.safetensors"
    save_file({k: v.contiguous() for k, v in alpha.items()}, goldens_env.fixture(alpha_rel))
    vocab = probe.config.vocab_size
    gen = torch.Generator().manual_seed(2506)
    for attempt in range(50):
        prompt = [1] + torch.randint(3, vocab, (PROMPT_LEN - 1,), generator=gen).tolist()
        forced = torch.randint(3, vocab, (N_FORCED,), generator=gen).tolist()
        model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", dtype=torch.float32).eval()
        step_logits, dlog, counts = run(ref, fake, model, alpha, prompt, forced)
        margin = min(abs(x) for layer in dlog for head in layer for x in head)
        if margin > MARGIN:
            break
        print(f"  attempt {attempt}: decision margin {margin:.2e} too small")
    else:
        raise RuntimeError("no prompt with clear decision margins")
    P = len(prompt)
    held = []  # after the prompt and after each decode token: [layer][head] positions the next query reads
    for s in range(N_FORCED + 1):
        last = P - 1 + s
        held.append([[readable(dlog[layer][h], last, last + 1) for h in range(len(dlog[layer]))]
                     for layer in range(len(dlog))])
    # The reference's own cache: after decode token s (position P - 1 + s) it holds what that query read.
    for s in range(1, N_FORCED + 1):
        last = P - 1 + s
        for layer in range(len(dlog)):
            for h in range(len(dlog[layer])):
                want = len(readable(dlog[layer][h], last, last))
                assert counts[s - 1][layer][h] == want, (s, layer, h, counts[s - 1][layer][h], want)
    marked = sum(x > 0 for layer in dlog for head in layer for x in head[1:])
    total = sum(len(head) - 1 for layer in dlog for head in layer)
    print(f"  {marked}/{total} tokens marked, margin {margin:.3f}, final held "
          f"{[[len(h) for h in layer] for layer in held[-1]]}")
    # marks[layer][head][j] = "1" when token j is marked (by the decision of token j + 1); the test
    # derives every step's readable set from them, and checks it against `held` at HELD_STEPS.
    marks = [["".join("1" if j + 1 < len(head) and head[j + 1] > 0 else "0" for j in range(len(head)))
              for head in layer] for layer in dlog]
    goldens_env.write_json(OUT, generator="tools/gen_dms_goldens.py",
                           reference=f"NVIDIA/Model-Optimizer@{REF_COMMIT} experimental/dms",
                           torch=torch.__version__, transformers=transformers.__version__,
                           models=[dict(model=MODEL, alpha=alpha_rel,
                                        spec=f"dms:alpha={{alpha}},window={WINDOW},scale={SCALE:g},offset={OFFSET:g}",
                                        prompt=prompt, forced=forced, margin=margin,
                                        logits=[[float(f"{x:.7g}") for x in row] for row in step_logits],
                                        marks=marks, held={str(s): held[s] for s in HELD_STEPS})])


if __name__ == "__main__":
    main()
