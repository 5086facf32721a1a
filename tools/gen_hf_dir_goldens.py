#!/usr/bin/env python3
"""Goldens for "a model directory saved by current transformers chats as transformers does"
(tests/hf_dir/test_hf_dir_chat.cpp, docs/testing.md "Model directories", docs/usage.md "Models"):

1. transformers loads the default model, SmolLM2-135M-Instruct Q4_1 GGUF (bootstrap.sh /
   tools/fetch_default_model.sh fetch it), dequantising it to float32 with gguf-py, and
   save_pretrained()s model and tokenizer into a directory exactly as a user's would be
   (model.safetensors, config.json, generation_config.json, tokenizer.json, tokenizer_config.json,
   chat_template.jinja — current transformers writes the template there, not into
   tokenizer_config.json).
2. Every file except model.safetensors (540 MB of f32, not committable) is copied to
   tests/fixtures/hf_dir/smollm2/; weights_manifest.json records each tensor of model.safetensors
   (name, dtype, shape, sha256 of its bytes), so the test can rebuild the file from the GGUF with
   kvbench's own loader and prove it holds exactly these bytes.
3. goldens.json: for 5 prompts, transformers' chat greedy generation of 80 new tokens
   (apply_chat_template(add_generation_prompt=True), generate(do_sample=False,
   max_new_tokens=80), the new tokens decoded with skip_special_tokens=True) — the text
   `kvbench generate --chat` must print byte for byte.

Run from the repository root with the goldens venv (torch, transformers, gguf, safetensors):
    .venv-goldens/bin/python tools/gen_hf_dir_goldens.py [--gguf PATH]
"""
import argparse
import hashlib
import json
import os
import shutil
import struct
import tempfile

# The default model's path and transformers' GGUF loading are gen_gguf_goldens.py's (which also
# creates .venv-goldens and re-runs this script there when torch/transformers/gguf are missing).
from gen_gguf_goldens import default_smollm2_path, load_hf

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "hf_dir", "smollm2")
PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain in two sentences why the sky is blue.",
    "List three prime numbers greater than 10 and add them up.",
    "Translate 'good morning, my friend' into Spanish and German.",
]
MAX_NEW = 80


def safetensors_manifest(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out = []
        for name, t in header.items():
            if name == "__metadata__":
                continue
            b, e = t["data_offsets"]
            f.seek(base + b)
            out.append({"name": name, "dtype": t["dtype"], "shape": t["shape"],
                        "sha256": hashlib.sha256(f.read(e - b)).hexdigest()})
    return sorted(out, key=lambda x: x["name"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=default_smollm2_path())
    args = ap.parse_args()
    tok, model = load_hf(args.gguf)
    tmp = tempfile.mkdtemp(prefix="kvb_hf_dir_")
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        files = sorted(os.listdir(tmp))
        assert "chat_template.jinja" in files, files
        assert "model.safetensors" in files, files
        if os.path.isdir(OUT):
            shutil.rmtree(OUT)
        os.makedirs(OUT)
        for name in files:
            if name != "model.safetensors":
                shutil.copy(os.path.join(tmp, name), os.path.join(OUT, name))
        manifest = {"source_gguf_sha256": hashlib.sha256(open(args.gguf, "rb").read()).hexdigest(),
                    "transformers": transformers.__version__,
                    "tensors": safetensors_manifest(os.path.join(tmp, "model.safetensors"))}
        with open(os.path.join(OUT, "weights_manifest.json"), "w") as fh:
            json.dump(manifest, fh, indent=1)
        # Generate from the saved directory, as a user would load it.
        tok2 = AutoTokenizer.from_pretrained(tmp)
        model2 = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32)
        model2.eval()
        gold = {"transformers": transformers.__version__, "torch": torch.__version__, "max_new_tokens": MAX_NEW,
                "cases": []}
        for p in PROMPTS:
            ids = tok2.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)
            with torch.no_grad():
                out = model2.generate(**ids, do_sample=False, max_new_tokens=MAX_NEW)
            new = out[0, ids["input_ids"].shape[1]:].tolist()
            gold["cases"].append({"prompt": p, "prompt_ids": ids["input_ids"][0].tolist(), "new_ids": new,
                                  "text": tok2.decode(new, skip_special_tokens=True)})
            print(repr(gold["cases"][-1]["text"]))
        with open(os.path.join(OUT, "goldens.json"), "w") as fh:
            json.dump(gold, fh, indent=1, ensure_ascii=False)
        print("wrote", sorted(os.listdir(OUT)))
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
