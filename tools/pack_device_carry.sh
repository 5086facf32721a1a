#!/usr/bin/env bash
# Builds kvbench with the CUDA backend here and packs what the lent GPU machine needs to run it
# into device-carry/ (git-ignored), for tools/gpu_check.sh there. The GPU machine has CUDA's
# runtime and cuBLAS (its CUDA toolkit / PyTorch wheels) but none of our Debian libraries and no
# network, and a call carries at most 64 MiB: so the stripped binaries (kvbench, kvb_cuda_check)
# and every `ldd`-resolved shared library except glibc's, libstdc++/libgcc_s (the machine's newer
# ones serve) and CUDA's own (libcudart, libcublas, libcublasLt: found on the machine) go into one
# xz-compressed tarball, device-carry/kvbench-cuda.tar.xz, with a MANIFEST of what is inside, plus
# the stories260K model (models/stories260K-hf) that gpu_check.sh's end-to-end `grid` step runs.
#
# Usage: tools/pack_device_carry.sh [BUILD_DIR]   (default build-cuda; configured if missing)
# Then:  run(command="bash tools/gpu_check.sh", carry=["device-carry"])
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build-cuda}"
OUT=device-carry
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || { echo "pack_device_carry: nvcc not found" >&2; exit 1; }
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVB_CUDA=ON \
    -DCMAKE_CUDA_COMPILER="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
fi
ninja -C "$BUILD" -j"${JOBS:-2}" kvbench kvb_cuda_check

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/kvb/bin" "$stage/kvb/lib"
for b in kvbench kvb_cuda_check; do
  cp "$BUILD/$b" "$stage/kvb/bin/$b"
  strip --strip-unneeded "$stage/kvb/bin/$b"
done
skip='/(ld-linux[^/]*|linux-vdso[^/]*|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcudart|libcublas|libcublasLt|libcuda)\.so'
ldd "$BUILD/kvbench" "$BUILD/kvb_cuda_check" | awk '/=> \//{print $3}' | sort -u | grep -Ev "$skip" |
  while read -r lib; do
    cp -L "$lib" "$stage/kvb/lib/$(basename "$lib")"
  done
# The real model of gpu_check.sh's `grid` step (1.1 MiB): stories260K in Hugging Face layout.
grid_model="${KVB_GRID_MODEL:-tests/data/models/stories260K-hf}"
if [ -f "$grid_model/config.json" ]; then
  mkdir -p "$stage/kvb/models"
  cp -rL "$grid_model" "$stage/kvb/models/stories260K-hf"
else
  echo "pack_device_carry: warning: $grid_model not found (set KVB_GRID_MODEL): gpu_check.sh's grid step will fail" >&2
fi
if ldd "$BUILD/kvbench" | grep -q "not found"; then
  echo "pack_device_carry: unresolved libraries:" >&2
  ldd "$BUILD/kvbench" | grep "not found" >&2
  exit 1
fi
{
  echo "git $(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- engine harness || echo '+dirty')"
  echo "built $(date -u +%FT%TZ) on $(. /etc/os-release; echo "$PRETTY_NAME"), $(nvcc --version 2>/dev/null | tail -1 || true)"
  echo "needs on the machine: libcudart.so.13 libcublas.so.13 libcublasLt.so.13 (CUDA 13), driver >= 580"
  (cd "$stage/kvb" && find . -type f -printf '%p %s\n' | sort)
} > "$stage/kvb/MANIFEST"
mkdir -p "$OUT"
rm -f "$OUT/kvbench-cuda.tar.xz"
tar -C "$stage" -cJf "$OUT/kvbench-cuda.tar.xz" kvb
cp "$stage/kvb/MANIFEST" "$OUT/MANIFEST"
size=$(stat -c %s "$OUT/kvbench-cuda.tar.xz")
echo "pack_device_carry: $OUT/kvbench-cuda.tar.xz $((size / 1048576)) MiB ($(wc -l < "$OUT/MANIFEST") manifest lines)"
if [ "$size" -gt $((60 * 1048576)) ]; then
  echo "pack_device_carry: over 60 MiB: the device tool carries at most 64 MiB per call" >&2
  exit 1
fi
