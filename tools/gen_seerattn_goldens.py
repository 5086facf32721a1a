#!/usr/bin/env python3
"""Generate SeerAttention-R block-selection goldens and AttnGate checkpoints (tests/fixtures/policies/seerattn_*).

How to run (from the repository root; tools/goldens_venv.sh makes the venv):

    .venv-goldens/bin/python tools/gen_seerattn_goldens.py

What it writes, for each tiny random-weight model of tools/gen_engine_goldens.py
(tests/fixtures/models/tiny-llama3, tiny-qwen3: q/k RMSNorm):
  * tests/fixtures/policies/seerattn_<model>/attn_gate_weights.pth — seeded AttnGates in the
    released layout (SeerAttention/SeerAttention-Decode-Qwen3-*-AttnGates: a torch.save state dict
    of model.layers.{l}.self_attn.attn_gate.attngate_linear_q.weight [Hkv, G, D, d] (Qproj) or
    [Hkv, D, d] (Qavgproj), attngate_linear_k.weight [Hkv, n_pool*D, d], attngate_qnorm.weight [d],
    attngate_knorm.weight [d]; BF16 as released), plus config.json (the model's config with the
    seerattn_* keys and base_model, as the released repos hold it). The two fixtures cover two gate
    types: tiny-qwen3 the released one (Qproj, Kmaxminavg, qk norm, RoPE), tiny-llama3 Qavgproj,
    Kmaxavg, no qk norm. Block size 16 (the reference accepts 16, 32, 64) so that the short test
    sequences span several blocks; gate width d = head_dim (the gate's RoPE uses the model's);
  * tests/fixtures/policies/seerattn_<model>/gates.safetensors — the same tensors;
  * tests/fixtures/policies/seerattn_goldens.json — per model: prompt, forced decode tokens,
    budget, and for every decode step the blocks each (layer, kv head) reads, and the logits of
    some steps.

The golden is a float64 restatement of SeerAttention-R's decode path (microsoft/SeerAttention @
aba03e3: seer_attn/decode_sparse/attn_gate_inf.py AttnGate.forward and
get_sparse_attn_mask_from_budget, cache_utils.py KCompressionCache, qwen3/
modeling_qwen3_seerattn_inference.py), with its own forward pass of the model (weights from the
model's safetensors in float64; RoPE frequencies and attention scaling from transformers' rotary
embedding), checked against transformers' own forward with every block read:
  the prompt is attended densely; its complete blocks get gate keys rotated at their first
  token's position, the partial block the zero key; at each decode step (teacher-forced) the new
  token's key joins its block, and a block it completes gets a key rotated at that token's position;
  gate query: Qproj sum over the group of W_q[h, g]^T q_g (Qavgproj: W_q[h]^T mean_g q_g) of the
  queries before RoPE, RMSNorm (eps 1e-6) when use_qk_norm, RoPE at the token's position;
  gate key: W_k[h]^T [pools of the block's keys before RoPE, in the gate type's order], RMSNorm,
  RoPE; score q~.k~/sqrt(d); with n blocks and k = budget // B: every block when n <= k, else the
  top-k and the newest block; the attention of the group's query heads reads only those blocks.
Ties: the seeded prompt is accepted only when at every sparse selection the k-th and (k+1)-th
scores differ by more than 1e-4 relative to the largest |score| of that head, and when some
selections hold the newest block among the top-k (k blocks) and some beside it (k + 1 blocks).
"""
import json
import os

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

import goldens_env

from gen_locret_goldens import qkv_proj, rms, rope  # float64 RMSNorm, q/k/v, rotate-half RoPE, shared

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "policies")
# model, gate type (q pooling, k pooling, qk norm), seed
MODELS = [("models/tiny-llama3", "Qavgproj", ["max", "avg"], False, 51),
          ("models/tiny-qwen3", "Qproj", ["max", "min", "avg"], True, 52)]
PROMPT_LEN = 90
FORCED = 45
BLOCK = 16
BUDGET = 48
START_LAYER = 0
MARGIN = 1e-4
LOGIT_STEPS = list(range(0, FORCED + 1, 9)) + [FORCED]
torch.set_grad_enabled(False)


