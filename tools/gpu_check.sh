#!/usr/bin/env bash
# GPU verification of the CUDA backend, run ON the lent GPU machine (the device tool), which has
# the CUDA runtime and cuBLAS but none of our Debian libraries and no network. It builds nothing:
# tools/pack_device_carry.sh (run here) packs kvbench, kvb_cuda_check and their .so files into
# device-carry/kvbench-cuda.tar.xz, which the device call carries:
#
#   run(command="bash tools/gpu_check.sh", carry=["device-carry"])
#
# Steps (each logged to $OUT/<step>.txt; a failing step is reported and the next ones still run):
#   1. nvidia-smi and the MANIFEST of what was carried;
#   2. kvb_cuda_check equiv: CUDA-vs-CPU logits (max relative error <= 2e-2 in bf16) and keep-sets
#      of the deterministic policies on the engine's random-weight shapes and stories260K;
#   2b. kvb_cuda_check primitives: the device policy primitives (window scores, head MLPs) against
#      their host fallbacks on identical inputs inside a CUDA forward pass (max rel err <= 1e-3);
#   2c. kvb_cuda_check graphs: decode steps as CUDA graphs against the same steps launched
#      directly (batch changes, page-table growth, a sequence leaving, a rollback);
#   3. kvb_cuda_check bandwidth: the device-copy roofline that bench's GB/s is measured against;
#   4. kvbench bench --backend cuda on qwen3-4b / qwen3-8b / llama-3.1-8b shapes (random bf16
#      weights), 32K context, 1,024 generated, batch 1/4/8/32/64, full cache and trimkv at
#      budget 1024 (the TRIM-KV paper's Table 6 settings); GPU_CHECK_QUICK=1 runs a small subset.
# Environment: OUT (the device tool sets it; default ./gpu-check-out), GPU_CHECK_QUICK,
#   GPU_CHECK_SHAPES, GPU_CHECK_BATCHES, GPU_CHECK_CONTEXT, GPU_CHECK_GEN (the bench grid),
#   GPU_CHECK_CASES (explicit bench cases instead of the grid: "shape,context,gen,batch,policy,budget ..."),
#   GPU_CHECK_STEPS (space-separated subset of: device primitives equiv graphs bandwidth bench;
#   default all), GPU_CHECK_STEP_TIMEOUT (seconds per step, default 300: a hung step is killed
#   and counted as failed, so one hang cannot eat a whole device call).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"
tarball=device-carry/kvbench-cuda.tar.xz
if [ ! -f "$tarball" ]; then
  echo "gpu_check: $tarball not found: run tools/pack_device_carry.sh first and carry device-carry" >&2
  exit 2
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tar -C "$work" -xJf "$tarball" || { echo "gpu_check: cannot unpack $tarball" >&2; exit 2; }
KVB="$work/kvb"
# CUDA's runtime and cuBLAS come from the machine (toolkit or PyTorch wheels); ours from the tarball.
cuda_libs="$(python3 - <<'PY' 2>/dev/null
import glob, os, site
dirs = set()
for base in site.getsitepackages():
    for pat in ("nvidia/*/lib", "torch/lib"):
        dirs.update(glob.glob(os.path.join(base, pat)))
print(":".join(sorted(dirs)))
PY
)"
# kvbench re-executes itself with OMP_WAIT_POLICY=PASSIVE; kvb_cuda_check's CPU reference runs
# need the same (spinning OpenMP workers starve OpenBLAS's threads).
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
export LD_LIBRARY_PATH="$KVB/lib:/usr/local/cuda/lib64:${cuda_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

fails=0
step() {  # step NAME COMMAND...: runs, logs to $OUT/NAME.txt, keeps going on failure
  local name="$1"
  shift
  echo "== $name: $*" | tee "$OUT/$name.txt"
  local t0=$SECONDS
  timeout -k 5 "${GPU_CHECK_STEP_TIMEOUT:-300}" "$@" >>"$OUT/$name.txt" 2>&1
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$OUT/$name.txt"
  tail -n 25 "$OUT/$name.txt"
  [ $rc -eq 0 ] || fails=$((fails + 1))
}

steps="${GPU_CHECK_STEPS:-device primitives equiv graphs bandwidth bench}"
want() { [[ " $steps " == *" $1 "* ]]; }
cp "$KVB/MANIFEST" "$OUT/MANIFEST" 2>/dev/null || true
want device && { step device nvidia-smi; step ldd ldd "$KVB/bin/kvbench"; }
want primitives && step primitives "$KVB/bin/kvb_cuda_check" primitives
want equiv && step equiv "$KVB/bin/kvb_cuda_check" equiv
want graphs && step graphs "$KVB/bin/kvb_cuda_check" graphs
want bandwidth && step bandwidth "$KVB/bin/kvb_cuda_check" bandwidth

shapes="${GPU_CHECK_SHAPES:-qwen3-4b qwen3-8b llama-3.1-8b}"
batches="1 4 8 32 64"
context=32768
gen=1024
if [ "${GPU_CHECK_QUICK:-0}" = "1" ]; then
  shapes="${GPU_CHECK_SHAPES:-qwen3-4b}"
  batches="1 8"
  context=8192
  gen=256
fi
batches="${GPU_CHECK_BATCHES:-$batches}"
context="${GPU_CHECK_CONTEXT:-$context}"
gen="${GPU_CHECK_GEN:-$gen}"
want bench || shapes=""
# GPU_CHECK_CASES: an explicit list instead of the grid, "shape,context,gen,batch,policy,budget" each.
if [ -n "${GPU_CHECK_CASES:-}" ] && want bench; then
  shapes=""
  for c in $GPU_CHECK_CASES; do
    IFS=, read -r shape ctx g b pol bud <<<"$c"
    args=(bench --backend cuda --model-shape "$shape" --context "$ctx" --gen "$g" --batch "$b")
    [ -n "$pol" ] && args+=(--policy "$pol")
    [ -n "$bud" ] && args+=(--budget "$bud")
    step "bench_${shape}_${ctx}_${pol%%:*}_b${b}" "$KVB/bin/kvbench" "${args[@]}"
  done
fi
for shape in $shapes; do
  for b in $batches; do
    step "bench_${shape}_full_b${b}" "$KVB/bin/kvbench" bench --backend cuda --model-shape "$shape" \
      --context "$context" --gen "$gen" --batch "$b"
    step "bench_${shape}_trimkv_b${b}" "$KVB/bin/kvbench" bench --backend cuda --model-shape "$shape" \
      --context "$context" --gen "$gen" --batch "$b" --policy trimkv:random_gates=0 --budget 1024
  done
done
echo "gpu_check: $fails step(s) failed; logs in $OUT"
[ $fails -eq 0 ]
