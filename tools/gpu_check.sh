#!/usr/bin/env bash
# GPU verification of the CUDA backend, run ON the lent GPU machine (the device tool), which has
# the CUDA runtime and cuBLAS but none of our Debian libraries and no network. It builds nothing:
# tools/pack_device_carry.sh (run here) packs kvbench, kvb_cuda_check and their .so files into
# device-carry/kvbench-cuda.tar.xz, which the device call carries:
#
#   run(command="bash tools/gpu_check.sh", carry=["device-carry"])
#
# Steps (each logged in full to logs/<step>.txt inside $OUT/gpu_check_logs.tar.gz, re-packed after
# every step so that a call cut off by its time limit still brings back what ran — the device tool
# returns at most 8 files; a failing step is reported and the next ones still run):
#   1. nvidia-smi and the MANIFEST of what was carried;
#   2. kvb_cuda_check equiv: CUDA-vs-CPU logits (max relative error <= 2e-2 in bf16), end-to-end
#      keep-set agreement of every policy against the CPU's own f32-vs-bf16 floor, batched greedy
#      generation and the device sampler's distribution, on random-weight shapes;
#   2a. kvb_cuda_check decisions: every policy's keep-sets from the device primitives vs from the
#      host code on the same mirrored inputs, call by call (identical required);
#   2b. kvb_cuda_check primitives: the device policy primitives (window scores, head MLPs) against
#      their host fallbacks on identical inputs inside a CUDA forward pass (max rel err <= 1e-3);
#   2c. kvb_cuda_check graphs: decode steps as CUDA graphs against the same steps launched
#      directly (batch changes, page-table growth, a sequence leaving, a rollback);
#   2d. grid: `kvbench run` end to end on the real stories260K model (carried in the tarball), the
#      built-in smoke suite, the full cache plus four policies (GPU_CHECK_GRID_POLICIES), greedy,
#      2 samples, once with --backend cuda and once with --backend cpu-bf16; tools/grid_compare.py
#      then requires identical generations, evictions and KV byte counts in the two result DBs
#      (both DBs are kept in the logs);
#   3. kvb_cuda_check bandwidth: the device-copy roofline that bench's GB/s is measured against;
#   4. kvbench bench --backend cuda on the Qwen3-8B shape (random bf16 weights): the cases below.
# Environment: OUT (the device tool sets it; default ./gpu-check-out), GPU_CHECK_QUICK,
#   GPU_CHECK_CASES (bench cases: "shape,context,gen,batch,policy,budget ..."),
#   GPU_CHECK_STEPS (space-separated subset of: device primitives decisions equiv graphs grid bandwidth
#   bench speed vs_transformers memory; default all but speed, vs_transformers and memory), GPU_CHECK_STEP_TIMEOUT (seconds per step, default 300: a hung step is killed
#   and counted as failed, so one hang cannot eat a whole device call), GPU_CHECK_GRID_POLICIES
#   (the grid step's policies after `full`, comma-separated specs; default below),
#   GPU_CHECK_ARGS_<step> for step primitives, decisions, equiv or graphs (extra kvb_cuda_check
#   arguments, e.g. GPU_CHECK_ARGS_decisions="--shapes stories260k,smollm2-135m" to save time).
# Every step ends with one line "STEP <name>: PASS|FAIL (exit N, S s)", and the script with a
# summary of them all.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"
LOGS="$(mktemp -d)/logs"
mkdir -p "$LOGS"
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
summary=""
step() {  # step NAME COMMAND...: runs, logs to $LOGS/NAME.txt, keeps going on failure
  local name="$1"
  shift
  echo "== $name: $*" | tee "$LOGS/$name.txt"
  local t0=$SECONDS
  timeout -k 5 "${GPU_CHECK_STEP_TIMEOUT:-300}" "$@" >>"$LOGS/$name.txt" 2>&1
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$LOGS/$name.txt"
  tail -n 40 "$LOGS/$name.txt"
  local verdict=PASS
  [ $rc -eq 0 ] || { verdict=FAIL; fails=$((fails + 1)); }
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && verdict="FAIL (timed out)"
  local line="STEP $name: $verdict (exit $rc, $((SECONDS - t0)) s)"
  echo "$line" | tee -a "$LOGS/$name.txt"
  summary+="$line"$'\n'
  tar -C "$(dirname "$LOGS")" -czf "$OUT/gpu_check_logs.tar.gz" logs
}

