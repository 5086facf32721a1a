#!/usr/bin/env bash
# Bisection of a device failure: the same small runs under each kernel choice, with
# CUDA_LAUNCH_BLOCKING=1 so that an error names its launch.
set -uo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"; tar -C "$work" -xJf device-carry/kvbench-cuda.tar.xz; KVB="$work/kvb"
cuda_libs="$(python3 -c 'import glob,os,site;print(":".join(sorted({d for b in site.getsitepackages() for p in ("nvidia/*/lib","torch/lib") for d in glob.glob(os.path.join(b,p))})))' 2>/dev/null)"
export OMP_WAIT_POLICY=PASSIVE LD_LIBRARY_PATH="$KVB/lib:/usr/local/cuda/lib64:$cuda_libs"
r() { echo "== $*"; timeout -k 3 "${T:-40}" "$@" 2>&1 | grep -v "^\s*$" | tail -n "${N:-6}"; echo "== rc ${PIPESTATUS[0]}"; }
export CUDA_LAUNCH_BLOCKING=1
r env KVB_CUDA_PREFILL_ATTN=native KVB_CUDA_DECODE_ATTN=tiled "$KVB/bin/kvb_cuda_check" graphs --shapes qwen3-0.6b
r env KVB_CUDA_PREFILL_ATTN=native "$KVB/bin/kvb_cuda_check" graphs --shapes qwen3-0.6b
r env KVB_CUDA_DECODE_ATTN=tiled "$KVB/bin/kvb_cuda_check" graphs --shapes qwen3-0.6b
r env KVB_CUDA_GRAPHS=0 "$KVB/bin/kvbench" bench --backend cuda --model-shape qwen3-0.6b --context 300 --gen 4
B=(bench --backend cuda --model-shape qwen3-0.6b --prefill-chunk 4096)
r env KVB_CUDA_PREFILL_ATTN=native KVB_CUDA_DECODE_ATTN=tiled "$KVB/bin/kvbench" "${B[@]}" --warmup 0 --case "8192 8 1 trimkv:random_gates=0 1024"
r env KVB_CUDA_PREFILL_ATTN=native KVB_CUDA_DECODE_ATTN=tiled "$KVB/bin/kvbench" "${B[@]}" --prefill-chunk 512 --warmup 0 --case "8192 8 1 trimkv:random_gates=0 1024"
r "$KVB/bin/kvbench" "${B[@]}" --warmup 0 --case "8192 8 1 snapkv 1024"
ls /usr/local/cuda/bin 2>/dev/null | grep -i sanit
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
[ -n "$CS" ] && T=90 N=25 r "$CS" --print-limit 3 "$KVB/bin/kvb_cuda_check" graphs --shapes qwen3-0.6b
