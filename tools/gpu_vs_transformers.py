#!/usr/bin/env python3
"""kvbench's CUDA backend against transformers on the same GPU, same cases: one TSV.

Run by tools/gpu_check.sh (step `vs_transformers`) on the lent GPU machine, which has python3
with torch and transformers but no network. For every case "CONTEXT BATCH POLICY [BUDGET]":

1. kvbench: ONE `kvbench bench --backend cuda --model-shape qwen3-8b --case ... --json FILE`
   process runs every case on one set of random bf16 weights (the weights are generated once);
   prefill tok/s, decode tok/s and the decode roofline % come from its JSON (the roofline % is
   the device report's achieved weights + KV bytes per decode step over the copy-kernel bandwidth
   it measures, kvb_cuda_check bandwidth's roofline).
2. transformers: Qwen3ForCausalLM of the same shape built from a Qwen3Config in Python (hidden
   4096, intermediate 12288, 36 layers, 32 heads, 8 kv heads, head_dim 128, vocab 151936,
   rope_theta 1e6, rms_norm_eps 1e-6, untied embeddings, q/k norms as Qwen3 has them), random
   weights as transformers initialises them, bf16, SDPA attention, DynamicCache; nothing is
   downloaded. Prefill: one forward over the whole prompt (batch × context tokens) keeping the
   last token's logits only (logits_to_keep / num_logits_to_keep, else the LM head on the last
   hidden state); decode: gen − 1 greedy steps with the cache, timed after the first token as
   kvbench times them (decode tok/s = batch × (gen − 1) / seconds). A warm-up at the case's batch
   comes first; the median of --reps timed runs (one for cases of 64K prompt tokens or more).
   transformers always runs the full cache (it has no TRIM-KV): the policy column is kvbench's.
   A case transformers cannot hold writes `oom` in its two cells (torch's OutOfMemoryError, or a
   RuntimeError saying out of memory, caught per case); any other failure of a case writes
   `error` (traceback in the log) and the next case still runs; a failed kvbench writes `error`
   in its cells (exit 1).
3. Writes the TSV: context batch policy kvbench_prefill_tok_s hf_prefill_tok_s
   kvbench_decode_tok_s hf_decode_tok_s decode_roofline_pct, one row per case in case order.

Dry run on a CPU (tests the case handling, the join and the TSV, not the speed):
    python3 tools/gpu_vs_transformers.py --device cpu --tiny --kvbench build/kvbench --out /tmp/v.tsv
(--tiny: the stories260K shape for both, kvbench on its CPU backend); --kvbench-json FILE joins an
existing kvbench JSON instead of running kvbench; --no-hf leaves the transformers cells `-`.
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

DEFAULT_CASES = "8192 1 full; 2048 64 full; 32768 4 trimkv:random_gates=0 1024; 32768 1 full"
COLUMNS = ["context", "batch", "policy", "kvbench_prefill_tok_s", "hf_prefill_tok_s", "kvbench_decode_tok_s",
           "hf_decode_tok_s", "decode_roofline_pct"]
ROOFLINE = re.compile(r"roofline [0-9.]+ GB/s \(copy kernel\), ([0-9.]+)%")


class CaseError(ValueError):
    """A malformed --cases entry."""


def parse_cases(text):
    """Cases "CONTEXT BATCH POLICY [BUDGET]" separated by ';' or newlines -> list of dicts.

    Raises CaseError naming the entry for a wrong field count or a non-positive number."""
    cases = []
    for raw in re.split(r"[;\n]", text):
        f = raw.split()
        if not f:
            continue
        if len(f) not in (3, 4):
            raise CaseError(f"--cases: '{raw.strip()}': expected CONTEXT BATCH POLICY [BUDGET]")
        try:
            ctx, batch = int(f[0]), int(f[1])
            budget = int(f[3]) if len(f) == 4 else 0
        except ValueError:
            raise CaseError(f"--cases: '{raw.strip()}': CONTEXT, BATCH and BUDGET must be integers") from None
        if ctx < 1 or batch < 1 or budget < 0:
            raise CaseError(f"--cases: '{raw.strip()}': CONTEXT and BATCH must be >= 1, BUDGET >= 0")
        cases.append({"context": ctx, "batch": batch, "policy": f[2], "budget": budget})
    if not cases:
        raise CaseError("--cases: no case given")
    return cases


def policy_label(case):
    """kvbench's policy column: "full", or "spec@budget" when a budget is set."""
    return case["policy"] + (f"@{case['budget']}" if case["budget"] else "")