steps="${GPU_CHECK_STEPS:-device primitives decisions equiv graphs grid bandwidth bench}"
want() { [[ " $steps " == *" $1 "* ]]; }
cp "$KVB/MANIFEST" "$LOGS/MANIFEST" 2>/dev/null || true
want device && { step device nvidia-smi; step ldd ldd "$KVB/bin/kvbench"; }
# shellcheck disable=SC2086 # GPU_CHECK_ARGS_<step> is a word list on purpose
want primitives && step primitives "$KVB/bin/kvb_cuda_check" primitives ${GPU_CHECK_ARGS_primitives:-}
# shellcheck disable=SC2086
want decisions && step decisions "$KVB/bin/kvb_cuda_check" decisions ${GPU_CHECK_ARGS_decisions:-}
# shellcheck disable=SC2086
want equiv && step equiv "$KVB/bin/kvb_cuda_check" equiv ${GPU_CHECK_ARGS_equiv:-}
# shellcheck disable=SC2086
want graphs && step graphs "$KVB/bin/kvb_cuda_check" graphs ${GPU_CHECK_ARGS_graphs:-}

# End to end: the same `kvbench run` grid on the device and on cpu-bf16 (the CPU forward rounding
# where the device stores bf16), greedy so that the two samplers cannot differ; budget 24 is below
# the smoke prompts' length, so every policy compresses (locret in chunks of 16) and quest reads
# 3 of its 16-token pages. Policies: snapkv (device window scores), expected_attention and locret
# (the device's pre-RoPE queries, issue 30), quest (read selection: ranged device attention).
grid_policies="${GPU_CHECK_GRID_POLICIES:-snapkv,expected_attention,locret:random_heads=0,chunk_size=16,stabilizers=4,local_len=4,head_hidden=32,quest}"
if want grid; then
  model="$KVB/models/stories260K-hf"
  grid_args=(run --model "$model" --suite smoke --policies "full,$grid_policies" --budgets 24 --samples 2
             --temperature 0 --quiet)
  rm -f "$LOGS/grid_cuda.db" "$LOGS/grid_cpu-bf16.db"
  step grid_cuda "$KVB/bin/kvbench" "${grid_args[@]}" --backend cuda --db "$LOGS/grid_cuda.db"
  step grid_cpu-bf16 "$KVB/bin/kvbench" "${grid_args[@]}" --backend cpu-bf16 --db "$LOGS/grid_cpu-bf16.db"
  step grid python3 tools/grid_compare.py "$LOGS/grid_cuda.db" "$LOGS/grid_cpu-bf16.db"
fi
want bandwidth && step bandwidth "$KVB/bin/kvb_cuda_check" bandwidth

# The bench cases, "shape,context,gen,batch,policy,budget" each. The default is the README's GPU
# table: the Qwen3-8B shape at TRIM-KV's Table 6 setting (32K context, batch 4) and around it, full
# cache vs trimkv at budget 1024, plus batch 64 at 2K (batch 64 at 32K needs 309 GB of KV). It
# takes about 7 minutes on an H100; GPU_CHECK_QUICK=1 runs two 8K cases.
default_cases="qwen3-8b,32768,256,1,full, qwen3-8b,32768,256,1,trimkv:random_gates=0,1024
qwen3-8b,32768,256,4,full, qwen3-8b,32768,256,4,trimkv:random_gates=0,1024 qwen3-8b,2048,128,64,full,"
[ "${GPU_CHECK_QUICK:-0}" = "1" ] &&
  default_cases="qwen3-8b,8192,128,1,full, qwen3-8b,8192,128,1,trimkv:random_gates=0,1024"
if want bench; then
  for c in ${GPU_CHECK_CASES:-$default_cases}; do
    IFS=, read -r shape ctx g b pol bud <<<"$c"
    args=(bench --backend cuda --model-shape "$shape" --context "$ctx" --gen "$g" --batch "$b")
    [ -n "$pol" ] && args+=(--policy "$pol")
    [ -n "$bud" ] && args+=(--budget "$bud")
    step "bench_${shape}_${ctx}_${pol%%:*}_b${b}" "$KVB/bin/kvbench" "${args[@]}"
  done
