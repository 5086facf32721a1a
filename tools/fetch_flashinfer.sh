#!/usr/bin/env bash
# Fetches FlashInfer's C++ headers (and the CCCL they are written against) for the CUDA backend's
# tensor-core prefill attention (engine/backend/cuda/attention_fi.cu), from the PyPI wheel
# flashinfer-python, pinned by version and sha256. FlashInfer is header-only for what kvbench
# uses: nothing of it runs at build time and nothing is needed on the GPU machine at run time
# (the kernels are compiled into kvbench).
#
# Usage: tools/fetch_flashinfer.sh [DEST]
#   DEST defaults to ${XDG_CACHE_HOME:-~/.cache}/kvbench/flashinfer-<version>. Prints DEST on
#   stdout when DEST/include/flashinfer and DEST/cccl exist (already fetched, or fetched now);
#   exits 1 with a message on stderr otherwise (no network, wrong hash). CMake runs it at configure
#   time when the CUDA backend is built (KVB_FLASHINFER, CMakeLists.txt).
set -euo pipefail
VERSION=0.7.2.post1
SHA256=bfdc18b9e1e4d8d0730fe4343dc0e284cd0c160086de80f99888bc4867922d49
WHEEL="flashinfer_python-${VERSION}-py3-none-any.whl"
DEST="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/kvbench/flashinfer-${VERSION}}"
if [ -f "$DEST/include/flashinfer/attention/prefill.cuh" ] && [ -d "$DEST/cccl/libcudacxx/include" ]; then
  echo "$DEST"
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
py="$(command -v python3 || true)"
[ -n "$py" ] || { echo "fetch_flashinfer: python3 (pip) not found" >&2; exit 1; }
if ! "$py" -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" "flashinfer-python==${VERSION}" >&2; then
  echo "fetch_flashinfer: could not download flashinfer-python==${VERSION} from PyPI" >&2
  exit 1
fi
got="$(sha256sum "$tmp/$WHEEL" | cut -d' ' -f1)"
if [ "$got" != "$SHA256" ]; then
  echo "fetch_flashinfer: $WHEEL has sha256 $got, expected $SHA256" >&2
  exit 1
fi
mkdir -p "$tmp/x"
"$py" - "$tmp/$WHEEL" "$tmp/x" <<'EOF'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
keep = ("flashinfer/data/include/flashinfer/", "flashinfer/data/cccl/libcudacxx/include/",
        "flashinfer/data/cccl/cub/cub/", "flashinfer/data/cccl/thrust/thrust/", "flashinfer/data/LICENSE")
with zipfile.ZipFile(wheel) as z:
    for n in z.namelist():
        if n.startswith(keep) or n.endswith("LICENSE"):
            z.extract(n, out)
EOF
mkdir -p "$DEST.part"
rm -rf "$DEST.part"/*
mv "$tmp/x/flashinfer/data/include" "$DEST.part/include"
mv "$tmp/x/flashinfer/data/cccl" "$DEST.part/cccl"
find "$tmp/x" -name LICENSE -exec cp {} "$DEST.part/" \; 2>/dev/null || true
echo "flashinfer-python ${VERSION} sha256 ${SHA256}" > "$DEST.part/SOURCE"
rm -rf "$DEST"
mv "$DEST.part" "$DEST"
echo "$DEST"
