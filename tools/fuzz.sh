#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (ASan + UBSan) into build-fuzz/ and runs each
# for SECONDS (default 60), seeded from the test fixtures; a finding stops that target and
# leaves its reproducer in build-fuzz/findings/<target>/. Prints one line per target, and for a
# finding the sanitizer's summary and the first frames of its stack.
# Every input under fuzz/regressions/<target>/ (reproducers of fixed findings) is replayed first.
#   tools/fuzz.sh [SECONDS] [TARGET...]
# KVB_FUZZ_SEED=N fixes libFuzzer's random seed (CI sets it, so a CI run can be replayed).
# Needs clang (Debian: apt-get install clang) besides bootstrap.sh's packages.
set -uo pipefail
cd "$(dirname "$0")/.."
SECS="${1:-60}"
shift || true
ALL=(fuzz_json fuzz_yaml fuzz_safetensors fuzz_torch_checkpoint fuzz_gguf fuzz_config fuzz_tokenizer fuzz_jinja
     fuzz_math_answer fuzz_records fuzz_results_db fuzz_judge_reply fuzz_suite_config fuzz_hub_headers)
TARGETS=("${@:-${ALL[@]}}")
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (apt-get install clang)" >&2; exit 2; }
if [ ! -f build-fuzz/build.ninja ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVB_FUZZ=ON \
    -DKVB_CUDA=OFF -DKVB_BUILD_TESTS=OFF >/dev/null || exit 2
fi
ninja -C build-fuzz -j"${JOBS:-$(nproc)}" "${TARGETS[@]}" >/dev/null || { echo "fuzz.sh: build failed" >&2; exit 2; }

cp_all() {  # cp_all DIR: copies the files named on stdin into DIR under unique names
  local d="$1" i=0 f
  while read -r f; do
    [ -f "$f" ] && cp "$f" "$d/$i-$(basename "$f")" && i=$((i + 1))
  done
}

seed() {  # seed TARGET DIR: copy the fixtures that fit the target's input format
  local t="$1" d="$2"
  mkdir -p "$d"
  case "$t" in
    fuzz_json|fuzz_config|fuzz_tokenizer)
      find tests/fixtures tests/data/models/stories260K-hf -maxdepth 3 -name '*.json' -size -256k 2>/dev/null | head -40 | cp_all "$d" ;;
    fuzz_yaml) find . -path ./build\* -prune -o \( -name '*.yaml' -o -name '*.yml' \) -size -64k -print 2>/dev/null | head -40 | cp_all "$d" ;;
    fuzz_safetensors) find tests/fixtures -name '*.safetensors' -size -256k 2>/dev/null | head -10 | cp_all "$d" ;;
    fuzz_gguf) find tests/fixtures -name '*.gguf' -size -512k 2>/dev/null | cp_all "$d" ;;
    fuzz_torch_checkpoint) python3 - "$d" <<'PY' 2>/dev/null  # byte 1 + a .pth file; byte 0 + its data.pkl
import pathlib, sys, zipfile
for i, p in enumerate(sorted(pathlib.Path("tests/fixtures/pth").rglob("*.pt*"))):
    raw = p.read_bytes()
    pathlib.Path(sys.argv[1], f"f{i}").write_bytes(b"\1" + raw)
    try:
        with zipfile.ZipFile(p) as z:
            for n in z.namelist():
                if n.endswith("/data.pkl"):
                    pathlib.Path(sys.argv[1], f"p{i}").write_bytes(b"\0" + z.read(n))
    except Exception:
        pass
PY
      ;;
    fuzz_jinja) find tests/fixtures/chat -name '*.jinja' 2>/dev/null | cp_all "$d"
      python3 - "$d" <<'PY' 2>/dev/null
import json, pathlib, sys
for i, p in enumerate(pathlib.Path("tests/fixtures/chat").rglob("tokenizer_config.json")):
    t = json.loads(p.read_text()).get("chat_template")
    if isinstance(t, str): pathlib.Path(sys.argv[1], f"tc{i}.jinja").write_text(t)
PY
      ;;
    fuzz_math_answer) python3 - "$d" <<'PY' 2>/dev/null
import json, sys, pathlib
for i, line in enumerate(open("tests/fixtures/graders/math_goldens.jsonl")):
    if i >= 200: break
    r = json.loads(line)
    pred, gold = str(r.get("pred", r.get("prediction", ""))), str(r.get("gold", r.get("answer", "")))
    pathlib.Path(sys.argv[1], f"g{i}").write_bytes(pred.encode() + b"\0" + gold.encode())