fi
# speed: the prefill/decode attention kernels in use against the previous ones, each setting one
# kvbench process over all cases (the random Qwen3-8B weights are made once per process; every
# case runs after an untimed warm-up). GPU_SPEED_CASES: "CONTEXT GEN BATCH [POLICY [BUDGET]]"
# cases separated by ';'; GPU_SPEED_CHUNK: --prefill-chunk (tokens per sequence per step);
# GPU_SPEED_AB=0 skips the previous kernels (KVB_CUDA_PREFILL_ATTN=native: attention.cu for
# prefill; KVB_CUDA_DECODE_ATTN=tiled: attention.cu's 16-row kernel for decode).
if want speed; then
  IFS=';' read -r -a speed_cases <<<"${GPU_SPEED_CASES:-8192 64 1 full;8192 64 1 trimkv:random_gates=0 1024;2048 32 64 full}"
  sargs=(bench --backend cuda --model-shape qwen3-8b --prefill-chunk "${GPU_SPEED_CHUNK:-4096}")
  for c in "${speed_cases[@]}"; do sargs+=(--case "$c"); done
  step speed "$KVB/bin/kvbench" "${sargs[@]}"
  [ "${GPU_SPEED_AB:-1}" = "1" ] &&
    step speed_previous_kernels env KVB_CUDA_PREFILL_ATTN=native KVB_CUDA_DECODE_ATTN=tiled "$KVB/bin/kvbench" "${sargs[@]}"
fi
# vs_transformers (only when GPU_CHECK_STEPS names it): kvbench bench --backend cuda and
# transformers (bf16, SDPA, DynamicCache, random weights of the same Qwen3-8B shape built in Python)
# on the same cases in one call, tools/gpu_vs_transformers.py: $OUT/vs_transformers.tsv (also in
# the logs tarball), for docs/gpu/<device>-<date>/. GPU_VS_TRANSFORMERS_CASES ("CONTEXT BATCH
# POLICY [BUDGET]; ...") and GPU_VS_TRANSFORMERS_GEN (default 32) override its defaults; about 3-4
# minutes on an H100 (kvbench ~2, transformers ~1.5), so its own timeout is at least 420 s.
want vs_transformers && {
  GPU_CHECK_STEP_TIMEOUT="$(( ${GPU_CHECK_STEP_TIMEOUT:-300} > 420 ? ${GPU_CHECK_STEP_TIMEOUT:-300} : 420 ))" \
    step vs_transformers python3 tools/gpu_vs_transformers.py --kvbench "$KVB/bin/kvbench" \
    --out "$OUT/vs_transformers.tsv" --gen "${GPU_VS_TRANSFORMERS_GEN:-32}" \
    ${GPU_VS_TRANSFORMERS_CASES:+--cases "$GPU_VS_TRANSFORMERS_CASES"}
  cp "$OUT/vs_transformers.tsv" "$LOGS/vs_transformers.tsv" 2>/dev/null  # written row by row into $OUT
}
# memory (only when GPU_CHECK_STEPS names it): throughput at a fixed KV pool, kvbench bench
# --memory (docs/architecture.md, "Throughput at a fixed KV pool"): the largest batch whose KV
# pages fit a pool of GPU_MEMORY_GIB (default 7) GiB of bf16 pages (the weights, 15.3 GiB, and
# the work buffers come on top; before issue 47 --memory 24 was the whole device budget), full vs trimkv vs rkv at
# budget 1024 on the Qwen3-8B shape, one process (weights generated once); each case prints
# memory_plan / memory_result and the device report (device_used_GiB); $OUT/memory.json. Default
# cases: a 256-token prompt and 2,048 generated (R-KV's setting: full peaks at 2,304 tokens per
# head, the policies at 1,152), prefill chunk 128; about 3 minutes on an H100.
want memory && {
  mem_cases=()
  IFS=';' read -ra mem_list <<<"${GPU_MEMORY_CASES:-256 2048 - full;256 2048 - trimkv:random_gates=0 1024;256 2048 - rkv 1024}"
  for mc in "${mem_list[@]}"; do mem_cases+=(--case "$mc"); done
  GPU_CHECK_STEP_TIMEOUT="$(( ${GPU_CHECK_STEP_TIMEOUT:-300} > 420 ? ${GPU_CHECK_STEP_TIMEOUT:-300} : 420 ))" \
    step memory "$KVB/bin/kvbench" bench --backend cuda --model-shape qwen3-8b --memory "${GPU_MEMORY_GIB:-7}" \
    --prefill-chunk 128 --json "$LOGS/memory.json" "${mem_cases[@]}"
  cp "$LOGS/memory.json" "$OUT/memory.json" 2>/dev/null
}
echo "== summary"
printf '%s' "$summary"
echo "gpu_check: $fails step(s) failed; logs in $OUT"
[ $fails -eq 0 ]
