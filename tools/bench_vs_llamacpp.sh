#!/usr/bin/env bash
# kvbench's CPU engine against llama.cpp on the same GGUF files, side by side on this machine.
#
# Builds llama.cpp's llama-bench and llama-quantize from the llama-cpp-python source
# distribution on PyPI (it vendors llama.cpp; `pip download --no-binary :all: --no-deps`) into
# a cache folder, makes F32 / Q8_0 / Q4_K_M copies of the default model with llama-quantize,
# then runs `llama-bench -p CONTEXT -n GEN -t THREADS` and `kvbench bench --context CONTEXT
# --gen GEN --batch 1` on each file and prints prefill and decode tokens/s and their ratios.
# A benchmark, not a test: run it on an otherwise idle machine; only ratios from one run side by
# side mean anything.
#
# Usage: tools/bench_vs_llamacpp.sh [--kvbench PATH] [--threads N] [--context N] [--gen N]
#                                   [--reps N] [--llama-cpp-python VERSION] [--cache DIR]
#                                   [--openblas CORETYPE,L2_SIZE] [--model FILE.gguf] [--batch N,N...]
# --model FILE: that GGUF file only, as stored (no llama-quantize copies, no transformers side), e.g.
# a named model from `kvbench models` (the Qwen2.5-Coder 1.5B, issue 44).
# --batch: batch sizes besides 1 (e.g. 8): for each, llama.cpp's llama-batched-bench (-npp CONTEXT
# -ntg GEN -npl N: N sequences with their own CONTEXT-token prompts, then GEN decode steps) against
# `kvbench bench --batch N` on the same file: prefill tokens/s over all N prompts and aggregate
# decode tokens/s (N tokens per step), both tools decoding at depth CONTEXT..CONTEXT+GEN.
# Prints tokens/s (llama.cpp's decode both from an empty cache, as `llama-bench -n` runs it, and
# at depth CONTEXT, as kvbench decodes), peak RSS of both tools against weights + KV, and with
# --openblas, kvbench with those OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE values and with both unset.
# Then, with the goldens virtualenv (tools/goldens_venv.sh; or KVB_PYTHON=python), transformers
# against kvbench at batch 1, 8 and 32 on an F32 safetensors copy (tools/bench_vs_transformers.py).
# (llama-bench reports the mean of --reps runs, kvbench bench the last of --reps.)
# Environment: KVB_ISA (scalar|avx2|avx512vnni) lowers kvbench's kernels; OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE are passed through as set (the issue asks for numbers with them set and unset).
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
kvbench="$here/build/kvbench"
threads=2
context=512
gen=64
reps=3
version="0.3.16"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/kvbench/llamacpp"
openblas=""
model_arg=""
batches=""
while [ $# -gt 0 ]; do
  case "$1" in
    --kvbench) kvbench="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --context) context="$2"; shift 2 ;;
    --gen) gen="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --llama-cpp-python) version="$2"; shift 2 ;;
    --cache) cache="$2"; shift 2 ;;
    --openblas) openblas="$2"; shift 2 ;;
    --model) model_arg="$2"; shift 2 ;;
    --batch) batches="$(echo "$2" | tr ',' ' ')"; shift 2 ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "bench_vs_llamacpp.sh: error: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ -x "$kvbench" ] || { echo "bench_vs_llamacpp.sh: error: $kvbench: not built (ninja -C build kvbench)" >&2; exit 2; }
model="${XDG_CACHE_HOME:-$HOME/.cache}/kvbench/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -n "$model_arg" ] && model="$model_arg"
for b in $batches; do
  [[ "$b" =~ ^[1-9][0-9]*$ ]] || { echo "bench_vs_llamacpp.sh: error: --batch: '$b' is not a positive integer" >&2; exit 2; }
done
[ -f "$model" ] || { echo "bench_vs_llamacpp.sh: error: $model: missing (tools/fetch_default_model.sh)" >&2; exit 2; }