PY
      ;;
    fuzz_suite_config)  # byte 0: 0 = a suite, 1 = a run config, 3 = a run config with --config-profile gpu_run
      local i=0 f
      for f in tasks/suites/*.yaml ci/nightly-suite.yaml; do [ -f "$f" ] && { printf '\0'; cat "$f"; } > "$d/s$i" && i=$((i + 1)); done
      for f in ci/nightly.yaml; do [ -f "$f" ] && { printf '\1'; cat "$f"; } > "$d/r$i" && { printf '\3'; cat "$f"; } > "$d/p$i"; i=$((i + 1)); done ;;
    fuzz_records) find tests/fixtures/datasets -name '*.jsonl' -size -64k 2>/dev/null | head -20 | cp_all "$d" ;;
    fuzz_results_db) ;;  # the target writes a valid results database into an empty corpus itself
    fuzz_judge_reply)
      printf '%s' '{"choices":[{"message":{"role":"assistant","content":"yes"}}]}' > "$d/ok"
      printf '%s' '{"error":{"message":"bad key","type":"invalid_request_error"}}' > "$d/err"
      printf '%s' '{"choices":[]}' > "$d/empty"
      printf '%s' 'Wed, 21 Oct 2015 07:28:00 GMT' > "$d/date" ;;
    fuzz_hub_headers)  # byte 0: status (bits 0-2 mod 5: 200 302 401 404 500) and redirect flag (8); header lines
      printf '\0HTTP/1.1 200 OK\r\nX-Repo-Commit: %s\r\nETag: "%s"\r\nContent-Length: 15\r\n' \
        5555555555555555555555555555555555555555 0123456789abcdef0123456789abcdef01234567 > "$d/plain"
      printf '\11HTTP/1.1 302 Found\r\nX-Repo-Commit: %s\r\nX-Linked-Etag: "%s"\r\nX-Linked-Size: 300000\r\n' \
        5555555555555555555555555555555555555555 \
        0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef > "$d/lfs"
      printf '\3HTTP/1.1 404 Not Found\r\nX-Repo-Commit: %s\r\nX-Error-Code: EntryNotFound\r\n' \
        5555555555555555555555555555555555555555 > "$d/missing"
      printf '\0X-Repo-Commit: ../../x\r\nETag: W/"../../outside/pwned"\r\n' > "$d/hostile" ;;
  esac
  [ -d "fuzz/regressions/$t" ] && find "fuzz/regressions/$t" -type f | cp_all "$d"
  [ -n "$(ls -A "$d")" ] || [ "$t" = fuzz_results_db ] || printf '{}' > "$d/empty"
}

# fuzz_one TARGET: replays the target's reproducers, then fuzzes it for SECS; prints its lines and
# returns 1 on a finding. Targets run JOBS at a time (default: the number of cores), each one
# process with its own corpus and log; their lines are printed in the order of TARGETS.
fuzz_one() {
  local t="$1" corpus findings log rc runs
  corpus="build-fuzz/corpus/$t"
  findings="build-fuzz/findings/$t"
  seed "$t" "$corpus"
  mkdir -p "$findings"
  log="build-fuzz/$t.log"
  seed_arg=()
  [ -n "${KVB_FUZZ_SEED:-}" ] && seed_arg=(-seed="$KVB_FUZZ_SEED")
  if [ -d "fuzz/regressions/$t" ]; then  # known reproducers must pass before any fuzzing
    if ! ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "build-fuzz/$t" $(find "fuzz/regressions/$t" -type f) >"$log" 2>&1; then
      echo "$t: a reproducer in fuzz/regressions/$t fails again:"
      grep -m1 -A12 -E 'ERROR|runtime error' "$log" | sed 's/^/    /'
      return 1
    fi
  fi
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "build-fuzz/$t" "${seed_arg[@]}" "$corpus" -max_total_time="$SECS" -rss_limit_mb=4096 -max_len=262144 -timeout=30 \
    -artifact_prefix="$findings/" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  if [ $rc -eq 0 ]; then
    echo "$t: ${SECS} s, ${runs:-?} inputs, no finding"
    return 0
  else
    echo "$t: FINDING after ${runs:-?} inputs (exit $rc): $(ls "$findings" | head -3 | tr '\n' ' ') — see $log"
    # the sanitizer's report and the frames in our code, so a CI log alone shows what broke
    grep -m1 -E 'ERROR|runtime error|SUMMARY' "$log" | sed 's/^/    /'
    grep -E '^ +#[0-9]+ .* in .*(kvb|/engine/|/harness/|/graders/|/datasets/|/tasks/|/fuzz/)' "$log" \
      | head -8 | sed -E 's/ \(\/[^)]*\)//; s/^/    /'
    base64 -w0 "$findings"/* 2>/dev/null | head -c 4096 | sed 's/^/    reproducer (base64, first 4 KiB): /'
    echo
    return 1
  fi
}

fails=0
mkdir -p build-fuzz/summary
running=0
for t in "${TARGETS[@]}"; do
  if [ "$running" -ge "${JOBS:-$(nproc)}" ]; then wait -n; running=$((running - 1)); fi
  (fuzz_one "$t" >"build-fuzz/summary/$t.txt" 2>&1; echo $? >"build-fuzz/summary/$t.rc") &
  running=$((running + 1))
done
wait
for t in "${TARGETS[@]}"; do
  cat "build-fuzz/summary/$t.txt"
  [ "$(cat "build-fuzz/summary/$t.rc" 2>/dev/null)" = 0 ] || fails=$((fails + 1))
done
exit $((fails > 0))
