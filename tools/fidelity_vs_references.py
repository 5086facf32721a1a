#!/usr/bin/env python3
"""kvbench's engine against references that are not ours, on one GGUF file (docs/fidelity.md).

For each of N GSM8K test questions rendered with the model's chat template:

1. **Chat-template token ids**: transformers' `apply_chat_template(tokenize=True,
   add_generation_prompt=True)` with the tokenizer transformers builds from the GGUF, against the
   prompt ids `kvbench generate --chat --json` used.
2. **transformers** (`AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)`, dequantised to
   f32, eager attention) against `kvbench generate --weights f32`: greedy continuations of
   `--max-new-tokens` tokens. Reported per prompt: identical or the first diverging position,
   transformers' top-1 minus top-2 logit there (a divergence is a near-tie when it is < 0.1), and
   the largest |logit difference| of the top-1 token over the positions before it.
3. **llama.cpp** (optional, `--llamacpp-python`: a Python with llama-cpp-python built from its
   PyPI sdist, as tools/bench_vs_llamacpp.sh builds llama.cpp) against `kvbench generate` with the
   weights as stored (GGUF blocks multiplied in place, as llama.cpp does): the same greedy
   comparison, the margins taken from llama.cpp's own logits.

Prints a table and writes JSON (`--out`). Runs in the goldens virtualenv (tools/goldens_venv.sh;
`KVB_GOLDENS_VENV` names another folder).

    python3 tools/fidelity_vs_references.py --gguf ~/.cache/kvbench/models/qwen2.5-coder-1.5b-instruct/\
qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --data build/test-data/datasets/gsm8k/test.jsonl --n 10
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _ensure_env():
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        import gguf  # noqa: F401
    except ImportError:
        venv = os.environ.get("KVB_GOLDENS_VENV", os.path.join(REPO, ".venv-goldens"))
        py = os.path.join(venv, "bin", "python")
        if os.path.exists(py) and os.path.realpath(sys.executable) != os.path.realpath(py):
            os.execv(py, [py] + sys.argv)
        sys.exit("fidelity_vs_references: needs torch, transformers, gguf: run tools/goldens_venv.sh")


def questions(path, n):
    out = []
    with open(path) as f:
        for line in f:
            if line.strip():
                out.append(json.loads(line)["question"])
            if len(out) == n:
                break
    return out


def kvbench_generate(kvbench, gguf, q, weights, max_new):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as t:
        path = t.name
    try:
        cmd = [kvbench, "generate", "--model", gguf, "--chat", "--prompt", q, "--max-new-tokens", str(max_new),
               "--temperature", "0", "--weights", weights, "--json", path]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"kvbench generate failed: {r.stderr}")
        with open(path) as f:
            return json.load(f)
    finally:
        os.unlink(path)


def compare(ours, theirs_ids, theirs_logits):
    """ours: kvbench JSON; theirs_ids: generated ids; theirs_logits: per position list of (top1, top2,
    top1_id, logit of ours' token there) or None. Returns a row."""
    a, b = ours["ids"], theirs_ids
    n = min(len(a), len(b))
    div = next((i for i in range(n) if a[i] != b[i]), None)
    if div is None and len(a) != len(b):
        div = n
    row = {"ours_len": len(a), "theirs_len": len(b), "identical": div is None, "first_divergence": div}
    upto = n if div is None else div
    if theirs_logits is not None:
        diffs = [abs(ours["top_logits"][i][0][1] - theirs_logits[i]["top1"]) for i in range(min(upto, len(theirs_logits)))]
        row["max_abs_top1_logit_diff"] = max(diffs) if diffs else 0.0
        if div is not None and div < len(theirs_logits):
            t = theirs_logits[div]
            row["their_margin_at_divergence"] = t["top1"] - t["top2"]
            row["our_margin_at_divergence"] = ours["top_logits"][div][0][1] - ours["top_logits"][div][1][1]
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--kvbench", default=os.path.join(REPO, "build", "kvbench"))
    ap.add_argument("--data", default=os.path.join(REPO, "build", "test-data", "datasets", "gsm8k", "test.jsonl"))
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--skip-transformers", action="store_true")
    ap.add_argument("--llamacpp-python", default="", help="python with llama_cpp importable")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    _ensure_env()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(a.threads)
    qs = questions(a.data, a.n)
    d, f = os.path.dirname(os.path.abspath(a.gguf)), os.path.basename(a.gguf)
    report = {"gguf": a.gguf, "n": len(qs), "max_new_tokens": a.max_new_tokens, "prompts": []}

    t0 = time.time()
    ours_stored = [kvbench_generate(a.kvbench, a.gguf, q, "stored", a.max_new_tokens) for q in qs]
    ours_f32 = ours_stored if a.skip_transformers else [
        kvbench_generate(a.kvbench, a.gguf, q, "f32", a.max_new_tokens) for q in qs]
    print(f"kvbench: {time.time() - t0:.0f} s", file=sys.stderr)

    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    rows = [{"question": q[:60]} for q in qs]
    for i, q in enumerate(qs):
        ids = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        rows[i]["chat_ids_equal"] = list(ids) == ours_stored[i]["prompt_ids"]
        rows[i]["prompt_tokens"] = len(ids)

    if not a.skip_transformers:
        t0 = time.time()
        model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=torch.float32,
                                                     attn_implementation="eager")
        model.eval()
        gen_eos = model.generation_config.eos_token_id
        report["transformers_eos"] = gen_eos
        print(f"transformers load: {time.time() - t0:.0f} s", file=sys.stderr)
        for i, q in enumerate(qs):
            ids = torch.tensor([ours_f32[i]["prompt_ids"]])
            with torch.no_grad():
                out = model.generate(ids, max_new_tokens=a.max_new_tokens, do_sample=False, output_logits=True,
                                     return_dict_in_generate=True, pad_token_id=tok.pad_token_id or 0)
            gen = out.sequences[0, ids.shape[1]:].tolist()
            lg = []
            for step in out.logits:
                v, _ = torch.topk(step[0].float(), 2)
                lg.append({"top1": float(v[0]), "top2": float(v[1])})
            rows[i]["transformers"] = compare(ours_f32[i], gen, lg)
            print(f"prompt {i}: transformers {rows[i]['transformers']}", file=sys.stderr)
        del model

    if a.llamacpp_python:
        code = r"""
import json, sys
import numpy as np
from llama_cpp import Llama
cfg = json.load(sys.stdin)
llm = Llama(model_path=cfg["gguf"], n_ctx=1024, n_threads=cfg["threads"], logits_all=True, verbose=False)
res = []
for p in cfg["prompts"]:
    llm.reset()
    llm.eval(p)
    ids, lg = [], []
    for _ in range(cfg["max_new"]):
        row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        o = np.argsort(-row, kind="stable")[:2]
        t = int(o[0])
        ids.append(t); lg.append({"top1": float(row[o[0]]), "top2": float(row[o[1]])})
        if t in cfg["eos"]:
            break
        llm.eval([t])
    res.append({"ids": ids, "logits": lg})
print(json.dumps(res))
"""
        import gguf
        field = gguf.GGUFReader(a.gguf).fields["tokenizer.ggml.eos_token_id"]
        eos = [int(field.parts[field.data[0]][0])]  # the GGUF's eos id, as llama.cpp stops on it
        report["llamacpp_eos"] = eos
        cfg = {"gguf": a.gguf, "threads": a.threads, "max_new": a.max_new_tokens,
               "prompts": [o["prompt_ids"] for o in ours_stored], "eos": eos}
        t0 = time.time()
        r = subprocess.run([a.llamacpp_python, "-c", code], input=json.dumps(cfg), capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"llama.cpp run failed: {r.stderr[-2000:]}")
        lres = json.loads(r.stdout)
        print(f"llama.cpp: {time.time() - t0:.0f} s", file=sys.stderr)
        for i, lr in enumerate(lres):
            rows[i]["llamacpp"] = compare(ours_stored[i], lr["ids"], lr["logits"])

    report["prompts"] = rows

    def summary(key):
        rs = [r[key] for r in rows if key in r]
        if not rs:
            return None
        div = [r for r in rs if not r["identical"]]
        return {"identical": len(rs) - len(div), "of": len(rs),
                "near_tie_divergences": sum(1 for r in div if r.get("their_margin_at_divergence", 1e9) < 0.1),
                "margins_at_divergence": [round(r.get("their_margin_at_divergence", float("nan")), 4) for r in div],
                "max_abs_top1_logit_diff": max(r.get("max_abs_top1_logit_diff", 0.0) for r in rs)}

    report["summary"] = {"chat_ids_equal": sum(r["chat_ids_equal"] for r in rows), "of": len(rows),
                         "transformers_vs_f32": summary("transformers"), "llamacpp_vs_stored": summary("llamacpp")}
    print(json.dumps(report["summary"], indent=1))
    if a.out:
        with open(a.out, "w") as fo:
            json.dump(report, fo, indent=1)


if __name__ == "__main__":
    main()
