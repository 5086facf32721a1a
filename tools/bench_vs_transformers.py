#!/usr/bin/env python3
"""kvbench's CPU decode against transformers (torch, CPU, f32) at several batch sizes.

Side by side in one run on this machine (a benchmark, not a test; only the ratios mean anything):

1. Makes an F32 safetensors copy of the default GGUF model once, with transformers' own GGUF
   reader (`from_pretrained(..., gguf_file=...)`, which dequantises through gguf-py), and saves it
   with `save_pretrained` into the cache folder.
2. For each batch size: transformers prefills `context` random prompt tokens per sequence, then
   decodes `gen` greedy steps with its KV cache (`past_key_values`); the decode steps alone are
   timed. kvbench runs `kvbench bench --model <that folder> --context C --gen G --batch B` on the
   same files (its decode_tok/s column times the decode steps alone as well).
3. Prints one markdown row per batch size: decode tokens/s of both and kvbench / transformers.

Both use `threads` CPU threads (torch.set_num_threads; OMP_NUM_THREADS for kvbench).

Run with the goldens virtualenv (tools/goldens_venv.sh makes it):
    .venv-goldens/bin/python tools/bench_vs_transformers.py [--batches 1,8,32] [--threads 2]
tools/bench_vs_llamacpp.sh calls it after the llama.cpp table when that virtualenv exists.
"""
import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import time


def main() -> int:
    here = pathlib.Path(__file__).resolve().parent.parent
    cache_home = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvbench", default=str(here / "build" / "kvbench"))
    ap.add_argument("--gguf", default=str(cache_home / "kvbench/models/smollm2-135m-instruct/"
                                          "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=str(cache_home / "kvbench/llamacpp/models/SmolLM2-135M-Instruct-F32-hf"),
                    help="folder of the F32 safetensors copy (made once)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--reps", type=int, default=3, help="transformers: median of reps; kvbench: last of reps")
    a = ap.parse_args()

    import torch  # noqa: E402  (heavy; after argument errors)
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    torch.set_num_threads(a.threads)
    out = pathlib.Path(a.out)
    if not (out / "model.safetensors").exists():
        gguf = pathlib.Path(a.gguf)
        m = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, torch_dtype=torch.float32)
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        m.save_pretrained(out, safe_serialization=True)
        tok.save_pretrained(out)
        del m
    model = AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32)
    model.eval()
    vocab = model.config.vocab_size

    print(f"transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{a.threads} threads, f32; context {a.context}, gen {a.gen}; model {out.name}")
    print("| batch | transformers tg t/s | kvbench tg t/s | ratio |")
    print("|------:|--------------------:|---------------:|------:|")
    for b in [int(x) for x in a.batches.split(",")]:
        g = torch.Generator().manual_seed(b)
        times = []
        for _ in range(a.reps):
            ids = torch.randint(0, vocab, (b, a.context), generator=g)
            with torch.inference_mode():
                o = model(ids, use_cache=True)
                pkv, nxt = o.past_key_values, o.logits[:, -1].argmax(-1, keepdim=True)
                t0 = time.perf_counter()
                for _ in range(a.gen):
                    o = model(nxt, past_key_values=pkv, use_cache=True)
                    pkv, nxt = o.past_key_values, o.logits[:, -1].argmax(-1, keepdim=True)
                times.append(time.perf_counter() - t0)
        hf = b * a.gen / statistics.median(times)
        env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
        r = subprocess.run([a.kvbench, "bench", "--model", str(out), "--context", str(a.context), "--gen",
                            str(a.gen), "--batch", str(b), "--repeats", str(a.reps)],
                           env=env, capture_output=True, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stderr)
            return 1
        kv = float(r.stdout.strip().splitlines()[-1].split()[5])
        print(f"| {b:5d} | {hf:19.1f} | {kv:14.1f} | {kv / hf:5.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
