#!/usr/bin/env bash
# Creates the one virtualenv that regenerates kvbench's committed goldens: torch + transformers,
# tokenizers, jinja2, kvpress, gguf-py, math-verify, statsmodels/scipy, pinned in
# tools/goldens-requirements.txt. Tests never need it (CI does not install it); only the
# tools/gen_*.py scripts do, and each of them re-runs itself inside `.venv-goldens` when the
# current Python lacks its packages.
#   tools/goldens_venv.sh            # create/update ./.venv-goldens
#   tools/goldens_venv.sh --print    # print the venv's python (for scripts)
# Environment: KVB_GOLDENS_VENV=DIR uses another folder.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${KVB_GOLDENS_VENV:-.venv-goldens}"
if [ "${1:-}" = "--print" ]; then echo "$VENV/bin/python"; exit 0; fi
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q -r tools/goldens-requirements.txt
"$VENV/bin/python" -c "import torch, transformers, kvpress, gguf, math_verify, statsmodels, jinja2, tokenizers; print('goldens venv:', '$VENV', 'torch', torch.__version__, 'transformers', transformers.__version__)"