def kvbench_command(kvbench, cases, gen, tiny, json_path, prefill_chunk=4096):
    """The one kvbench bench invocation that runs every case (prompt tokens per sequence per
    prefill step: `prefill_chunk`; transformers prefills each prompt in one forward)."""
    cmd = [kvbench, "bench", "--backend", "cpu" if tiny else "cuda", "--model-shape",
           "stories260k" if tiny else "qwen3-8b", "--json", json_path, "--prefill-chunk", str(prefill_chunk)]
    for c in cases:
        cmd += ["--case", f"{c['context']} {gen} {c['batch']} {c['policy']} {c['budget']}"]
    return cmd


def kvbench_cells(rows, case):
    """(prefill, decode, roofline %) of `case` from kvbench's JSON rows, or None when absent."""
    for r in rows:
        if (r.get("context"), r.get("batch"), r.get("policy"), r.get("budget", 0)) == (
                case["context"], case["batch"], case["policy"], case["budget"]):
            m = ROOFLINE.search(r.get("device", {}).get("decode", ""))
            return r["prefill_tok_s"], r["decode_tok_s"], float(m.group(1)) if m else None
    return None


def fmt(v):
    """A TSV cell: numbers with one decimal, strings ("oom", "error", "-") as they are."""
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    return f"{v:.1f}" if math.isfinite(v) else "-"


def write_tsv(path, cases, kv, hf):
    """Writes the TSV: `kv[i]` (prefill, decode, roofline) or a string for all three cells, `hf[i]`
    (prefill, decode) or a string for both."""
    lines = ["\t".join(COLUMNS)]
    for i, c in enumerate(cases):
        k = kv[i] if isinstance(kv[i], tuple) else (kv[i],) * 3
        h = hf[i] if isinstance(hf[i], tuple) else (hf[i],) * 2
        lines.append("\t".join([str(c["context"]), str(c["batch"]), policy_label(c), fmt(k[0]), fmt(h[0]),
                                fmt(k[1]), fmt(h[1]), fmt(k[2])]))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def run_kvbench(a, cases):
    """Runs kvbench once over all cases (or reads --kvbench-json); returns one cell tuple or
    "error" per case."""
    if a.kvbench_json:
        with open(a.kvbench_json) as f:
            rows = json.load(f).get("rows", [])
    else:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "kvbench.json")
            cmd = kvbench_command(a.kvbench, cases, a.gen, a.tiny, path, a.prefill_chunk)
            print("kvbench:", " ".join(f"'{w}'" if " " in w else w for w in cmd), flush=True)
            t0 = time.time()
            r = subprocess.run(cmd)
            print(f"kvbench: exit {r.returncode} after {time.time() - t0:.0f} s", flush=True)
            rows = []
            if os.path.exists(path):
                with open(path) as f:
                    rows = json.load(f).get("rows", [])
    out = []
    for c in cases:
        cells = kvbench_cells(rows, c)
        out.append(cells if cells else "error")
    return out


def qwen3_8b_config(tiny):
    """The Qwen3-8B shape (or the stories260K-sized --tiny one) as a transformers Qwen3Config."""
    from transformers import Qwen3Config
    shape = dict(vocab_size=512, hidden_size=64, intermediate_size=172, num_hidden_layers=5, num_attention_heads=8,
                 num_key_value_heads=4, head_dim=8) if tiny else dict(
        vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128)
    cfg = Qwen3Config(**shape, rope_theta=1e6, rms_norm_eps=1e-6, max_position_embeddings=40960,
                      tie_word_embeddings=False, use_sliding_window=False)
    rp = getattr(cfg, "rope_parameters", None)  # transformers 5 keeps rope_theta here
    if isinstance(rp, dict):
        rp["rope_theta"] = 1e6
    cfg._attn_implementation = "sdpa"
    return cfg


