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
while [ $# -gt 0 ]; do
  case "$1" in
    --kvbench) kvbench="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --context) context="$2"; shift 2 ;;
    --gen) gen="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --llama-cpp-python) version="$2"; shift 2 ;;
    --cache) cache="$2"; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "bench_vs_llamacpp.sh: error: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ -x "$kvbench" ] || { echo "bench_vs_llamacpp.sh: error: $kvbench: not built (ninja -C build kvbench)" >&2; exit 2; }
model="${XDG_CACHE_HOME:-$HOME/.cache}/kvbench/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"
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
  ninja -C "$cache/build-$version" -j"$(nproc)" llama-bench llama-quantize >&2
fi

# 2. The copies of the default model.
models="$cache/models"
mkdir -p "$models"
files=("$model")
for t in F32 Q8_0 Q4_K_M; do
  out="$models/SmolLM2-135M-Instruct.$t.gguf"
  [ -f "$out" ] || "$bin/llama-quantize" --allow-requantize "$model" "$out" "$t" >&2
  files+=("$out")
done

# 3. Both tools on each file.
cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo "machine: $cpu, $(nproc) CPUs; threads $threads; context $context, gen $gen; llama.cpp from llama-cpp-python $version"
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-unset} KVB_ISA=${KVB_ISA:-auto}"
printf '| %-28s | %12s | %12s | %6s | %12s | %12s | %6s |\n' "model file" "llama pp t/s" "kvb pp t/s" "ratio" \
  "llama tg t/s" "kvb tg t/s" "ratio"
printf '|%s|%s|%s|%s|%s|%s|%s|\n' "------------------------------" "-------------:" "-------------:" "-------:" \
  "-------------:" "-------------:" "-------:"
for f in "${files[@]}"; do
  # llama-bench -o csv: the avg_ts column of the pp and tg rows.
  lb="$("$bin/llama-bench" -m "$f" -p "$context" -n "$gen" -t "$threads" -r "$reps" -o csv 2>/dev/null)"
  col="$(echo "$lb" | head -1 | tr ',' '\n' | tr -d '"' | grep -nx 'avg_ts' | cut -d: -f1)"
  [ -n "$col" ] || { echo "bench_vs_llamacpp.sh: error: $f: llama-bench printed no avg_ts column" >&2; exit 1; }
  pp_l="$(echo "$lb" | sed -n 2p | cut -d, -f"$col" | tr -d '"')"
  tg_l="$(echo "$lb" | sed -n 3p | cut -d, -f"$col" | tr -d '"')"
  kb="$(OMP_NUM_THREADS="$threads" "$kvbench" bench --model "$f" --context "$context" --gen "$gen" --batch 1 \
        --repeats "$reps" | tail -1)"
  pp_k="$(echo "$kb" | awk '{print $5}')"
  tg_k="$(echo "$kb" | awk '{print $6}')"
  printf '| %-28s | %12.1f | %12.1f | %6.2f | %12.1f | %12.1f | %6.2f |\n' "$(basename "$f" .gguf | sed 's/SmolLM2-135M-Instruct\.//')" \
    "$pp_l" "$pp_k" "$(echo "$pp_k / $pp_l" | bc -l)" "$tg_l" "$tg_k" "$(echo "$tg_k / $tg_l" | bc -l)"
done

# 4. transformers (batch 1, 8, 32 on the F32 safetensors copy), when the goldens virtualenv exists.
py="${KVB_PYTHON:-$here/.venv-goldens/bin/python}"
if [ -x "$py" ]; then
  echo
  "$py" "$here/tools/bench_vs_transformers.py" --kvbench "$kvbench" --gguf "$model" --threads "$threads" \
    --context "$context" --gen "$gen" --reps "$reps"
else
  echo "(transformers side skipped: no $py; tools/goldens_venv.sh makes it, or set KVB_PYTHON)"
fi