# 1. llama.cpp from the PyPI sdist, built once per version.
src="$cache/llama_cpp_python-$version"
bin="$cache/build-$version/bin"
if [ ! -x "$bin/llama-bench" ] || [ ! -x "$bin/llama-quantize" ]; then
  mkdir -p "$cache"
  if [ ! -d "$src/vendor/llama.cpp" ]; then
    python3 -m pip download --no-binary :all: --no-deps --dest "$cache" "llama-cpp-python==$version" >&2
    tar -xzf "$cache/llama_cpp_python-$version.tar.gz" -C "$cache"
  fi
  # CPU only, no curl, tuned for this machine (GGML_NATIVE) as a user building llama.cpp gets it.
  cmake -S "$src/vendor/llama.cpp" -B "$cache/build-$version" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DBUILD_SHARED_LIBS=OFF >&2
  ninja -C "$cache/build-$version" -j"$(nproc)" llama-bench llama-quantize llama-batched-bench >&2
fi
[ -z "$batches" ] || [ -x "$bin/llama-batched-bench" ] || ninja -C "$cache/build-$version" llama-batched-bench >&2

# 2. The copies of the default model.
models="$cache/models"
mkdir -p "$models"
files=("$model")
[ -n "$model_arg" ] || for t in F32 Q8_0 Q4_K_M; do
  out="$models/SmolLM2-135M-Instruct.$t.gguf"
  [ -f "$out" ] || "$bin/llama-quantize" --allow-requantize "$model" "$out" "$t" >&2
  files+=("$out")
done