class HF:
    """transformers' Qwen3ForCausalLM with random weights on `device`, and its timed runs."""

    def __init__(self, tiny, device):
        import inspect

        import torch
        import transformers
        from transformers import Qwen3ForCausalLM

        transformers.utils.logging.set_verbosity_error()
        self.torch, self.device = torch, device
        self.dtype = torch.bfloat16 if device == "cuda" else torch.float32
        self.cfg = qwen3_8b_config(tiny)
        t0 = time.time()
        prev = torch.get_default_dtype()
        torch.set_default_dtype(self.dtype)
        try:
            with torch.device(device):
                self.model = Qwen3ForCausalLM(self.cfg)
        finally:
            torch.set_default_dtype(prev)
        self.model.eval()
        params = inspect.signature(self.model.forward).parameters
        self.keep = ({"logits_to_keep": 1} if "logits_to_keep" in params else
                     {"num_logits_to_keep": 1} if "num_logits_to_keep" in params else None)
        print(f"transformers {transformers.__version__}, torch {torch.__version__}, {device}, {self.dtype}, "
              f"attention {self.model.config._attn_implementation}, last-token logits via "
              f"{next(iter(self.keep)) if self.keep else 'lm_head on the last hidden state'}; "
              f"model built in {time.time() - t0:.1f} s", flush=True)

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def prefill(self, ids):
        """One forward over the prompt; returns (cache, next token ids [B, 1])."""
        from transformers import DynamicCache
        cache = DynamicCache()
        if self.keep is not None:
            o = self.model(input_ids=ids, past_key_values=cache, use_cache=True, **self.keep)
            logits = o.logits[:, -1]
            cache = o.past_key_values
        else:
            o = self.model.model(input_ids=ids, past_key_values=cache, use_cache=True)
            logits = self.model.lm_head(o.last_hidden_state[:, -1])
            cache = o.past_key_values
        return cache, logits.argmax(-1, keepdim=True)

    def run(self, context, batch, gen, seed):
        """One timed prefill + gen − 1 greedy decode steps: (prefill tok/s, decode tok/s)."""
        torch = self.torch
        g = torch.Generator(device=self.device).manual_seed(seed)
        ids = torch.randint(0, self.cfg.vocab_size, (batch, context), generator=g, device=self.device)
        with torch.inference_mode():
            self.sync()
            t0 = time.perf_counter()
            cache, nxt = self.prefill(ids)
            self.sync()
            t1 = time.perf_counter()
            for _ in range(gen - 1):
                o = self.model(input_ids=nxt, past_key_values=cache, use_cache=True)
                cache, nxt = o.past_key_values, o.logits[:, -1].argmax(-1, keepdim=True)
            self.sync()
            t2 = time.perf_counter()
        del cache, nxt, ids
        return batch * context / (t1 - t0), (batch * (gen - 1) / (t2 - t1)) if gen > 1 else 0.0

    def case(self, c, gen, reps):
        """(prefill, decode) medians of the case, or "oom"."""
        torch = self.torch
        oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
        try:
            self.run(min(c["context"], 256), c["batch"], min(gen, 3), seed=0)  # warm-up at this batch
            n = 1 if c["context"] * c["batch"] >= 65536 else reps
            runs = [self.run(c["context"], c["batch"], gen, seed=i + 1) for i in range(n)]
            return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        except oom:
            return "oom"
        except RuntimeError as e:  # cuBLAS / cuDNN allocation failures arrive as RuntimeError
            if "out of memory" in str(e) or "ALLOC_FAILED" in str(e):
                return "oom"
            traceback.print_exc()
            return "error"
        except Exception:  # one broken case must not lose the others' cells
            traceback.print_exc()
            return "error"
        finally:
            import gc
            gc.collect()
            if self.device == "cuda":
                torch.cuda.empty_cache()


def main(argv=None):
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvbench", default=os.path.join(here, "build", "kvbench"), help="the kvbench binary")
    ap.add_argument("--kvbench-json", help="join this kvbench bench --json output instead of running kvbench")
    ap.add_argument("--out", required=True, help="the TSV to write")
    ap.add_argument("--cases", default=DEFAULT_CASES, help=f"'CONTEXT BATCH POLICY [BUDGET]; ...' (default: {DEFAULT_CASES})")
    ap.add_argument("--prefill-chunk", type=int, default=4096,
                    help="kvbench's --prefill-chunk (prompt tokens per sequence per prefill step)")
    ap.add_argument("--gen", type=int, default=32, help="generated tokens per sequence (decode steps + 1)")
    ap.add_argument("--reps", type=int, default=3, help="transformers: timed runs per case (median; 1 at >= 64K tokens)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="transformers' device")
    ap.add_argument("--tiny", action="store_true", help="the stories260K shape on both sides (dry run; kvbench on cpu)")
    ap.add_argument("--no-hf", action="store_true", help="skip transformers (its cells are '-')")
    a = ap.parse_args(argv)
    if a.gen < 2:
        ap.error("--gen: must be >= 2 (one decode step at least)")
    if a.reps < 1:
        ap.error("--reps: must be >= 1")
    try:
        cases = parse_cases(a.cases)
    except CaseError as e:
        ap.error(str(e))
    t0 = time.time()
    kv = run_kvbench(a, cases)  # first, in its own process: the GPU is free again for transformers
    hf = ["-"] * len(cases)
    write_tsv(a.out, cases, kv, hf)  # kvbench's half survives a transformers failure
    if not a.no_hf:
        model = HF(a.tiny, a.device)
        for i, c in enumerate(cases):
            t = time.time()
            hf[i] = model.case(c, a.gen, a.reps)
            print(f"transformers: {c['context']} x {c['batch']}: {hf[i]} ({time.time() - t:.0f} s)", flush=True)
            write_tsv(a.out, cases, kv, hf)
    with open(a.out) as f:
        sys.stdout.write(f.read())
    print(f"vs_transformers: {a.out} in {time.time() - t0:.0f} s", flush=True)
    return 1 if any(k == "error" for k in kv) or any(h == "error" for h in hf) else 0


if __name__ == "__main__":
    sys.exit(main())