POOL = {"max": lambda k: k.max(0).values, "min": lambda k: k.min(0).values, "avg": lambda k: k.mean(0)}


class Restatement:
    """SeerAttention-R decoding on the model, float64, teacher-forced."""

    def __init__(self, model_dir, gates, qpool, kpool, qk_norm):
        cfg = json.load(open(os.path.join(model_dir, "config.json")))
        self.w = {k: v.double() for k, v in load_file(os.path.join(model_dir, "model.safetensors")).items()}
        self.L, self.Hq, self.Hk = cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.D, self.eps = cfg["head_dim"], cfg["rms_norm_eps"]
        self.G = self.Hq // self.Hk
        hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        self.inv_freq = hf.model.rotary_emb.inv_freq.double()
        self.scale = float(hf.model.rotary_emb.attention_scaling)
        self.hf = hf
        self.gates = gates
        self.qpool, self.kpool, self.qk_norm = qpool, kpool, qk_norm

    def lw(self, l, name):
        return self.w.get(f"model.layers.{l}.{name}")

    def gw(self, l, name):
        return self.gates.get(f"model.layers.{l}.self_attn.attn_gate.{name}")

    def qkv(self, l, x):
        return qkv_proj(self.lw, l, x, self.Hq, self.Hk, self.D, self.eps)

    def mlp(self, l, x):
        xn = rms(x, self.lw(l, "post_attention_layernorm.weight"), self.eps)
        gate = xn @ self.lw(l, "mlp.gate_proj.weight").T
        up = xn @ self.lw(l, "mlp.up_proj.weight").T
        return x + (torch.nn.functional.silu(gate) * up) @ self.lw(l, "mlp.down_proj.weight").T

    def block_key(self, l, h, knope, pos):
        """Gate key of one block: knope [B, D] before RoPE, rotated at `pos`."""
        pooled = torch.cat([POOL[p](knope) for p in self.kpool])
        kc = pooled @ self.gw(l, "attngate_linear_k.weight")[h]
        if self.qk_norm:
            kc = rms(kc, self.gw(l, "attngate_knorm.weight"), 1e-6)
        return rope(kc[None, :], torch.tensor([pos]), self.inv_freq, self.scale)[0]

    def gate_query(self, l, h, qnope, pos):
        """Gate query of kv head h from the group's queries before RoPE qnope [G, D]."""
        if self.qpool == "Qproj":
            qg = torch.einsum("gi,gio->o", qnope, self.gw(l, "attngate_linear_q.weight")[h])
        else:
            qg = qnope.mean(0) @ self.gw(l, "attngate_linear_q.weight")[h]
        if self.qk_norm:
            qg = rms(qg, self.gw(l, "attngate_qnorm.weight"), 1e-6)
        return rope(qg[None, :], torch.tensor([pos]), self.inv_freq, self.scale)[0]

    def run(self, prompt, forced, budget, sparse=True):
        """Blocks read [step][layer][head], logits after the prompt and each forced token, and the
        smallest relative top-k margin seen."""
        emb = self.w["model.embed_tokens.weight"]
        P = len(prompt)
        kb = budget // BLOCK
        # prefill, dense
        x = emb[torch.tensor(prompt)]
        pos = torch.arange(P)
        K, V, KN, BK = [], [], [], []  # per layer: [Hk, T, D] rotated keys, values, keys before RoPE; block keys
        for l in range(self.L):
            q, k, v = self.qkv(l, x)
            qr = rope(q.transpose(0, 1), pos, self.inv_freq, self.scale)
            kr = rope(k.transpose(0, 1), pos, self.inv_freq, self.scale)
            vv = v.transpose(0, 1)
            kv_g = kr.repeat_interleave(self.G, 0)
            vv_g = vv.repeat_interleave(self.G, 0)
            logits = qr @ kv_g.transpose(1, 2) / self.D ** 0.5
            logits = logits.masked_fill(torch.triu(torch.ones(P, P, dtype=torch.bool), 1), float("-inf"))
            out = torch.softmax(logits, -1) @ vv_g  # [Hq, P, D]
            x = x + out.transpose(0, 1).reshape(P, -1) @ self.lw(l, "self_attn.o_proj.weight").T
            x = self.mlp(l, x)
            K.append(kr), V.append(vv), KN.append(k.transpose(0, 1))
            BK.append([[self.block_key(l, h, KN[l][h, b * BLOCK:(b + 1) * BLOCK], b * BLOCK) for b in range(P // BLOCK)]
                       for h in range(self.Hk)])
        xf = rms(x[-1], self.w["model.norm.weight"], self.eps)
        all_logits = [xf @ self.w["lm_head.weight"].T]
        reads, margin = [], float("inf")
        for s, tok in enumerate(forced):
            t = P + s
            x = emb[torch.tensor([tok])]
            step_reads = []
            for l in range(self.L):
                q, k, v = self.qkv(l, x)
                qr = rope(q.transpose(0, 1), torch.tensor([t]), self.inv_freq, self.scale)  # [Hq, 1, D]
                kr = rope(k.transpose(0, 1), torch.tensor([t]), self.inv_freq, self.scale)
                K[l] = torch.cat([K[l], kr], 1)
                V[l] = torch.cat([V[l], v.transpose(0, 1)], 1)
                KN[l] = torch.cat([KN[l], k.transpose(0, 1)], 1)
                Lh = t + 1
                if Lh % BLOCK == 0:  # a decode token completes a block: rotated at its own position
                    for h in range(self.Hk):
                        BK[l][h].append(self.block_key(l, h, KN[l][h, Lh - BLOCK:Lh], t))
                n_blocks = (Lh + BLOCK - 1) // BLOCK
                out = torch.zeros(self.Hq, self.D, dtype=torch.float64)
                layer_reads = []
                for h in range(self.Hk):
                    if not sparse or l < START_LAYER or n_blocks <= kb:
                        sel = list(range(n_blocks))
                    else:
                        qg = self.gate_query(l, h, q[0, h * self.G:(h + 1) * self.G], t)
                        sc = torch.zeros(n_blocks, dtype=torch.float64)
                        for b, key in enumerate(BK[l][h]):
                            sc[b] = qg @ key / self.D ** 0.5
                        order = torch.argsort(sc, descending=True, stable=True)
                        srt = sc[order]
                        margin = min(margin, float((srt[kb - 1] - srt[kb]) / sc.abs().max()))
                        sel = sorted(set(order[:kb].tolist()) | {n_blocks - 1})
                    layer_reads.append(sel)
                    idx = torch.cat([torch.arange(b * BLOCK, min((b + 1) * BLOCK, Lh)) for b in sel])
                    for g in range(self.G):
                        hq = h * self.G + g
                        lg = qr[hq, 0] @ K[l][h, idx].T / self.D ** 0.5
                        out[hq] = torch.softmax(lg, -1) @ V[l][h, idx]
                step_reads.append(layer_reads)
                x = x + out.reshape(1, -1) @ self.lw(l, "self_attn.o_proj.weight").T
                x = self.mlp(l, x)
            reads.append(step_reads)
            xf = rms(x[-1], self.w["model.norm.weight"], self.eps)
            all_logits.append(xf @ self.w["lm_head.weight"].T)
        return reads, torch.stack(all_logits), margin


def make_gates(cfg, qpool, kpool, qk_norm, seed):
    gen = torch.Generator().manual_seed(seed)
    Hq, Hk, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    G, d = Hq // Hk, D
    gates = {}
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}.self_attn.attn_gate."
        shape = [Hk, G, D, d] if qpool == "Qproj" else [Hk, D, d]
        gates[p + "attngate_linear_q.weight"] = (torch.randn(*shape, generator=gen) * 0.3).to(torch.bfloat16)
        gates[p + "attngate_linear_k.weight"] = (torch.randn(Hk, len(kpool) * D, d, generator=gen) * 0.3).to(torch.bfloat16)
        if qk_norm:
            gates[p + "attngate_qnorm.weight"] = (1 + 0.2 * torch.randn(d, generator=gen)).to(torch.bfloat16)
            gates[p + "attngate_knorm.weight"] = (1 + 0.2 * torch.randn(d, generator=gen)).to(torch.bfloat16)
    return gates


def golden_for(model, qpool, kpool, qk_norm, seed):
    model_dir = os.path.join(ROOT, "tests", "fixtures", model)
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    gates = make_gates(cfg, qpool, kpool, qk_norm, seed)
    r = Restatement(model_dir, {k: v.double() for k, v in gates.items()}, qpool, kpool, qk_norm)
    gen = torch.Generator().manual_seed(seed)
    for attempt in range(200):
        toks = [1] + torch.randint(3, cfg["vocab_size"], (PROMPT_LEN + FORCED - 1,), generator=gen).tolist()
        prompt, forced = toks[:PROMPT_LEN], toks[PROMPT_LEN:]
        if attempt == 0:  # the restated forward must be the model's: every block read vs transformers
            _, mine, _ = r.run(prompt, forced, BUDGET, sparse=False)
            ref = r.hf(torch.tensor([toks])).logits[0, PROMPT_LEN - 1:].double()
            err = float((mine - ref).abs().max() / ref.abs().max())
            assert err < 1e-4, f"{model}: restated forward differs from transformers by {err}"
            print(f"{model}: restated forward vs transformers (f32): max rel err {err:.2e}")
        reads, logits, margin = r.run(prompt, forced, BUDGET)
        sizes = [len(hd) for s, st in enumerate(reads) for ly in st for hd in ly
                 if len(hd) < (PROMPT_LEN + s + BLOCK) // BLOCK]
        kb = BUDGET // BLOCK
        if margin > MARGIN and kb in sizes and kb + 1 in sizes:
            break
        print(f"{model} prompt {attempt}: margin {margin:.2e}, sparse selection sizes {sorted(set(sizes))}: rejected")
    else:
        raise RuntimeError(f"{model}: no prompt with clear margins")
    _, dense, _ = r.run(prompt, forced, BUDGET, sparse=False)
    diff = float((logits - dense).abs().max())
    assert diff > 1e-3, f"{model}: the sparse reads do not change the logits ({diff})"
    out = os.path.join(OUT_DIR, "seerattn_" + model.split("/")[-1])
    os.makedirs(out, exist_ok=True)
    torch.save(gates, os.path.join(out, "attn_gate_weights.pth"))
    save_file(gates, os.path.join(out, "gates.safetensors"))
    gcfg = dict(cfg)
    gcfg.update(base_model=model, seerattn_gate_block_size=BLOCK, seerattn_gate_hidden_size=cfg["head_dim"],
                seerattn_q_head_pooling_type=qpool, seerattn_k_seq_pooling_type="K" + "".join(kpool),
                seerattn_use_qk_norm=qk_norm, seerattn_use_rope=True, seerattn_sparsity_method="token_budget",
                seerattn_token_budget=4096, seerattn_start_layer=0)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(gcfg, f, indent=2)
    sparse = sum(len(hd) < (PROMPT_LEN + s + BLOCK) // BLOCK for s, st in enumerate(reads) for ly in st for hd in ly)
    print(f"{model}: prompt {attempt}, min margin {margin:.2e}, {sparse} sparse selections, "
          f"sparse vs dense logits max diff {diff:.3f}")
    return dict(model=model, gates="policies/" + os.path.basename(out), budget=BUDGET, block=BLOCK,
                start_layer=START_LAYER, prompt=prompt, forced=forced, reads=reads,
                logit_steps=LOGIT_STEPS, logits=[[round(float(v), 6) for v in logits[i]] for i in LOGIT_STEPS],
                min_margin=margin)


def main():
    goldens = [golden_for(*m) for m in MODELS]
    path = os.path.join(OUT_DIR, "seerattn_goldens.json")
    goldens_env.write_json(path, generator="tools/gen_seerattn_goldens.py", reference="microsoft/SeerAttention@aba03e3",
                           torch=torch.__version__, models=goldens)


if __name__ == "__main__":
    main()