# 3. Both tools on each file.
cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo "machine: $cpu, $(nproc) CPUs; threads $threads; context $context, gen $gen; llama.cpp from llama-cpp-python $version"
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-unset} KVB_ISA=${KVB_ISA:-auto}"
# Peak RSS of a command (KiB) through GNU time, when the machine has it (Debian package `time`).
timer=""
[ -x /usr/bin/time ] && timer=/usr/bin/time
rss_of() {  # rss_of OUTFILE CMD...: runs CMD, its stdout to stdout, its peak RSS KiB to OUTFILE
  local out="$1"; shift
  if [ -n "$timer" ]; then "$timer" -f %M -o "$out" "$@"; else echo "" > "$out"; "$@"; fi
}
mib() { [ -n "$1" ] && echo "$1 / 1024" | bc -l || echo ""; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
declare -a speed_rows rss_rows env_rows
for f in "${files[@]}"; do
  name="$(basename "$f" .gguf | sed 's/SmolLM2-135M-Instruct\.//; s/-instruct-/ /')"
  # llama-bench -o csv: the avg_ts column of the pp and tg rows. Its tg runs from an empty
  # cache; kvbench decodes after the CONTEXT-token prompt, so a second llama-bench run decodes at
  # depth CONTEXT (-d) for the like-for-like ratio.
  lb="$(rss_of "$tmp/llama.rss" "$bin/llama-bench" -m "$f" -p "$context" -n "$gen" -t "$threads" -r "$reps" -o csv 2>/dev/null)"
  col="$(echo "$lb" | head -1 | tr ',' '\n' | tr -d '"' | grep -nx 'avg_ts' | cut -d: -f1)"
  [ -n "$col" ] || { echo "bench_vs_llamacpp.sh: error: $f: llama-bench printed no avg_ts column" >&2; exit 1; }
  pp_l="$(echo "$lb" | sed -n 2p | cut -d, -f"$col" | tr -d '"')"
  tg_l="$(echo "$lb" | sed -n 3p | cut -d, -f"$col" | tr -d '"')"
  lbd="$("$bin/llama-bench" -m "$f" -p 0 -n "$gen" -d "$context" -t "$threads" -r "$reps" -o csv 2>/dev/null)"
  tgd_l="$(echo "$lbd" | sed -n 2p | cut -d, -f"$col" | tr -d '"')"
  kb="$(OMP_NUM_THREADS="$threads" "$kvbench" bench --model "$f" --context "$context" --gen "$gen" --batch 1 \
        --repeats "$reps" | tail -1)"
  pp_k="$(echo "$kb" | awk '{print $5}')"
  tg_k="$(echo "$kb" | awk '{print $6}')"
  kv_k="$(echo "$kb" | awk '{print $8}')"
  rss_k="$(echo "$kb" | awk '{print $9}')"
  speed_rows+=("$(printf '| %-8s | %9.1f | %9.1f | %5.2f | %9.1f | %9.1f | %5.2f | %11.1f | %5.2f |' "$name" \
    "$pp_l" "$pp_k" "$(echo "$pp_k / $pp_l" | bc -l)" "$tg_l" "$tg_k" "$(echo "$tg_k / $tg_l" | bc -l)" \
    "$tgd_l" "$(echo "$tg_k / $tgd_l" | bc -l)")")
  w_mib="$(echo "$(stat -c %s "$f") / 1048576" | bc -l)"
  kv_mib="$(echo "$kv_k / 1048576" | bc -l)"
  l_rss="$(mib "$(cat "$tmp/llama.rss")")"
  rss_rows+=("$(printf '| %-8s | %8.1f | %7.1f | %9.1f | %6.2f | %s |' "$name" "$w_mib" "$kv_mib" "$rss_k" \
    "$(echo "$rss_k / ($w_mib + $kv_mib)" | bc -l)" \
    "$( [ -n "$l_rss" ] && printf '%9.1f' "$l_rss" || echo "      n/a")")")
  # --openblas: kvbench again with the given OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, and with both
  # unset, back to back (OpenBLAS runs kvbench's prefill sgemm; decode does not call it).
  if [ -n "$openblas" ]; then
    set_pp=() ; set_tg=()
    for mode in set unset; do
      if [ "$mode" = set ]; then
        r="$(OPENBLAS_CORETYPE="${openblas%%,*}" OPENBLAS_L2_SIZE="${openblas#*,}" OMP_NUM_THREADS="$threads" \
              "$kvbench" bench --model "$f" --context "$context" --gen "$gen" --batch 1 --repeats "$reps" | tail -1)"
      else
        r="$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS="$threads" \
              "$kvbench" bench --model "$f" --context "$context" --gen "$gen" --batch 1 --repeats "$reps" | tail -1)"
      fi
      set_pp+=("$(echo "$r" | awk '{print $5}')"); set_tg+=("$(echo "$r" | awk '{print $6}')")
    done
    env_rows+=("$(printf '| %-8s | %9.1f | %9.1f | %9.1f | %9.1f |' "$name" "${set_pp[0]}" "${set_pp[1]}" "${set_tg[0]}" "${set_tg[1]}")")
  fi
done
# --batch: N sequences at once. llama-batched-bench prints one JSON line per run (speed_pp: prompt
# tokens of all N sequences / prefill seconds; speed_tg: N x GEN / decode seconds); the mean of
# --reps runs, against the last of kvbench bench's --repeats rows (its prefill_tok/s and
# decode_tok/s columns measure the same two quantities).
declare -a batch_rows
for f in "${files[@]}"; do
  name="$(basename "$f" .gguf | sed 's/SmolLM2-135M-Instruct\.//; s/-instruct-/ /')"
  for b in $batches; do
    : > "$tmp/bb.jsonl"
    for _ in $(seq "$reps"); do
      "$bin/llama-batched-bench" -m "$f" -c $((b * (context + gen))) -b 2048 -ub 512 -npp "$context" -ntg "$gen" \
        -npl "$b" -t "$threads" --output-format jsonl 2>/dev/null | grep '^{' >> "$tmp/bb.jsonl" || true
    done
    read -r pp_l tg_l < <(python3 -c 'import json,sys
rows=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]
if not rows: sys.exit("llama-batched-bench printed no JSON line")
print(sum(r["speed_pp"] for r in rows)/len(rows), sum(r["speed_tg"] for r in rows)/len(rows))' "$tmp/bb.jsonl") ||
      { echo "bench_vs_llamacpp.sh: error: $f: llama-batched-bench -npl $b failed" >&2; exit 1; }
    kb="$(OMP_NUM_THREADS="$threads" "$kvbench" bench --model "$f" --context "$context" --gen "$gen" --batch "$b" \
          --repeats "$reps" | tail -1)"
    pp_k="$(echo "$kb" | awk '{print $5}')"
    tg_k="$(echo "$kb" | awk '{print $6}')"
    batch_rows+=("$(printf '| %-8s | %5d | %9.1f | %9.1f | %5.2f | %9.1f | %9.1f | %5.2f |' "$name" "$b" \
      "$pp_l" "$pp_k" "$(echo "$pp_k / $pp_l" | bc -l)" "$tg_l" "$tg_k" "$(echo "$tg_k / $tg_l" | bc -l)")")
  done
done
echo
echo "Tokens/s; ratios kvbench / llama.cpp. llama tg runs from an empty cache (llama-bench -n $gen),"
echo "llama tg@d$context after a $context-token prompt (-d $context) as kvbench's does."
printf '| %-8s | %9s | %9s | %5s | %9s | %9s | %5s | %11s | %5s |\n' "file" "llama pp" "kvb pp" "ratio" \
  "llama tg" "kvb tg" "ratio" "llama tg@d" "ratio"
echo "|----------|----------:|----------:|------:|----------:|----------:|------:|------------:|------:|"
printf '%s\n' "${speed_rows[@]}"
echo
echo "Peak RSS (MiB) of the same runs: kvbench's (kvbench bench process_peak_rss_MiB) against its weight file"
echo "plus its KV bytes (kv_bytes_peak, f32), and llama-bench's (GNU time; f16 KV, its compute buffers)."
printf '| %-8s | %8s | %7s | %9s | %6s | %9s |\n' "file" "weights" "kvb KV" "kvb peak" "ratio" "llama peak"
echo "|----------|---------:|--------:|----------:|-------:|-----------:|"
printf '%s\n' "${rss_rows[@]}"
if [ -n "$batches" ]; then
  echo
  echo "Batched: N sequences with their own $context-token prompts, then $gen decode steps (llama-batched-bench"
  echo "-npp $context -ntg $gen -npl N against kvbench bench --batch N); prefill and aggregate decode tokens/s."
  printf '| %-8s | %5s | %9s | %9s | %5s | %9s | %9s | %5s |\n' "file" "batch" "llama pp" "kvb pp" "ratio" \
    "llama tg" "kvb tg" "ratio"
  echo "|----------|------:|----------:|----------:|------:|----------:|----------:|------:|"
  printf '%s\n' "${batch_rows[@]}"
fi
if [ -n "$openblas" ]; then
  echo
  echo "kvbench with OPENBLAS_CORETYPE=${openblas%%,*} OPENBLAS_L2_SIZE=${openblas#*,} (set) and with both unset, back to back:"
  printf '| %-8s | %9s | %9s | %9s | %9s |\n' "file" "pp set" "pp unset" "tg set" "tg unset"
  echo "|----------|----------:|----------:|----------:|----------:|"
  printf '%s\n' "${env_rows[@]}"
fi

# 4. transformers (batch 1, 8, 32 on the F32 safetensors copy), when the goldens virtualenv exists.
py="${KVB_PYTHON:-$here/.venv-goldens/bin/python}"
if [ -n "$model_arg" ]; then
  echo
  echo "(transformers side skipped: --model compares the stored file with llama.cpp only)"
elif [ -x "$py" ]; then
  echo
  "$py" "$here/tools/bench_vs_transformers.py" --kvbench "$kvbench" --gguf "$model" --threads "$threads" \
    --context "$context" --gen "$gen" --reps "$reps"
else
  echo "(transformers side skipped: no $py; tools/goldens_venv.sh makes it, or set KVB_PYTHON)"
fi
